"""OpenAI Chat Completions messages: assistant `tool_calls[]` and `role: "tool"` replies.

A call is `{"id", "type": "function", "function": {"name", "arguments": JSON string}}`; a reply is
`{"role": "tool", "tool_call_id", "content": string or text parts}`. The deprecated single
`function_call` on an assistant message and its `role: "function"` reply are read too (they have no id);
a blank placeholder `{"name": "", "arguments": ""}` is not a call.

A streamed completion is read too (its `chat.completion.chunk`s, as JSON Lines or SSE text, alone or
between messages): the chunks of one `id` are one assistant message, a model turn
(`streams.begins_completion` says where the next begins); choice 0's `delta.tool_calls[]` pieces
are put together by `index` (the first `id` and `function.name` of an index, its `function.arguments`
pieces joined), the calls in index order whatever order their pieces came in. The arguments are then
read as a message's are (not valid JSON: kept, with a warning); a call of a completion that never
said its `finish_reason`, or that stopped at the token limit (`"length"`), is said to be cut; an
error a stream ends with (`{"error": {...}}`) is a warning. The first chunk's `created` is each
call's `ts`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, Note, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id
from toolreplay.importers.streams import Pieces, begins_completion, in_order, stream_times

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


@dataclass
class _Slot:
    """One streamed tool call: where it began, its first id and name, its arguments' pieces."""

    position: int
    id: Any = None
    name: Any = None
    pieces: Pieces = field(default_factory=Pieces)


class _Stream:
    """The completion being streamed (the chunks of one `id`), put together when it ends."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.slots: dict[Any, _Slot] | None = None  # None: no completion under way
        self.id: Any = None
        self.created: Any = None
        self.finish: Any = None
        self.notes: list[Note] = []
        self.turn = -1

    def add(self, position: int, chunk: dict[str, Any]) -> list[Event]:
        conversation = self.conversation
        done: list[Event] = []
        if self.slots is None or begins_completion(chunk, self.id, self.finish is not None):
            done = self.end()
            self.slots, self.id, self.created, self.finish = {}, chunk.get("id"), chunk.get("created"), None
            self.turn += 1
        choices = chunk.get("choices", [])
        if not isinstance(choices, list):
            raise conversation.error(position, '"choices" must be an array')
        for choice in choices:
            if not isinstance(choice, dict):
                raise conversation.error(position, "a choice must be an object")
            if choice.get("index", 0) != 0:
                if not self.notes:
                    self.notes.append(Note(f"a chunk has choice {choice.get('index')!r}; only choice 0 is read",
                                           position))
                continue
            if choice.get("finish_reason") is not None:
                self.finish = choice["finish_reason"]
            delta = choice.get("delta")
            if delta is None:
                continue
            if not isinstance(delta, dict):
                raise conversation.error(position, 'a choice\'s "delta" must be an object')
            self._calls(position, delta)
        return done

    def _calls(self, position: int, delta: dict[str, Any]) -> None:
        assert self.slots is not None
        calls = delta.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise self.conversation.error(position, '"tool_calls" must be an array')
        pieces = [(call, call.get("index") if isinstance(call, dict) else None) for call in calls or ()]
        function_call = delta.get("function_call")
        if isinstance(function_call, dict) and not is_placeholder(function_call):
            pieces.append(({"function": function_call}, "function_call"))
        for call, index in pieces:
            if not isinstance(call, dict):
                raise self.conversation.error(position, "a tool call must be an object")
            key = index if isinstance(index, int) and not isinstance(index, bool) else self._key(call)
            slot = self.slots.setdefault(key, _Slot(position))
            function = call.get("function", {})
            if not isinstance(function, dict):
                raise self.conversation.error(position, 'a tool call\'s "function" must be an object')
            slot.id = slot.id or _call_id(call.get("id"))
            slot.name = slot.name or (function.get("name") if isinstance(function.get("name"), str) else None)
            piece = function.get("arguments")
            if piece is not None and not isinstance(piece, str):
                raise self.conversation.error(position, 'a streamed "function.arguments" must be a string')
            if piece:
                slot.pieces.add(position, self.conversation.line_of(position), piece)

    def _key(self, call: dict[str, Any]) -> Any:
        """A call without an `index` (some providers): the one with its id, else the last one."""
        assert self.slots is not None
        found = _call_id(call.get("id"))
        if found is not None and not any(slot.id == found for slot in self.slots.values()):
            return f"id:{found}"
        for key, slot in reversed(self.slots.items()):
            if found is None or slot.id == found:
                return key
        return len(self.slots)

    def end(self) -> list[Event]:
        """The calls of the completion under way, in index order (none when none is)."""
        if self.slots is None:
            return []
        events: list[Event] = list(self.notes)
        times = stream_times(self.created)
        for slot in in_order(self.slots.items()):
            if not isinstance(slot.name, str) or not slot.name:
                raise self.conversation.error(slot.position, 'a streamed tool call has no "function.name" string')
            if self.finish is None or self.finish == "length":
                why = "no finish_reason" if self.finish is None else 'finish_reason "length": the token limit'
                events.append(Note(f"call {slot.name}: its streamed arguments did not end ({why}); read as far "
                                   "as they came", slot.position))
            arguments = slot.pieces.text() if slot.pieces else MISSING
            events.append(ToolCall(slot.id, slot.name, arguments, slot.position, turn=self.turn, **times))
        self.slots, self.notes = None, []
        return events


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in message order; each assistant message (and each
    streamed completion) is a turn."""
    stream = _Stream(conversation)
    for position, raw in enumerate(conversation.messages):
        if isinstance(raw, dict) and raw.get("object") == "chat.completion.chunk" and "role" not in raw:
            yield from stream.add(position, raw)
            continue
        if isinstance(raw, dict) and isinstance(raw.get("error"), dict) and not {"role", "choices"} & raw.keys():
            yield from stream.end()  # the error a stream ends with: `data: {"error": {"message", "type"}}`
            said = [raw["error"].get(key) for key in ("type", "message")]
            yield Note(": ".join(["the stream reports an error", *(part for part in said if isinstance(part, str))]),
                       position)
            continue
        yield from stream.end()
        message = _message(conversation, position, raw)
        role = message["role"]
        if role == "assistant":
            stream.turn += 1
            yield from _calls(conversation, position, message, stream.turn)
        elif role == "tool":
            yield ToolReply(
                _call_id(message.get("tool_call_id")),
                reply_response(message.get("content", MISSING), False),
                position,
            )
        elif role == "function":
            yield ToolReply(None, reply_response(message.get("content", MISSING), False), position)
    yield from stream.end()
