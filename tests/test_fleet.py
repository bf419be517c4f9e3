"""`toolreplay audit`: the fleet audit through `main`, its engines (local cores, a real Dask cluster), its summary."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import operator
import os
import pickle
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import unittest
from collections.abc import Iterator, Sequence
from typing import Any
from unittest import mock

from tests.support import end_worker, integration, kill_parent, require
from toolreplay.audit.findings import Finding
from toolreplay.audit.fleet import (
    FleetSummary,
    SessionJob,
    SessionOptions,
    SessionResult,
    audit_session,
    find_sessions,
)
from toolreplay.audit.fleet_render import fold, iter_fleet_json, iter_fleet_text
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import ToolReplayError, UsageError
from toolreplay.format.chunks import _fork_context

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "real")

FLEET_SESSIONS = """\
fleet/a-dirty.jsonl: calls 6, findings 2, divergence index 5
  index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 with no state change between them
  index 5: non-determinism: tool 'search' returned a different response than the identical call at index 3
fleet/c-sealed.jsonl: calls 6, findings 2, divergence index 5, chain intact
  index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 with no state change between them
  index 5: non-determinism: tool 'search' returned a different response than the identical call at index 3
fleet/d-broken.jsonl: calls 6, findings 1, chain broken at index 3
  index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 with no state change between them
fleet/e-bad.jsonl: unreadable: fleet/e-bad.jsonl:2: record must be a JSON object, not array
"""
FLEET_SUMMARY = """\
unreadable: 1
calls: 22
sessions with findings: 3
findings: 5
sealed: 2
broken chains: 1
findings by kind:
  redundant-call: 3
  non-determinism: 2
findings by tool:
  read_file: 3
  search: 2
most distinct calls with findings:
  2 distinct calls, 2 findings, 6 calls: fleet/a-dirty.jsonl
  2 distinct calls, 2 findings, 6 calls: fleet/c-sealed.jsonl
  1 distinct call, 1 finding, 6 calls: fleet/d-broken.jsonl
"""
# By default the clean session is left out (and counted); --all-sessions lists it.
FLEET_TEXT = (FLEET_SESSIONS + "\nsessions: 5\n"
              "not listed above: 1 session without findings (--all-sessions lists them)\n" + FLEET_SUMMARY)
FLEET_TEXT_ALL = FLEET_SESSIONS + "fleet/sub/b-clean.jsonl: calls 4, findings 0\n\nsessions: 5\n" + FLEET_SUMMARY
BAD_LINE = "error: fleet/e-bad.jsonl:2: record must be a JSON object, not array\n"


def run(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


def distributed_available() -> bool:
    return importlib.util.find_spec("distributed") is not None


class FleetDirTest(unittest.TestCase):
    """A fleet in a temporary folder (the current directory during each test, so paths are relative)."""

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name
        cwd = os.getcwd()
        os.chdir(self.tmp)
        self.addCleanup(os.chdir, cwd)
        os.makedirs("fleet/sub")
        shutil.copy(os.path.join(SAMPLES, "session-dirty.jsonl"), "fleet/a-dirty.jsonl")
        shutil.copy(os.path.join(SAMPLES, "session-clean.jsonl"), "fleet/sub/b-clean.jsonl")
        self.assertEqual(run("seal", "fleet/a-dirty.jsonl", "-o", "fleet/c-sealed.jsonl")[0], 0)
        with open("fleet/c-sealed.jsonl", encoding="utf-8") as handle:
            links = handle.read().splitlines()
        links[3] = links[3].replace('"install"', '"uninstall"')  # the search at index 3, edited after sealing
        self.write("fleet/d-broken.jsonl", "\n".join(links) + "\n")
        self.write("fleet/e-bad.jsonl", '{"index": 0, "tool": "t", "args": {}, "response": {}}\n[]\n')
        self.write("fleet/notes.txt", "not a session")

    def write(self, path: str, text: str) -> str:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path


class AuditCommandTest(FleetDirTest):
    def test_text_report_and_exit_2_for_an_unreadable_session(self) -> None:
        self.assertEqual(run("audit", "fleet"), (2, FLEET_TEXT, BAD_LINE))

    def test_all_sessions_lists_the_clean_ones_too(self) -> None:
        self.assertEqual(run("audit", "fleet", "--all-sessions"), (2, FLEET_TEXT_ALL, BAD_LINE))
        self.assertEqual(run("audit", "fleet", "--all-sessions", "--jobs", "1"), (2, FLEET_TEXT_ALL, BAD_LINE))

    def test_allow_unreadable_keeps_the_exit_code_of_the_findings(self) -> None:
        self.assertEqual(run("audit", "fleet", "--allow-unreadable"), (1, FLEET_TEXT, "warning" + BAD_LINE[5:]))

    def test_clean_fleet_exits_0_and_findings_exit_1(self) -> None:
        code, out, err = run("audit", "fleet/sub")
        self.assertEqual((code, err), (0, ""))
        self.assertTrue(out.startswith("\nsessions: 1\nnot listed above: 1 session without findings"))
        self.assertEqual(run("audit", "fleet/a-dirty.jsonl")[0], 1)

    def test_a_broken_chain_alone_is_found(self) -> None:
        shutil.copy(os.path.join(SAMPLES, "session-clean.jsonl"), "clean.jsonl")
        self.assertEqual(run("seal", "clean.jsonl", "-o", "sealed.jsonl")[0], 0)
        with open("sealed.jsonl", encoding="utf-8") as handle:
            sealed = handle.read()
        self.write("tampered.jsonl", sealed.replace("docs", "DOCS", 1))
        code, out, _ = run("audit", "tampered.jsonl")
        self.assertEqual(code, 1)
        self.assertIn("tampered.jsonl: calls 4, findings 0, chain broken at index 0\n", out)
        self.assertIn("broken chains: 1\n", out)

    def test_paths_globs_and_duplicates(self) -> None:
        code, out, _ = run("audit", "fleet/*-dirty.jsonl", "fleet/a-dirty.jsonl", "fleet/sub", "--all-sessions")
        self.assertEqual(code, 1)
        self.assertEqual([line.split(":")[0] for line in out.split("\n\n")[0].splitlines() if not line[0].isspace()],
                         ["fleet/a-dirty.jsonl", "fleet/sub/b-clean.jsonl"])
        self.assertEqual(run("audit", "nothing/*.jsonl"), (2, "", "error: no such file, folder or match: nothing/*.jsonl\n"))
        self.assertEqual(run("audit", "missing.jsonl"), (2, "", "error: no such file, folder or match: missing.jsonl\n"))

    def test_an_unreadable_file_is_reported_by_its_given_path(self) -> None:
        os.mkdir("locked")
        self.write("locked/x.jsonl", "")
        os.chmod("locked/x.jsonl", 0)
        if os.access("locked/x.jsonl", os.R_OK):
            self.skipTest("running as a user who can read any file")
        self.assertEqual(run("audit", "locked")[2], "error: locked/x.jsonl: cannot read: Permission denied\n")

    def test_policy_adds_scope_findings_in_report_order(self) -> None:
        self.write("scope.json", '{"agent": "docs-reader", "allowed_tools": ["read_file", "list_dir"]}')
        code, out, _ = run("audit", "fleet/a-dirty.jsonl", "--policy", "scope.json")
        self.assertEqual(code, 1)
        self.assertEqual(out.split("\n\n")[0] + "\n", (
            "fleet/a-dirty.jsonl: calls 6, findings 5, divergence index 5\n"
            "  index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 with no state change between them\n"
            "  index 3: permission-overreach: tool 'search' is not in the declared scope for agent 'docs-reader'\n"
            "  index 4: permission-overreach: tool 'write_file' is not in the declared scope for agent 'docs-reader'\n"
            "  index 5: non-determinism: tool 'search' returned a different response than the identical call at index 3\n"
            "  index 5: permission-overreach: tool 'search' is not in the declared scope for agent 'docs-reader'\n"))
        self.assertEqual(run("audit", "fleet", "--policy", "missing.json"), (2, "", "error: cannot read missing.json: No such file or directory\n"))

    def test_policy_rules_give_the_findings_of_scope_grouped_by_rule(self) -> None:
        session, policy = os.path.join(SAMPLES, "rules-session.jsonl"), os.path.join(SAMPLES, "rules-policy.json")
        scope = json.loads(run("scope", session, policy, "--format", "json")[1])["findings"]
        code, out, _ = run("audit", session, "--policy", policy, "--format", "json")
        document = json.loads(out)
        found = [f for f in document["sessions"][0]["findings"] if f["kind"] in ("permission-overreach", "policy-violation")]
        self.assertEqual(code, 1)
        self.assertEqual(found, scope)
        self.assertEqual(document["summary"]["findings_by_rule"],
                         {"refund-cap": 2, "api-only": 1, "look-first": 1, "notes-in-docs": 1, "refund-review": 1})

    def test_mutators(self) -> None:
        self.write("orders.jsonl", '{"index": 0, "tool": "get_order", "args": {"id": 1}, "response": {"s": "open"}}\n'
                                   '{"index": 1, "tool": "cancel_order", "args": {"id": 1}, "response": {}}\n'
                                   '{"index": 2, "tool": "get_order", "args": {"id": 1}, "response": {"s": "gone"}}\n')
        self.write("m.txt", "cancel_order\n")
        head = "orders.jsonl: calls 3, findings {}, divergence index 2"
        self.assertEqual(run("audit", "orders.jsonl")[1].split("\n")[0], head.format(2))
        self.assertEqual(run("audit", "orders.jsonl", "--mutators", "m.txt")[1].split("\n")[0], head.format(1))
        self.assertEqual(run("audit", "orders.jsonl", "--mutator", "cancel_order")[1].split("\n")[0], head.format(1))
        # a guard's record declares its write (meta.mutates): no --mutator needed
        self.write("guarded.jsonl", '{"index": 0, "tool": "get_order", "args": {"id": 1}, "response": {"s": "open"}}\n'
                                    '{"index": 1, "tool": "cancel_order", "args": {"id": 1}, "response": {}, '
                                    '"meta": {"outcome": "ran", "mutates": true}}\n'
                                    '{"index": 2, "tool": "get_order", "args": {"id": 1}, "response": {"s": "gone"}}\n')
        self.assertEqual(run("audit", "guarded.jsonl")[1].split("\n")[0],
                         "guarded.jsonl: calls 3, findings 1, divergence index 2")

    def test_json_report(self) -> None:
        code, out, err = run("audit", "fleet", "--format", "json")
        self.assertEqual((code, err), (2, BAD_LINE))
        document = json.loads(out)
        self.assertEqual([s["path"] for s in document["sessions"]], [
            "fleet/a-dirty.jsonl", "fleet/c-sealed.jsonl", "fleet/d-broken.jsonl", "fleet/e-bad.jsonl",
            "fleet/sub/b-clean.jsonl"])
        self.assertEqual(document["sessions"][2], {
            "path": "fleet/d-broken.jsonl", "error": None, "calls": 6, "sealed": True, "chain": "broken",
            "first_broken_index": 3, "divergence": None, "findings_total": 1, "distinct_calls_with_findings": 1,
            "findings": [{"index": 2, "kind": "redundant-call", "severity": "finding", "tool": "read_file",
                          "rule": None, "related_index": 1, "message": "tool 'read_file' repeats the identical call at index 1 with no state change "
                                     "between them"}]})
        self.assertEqual(document["sessions"][3]["error"], "fleet/e-bad.jsonl:2: record must be a JSON object, not array")
        summary = document["summary"]
        self.assertEqual((summary["sessions"], summary["calls"], summary["findings"], summary["broken_chains"]),
                         (5, 22, 5, 1))
        self.assertEqual(summary["findings_by_kind"], {"redundant-call": 3, "non-determinism": 2})
        self.assertEqual(summary["unreadable_files"], ["fleet/e-bad.jsonl:2: record must be a JSON object, not array"])

    def test_output_file_is_written_whole(self) -> None:
        self.assertEqual(run("audit", "fleet", "-o", "report.txt"), (2, "", BAD_LINE))
        with open("report.txt", encoding="utf-8") as handle:
            self.assertEqual(handle.read(), FLEET_TEXT)
        self.assertEqual([name for name in os.listdir(".") if name.startswith(".toolreplay")], [])

    def test_engine_options(self) -> None:
        self.assertEqual(run("audit", "fleet", "--engine", "dask"),
                         (2, "", "error: --engine dask needs --scheduler ADDRESS (e.g. tcp://10.0.0.5:8786)\n"))
        self.assertEqual(run("audit", "fleet", "--scheduler", "tcp://127.0.0.1:8786"),
                         (2, "", "error: --scheduler is for --engine dask\n"))

    def test_same_bytes_whatever_the_number_of_jobs(self) -> None:
        for index in range(40):  # enough sessions for several batches on several workers
            shutil.copy(os.path.join(SAMPLES, "session-dirty.jsonl" if index % 3 else "session-orders.jsonl"),
                        f"fleet/sub/gen-{index:02d}.jsonl")
        for fmt in ("text", "json", "html"):
            one = run("audit", "fleet", "--format", fmt, "--jobs", "1")
            self.assertEqual(run("audit", "fleet", "--format", fmt, "--jobs", "2"), one, fmt)
            self.assertEqual(run("audit", "fleet", "--format", fmt), one, fmt)

    def test_a_log_controlled_name_is_escaped_in_text(self) -> None:
        self.write("evil\nname.jsonl", '{"index": 0, "tool": "a\\u001b[2Jb", "args": {}, "response": {}}\n'
                                       '{"index": 1, "tool": "a\\u001b[2Jb", "args": {}, "response": {}}\n')
        out = run("audit", "evil\nname.jsonl")[1]
        self.assertTrue(out.startswith("evil\\x0aname.jsonl: calls 2, findings 1\n"
                                       "  index 1: redundant-call: tool 'a\\x1b[2Jb' repeats"), out)
        self.assertNotIn("\x1b", out)


CHANGED = ('{"index": 0, "tool": "search", "args": {"q": "a"}, "response": {"hits": 1}}\n'
           '{"index": 1, "tool": "write_file", "args": {"path": "x"}, "response": {"ok": true}}\n'
           '{"index": 2, "tool": "search", "args": {"q": "a"}, "response": {"hits": 2}}\n')
STATE_AWARE_TEXT = """\
changed/a.jsonl: calls 3, findings 0, information 1
  index 2: changed-after-write: tool 'search' returned a different response than the identical call at index 0 \
after the state-changing call at index 1
changed/b.jsonl: calls 3, findings 0, information 1
  index 2: changed-after-write: tool 'search' returned a different response than the identical call at index 0 \
after the state-changing call at index 1

sessions: 2
unreadable: 0
calls: 6
sessions with findings: 0
findings: 0
information: 2
sealed: 0
broken chains: 0
"""

# With --count-changes the information counts as findings: in every line, total, table and the exit code.
COUNTED_CHANGES_TEXT = """\
changed/a.jsonl: calls 3, findings 1
  index 2: changed-after-write: tool 'search' returned a different response than the identical call at index 0 \
after the state-changing call at index 1
changed/b.jsonl: calls 3, findings 1
  index 2: changed-after-write: tool 'search' returned a different response than the identical call at index 0 \
after the state-changing call at index 1

sessions: 2
unreadable: 0
calls: 6
sessions with findings: 2
findings: 2
information: 0
sealed: 0
broken chains: 0
findings by kind:
  changed-after-write: 2
findings by tool:
  search: 2
most distinct calls with findings:
  1 distinct call, 1 finding, 3 calls: changed/a.jsonl
  1 distinct call, 1 finding, 3 calls: changed/b.jsonl
"""


class StateAwareAuditTest(FleetDirTest):
    """`audit --state-aware` replays each session as `replay --state-aware` does, with its exit-code rule."""

    def setUp(self) -> None:
        super().setUp()
        os.makedirs("changed")
        for name in ("a", "b"):
            self.write(f"changed/{name}.jsonl", CHANGED)

    def test_a_change_after_a_write_is_information(self) -> None:
        self.assertEqual(run("audit", "changed", "--state-aware", "--all-sessions"), (0, STATE_AWARE_TEXT, ""))
        self.assertEqual(run("audit", "changed", "--state-aware", "--count-changes"), (1, COUNTED_CHANGES_TEXT, ""))
        # by default a session with information only is not listed (it has no findings): only counted
        code, out, _ = run("audit", "changed", "--state-aware")
        self.assertEqual((code, out.split("\n")[:4]), (0, [
            "", "sessions: 2", "not listed above: 2 sessions without findings (--all-sessions lists them)",
            "unreadable: 0"]))
        # without --state-aware the same sessions are non-deterministic, and the report says nothing of information
        code, out, _ = run("audit", "changed")
        self.assertEqual((code, out.splitlines()[0]), (1, "changed/a.jsonl: calls 3, findings 1, divergence index 2"))
        self.assertNotIn("information", out)

    def test_json_and_the_local_and_serial_engines_agree(self) -> None:
        code, out, _ = run("audit", "changed", "fleet", "--state-aware", "--format", "json", "--allow-unreadable")
        document = json.loads(out)
        self.assertEqual(code, 1)  # the redundant call of the dirty samples still counts
        self.assertEqual([s.get("information") for s in document["sessions"]], [1, 1, 1, 1, 0, None, 0])
        self.assertEqual((document["summary"]["findings"], document["summary"]["information"]), (3, 4))
        self.assertEqual(run("audit", "changed", "fleet", "--state-aware", "--format", "json", "--allow-unreadable",
                             "--jobs", "1"), (code, out, _))

    def test_each_session_is_what_replay_state_aware_says(self) -> None:
        code, out, _ = run("audit", "fleet/a-dirty.jsonl", "--state-aware", "--format", "json")
        session = json.loads(out)["sessions"][0]
        replay = json.loads(run("replay", "fleet/a-dirty.jsonl", "--state-aware", "--format", "json")[1])
        self.assertEqual((session["findings"], session["information"]), (replay["findings"], replay["information"]))

    def test_the_html_page_says_state_aware(self) -> None:
        code, out, _ = run("audit", "changed", "--state-aware", "--format", "html")
        self.assertEqual(code, 0)
        self.assertIn("audited with state-aware replay", out)
        # the cards count as the text report does: no findings, two pieces of information
        self.assertIn('<div class="card good"><div class="v">0</div><div class="l">findings', out)
        self.assertIn('<div class="card "><div class="v">2</div><div class="l">information', out)
        # information is in no chart and no ranking: the findings charts are empty, no session is detailed
        self.assertIn('<h3>Findings by kind</h3><p class="note">None.</p>', out)
        self.assertNotIn("Session details", out)


# A change after a write (information) next to a repeat of the same call (a finding that counts).
MIXED = CHANGED + '{"index": 3, "tool": "search", "args": {"q": "a"}, "response": {"hits": 2}}\n'


class OneCountTest(FleetDirTest):
    """The same input counts the same in text, JSON, HTML, SQLite and the exit code (information never counts)."""

    def setUp(self) -> None:
        super().setUp()
        os.makedirs("mixed")
        self.write("mixed/a.jsonl", MIXED)
        self.write("mixed/b.jsonl", CHANGED)  # information only
        shutil.copy(os.path.join(SAMPLES, "session-dirty.jsonl"), "mixed/c-dirty.jsonl")

    def _counts(self, *extra: str) -> dict[str, Any]:
        args = ("audit", "mixed", "--state-aware", *extra)
        code, text, _ = run(*args, "--all-sessions")
        heads = {line.split(":")[0]: line for line in text.splitlines() if line.startswith("mixed/")}
        lines = text.splitlines()
        top = lines[lines.index("most distinct calls with findings:") + 1:]
        by_kind = lines[lines.index("findings by kind:") + 1:lines.index("findings by tool:")]
        per_session = {path: int(head.split("findings ")[1].split(",")[0]) for path, head in heads.items()}
        counts: dict[str, Any] = {
            "exit": code, "text total": int(next(x for x in lines if x.startswith("findings: "))[10:]),
            "text sessions": per_session, "text ranking": sum(int(line.split(", ")[1].split()[0]) for line in top),
            "text by kind": sum(int(line.rsplit(": ", 1)[1]) for line in by_kind)}
        code, out, _ = run(*args, "--format", "json")
        document = json.loads(out)
        counts.update({
            "json exit": code, "json total": document["summary"]["findings"],
            "json sessions": {s["path"]: s["findings_total"] for s in document["sessions"]},
            "json listed": {s["path"]: sum(f["severity"] == "finding" or "--count-changes" in extra
                                           for f in s["findings"]) for s in document["sessions"]},
            "json ranking": sum(s["findings"] for s in document["summary"]["most_findings"]),
            "json by kind": sum(document["summary"]["findings_by_kind"].values())})
        code, page, _ = run(*args, "--format", "html")
        rows = json.loads(page.split('<script type="application/json" id="rows">')[1].split("</script>")[0])["rows"]
        ranking = page.split("<h2>Sessions with the most findings</h2>")[1].split("</table>")[0]
        counts.update({
            "html exit": code,
            "html total": int(page.split('<div class="l">findings</div>')[0].rsplit('<div class="v">', 1)[1]
                              .split("<")[0]),
            "html sessions": {"mixed/" + row[0] + row[1]: row[3] for row in rows},  # paths below the common folder
            "html ranking": sum(int(cell.split("<")[0]) for cell in ranking.split('<td class="n">')[2::3])})
        # one ranking: the same sessions in the same order in text, JSON and HTML
        order = [line.rsplit(": ", 1)[1] for line in top]
        self.assertEqual([s["path"] for s in document["summary"]["most_findings"]], order)
        self.assertEqual(["mixed/" + cell.split("</a>")[0].rsplit(">", 1)[1]
                          for cell in ranking.split('<a class="path"')[1:]], order)
        code, _, _ = run(*args, "--format", "sqlite", "-o", "fleet.db")
        with contextlib.closing(sqlite3.connect("fleet.db")) as db:
            counts.update({
                "sqlite exit": code,
                "sqlite total": db.execute("SELECT sum(findings) FROM sessions").fetchone()[0],
                "sqlite rows": db.execute("SELECT count(*) FROM findings WHERE severity = 'finding'").fetchone()[0],
                "sqlite sessions": dict(db.execute("SELECT path, findings FROM sessions"))})
        return counts

    def test_one_count_everywhere(self) -> None:
        sessions = {"mixed/a.jsonl": 1, "mixed/b.jsonl": 0, "mixed/c-dirty.jsonl": 1}
        want = {"exit": 1, "json exit": 1, "html exit": 1, "sqlite exit": 1}
        for name in ("text total", "text ranking", "text by kind", "json total", "json ranking", "json by kind",
                     "html total", "html ranking", "sqlite total", "sqlite rows"):
            want[name] = 2
        for name in ("text sessions", "json sessions", "json listed", "html sessions", "sqlite sessions"):
            want[name] = sessions
        self.assertEqual(self._counts(), want)

    def test_count_changes_counts_information_everywhere(self) -> None:
        sessions = {"mixed/a.jsonl": 2, "mixed/b.jsonl": 1, "mixed/c-dirty.jsonl": 2}
        want = {"exit": 1, "json exit": 1, "html exit": 1, "sqlite exit": 1, "sqlite rows": 2}  # rows: by severity
        for name in ("text total", "text ranking", "text by kind", "json total", "json ranking", "json by kind",
                     "html total", "html ranking", "sqlite total"):
            want[name] = 5
        for name in ("text sessions", "json sessions", "json listed", "html sessions", "sqlite sessions"):
            want[name] = sessions
        self.assertEqual(self._counts("--count-changes"), want)


def _calls(*calls: tuple[str, str]) -> str:
    return "".join(f'{{"index": {i}, "tool": "{tool}", "args": {{"q": "{q}"}}, "response": {{}}}}\n'
                   for i, (tool, q) in enumerate(calls))


class ActionableReportTest(FleetDirTest):
    """A looping agent is one line per run of identical findings, and one distinct call in the ranking."""

    def setUp(self) -> None:
        super().setUp()
        os.makedirs("agents")
        self.write("agents/loop.jsonl", _calls(("search", "a"), *[("transfer", "x")] * 6))
        self.write("agents/wide.jsonl", _calls(("search", "a"), ("transfer", "1"), ("transfer", "2"),
                                               ("transfer", "3")))
        self.write("scope.json", '{"agent": "a", "allowed_tools": ["search"]}')

    def test_runs_are_grouped_and_ranked_by_distinct_calls(self) -> None:
        code, out, _ = run("audit", "agents", "--policy", "scope.json")
        self.assertEqual(code, 1)
        self.assertEqual(out.split("\n\n")[0].splitlines(), [
            "agents/loop.jsonl: calls 7, findings 11",
            "  indices 1-6: permission-overreach: 6 identical findings: tool 'transfer' is not in the declared "
            "scope for agent 'a'",
            "  indices 2-6: redundant-call: 5 repeats of index 1: tool 'transfer' repeats the identical call at "
            "index 1 with no state change between them",
            "agents/wide.jsonl: calls 4, findings 3",
            "  indices 1-3: permission-overreach: 3 identical findings: tool 'transfer' is not in the declared "
            "scope for agent 'a'"])
        # three different calls outrank one call repeated six times, whatever its number of findings
        self.assertIn("most distinct calls with findings:\n"
                      "  3 distinct calls, 3 findings, 4 calls: agents/wide.jsonl\n"
                      "  1 distinct call, 11 findings, 7 calls: agents/loop.jsonl\n", out)
        document = json.loads(run("audit", "agents", "--policy", "scope.json", "--format", "json")[1])
        self.assertEqual([(s["path"], s["distinct_calls_with_findings"], s["findings"])
                          for s in document["summary"]["most_findings"]],
                         [("agents/wide.jsonl", 3, 3), ("agents/loop.jsonl", 1, 11)])

    def test_two_of_a_kind_are_not_a_run(self) -> None:
        self.write("agents/two.jsonl", _calls(("transfer", "x"), ("transfer", "x")))
        code, out, _ = run("audit", "agents/two.jsonl", "--policy", "scope.json")
        self.assertEqual(out.split("\n\n")[0].splitlines(), [
            "agents/two.jsonl: calls 2, findings 3",
            "  index 0: permission-overreach: tool 'transfer' is not in the declared scope for agent 'a'",
            "  index 1: permission-overreach: tool 'transfer' is not in the declared scope for agent 'a'",
            "  index 1: redundant-call: tool 'transfer' repeats the identical call at index 0 with no state change "
            "between them"])

    def test_a_run_with_gaps_says_so(self) -> None:
        self.write("agents/gaps.jsonl", _calls(("search", "a"), ("search", "a"), ("search", "b"), ("search", "a"),
                                               ("search", "a")))
        code, out, _ = run("audit", "agents/gaps.jsonl")
        self.assertEqual(out.split("\n\n")[0].splitlines(), [
            "agents/gaps.jsonl: calls 5, findings 3",
            "  indices 1..4 (with gaps): redundant-call: 3 repeats of index 0: tool 'search' repeats the identical "
            "call at index 0 with no state change between them"])


class SummaryTest(unittest.TestCase):
    def test_new_kinds_and_rules_just_appear(self) -> None:
        finding = Finding(3, "policy-violation", "refund", None, "denied by rule R1: too large", "R1")
        results = [SessionResult("a.jsonl", 5, finding_count=1, findings=(finding,),
                                 by_kind=(("policy-violation", 1),), by_tool=(("refund", 1),), by_rule=(("R1", 1),))]
        summary = FleetSummary()
        text = "".join(iter_fleet_text(fold(results, summary), summary))
        self.assertIn("  index 3: policy-violation: denied by rule R1: too large\n", text)
        self.assertIn("findings by rule:\n  R1: 1\n", text)
        summary = FleetSummary()
        document = json.loads("".join(iter_fleet_json(fold(results, summary), summary)))
        self.assertEqual(document["sessions"][0]["findings"][0]["rule"], "R1")
        self.assertEqual(document["summary"]["findings_by_rule"], {"R1": 1})

    def test_most_findings_keeps_the_largest_ties_by_path(self) -> None:
        summary = FleetSummary(top=2)
        for path, count in (("c", 1), ("b", 3), ("a", 3), ("d", 2)):
            summary.add(SessionResult(path, 10, finding_count=count))
        self.assertEqual([top[:2] for top in summary.top_sessions()], [("a", 3), ("b", 3)])
        nothing_kept = FleetSummary(top=0)
        nothing_kept.add(SessionResult("a", 10, finding_count=1))
        self.assertEqual((nothing_kept.top_sessions(), nothing_kept.findings), ([], 1))

    def test_an_empty_fleet_in_json(self) -> None:
        summary = FleetSummary()
        document = json.loads("".join(iter_fleet_json(fold([], summary), summary)))
        self.assertEqual((document["sessions"], document["summary"]["sessions"]), ([], 0))

    def test_audit_session_is_a_pure_function_of_path_and_options(self) -> None:
        job = SessionJob(os.path.join(SAMPLES, "session-dirty.jsonl"), "dirty.jsonl")
        first = audit_session(job, SessionOptions())
        self.assertEqual(audit_session(job, SessionOptions()), first)
        self.assertEqual((first.calls, first.finding_count, first.divergence, first.by_kind),
                         (6, 2, 5, (("non-determinism", 1), ("redundant-call", 1))))

    def test_find_sessions_walks_folders_for_jsonl_only(self) -> None:
        found = [job.display for job in find_sessions([os.path.relpath(SAMPLES)])]
        self.assertIn(os.path.join(os.path.relpath(SAMPLES), "session-dirty.jsonl"), found)
        self.assertTrue(all(path.endswith(".jsonl") for path in found))
        self.assertEqual(found, sorted(found))


class HalfwayFailureTest(unittest.TestCase):
    def test_a_run_that_fails_half_way_prints_none_of_its_report(self) -> None:
        # An engine that stops after the first session (a lost scheduler, say): one error line, nothing else.
        class HalfwayEngine:
            def map_batches(self, function: Any, jobs: Sequence[Any], argument: Any) -> Iterator[Any]:
                yield from function(jobs[:1], argument)
                raise ToolReplayError("lost the connection to the Dask scheduler at tcp://127.0.0.1:1 (CommClosedError)")

        with mock.patch("toolreplay.cli.fleet._engine", return_value=HalfwayEngine()):
            for form in ("text", "json", "html"):
                self.assertEqual(run("audit", SAMPLES, "--format", form), (2, "", "error: lost the connection to the "
                                 "Dask scheduler at tcp://127.0.0.1:1 (CommClosedError)\n"), form)


# How long a Dask test waits for something that is only slow on a busy machine (a cluster starting, a worker
# restarted by its nanny, a command's whole run): long enough never to be the verdict, so a test fails on what
# it asserts, not on the machine's load. A test whose subject is a timeout sets its own, on a condition that
# cannot come true (no worker at all), and connects with this patience.
PATIENCE = 600.0


@integration
class DaskEngineTest(unittest.TestCase):
    """A real `distributed.LocalCluster` with two worker processes gives the local engine's bytes."""

    cluster: Any = None

    @classmethod
    def setUpClass(cls) -> None:
        if distributed_available():
            from distributed import LocalCluster

            # silence_logs: the failing task of a test below would print the worker's traceback
            cls.cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                                       silence_logs=logging.CRITICAL)

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.cluster is not None:
            cls.cluster.close(timeout=PATIENCE)

    def setUp(self) -> None:
        require(self.cluster is not None, "the distributed package is not installed (pip install 'dask[distributed]')")
        # Every test starts with both workers: the cluster may still be starting, or its nannies restarting the
        # workers a test before this one ended (a condition to wait for, not a verdict).
        self.cluster.wait_for_workers(2, timeout=PATIENCE)

    def test_dask_output_equals_local_output(self) -> None:
        paths = [CORPUS] if os.path.isdir(CORPUS) else [SAMPLES]
        address = self.cluster.scheduler_address
        local = run("audit", *paths, "--format", "json", "--allow-unreadable")
        dask = run("audit", *paths, "--format", "json", "--allow-unreadable", "--engine", "dask", "--scheduler", address)
        self.assertEqual(dask, local)
        with tempfile.TemporaryDirectory() as folder:
            local_page, dask_page = os.path.join(folder, "local.html"), os.path.join(folder, "dask.html")
            self.assertEqual(run("audit", SAMPLES, "--format", "html", "-o", local_page)[0], 2)
            self.assertEqual(run("audit", SAMPLES, "--format", "html", "-o", dask_page, "--engine", "dask",
                                 "--scheduler", address)[0], 2)
            with open(local_page, "rb") as one, open(dask_page, "rb") as other:
                self.assertEqual(one.read(), other.read())

    def test_the_command_ends_with_its_whole_output_and_exit_code(self) -> None:
        # The console entry point skips the interpreter's teardown after Dask: what it printed must all be there.
        local = run("audit", SAMPLES, "--allow-unreadable")
        for stdout in (subprocess.PIPE, None):
            with tempfile.TemporaryDirectory() as folder:
                report = os.path.join(folder, "report.txt")
                argv = [sys.executable, "-m", "toolreplay", "audit", SAMPLES, "--allow-unreadable", "--engine", "dask",
                        "--scheduler", self.cluster.scheduler_address] + ([] if stdout else ["-o", report])
                done = subprocess.run(argv, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=stdout or
                                      subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=PATIENCE,
                                      check=False)
                if stdout is None:
                    with open(report, encoding="utf-8") as handle:
                        done.stdout = handle.read()
                self.assertEqual((done.returncode, done.stdout, done.stderr), local)

    def test_results_come_in_order_and_a_failed_task_is_named(self) -> None:
        from toolreplay.audit.dask_engine import DaskEngine

        engine = DaskEngine(self.cluster.scheduler_address, batch_size=3, timeout=PATIENCE)  # 34 batches, 5 groups
        jobs = [f"job {number}" for number in range(100)]
        self.assertEqual(list(engine.map_batches(operator.add, jobs, [])), jobs)  # each batch comes back as it went
        with self.assertRaises(ToolReplayError) as caught:
            list(engine.map_batches(operator.add, jobs, None))  # list + None raises on the worker
        self.assertEqual(str(caught.exception),
                         'a Dask task failed: TypeError: can only concatenate list (not "NoneType") to list')

    def test_a_worker_that_dies_mid_run_changes_nothing(self) -> None:
        # The first task ends its worker's process; Dask runs it again elsewhere, and every batch comes back in order.
        from toolreplay.audit.dask_engine import DaskEngine

        with tempfile.TemporaryDirectory() as folder:
            flag = os.path.join(folder, "died")
            engine = DaskEngine(self.cluster.scheduler_address, batch_size=3, timeout=PATIENCE)
            jobs = [f"job {number}" for number in range(100)]
            self.assertEqual(list(engine.map_batches(end_worker, jobs, flag)), jobs)
            self.assertTrue(os.path.exists(flag))
        self.cluster.wait_for_workers(2, timeout=PATIENCE)  # the nanny starts another worker

    def test_a_batch_that_kills_every_worker_stops_the_run(self) -> None:
        from toolreplay.audit.dask_engine import DaskEngine

        engine = DaskEngine(self.cluster.scheduler_address, batch_size=3, timeout=PATIENCE)
        with self.assertRaises(ToolReplayError) as caught:
            list(engine.map_batches(end_worker, list(range(10)), None))
        self.assertRegex(str(caught.exception), r"\Aa Dask task failed: KilledWorker: Attempted to run task "
                         r"'_pickled-[-0-9a-f]+' on 4 different workers, but all those workers died while running it")
        self.cluster.wait_for_workers(2, timeout=PATIENCE)  # the nannies start the workers again


def documented_settings() -> dict[str, str]:
    """The environment docs/audit.md gives the scheduler and the workers of an audit cluster (its `export` line)."""
    with open(os.path.join(ROOT, "docs", "audit.md"), encoding="utf-8") as handle:
        exports = [line.split()[1:] for line in handle if line.strip().startswith("export DASK_")]
    if len(exports) != 1:
        raise AssertionError(f"docs/audit.md has {len(exports)} export lines of Dask settings, not 1")
    return dict(item.split("=", 1) for item in exports[0])


@integration
class AuditClusterSettingsTest(unittest.TestCase):
    """docs/audit.md's settings for an audit cluster are real Dask settings, and the benchmark measures those."""

    def test_the_benchmark_runs_a_cluster_with_the_documented_settings(self) -> None:
        spec = importlib.util.spec_from_file_location("benchmark_fleet", os.path.join(ROOT, "benchmarks", "fleet.py"))
        assert spec is not None and spec.loader is not None
        benchmark = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(benchmark)
        self.assertEqual(benchmark.AUDIT_SETTINGS, documented_settings())

    def test_dask_reads_them_as_the_profiler_off_and_a_500_ms_tick(self) -> None:
        require(distributed_available(), "the distributed package is not installed (pip install 'dask[distributed]')")
        import dask.config
        from dask.utils import parse_timedelta

        with dask.config.set(dask.config.collect_env(documented_settings())):
            self.assertIs(dask.config.get("distributed.worker.profile.enabled"), False)
            self.assertEqual(parse_timedelta(dask.config.get("distributed.admin.tick.interval")), 0.5)

    def test_a_cluster_started_as_documented_audits_with_the_local_bytes(self) -> None:
        # `dask scheduler` and `dask worker` with the settings in their environment, as docs/audit.md says.
        require(distributed_available(), "the distributed package is not installed (pip install 'dask[distributed]')")
        from distributed import Client

        address, _scheduler, _worker = start_dask_cluster(self, documented_settings())
        with Client(address, timeout=PATIENCE, set_as_default=False) as client:
            settings = client.run(lambda dask_worker: (dask_worker._tick_interval,
                                                       "profile" in dask_worker.periodic_callbacks))
            self.assertEqual(list(settings.values()), [(0.5, False)])
            self.assertEqual(client.run_on_scheduler(lambda dask_scheduler: dask_scheduler._tick_interval), 0.5)
        local = run("audit", SAMPLES, "--format", "json", "--allow-unreadable")
        self.assertEqual(run("audit", SAMPLES, "--format", "json", "--allow-unreadable", "--engine", "dask",
                             "--scheduler", address), local)


@integration
class DaskFaultTest(unittest.TestCase):
    """A cluster that fails the run: each ends it with one error line, never a wait without end."""

    def setUp(self) -> None:
        require(distributed_available(), "the distributed package is not installed (pip install 'dask[distributed]')")

    def test_a_scheduler_without_workers_is_named_after_the_timeout(self) -> None:
        from distributed import LocalCluster

        from toolreplay.audit.dask_engine import DaskEngine

        with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
            address = cluster.scheduler_address
            with self.assertRaises(ToolReplayError) as caught:
                list(DaskEngine(address, timeout=1, connect_timeout=PATIENCE).map_batches(operator.add, ["job"], []))
        self.assertEqual(str(caught.exception),
                         f"the Dask scheduler at {address} has had no worker for 1 s; start one: dask worker {address}")

    def test_connecting_has_its_own_timeout(self) -> None:
        # The fault tests below wait for a worker for a second or two (their subject) and connect with all the
        # patience a busy machine needs; the connection's limit defaults to the worker wait's, as before.
        from toolreplay.audit.dask_engine import DaskEngine

        self.assertEqual((DaskEngine("tcp://127.0.0.1:1").connect_timeout, DaskEngine("x", timeout=5).connect_timeout,
                          DaskEngine("x", timeout=5, connect_timeout=60).connect_timeout), (30.0, 5, 60))
        with socket.socket() as listener:  # a port nothing answers on: connecting fails after connect_timeout
            listener.bind(("127.0.0.1", 0))
            address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        with self.assertRaises(UsageError) as caught:
            list(DaskEngine(address, timeout=PATIENCE, connect_timeout=1).map_batches(operator.add, ["job"], []))
        self.assertTrue(str(caught.exception).startswith(f"cannot connect to the Dask scheduler at {address}: "),
                        str(caught.exception))

    def test_a_cluster_that_loses_its_last_worker_mid_run_stops_the_run(self) -> None:
        # A worker without a nanny, killed after the first result: nobody starts another, and the results it held
        # are gone. The script ends as the command does after Dask, without the interpreter's teardown.
        address, _scheduler, worker = start_dask_cluster(self, {}, "--no-nanny")
        script = textwrap.dedent("""
            import operator, os, signal, sys
            from toolreplay.audit.dask_engine import DaskEngine
            from toolreplay.errors import ToolReplayError
            results = DaskEngine(sys.argv[1], batch_size=1, timeout=2,
                                 connect_timeout=float(sys.argv[3])).map_batches(operator.add, list(range(40)), [])
            print(next(results), flush=True)
            os.kill(int(sys.argv[2]), signal.SIGKILL)
            try:
                list(results)
            except ToolReplayError as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
                os._exit(2)
            """)
        done = run_script(script, address, worker.pid, str(PATIENCE))
        self.assertEqual((done.returncode, done.stdout, done.stderr),
                         (2, "0\n", f"error: the Dask scheduler at {address} has had no worker for 2 s; start one: "
                                    f"dask worker {address}\n"))

    def test_a_lost_scheduler_is_one_error_line(self) -> None:
        # The first task kills the scheduler: the run stops with one line of ours, none of Dask's log lines.
        address, scheduler, _worker = start_dask_cluster(self, {})
        script = textwrap.dedent("""
            import sys
            from tests.support import kill_process
            from toolreplay.audit.dask_engine import DaskEngine
            from toolreplay.errors import ToolReplayError
            try:
                engine = DaskEngine(sys.argv[1], timeout=float(sys.argv[3]))
                list(engine.map_batches(kill_process, list(range(100)), int(sys.argv[2])))
            except ToolReplayError as exc:
                sys.exit(f"error: {exc}")
            """)
        done = run_script(script, address, scheduler.pid, str(PATIENCE))
        self.assertEqual((done.returncode, done.stdout), (1, ""))
        self.assertRegex(done.stderr, rf"\Aerror: lost the connection to the Dask scheduler at {address} \(\w+\)\n\Z")

    def test_a_scheduler_lost_while_waiting_for_a_worker_is_named(self) -> None:
        # A scheduler without workers, killed as the command starts to wait for one: the connection lost, said so
        # (an error Dask gives without a file name read as "cannot write standard output" before).
        address, scheduler, _file = start_dask_scheduler(self, {})
        script = textwrap.dedent("""
            import os, signal, sys
            import distributed
            from toolreplay.cli import main
            waiting = distributed.Client.wait_for_workers
            def killed_first(client, *args, **options):
                os.kill(int(sys.argv[2]), signal.SIGKILL)
                return waiting(client, *args, **options)
            distributed.Client.wait_for_workers = killed_first
            sys.exit(main(["audit", "samples", "--engine", "dask", "--scheduler", sys.argv[1]]))
            """)
        done = run_script(script, address, scheduler.pid)
        self.assertEqual((done.returncode, done.stdout), (2, ""))
        self.assertRegex(done.stderr, rf"\Aerror: lost the connection to the Dask scheduler at {address} \(\w+\)\n\Z")


def run_script(script: str, address: str, pid: int, *more: str) -> subprocess.CompletedProcess[str]:
    """`python -c SCRIPT ADDRESS PID [MORE...]` from the project's root, as a command would run: its exit code and
    output."""
    return subprocess.run([sys.executable, "-c", script, address, str(pid), *more], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=PATIENCE,
                          check=False)


def start_dask_cluster(test: unittest.TestCase, settings: dict[str, str],
                       *worker_options: str) -> tuple[str, subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """`dask scheduler` and one `dask worker` (one thread, `worker_options`), in sessions of their own, ended when
    `test` ends, with `settings` in their environment: the scheduler's address once the worker has joined, the
    scheduler's process and the worker's."""
    from distributed import Client

    address, scheduler, address_file = start_dask_scheduler(test, settings)
    worker = start_dask_process(test, settings, os.path.dirname(address_file), "worker", "--nworkers", "1",
                                "--nthreads", "1", *worker_options, "--scheduler-file", address_file)
    with Client(address, timeout=PATIENCE, set_as_default=False) as client:
        client.wait_for_workers(1, timeout=PATIENCE)
    return address, scheduler, worker


def start_dask_scheduler(test: unittest.TestCase,
                         settings: dict[str, str]) -> tuple[str, subprocess.Popen[bytes], str]:
    """`dask scheduler` alone, as `start_dask_cluster` starts it: its address once it answers, its process and the
    file that holds its address."""
    from distributed import Client

    folder = tempfile.mkdtemp()
    test.addCleanup(shutil.rmtree, folder, True)
    address_file = os.path.join(folder, "scheduler.json")
    scheduler = start_dask_process(test, settings, folder, "scheduler", "--port", "0", "--scheduler-file", address_file)
    with Client(scheduler_file=address_file, timeout=PATIENCE, set_as_default=False) as client:
        address: str = client.scheduler.address
    return address, scheduler, address_file


def start_dask_process(test: unittest.TestCase, settings: dict[str, str], folder: str,
                       *arguments: str) -> subprocess.Popen[bytes]:
    """`python -m dask ARGUMENTS --no-dashboard` in `folder`, in a session of its own, with `settings` in its
    environment, ended when `test` ends."""
    process = subprocess.Popen([sys.executable, "-m", "dask", *arguments, "--no-dashboard"], cwd=folder,
                               env=dict(os.environ, PYTHONPATH=ROOT, **settings), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    test.addCleanup(stop_group, process)
    return process


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """Ends a process started in a session of its own, and what it started (a worker's nanny starts the worker)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


SSH_KEYGEN = shutil.which("ssh-keygen")
CHECKPOINT_FLEET_TEXT = """\
fleet/anchored.jsonl: calls 4, findings 0, chain intact, checkpoint anchored (example.com/run-1, size 4)
fleet/cut.jsonl: calls 3, findings 1, chain intact, checkpoint failed (example.com/run-2, size 4)
  checkpoint: truncated: the checkpoint commits to 4 links, the file has 3
fleet/forged.jsonl: calls 4, findings 1, chain intact, checkpoint failed (example.com/run-3, size 4)
  checkpoint: rewritten: the link at 3 does not match the head of the checkpoint
fleet/grown.jsonl: calls 4, findings 0, chain intact, checkpoint anchored (example.com/run-4, size 2, 2 links not \
yet anchored)
fleet/plain.jsonl: calls 4, findings 0

sessions: 5
unreadable: 0
calls: 19
sessions with findings: 2
findings: 2
sealed: 4
broken chains: 0
checkpoints: 4
sessions anchored: 2
failed checkpoints: 2
unverified checkpoints: 0
findings by kind:
  rewritten: 1
  truncated: 1
most distinct calls with findings:
  1 distinct call, 1 finding, 3 calls: fleet/cut.jsonl
  1 distinct call, 1 finding, 4 calls: fleet/forged.jsonl
"""
UNVERIFIED_WARNING = ("warning: 4 checkpoints not verified: give --allowed-signers FILE or --hmac-key NAME "
                      "SECRET_FILE to check them\n")


@integration
class CheckpointFleetTest(unittest.TestCase):
    """Checkpoints beside sealed sessions (SESSION.checkpoint), signed with an HMAC key: anchored, cut, re-sealed,
    grown since, and a session without one."""

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        cwd = os.getcwd()
        os.chdir(self._tmp.name)
        self.addCleanup(os.chdir, cwd)
        os.mkdir("fleet")
        with open(os.path.join(SAMPLES, "session-clean.jsonl"), encoding="utf-8") as handle:
            self.records = handle.read().splitlines(keepends=True)
        self.write("clean.jsonl", "".join(self.records))
        self.write("ci.secret", "0123456789abcdef0123456789abcdef\n")
        self.seal("clean.jsonl", "anchored", "example.com/run-1")
        self.seal("clean.jsonl", "cut", "example.com/run-2")
        self.write("fleet/cut.jsonl", "".join(self.read("fleet/cut.jsonl").splitlines(keepends=True)[:3]))
        self.seal("clean.jsonl", "forged", "example.com/run-3")
        self.write("edited.jsonl", "".join(self.records).replace('"count": 2,', '"count": 0,'))
        self.assertEqual(run("seal", "edited.jsonl", "-o", "fleet/forged.jsonl")[0], 0)  # a whole new chain
        self.write("early.jsonl", "".join(self.records[:2]))
        self.seal("early.jsonl", "grown", "example.com/run-4")
        self.assertEqual(run("seal", "clean.jsonl", "-o", "fleet/grown.jsonl")[0], 0)  # the same first 2 links
        shutil.copy("clean.jsonl", "fleet/plain.jsonl")

    def write(self, path: str, text: str) -> str:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def read(self, path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def seal(self, source: str, name: str, origin: str, *keys: str) -> None:
        keys = keys or ("--hmac-key", "ci", "ci.secret")
        self.assertEqual(run("seal", source, "-o", f"fleet/{name}.jsonl", "--checkpoint", f"fleet/{name}.checkpoint",
                             "--origin", origin, *keys), (0, "", ""))

    def test_text_report_anchored_truncated_rewritten_and_none(self) -> None:
        self.assertEqual(run("audit", "fleet", "--hmac-key", "ci", "ci.secret", "--all-sessions"),
                         (1, CHECKPOINT_FLEET_TEXT, ""))

    def test_json_fields(self) -> None:
        code, out, err = run("audit", "fleet", "--hmac-key", "ci", "ci.secret", "--format", "json")
        self.assertEqual((code, err), (1, ""))
        sessions = {s["path"]: s for s in json.loads(out)["sessions"]}
        self.assertEqual(sessions["fleet/grown.jsonl"]["checkpoint"], {
            "path": "fleet/grown.checkpoint", "status": "anchored", "origin": "example.com/run-4", "size": 2,
            "unanchored": 2, "signed_by": ["ci"], "findings": []})
        self.assertEqual(sessions["fleet/cut.jsonl"]["checkpoint"], {
            "path": "fleet/cut.checkpoint", "status": "failed", "origin": "example.com/run-2", "size": 4,
            "unanchored": 0, "signed_by": ["ci"],
            "findings": [{"kind": "truncated", "message": "the checkpoint commits to 4 links, the file has 3"}]})
        self.assertEqual(sessions["fleet/cut.jsonl"]["findings_total"], 1)
        self.assertNotIn("checkpoint", sessions["fleet/plain.jsonl"])
        summary = json.loads(out)["summary"]
        self.assertEqual({key: summary[key] for key in ("checkpoints", "sessions_anchored", "failed_checkpoints",
                                                         "unverified_checkpoints", "failed_checkpoint_files")}, {
            "checkpoints": 4, "sessions_anchored": 2, "failed_checkpoints": 2, "unverified_checkpoints": 0,
            "failed_checkpoint_files": [
                {"path": "fleet/cut.jsonl",
                 "first_finding": "truncated: the checkpoint commits to 4 links, the file has 3"},
                {"path": "fleet/forged.jsonl",
                 "first_finding": "rewritten: the link at 3 does not match the head of the checkpoint"}]})
        self.assertEqual(summary["findings_by_kind"], {"rewritten": 1, "truncated": 1})

    def test_html_shows_the_status(self) -> None:
        code, out, _ = run("audit", "fleet", "--hmac-key", "ci", "ci.secret", "--format", "html")
        self.assertEqual(code, 1)
        self.assertIn('"grown.jsonl",4,0,[],"",null,null,null,true,"anchored"]', out)  # the sessions table's row
        self.assertIn('"cut.jsonl",3,1,[["truncated",1]],"s0",null,null,null,true,"failed"]', out)
        self.assertIn("<h2>Failed checkpoints (2)</h2>", out)
        self.assertIn("failed checkpoints</", out)  # a card
        self.assertIn('<span class="chain-broken">checkpoint failed (example.com/run-2, size 4)</span> '
                      "(truncated: the checkpoint commits to 4 links, the file has 3)", out)  # the detail's line
        self.assertNotIn("more findings are not shown", out)

    def test_same_bytes_whatever_the_number_of_jobs(self) -> None:
        for fmt in ("text", "json", "html"):
            one = run("audit", "fleet", "--hmac-key", "ci", "ci.secret", "--format", fmt, "--jobs", "1")
            self.assertEqual(run("audit", "fleet", "--hmac-key", "ci", "ci.secret", "--format", fmt, "--jobs", "2"),
                             one, fmt)

    def test_without_keys_checkpoints_are_unverified_and_found_nothing(self) -> None:
        code, out, err = run("audit", "fleet/anchored.jsonl", "fleet/grown.jsonl", "fleet/cut.jsonl",
                             "fleet/forged.jsonl", "--all-sessions")
        self.assertEqual((code, err), (0, UNVERIFIED_WARNING))
        self.assertEqual(out.split("\n")[:2], [
            "fleet/anchored.jsonl: calls 4, findings 0, chain intact, checkpoint unverified",
            "fleet/cut.jsonl: calls 3, findings 0, chain intact, checkpoint unverified"])
        self.assertIn("checkpoints: 4\nsessions anchored: 0\nfailed checkpoints: 0\nunverified checkpoints: 4\n", out)

    def test_a_key_that_signed_none_of_them_is_unknown_key(self) -> None:
        self.write("other.secret", "another secret of enough bytes\n")
        code, out, _ = run("audit", "fleet/anchored.jsonl", "--hmac-key", "other", "other.secret")
        self.assertEqual(code, 1)
        self.assertEqual(out.split("\n")[:2], [
            "fleet/anchored.jsonl: calls 4, findings 1, chain intact, checkpoint failed",
            "  checkpoint: unknown-key: the checkpoint has no signature from a known key"])
        self.write("wrong.secret", "not the secret that ci signed with\n")  # the same name, another secret
        self.assertEqual(run("audit", "fleet/anchored.jsonl", "--hmac-key", "ci", "wrong.secret")[1].split("\n")[1],
                         "  checkpoint: unknown-key: the checkpoint has no signature from a known key")

    def test_a_checkpoint_beside_an_unsealed_file_finds_it_truncated(self) -> None:
        shutil.copy("fleet/anchored.checkpoint", "fleet/plain.checkpoint")
        out = run("audit", "fleet/plain.jsonl", "--hmac-key", "ci", "ci.secret")[1]
        self.assertEqual(out.split("\n")[:2], [
            "fleet/plain.jsonl: calls 4, findings 1, checkpoint failed (example.com/run-1, size 4)",
            "  checkpoint: truncated: the checkpoint commits to 4 links, the file has 0"])

    def test_a_malformed_checkpoint_makes_the_session_unreadable(self) -> None:
        self.write("fleet/plain.checkpoint", "toolreplay-hash-chain-v1 x\nfour\n")
        code, out, err = run("audit", "fleet/plain.jsonl", "--hmac-key", "ci", "ci.secret")
        self.assertEqual((code, err), (2, "error: fleet/plain.checkpoint:3: expected 3 text lines, a blank line and "
                                          "a signature line\n"))
        self.assertTrue(out.startswith("fleet/plain.jsonl: unreadable: fleet/plain.checkpoint:3: "), out)

    def test_key_options_are_checked_before_any_work(self) -> None:
        self.assertEqual(run("audit", "fleet", "--hmac-key", "ci", "missing.secret"),
                         (2, "", "error: cannot read missing.secret: No such file or directory\n"))

    def test_real_ssh_keys(self) -> None:
        require(SSH_KEYGEN is not None, "ssh-keygen (OpenSSH) is not installed")
        assert SSH_KEYGEN is not None
        for name in ("alice", "mallory"):
            subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", name], check=True)
        public = " ".join(self.read("alice.pub").split()[:2])
        self.write("allowed_signers", f"alice@example.com {public}\n")
        self.seal("clean.jsonl", "ssh", "example.com/run-5", "--ssh-key", "alice@example.com", "alice")
        self.seal("clean.jsonl", "mallory", "example.com/run-6", "--ssh-key", "mallory@example.com", "mallory")
        self.seal("clean.jsonl", "cut-ssh", "example.com/run-7", "--ssh-key", "alice@example.com", "alice")
        self.write("fleet/cut-ssh.jsonl", "".join(self.read("fleet/cut-ssh.jsonl").splitlines(keepends=True)[:2]))
        paths = ("fleet/ssh.jsonl", "fleet/mallory.jsonl", "fleet/cut-ssh.jsonl")
        code, out, err = run("audit", *paths, "--allowed-signers", "allowed_signers", "--jobs", "2", "--all-sessions")
        self.assertEqual((code, err), (1, ""))
        self.assertEqual(out.split("\n\n")[0].splitlines(), [
            "fleet/cut-ssh.jsonl: calls 2, findings 1, chain intact, checkpoint failed (example.com/run-7, size 4)",
            "  checkpoint: truncated: the checkpoint commits to 4 links, the file has 2",
            "fleet/mallory.jsonl: calls 4, findings 1, chain intact, checkpoint failed",
            "  checkpoint: unknown-key: the checkpoint has no signature from a known key",
            "fleet/ssh.jsonl: calls 4, findings 0, chain intact, checkpoint anchored (example.com/run-5, size 4)"])
        self.assertEqual(run("audit", *paths, "--allowed-signers", "allowed_signers", "--jobs", "1", "--all-sessions"),
                         (code, out, err))
        document = json.loads(run("audit", "fleet/ssh.jsonl", "--allowed-signers", "allowed_signers",
                                  "--format", "json")[1])
        self.assertEqual(document["sessions"][0]["checkpoint"]["signed_by"], ["alice@example.com"])

    def test_a_dask_cluster_gives_the_local_bytes(self) -> None:
        require(distributed_available(), "the distributed package is not installed (pip install 'dask[distributed]')")
        from distributed import LocalCluster

        keys = ("--hmac-key", "ci", "ci.secret")
        with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster:
            for fmt in ("text", "json"):
                self.assertEqual(run("audit", "fleet", *keys, "--format", fmt, "--engine", "dask", "--scheduler",
                                     cluster.scheduler_address), run("audit", "fleet", *keys, "--format", fmt), fmt)


class WorkerRenderingTest(unittest.TestCase):
    """Sessions rendered by the workers give the bytes the writer would have made itself."""

    def test_rendered_parts_equal_the_writers_own(self) -> None:
        from dataclasses import replace as _replace

        from toolreplay.audit.fleet import FleetSummary, SessionOptions, audit_batch, find_sessions
        from toolreplay.policy import load_policy

        jobs = find_sessions([SAMPLES])
        plain = SessionOptions(policy=load_policy(os.path.join(SAMPLES, "scope.json")))
        for form, render in (("json", iter_fleet_json), ("text", iter_fleet_text)):
            with self.subTest(form=form):
                outputs = []
                for options in (plain, _replace(plain, render=form)):
                    results = audit_batch(jobs, options)
                    self.assertEqual(all(r.rendered is not None for r in results), options.render is not None)
                    # what a worker sends back carries its part of the report instead of its findings
                    self.assertEqual(any(r.findings for r in results), options.render is None)
                    summary = FleetSummary()
                    outputs.append("".join(render(fold(results, summary), summary)))
                self.assertEqual(outputs[0], outputs[1])
                self.assertIn("permission-overreach", outputs[0])


def _times_three(batch: Sequence[int], argument: int) -> list[int]:
    return [item * argument for item in batch]


class EngineTest(unittest.TestCase):
    def test_batch_size_follows_the_fleet_and_the_workers(self) -> None:
        from toolreplay.audit.engines import batch_size

        # (jobs, workers) -> jobs a batch: about eight batches a worker, at most 256 jobs a batch
        cases = {(0, 2): 1, (50, 2): 4, (1228, 2): 77, (20_000, 2): 256, (20_000, 16): 157, (5, 0): 1}
        self.assertEqual({case: batch_size(*case) for case in cases}, cases)

    def test_results_come_in_order_whatever_the_batches(self) -> None:
        from toolreplay.audit.engines import LocalEngine

        jobs = list(range(100))
        for engine in (LocalEngine(1), LocalEngine(2), LocalEngine(2, batch_size=1), LocalEngine(2, batch_size=64)):
            with self.subTest(jobs=engine.jobs, batch_size=engine.batch_size):
                self.assertEqual(list(engine.map_batches(_times_three, jobs, 3)), [job * 3 for job in jobs])

    def test_a_result_pickles_to_an_equal_result(self) -> None:
        job = SessionJob(os.path.join(SAMPLES, "session-dirty.jsonl"), "dirty.jsonl")
        result = audit_session(job, SessionOptions())
        self.assertTrue(result.findings)
        self.assertEqual(pickle.loads(pickle.dumps(result)), result)


_KILLED_AUDIT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from toolreplay.audit.engines import LocalEngine

    def slow(batch, argument):
        time.sleep(0.05)
        return list(batch)

    if __name__ == "__main__":
        results = LocalEngine(2, batch_size=1).map_batches(slow, list(range(400)), None)
        next(results)
        print("auditing", flush=True)
        for _ in results:
            pass
""")


# The worker given job 0 dies; the other is then about to send a result larger than a pipe holds.
_KILLED_WORKER = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from toolreplay.audit.engines import LocalEngine
    from toolreplay.cli import _terminate
    from toolreplay.errors import ToolReplayError

    signal.signal(signal.SIGTERM, _terminate)  # as the command does

    def die_or_bulk(batch, argument):
        if 0 in batch:
            time.sleep(0.1)
            os._exit(1)
        time.sleep(0.5)
        return [b"x" * (1 << 20) for _ in batch]

    try:
        list(LocalEngine(2, batch_size=1).map_batches(die_or_bulk, list(range(4)), None))
    except ToolReplayError as exc:
        sys.exit(f"error: {exc}")
""")


@unittest.skipUnless(sys.platform.startswith("linux") and _fork_context() is not None, "Linux with fork")
@integration
class KilledFleetWorkerTest(unittest.TestCase):
    def test_a_killed_worker_stops_the_run_with_one_error_line(self) -> None:
        # The command then waited for ever for the other worker, blocked sending its result (see _start_worker).
        done = subprocess.run([sys.executable, "-c", _KILLED_WORKER, ROOT], capture_output=True, text=True,
                              timeout=60, check=False)
        self.assertEqual((done.returncode, done.stdout, done.stderr),
                         (1, "", "error: a worker process died while auditing; try again, or with --jobs 1\n"))


@unittest.skipUnless(sys.platform.startswith("linux") and _fork_context() is not None, "Linux with fork")
@integration
class KilledFleetParentTest(unittest.TestCase):
    def test_fleet_workers_die_with_a_killed_parent(self) -> None:
        for sig in (signal.SIGKILL, signal.SIGTERM):
            with self.subTest(signal=sig.name), tempfile.TemporaryDirectory() as folder:
                script = os.path.join(folder, "audit.py")
                with open(script, "w", encoding="utf-8") as handle:
                    handle.write(_KILLED_AUDIT)
                parent = subprocess.Popen([sys.executable, script, ROOT], stdout=subprocess.PIPE)
                self.assertEqual(parent.stdout.readline(), b"auditing\n")  # type: ignore[union-attr]
                self.assertEqual(kill_parent(parent, sig), (2, []))
                parent.stdout.close()  # type: ignore[union-attr]


if __name__ == "__main__":
    unittest.main()
