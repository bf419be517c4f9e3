"""Whether a file that is not a session looks like a log `toolreplay import` reads, and which format.

`replay`, `scope` and `verify` ask this only after the file failed as a session, to end their error
line with a hint. It reads at most SNIFF_BYTES of the file (cut at a line break) and never raises: a
file it cannot tell is None.
"""

from __future__ import annotations

import io
import os
import stat

from toolreplay.errors import ToolReplayError
from toolreplay.importers.conversations import messages_of, read_conversations
from toolreplay.importers.detect import find_evidence

__all__ = ["sniff_log_format", "SNIFF_BYTES", "SNIFF_MESSAGES"]

SNIFF_BYTES = 16 << 20  # a whole JSON document up to this size; of a larger file, the lines in its first part
SNIFF_MESSAGES = 1000


def sniff_log_format(path: str) -> str | None:
    """The import format a regular file's first telling message belongs to; "auto" for chat messages
    (a `role`) none of which tells; None for anything else (not a log it knows, not a regular file,
    unreadable)."""
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(SNIFF_BYTES + 1)
    except OSError:
        return None
    if len(data) > SNIFF_BYTES:  # only whole lines of a large file: a JSON Lines log tells early
        data = data[:data.rfind(b"\n") + 1]
    try:
        conversations = read_conversations(io.BytesIO(data), path)
        evidence = find_evidence(conversations, SNIFF_MESSAGES)
        if evidence is not None:
            return evidence.format
        for conversation in conversations.peek(1):
            for message in messages_of(conversation, 1):
                if isinstance(message, dict) and isinstance(message.get("role"), str):
                    return "auto"
    except (ToolReplayError, RecursionError, ValueError):
        pass
    return None
