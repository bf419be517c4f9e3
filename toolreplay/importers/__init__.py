"""Import agent logs (OpenAI, Anthropic, MCP, tau2-bench) as ToolReplay sessions.

`import_log(data, fmt, path)` finds the conversations of a file (`conversations`), turns each one's
messages into call and reply events (one module per format), pairs them into records (`pairing`) and
returns the sessions with every warning as data. `detect_format` names the format of a file.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import format_record
from toolreplay.format.strictjson import MAX_NESTING, NESTING_MESSAGE, nesting_depth
from toolreplay.importers.conversations import Conversation, find_conversations
from toolreplay.importers.detect import check_format, detect_format
from toolreplay.importers.pairing import ConversionWarning, ImportedCall, pair_events

__all__ = [
    "FORMATS",
    "ImportedSession",
    "ImportResult",
    "ConversionWarning",
    "ImportedCall",
    "import_log",
    "detect_format",
]

# Format name -> module with `read_events(conversation)`.
_MODULES = {
    "openai-chat": "toolreplay.importers.openai_chat",
    "openai-responses": "toolreplay.importers.openai_responses",
    "anthropic": "toolreplay.importers.anthropic",
    "mcp": "toolreplay.importers.mcp",
    "tau2": "toolreplay.importers.tau2",
}
FORMATS = tuple(_MODULES)


@dataclass(frozen=True)
class ImportedSession:
    """The session of one conversation: its position in the file and its records."""

    position: int
    calls: tuple[ImportedCall, ...]

    def to_jsonl(self) -> str:
        """The session file's text: one `format_record` line per call, each ending in a newline."""
        return "".join(
            format_record(index, call.tool, call.args, call.response) + "\n"
            for index, call in enumerate(self.calls)
        )


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
            json.dumps([call.tool, call.args, call.response], ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                conversation.path,
                conversation.line,
                f"conversation {conversation.position}, "
                f"call {index}: string holds a lone surrogate (invalid Unicode escape)",
            ) from None


def import_log(data: bytes, fmt: str, path: str) -> ImportResult:
    """Convert a log file's bytes; `fmt` is one of FORMATS or "auto". Raises InputError on bad input."""
    conversations = find_conversations(data, path)
    if fmt == "auto":
        fmt = detect_format(conversations)
    elif fmt in _MODULES:
        check_format(conversations, fmt)
    else:
        raise UsageError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)}, auto)")
    read_events: Any = importlib.import_module(_MODULES[fmt]).read_events
    warnings: list[ConversionWarning] = []
    sessions = []
    for conversation in conversations:
        calls = pair_events(conversation, read_events(conversation), warnings)
        _check_unicode(conversation, calls)
        sessions.append(ImportedSession(conversation.position, tuple(calls)))
    return ImportResult(fmt, tuple(sessions), tuple(warnings))
