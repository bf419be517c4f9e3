"""What a long-lived hook server keeps between events (docs/hooks.md, "What the server keeps"), so an event
need not load the policy and read its session's whole record again.

- The guard, keyed by the bytes of the policy file and of the redaction key file (and the root the policy
  gets from the event's cwd when it names none): a changed file is read again at the next event.
- Per session: where the record's file stood when this process last closed it (`ResumePoint`: device,
  inode, size, modification time, next index, last link), and the gate's history of it (`GateHistory`,
  for the guard it was read with). The next event opens the record at that point without reading it, if
  the file is unchanged; the records this process appended are read back and folded into the history.
  Anything else (another process wrote to it, the policy changed) and the record is read whole again.
- Per session, its pending calls (SESSION.pending) as the server last wrote or read them, used while the file is
  that one (device, inode, size, times; or still absent) instead of reading it again.
- Per session, its intent file (RECORD.intents) kept open (`IntentFile(..., lasting=True)`): a write's intent
  is appended and synced, its settling appends a line, and the file is emptied once it has grown with nothing
  open, instead of a file made and removed at each write. While the file is the one left (same device, inode,
  size) it is not read again; else (a command hook wrote to it) it is read as a hook process reads it.

A hook process without a server (the plain command) keeps nothing: every event reads everything.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolreplay.guard.assembly import Guard
    from toolreplay.guard.intents import IntentFile
    from toolreplay.guard.recorder import ResumePoint
    from toolreplay.guard.resume import GateHistory

__all__ = ["MAX_GUARDS", "MAX_SESSIONS", "HookCache", "SessionState"]

MAX_GUARDS = 8  # policies (or roots, or keys) in use at once; a changed policy file makes one more
# sessions whose state is kept (each holds its gate's history: the responses of non-repeatable writes, up to the
# gate's REMEMBER_BYTES); the least recently used one is read whole at its next event
MAX_SESSIONS = 16


@dataclass(slots=True)
class SessionState:
    """One session's record as this process left it: where its file stood, and the gate's history of it
    (read with `guard`), both None when not known."""

    point: ResumePoint | None = None
    guard: Guard | None = None
    history: GateHistory | None = None
    intents: IntentFile | None = None  # the record's intent file, kept open (None: read it at the next event)
    # the pending calls as this process last wrote or read them, and the file's identity then (None: no file)
    pending: tuple[tuple[int, ...] | None, dict[str, Any]] | None = None

    def release(self) -> None:
        """Close the kept intent file, leaving it as it is on disk."""
        if self.intents is not None:
            self.intents.release()
            self.intents = None


class HookCache:
    """The guards and the sessions' states of one hook server (thread-safe; a session's state is used only
    while its lock, RECORDS/SESSION.lock, is held)."""

    def __init__(self, *, guards: int = MAX_GUARDS, sessions: int = MAX_SESSIONS) -> None:
        self._lock = threading.Lock()
        self._policies: OrderedDict[Hashable, Any] = OrderedDict()
        self._guards: OrderedDict[Hashable, Guard] = OrderedDict()
        self._sessions: OrderedDict[str, SessionState] = OrderedDict()
        self._max_guards, self._max_sessions = guards, sessions

    def policy_object(self, key: Hashable, parse: Callable[[], Any]) -> Any:
        """The policy file's JSON for these bytes (`key`), parsed once."""
        return self._get(self._policies, key, parse, self._max_guards)

    def guard(self, key: Hashable, build: Callable[[], Guard]) -> Guard:
        """The guard for `key` (the files' bytes and options it was built from), built once."""
        guard: Guard = self._get(self._guards, key, build, self._max_guards)
        return guard

    def session(self, base: str) -> SessionState:
        """The state of the session whose files are BASE.jsonl, BASE.lock ... (empty when none is kept)."""
        with self._lock:
            state = self._sessions.get(base)
            if state is None:
                return SessionState()
            self._sessions.move_to_end(base)
            return state

    def keep(self, base: str, state: SessionState) -> None:
        """Keep the session's state for its next event."""
        with self._lock:
            self._sessions[base] = state
            self._sessions.move_to_end(base)
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)[1].release()  # never removed: its session's lock is not held

    def forget(self, base: str) -> None:
        """Drop the session's state: its next event reads the record whole."""
        with self._lock:
            state = self._sessions.pop(base, None)
        if state is not None:
            state.release()

    def close(self) -> None:
        """Close the sessions' kept intent files (left as they are on disk) and forget every session."""
        with self._lock:
            states, self._sessions = list(self._sessions.values()), OrderedDict()
        for state in states:
            state.release()

    def _get(self, table: OrderedDict[Hashable, Any], key: Hashable, make: Callable[[], Any], limit: int) -> Any:
        with self._lock:
            if key in table:
                table.move_to_end(key)
                return table[key]
        value = make()  # outside the lock: a slow build does not hold up other sessions' events
        with self._lock:
            table[key] = value
            while len(table) > limit:
                table.popitem(last=False)
        return value
