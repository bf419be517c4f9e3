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
                    "tool definition not verified against its pin: ", "tool not pinned: ", "already ran: ")


def is_refusal(response: Mapping[str, Any]) -> bool:
    """True for a response the gate gave instead of running the tool (or for an interrupted run)."""
    error = response.get("error")
    return (len(response) == 2 and response.get("ok") is False and isinstance(error, str)
            and error.startswith(REFUSAL_PREFIXES))
