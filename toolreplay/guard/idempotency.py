"""The idempotency store: how a repeated write (or, with the read cache, a repeated read) is answered
from the earlier identical call instead of running again (docs/guard.md, Idempotency and Memory).

It holds, per session: the calls running or run (`Pending`, keyed by their slot and idempotency key), a
continued record's writes (their response, or only their record index once the memory bound pushed them
out), and the writes whose outcome is unknown (refused until a person resolves them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from toolreplay.format.canonical import canonical_json
from toolreplay.guard.outcomes import Refusal
from toolreplay.guard.request import Request

__all__ = ["Done", "Earlier", "IdempotencyStore", "Pending"]


class Done:
    """`threading.Event`'s `set`, `is_set` and `wait` for an event set once, on one plain lock held until it is
    set: a tenth of an Event's cost to make and set, which every call pays (few are ever waited for)."""

    __slots__ = ("_lock", "_set")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False

    def set(self) -> None:
        """Let every waiter go on (once; again does nothing). Only the thread running the call sets it."""
        if not self._set:
            self._set = True
            self._lock.release()

    def is_set(self) -> bool:
        """Whether it was set."""
        return self._set

    def wait(self) -> bool:
        """Block until it is set; True."""
        if not self._set:
            with self._lock:
                pass
        return True


class Pending:
    """A call being executed: identical requests wait on `done` and then read `response` (and `refusal`,
    when the gate refused it rather than ran it)."""

    def __init__(self) -> None:
        self.done = Done()
        self.cancelled = False  # it ended without an answer: those that waited for it are decided anew
        self.thread = threading.get_ident()
        self.owner: Any = None  # the asyncio task running it, when handle_async runs it
        self.index: int | None = None  # its record's index
        self.response: dict[str, Any] | None = {"ok": False,
                                                "error": "RuntimeError: the original call did not finish"}
        self.refusal: Refusal | None = None


# What answers a repeat: a call running or run, a continued record's write (its response, or its index).
Earlier = Pending | dict[str, Any] | int


class IdempotencyStore:
    """A session's earlier calls, by canonical call (and idempotency key), bounded in bytes held."""

    def __init__(self, *, read_cache: bool, remember_bytes: int) -> None:
        """`read_cache=True` keeps reads too (answered while no write has run since); `remember_bytes`
        bounds the responses held, for the writes and for the read cache each."""
        self.read_cache = read_cache
        self._remember_bytes = remember_bytes
        self._lock = threading.Lock()
        self._written: dict[tuple[bytes, str | None], Pending] = {}
        self._reads: dict[bytes, Pending] = {}
        self._recorded: dict[bytes, dict[str, Any] | int] = {}  # a continued record's writes (or their index)
        # the writes whose response is held -> its size and record index
        self._held: OrderedDict[Any, tuple[int, int | None]] = OrderedDict()
        self._held_bytes = 0
        self._reads_bytes = 0
        self._unknown: dict[bytes, str] = {}

    @property
    def remember_bytes(self) -> int:
        """The bound on the responses held, for the writes and for the read cache each."""
        return self._remember_bytes

    def copy(self) -> IdempotencyStore:
        """A store of its own with what this one holds from a record (a continued record's writes, the
        unknown outcomes); only for a store no gate has used (nothing running or run)."""
        with self._lock:
            if self._written or self._reads:
                raise ValueError("only a store no gate has used can be copied")
            other = IdempotencyStore(read_cache=self.read_cache, remember_bytes=self._remember_bytes)
            other._recorded = dict(self._recorded)
            other._held = OrderedDict(self._held)
            other._held_bytes = self._held_bytes
            other._unknown = dict(self._unknown)
            return other

    def earlier(self, call: Request) -> Earlier | None:
        """The identical earlier call that answers this one (a recorded write's response), else None."""
        if call.fresh:
            return None
        with self._lock:
            if call.write:
                recorded = self._recorded.get(call.identity) if not call.variant else None
                if recorded is not None:
                    return recorded
                return self._written.get((call.slot, call.key))
            return self._reads.get(call.slot)

    def register(self, call: Request) -> tuple[Pending, bool]:
        """The call's pending entry, and whether this request owns (runs) it."""
        with self._lock:
            table: dict[Any, Pending] = self._written if call.write else self._reads
            slot: Any = (call.slot, call.key) if call.write else call.slot
            pending = table.get(slot)
            if pending is not None:
                return pending, False
            pending = Pending()
            if (call.write and not call.fresh) or (not call.write and self.read_cache):
                table[slot] = pending
            return pending, True

    def forget(self, call: Request, *, unknown: bool = False) -> None:
        """Drop the call's pending entry (it did not run, or its outcome is `unknown`)."""
        with self._lock:
            if call.write:
                if not call.fresh:
                    self._written.pop((call.slot, call.key), None)
                if unknown:
                    self._unknown[call.identity] = f"{call.tool} {canonical_json(call.args)}"
            else:
                self._reads.pop(call.slot, None)

    def clear_reads(self) -> None:
        """A write runs (or ran): whatever it did, earlier reads may be stale now."""
        with self._lock:
            self._reads.clear()

    def hold(self, call: Request, pending: Pending, size: int) -> None:
        """Count the response now held in a table; past the limit, drop the oldest (docs/guard.md, Memory)."""
        with self._lock:
            if call.write and not call.fresh:
                slot = (call.slot, call.key)
                if self._written.get(slot) is pending:
                    self._held_write(slot, size, pending.index)
            elif not call.write and self.read_cache and self._reads.get(call.slot) is pending:
                if self._reads_bytes + size > self._remember_bytes:
                    self._reads = {slot: entry for slot, entry in self._reads.items() if not entry.done.is_set()}
                    self._reads[call.slot] = pending
                    self._reads_bytes = 0
                self._reads_bytes += size

    def keep_recorded(self, identity: bytes, response: dict[str, Any], size: int, index: int) -> None:
        """A continued record's write answers its repeats (the first record of each identical call)."""
        with self._lock:
            if identity not in self._recorded:
                self._recorded[identity] = response
                self._held_write(identity, size, index)

    def keep_index(self, identity: bytes, index: int) -> None:
        """A continued record's write whose answer the record holds only redacted: its repeats are refused,
        never run again (the record's index says where it ran)."""
        with self._lock:
            if identity not in self._recorded:
                self._recorded[identity] = index

    def mark_unknown(self, identity: bytes, shown: str) -> None:
        """A write (`shown` as `TOOL ARGS`) started and has no result: refuse its identical calls."""
        with self._lock:
            self._unknown[identity] = shown

    def is_unknown(self, identity: bytes) -> bool:
        """Whether an identical write's outcome is unknown."""
        with self._lock:
            return identity in self._unknown

    def unknown_outcomes(self) -> tuple[str, ...]:
        """The calls (`TOOL ARGS`) started but never recorded, sorted."""
        with self._lock:
            return tuple(sorted(self._unknown.values()))

    def _held_write(self, slot: Any, size: int, index: int | None) -> None:
        """Hold one more write's response (lock held); drop the oldest past the limit, keeping its index."""
        self._held[slot] = (size, index)
        self._held_bytes += size
        while self._held_bytes > self._remember_bytes and len(self._held) > 1:
            old, (old_size, old_index) = self._held.popitem(last=False)
            self._held_bytes -= old_size
            if isinstance(old, bytes):  # a continued record's write
                if old_index is not None:
                    self._recorded[old] = old_index
            elif (entry := self._written.get(old)) is not None:
                entry.response = None
