"""OpenAI Responses API items: `function_call` and `function_call_output`, paired by `call_id`.

A call is `{"type": "function_call", "call_id", "name", "arguments": JSON string}`; a reply is
`{"type": "function_call_output", "call_id", "output": string or text parts}`. A custom tool's
`custom_tool_call` (free-text `input`) becomes args `{"input": TEXT}`, with `custom_tool_call_output` as
its reply. Tool calls that the API runs itself (`web_search_call`, `mcp_call`, ...) have no function
reply in the log; each is a warning, not a record. Messages and reasoning items are skipped.

One model response writes several items (reasoning, a message, function calls): a run of the model's
items, up to the next input item (a function call output, a user message), is one model turn.

A streamed response is read too (its events, as JSON Lines or SSE text, alone or between items): the
items of `response.output_item.added` / `.done` in `output_index` order, a function call's arguments
being those of its `.done` item, else of `response.function_call_arguments.done`, else its
`response.function_call_arguments.delta` pieces joined (a custom tool's `custom_tool_call_input`
likewise); an item that never got its `.done` is said to be cut. The arguments are then read as an
item's are. Each streamed response is a model turn; its `created_at` is each call's `ts`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, Note, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id
from toolreplay.importers.streams import Pieces, in_order, stream_times

__all__ = ["read_events", "item_events", "is_model_item"]

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



def _call(conversation: Conversation, position: int, item: dict[str, Any], turn: int,
          times: dict[str, Any] | None = None) -> ToolCall:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise conversation.error(position, f'a {item["type"]} item has no "name" string')
    if item["type"] == "custom_tool_call":
        text = item.get("input", "")
        if not isinstance(text, str):
            raise conversation.error(position, 'a custom_tool_call\'s "input" must be a string')
        return ToolCall(_call_id(item.get("call_id")), name, {"input": text}, position, turn=turn, **(times or {}))
    return ToolCall(_call_id(item.get("call_id")), name, item.get("arguments", MISSING), position, turn=turn,
                    **(times or {}))


def is_model_item(item: dict[str, Any]) -> bool | None:
    """Whether an item is the model's output (True) or an input (False); None when it says neither."""
    kind = item.get("type")
    if item.get("role") == "assistant" or kind == "reasoning" or (isinstance(kind, str) and kind.endswith("_call")):
        return True
    if item.get("role") in ("user", "system", "developer") or (isinstance(kind, str) and kind.endswith("_output")):
        return False
    return None


def item_events(conversation: Conversation, position: int, item: dict[str, Any], turn: int,
                times: dict[str, Any] | None = None) -> Iterator[Event]:
    """The call, reply or note of one Responses item (`times`: the call's ts fields)."""
    kind = item.get("type")
    if kind in ("function_call", "custom_tool_call"):
        yield _call(conversation, position, item, turn, times)
    elif kind in _REPLY_TYPES:
        yield ToolReply(_call_id(item.get("call_id")), reply_response(item.get("output", MISSING), False), position)
    elif isinstance(kind, str) and kind.endswith("_call"):
        yield Note(f"{kind} item not imported (a tool the API runs itself, not a function call)", position)


@dataclass
class _Slot:
    """One streamed output item: where it began, the item as added and as done, its argument pieces."""

    position: int
    item: dict[str, Any]
    done: dict[str, Any] | None = None
    arguments: Any = None  # of `function_call_arguments.done` (or `custom_tool_call_input.done`)
    pieces: Pieces = field(default_factory=Pieces)


# Argument events: (delta or done, the key of its text).
_ARGUMENT_EVENTS = {"response.function_call_arguments.delta": ("delta", "delta"),
                    "response.function_call_arguments.done": ("done", "arguments"),
                    "response.custom_tool_call_input.delta": ("delta", "delta"),
                    "response.custom_tool_call_input.done": ("done", "input")}


class _Stream:
    """The response being streamed, its output items put together when it ends."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.slots: dict[Any, _Slot] | None = None  # None: no response under way
        self.id: Any = None
        self.created: Any = None
        self.turn = -1

    def add(self, position: int, event: dict[str, Any]) -> list[Event]:
        conversation, kind = self.conversation, event["type"]
        response = event.get("response")
        response_id = response.get("id") if isinstance(response, dict) else None
        done: list[Event] = []
        if self.slots is None or kind == "response.created" or response_id not in (None, self.id):
            done = self.end()
            self.slots, self.id, self.turn = {}, response_id, self.turn + 1
            self.created = response.get("created_at") if isinstance(response, dict) else None
        if kind in ("response.completed", "response.incomplete", "response.failed"):
            return [*done, *self.end()]
        if kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                raise conversation.error(position, f'a {kind} event has no "item" object with a "type" string')
            slot = self._slot(event, item)
            if slot is None:
                slot = self.slots.setdefault(self._key(event, item), _Slot(position, item))
            if kind.endswith(".done"):
                slot.done = item
        elif kind in _ARGUMENT_EVENTS:
            slot = self._slot(event, None)
            if slot is None:
                raise conversation.error(position, f"a {kind} event for an item that no "
                                                   "response.output_item.added began")
            part, key = _ARGUMENT_EVENTS[kind]
            text = event.get(key)
            if not isinstance(text, str):
                raise conversation.error(position, f'a {kind} event\'s "{key}" must be a string')
            if part == "delta":
                slot.pieces.add(position, conversation.line_of(position), text)
            else:
                slot.arguments = text
        return done

    def _key(self, event: dict[str, Any], item: dict[str, Any]) -> Any:
        assert self.slots is not None
        index = event.get("output_index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        return f"item:{item.get('id')}" if isinstance(item.get("id"), str) else len(self.slots)

    def _slot(self, event: dict[str, Any], item: dict[str, Any] | None) -> _Slot | None:
        """The item an event is about: by its `item_id` (or its item's `id`), else its `output_index`."""
        assert self.slots is not None
        item_id = event.get("item_id", item.get("id") if item is not None else None)
        if isinstance(item_id, str):
            for slot in self.slots.values():
                if slot.item.get("id") == item_id:
                    return slot
        index = event.get("output_index")
        if isinstance(index, int) and not isinstance(index, bool) and index in self.slots:
            found = self.slots[index]
            return found if item is None or found.item.get("type") == item.get("type") else None
        if item is None and item_id is None and len(self.slots) == 1:
            return next(iter(self.slots.values()))
        return None

    def end(self) -> list[Event]:
        """The events of the response under way, its items in output order (none when none is)."""
        if self.slots is None:
            return []
        events: list[Event] = []
        times = stream_times(self.created)
        for slot in in_order(self.slots.items()):
            item = slot.done if slot.done is not None else dict(slot.item)
            kind = item.get("type")
            if slot.done is None and kind in ("function_call", "custom_tool_call"):
                key = "arguments" if kind == "function_call" else "input"
                text = slot.arguments if slot.arguments is not None else slot.pieces.text() if slot.pieces else None
                if text is not None:
                    item[key] = text
                events.append(Note(f"{kind} {item.get('name')}: its item did not end (no "
                                   "response.output_item.done); read as far as it came", slot.position))
            events.extend(item_events(self.conversation, slot.position, _item(self.conversation, slot.position,
                                                                                 item), self.turn, times))
        self.slots = None
        return events


def _is_stream_event(item: Any) -> bool:
    kind = item.get("type") if isinstance(item, dict) and "role" not in item else None
    return isinstance(kind, str) and (kind.startswith("response.") or kind == "error")


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in item order (a streamed response's, in output order)."""
    stream = _Stream(conversation)
    in_turn = False
    for position, raw in enumerate(conversation.messages):
        if _is_stream_event(raw):
            if raw["type"] == "error":
                yield from stream.end()
                yield Note(f"the stream reports an error{_said(raw)}", position)
            else:
                yield from stream.add(position, raw)
            in_turn = False
            continue
        yield from stream.end()
        item = _item(conversation, position, raw)
        model = is_model_item(item)
        if model is not None:
            stream.turn += model and not in_turn
            in_turn = model
        yield from item_events(conversation, position, item, stream.turn)
    yield from stream.end()


def _said(event: dict[str, Any]) -> str:
    parts = [event.get(key) for key in ("code", "message")]
    error = event.get("error")
    if isinstance(error, dict):
        parts = [error.get(key) for key in ("type", "code", "message")]
    said = ": ".join(part for part in parts if isinstance(part, str))
    return f": {said}" if said else ""
