"""How the guard words a refusal in the record: a response that is one of these never ran its tool.

Shared by the guard, which writes them, and by `scope`, which reads a record back as the guard saw it.
Live, the guard knows a refusal by its type (`toolreplay.guard.outcomes.Refusal`, whose `reason` is a key
of `REFUSAL_WORDING`); a record read back holds only the text, so it is known by how the text begins.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["REFUSAL_PREFIXES", "REFUSAL_WORDING", "RefusalReason", "is_refusal"]

# Why the gate refused a call; each reason's text begins with its wording below, but "host": a front end's
# own refusal (`ToolHost.refusal`), worded by it (read back as a refusal when it begins with one of these).
RefusalReason = Literal["not_allowed", "not_asked", "budget", "recording", "unknown_outcome", "interrupted",
                        "reentrant", "rule", "cancelled", "unverified", "unpinned", "already_ran", "declined",
                        "timed_out", "receipt", "unavailable", "server", "host"]

REFUSAL_WORDING: Mapping[RefusalReason, str] = {
    "not_allowed": "tool not allowed: ", "not_asked": "confirmation required", "budget": "budget exceeded: ",
    "recording": "recording failed: ", "unknown_outcome": "outcome unknown: ", "interrupted": "interrupted: ",
    "reentrant": "re-entrant call: ", "rule": "denied by rule ", "cancelled": "cancelled: ",
    "unverified": "tool definition not verified against its pin: ", "unpinned": "tool not pinned: ",
    "already_ran": "already ran: ", "declined": "confirmation declined", "timed_out": "confirmation timed out",
    "receipt": "approval receipt refused: ", "unavailable": "server unavailable: ",
    "server": "refused by the server: "}

# How the gate's own refusals begin: a record with one of these never ran its tool.
REFUSAL_PREFIXES = tuple(REFUSAL_WORDING.values())


def is_refusal(response: Mapping[str, Any]) -> bool:
    """True for a recorded response the gate gave instead of running the tool (or for an interrupted run),
    and for a refusal as mcp-proxy recorded it before it recorded the gate's own form (an MCP tool result
    whose one text block is "toolreplay: " and the refusal). For reading records back: a live answer says
    so by its `refusal`."""
    error = response.get("error")
    if len(response) == 2 and response.get("ok") is False and isinstance(error, str):
        return error.startswith(REFUSAL_PREFIXES)
    return _is_old_proxy_refusal(response)


def _is_old_proxy_refusal(response: Mapping[str, Any]) -> bool:
    if response.get("isError") is not True or set(response) - {"content", "isError", "resultType"}:
        return False
    content = response.get("content")
    if not isinstance(content, list) or len(content) != 1 or not isinstance(content[0], dict):
        return False
    text = content[0].get("text")
    return (content[0].get("type") == "text" and isinstance(text, str) and text.startswith("toolreplay: ")
            and text[len("toolreplay: "):].startswith(REFUSAL_PREFIXES))
