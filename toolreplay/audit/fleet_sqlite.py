"""A fleet audit as an SQLite database: runs, sessions, calls and findings as tables (docs/audit.md has the
schema and example queries).

The database is filled as the results arrive (one transaction, the indices built at the end) in a
temporary file beside the target, and renamed over it once complete: a run that fails leaves the
target as it was. With `append`, the temporary file starts as a copy of the target, which must be a
ToolReplay audit database of this schema version (`check_appendable`), and the run adds only the
sessions it does not hold yet (keyed by path and chain head). Standard library `sqlite3` only. Nothing
in it depends on the time or the machine, so the same fleet gives the same rows.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterable

from toolreplay import __version__
from toolreplay.audit.findings import INFORMATION_KINDS  # noqa: F401  (importable from here, as before)
from toolreplay.audit.fleet import SessionResult
from toolreplay.errors import InputError, UsageError
from toolreplay.format.output import replace_atomically
from toolreplay.format.records import ts_seconds

__all__ = ["SCHEMA", "INDICES", "SCHEMA_VERSION", "APPLICATION_ID", "RULE_VIOLATIONS_QUERY", "write_fleet_sqlite",
           "check_appendable"]

SCHEMA_VERSION = 2  # PRAGMA user_version; version 1 (ToolReplay 0.7) had an `audit` table and no application id
APPLICATION_ID = int.from_bytes(b"TRpl", "big")  # PRAGMA application_id: this file is a ToolReplay audit

SCHEMA = """\
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  toolreplay_version TEXT NOT NULL,
  state_aware INTEGER NOT NULL,
  policy_agent TEXT,
  sessions INTEGER NOT NULL,
  added INTEGER NOT NULL
);
CREATE TABLE sessions (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs (id),
  path TEXT NOT NULL,
  head TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('audited', 'unreadable', 'skipped')),
  error TEXT,
  source_format TEXT CHECK (source_format IN ('1.0', '1.1')),
  calls INTEGER NOT NULL,
  first_ts TEXT,
  last_ts TEXT,
  sealed INTEGER NOT NULL,
  chain TEXT CHECK (chain IN ('intact', 'broken')),
  first_broken_index INTEGER,
  divergence INTEGER,
  findings INTEGER NOT NULL,
  information INTEGER NOT NULL,
  checkpoint TEXT CHECK (checkpoint IN ('anchored', 'failed', 'unverified')),
  checkpoint_origin TEXT,
  checkpoint_size INTEGER,
  UNIQUE (path, head)
);
CREATE TABLE calls (
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  call_index INTEGER NOT NULL,
  tool TEXT NOT NULL,
  args TEXT NOT NULL,
  response_bytes INTEGER NOT NULL,
  response_sha256 TEXT NOT NULL,
  outcome TEXT CHECK (outcome IN ('ran', 'cached', 'refused', 'cancelled', 'unknown')),
  ts TEXT,
  duration_ms REAL,
  call_id TEXT,
  turn INTEGER,
  server TEXT,
  approval TEXT,
  rule TEXT,
  PRIMARY KEY (session_id, call_index)
) WITHOUT ROWID;
CREATE TABLE findings (
  id INTEGER PRIMARY KEY,
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  call_index INTEGER,
  kind TEXT NOT NULL,
  severity TEXT NOT NULL CHECK (severity IN ('finding', 'information')),
  tool TEXT,
  rule TEXT,
  related_index INTEGER,
  message TEXT NOT NULL,
  FOREIGN KEY (session_id, call_index) REFERENCES calls (session_id, call_index)
);
"""
INDICES = """\
CREATE INDEX sessions_run ON sessions (run_id);
CREATE INDEX calls_tool ON calls (tool);
CREATE INDEX calls_outcome ON calls (outcome);
CREATE INDEX calls_server ON calls (server);
CREATE INDEX findings_session ON findings (session_id, call_index);
CREATE INDEX findings_kind ON findings (kind);
CREATE INDEX findings_rule ON findings (rule);
CREATE INDEX findings_tool ON findings (tool);
"""
_INDEX_NAMES = ("sessions_run", "calls_tool", "calls_outcome", "calls_server", "findings_session", "findings_kind",
                "findings_rule", "findings_tool")

# "Sessions with a policy violation of rule R", as docs/audit.md gives it (`:rule` is R's id).
RULE_VIOLATIONS_QUERY = """\
SELECT s.path, count(*) AS violations
FROM sessions AS s JOIN findings AS f ON f.session_id = s.id
WHERE f.kind = 'policy-violation' AND f.rule = :rule
GROUP BY s.id
ORDER BY s.path;
"""

# The kinds whose rule names the rule that decided the call (the `calls.rule` column).
_DECIDING_KINDS = frozenset({"blocked", "approved", "policy-violation"})


def _times(result: SessionResult) -> tuple[str | None, str | None]:
    """The first and the last `meta.ts` of a session (by time, not by text)."""
    times = [row[5] for row in result.call_rows if row[5] is not None]
    if not times:
        return None, None
    return min(times, key=ts_seconds), max(times, key=ts_seconds)


def _session_row(number: int, result: SessionResult) -> tuple[object, ...]:
    status = "skipped" if result.skipped is not None else "unreadable" if result.error is not None else "audited"
    chain = None if result.chain is None else ("intact" if result.chain.intact else "broken")
    broken_at = None if result.chain is None else result.chain.broken_at
    checkpoint = result.checkpoint
    audited = status == "audited"
    first_ts, last_ts = _times(result) if audited else (None, None)
    return (number, result.path, result.head if audited and result.head is not None else "", status,
            result.skipped if result.skipped is not None else result.error,
            ("1.1" if result.has_meta else "1.0") if audited else None,
            result.calls if audited else 0, first_ts, last_ts, int(result.sealed), chain, broken_at,
            result.divergence, result.counted if result.error is None else 0, result.information or 0,
            None if checkpoint is None else checkpoint.status, None if checkpoint is None else checkpoint.origin,
            None if checkpoint is None else checkpoint.size)


def _finding_rows(number: int, result: SessionResult) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = [
        (number, f.index, f.kind, f.severity,
         f.tool, f.rule, f.related_index, f.message) for f in result.findings]
    if result.checkpoint is not None:
        rows += [(number, None, kind, "finding", None, None, None, message)
                 for kind, message in result.checkpoint.findings]
    return rows


def _call_rows(number: int, result: SessionResult) -> list[tuple[object, ...]]:
    rules: dict[int, str] = {}
    for f in result.findings:
        if f.rule is not None and f.kind in _DECIDING_KINDS:
            rules.setdefault(f.index, f.rule)
    return [(number, index, *row, rules.get(index)) for index, row in enumerate(result.call_rows)]


def check_appendable(path: str) -> None:
    """Raise InputError unless `path` is absent or a ToolReplay audit database of this schema version."""
    if not os.path.exists(path):
        return
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InputError(path, None, f"cannot open as an SQLite database: {exc}") from None
    try:
        _check_schema(connection, path)
    finally:
        connection.close()


def _check_schema(connection: sqlite3.Connection, path: str) -> None:
    try:
        application_id = connection.execute("PRAGMA application_id").fetchone()[0]
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        raise InputError(path, None, "not a ToolReplay audit database (not an SQLite database)") from None
    if application_id != APPLICATION_ID:
        if application_id == 0 and tables == {"audit", "sessions", "calls", "findings"}:
            version = 1  # ToolReplay 0.7 set no application id
        else:
            raise InputError(path, None, "not a ToolReplay audit database")
    if version != SCHEMA_VERSION or tables != {"runs", "sessions", "calls", "findings"}:
        raise InputError(path, None, f"a ToolReplay audit database of schema version {version}; --append adds to "
                                     f"schema version {SCHEMA_VERSION} only (write a new file without --append)")


def write_fleet_sqlite(path: str, results: Iterable[SessionResult], *, state_aware: bool = False,
                       policy_agent: str | None = None, append: bool = False) -> None:
    """Write every result (from `SessionOptions(tables=True)`, so findings and calls are complete) to the
    database `path`, whole or not at all; with `append`, add this run to the database already there."""
    existing = append and os.path.exists(path)
    with replace_atomically(path) as temporary:
        try:
            if existing:
                shutil.copyfile(path, temporary)
            _fill(temporary, path, results, state_aware, policy_agent, existing)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot write {path}: {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _fill(temporary: str, path: str, results: Iterable[SessionResult], state_aware: bool, policy_agent: str | None,
          existing: bool) -> None:
    connection = sqlite3.connect(temporary, isolation_level=None)
    try:
        # The file is a temporary one, renamed only when complete: no journal needed for atomicity.
        connection.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        if existing:
            _check_schema(connection, path)  # as checked before the run, in case it changed since
            connection.executescript("".join(f"DROP INDEX IF EXISTS {name};" for name in _INDEX_NAMES))
        else:
            connection.executescript(f"PRAGMA application_id = {APPLICATION_ID}; "
                                     f"PRAGMA user_version = {SCHEMA_VERSION};" + SCHEMA)
        connection.execute("BEGIN")
        run_id = connection.execute("INSERT INTO runs (toolreplay_version, state_aware, policy_agent, sessions, added) "
                                    "VALUES (?, ?, ?, 0, 0)", (__version__, int(state_aware), policy_agent)).lastrowid
        number = connection.execute("SELECT coalesce(max(id), 0) FROM sessions").fetchone()[0]
        known = {(p, h) for p, h in connection.execute("SELECT path, head FROM sessions")} if existing else set()
        insert_session = f"INSERT INTO sessions VALUES ({', '.join('?' * 19)})"
        insert_call = f"INSERT INTO calls VALUES ({', '.join('?' * 14)})"
        insert_finding = ("INSERT INTO findings (session_id, call_index, kind, severity, tool, rule, related_index, "
                          "message) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        seen = added = 0
        for result in results:
            seen += 1
            row = _session_row(number + 1, result)
            if (row[1], row[2]) in known:  # this session, as it was then, is in the file already
                continue
            number += 1
            added += 1
            known.add((row[1], row[2]))
            connection.execute(insert_session, (row[0], run_id, *row[1:]))
            if result.call_rows:
                connection.executemany(insert_call, _call_rows(number, result))
            rows = _finding_rows(number, result)
            if rows:
                connection.executemany(insert_finding, rows)
        connection.execute("UPDATE runs SET sessions = ?, added = ? WHERE id = ?", (seen, added, run_id))
        connection.execute("COMMIT")
        connection.executescript(INDICES)  # built once at the end: faster than kept up row by row
    finally:
        connection.close()
    with open(temporary, "rb+") as done:
        os.fsync(done.fileno())
