"""Recording a live session: every request the gate sees, appended as one line and flushed at once.

A plain record is a session; a sealed one is a chain (both in docs/format.md) written as it goes, so it
is tamper-evident from its first byte and `verify` works on a live log. The bytes of a sealed record
are exactly what `seal` would write for the same records.

Opening an existing file continues it: its index and (sealed) its chain resume where it ends. A crash
can leave a final line without its newline; if that line is not even valid JSON (or UTF-8), it is the
write the crash tore, and it is cut off (`truncated_bytes` says how many bytes). Any other bad line, a
complete final record with a wrong index included, is an input error naming the line, and the file is
left untouched.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

from toolreplay.audit.chain import GENESIS, link_digest, link_line
from toolreplay.errors import InputError, UsageError
from toolreplay.format.canonical import CanonicalError, canonical_bytes
from toolreplay.format.records import Record, format_record, read_session

__all__ = ["SessionRecorder"]

_TORN = ("invalid JSON", "invalid UTF-8")

try:  # advisory lock against two recorders appending to one file; not available on Windows
    import fcntl
except ImportError:  # pragma: no cover - platform dependent
    fcntl = None  # type: ignore[assignment]


class SessionRecorder:
    """Appends records to a session file, one flushed line each; thread-safe; also a context manager."""

    def __init__(self, path: str, handle: Any, *, sealed: bool, next_index: int, prev: str,
                 needs_newline: bool, truncated_bytes: int) -> None:
        """Use `SessionRecorder.open`; this takes an already positioned unbuffered binary handle."""
        self.path = path
        self.sealed = sealed
        self.truncated_bytes = truncated_bytes
        self._handle = handle
        self._next_index = next_index
        self._prev = prev
        self._needs_newline = needs_newline
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str, *, sealed: bool = False) -> SessionRecorder:
        """Create the file, or continue an existing one (its index and chain resume)."""
        try:
            handle = open(path, "a+b", buffering=0)  # noqa: SIM115 - owned by the recorder, closed by close()
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            _lock(handle, path)
            state = _resume(handle, path, sealed)
        except BaseException:
            handle.close()
            raise
        return cls(path, handle, sealed=sealed, **state)

    @property
    def next_index(self) -> int:
        """The index the next record will get."""
        return self._next_index

    @property
    def last_digest(self) -> str:
        """The digest of the last link written (64 zeros before the first); meaningful when sealed."""
        return self._prev

    def append(self, tool: str, args: dict[str, Any], response: dict[str, Any]) -> int:
        """Write one record and flush it; return its index. A value with no JSON form raises ValueError."""
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool must be a non-empty string")
        if not isinstance(args, dict) or not isinstance(response, dict):
            raise ValueError("args and response must be JSON objects")
        try:  # encode before taking the lock: a value with no JSON form is refused, nothing written
            tool_bytes, args_bytes, response_bytes = (canonical_bytes(tool), canonical_bytes(args),
                                                      canonical_bytes(response))
        except (CanonicalError, RecursionError) as exc:
            raise ValueError(f"record has no JSON form: {exc}") from None
        with self._lock:
            if self._handle is None:
                raise ValueError(f"recorder for {self.path} is closed")
            index = self._next_index
            if self.sealed:
                line, digest = link_line(index, tool_bytes, args_bytes, response_bytes, self._prev)
            else:
                line = (format_record(index, tool, args, response) + "\n").encode("ascii")
            if self._needs_newline:
                line = b"\n" + line
            _write_all(self._handle, line)
            self._needs_newline = False
            self._next_index = index + 1
            if self.sealed:
                self._prev = digest
            return index

    def close(self) -> None:
        """Close the file; further appends raise ValueError."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def _write_all(handle: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = handle.write(view)
        view = view[written:]


def _lock(handle: Any, path: str) -> None:
    if fcntl is None:
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        raise UsageError(f"{path} is already being recorded by another recorder") from None


def _scan_lines(handle: Any) -> tuple[int, int, int]:
    """Return (file size, offset just past the last newline, number of newlines)."""
    handle.seek(0)
    size = last = newlines = 0
    while chunk := handle.read(1 << 20):
        count = chunk.count(b"\n")
        if count:
            newlines += count
            last = size + chunk.rindex(b"\n") + 1
        size += len(chunk)
    return size, last, newlines


def _resume(handle: Any, path: str, sealed: bool) -> dict[str, Any]:
    """Read an existing file; return the recorder's starting state, cutting off a torn final line."""
    with open(path, "rb") as reader:
        size, last, newlines = _scan_lines(reader)
        tail_line = newlines + 1 if size > last else None
        reader.seek(0)
        next_index, prev, kind = 0, GENESIS, None
        torn = False
        try:
            for record in read_session(reader, path):
                kind = record.prev is not None
                if kind:
                    _check_link(record, prev, path)
                    assert record.digest is not None
                    prev = record.digest
                next_index = record.index + 1
        except InputError as exc:
            # A torn write is cut JSON or a cut UTF-8 sequence; a complete but wrong record is an error.
            if tail_line is None or exc.line != tail_line or not exc.message.startswith(_TORN):
                raise
            torn = True
    if kind is not None and kind != sealed:
        held, wanted = ("sealed links", "a plain") if kind else ("plain records", "a sealed")
        raise InputError(path, None, f"file holds {held}; cannot continue it as {wanted} record")
    if torn:
        handle.truncate(last)
    return {"next_index": next_index, "prev": prev, "truncated_bytes": size - last if torn else 0,
            "needs_newline": tail_line is not None and not torn}


def _check_link(record: Record, prev: str, path: str) -> None:
    if record.prev != prev or record.digest != link_digest(prev, record.canonical_record):
        raise InputError(path, record.line, f"chain broken at link index {record.index}; "
                                            "a broken chain cannot be continued")
