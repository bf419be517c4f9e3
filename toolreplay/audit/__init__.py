"""Offline audits of recorded sessions: replay, scope, the hash chain, findings and their renderers.

The public API (`toolreplay.audit.api`, one function per command):

    replay_session(path, mutators=..., state_aware=False) -> ReplayReport
    scope_session(path, policy) -> ScopeReport
    seal_session(path, origin=None, signers=()) -> SealedChain  (iterate it for the link lines)
    verify_session(path) -> VerifyResult
    audit_many(paths, options=SessionOptions(), engine=None) -> FleetRun
    mutator_set(names, files) -> frozenset[str]

and the report types `Finding` (with `counts`, the one definition of what counts), `ReplayReport`,
`ScopeReport`, `ChainReport`, `SessionOptions`, `SessionResult`, `FleetSummary`. The names load when
first used, so importing one submodule does not load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolreplay.audit.api import (
        FleetRun,
        SealedChain,
        VerifyResult,
        audit_many,
        mutator_set,
        replay_session,
        scope_session,
        seal_session,
        verify_session,
    )
    from toolreplay.audit.chain import ChainReport
    from toolreplay.audit.findings import Finding, counts
    from toolreplay.audit.fleet import FleetSummary, SessionOptions, SessionResult
    from toolreplay.audit.replay import ReplayReport
    from toolreplay.audit.scope import ScopeReport

__all__ = ["replay_session", "scope_session", "seal_session", "verify_session", "audit_many", "mutator_set",
           "SealedChain", "VerifyResult", "FleetRun", "Finding", "counts", "ReplayReport", "ScopeReport", "ChainReport",
           "SessionOptions", "SessionResult", "FleetSummary"]

_HOMES = {"replay_session": "api", "scope_session": "api", "seal_session": "api", "verify_session": "api",
          "audit_many": "api", "mutator_set": "api", "SealedChain": "api", "VerifyResult": "api", "FleetRun": "api",
          "Finding": "findings", "counts": "findings", "ReplayReport": "replay", "ScopeReport": "scope",
          "ChainReport": "chain", "SessionOptions": "fleet", "SessionResult": "fleet", "FleetSummary": "fleet"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'toolreplay.audit' has no attribute {name!r}")
    return getattr(importlib.import_module(f"toolreplay.audit.{home}"), name)
