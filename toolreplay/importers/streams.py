"""Streamed model responses: what the three streaming formats (`anthropic`, `openai-chat`,
`openai-responses`) share when they put a response back together from its events (docs/import.md,
"Streamed responses"); the SSE text itself is read by `sse`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from toolreplay.errors import InputError
from toolreplay.importers.conversations import Conversation, JSONTextError, parse_json
from toolreplay.importers.pairing import Time, TimeError, call_times, nano_time
from toolreplay.importers.sse import is_stream_event

__all__ = ["Pieces", "parse_object", "seconds_time", "stream_times", "in_order", "begins_completion",
           "streamed_texts"]

@dataclass
class Pieces:
    """The text of a call's arguments as it streamed: each piece with the message (event) it came in
    and that message's line (a JSON Lines stream forgets the line of a message once it is read)."""

    pieces: list[tuple[int, int | None, str]] = field(default_factory=list)

    def add(self, position: int, line: int | None, text: str) -> None:
        self.pieces.append((position, line, text))

    def __bool__(self) -> bool:
        return bool(self.pieces)

    def text(self) -> str:
        return "".join(text for _, _, text in self.pieces)

    def where(self, offset: int) -> tuple[int, int | None, int]:
        """The message and line of the piece holding character `offset` of the text, and the character's
        position in that piece (an offset at the end falls in the last piece)."""
        for position, line, text in self.pieces:
            if offset < len(text):
                return position, line, offset
            offset -= len(text)
        position, line, text = self.pieces[-1]
        return position, line, len(text) + offset


def parse_object(conversation: Conversation, pieces: Pieces, what: str) -> dict[str, Any]:
    """The JSON object the pieces join into; an input error at the piece where the JSON goes wrong."""
    text = pieces.text()
    try:
        value = parse_json(text)
    except JSONTextError as problem:
        try:
            json.loads(text)
        except json.JSONDecodeError as syntax:  # where the syntax breaks: in which piece, which character
            position, line, offset = pieces.where(syntax.pos)
            raise InputError(conversation.path, line, f"{conversation.where(position)}: {what} does not join "
                                                      f"into JSON: {syntax.msg} at character {offset + 1} of "
                                                      "this event's piece") from None
        position, line, _ = pieces.pieces[-1]
        raise InputError(conversation.path, line, f"{conversation.where(position)}: {what} does not join into "
                                                  f"JSON: {problem}") from None
    if not isinstance(value, dict):
        position, line, _ = pieces.pieces[-1]
        raise InputError(conversation.path, line, f"{conversation.where(position)}: {what} is not a JSON object")
    return value


def seconds_time(value: Any) -> Time:
    """Whole seconds since the Unix epoch, as OpenAI's `created` and `created_at` write them."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TimeError(f"time {json.dumps(value)[:60]} is not a count of seconds since 1970")
    return nano_time(value * 10**9)


def stream_times(created: Any) -> dict[str, Any]:
    """A streamed call's ToolCall time fields: the response's `created` time as `ts` (the time of the
    message that asked for the call, as other formats keep it), or a note on why it is left out."""
    if created is None:
        return {}
    return call_times(created, None, seconds_time)


def in_order(slots: Iterable[tuple[Any, Any]]) -> list[Any]:
    """Slots keyed by a stream's integer index, in index order (other keys after, in arrival order)."""
    items = list(slots)
    numbered = sorted((item for item in items if isinstance(item[0], int)), key=lambda item: item[0])
    return [value for _, value in numbered] + [value for key, value in items if not isinstance(key, int)]


def begins_completion(chunk: dict[str, Any], current: Any, finished: bool) -> bool:
    """Whether a chat chunk begins another completion than the one of id `current` (which said its
    `finish_reason` when `finished`): a new `id` after a `finish_reason`, or a chunk that says the role
    again after a new `id` or a `finish_reason` (some servers write a new `id` on every chunk, or the
    same `id` on every completion); a chunk without choices (the usage) never begins one."""
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return False
    first = choices[0] if isinstance(choices[0], dict) else {}
    role = isinstance(first.get("delta"), dict) and "role" in first["delta"]
    other = chunk.get("id") != current
    return (other and finished) or (role and (other or finished))


def _chat_text(chunk: dict[str, Any]) -> tuple[Any, bool]:
    """Choice 0's `delta.content` of a chat chunk, and whether the chunk says its `finish_reason`."""
    choices = chunk.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    delta = first.get("delta")
    return (delta.get("content") if isinstance(delta, dict) else None), first.get("finish_reason") is not None


def streamed_texts(messages: list[Any]) -> dict[int, str]:
    """What each streamed response of a conversation says in text (Anthropic `text_delta`s, chat choice
    0's `delta.content`, Responses `response.output_text.delta`s; not thinking), at the position of the
    event that began it; a response without text is left out."""
    found: dict[int, list[str]] = {}
    start: int | None = None
    chat_id: Any = None
    finished = False
    for position, message in enumerate(messages):
        fmt = is_stream_event(message)
        if fmt is None:
            if not (isinstance(message, dict) and message.get("type") in ("ping", "error")):
                start = None  # a message between two streams
            continue
        kind, text = message.get("type"), None
        if fmt == "anthropic":
            start = position if kind == "message_start" or start is None else start
            delta = message.get("delta")
            if kind == "content_block_delta" and isinstance(delta, dict) and delta.get("type") == "text_delta":
                text = delta.get("text")
        elif fmt == "openai-chat":
            if start is None or begins_completion(message, chat_id, finished):
                start, chat_id, finished = position, message.get("id"), False
            text, ends = _chat_text(message)
            finished = finished or ends
        else:
            start = position if kind == "response.created" or start is None else start
            text = message.get("delta") if kind == "response.output_text.delta" else None
        if isinstance(text, str):
            found.setdefault(start, []).append(text)
    joined = {position: "".join(parts) for position, parts in found.items()}
    return {position: text for position, text in joined.items() if text.strip()}
