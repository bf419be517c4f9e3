"""OpenAI Responses API items: `function_call` and `function_call_output`, paired by `call_id`.

A call is `{"type": "function_call", "call_id", "name", "arguments": JSON string}`; a reply is
`{"type": "function_call_output", "call_id", "output": string or text parts}`. A custom tool's
`custom_tool_call` (free-text `input`) becomes args `{"input": TEXT}`, with `custom_tool_call_output` as
its reply. Tool calls that the API runs itself (`web_search_call`, `mcp_call`, ...) have no function
reply in the log; each is a warning, not a record. Messages and reasoning items are skipped.

One model response writes several items (reasoning, a message, function calls): a run of the model's
items, up to the next input item (a function call output, a user message), is one model turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, Note, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id

__all__ = ["read_events"]

_REPLY_TYPES = ("function_call_output", "custom_tool_call_output")


def _item(conversation: Conversation, position: int, item: Any) -> dict[str, Any]:
    if not isinstance(item, dict) or not (
        isinstance(item.get("type"), str) or isinstance(item.get("role"), str)
    ):
        raise conversation.error(
            position, 'not a Responses API item (an object with a "type" or "role" string)'
        )
    if "type" in item and not isinstance(item["type"], str):
        raise conversation.error(position, 'an item\'s "type" must be a string')
    return item



def _call(conversation: Conversation, position: int, item: dict[str, Any], turn: int) -> ToolCall:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise conversation.error(position, f'a {item["type"]} item has no "name" string')
    if item["type"] == "custom_tool_call":
        text = item.get("input", "")
        if not isinstance(text, str):
            raise conversation.error(position, 'a custom_tool_call\'s "input" must be a string')
        return ToolCall(_call_id(item.get("call_id")), name, {"input": text}, position, turn=turn)
    return ToolCall(_call_id(item.get("call_id")), name, item.get("arguments", MISSING), position, turn=turn)


def _is_model_item(item: dict[str, Any]) -> bool | None:
    """Whether an item is the model's output (True) or an input (False); None when it says neither."""
    kind = item.get("type")
    if item.get("role") == "assistant" or kind == "reasoning" or (isinstance(kind, str) and kind.endswith("_call")):
        return True
    if item.get("role") in ("user", "system", "developer") or (isinstance(kind, str) and kind.endswith("_output")):
        return False
    return None


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in item order."""
    turn, in_turn = -1, False
    for position, raw in enumerate(conversation.messages):
        item = _item(conversation, position, raw)
        kind = item.get("type")
        model = _is_model_item(item)
        if model is not None:
            turn += model and not in_turn
            in_turn = model
        if kind in ("function_call", "custom_tool_call"):
            yield _call(conversation, position, item, turn)
        elif kind in _REPLY_TYPES:
            yield ToolReply(
                _call_id(item.get("call_id")), reply_response(item.get("output", MISSING), False), position
            )
        elif isinstance(kind, str) and kind.endswith("_call"):
            yield Note(
                f"{kind} item not imported (a tool the API runs itself, not a function call)", position
            )
