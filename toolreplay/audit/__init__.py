"""Offline audits of recorded sessions: replay, scope, the hash chain, findings and their renderers."""
