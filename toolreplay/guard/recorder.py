"""Recording a live session: every request the gate sees, appended as one line and flushed at once.

A plain record is a session; a sealed one is a chain (both in docs/format.md) written as it goes, so it
is tamper-evident from its first byte and `verify` works on a live log. The bytes of a sealed record
are exactly what `seal` would write for the same records.

Opening an existing file continues it: its index and (sealed) its chain resume where it ends. A crash
can leave a final line without its newline; if that line is not even valid JSON (or UTF-8), it is the
write the crash tore, and it is cut off (`truncated_bytes` says how many bytes). Any other bad line, a
complete final record with a wrong index included, is an input error naming the line, and the file is
left untouched.

Writes are announced first: `announce` puts an intent into `RECORD.intents` (see
`toolreplay.guard.intents`) and syncs it before the write runs; `append(..., intent=N)` settles it.
Recorders in one folder may share one intent file instead (`open_shared_intents`: the HTTP listener's
sessions of one upstream), so that a write cut short in one record is refused in the next.

A recorder never leaves a half line: an append that fails (a full disk) cuts the file back to where
it was, and if even that fails the recorder stops for good. It also notices when its file is deleted
or replaced under it (the open file is no longer the one at the path) and stops for good. Once
stopped, `check`, `announce` and `append` raise `RecordingError` (an OSError).
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from toolreplay.audit.chain import GENESIS, link_digest, link_line
from toolreplay.errors import InputError, ToolReplayError, UsageError
from toolreplay.format.canonical import CanonicalError, canonical_bytes
from toolreplay.format.files import lock_descriptor, open_private
from toolreplay.format.records import Record, check_meta, format_record, format_ts, iter_records, read_session
from toolreplay.format.strictjson import JSONLineError
from toolreplay.guard.intents import Intent, IntentFile, read_intents, unresolved
from toolreplay.policy.redaction import Redactor
from toolreplay.policy.refusals import is_refusal

if TYPE_CHECKING:  # a checkpoint writer is handed in: a recorder without one (a hook process) need not import it
    from toolreplay.audit.checkpoint import CheckpointWriter

__all__ = ["RecordingError", "ResumePoint", "SessionRecorder", "open_shared_intents"]

_TORN = ("invalid JSON", "invalid UTF-8")

# A link is hashed with hashlib's SHA-256 (OpenSSL: a third of the builtin's time a link) once the process has
# loaded hashlib, as a long-lived front end has; else with the chain's builtin one, which a short-lived process
# (a hook, one call) loads in a tenth of hashlib's import time. The digests are the same.
_LINK_HASH = "hashlib"

class RecordingError(ToolReplayError, OSError):
    """The record cannot be written (full disk, file deleted or replaced, recorder closed or stopped)."""


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a closed recorder left its file: the file's identity (device, inode, size, modification time)
    and the chain's state there. A recorder opened at it (`SessionRecorder.open(..., at=POINT)`) skips
    reading the file while the file is exactly that one; any difference and it reads the whole file again."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    next_index: int
    prev: str
    sealed: bool

    def matches(self, status: os.stat_result, sealed: bool) -> bool:
        """Whether a file with this status is the one the point was taken on, unchanged since."""
        return (self.sealed == sealed and status.st_dev == self.device and status.st_ino == self.inode
                and status.st_size == self.size and status.st_mtime_ns == self.mtime_ns)


class SessionRecorder:
    """Appends records to a session file, one flushed line each; thread-safe; also a context manager."""

    def __init__(self, path: str, handle: Any, *, sealed: bool, next_index: int, prev: str,
                 needs_newline: bool, truncated_bytes: int, intents: list[Intent] | None = None,
                 checkpoints: CheckpointWriter | None = None, format_1_0: bool = False,
                 redactor: Redactor | None = None, meta_keys: Collection[str] | None = None,
                 history: list[Record] | None = None, shared_intents: IntentFile | None = None) -> None:
        """Use `SessionRecorder.open`; this takes an already positioned unbuffered binary handle."""
        self.path = path
        self.sealed = sealed
        self.format_1_0 = format_1_0
        self.redactor = redactor
        self.meta_keys = None if meta_keys is None else frozenset(meta_keys)
        self.truncated_bytes = truncated_bytes
        self.previous_intents: tuple[Intent, ...] = tuple(intents or ())
        self.resumed_records = next_index
        self._handle = handle
        self._next_index = next_index
        self._prev = prev
        self._needs_newline = needs_newline
        self._lock = threading.Lock()
        self._size = os.fstat(handle.fileno()).st_size
        self._identity = _identity(os.fstat(handle.fileno()))
        self._stopped: str | None = None
        self._record_name: str | None = None  # set when the intent file is shared: this record's file name
        self._owns_intents = shared_intents is None  # else whoever opened the file closes it
        if shared_intents is not None:  # the earlier records' writes of unknown outcome, and this one's intents
            self.previous_intents = shared_intents.earlier
            self._intents = shared_intents
            if shared_intents.shared:
                self._record_name = os.path.basename(path)
        else:
            self._intents = IntentFile(path + ".intents", list(self.previous_intents))
        self._checkpoints = checkpoints
        self._history = history
        self.opened_at_point = False  # True: opened at a ResumePoint, the file was not read

    @classmethod
    def open(cls, path: str, *, sealed: bool = False, checkpoints: CheckpointWriter | None = None,
             format_1_0: bool = False, redactor: Redactor | None = None,
             meta_keys: Collection[str] | None = None, keep_history: bool = False,
             intents: IntentFile | None = None, at: ResumePoint | None = None) -> SessionRecorder:
        """Create the file, or continue an existing one (its index, chain and intents resume).

        `checkpoints` (sealed only) signs and writes a checkpoint every K links and when the recorder closes.
        `format_1_0` writes records without `meta`, for tools that read only format 1.0; `meta_keys` keeps
        only those keys of each record's `meta` (say `turn` and `outcome`, for a record that must come out the
        same bytes every run: no times), and no `meta` when none is left. `redactor`
        replaces secrets in every record's args and response, and in the intents, before they are written.
        `keep_history` keeps the records read to continue the file, so that `history()` need not read it
        again (one pass for a short-lived process, a hook, that continues a record and resumes a gate).
        `intents` is an intent file shared with other records of the folder (`open_shared_intents`), or this
        record's own `PATH.intents` kept open by a long-lived owner (`IntentFile(..., lasting=True)`), used
        instead of opening `PATH.intents`: its open intents are this recorder's `previous_intents`, and it
        stays open when the recorder closes.
        `at` is where an earlier recorder of this process left the file (`resume_point()`): while the file is
        unchanged since (same device, inode, size and modification time), it is not read again and the
        index and chain resume from the point (`opened_at_point` is then True); else it is read whole.
        """
        if checkpoints is not None and not sealed:
            raise ValueError("checkpoints need a sealed recording")
        try:
            handle = open(path, "a+b", buffering=0, opener=open_private)  # noqa: SIM115 - closed by close()
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        try:
            _lock(handle, path)
            if at is not None and at.matches(os.fstat(handle.fileno()), sealed):
                state: dict[str, Any] = {"next_index": at.next_index, "prev": at.prev, "truncated_bytes": 0,
                                         "needs_newline": False, "history": None}
            else:
                at = None
                state = _resume(handle, path, sealed, [] if keep_history else None)
            earlier = read_intents(path + ".intents") if intents is None else []
        except BaseException:
            handle.close()
            raise
        recorder = cls(path, handle, sealed=sealed, intents=earlier, checkpoints=checkpoints, format_1_0=format_1_0,
                       redactor=redactor, meta_keys=meta_keys, shared_intents=intents, **state)
        recorder.opened_at_point = at is not None
        return recorder

    @property
    def next_index(self) -> int:
        """The index the next record will get."""
        return self._next_index

    @property
    def last_digest(self) -> str:
        """The digest of the last link written (64 zeros before the first); meaningful when sealed."""
        return self._prev

    @property
    def intents_path(self) -> str:
        """The side file that holds announced writes: RECORD.intents."""
        return self._intents.path

    @property
    def stopped(self) -> str | None:
        """None while the recorder can write; else why it stopped for good."""
        return self._stopped

    def resume_point(self) -> ResumePoint | None:
        """Where the file stands now, for a later recorder of this process to open at (`open(..., at=)`);
        None when the recorder cannot vouch for it: closed, stopped, a final line without its newline, or a
        file whose size is not what this recorder wrote (someone else wrote to it)."""
        with self._lock:
            if self._handle is None or self._stopped is not None or self._needs_newline:
                return None
            status = os.fstat(self._handle.fileno())
            if status.st_size != self._size or _identity(status) != self._identity:
                return None
            return ResumePoint(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, self._next_index,
                               self._prev, self.sealed)

    def records_since(self, point: ResumePoint) -> list[Record]:
        """The records appended to the file after `point` (taken on this file), read back and checked: their
        indexes follow the point's and, sealed, their links continue its chain. InputError when they do not.
        Read through the recorder's own open file while it is the one the point was taken on (else from the path)."""
        with self._lock:
            mine = self._handle is not None and (point.device, point.inode) == self._identity
            size = self._size
        if mine:
            handle: Any = io.BytesIO(_read_at(self._handle.fileno(), point.size, size - point.size))
        else:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed below
            handle.seek(point.size)
        with handle:
            records = []
            prev = point.prev
            for record in iter_records(handle, self.path, check_sequence=True, require_sealed=False,
                                       first_chunk=False, resume=(point.sealed, point.next_index)):
                if point.sealed:
                    _check_link(record, prev, self.path)
                    assert record.digest is not None
                    prev = record.digest
                records.append(record)
        return records

    def check(self) -> None:
        """Raise unless the record can still be written: ValueError when closed, RecordingError when stopped."""
        with self._lock:
            self._check()

    def announce(self, tool: str, args: dict[str, Any], key: str | None = None) -> int:
        """Sync an intent for a write about to run; return its number for `append(..., intent=N)`."""
        self.check()
        if self.redactor is not None:
            args = self.redactor.args(args)
        try:
            return self._intents.announce(self._next_index, tool, args, key, self._record_name)
        except OSError as exc:
            raise RecordingError(f"cannot write {self.intents_path}: {exc.strerror or exc}") from None

    def keep_intents(self, intents: list[Intent]) -> None:
        """Keep only these earlier intents in the intent file (the gate keeps those still unknown)."""
        try:
            self._intents.keep(intents)
        except OSError as exc:
            raise RecordingError(f"cannot write {self.intents_path}: {exc.strerror or exc}") from None

    def history(self) -> Iterator[Record]:
        """The records the file held when it was opened, read again from disk (or, once, those kept by
        `keep_history`)."""
        if self._history is not None:
            kept, self._history = self._history, None
            yield from kept
            return
        with open(self.path, "rb") as handle:
            for record in read_session(handle, self.path):
                if record.index >= self.resumed_records:
                    return
                yield record

    def append(self, tool: str, args: dict[str, Any], response: dict[str, Any], *,
               intent: int | None = None, meta: dict[str, Any] | None = None, args_bytes: bytes | None = None,
               response_bytes: bytes | None = None) -> int:
        """Write one record and flush it; return its index; `intent` is settled once the line landed.

        `meta` is the record's format-1.1 `meta` (docs/format.md), left out when the recorder was opened
        with `format_1_0`. A value with no JSON form, or a `meta` the format does not allow, raises
        ValueError (nothing written); a failed write raises RecordingError. `args_bytes` and
        `response_bytes` are the canonical bytes of `args` and `response` when the caller has them already
        (the gate does): they are not encoded again. A redacting recorder ignores them (it records the
        values redacted).
        """
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool must be a non-empty string")
        if not isinstance(args, dict) or not isinstance(response, dict):
            raise ValueError("args and response must be JSON objects")
        if self.format_1_0:
            meta = None
        elif meta is not None and self.meta_keys is not None:
            meta = {key: value for key, value in meta.items() if key in self.meta_keys} or None
        if self.redactor is not None:
            args, response = self.redactor.args(args), self.redactor.response(response)
            args_bytes = response_bytes = None
        try:  # encode before taking the lock: a value with no JSON form is refused, nothing written
            tool_bytes = canonical_bytes(tool)
            if args_bytes is None:
                args_bytes = canonical_bytes(args)
            if response_bytes is None:
                response_bytes = canonical_bytes(response)
            meta_bytes = None
            if meta is not None:
                check_meta(meta)
                meta_bytes = canonical_bytes(meta)
        except (CanonicalError, RecursionError, JSONLineError) as exc:
            raise ValueError(f"record has no JSON form: {exc}") from None
        with self._lock:
            self._check()
            index = self._next_index
            if self.sealed:
                hashlib = sys.modules.get(_LINK_HASH)
                if hashlib is None:
                    line, digest = link_line(index, tool_bytes, args_bytes, response_bytes, self._prev, meta_bytes)
                else:  # see _LINK_HASH
                    line, digest = link_line(index, tool_bytes, args_bytes, response_bytes, self._prev, meta_bytes,
                                             hashlib.sha256)
            else:
                line = (format_record(index, tool, args, response, meta) + "\n").encode("ascii")
            if self._needs_newline:
                line = b"\n" + line
            self._write(line)
            self._needs_newline = False
            self._next_index = index + 1
            if self.sealed:
                self._prev = digest
            unanchored = None
            if self._checkpoints is not None:
                try:  # the record has landed: a failure to sign it is raised after its intent is settled
                    self._checkpoints.appended(self._next_index, self._prev)
                except (ToolReplayError, OSError) as exc:
                    unanchored = exc
        if intent is not None:
            self._intents.settle(intent, index)
        if unanchored is not None:
            raise unanchored
        return index

    def close(self) -> None:
        """Close the file (and remove an intent file with nothing open); further appends raise ValueError."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
                if self._owns_intents:  # a shared or lasting intent file is closed by whoever opened it
                    self._intents.close()
                if self._checkpoints is not None:
                    self._checkpoints.closed(self._next_index, self._prev)

    def _check(self) -> None:
        if self._handle is None:
            raise ValueError(f"recorder for {self.path} is closed")
        if self._stopped is None:
            try:
                replaced = _identity(os.stat(self.path)) != self._identity
            except OSError:
                replaced = True
            if replaced:
                self._stopped = f"{self.path} was deleted or replaced while being recorded"
        if self._stopped is not None:
            raise RecordingError(self._stopped)

    def _write(self, line: bytes) -> None:
        """Append `line` whole, or leave the file as it was (else stop for good) and raise."""
        try:
            _write_all(self._handle, line)
        except OSError as exc:
            reason = f"cannot write {self.path}: {exc.strerror or exc}"
            try:
                os.ftruncate(self._handle.fileno(), self._size)
            except OSError:
                self._stopped = reason + " (and a partial line could not be cut off)"
            raise RecordingError(reason) from None
        self._size += len(line)

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


_CUT_SHORT = ("outcome unknown: the proxy stopped while this write ran, before its result was recorded; "
              "whether it took effect is unknown")


def open_shared_intents(path: str, *, sealed: bool = True,
                        clock: Callable[[], int] = time.time_ns) -> IntentFile:
    """Open the intent file that the records of one folder share (creating nothing yet), after a crash.

    Each earlier intent that names a record is resolved against that record (continued, so a record
    still being written by a live process is a UsageError): a write whose record never landed gets one
    now, a refusal with `meta.outcome` `unknown`, and stays in the file, naming no record any more, as a
    write of unknown outcome that every recorder sharing the file brings back (the gate refuses it until
    a person deletes its line). The file is locked (`PATH.lock`) while open: a second opener, in this
    process or another, is a UsageError."""
    hold = _hold(path + ".lock", path)
    try:
        intents = read_intents(path)
        carried = [intent for intent in intents if intent.record is None and intent.done is None]
        by_record: dict[str, list[Intent]] = {}
        for intent in intents:
            if intent.record is not None:
                by_record.setdefault(intent.record, []).append(intent)
        folder = os.path.dirname(os.path.abspath(path))
        for name, group in sorted(by_record.items()):
            carried += _cut_short(os.path.join(folder, name), group, sealed, clock)
        seen: set[bytes] = set()
        kept = []
        for intent in carried:  # one line a call: the gate refuses every identical call alike
            if intent.call not in seen:
                seen.add(intent.call)
                kept.append(Intent(intent.seq, intent.start, intent.tool, intent.args, intent.key))
        shared = IntentFile(path, intents, hold=hold)
        shared.keep(kept)
    except BaseException:
        os.close(hold)
        raise
    return shared


def _cut_short(record: str, intents: list[Intent], sealed: bool, clock: Callable[[], int]) -> list[Intent]:
    """The intents of one record that its record does not answer, each recorded there as outcome unknown."""
    if not os.path.exists(record):
        return intents
    with SessionRecorder.open(record, sealed=sealed) as recorder:  # its args are held redacted already
        wanted = {intent.call for intent in intents}
        landed: dict[bytes, list[int]] = {}
        for past in recorder.history():
            if not is_refusal(past.response) and past.canonical_call in wanted:
                landed.setdefault(past.canonical_call, []).append(past.index)
        unknown = unresolved(intents, landed)
        for intent in unknown:
            recorder.append(intent.tool, intent.args, {"ok": False, "error": _CUT_SHORT},
                            meta={"ts": format_ts(clock()), "outcome": "unknown"})
    return unknown


def _hold(lock: str, path: str) -> int:
    descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        lock_descriptor(descriptor, wait=False)
    except OSError:
        os.close(descriptor)
        raise UsageError(f"{path} is already in use by another proxy") from None
    return descriptor


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


def _read_at(descriptor: int, offset: int, count: int) -> bytes:
    """`count` bytes from `offset` (fewer if the file ends before)."""
    chunks = []
    while count > 0 and (chunk := os.pread(descriptor, min(count, 1 << 20), offset)):
        chunks.append(chunk)
        offset += len(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _write_all(handle: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = handle.write(view)
        view = view[written:]


def _lock(handle: Any, path: str) -> None:
    """An advisory lock against two recorders appending to one file (none where the platform has none)."""
    try:
        lock_descriptor(handle.fileno(), wait=False)
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


def _resume(handle: Any, path: str, sealed: bool, kept: list[Record] | None) -> dict[str, Any]:
    """Read an existing file; return the recorder's starting state, cutting off a torn final line;
    `kept` (when given) receives the records read."""
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
                if kept is not None:
                    kept.append(record)
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
            "needs_newline": tail_line is not None and not torn, "history": kept}


def _check_link(record: Record, prev: str, path: str) -> None:
    if record.prev != prev or record.digest != link_digest(prev, record.canonical_record):
        raise InputError(path, record.line, f"chain broken at link index {record.index}; "
                                            "a broken chain cannot be continued")
