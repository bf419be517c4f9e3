"""The terminal approver: a `confirm` callback that shows a person the exact call and reads the answer."""

from __future__ import annotations

import json
import re
import sys
import threading
from typing import Any, TextIO

from toolreplay.guard.approvals import Remember
from toolreplay.guard.host import CannotConfirmError

__all__ = ["ConsoleApprover"]


class ConsoleApprover:
    """A confirmation callback that asks a person on the terminal; only `y` or `yes` approves."""

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None, *, remember: bool = False) -> None:
        """Read answers from `input` (default stdin), write prompts to `output` (default stderr).

        `remember=True` also offers `s` (yes, and for identical calls this session) and `a` (yes, and for
        good): the gate's `approvals` keep them (docs/guard.md, Remembered approvals)."""
        self._input = input
        self._output = output
        self._remember = remember
        self._lock = threading.Lock()

    def __call__(self, tool: str, args: dict[str, Any]) -> bool | Remember:
        """Show the exact call and ask; any answer but yes declines, end of input is CannotConfirmError."""
        source = self._input if self._input is not None else sys.stdin
        sink = self._output if self._output is not None else sys.stderr
        # ASCII-only JSON: what the person approves cannot hide behind control or bidi characters.
        shown = json.dumps(args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        with self._lock:  # one question at a time, even when agents call from several threads
            choices = "y/N/s(ession)/a(lways)" if self._remember else "y/N"
            sink.write(f"approve {_shown_name(tool)} {shown}? [{choices}] ")
            sink.flush()
            answer = source.readline()
            if not answer.endswith("\n"):
                sink.write("\n")
        if not answer:
            raise CannotConfirmError("no answer: the input ended")
        word = answer.strip().lower()
        if self._remember and word in ("s", "session", "a", "always"):
            return Remember("session" if word[0] == "s" else "always")
        return word in ("y", "yes")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")


def _shown_name(tool: str) -> str:
    """A tool name as the terminal shows it: as is when plain, else as ASCII-only JSON (control characters,
    escapes, spaces and look-alike letters cannot reach the terminal raw)."""
    return tool if _PLAIN_NAME.fullmatch(tool) else json.dumps(tool, ensure_ascii=True)
