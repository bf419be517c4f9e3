"""Import agent logs (OpenAI, Anthropic, MCP, tau2-bench, OpenTelemetry, inspect_ai, agent SDKs) as sessions.

`import_log(data, fmt, path)` finds the conversations of a file (`conversations`), turns each one's
messages into call and reply events (one module per format), pairs them into records (`pairing`) and
returns the sessions with every warning as data. `detect_format` names the format of a file.
"""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import format_record
from toolreplay.format.strictjson import MAX_NESTING, NESTING_MESSAGE, nesting_depth
from toolreplay.importers.conversations import Conversation, MessageStream, read_conversations
from toolreplay.importers.detect import (
    check_format,
    closest_format,
    describe,
    detect_format,
    is_known_to,
    told_by_layout,
)
from toolreplay.importers.pairing import ConversionWarning, ImportedCall, pair_events
from toolreplay.importers.transcripts import Transcript, listed_messages, transcribe

__all__ = [
    "FORMATS",
    "ImportedSession",
    "ImportResult",
    "ConversionWarning",
    "ImportedCall",
    "Transcript",
    "import_log",
    "import_file",
    "detect_format",
]

# Format name -> module with `read_events(conversation)`.
_MODULES = {
    "openai-chat": "toolreplay.importers.openai_chat",
    "openai-responses": "toolreplay.importers.openai_responses",
    "anthropic": "toolreplay.importers.anthropic",
    "mcp": "toolreplay.importers.mcp",
    "tau2": "toolreplay.importers.tau2",
    "otel": "toolreplay.importers.otel",
    "inspect-ai": "toolreplay.importers.inspect_ai",
    "openai-agents": "toolreplay.importers.openai_agents",
    "claude-code": "toolreplay.importers.claude_code",
    "gemini": "toolreplay.importers.gemini",
    "swe-agent": "toolreplay.importers.swe_agent",
    "openhands": "toolreplay.importers.openhands",
    "atif": "toolreplay.importers.atif",
    "codex": "toolreplay.importers.codex",
    "gemini-cli": "toolreplay.importers.gemini_cli",
    "mini-swe-agent": "toolreplay.importers.mini_swe_agent",
}
FORMATS = tuple(_MODULES)


@dataclass(frozen=True)
class ImportedSession:
    """The session of one conversation: its position in the file and its records."""

    position: int
    calls: tuple[ImportedCall, ...]

    def to_jsonl(self) -> str:
        """The session file's text: one `format_record` line per call, each ending in a newline."""
        return "".join(self.lines())

    def lines(self) -> Iterator[str]:
        """The session file's lines, one at a time (a big session is never one string)."""
        for index, call in enumerate(self.calls):
            yield format_record(index, call.tool, call.args, call.response, call.meta) + "\n"


@dataclass(frozen=True)
class ImportResult:
    """What an import produced: the format used, one session per conversation, and the warnings."""

    format: str
    sessions: tuple[ImportedSession, ...]
    warnings: tuple[ConversionWarning, ...]


def _check_unicode(conversation: Conversation, calls: list[ImportedCall]) -> None:
    # A lone surrogate escape, or values nested deeper than a session line may be, would make a
    # session that `replay` rejects: refuse it here instead.
    for index, call in enumerate(calls):
        if 1 + max(nesting_depth(call.args), nesting_depth(call.response)) > MAX_NESTING:
            raise InputError(conversation.path, conversation.line,
                             f"conversation {conversation.position}, call {index}: {NESTING_MESSAGE}")
        try:
            json.dumps([call.tool, call.args, call.response, call.meta], ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                conversation.path,
                conversation.line,
                f"conversation {conversation.position}, "
                f"call {index}: string holds a lone surrogate (invalid Unicode escape)",
            ) from None


def import_log(data: bytes, fmt: str, path: str) -> ImportResult:
    """Convert a log file's bytes; `fmt` is one of FORMATS or "auto". Raises InputError on bad input."""
    return import_file(io.BytesIO(data), fmt, path)


def import_file(handle: IO[bytes], fmt: str, path: str, transcripts: list[Transcript] | None = None) -> ImportResult:
    """Convert a log file read from `handle` (JSON Lines is streamed: memory follows the calls kept,
    not the file's size). Raises InputError on bad input. Given `transcripts`, appends each
    conversation's request, answer and turns to it (each conversation's messages are then kept whole)."""
    if fmt != "auto" and fmt not in _MODULES:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)}, auto)")
    conversations = read_conversations(handle, path)
    if fmt == "auto":
        fmt = detect_format(conversations, path)
    else:
        check_format(conversations, fmt)
    read_events: Any = importlib.import_module(_MODULES[fmt]).read_events
    warnings: list[ConversionWarning] = []
    sessions: list[ImportedSession] = []
    hint: tuple[Conversation, int, str] | None = None  # a tool call of another shape, while none is found
    unknown: tuple[Conversation, int | None, Any] | None = None  # the first message the format does not read
    for conversation in conversations:
        warnings.extend(
            ConversionWarning(conversation.path, conversation.line, f"conversation {conversation.position}: {note}")
            for note in conversation.notes
        )
        searching = hint is None and not warnings and not any(session.calls for session in sessions)
        survey = searching and unknown is None and not told_by_layout(conversation)
        if searching and isinstance(conversation.messages, MessageStream):
            stream = conversation.messages

            def look(message: Any, stream: MessageStream = stream, survey: bool = survey,
                     conversation: Conversation = conversation) -> str | None:
                nonlocal unknown
                if survey and unknown is None and not is_known_to(fmt, message):
                    unknown = (conversation, stream.current_line, message)
                return _tool_key(message)

            stream.watch(look)
        if transcripts is not None:
            conversation = listed_messages(conversation)
            events = list(read_events(conversation))
            transcripts.append(transcribe(conversation, events))
        else:
            events = read_events(conversation)
        calls = pair_events(conversation, events, warnings)
        _check_unicode(conversation, calls)
        sessions.append(ImportedSession(conversation.position, tuple(calls)))
        if searching:
            found = _find_tool_key(conversation)
            hint = (conversation, *found) if found is not None else None
        if survey and unknown is None and not isinstance(conversation.messages, MessageStream):
            for position, message in enumerate(conversation.messages):
                if not is_known_to(fmt, message):
                    unknown = (conversation, conversation.line_of(position), message)
                    break
    if not warnings and not any(session.calls for session in sessions):
        _refuse_empty(fmt, hint, unknown)
    return ImportResult(fmt, tuple(sessions), tuple(warnings))


def _refuse_empty(fmt: str, hint: tuple[Conversation, int, str] | None,
                  unknown: tuple[Conversation, int | None, Any] | None) -> None:
    """No call was read: refuse a file that holds tool calls of another shape, or messages the format does
    not read (no silent loss); a file of messages it reads, none a call, is a session without calls."""
    if hint is not None:
        conversation, position, key = hint
        raise InputError(
            conversation.path,
            hint_line(conversation, position),
            f"{conversation.where(position)}: this message holds {key}, but not where the {fmt} format reads "
            "a tool call: nothing was imported (name the right format, or auto)",
        )
    if unknown is not None:
        conversation, line, message = unknown
        closest = closest_format(message)
        also = f"; the closest known format is {closest}" if closest not in (None, fmt) else ""
        raise InputError(
            conversation.path,
            line,
            f"no tool call found: a message has {describe(message)}, which the {fmt} format does not read "
            f"(nothing was imported{also}; name the right format, or auto)",
        )


# Keys that only a tool call or reply of some format has.
_TOOL_KEYS = ("tool_calls", "function_call", "tool_call_id", "tool_use_id", "functionCall", "functionResponse",
              "gen_ai.tool.name", "span_data")
_TOOL_TYPES = ("tool_use", "tool_result", "function_call", "tool_call")


def _tool_key(message: Any) -> str | None:
    """A key (or type) in a message that only a tool call or reply of some format has, or None."""
    stack = [message]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key in _TOOL_KEYS:
                if item.get(key) not in (None, "", [], {}):
                    return key
            kind = item.get("type")
            if isinstance(kind, str) and kind in _TOOL_TYPES:
                return f'"type": "{kind}"'
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _find_tool_key(conversation: Conversation) -> tuple[int, str] | None:
    if isinstance(conversation.messages, MessageStream):
        return conversation.messages.watched
    for position, message in enumerate(conversation.messages):
        key = _tool_key(message)
        if key is not None:
            return position, key
    return None


def hint_line(conversation: Conversation, position: int) -> int | None:
    """The line of a message found while a stream was read (the stream keeps it), or of a listed one."""
    if isinstance(conversation.messages, MessageStream):
        return conversation.messages.watched_line
    return conversation.line_of(position)
