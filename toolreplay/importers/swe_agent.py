"""SWE-agent trajectories (`.traj`): the `history` list, OpenAI-chat-like.

With function calling, an assistant message has `tool_calls[]` (`{"id", "function": {"name",
"arguments"}}`) and the observation comes back as a `role: "tool"` message whose `tool_call_ids` is a
list (each id gets that reply). Without function calling, an assistant message's `action` (a command
line) is the call: its first word is the tool and `{"action": TEXT}` the args, and the next message
with `"message_type": "observation"` is its reply (other observations, such as the task statement,
are not replies). Each assistant message is a model turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events"]


def _message(conversation: Conversation, position: int, message: Any) -> dict[str, Any]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise conversation.error(position, 'not a SWE-agent history message (an object with a "role" string)')
    return message



def _calls(conversation: Conversation, position: int, message: dict[str, Any], turn: int) -> Iterator[ToolCall]:
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise conversation.error(position, '"tool_calls" must be an array or null')
    if tool_calls:
        for call in tool_calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                raise conversation.error(position, 'a tool call has no "function.name" string')
            yield ToolCall(_call_id(call.get("id")), function["name"], function.get("arguments", MISSING), position,
                           turn=turn)
        return
    action = message.get("action")
    if isinstance(action, str) and action.strip():
        yield ToolCall(None, action.split()[0], {"action": action}, position, turn=turn)


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one trajectory, in message order."""
    action_waiting = False  # an action without function calling waits for the next observation
    turn = -1
    for position, raw in enumerate(conversation.messages):
        message = _message(conversation, position, raw)
        if message["role"] == "assistant":
            turn += 1
            calls = list(_calls(conversation, position, message, turn))
            action_waiting = bool(calls) and not message.get("tool_calls")
            yield from calls
            continue
        if message["role"] != "tool" and not (action_waiting and message.get("message_type") == "observation"):
            continue
        action_waiting = False
        ids = message.get("tool_call_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            raise conversation.error(position, '"tool_call_ids" must be an array of strings')
        response = reply_response(message.get("content", MISSING), False)
        for call_id in ids or [None]:
            yield ToolReply(_call_id(call_id), response, position)
