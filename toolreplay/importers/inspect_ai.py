"""inspect_ai eval logs (`.json`, or `.eval` zip archives of `samples/*.json`): one session per sample.

A sample's `messages` hold assistant messages with `tool_calls[]` (`{"id", "function": NAME,
"arguments": object}`) and tool messages `{"role": "tool", "tool_call_id", "function", "content":
string or content parts, "error": null or {"type", "message"}}`. A tool error puts `"error": true`
in front of the response; a reply with no content but an error is `{"error": true, "text": MESSAGE}`.
A call with a `parse_error` (arguments the model wrote that did not parse) is a warning.

Each assistant message is a model turn. A sample's `events` time the calls: the `tool` event with a
call's id has its start (`timestamp`) and its end (`completed`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import (
    MISSING,
    Event,
    Note,
    ToolCall,
    ToolReply,
    call_times,
    iso_time,
    reply_response,
)
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events"]


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise conversation.error(position, 'not an inspect_ai chat message (an object with a "role" string)')
    return message



def _times(conversation: Conversation) -> dict[str, dict[str, Any]]:
    """The start, duration and time problem of each tool call id that a `tool` event times."""
    found: dict[str, dict[str, Any]] = {}
    for event in conversation.timeline or ():
        if not isinstance(event, dict) or event.get("event") != "tool" or not isinstance(event.get("id"), str):
            continue
        found.setdefault(event["id"], call_times(event.get("timestamp"), event.get("completed"), iso_time))
    return found


def _calls(
    conversation: Conversation, position: int, message: dict[str, Any], turn: int, times: dict[str, dict[str, Any]]
) -> Iterator[Event]:
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise conversation.error(position, '"tool_calls" must be an array or null')
    for call in tool_calls or ():
        if not isinstance(call, dict) or not isinstance(call.get("function"), str) or not call["function"]:
            raise conversation.error(position, 'a tool call has no "function" name string')
        timed = times.get(call["id"], {}) if isinstance(call.get("id"), str) else {}
        yield ToolCall(_call_id(call.get("id")), call["function"], call.get("arguments", MISSING), position,
                       turn=turn, **timed)
        if call.get("parse_error"):
            yield Note(f"tool call {call['function']}: the model's arguments did not parse (parse_error); "
                       "args are what inspect_ai kept", position)


def _reply(conversation: Conversation, position: int, message: dict[str, Any]) -> ToolReply:
    error = message.get("error")
    if error is not None and not isinstance(error, dict):
        raise conversation.error(position, 'a tool message\'s "error" must be an object or null')
    content = message.get("content", MISSING)
    if error is not None and content in (MISSING, None, "", []):
        text = error.get("message")
        content = text if isinstance(text, str) else ""
    return ToolReply(_call_id(message.get("tool_call_id")), reply_response(content, error is not None), position)


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one sample, in message order."""
    times = _times(conversation)
    turn = -1
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        if message["role"] == "assistant":
            turn += 1
            yield from _calls(conversation, position, message, turn, times)
        elif message["role"] == "tool":
            yield _reply(conversation, position, message)
