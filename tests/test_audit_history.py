"""The SQLite history (`audit --format sqlite`): the documented example queries, run on a real file;
`--append` adds runs without duplicating sessions; a file that is not one to add to is left untouched."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tempfile
import unittest
from typing import Any

from toolreplay.cli import main
from toolreplay.cli._io import IO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs", "audit.md")

POLICY = {"agent": "notes", "allowed_tools": ["read", "write_note", "send"], "write_tools": ["write_note", "send"],
          "rules": [{"id": "no-secrets", "tools": ["read"], "effect": "deny", "reason": "never secrets",
                     "when": [{"arg": "path", "under": ["secrets"]}]}]}


def run(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


def _line(index: int, tool: str, args: dict[str, Any], response: dict[str, Any] | None = None,
          **meta: Any) -> str:
    record: dict[str, Any] = {"index": index, "tool": tool, "args": args, "response": response or {"ok": True}}
    if meta:
        record["meta"] = {key.replace("_", "-") if key.startswith("x_") else key: value for key, value in meta.items()}
    return json.dumps(record) + "\n"


def _refusal(text: str) -> dict[str, Any]:
    return {"ok": False, "error": text}


GUARDED = [  # a record the guard wrote (format 1.1), over two days and two servers
    _line(0, "read", {"path": "docs/a"}, {"text": "a"}, ts="2026-12-01T10:00:00Z", duration_ms=5, outcome="ran",
          x_server="notes"),
    _line(1, "read", {"path": "secrets/k"}, _refusal("denied by rule no-secrets: never secrets"),
          ts="2026-12-01T10:00:01Z", duration_ms=0.1, outcome="refused", x_server="notes"),
    _line(2, "write_note", {"text": "hi"}, ts="2026-12-01T10:00:02Z", duration_ms=20, outcome="ran",
          x_confirmed="once", x_server="notes"),
    _line(3, "write_note", {"text": "docs"}, ts="2026-12-02T09:00:00Z", duration_ms=30, outcome="ran",
          x_approval="docs-writes", x_server="notes"),
    _line(4, "send", {"n": 1}, _refusal("outcome unknown: reset"), ts="2026-12-02T09:00:01Z", duration_ms=100,
          outcome="unknown", x_server="mail"),
    _line(5, "write_note", {"text": "no"}, _refusal("confirmation declined"), ts="2026-12-02T09:00:02.5Z",
          duration_ms=1, outcome="refused", x_server="notes"),
]
PLAIN = [  # format 1.0: judged by the policy alone
    _line(0, "read", {"path": "docs/a"}, {"text": "a"}), _line(1, "read", {"path": "docs/a"}, {"text": "a"}),
    _line(2, "read", {"path": "secrets/x"}, {"text": "s"}), _line(3, "delete", {})]

# What each documented query answers on that fleet, in the order docs/audit.md gives them.
EXPECTED = [
    [(None, 1), ("no-secrets", 1)],  # refused calls by rule
    [("write_note", "docs-writes", 1), ("write_note", "once", 1)],  # approvals per tool
    [("send", 100.0, 1), ("write_note", 30.0, 3), ("read", 5.0, 2)],  # slowest tools by p95
    [("fleet/a-guarded.jsonl", 1)],  # sessions with unknown outcomes
    [("2026-12-01", "approved", 1), ("2026-12-01", "blocked", 1), ("2026-12-02", "approved", 1),
     ("2026-12-02", "blocked", 1), ("2026-12-02", "unknown-outcome", 1)],  # findings per day
    [("-", 8), ("notes", 5), ("mail", 1)],  # calls per server
    [("fleet/a-guarded.jsonl", 2, 0), ("fleet/b-plain.jsonl", 0, 2), ("fleet/c-sealed.jsonl", 0, 2)],  # stopped/ran
    [("fleet/c-sealed.jsonl", 0)],  # broken chains
    [("fleet/b-plain.jsonl", 1), ("fleet/c-sealed.jsonl", 1)],  # violations of rule :rule (no-secrets)
]


def documented_queries() -> list[str]:
    """The example queries of docs/audit.md: every `sql` block after its "Example queries" heading."""
    with open(DOCS, encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index("### Example queries"):]
    section = section[:section.index("\n## ")]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


class HistoryTest(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        cwd = os.getcwd()
        os.chdir(folder.name)
        self.addCleanup(os.chdir, cwd)
        os.makedirs("fleet")
        self.write("fleet/a-guarded.jsonl", GUARDED)
        self.write("fleet/b-plain.jsonl", PLAIN)
        self.write("plain.jsonl", PLAIN)
        self.assertEqual(run("seal", "plain.jsonl", "-o", "fleet/c-sealed.jsonl")[0], 0)
        with open("fleet/c-sealed.jsonl", encoding="utf-8") as handle:
            sealed = handle.read()
        self.write("fleet/c-sealed.jsonl", [sealed.replace('"text":"a"', '"text":"A"', 1)])  # a broken chain
        with open("policy.json", "w", encoding="utf-8") as handle:
            json.dump(POLICY, handle)

    def write(self, path: str, lines: list[str]) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(lines)

    def audit(self, *options: str, output: str = "fleet.db") -> tuple[int, str, str]:
        return run("audit", "fleet", "--policy", "policy.json", "--format", "sqlite", "-o", output, *options)

    def query(self, sql: str, parameters: Any = (), path: str = "fleet.db") -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return connection.execute(sql, parameters).fetchall()
        finally:
            connection.close()

    def test_every_documented_query_answers_on_a_real_file(self) -> None:
        self.assertEqual(self.audit()[0], 1)
        queries = documented_queries()
        self.assertGreaterEqual(len(queries), 8)
        self.assertEqual(len(queries), len(EXPECTED))
        for sql, expected in zip(queries, EXPECTED, strict=True):
            with self.subTest(sql=sql.splitlines()[0]):
                self.assertEqual(self.query(sql, {"rule": "no-secrets"}), expected)

    def test_sessions_and_calls_carry_what_the_records_say(self) -> None:
        self.assertEqual(self.audit()[0], 1)
        self.assertEqual(self.query("SELECT path, source_format, calls, first_ts, last_ts, sealed, chain, findings, "
                                    "information, length(head) FROM sessions ORDER BY id"), [
            ("fleet/a-guarded.jsonl", "1.1", 6, "2026-12-01T10:00:00Z", "2026-12-02T09:00:02.5Z", 0, None, 1, 4, 64),
            ("fleet/b-plain.jsonl", "1.0", 4, None, None, 0, None, 3, 0, 64),
            ("fleet/c-sealed.jsonl", "1.0", 4, None, None, 1, "broken", 4, 0, 64)])
        self.assertEqual(self.query("SELECT call_index, tool, args, response_bytes, outcome, ts, duration_ms, call_id, "
                                    "turn, server, approval, rule FROM calls WHERE session_id = 1 AND call_index < 4 "
                                    "ORDER BY call_index"), [
            (0, "read", '{"path":"docs/a"}', 12, "ran", "2026-12-01T10:00:00Z", 5.0, None, None, "notes", None, None),
            (1, "read", '{"path":"secrets/k"}', len('{"error":"denied by rule no-secrets: never secrets","ok":false}'),
             "refused", "2026-12-01T10:00:01Z", 0.1, None, None, "notes", None,
             "no-secrets"),
            (2, "write_note", '{"text":"hi"}', 11, "ran", "2026-12-01T10:00:02Z", 20.0, None, None, "notes", "once",
             None),
            (3, "write_note", '{"text":"docs"}', 11, "ran", "2026-12-02T09:00:00Z", 30.0, None, None, "notes",
             "docs-writes", None)])
        # A plain file's head is the one `seal` gives it: the sealed copy's last digest (before the edit).
        sealed = run("seal", "plain.jsonl")[1]
        self.assertEqual(self.query("SELECT head FROM sessions WHERE id = 2"),
                         [(json.loads(sealed.splitlines()[-1])["digest"],)])
        self.assertEqual(self.query("PRAGMA foreign_key_check"), [])
        self.assertEqual(self.query("PRAGMA user_version"), [(2,)])

    def test_append_adds_a_run_and_only_the_sessions_not_there(self) -> None:
        self.assertEqual(self.audit("--append")[0], 1)  # no file yet: a new one
        counts = "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM calls), (SELECT count(*) FROM findings)"
        first = self.query(counts)
        self.assertEqual(self.audit("--append")[0], 1)
        self.assertEqual(self.query(counts), first)  # idempotent: the same sessions are not added again
        self.assertEqual(self.query("SELECT id, sessions, added FROM runs"), [(1, 3, 3), (2, 3, 0)])
        self.write("fleet/a-guarded.jsonl", [*GUARDED, _line(6, "read", {"path": "docs/b"}, outcome="ran")])
        self.write("fleet/d-new.jsonl", PLAIN)
        self.assertEqual(self.audit("--append")[0], 1)
        self.assertEqual(self.query("SELECT id, sessions, added FROM runs"), [(1, 3, 3), (2, 3, 0), (3, 4, 2)])
        # The grown session is a new row (a new head); the earlier one stays as it was audited.
        self.assertEqual(self.query("SELECT id, run_id, path, calls FROM sessions WHERE id > 3 ORDER BY id"),
                         [(4, 3, "fleet/a-guarded.jsonl", 7), (5, 3, "fleet/d-new.jsonl", 4)])
        self.assertEqual(self.query("PRAGMA foreign_key_check"), [])
        # Without --append the file is replaced by this run alone.
        self.assertEqual(self.audit()[0], 1)
        self.assertEqual(self.query("SELECT id, sessions, added FROM runs"), [(1, 4, 4)])

    def test_a_file_that_is_not_one_to_add_to_is_one_error_and_untouched(self) -> None:
        old = sqlite3.connect("old.db")  # schema version 1, as ToolReplay 0.7 wrote it
        old.executescript("CREATE TABLE audit (schema_version INTEGER); CREATE TABLE sessions (id INTEGER); "
                          "CREATE TABLE calls (x); CREATE TABLE findings (y); INSERT INTO audit VALUES (1);")
        old.close()
        other = sqlite3.connect("other.db")
        other.executescript("CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('mine');")
        other.close()
        self.assertEqual(self.audit()[0], 1)
        shutil.copy("fleet.db", "newer.db")
        newer = sqlite3.connect("newer.db")
        newer.execute("PRAGMA user_version = 3")
        newer.close()
        with open("text.db", "w", encoding="utf-8") as handle:
            handle.write("my notes\n")
        cases = [
            ("text.db", "not a ToolReplay audit database (not an SQLite database)"),
            ("other.db", "not a ToolReplay audit database"),
            ("old.db", "a ToolReplay audit database of schema version 1; --append adds to schema version 2 only "
                       "(write a new file without --append)"),
            ("newer.db", "a ToolReplay audit database of schema version 3; --append adds to schema version 2 only "
                         "(write a new file without --append)")]
        for path, message in cases:
            with self.subTest(path):
                with open(path, "rb") as handle:
                    before = handle.read()
                self.assertEqual(self.audit("--append", output=path), (2, "", f"error: {path}: {message}\n"))
                with open(path, "rb") as handle:
                    self.assertEqual(handle.read(), before)
        self.assertEqual(sorted(name for name in os.listdir(".") if name.startswith(".")), [])  # no temporary left
        self.assertEqual(run("audit", "fleet", "--append"), (2, "", "error: --append is for --format sqlite\n"))


if __name__ == "__main__":
    unittest.main()
