"""The console's index of sessions: every record in the folders, its counts by kind, kept up to date.

Each file is read from where the last look stopped: only the lines added since are parsed, so a growing
record costs what it grew by. A line not yet ended (being written) waits for the next look; a line that
cannot be read marks its session unreadable (`PATH:LINE: message`) and the rest of it is not counted.
A file that shrank or was replaced is read again from the start; a folder that disappears leaves its
sessions out and is named in `problems`. Findings come from the audit (`audit_session`, replay's
checks), run again for a session whose file changed, after its counts. With a fleet history database
(`audit --format sqlite`), its sessions are listed too, with their stored counts.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from toolreplay.audit.fleet import SessionJob, SessionOptions, audit_session
from toolreplay.errors import ToolReplayError
from toolreplay.format.records import ts_seconds
from toolreplay.policy.refusals import is_refusal

__all__ = ["KINDS", "SessionRow", "SessionIndex", "Filters", "select"]

# The counts of a session's row, in the order the page shows them.
KINDS = ("ran", "blocked", "approved", "unknown", "findings")
_APPROVAL_KEYS = ("x-confirmed", "x-approval", "x-remembered", "x-decided-by", "x-receipt")
_DENYING_RULE = re.compile(r"denied by rule ([^:\s]+):")
_READ_BYTES = 1 << 22  # read a grown file in pieces this large


@dataclass(slots=True)
class SessionRow:
    """One session as the sessions page lists it."""

    path: str  # the file (absolute), or the history database's path for a session known only from it
    name: str  # as shown: relative to the folder it was found in
    calls: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    tools: set[str] = field(default_factory=set)
    rules: set[str] = field(default_factory=set)
    last: float = 0.0  # seconds since the epoch of its newest record (its file's mtime when no record says)
    error: str | None = None
    audited: bool = False  # `counts["findings"]` is known
    history: bool = False  # from the history database, not a folder
    # reading state
    offset: int = 0
    line: int = 0
    signature: tuple[int, int, int] = (0, 0, 0)  # (inode, size, mtime_ns) at the last look
    audited_signature: tuple[int, int, int] | None = None


@dataclass(frozen=True, slots=True)
class Filters:
    """What the sessions page shows: tool, kind (one of KINDS) and rule, each exact; `since` seconds since the
    epoch (None: any time)."""

    tool: str = ""
    kind: str = ""
    rule: str = ""
    since: float | None = None

    def keeps(self, row: SessionRow) -> bool:
        """Whether the row passes every filter."""
        if self.tool and self.tool not in row.tools:
            return False
        if self.kind and not row.counts.get(self.kind):
            return False
        if self.rule and self.rule not in row.rules:
            return False
        return self.since is None or row.last >= self.since


def select(rows: Iterable[SessionRow], filters: Filters, offset: int, limit: int) -> tuple[list[SessionRow], int]:
    """One page of rows (already newest first) passing the filters, and how many pass in all."""
    page: list[SessionRow] = []
    total = 0
    for row in rows:
        if filters.keeps(row):
            if offset <= total < offset + limit:
                page.append(row)
            total += 1
    return page, total


def _count_record(row: SessionRow, obj: Any) -> None:
    """Count one record's line (a JSON object) in its session's row; ValueError when it is not a record."""
    if not isinstance(obj, dict) or not isinstance(obj.get("tool"), str) or not isinstance(obj.get("response"), dict):
        raise ValueError("not a record (an object with \"tool\", \"args\" and \"response\")")
    meta = obj.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    response = obj["response"]
    outcome = meta.get("outcome")
    if outcome is None:
        outcome = "refused" if is_refusal(response) else "ran"
    row.calls += 1
    row.tools.add(obj["tool"])
    if outcome in ("ran", "cached"):
        row.counts["ran"] += 1
        if any(key in meta for key in _APPROVAL_KEYS):
            row.counts["approved"] += 1
    elif outcome == "refused":
        row.counts["blocked"] += 1
    elif outcome == "unknown":
        row.counts["unknown"] += 1
    error = response.get("error")
    if isinstance(error, str) and (found := _DENYING_RULE.match(error)):
        row.rules.add(found.group(1))
    shadows = meta.get("x-shadow")
    if isinstance(shadows, list):
        row.rules.update(entry["rule"] for entry in shadows if isinstance(entry, dict) and isinstance(
            entry.get("rule"), str))
    ts = meta.get("ts")
    if isinstance(ts, str):
        try:
            row.last = max(row.last, ts_seconds(ts))
        except ValueError:
            pass


def _reset(row: SessionRow) -> None:
    row.calls, row.offset, row.line, row.error, row.last = 0, 0, 0, None, 0.0
    row.counts = dict.fromkeys(KINDS, 0)
    row.tools, row.rules = set(), set()
    row.audited, row.audited_signature = False, None


def read_more(row: SessionRow, signature: tuple[int, int, int], mtime: float) -> None:
    """Count the records added to the row's file since the last look (from the start when it was replaced)."""
    if signature[0] != row.signature[0] or signature[1] < row.offset:
        _reset(row)
    row.signature = signature
    if row.error is not None:
        return
    try:
        with open(row.path, "rb") as handle:
            while True:
                handle.seek(row.offset)
                data = handle.read(_READ_BYTES)
                end = data.rfind(b"\n")
                if end < 0:  # no whole line yet (being written), or one longer than a piece: read it whole
                    if len(data) < _READ_BYTES:
                        break
                    rest = handle.readline()
                    if not rest.endswith(b"\n"):
                        break
                    data += rest
                    end = len(data) - 1
                for line in data[:end].split(b"\n"):
                    row.line += 1
                    if line.strip():
                        try:
                            _count_record(row, json.loads(line))
                        except (ValueError, RecursionError) as exc:
                            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
                            row.error = f"{row.name}:{row.line}: {reason}"
                            return
                    row.offset += len(line) + 1
    except OSError as exc:
        row.error = f"{row.name}: cannot read: {exc.strerror or exc}"
    if not row.last:
        row.last = mtime


def _walk(folder: str) -> Iterator[tuple[str, os.stat_result]]:
    """The `.jsonl` files under a folder (not in hidden folders: the inbox, a temporary one), with their status."""
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            if current == folder:
                raise
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".jsonl") and entry.is_file():
                    yield entry.path, entry.stat()
            except OSError:
                continue


class SessionIndex:
    """The sessions of some folders (and a history database), looked at again by `refresh`; thread-safe.

    `version` grows whenever anything shown changed, so a page can ask whether it is still current."""

    def __init__(self, folders: Iterable[str], database: str | None = None, *, audit: bool = True,
                 exclude: Iterable[str] = ()) -> None:
        """`exclude`: files under the folders that are not sessions (the approvals files the console shows)."""
        self.folders = [os.path.abspath(folder) for folder in folders]
        self._exclude = frozenset(os.path.abspath(path) for path in exclude)
        self.database = database
        self._audit = audit
        self._lock = threading.Lock()
        self._rows: dict[str, SessionRow] = {}
        self._sorted: list[SessionRow] | None = None
        self.version = 0
        self.problems: list[str] = []  # folders that cannot be read now, a database that cannot be read
        self._history: list[SessionRow] = []
        if database is not None:
            self._history = read_history(database)

    def refresh(self) -> bool:
        """Look at every folder once: new, grown, replaced and vanished files; True when something changed."""
        seen: set[str] = set()
        problems: list[str] = []
        changed = False
        for folder in self.folders:
            try:
                for path, status in _walk(folder):
                    if path in self._exclude:
                        continue
                    seen.add(path)
                    changed |= self._look(folder, path, status)
            except OSError as exc:
                problems.append(f"{folder}: cannot read: {exc.strerror or exc}")
        with self._lock:
            gone = [path for path in self._rows if path not in seen]
            for path in gone:
                del self._rows[path]
            if gone or changed or problems != self.problems:
                self.problems = problems
                self._sorted = None
                self.version += 1
                return True
        return False

    def _look(self, folder: str, path: str, status: os.stat_result) -> bool:
        signature = (status.st_ino, status.st_size, status.st_mtime_ns)
        row = self._rows.get(path)
        if row is not None and row.signature == signature:
            return False
        if row is None:
            row = SessionRow(path, os.path.relpath(path, os.path.dirname(folder)))
        read_more(row, signature, status.st_mtime)
        with self._lock:
            self._rows[path] = row
        return True

    def audit_pending(self, budget: float = 0.5) -> bool:
        """Audit the sessions whose file changed since their last audit, for about `budget` seconds, newest
        first; True when some were audited."""
        if not self._audit:
            return False
        end = time.monotonic() + budget
        done = False
        for row in self.rows():
            if row.history or row.audited_signature == row.signature:
                continue
            signature = row.signature
            try:
                result = audit_session(SessionJob(row.path, row.name), SessionOptions())
                findings = result.finding_count
            except (ToolReplayError, RecursionError, OSError):
                findings = 0
            with self._lock:
                row.counts["findings"] = findings
                row.audited, row.audited_signature = True, signature
                self.version += 1
            done = True
            if time.monotonic() > end:
                break
        return done

    def rows(self) -> list[SessionRow]:
        """Every session, newest first (then by name)."""
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted([*self._rows.values(), *self._history], key=lambda row: (-row.last, row.name))
            return self._sorted

    def find(self, path: str) -> SessionRow | None:
        """The row of a session file, None when the index does not hold it (only indexed files are opened)."""
        with self._lock:
            return self._rows.get(path)

    def choices(self) -> tuple[list[str], list[str]]:
        """The tools and the rules seen, sorted (for the filters)."""
        tools: set[str] = set()
        rules: set[str] = set()
        for row in self.rows():
            tools |= row.tools
            rules |= row.rules
        return sorted(tools), sorted(rules)


def read_history(database: str) -> list[SessionRow]:
    """The sessions of a fleet history database (`audit --format sqlite`); UsageError-like ToolReplayError when
    it cannot be read."""
    try:
        connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise ToolReplayError(f"cannot read {database}: {exc}") from None
    try:
        rows = connection.execute("SELECT id, path, calls, findings, error FROM sessions").fetchall()
        tools: dict[int, set[str]] = {}
        for session_id, tool in connection.execute("SELECT DISTINCT session_id, tool FROM calls"):
            tools.setdefault(session_id, set()).add(tool)
        rules: dict[int, set[str]] = {}
        for session_id, rule in connection.execute(
                "SELECT DISTINCT session_id, rule FROM findings WHERE rule IS NOT NULL"):
            rules.setdefault(session_id, set()).add(rule)
    except sqlite3.Error as exc:
        raise ToolReplayError(f"cannot read {database}: {exc}") from None
    finally:
        connection.close()
    found = []
    for session_id, path, calls, findings, error in rows:
        row = SessionRow(f"{database}#{session_id}", str(path), int(calls), error=error, audited=True, history=True,
                         tools=tools.get(session_id, set()), rules=rules.get(session_id, set()))
        row.counts["findings"] = int(findings)
        found.append(row)
    return found
