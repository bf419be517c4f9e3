"""`auto`: which format a log is, from the first message that only one format would write."""

from __future__ import annotations

from typing import Any

from toolreplay.errors import InputError
from toolreplay.importers.conversations import Conversation

__all__ = ["detect_format"]

_RESPONSES_TYPES = frozenset({"function_call", "function_call_output", "custom_tool_call",
                              "custom_tool_call_output"})


def _block_marker(content: Any) -> str | None:
    if isinstance(content, list):
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and (kind.endswith("tool_use") or kind.endswith("tool_result")):
                return "anthropic"
    return None


def _message_marker(message: Any) -> str | None:
    """The format this message can only belong to, or None when it says nothing decisive."""
    if not isinstance(message, dict):
        return None
    if "jsonrpc" in message:
        return "mcp"
    if message.get("type") in _RESPONSES_TYPES:
        return "openai-responses"
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        return "openai-chat" if "function" in calls[0] else "tau2"
    if message.get("role") == "tool":
        if "tool_call_id" in message:
            return "openai-chat"
        if "requestor" in message:
            return "tau2"
    if isinstance(message.get("function_call"), dict):
        return "openai-chat"
    return _block_marker(message.get("content"))


def detect_format(conversations: list[Conversation]) -> str:
    """The format of a log: tau2 for `simulations`, else the first decisive message's format."""
    if conversations and conversations[0].container == "simulations":
        return "tau2"
    for conversation in conversations:
        for message in conversation.messages:
            found = _message_marker(message)
            if found is not None:
                return found
    path = conversations[0].path if conversations else "-"
    raise InputError(path, None, "cannot detect the format: no message holds a tool call or reply "
                                 "(name the format instead of auto)")
