"""A fleet audit as an SQLite database: sessions, calls and findings as tables (docs/audit.md has the schema).

The database is filled as the results arrive (one transaction, the indices built at the end) in a
temporary file beside the target, and renamed over it once complete: a run that fails leaves the
target as it was. Standard library `sqlite3` only. Nothing in it depends on the time or the machine,
so the same fleet gives the same rows.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable

from toolreplay import __version__
from toolreplay.audit.findings import INFORMATION_KINDS  # noqa: F401  (importable from here, as before)
from toolreplay.audit.fleet import SessionResult
from toolreplay.errors import UsageError
from toolreplay.format.output import replace_atomically

__all__ = ["SCHEMA", "SCHEMA_VERSION", "RULE_VIOLATIONS_QUERY", "write_fleet_sqlite"]

SCHEMA_VERSION = 1

SCHEMA = """\
CREATE TABLE audit (
  schema_version INTEGER NOT NULL,
  toolreplay_version TEXT NOT NULL,
  state_aware INTEGER NOT NULL,
  policy_agent TEXT
);
CREATE TABLE sessions (
  id INTEGER PRIMARY KEY,
  path TEXT NOT NULL UNIQUE,
  status TEXT NOT NULL CHECK (status IN ('audited', 'unreadable', 'skipped')),
  error TEXT,
  calls INTEGER NOT NULL,
  sealed INTEGER NOT NULL,
  chain TEXT CHECK (chain IN ('intact', 'broken')),
  first_broken_index INTEGER,
  divergence INTEGER,
  findings INTEGER NOT NULL,
  information INTEGER NOT NULL,
  checkpoint TEXT CHECK (checkpoint IN ('anchored', 'failed', 'unverified')),
  checkpoint_origin TEXT,
  checkpoint_size INTEGER
);
CREATE TABLE calls (
  session_id INTEGER NOT NULL REFERENCES sessions (id),
  call_index INTEGER NOT NULL,
  tool TEXT NOT NULL,
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
  message TEXT NOT NULL
);
"""
INDICES = """\
CREATE INDEX calls_tool ON calls (tool);
CREATE INDEX findings_session ON findings (session_id);
CREATE INDEX findings_kind ON findings (kind);
CREATE INDEX findings_rule ON findings (rule);
CREATE INDEX findings_tool ON findings (tool);
"""

# "Sessions with a policy violation of rule R", as docs/audit.md gives it (`:rule` is R's id).
RULE_VIOLATIONS_QUERY = """\
SELECT s.path, count(*) AS violations
FROM sessions AS s JOIN findings AS f ON f.session_id = s.id
WHERE f.kind = 'policy-violation' AND f.rule = :rule
GROUP BY s.id
ORDER BY s.path;
"""


def _session_row(number: int, result: SessionResult) -> tuple[object, ...]:
    status = "skipped" if result.skipped is not None else "unreadable" if result.error is not None else "audited"
    chain = None if result.chain is None else ("intact" if result.chain.intact else "broken")
    broken_at = None if result.chain is None else result.chain.broken_at
    checkpoint = result.checkpoint
    return (number, result.path, status, result.skipped if result.skipped is not None else result.error,
            result.calls if status == "audited" else 0, int(result.sealed), chain, broken_at,
            result.divergence, result.counted if result.error is None else 0, result.information or 0,
            None if checkpoint is None else checkpoint.status, None if checkpoint is None else checkpoint.origin,
            None if checkpoint is None else checkpoint.size)


def _finding_rows(number: int, result: SessionResult, state_aware: bool) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = [
        (number, f.index, f.kind, f.severity,
         f.tool, f.rule, f.related_index, f.message) for f in result.findings]
    if result.checkpoint is not None:
        rows += [(number, None, kind, "finding", None, None, None, message)
                 for kind, message in result.checkpoint.findings]
    return rows


def write_fleet_sqlite(path: str, results: Iterable[SessionResult], *, state_aware: bool = False,
                       policy_agent: str | None = None) -> None:
    """Write every result (from `SessionOptions(tables=True)`, so findings and calls are complete) to the
    database `path`, whole or not at all."""
    with replace_atomically(path) as temporary:
        try:
            _fill(temporary, results, state_aware, policy_agent)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot write {path}: {exc}") from None
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def _fill(temporary: str, results: Iterable[SessionResult], state_aware: bool, policy_agent: str | None) -> None:
    connection = sqlite3.connect(temporary, isolation_level=None)
    try:
        # The file is a temporary one, renamed only when complete: no journal needed for atomicity.
        connection.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;" + SCHEMA)
        connection.execute("BEGIN")
        connection.execute("INSERT INTO audit VALUES (?, ?, ?, ?)",
                           (SCHEMA_VERSION, __version__, int(state_aware), policy_agent))
        insert_session = "INSERT INTO sessions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        insert_call = "INSERT INTO calls VALUES (?, ?, ?)"
        insert_finding = ("INSERT INTO findings (session_id, call_index, kind, severity, tool, rule, related_index, "
                          "message) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
        for number, result in enumerate(results, 1):
            connection.execute(insert_session, _session_row(number, result))
            if result.call_tools:
                connection.executemany(insert_call, ((number, index, tool)
                                                     for index, tool in enumerate(result.call_tools)))
            rows = _finding_rows(number, result, state_aware)
            if rows:
                connection.executemany(insert_finding, rows)
        connection.execute("COMMIT")
        connection.executescript(INDICES)  # built once at the end: faster than kept up row by row
    finally:
        connection.close()
    with open(temporary, "rb+") as done:
        os.fsync(done.fileno())
