"""Claude Code / Claude Agent SDK stream-json: one message per line, `{type, message, parent_tool_use_id,
session_id}`.

`assistant` messages carry Anthropic `tool_use` blocks in `message.content`, `user` messages their
`tool_result` blocks (read as the `anthropic` format reads them); `system` and `result` messages are
skipped. Claude Code writes one line per content block, so the lines of one assistant message (one
`message.id`) are one model turn; a line's `timestamp` (transcript files have one) is the time of its
calls. Messages with a `parent_tool_use_id` belong to the sub-agent that tool call started: each
sub-agent is its own session (after the main one, in order of first appearance), never mixed into
the parent's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from toolreplay.importers.anthropic import content_event
from toolreplay.importers.conversations import Conversation
from toolreplay.importers.pairing import Event, ToolCall, call_times, iso_time

__all__ = ["read_events"]


def read_events(conversation: Conversation) -> Iterator[Event]:
    """The calls and replies of the main agent or of one sub-agent, in message order."""
    turns: dict[Any, int] = {}  # message.id -> its turn
    for position, raw in enumerate(conversation.messages):
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise conversation.error(position, 'not a stream-json message (an object with a "type" string)')
        if raw["type"] not in ("assistant", "user"):
            continue
        message: Any = raw.get("message")
        if not isinstance(message, dict):
            raise conversation.error(position, f'a {raw["type"]} message has no "message" object')
        turn = None
        if raw["type"] == "assistant":
            key = message.get("id")
            turn = turns.setdefault(key if isinstance(key, str) and key else position, len(turns))
        content = message.get("content")
        if isinstance(content, str) or content is None:
            continue
        if not isinstance(content, list):
            raise conversation.error(position, '"message.content" must be a string or an array of content blocks')
        for block in content:
            event = content_event(conversation, position, block, turn)
            if isinstance(event, ToolCall):
                event = dataclasses.replace(event, **call_times(raw.get("timestamp"), None, iso_time))
            if event is not None:
                yield event
