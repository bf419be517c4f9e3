"""tau2-bench results: `simulations[].messages[]` with `tool_calls[]` and `role: "tool"` replies.

A call is `{"id", "name", "arguments": object, "requestor": "assistant" | "user"}`; a reply is
`{"role": "tool", "id", "content", "error": bool}`. Calls made by the simulated user (telecom's phone
tools) are named `user:TOOL`, so they never pass for the agent's own calls. A `tool` message holding
`tool_messages` (tau2's multi-tool message) is read as its replies, in order.

Each assistant message is a model turn (the simulated user's calls have none). A message's
`timestamp` is the time of its calls when it has a UTC offset. tau2 itself writes the local time of
the machine without an offset, which names no instant: such times are not kept, and say nothing
(every tau2 log has them); a timestamp that is not a date and time at all is a warning.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, ToolCall, ToolReply, call_times, iso_time, reply_response
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events"]


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise conversation.error(position, 'not a tau2 message (an object with a "role" string)')
    return message



def _call(conversation: Conversation, position: int, call: Any, turn: int | None, times: dict[str, Any]) -> ToolCall:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
        raise conversation.error(position, 'a tool call has no "name" string')
    requestor = call.get("requestor", "assistant")
    if requestor not in ("assistant", "user"):
        raise conversation.error(
            position, f'a tool call\'s "requestor" must be "assistant" or "user", not {requestor!r}'
        )
    name = f"user:{call['name']}" if requestor == "user" else call["name"]
    return ToolCall(_call_id(call.get("id")), name, call.get("arguments", MISSING), position,
                    turn=turn if requestor == "assistant" else None, **times)


def _reply(conversation: Conversation, position: int, message: Any) -> ToolReply:
    if not isinstance(message, dict):
        raise conversation.error(position, "a tool message must be an object")
    error = message.get("error", False)
    if not isinstance(error, bool):
        raise conversation.error(position, 'a tool message\'s "error" must be true or false')
    return ToolReply(
        _call_id(message.get("id")), reply_response(message.get("content", MISSING), error), position
    )


def read_events(conversation: Conversation) -> Iterator[ToolCall | ToolReply]:
    """The calls and replies of one simulation, in message order."""
    turn = -1
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        turn += message["role"] == "assistant"
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise conversation.error(position, '"tool_calls" must be an array or null')
        times = call_times(message.get("timestamp"), None, iso_time, quiet_local=True) if tool_calls else {}
        for call in tool_calls or ():
            yield _call(conversation, position, call, turn if message["role"] == "assistant" else None, times)
        if message["role"] != "tool":
            continue
        parts = message.get("tool_messages")
        if isinstance(parts, list):
            for part in parts:
                yield _reply(conversation, position, part)
        else:
            yield _reply(conversation, position, message)
