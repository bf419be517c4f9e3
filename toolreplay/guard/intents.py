"""The intent file beside a record: a write is announced, and synced to disk, before it runs.

The session format has no room for "started, not finished", so the recorder keeps it in a side file,
`RECORD.intents`, one JSON object a line:

    {"args":{"order_id":2},"from":4,"intent":0,"key":null,"tool":"cancel_order"}
    {"done":0,"index":5}

An `intent` line is written and synced before the write runs (`from` is the record's next index at
that moment: the write's own record can only come at or after it); a `done` line follows once the
write's record has landed, naming its index. When no intent is open the file is removed (a shared
file, below, is emptied; a recorder closed with nothing open removes it). After a crash, an intent
whose record never landed is an outcome nobody knows: the gate refuses to run that call again until a
person has checked the real state and deleted the intent's line (or the whole file).

A long-lived process that writes one record event after event (the hook server) may keep its intent file
open between recorders instead (`IntentFile(..., lasting=True)`, handed to each `SessionRecorder.open` as
`intents=`): a settled intent then leaves a `done` line (not synced) rather than removing the file, and the
file is emptied when nothing is open and it has grown past LASTING_BYTES; no file is created and removed at
each write. `unchanged()` tells whether the file at the path is still the one it left (same device, inode and
size): another process that wrote to it, replaced or removed it makes the owner read it again.

One intent file may also be shared by the records of one folder (the HTTP listener's sessions of one
upstream: `recover_shared`): each intent line then names its record (`"record":"NAME.jsonl"`, the
record's file name in the same folder), and the intents of records that were not closed are resolved
against their own records when the file is next opened.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError
from toolreplay.format.canonical import canonical_bytes, canonical_json
from toolreplay.format.files import open_private, replace_privately

__all__ = ["LASTING_BYTES", "Intent", "IntentFile", "open_private", "read_intents", "unresolved"]

LASTING_BYTES = 16 * 1024  # a lasting intent file with nothing open is emptied once it holds more


@dataclass(frozen=True, slots=True)
class Intent:
    """A write announced in the intent file; `done` is the index of its record once one landed."""

    seq: int
    start: int
    tool: str
    args: dict[str, Any]
    key: str | None
    done: int | None = None
    record: str | None = None  # in a shared file: the file name of the record it belongs to

    @property
    def call(self) -> bytes:
        """Canonical bytes of {"tool": TOOL, "args": ARGS}, as the gate and the records compare calls."""
        return canonical_bytes({"tool": self.tool, "args": self.args})

    def line(self) -> bytes:
        """The intent's line in the file, newline included."""
        fields: dict[str, Any] = {"intent": self.seq, "from": self.start, "tool": self.tool, "args": self.args,
                                  "key": self.key}
        if self.record is not None:
            fields["record"] = self.record
        return (canonical_json(fields) + "\n").encode("utf-8")


class IntentFile:
    """Appends intents and their completions; thread-safe. Open intents survive until settled or kept.

    Several recorders may share one (each naming its record in `announce`): `keep` then replaces only
    the earlier intents, those read from the file, and leaves the ones announced since."""

    def __init__(self, path: str, intents: list[Intent], *, hold: int | None = None, lasting: bool = False) -> None:
        """`intents` are those read from an existing file (see `read_intents`); nothing is opened yet.
        `hold` is a descriptor (of a lock held on the file's behalf) that `close` closes. `lasting`: kept
        open by its owner across recorders of one record (see the module's docstring)."""
        self.path = path
        self._hold = hold
        self.shared = hold is not None  # the records of a folder share it: emptied, never removed, while open
        self.lasting = lasting
        self._lock = threading.Lock()
        self._handle: Any = None
        self._size = 0  # the open file's size as this object left it
        self._open: set[int] = {intent.seq for intent in intents if intent.done is None}
        self._next_seq = max((intent.seq for intent in intents), default=-1) + 1
        self._earlier = tuple(intent for intent in intents if intent.done is None)
        self._announced: dict[int, Intent] = {}  # announced since, not settled yet

    @property
    def earlier(self) -> tuple[Intent, ...]:
        """The intents read from the file (or kept since) that are still open: outcomes not known here."""
        with self._lock:
            return self._earlier

    def announce(self, start: int, tool: str, args: dict[str, Any], key: str | None,
                 record: str | None = None) -> int:
        """Write one intent and sync it to disk; return its number. An OSError means nothing may run."""
        with self._lock:
            intent = Intent(self._next_seq, start, tool, args, key, record=record)
            self._append(intent.line(), sync=True)
            self._next_seq += 1
            self._open.add(intent.seq)
            self._announced[intent.seq] = intent
            return intent.seq

    def settle(self, seq: int, index: int) -> None:
        """Mark intent `seq` done by the record at `index`; empty the file when nothing is left open.

        Best effort: if the line cannot be written, the next start finds the record by the intent's call.
        A file of one record with nothing left open is removed (as by `close`; the next intent makes it anew),
        a shared one emptied.
        """
        with self._lock:
            self._open.discard(seq)
            self._announced.pop(seq, None)
            try:
                if self._open or (self.lasting and self._handle is not None and self._size <= LASTING_BYTES):
                    self._append((canonical_json({"done": seq, "index": index}) + "\n").encode("ascii"), sync=False)
                elif self.lasting:
                    self._empty()
                elif not self.shared:
                    if self._handle is not None:
                        self._handle.close()
                        self._handle = None
                    _remove(self.path)
                else:
                    self._ensure_open().truncate(0)
                    self._size = 0
            except OSError:
                pass

    def keep(self, intents: list[Intent]) -> None:
        """Replace the earlier intents with just `intents` (outcomes still unknown), the file written whole
        with them and those announced since; none at all: remove it. A lasting file that would keep just what
        it holds open already is left as it is."""
        with self._lock:
            if self.lasting and not self._announced and ({intent.seq for intent in intents}
                                                         == {intent.seq for intent in self._earlier}):
                return
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            self._earlier = tuple(Intent(intent.seq, intent.start, intent.tool, intent.args, intent.key,
                                         record=intent.record) for intent in intents)
            self._open = {intent.seq for intent in self._earlier} | set(self._announced)
            kept = [*self._earlier, *self._announced.values()]
            if not kept:
                _remove(self.path)
                return
            replace_privately(self.path, (intent.line() for intent in kept))

    def unchanged(self) -> bool:
        """Whether the file at the path is the one this object left: the same file, of the size it wrote (or
        none, when it has none open)."""
        with self._lock:
            try:
                status: os.stat_result | None = os.stat(self.path)
            except FileNotFoundError:
                status = None
            except OSError:
                return False
            if self._handle is None:  # none open here: the file must not be there (nor an intent kept)
                return status is None and not self._open
            opened = os.fstat(self._handle.fileno())
            return status is not None and os.path.samestat(opened, status) and opened.st_size == self._size

    def rebase(self) -> None:
        """A new recorder takes the file over: what is open now is its earlier intents (`earlier`)."""
        with self._lock:
            self._earlier = tuple(intent for intent in (*self._earlier, *self._announced.values())
                                  if intent.seq in self._open)
            self._announced = {}

    def release(self) -> None:
        """Close the file, leaving it as it is (its owner no longer vouches for it, or cannot take its lock)."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    def close(self) -> None:
        """Close the file; remove it when no intent is open (every write ended in a record)."""
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            if not self._open:
                _remove(self.path)
            if self._hold is not None:
                os.close(self._hold)
                self._hold = None

    def _append(self, data: bytes, *, sync: bool) -> None:
        """Append whole lines, or cut the file back to where it was and raise."""
        handle = self._ensure_open()
        status = os.fstat(handle.fileno())
        try:
            replaced = not os.path.samestat(status, os.stat(self.path))
        except OSError:
            replaced = True
        if replaced:  # an intent written now would not be found after a crash
            raise OSError(f"{self.path} was deleted or replaced while in use")
        size = status.st_size
        try:
            _write_all(handle, data)
            if sync:
                os.fsync(handle.fileno())
        except OSError:
            try:
                os.ftruncate(handle.fileno(), size)
            except OSError:
                pass
            raise
        self._size = size + len(data)

    def _empty(self) -> None:
        """Empty a lasting file with nothing open (if it is still the one at the path; else leave it be)."""
        handle = self._ensure_open()
        try:
            same = os.path.samestat(os.fstat(handle.fileno()), os.stat(self.path))
        except OSError:
            same = False
        if same:
            handle.truncate(0)
            self._size = 0

    def _ensure_open(self) -> Any:
        if self._handle is None:
            self._handle = open(self.path, "ab", buffering=0, opener=open_private)  # noqa: SIM115 - closed by close()
            self._size = os.fstat(self._handle.fileno()).st_size
        return self._handle


def _write_all(handle: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[handle.write(view):]


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def read_intents(path: str) -> list[Intent]:
    """The intents of an existing file (none if it does not exist); a torn final line is ignored.

    A torn line is an intent whose sync never finished, so its write never ran.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return []
    intents: dict[int, Intent] = {}
    lines = data.split(b"\n")
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            if number == len(lines):  # no newline after it: the write that was cut short
                break
            raise InputError(path, number, "not an intent line (invalid JSON)") from None
        _read_line(obj, intents, path, number)
    return sorted(intents.values(), key=lambda intent: intent.seq)


_INTENT = frozenset({"intent", "from", "tool", "args", "key"})


def _read_line(obj: Any, intents: dict[int, Intent], path: str, number: int) -> None:
    if isinstance(obj, dict) and (set(obj) == _INTENT or set(obj) == _INTENT | {"record"}):
        seq, start, tool, args, key = obj["intent"], obj["from"], obj["tool"], obj["args"], obj["key"]
        record = obj.get("record")
        if (_is_count(seq) and _is_count(start) and isinstance(tool, str) and isinstance(args, dict)
                and (key is None or isinstance(key, str)) and seq not in intents
                and (record is None or _is_record_name(record))):
            intents[seq] = Intent(seq, start, tool, args, key, record=record)
            return
    elif isinstance(obj, dict) and set(obj) == {"done", "index"}:
        seq, index = obj["done"], obj["index"]
        if _is_count(seq) and _is_count(index) and seq in intents:
            old = intents[seq]
            intents[seq] = Intent(old.seq, old.start, old.tool, old.args, old.key, index, old.record)
            return
    raise InputError(path, number, "not an intent line (expected an intent or a done line)")


def _is_record_name(value: Any) -> bool:
    """A file name in the same folder (no separator, not `.` or `..`): a shared file names no other place."""
    return isinstance(value, str) and value not in ("", ".", "..") and "/" not in value and "\\" not in value \
        and "\0" not in value


def unresolved(intents: list[Intent], landed: dict[bytes, list[int]]) -> list[Intent]:
    """The intents no record answers (`landed`: the indexes of the records, no refusals, of each call in
    canonical form): a done line must name a record of the same call; an intent without one is answered
    only by a record of its call at or after its start, and only when no other intent shares that call
    (then which record is whose cannot be told)."""
    claimed = {intent.done for intent in intents if intent.done is not None}
    sharing: dict[bytes, int] = {}
    for intent in intents:
        sharing[intent.call] = sharing.get(intent.call, 0) + 1
    unknown = []
    for intent in intents:
        indexes = landed.get(intent.call, [])
        if intent.done is not None:
            resolved = intent.done in indexes
        else:
            resolved = sharing[intent.call] == 1 and any(
                index >= intent.start and index not in claimed for index in indexes)
        if not resolved:
            unknown.append(intent)
    return unknown


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
