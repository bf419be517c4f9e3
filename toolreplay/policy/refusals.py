"""How the guard words a refusal in the record: a response that is one of these never ran its tool.

Shared by the guard, which writes them, and by `scope`, which reads a record back as the guard saw it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["REFUSAL_PREFIXES", "is_refusal"]

# How the gate's own refusals begin: a record with one of these never ran its tool.
REFUSAL_PREFIXES = ("tool not allowed: ", "confirmation required", "budget exceeded: ", "recording failed: ",
                    "outcome unknown: ", "interrupted: ", "re-entrant call: ", "denied by rule ", "cancelled: ",
                    "tool definition not verified against its pin: ", "tool not pinned: ", "already ran: ",
                    "confirmation declined", "confirmation timed out")


def is_refusal(response: Mapping[str, Any]) -> bool:
    """True for a response the gate gave instead of running the tool (or for an interrupted run), and
    for a refusal as mcp-proxy recorded it before it recorded the gate's own form (an MCP tool result
    whose one text block is "toolreplay: " and the refusal)."""
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
