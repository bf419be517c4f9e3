"""Anthropic Messages content blocks: `tool_use` in assistant turns, `tool_result` in user turns.

A call is `{"type": "tool_use", "id", "name", "input": object}` (also `server_tool_use` and
`mcp_tool_use`); a reply is `{"type": "tool_result", "tool_use_id", "content": string or blocks,
"is_error": bool}` (also any other `*_tool_result` block with a `tool_use_id`; a server tool's
`*_tool_result_error` content marks an error as `is_error` does). A message whose
`content` is a plain string holds neither.

A streamed response is read too (its events, as JSON Lines or SSE text, alone or between messages):
`message_start`, then per content block `content_block_start`, `content_block_delta`s and
`content_block_stop`, then `message_delta` and `message_stop` (`ping` and `error` besides). A
`tool_use` block's `input` is the JSON its `input_json_delta.partial_json` pieces join into: pieces of a
block that stopped that do not join into a JSON object are an input error at the piece where the JSON
breaks (what the API never sends, and the SDKs refuse); a block that never stopped (a cut stream),
or whose message stopped at `max_tokens`, is kept as far as it came, with a warning. Each streamed
message is a model turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import MISSING, Event, Note, ToolCall, ToolReply, reply_response
from toolreplay.importers.pairing import call_id as _call_id
from toolreplay.importers.sse import ANTHROPIC_EVENTS
from toolreplay.importers.streams import Pieces, in_order, parse_object

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


@dataclass
class _Block:
    """One content block of a streamed message: where it started, the block, its input's pieces."""

    position: int
    line: int | None
    block: dict[str, Any]
    pieces: Pieces = field(default_factory=Pieces)
    stopped: bool = False


class _Stream:
    """The message being streamed: its blocks by index, put together into events when it ends."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.blocks: dict[Any, _Block] | None = None  # None: no message under way
        self.stop_reason: Any = None
        self.turn = -1

    def add(self, position: int, event: dict[str, Any]) -> list[Event]:
        conversation, kind = self.conversation, event["type"]
        if kind == "message_start":
            done = self.end()
            self.blocks, self.turn, self.stop_reason = {}, self.turn + 1, None
            return done
        if kind == "message_delta":
            delta = event.get("delta")
            self.stop_reason = delta.get("stop_reason") if isinstance(delta, dict) else None
            return []
        if kind == "message_stop":
            return self.end()
        if self.blocks is None:  # a block without message_start: the message began before the log
            self.blocks, self.turn = {}, self.turn + 1
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise conversation.error(position, f'a {kind} event has no "index" integer')
        if kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise conversation.error(position, 'a content_block_start has no "content_block" object with a '
                                                   '"type" string')
            if index in self.blocks:
                raise conversation.error(position, f"content block {index} starts twice")
            self.blocks[index] = _Block(position, conversation.line_of(position), block)
            return []
        streamed = self.blocks.get(index)
        if streamed is None:
            raise conversation.error(position, f"a {kind} for content block {index}, which no "
                                               "content_block_start began")
        if kind == "content_block_stop":
            streamed.stopped = True
            return []
        delta = event.get("delta")
        if not isinstance(delta, dict):
            raise conversation.error(position, 'a content_block_delta has no "delta" object')
        if delta.get("type") == "input_json_delta":
            piece = delta.get("partial_json", "")
            if not isinstance(piece, str):
                raise conversation.error(position, 'an input_json_delta\'s "partial_json" must be a string')
            streamed.pieces.add(position, conversation.line_of(position), piece)
        return []

    def end(self) -> list[Event]:
        """The events of the message under way, its blocks in index order (none when none is)."""
        if self.blocks is None:
            return []
        events: list[Event] = []
        for streamed in in_order(self.blocks.items()):
            block = streamed.block
            if block["type"] in _CALL_TYPES and streamed.pieces.text():
                name = block.get("name")
                label = f"{block['type']} {name}" if isinstance(name, str) else block["type"]
                if streamed.stopped and self.stop_reason != "max_tokens":
                    block = {**block, "input": parse_object(self.conversation, streamed.pieces,
                                                            f"the streamed input of {label}")}
                else:
                    why = "no content_block_stop" if not streamed.stopped else 'the message stopped at "max_tokens"'
                    events.append(Note(f"{label}: its streamed input did not end ({why}); read as far as it came",
                                       streamed.position))
                    block = {**block, "input": streamed.pieces.text()}
            event = content_event(self.conversation, streamed.position, block, self.turn)
            if event is not None:
                events.append(event)
        self.blocks, self.stop_reason = None, None
        return events


def _is_stream_event(message: Any) -> bool:
    return isinstance(message, dict) and "role" not in message and message.get("type") in (
        *ANTHROPIC_EVENTS, "ping", "error")


def _error_note(event: dict[str, Any]) -> str:
    error = event.get("error")
    what = [error.get(key) for key in ("type", "message")] if isinstance(error, dict) else []
    said = ": ".join(part for part in what if isinstance(part, str))
    return f"the stream reports an error{': ' + said if said else ''}"


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of one conversation, in block order; each assistant message (and each
    streamed message) is a turn."""
    stream = _Stream(conversation)
    for position, raw in enumerate(conversation.messages):
        if _is_stream_event(raw):
            if raw["type"] == "error":
                yield from stream.end()
                yield Note(_error_note(raw), position)
            elif raw["type"] != "ping":
                yield from stream.add(position, raw)
            continue
        yield from stream.end()
        message = _message(conversation, position, raw)
        stream.turn += message["role"] == "assistant"
        if isinstance(message["content"], list):
            for block in message["content"]:
                turn = stream.turn if message["role"] == "assistant" else None
                event = content_event(conversation, position, block, turn)
                if event is not None:
                    yield event
    yield from stream.end()
