"""Anthropic Messages content blocks: `tool_use` in assistant turns, `tool_result` in user turns.

A call is `{"type": "tool_use", "id", "name", "input": object}` (also `server_tool_use` and
`mcp_tool_use`); a reply is `{"type": "tool_result", "tool_use_id", "content": string or blocks,
"is_error": bool}` (also any other `*_tool_result` block with a `tool_use_id`; a server tool's
`*_tool_result_error` content marks an error as `is_error` does). A message whose
`content` is a plain string holds neither.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events", "content_event"]

_CALL_TYPES = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise conversation.error(position, 'not an Anthropic message (an object with a "role" string)')
    content = message.get("content")
    if not isinstance(content, (str, list)):
        raise conversation.error(position, '"content" must be a string or an array of content blocks')
    return message



def _is_error_content(content: Any) -> bool:
    # A server tool's failure: `{"type": "web_search_tool_result_error", "error_code": ...}` as content.
    kind = content.get("type") if isinstance(content, dict) else None
    return isinstance(kind, str) and kind.endswith("_tool_result_error")


def content_event(conversation: Conversation, position: int, block: Any, turn: int | None = None) -> Event | None:
    """The call or reply of one content block (a call asked for in model turn `turn`), or None for any
    other block."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise conversation.error(position, 'a content block must be an object with a "type" string')
    kind = block["type"]
    if kind in _CALL_TYPES:
        name = block.get("name")
        if not isinstance(name, str) or not name:
            raise conversation.error(position, f'a {kind} block has no "name" string')
        return ToolCall(_call_id(block.get("id")), name, block.get("input", MISSING), position, turn=turn)
    if (kind.endswith("tool_result") or kind.endswith("tool_result_error")) and "tool_use_id" in block:
        error = block.get("is_error", False)
        if not isinstance(error, bool):
            raise conversation.error(position, f'a {kind} block\'s "is_error" must be true or false')
        error = error or kind.endswith("_error") or _is_error_content(block.get("content"))
        return ToolReply(
            _call_id(block["tool_use_id"]), reply_response(block.get("content", MISSING), error), position
        )
    return None


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in block order; each assistant message is a turn."""
    turn = -1
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        turn += message["role"] == "assistant"
        if isinstance(message["content"], list):
            for block in message["content"]:
                event = content_event(conversation, position, block, turn if message["role"] == "assistant" else None)
                if event is not None:
                    yield event
