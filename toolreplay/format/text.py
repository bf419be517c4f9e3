"""Text that came from a log, made safe to print: control characters shown, never obeyed.

A tool name or an argument is chosen by a model or a log, not by us. Printed raw, a newline could
forge a report line and an ANSI escape could erase the real ones. Every human-readable output passes
such text through `escape_text`; JSON output has its own escaping and does not.
"""

from __future__ import annotations

import re

__all__ = ["escape_text"]

# C0 controls, DEL, C1 controls, the Unicode line and paragraph separators, and the bidirectional
# formatting characters (embeddings, overrides, isolates, marks) that can reorder what a reader sees.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_text(text: str) -> str:
    """`text` with each unsafe character as `\\xNN` (below U+0100) or `\\uNNNN`; the rest unchanged."""
    if text.isprintable() or _UNSAFE.search(text) is None:  # every unsafe character is unprintable
        return text
    return _UNSAFE.sub(_escape, text)
