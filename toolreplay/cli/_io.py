"""The streams a command writes to, so tests can run commands in-process."""

from __future__ import annotations

import io as _io
import sys
from dataclasses import dataclass
from typing import BinaryIO, TextIO

__all__ = ["IO"]


@dataclass
class IO:
    """stdin, stdout and stderr of one command run; stdout also has a byte view for exact output."""

    stdin: BinaryIO
    stdout: TextIO
    stderr: TextIO

    @classmethod
    def from_sys(cls) -> IO:
        """The process's real streams."""
        return cls(sys.stdin.buffer, sys.stdout, sys.stderr)

    @classmethod
    def memory(cls, stdin: bytes = b"") -> IO:
        """In-memory streams for tests: read them back with `out()` and `err()`."""
        return cls(_io.BytesIO(stdin), _io.TextIOWrapper(_io.BytesIO(), encoding="utf-8", newline="\n"),
                   _io.StringIO())

    def write_bytes(self, data: bytes) -> None:
        """Write raw UTF-8 bytes to stdout, bypassing any text encoding of the terminal."""
        self.stdout.flush()
        buffer = getattr(self.stdout, "buffer", None)
        if buffer is None:
            self.stdout.write(data.decode("utf-8"))
        else:
            buffer.write(data)
            buffer.flush()

    def out(self) -> str:
        """Everything written to an in-memory stdout so far."""
        self.stdout.flush()
        buffer = self.stdout.buffer
        assert isinstance(buffer, _io.BytesIO), "out() reads an IO.memory() stream"
        return buffer.getvalue().decode("utf-8")

    def err(self) -> str:
        """Everything written to an in-memory stderr so far."""
        assert isinstance(self.stderr, _io.StringIO), "err() reads an IO.memory() stream"
        return self.stderr.getvalue()
