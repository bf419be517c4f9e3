"""OpenAI Chat Completions messages: assistant `tool_calls[]` and `role: "tool"` replies.

A call is `{"id", "type": "function", "function": {"name", "arguments": JSON string}}`; a reply is
`{"role": "tool", "tool_call_id", "content": string or text parts}`. The deprecated single
`function_call` on an assistant message and its `role: "function"` reply are read too (they have no id);
a blank placeholder `{"name": "", "arguments": ""}` is not a call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events", "is_placeholder"]


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise conversation.error(position, 'not an OpenAI chat message (an object with a "role" string)')
    return message



def is_placeholder(function_call: Any) -> bool:
    """Whether a `function_call` is a blank placeholder, not a call."""
    # Some OpenAI-compatible providers put `{"name": "", "arguments": ""}` on every assistant message.
    return (
        isinstance(function_call, dict)
        and function_call.get("name", "") == ""
        and function_call.get("arguments", "") in ("", None)
    )


def _function_call(conversation: Conversation, position: int, function: Any, call_id: Any, turn: int) -> ToolCall:
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise conversation.error(position, 'a tool call has no "function.name" string')
    return ToolCall(_call_id(call_id), function["name"], function.get("arguments", MISSING), position, turn=turn)


def _calls(conversation: Conversation, position: int, message: dict[str, Any], turn: int) -> Iterator[ToolCall]:
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise conversation.error(position, '"tool_calls" must be an array')
    for call in tool_calls or ():
        if not isinstance(call, dict):
            raise conversation.error(position, "a tool call must be an object")
        yield _function_call(conversation, position, call.get("function"), call.get("id"), turn)
    function_call = message.get("function_call")
    if function_call is not None and not is_placeholder(function_call):
        yield _function_call(conversation, position, function_call, None, turn)


def read_events(conversation: Conversation) -> Iterator[ToolCall | ToolReply]:
    """The calls and replies of one conversation, in message order; each assistant message is a turn."""
    turn = -1
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        role = message["role"]
        if role == "assistant":
            turn += 1
            yield from _calls(conversation, position, message, turn)
        elif role == "tool":
            yield ToolReply(
                _call_id(message.get("tool_call_id")),
                reply_response(message.get("content", MISSING), False),
                position,
            )
        elif role == "function":
            yield ToolReply(None, reply_response(message.get("content", MISSING), False), position)
