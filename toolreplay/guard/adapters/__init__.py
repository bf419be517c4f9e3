"""Kept for one release: the framework adapters moved to `toolreplay.adapters` (a front end beside the guard,
not inside it); `toolreplay.guard.adapters.langgraph` and the others still import, from there."""
