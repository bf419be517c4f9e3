"""`audit --format sqlite -o FILE`: the tables, the documented schema and query, and the file written whole."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import tempfile
import unittest
from unittest import mock

from toolreplay.audit.fleet_sqlite import INDICES, RULE_VIOLATIONS_QUERY, SCHEMA
from toolreplay.cli import main
from toolreplay.cli._io import IO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
DOCS = os.path.join(ROOT, "docs", "audit.md")


def run(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


def _sql_blocks() -> list[str]:
    with open(DOCS, encoding="utf-8") as handle:
        return re.findall(r"```sql\n(.*?)```", handle.read(), re.S)


def _record(index: int, tool: str, args: dict[str, object], response: dict[str, object] | None = None) -> str:
    return json.dumps({"index": index, "tool": tool, "args": args, "response": response or {"ok": True}}) + "\n"


class SqliteTest(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        cwd = os.getcwd()
        os.chdir(folder.name)
        self.addCleanup(os.chdir, cwd)
        os.makedirs("fleet")
        shutil.copy(os.path.join(SAMPLES, "session-dirty.jsonl"), "fleet/a-dirty.jsonl")
        shutil.copy(os.path.join(SAMPLES, "rules-session.jsonl"), "fleet/b-rules.jsonl")
        with open("fleet/c-bad.jsonl", "w", encoding="utf-8") as handle:
            handle.write(_record(0, "t", {}) + "[]\n")
        self.policy = os.path.join(SAMPLES, "rules-policy.json")

    def query(self, path: str, sql: str, parameters: object = ()) -> list[tuple[object, ...]]:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return connection.execute(sql, parameters).fetchall()  # type: ignore[arg-type]
        finally:
            connection.close()

    def test_sessions_calls_and_findings_agree_with_the_json_report(self) -> None:
        code, out, _ = run("audit", "fleet", "--policy", self.policy, "--format", "json")
        report = json.loads(out)
        self.assertEqual(run("audit", "fleet", "--policy", self.policy, "--format", "sqlite", "-o", "fleet.db"),
                         (code, "", "error: fleet/c-bad.jsonl:2: record must be a JSON object, not array\n"))
        sessions = self.query("fleet.db", "SELECT id, path, status, error, calls, findings FROM sessions ORDER BY id")
        self.assertEqual(sessions, [
            (1, "fleet/a-dirty.jsonl", "audited", None, 6, report["sessions"][0]["findings_total"]),
            (2, "fleet/b-rules.jsonl", "audited", None, 10, report["sessions"][1]["findings_total"]),
            (3, "fleet/c-bad.jsonl", "unreadable", "fleet/c-bad.jsonl:2: record must be a JSON object, not array", 0,
             0)])  # an unreadable session has no calls in the tables
        self.assertEqual(self.query("fleet.db", "SELECT count(*) FROM calls"), [(report["summary"]["calls"],)])
        self.assertEqual(self.query("fleet.db", "SELECT tool FROM calls WHERE session_id = 1 ORDER BY call_index"),
                         [("list_dir",), ("read_file",), ("read_file",), ("search",), ("write_file",), ("search",)])
        by_kind = dict(self.query("fleet.db", "SELECT kind, count(*) FROM findings GROUP BY kind"))
        self.assertEqual(by_kind, report["summary"]["findings_by_kind"])
        by_rule = dict(self.query("fleet.db", "SELECT rule, count(*) FROM findings WHERE rule IS NOT NULL GROUP BY rule"))
        self.assertEqual(by_rule, report["summary"]["findings_by_rule"])
        first = report["sessions"][0]["findings"][0]
        self.assertEqual(self.query("fleet.db", "SELECT call_index, kind, severity, tool, rule, related_index, message "
                                                "FROM findings WHERE session_id = 1 ORDER BY id LIMIT 1"),
                         [(first["index"], first["kind"], "finding", first["tool"], None, first["related_index"],
                           first["message"])])

    def test_the_documented_schema_is_the_schema_and_has_the_indices(self) -> None:
        self.assertEqual(run("audit", "fleet/a-dirty.jsonl", "--format", "sqlite", "-o", "fleet.db")[0], 1)
        self.assertIn(SCHEMA + INDICES, _sql_blocks())
        indices = self.query("fleet.db", "SELECT tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT "
                                         "NULL ORDER BY name")
        self.assertEqual(indices, [("calls", "CREATE INDEX calls_outcome ON calls (outcome)"),
                                   ("calls", "CREATE INDEX calls_server ON calls (server)"),
                                   ("calls", "CREATE INDEX calls_tool ON calls (tool)"),
                                   ("findings", "CREATE INDEX findings_kind ON findings (kind)"),
                                   ("findings", "CREATE INDEX findings_rule ON findings (rule)"),
                                   ("findings", "CREATE INDEX findings_session ON findings (session_id, call_index)"),
                                   ("findings", "CREATE INDEX findings_tool ON findings (tool)"),
                                   ("sessions", "CREATE INDEX sessions_run ON sessions (run_id)")])

    def test_the_documented_query_finds_the_sessions_with_a_violation_of_a_rule(self) -> None:
        self.assertIn(RULE_VIOLATIONS_QUERY, _sql_blocks())
        shutil.copy("fleet/b-rules.jsonl", "fleet/d-rules-again.jsonl")
        os.unlink("fleet/c-bad.jsonl")
        self.assertEqual(run("audit", "fleet", "--policy", self.policy, "--format", "sqlite", "-o", "fleet.db")[0], 1)
        self.assertEqual(self.query("fleet.db", RULE_VIOLATIONS_QUERY, {"rule": "refund-cap"}),
                         [("fleet/b-rules.jsonl", 2), ("fleet/d-rules-again.jsonl", 2)])
        self.assertEqual(self.query("fleet.db", RULE_VIOLATIONS_QUERY, {"rule": "no-such-rule"}), [])
        # the answer is what the scope of each session says
        code, out, _ = run("scope", "fleet/b-rules.jsonl", self.policy, "--format", "json")
        found = [f for f in json.loads(out)["findings"] if f.get("rule") == "refund-cap"]
        self.assertEqual(len(found), 2)

    def test_every_finding_is_kept_and_information_is_marked(self) -> None:
        lines = [_record(0, "search", {"q": "a"}, {"hits": 1}), _record(1, "write_file", {"path": "x"}),
                 _record(2, "search", {"q": "a"}, {"hits": 2})]
        lines += [_record(index, "read_file", {"path": "same"}) for index in range(3, 1503)]
        with open("fleet/e-long.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(lines)
        self.assertEqual(run("audit", "fleet/e-long.jsonl", "--state-aware", "--format", "sqlite", "-o", "db")[0], 1)
        self.assertEqual(self.query("db", "SELECT severity, kind, count(*) FROM findings GROUP BY kind"),
                         [("information", "changed-after-write", 1), ("finding", "redundant-call", 1499)])
        self.assertEqual(self.query("db", "SELECT findings, information FROM sessions"), [(1499, 1)])
        self.assertEqual(self.query("db", "SELECT state_aware, policy_agent, sessions, added FROM runs"),
                         [(1, None, 1, 1)])

    def test_without_o_it_is_a_usage_error(self) -> None:
        self.assertEqual(run("audit", "fleet", "--format", "sqlite"),
                         (2, "", "error: --format sqlite needs -o FILE (a database is written to a file, not to "
                                 "standard output)\n"))

    def test_the_file_is_written_whole_or_not_at_all(self) -> None:
        with open("fleet.db", "wb") as handle:
            handle.write(b"the previous audit\n")
        from toolreplay.audit import fleet_sqlite

        real = fleet_sqlite._session_row
        calls = []

        def failing(number: int, result: object) -> tuple[object, ...]:
            calls.append(number)
            if number == 2:
                raise OSError(28, "No space left on device")
            return real(number, result)  # type: ignore[arg-type]

        with mock.patch.object(fleet_sqlite, "_session_row", failing):
            self.assertEqual(run("audit", "fleet", "--format", "sqlite", "-o", "fleet.db", "--jobs", "1"),
                             (2, "", "error: cannot write fleet.db: No space left on device\n"))
        self.assertEqual(calls, [1, 2])
        with open("fleet.db", "rb") as handle:
            self.assertEqual(handle.read(), b"the previous audit\n")
        self.assertEqual(sorted(os.listdir(".")), ["fleet", "fleet.db"])
        self.assertEqual(run("audit", "fleet", "--format", "sqlite", "-o", "fleet.db")[0], 2)
        self.assertEqual(self.query("fleet.db", "SELECT count(*) FROM sessions"), [(3,)])
        self.assertEqual(sorted(os.listdir(".")), ["fleet", "fleet.db"])


if __name__ == "__main__":
    unittest.main()
