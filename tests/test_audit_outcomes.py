"""Outcome-aware findings: a record the guard wrote says what it did, and every output of the audit says it too.

A refused call is `blocked`, a call a person approved `approved`, a shadow rule's decision `shadow`
(all three information), a call whose outcome is unknown `unknown-outcome` (a finding); only a call
that ran against the policy is a violation.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import unittest
from typing import Any

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.guard import Gate, SessionRecorder
from toolreplay.guard.gate import AnswerLost
from toolreplay.policy.model import parse_policy

POLICY = {"agent": "notes", "allowed_tools": ["read", "write_note", "send"], "write_tools": ["write_note", "send"],
          "rules": [{"id": "no-secrets", "tools": ["read"], "effect": "deny", "reason": "never secrets",
                     "when": [{"arg": "path", "under": ["secrets"]}]}]}
# The same agent audited against a stricter policy: the note it wrote ran against it.
STRICT = dict(POLICY, allowed_tools=["read", "send"], write_tools=["send"])

BLOCKED_AND_APPROVED = [
    "index 1: blocked: tool 'read' was refused by the guard: denied by rule no-secrets: never secrets\n",
    "index 2: approved: tool 'write_note' ran after a person's yes\n",
    "index 3: blocked: tool 'write_note' was refused by the guard: confirmation declined\n",
    "index 4: blocked: tool 'delete' was refused by the guard: tool not allowed: delete\n"]
UNKNOWN = ("index 5: unknown-outcome: tool 'send' has an unknown outcome (it may have run): outcome unknown: "
           "connection reset; whether the write took effect is unknown\n")


def run(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


def _lost(n: int) -> dict[str, Any]:
    raise AnswerLost("connection reset")


class GuardedRecordTest(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = folder.name
        self.policy = self._write("policy.json", POLICY)
        self.strict = self._write("strict.json", STRICT)

    def _write(self, name: str, document: dict[str, Any]) -> str:
        path = os.path.join(self.folder, name)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
        return path

    def record(self, name: str, unknown: bool = False) -> str:
        """A record the library guard wrote: a read that ran, one denied by a rule, a write a person approved,
        one declined, a tool not allowed, and (with `unknown`) a write whose answer was lost."""
        path = os.path.join(self.folder, name)
        with SessionRecorder.open(path) as recorder:
            gate = Gate({"read": lambda path: {"text": "t"}, "write_note": lambda text: {"ok": True}, "send": _lost},
                        parse_policy(POLICY), confirm=lambda tool, args: args.get("text") != "no", recorder=recorder)
            gate.call("read", {"path": "docs/a"})
            gate.call("read", {"path": "secrets/k"})
            gate.call("write_note", {"text": "hi"})
            gate.call("write_note", {"text": "no"})
            gate.call("delete", {})
            if unknown:
                gate.call("send", {"n": 1})
        return path

    def test_the_guard_records_a_plain_yes(self) -> None:
        with open(self.record("r.jsonl"), encoding="utf-8") as handle:
            metas = [json.loads(line)["meta"] for line in handle]
        self.assertEqual([meta.get("x-confirmed") for meta in metas], [None, None, "once", None, None])

    def test_everything_forbidden_blocked_exits_0(self) -> None:
        record = self.record("guarded.jsonl")
        self.assertEqual(run("scope", record, self.policy),
                         (0, "calls: 5\nfindings: 0\ninformation: 4\n" + "".join(BLOCKED_AND_APPROVED), ""))

    def test_an_unknown_outcome_exits_1(self) -> None:
        record = self.record("unknown.jsonl", unknown=True)
        self.assertEqual(run("scope", record, self.policy),
                         (1, "calls: 6\nfindings: 1\ninformation: 4\n" + "".join(BLOCKED_AND_APPROVED) + UNKNOWN, ""))

    def test_a_forbidden_call_that_ran_exits_1(self) -> None:
        record = self.record("guarded.jsonl")
        code, out, err = run("scope", record, self.strict)
        self.assertEqual((code, err), (1, ""))
        self.assertEqual(out.splitlines()[:2], ["calls: 5", "findings: 1"])
        # It ran after a yes (approved) but against the policy audited with: a permission-overreach too.
        self.assertIn("index 2: approved: tool 'write_note' ran after a person's yes\n"
                      "index 2: permission-overreach: tool 'write_note' is not in the declared scope for agent "
                      "'notes'\n", out)
        # A refused call out of scope is blocked, not an overreach.
        self.assertIn("index 3: blocked: tool 'write_note' was refused by the guard: confirmation declined\n", out)

    def test_fail_on_counts_an_information_kind(self) -> None:
        record = self.record("guarded.jsonl")
        code, out, _ = run("scope", record, self.policy, "--fail-on", "blocked")
        self.assertEqual((code, out.splitlines()[:3]), (1, ["calls: 5", "findings: 3", "information: 1"]))
        self.assertEqual(run("audit", record, "--fail-on", "approved")[0], 1)
        self.assertEqual(run("audit", record)[0], 0)
        code, _, err = run("scope", record, self.policy, "--fail-on", "policy-violation")
        self.assertEqual(code, 2)
        self.assertIn("--fail-on: invalid choice: 'policy-violation'", err)

    def test_scope_json_carries_the_kinds(self) -> None:
        record = self.record("unknown.jsonl", unknown=True)
        code, out, _ = run("scope", record, self.policy, "--format", "json")
        document = json.loads(out)
        self.assertEqual(code, 1)
        self.assertEqual((document["counted_findings"], document["information"]), (1, 4))
        self.assertEqual([(f["index"], f["kind"], f["severity"], f["rule"]) for f in document["findings"]], [
            (1, "blocked", "information", "no-secrets"), (2, "approved", "information", None),
            (3, "blocked", "information", None), (4, "blocked", "information", None),
            (5, "unknown-outcome", "finding", None)])

    def test_the_fleet_audit_text_json_sqlite_and_html_carry_the_kinds(self) -> None:
        guarded, unknown = self.record("guarded.jsonl"), self.record("unknown.jsonl", unknown=True)
        for policy in ((), ("--policy", self.policy)):
            with self.subTest(policy=bool(policy)):
                code, out, err = run("audit", guarded, unknown, *policy)
                self.assertEqual((code, err), (1, ""))
                self.assertIn(f"{unknown}: calls 6, findings 1, information 4\n"
                              + "".join("  " + line for line in BLOCKED_AND_APPROVED) + "  " + UNKNOWN, out)
                self.assertIn("findings: 1\ninformation: 8\n", out)
                self.assertIn("findings by kind:\n  unknown-outcome: 1\n", out)
                self.assertIn("information by kind:\n  blocked: 6\n  approved: 2\nsessions with unknown outcomes: 1\n",
                              out)
                self.assertEqual(run("audit", guarded, *policy)[0], 0)  # everything forbidden was blocked
                summary = json.loads(run("audit", guarded, unknown, "--format", "json", *policy)[1])["summary"]
                self.assertEqual((summary["findings_by_kind"], summary["information_by_kind"],
                                  summary["unknown_outcome_files"]),
                                 ({"unknown-outcome": 1}, {"blocked": 6, "approved": 2}, [{"path": unknown, "calls": 1}]))
                database = os.path.join(self.folder, "audit.sqlite")
                self.assertEqual(run("audit", guarded, unknown, "--format", "sqlite", "-o", database, *policy)[0], 1)
                with sqlite3.connect(database) as connection:
                    rows = connection.execute("SELECT kind, severity, count(*) FROM findings GROUP BY kind, severity "
                                              "ORDER BY kind").fetchall()
                connection.close()
                self.assertEqual(rows, [("approved", "information", 2), ("blocked", "information", 6),
                                        ("unknown-outcome", "finding", 1)])
                code, page, _ = run("audit", guarded, unknown, "--format", "html", *policy)
                for kind in ("blocked", "approved", "unknown-outcome"):
                    self.assertIn(f">{kind}<", page)

    def test_a_session_page_carries_the_kinds(self) -> None:
        record = self.record("unknown.jsonl", unknown=True)
        code, page, _ = run("scope", record, self.policy, "--format", "html")
        self.assertEqual(code, 1)
        for kind in ("blocked", "approved", "unknown-outcome"):
            self.assertIn(f">{kind}<", page)
        self.assertIn('<div class="v">1</div><div class="l">findings', page)  # the unknown outcome alone counts
        code, page, _ = run("scope", record, self.policy, "--format", "html", "--fail-on", "blocked")
        self.assertIn('<div class="v">4</div><div class="l">findings', page)


class AsyncApprovalTest(unittest.TestCase):
    """`handle_async` (the async frameworks' door) records the person's yes as `handle` does."""

    def test_an_async_call_records_its_approval(self) -> None:
        import asyncio

        from toolreplay.guard import Approvals

        with tempfile.TemporaryDirectory() as folder:
            approvals = os.path.join(folder, "approvals.jsonl")
            with open(approvals, "w", encoding="utf-8") as handle:
                handle.write('{"id": "docs-writes", "tool": "write_note", "when": [{"arg": "text", "eq": "docs"}]}\n')
            record = os.path.join(folder, "r.jsonl")

            async def write_note(args: dict[str, Any]) -> dict[str, Any]:
                return {"ok": True}

            async def session() -> None:
                with SessionRecorder.open(record) as recorder:
                    gate = Gate({"write_note": lambda text: {"ok": True}}, parse_policy(POLICY),
                                confirm=lambda tool, args: True, recorder=recorder,
                                approvals=Approvals(approvals, root=folder))
                    await gate.handle_async("write_note", {"text": "hi"}, write_note)
                    await gate.handle_async("write_note", {"text": "docs"}, write_note)

            asyncio.run(session())
            with open(record, encoding="utf-8") as handle:
                metas = [json.loads(line)["meta"] for line in handle]
        self.assertEqual([{k: v for k, v in meta.items() if k.startswith("x-")} for meta in metas],
                         [{"x-confirmed": "once"}, {"x-approval": "docs-writes"}])


class RecordMetaTest(unittest.TestCase):
    """What a record's meta names: a remembered approval, shadow decisions; none of it without meta."""

    def scope(self, *records: dict[str, Any], policy: dict[str, Any] | None = None) -> tuple[int, str, str]:
        with tempfile.TemporaryDirectory() as folder:
            session = os.path.join(folder, "s.jsonl")
            with open(session, "w", encoding="utf-8") as handle:
                handle.writelines(json.dumps(record) + "\n" for record in records)
            path = os.path.join(folder, "policy.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(policy or {"agent": "a", "allowed_tools": ["write"]}, handle)
            return run("scope", session, path)

    def test_a_remembered_approval_is_named(self) -> None:
        for key, said in (("x-approval", "remembered approval docs-writes"),
                          ("x-remembered", "remembered as approval docs-writes"),
                          ("x-remember-error", "not remembered: docs-writes")):
            with self.subTest(key):
                record = {"index": 0, "tool": "write", "args": {}, "response": {},
                          "meta": {"outcome": "ran", key: "docs-writes"}}
                self.assertEqual(self.scope(record), (0, f"calls: 1\nfindings: 0\ninformation: 1\nindex 0: approved: "
                                                         f"tool 'write' ran after a person's yes ({said})\n", ""))

    def test_shadow_decisions_are_information_one_each(self) -> None:
        shadows = [{"rule": "strict", "effect": "deny", "reason": "no writes <b>"}, {"rule": "asky", "effect": "ask"},
                   {"rule": 3, "effect": "deny"}, "not a decision"]  # entries of another shape are not read
        record = {"index": 0, "tool": "write", "args": {}, "response": {},
                  "meta": {"outcome": "ran", "x-shadow": shadows}}
        self.assertEqual(self.scope(record), (0, "calls: 1\nfindings: 0\ninformation: 2\n"
                                                 "index 0: shadow: shadow rule strict would deny tool 'write': no "
                                                 "writes <b>\n"
                                                 "index 0: shadow: shadow rule asky would ask for confirmation tool "
                                                 "'write'\n", ""))

    def test_an_ask_that_ran_without_a_yes_on_record_is_a_violation(self) -> None:
        policy = {"agent": "a", "allowed_tools": ["write"],
                  "rules": [{"id": "check", "tools": ["write"], "effect": "ask", "reason": "look first"}]}
        plain = {"index": 0, "tool": "write", "args": {}, "response": {}, "meta": {"outcome": "ran"}}
        said_yes = {"index": 1, "tool": "write", "args": {}, "response": {},
                    "meta": {"outcome": "ran", "x-confirmed": "once"}}
        self.assertEqual(self.scope(plain, said_yes, policy=policy),
                         (1, "calls: 2\nfindings: 1\ninformation: 1\n"
                             "index 0: policy-violation: tool 'write' needs confirmation by rule check: look first\n"
                             "index 1: approved: tool 'write' ran after a person's yes\n", ""))

    def test_without_meta_a_refusal_is_judged_as_before(self) -> None:
        policy = {"agent": "a", "allowed_tools": ["write"],
                  "rules": [{"id": "never", "tools": ["write"], "effect": "deny", "reason": "no"}]}
        refused = {"index": 0, "tool": "write", "args": {}, "response": {"ok": False, "error": "denied by rule never: no"}}
        self.assertEqual(self.scope(refused, policy=policy),
                         (1, "calls: 1\nfindings: 1\nindex 0: policy-violation: tool 'write' denied by rule never: no\n",
                          ""))


if __name__ == "__main__":
    unittest.main()
