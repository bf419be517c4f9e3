"""Server-Sent Events text, as a streamed model response is saved (`text/event-stream`).

`event: NAME` and `data: JSON` lines, events separated by a blank line, `data: [DONE]` at the end of
an OpenAI stream. The file is read as the JSON Lines of its events' data, each at the line of its first
`data:` line; `event:` names are not needed (every event's data says its `type`, or is an OpenAI chunk).
"""

from __future__ import annotations

import re
from typing import Any

from toolreplay.errors import InputError
from toolreplay.format.strictjson import JSONLineError, StrictLoader

__all__ = ["is_sse", "sse_events", "is_stream_event", "ANTHROPIC_EVENTS"]

# The first line of an SSE file: a field (`event:`, `data:`, `id:`, `retry:`) or a comment (`:`).
_SSE_FIELD = re.compile(r"(?:event|data|id|retry)(?::|[ \t]*\r?$)|:")


def is_sse(first_line: str) -> bool:
    """Whether a file whose first non-blank line is this one is Server-Sent Events text."""
    return _SSE_FIELD.match(first_line) is not None


def sse_events(text: str, path: str) -> list[tuple[int, Any]]:
    """The parsed `data` of each event of an SSE text, with the line of its first `data:` line.
    An event's `data` lines are joined with newlines (as the SSE standard says); `[DONE]` and events
    without data are left out; data that is not JSON is an input error at its line."""
    events: list[tuple[int, Any]] = []
    data: list[str] = []
    start = 0
    for lineno, line in enumerate([*text.split("\n"), ""], 1):
        line = line[:-1] if line.endswith("\r") else line
        if line == "":
            if data:
                joined = "\n".join(data)
                if joined.strip() != "[DONE]":
                    try:
                        events.append((start, StrictLoader(keep_floats=True).loads(joined)))
                    except JSONLineError as exc:
                        raise InputError(path, start + (exc.lineno or 1) - 1, f"SSE data: {exc}") from None
            data = []
            continue
        name, colon, value = line.partition(":")
        if colon and name == "data":
            if not data:
                start = lineno
            data.append(value[1:] if value.startswith(" ") else value)
        elif not colon and name == "data":
            if not data:
                start = lineno
            data.append("")
        # Other fields (`event`, `id`, `retry`) and comments (`: ...`) name nothing the import reads.
    return events


# Anthropic Messages stream events (`ping` and `error` come in the other streams' formats too).
ANTHROPIC_EVENTS = frozenset({"message_start", "content_block_start", "content_block_delta",
                              "content_block_stop", "message_delta", "message_stop"})


def is_stream_event(message: Any) -> str | None:
    """The format of a streamed event (an Anthropic stream event, an OpenAI chat chunk, a Responses
    stream event), or None for anything else."""
    if not isinstance(message, dict) or "role" in message:
        return None
    if message.get("object") == "chat.completion.chunk":
        return "openai-chat"
    kind = message.get("type")
    if isinstance(kind, str):
        if kind in ANTHROPIC_EVENTS:
            return "anthropic"
        if kind.startswith("response.") and kind.count(".") >= 1:
            return "openai-responses"
    return None
