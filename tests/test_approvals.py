"""Remembered approvals: the file (parsing, exact messages), matching, the store, the gate, the command."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tempfile
import threading
import time
import unittest
from typing import Any
from unittest import mock

from tests.test_cli import run
from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import read_session
from toolreplay.guard import approvals as store
from toolreplay.guard.approvals import Approvals, ApprovalsError, Remember, parse_approval, read_approvals
from toolreplay.guard.gate import ConsoleApprover, Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.mcp.confirm import ClientConfirmation, decision
from toolreplay.policy.model import Policy, parse_policy
from toolreplay.policy.redaction import Redactor, parse_redaction

POLICY = Policy("notes", frozenset({"write_note", "read_note"}), frozenset({"write_note"}))
# a fixed clock: 2026-12-01T19:00:00.000Z
CLOCK = 1796151600 * 1_000_000_000
ID = re.compile(r"[0-9a-f]{12}")


class Person:
    """A confirm callback that counts its questions and gives a fixed answer."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, tool: str, args: dict[str, Any]) -> Any:
        self.asked.append((tool, args))
        return self.answer


class Folder(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.path = os.path.join(self.directory, "approvals.jsonl")

    def write(self, text: str) -> None:
        with open(self.path, "w", encoding="utf-8") as out:
            out.write(text)

    def read(self) -> str:
        with open(self.path, encoding="utf-8") as handle:
            return handle.read()


class FileFormatTest(Folder):
    INVALID = [
        ('{"id": "a", "tool": "t"}', 'an approval has exactly one of "args" (the exact arguments) and "when" '
                                     '(conditions)'),
        ('{"id": "a", "tool": "t", "args": {}, "when": [{"arg": "x", "eq": 1}]}',
         'an approval has exactly one of "args" (the exact arguments) and "when" (conditions)'),
        ('{"tool": "t", "args": {}}', 'field "id" must be letters, digits, "_", "." or "-", not starting "session-"'),
        ('{"id": "session-1", "tool": "t", "args": {}}',
         'field "id" must be letters, digits, "_", "." or "-", not starting "session-"'),
        ('{"id": "a b", "tool": "t", "args": {}}',
         'field "id" must be letters, digits, "_", "." or "-", not starting "session-"'),
        ('{"id": "a", "tool": "", "args": {}}', 'field "tool" must be a tool name (a non-empty string)'),
        ('{"id": "a", "tool": "t", "args": []}', 'field "args" must be an object (the call\'s arguments)'),
        ('{"id": "a", "tool": "t", "args": {}, "by": "me"}',
         'unknown field "by" (known: args, created, id, note, redacted, tool, when)'),
        ('{"id": "a", "tool": "t", "args": {}, "redacted": false}', 'field "redacted" is true, with "args", or left out'),
        ('{"id": "a", "tool": "t", "when": [{"arg": "x", "eq": 1}], "redacted": true}',
         'field "redacted" is true, with "args", or left out'),
        ('{"id": "a", "tool": "t", "args": {}, "note": 1}', 'field "note" must be a string'),
        ('{"id": "a", "tool": "t", "when": []}', '"when" must be a non-empty array of conditions'),
        ('{"id": "a", "tool": "t", "when": [{"after": "t"}]}',
         '"when" condition 1: only argument conditions ("arg") are allowed here, not a session\'s history'),
        ('{"id": "a", "tool": "t", "when": [{"arg": "p", "under": ["/etc"]}]}',
         '"when" condition 1: operator "under": folder "/etc" must be a relative path inside the working folder'),
        ('{"id": "a", "tool": "t", "when": [{"arg": "p", "near": 1}]}',
         '"when" condition 1: unknown operator "near" (known: under, glob, regex, host, eq, in, lt, le, gt, ge, '
         'max_length, min_length)'),
        ('[1]', 'an approval must be a JSON object'),
        ('{"id": "a", "id": "b", "tool": "t", "args": {}}', 'duplicate key "id"'),
        ('{"id": "a", "tool": "t", "args": {}', "invalid JSON: Expecting ',' delimiter (column 36)"),
    ]

    def test_each_mistake_names_its_line(self) -> None:
        for line, message in self.INVALID:
            with self.subTest(line=line):
                self.write('{"id": "ok", "tool": "t", "args": {}}\n\n' + line + "\n")
                with self.assertRaises(InputError) as caught:
                    read_approvals(self.path)
                self.assertEqual(str(caught.exception), f"{self.path}:3: {message}")

    def test_a_repeated_id_names_both_lines(self) -> None:
        self.write('{"id": "a", "tool": "t", "args": {}}\n{"id": "a", "tool": "u", "args": {}}\n')
        with self.assertRaises(InputError) as caught:
            read_approvals(self.path)
        self.assertEqual(str(caught.exception), f"{self.path}:2: approval id a is used by line 1")

    def test_a_missing_file_holds_no_approval(self) -> None:
        self.assertEqual(read_approvals(self.path), [])

    def test_a_file_in_a_missing_folder_is_refused_at_once(self) -> None:
        path = os.path.join(self.directory, "missing", "approvals.jsonl")
        with self.assertRaises(UsageError) as caught:
            Approvals(path)
        self.assertEqual(str(caught.exception), f"cannot keep approvals in {path}: its folder does not exist")

    def test_a_malformed_file_stops_a_store_from_opening(self) -> None:
        self.write("not json\n")
        with self.assertRaises(InputError) as caught:
            Approvals(self.path)
        self.assertEqual(str(caught.exception), f"{self.path}:1: invalid JSON: Expecting value (column 1)")


class MatchingTest(unittest.TestCase):
    def approval(self, **fields: Any) -> Any:
        return parse_approval({"id": "a", "tool": "write_file", **fields}, ("srv", "project"))

    def test_exact_arguments_compare_in_canonical_form(self) -> None:
        approval = self.approval(args={"path": "docs/a.md", "size": 1})
        self.assertTrue(approval.matches("write_file", {"size": 1.0, "path": "docs/a.md"}))
        self.assertFalse(approval.matches("write_file", {"path": "docs/a.md", "size": 2}))
        self.assertFalse(approval.matches("write_file", {"path": "docs/a.md"}))
        self.assertFalse(approval.matches("write_file", {"path": "docs/a.md", "size": 1, "mode": "w"}))
        self.assertFalse(approval.matches("write_note", {"path": "docs/a.md", "size": 1}))
        self.assertFalse(approval.matches("write_file", {"path": "docs/a.md", "size": True}))

    def test_conditions_use_the_rules_vocabulary_and_all_must_hold(self) -> None:
        approval = self.approval(when=[{"arg": "path", "under": ["docs"]}, {"arg": "url", "host": ["example.com"]},
                                       {"arg": "mode", "in": ["w", "a"]}])
        good = {"path": "docs/x/../y.md", "url": "https://EXAMPLE.com/", "mode": "a"}
        self.assertTrue(approval.matches("write_file", good))
        self.assertTrue(approval.matches("write_file", {**good, "path": "/srv/project/docs/z"}))  # the root
        for changed in ({"path": "docs/../etc/passwd"}, {"url": "https://example.com.evil.test/"}, {"mode": "x"}):
            with self.subTest(changed=changed):
                self.assertFalse(approval.matches("write_file", {**good, **changed}))

    def test_a_condition_that_cannot_be_evaluated_does_not_hold(self) -> None:
        approval = self.approval(when=[{"arg": "path", "under": ["docs"]}])
        for args in ({}, {"path": 3}, {"path": "docs\\a"}, {"path": "../docs/a"}, {"path": "/etc/docs"}):
            with self.subTest(args=args):
                self.assertFalse(approval.matches("write_file", args))


class StoreTest(Folder):
    def test_always_appends_one_line_written_whole(self) -> None:
        approvals = Approvals(self.path, clock=lambda: CLOCK)
        first = approvals.remember("write_note", {"text": "hi", "n": 1}, "always")
        assert first is not None
        self.assertRegex(first, ID)
        self.assertEqual(self.read(), '{"args":{"n":1,"text":"hi"},"created":"2026-12-01T19:00:00.000Z",'
                                      f'"id":"{first}","tool":"write_note"}}\n')
        # the same call again: the same approval, nothing added
        self.assertEqual(approvals.remember("write_note", {"n": 1.0, "text": "hi"}, "always"), first)
        second = approvals.remember("write_note", {"text": "other"}, "always")
        self.assertEqual([a.id for a in read_approvals(self.path)], [first, second])
        self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o600)
        self.assertEqual(sorted(os.listdir(self.directory)), ["approvals.jsonl", "approvals.jsonl.lock"])
        self.assertEqual(approvals.find("write_note", {"text": "other"}), second)
        self.assertIsNone(approvals.find("write_note", {"text": "third"}))

    def test_lines_written_by_hand_are_kept_as_written(self) -> None:
        self.write('{"id": "docs", "tool": "write_file",\t"when": [{"arg": "path", "under": ["docs"]}]}')
        approvals = Approvals(self.path, clock=lambda: CLOCK)
        new = approvals.remember("write_note", {}, "always")
        self.assertEqual(self.read(), '{"id": "docs", "tool": "write_file",\t"when": [{"arg": "path", "under": '
                                      '["docs"]}]}\n{"args":{},"created":"2026-12-01T19:00:00.000Z",'
                                      f'"id":"{new}","tool":"write_note"}}\n')

    def test_session_approvals_stay_in_memory(self) -> None:
        approvals = Approvals(self.path)
        first = approvals.remember("write_note", {"text": "hi"}, "session")
        assert first is not None
        self.assertRegex(first, "^session-[0-9a-f]{12}$")
        self.assertEqual(approvals.remember("write_note", {"text": "hi"}, "session"), first)
        self.assertEqual(approvals.find("write_note", {"text": "hi"}), first)
        self.assertIsNone(Approvals(self.path).find("write_note", {"text": "hi"}))
        self.assertFalse(os.path.exists(self.path))
        self.assertIsNone(approvals.remember("write_note", {"text": "x"}, "once"))
        self.assertIsNone(approvals.find("write_note", {"text": "x"}))

    def test_always_without_a_file_cannot_be_remembered(self) -> None:
        with self.assertRaises(ApprovalsError) as caught:
            Approvals().remember("write_note", {}, "always")
        self.assertEqual(str(caught.exception), "no approvals file to remember it in")

    def test_a_store_sees_changes_made_by_others(self) -> None:
        approvals = Approvals(self.path)
        other = Approvals(self.path)
        made = other.remember("write_note", {"text": "hi"}, "always")
        self.assertEqual(approvals.find("write_note", {"text": "hi"}), made)
        code, out, err = run("approvals", "revoke", str(made), "--file", self.path)
        self.assertEqual((code, err), (0, ""))
        self.assertIsNone(approvals.find("write_note", {"text": "hi"}))

    def test_a_file_made_malformed_while_open_applies_no_approval(self) -> None:
        self.write('{"id": "a", "tool": "write_note", "args": {}}\n')
        approvals = Approvals(self.path)
        self.assertEqual(approvals.find("write_note", {}), "a")
        self.write('{"id": "a", "tool": "write_note", "args": {}}\n{"id": "b"}\n')
        self.assertIsNone(approvals.find("write_note", {}))
        self.assertEqual(approvals.error, f'{self.path}:2: field "tool" must be a tool name (a non-empty string)')
        with self.assertRaises(ApprovalsError) as caught:
            approvals.remember("write_note", {"x": 1}, "always")
        self.assertEqual(str(caught.exception), f'{self.path}:2: field "tool" must be a tool name (a non-empty '
                                                'string)')

    def test_concurrent_appends_lose_nothing(self) -> None:
        """Each writer reads, adds its line and writes the file whole; a slow write widens the window in which
        an unlocked writer would overwrite another's line."""
        real = store._write_whole

        def slow(path: str, data: bytes) -> None:
            time.sleep(0.02)
            real(path, data)

        stores = [Approvals(self.path) for _ in range(8)]
        made: list[str | None] = [None] * 8

        def remember(number: int) -> None:
            made[number] = stores[number].remember("write_note", {"n": number}, "always")

        with mock.patch.object(store, "_write_whole", slow):
            threads = [threading.Thread(target=remember, args=(number,)) for number in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        found = {approval.id: json.loads(approval.args or b"") for approval in read_approvals(self.path)}
        self.assertEqual(found, {made[number]: {"n": number} for number in range(8)})


class GateTest(Folder):
    def setUp(self) -> None:
        super().setUp()
        self.notes: list[str] = []

    def gate(self, person: Any, policy: Policy = POLICY, approvals: Approvals | None = None,
             recorder: SessionRecorder | None = None) -> Gate:
        tools = {"write_note": lambda text: self.notes.append(text) or {"ok": True},
                 "read_note": lambda: {"notes": list(self.notes)}}
        return Gate(tools, policy, confirm=person, approvals=approvals, recorder=recorder)

    def metas(self, path: str) -> list[dict[str, Any]]:
        with open(path, "rb") as handle:
            return [{key: value for key, value in (record.meta or {}).items() if key.startswith("x-")}
                    for record in read_session(handle, path)]

    def test_an_answer_remembered_always_is_not_asked_again_in_the_next_session(self) -> None:
        record = os.path.join(self.directory, "one.jsonl")
        person = Person(Remember("always"))
        with SessionRecorder.open(record, sealed=True) as recorder:
            self.assertEqual(self.gate(person, approvals=Approvals(self.path), recorder=recorder).call(
                "write_note", {"text": "hi"}), {"ok": True})
        (approval,) = read_approvals(self.path)
        self.assertEqual(self.metas(record), [{"x-remembered": approval.id}])
        nobody = Person(False)
        record = os.path.join(self.directory, "two.jsonl")
        with SessionRecorder.open(record, sealed=True) as recorder:
            gate = self.gate(nobody, approvals=Approvals(self.path), recorder=recorder)
            self.assertFalse(gate.needs_confirmation("write_note", {"text": "hi"}))
            self.assertTrue(gate.needs_confirmation("write_note", {"text": "other"}))
            self.assertEqual(gate.call("write_note", {"text": "hi"}), {"ok": True})
            self.assertEqual(gate.call("write_note", {"text": "other"}), {"ok": False, "error": "confirmation declined"})
        self.assertEqual(nobody.asked, [("write_note", {"text": "other"})])
        self.assertEqual(self.metas(record), [{"x-approval": approval.id}, {}])
        self.assertEqual(self.notes, ["hi", "hi"])

    def test_a_session_answer_covers_identical_calls_of_this_gate_only(self) -> None:
        policy = Policy("notes", frozenset({"write_note"}), frozenset({"write_note"}),
                        repeatable_tools=frozenset({"write_note"}))
        person = Person(Remember("session"))
        gate = self.gate(person, policy, Approvals(self.path))
        for _ in range(3):
            self.assertEqual(gate.call("write_note", {"text": "hi"}), {"ok": True})
        self.assertEqual(len(person.asked), 1)
        self.assertEqual(self.notes, ["hi", "hi", "hi"])
        self.assertFalse(os.path.exists(self.path))
        again = Person(Remember("once"))
        self.gate(again, policy, Approvals(self.path)).call("write_note", {"text": "hi"})
        self.assertEqual(len(again.asked), 1)

    def test_gates_sharing_one_store_share_always_but_not_session_approvals(self) -> None:
        policy = Policy("notes", frozenset({"write_note"}), frozenset({"write_note"}))
        store = Approvals(self.path)  # one store behind every client session (the listener's)
        first = self.gate(Person(Remember("session")), policy, store)
        self.assertEqual(first.call("write_note", {"text": "hi"}), {"ok": True})
        nobody = Person(False)
        second = self.gate(nobody, policy, store)
        self.assertEqual(second.call("write_note", {"text": "hi"}), {"ok": False, "error": "confirmation declined"})
        self.assertEqual(nobody.asked, [("write_note", {"text": "hi"})])
        self.assertEqual(self.gate(Person(Remember("always")), policy, store).call("write_note", {"text": "x"}),
                         {"ok": True})
        self.assertEqual(self.gate(Person(False), policy, store).call("write_note", {"text": "x"}), {"ok": True})
        self.assertEqual(self.notes, ["hi", "x", "x"])

    def test_an_approval_answers_confirmation_and_nothing_else(self) -> None:
        self.write('{"id": "any-note", "tool": "write_note", "when": [{"arg": "text", "min_length": 0}]}\n'
                   '{"id": "secret", "tool": "delete_all", "args": {}}\n')
        policy = parse_policy({"agent": "notes", "allowed_tools": ["write_note", "read_note"],
                               "write_tools": ["write_note"], "limits": {"max_steps": 3},
                               "rules": [{"id": "no-secrets", "tools": ["write_note"], "effect": "deny",
                                          "reason": "no secrets", "when": [{"arg": "text", "eq": "secret"}]}]})
        gate = self.gate(Person(False), policy, Approvals(self.path))
        self.assertEqual(gate.call("delete_all", {}), {"ok": False, "error": "tool not allowed: delete_all"})
        self.assertEqual(gate.call("write_note", {"text": "secret"}),
                         {"ok": False, "error": "denied by rule no-secrets: no secrets"})
        self.assertEqual(gate.call("write_note", {"text": "fine"}), {"ok": True})
        self.assertEqual(gate.call("write_note", {"text": "more"}), {"ok": False, "error": "budget exceeded: max_steps"})
        self.assertEqual(self.notes, ["fine"])

    def test_an_approval_answers_an_ask_rule(self) -> None:
        policy = parse_policy({"agent": "notes", "allowed_tools": ["write_note", "read_note"],
                               "rules": [{"id": "look", "tools": ["read_note"], "effect": "ask", "reason": "ask"}]})
        self.write('{"id": "reads", "tool": "read_note", "args": {}}\n')
        person = Person(False)
        self.assertEqual(self.gate(person, policy, Approvals(self.path)).call("read_note", {}), {"notes": []})
        self.assertEqual(self.gate(person, policy).call("read_note", {}),
                         {"ok": False, "error": "confirmation declined"})
        self.assertEqual(len(person.asked), 1)

    def test_with_a_redacting_record_the_file_holds_no_secret(self) -> None:
        key = b"k" * 16
        redactor = Redactor(parse_redaction({"builtin": False, "fields": ["token"]}), key)
        secret = {"text": "hi", "token": "s3cret-value"}
        record = os.path.join(self.directory, "r.jsonl")
        with SessionRecorder.open(record, redactor=redactor) as recorder:
            gate = Gate({"write_note": lambda text, token: {"ok": True}}, POLICY, confirm=Person(Remember("always")),
                        approvals=Approvals(self.path, redact=redactor.args), recorder=recorder)
            self.assertEqual(gate.call("write_note", secret), {"ok": True})
        self.assertNotIn("s3cret", self.read())
        (approval,) = read_approvals(self.path)
        self.assertEqual(approval.describe(), f'{approval.id} write_note args {{"text":"hi","token":'
                                              f'"{redactor.args(secret)["token"]}"}} created '
                                              f'{json.dumps(approval.fields["created"])} redacted')
        other_key = Redactor(parse_redaction({"builtin": False, "fields": ["token"]}), b"j" * 16)
        for redact, args, found in ((redactor.args, secret, approval.id),
                                    (redactor.args, {**secret, "token": "another"}, None),
                                    (other_key.args, secret, None),  # another key: the hash is not the same
                                    (None, secret, None)):  # no redactor: a redacted approval matches nothing
            with self.subTest(args=args, redact=redact):
                self.assertEqual(Approvals(self.path, redact=redact).find("write_note", args), found)

    def test_without_a_record_the_file_is_redacted_as_a_record_would_be(self) -> None:
        redacting = parse_policy({"agent": "notes", "allowed_tools": ["write_note"], "write_tools": ["write_note"],
                                  "redact": {"builtin": False, "fields": ["token"]}})
        assert redacting.redact is not None
        redactor = Redactor(redacting.redact, b"k" * 16)
        secret = {"text": "hi", "token": "s3cret-value"}
        ran: list[dict[str, Any]] = []
        tools = {"write_note": lambda **args: ran.append(args) or {"ok": True}}
        gate = Gate(tools, redacting, confirm=Person(Remember("always")),
                    approvals=Approvals(self.path, redactor=redactor))  # no recorder: only approvals are written
        self.assertEqual(gate.call("write_note", secret), {"ok": True})
        self.assertNotIn("s3cret", self.read())
        (approval,) = read_approvals(self.path)
        self.assertEqual((approval.redacted, approval.fields["args"]), (True, redactor.args(secret)))
        # a later gate on the file: the same call is not asked again, another secret is
        person = Person(False)
        later = Gate(tools, redacting, confirm=person, approvals=Approvals(self.path, redactor=redactor))
        self.assertEqual(later.call("write_note", secret), {"ok": True})
        self.assertEqual(later.call("write_note", {**secret, "token": "other"}),
                         {"ok": False, "error": "confirmation declined"})
        self.assertEqual((len(ran), person.asked), (2, [("write_note", {**secret, "token": "other"})]))

    def test_the_gate_redacts_the_file_as_its_record_or_does_not_start(self) -> None:
        redacting = parse_policy({"agent": "notes", "allowed_tools": ["write_note"], "write_tools": ["write_note"],
                                  "redact": {"builtin": False, "fields": ["token"]}})
        assert redacting.redact is not None
        redactor = Redactor(redacting.redact, b"k" * 16)
        secret = {"text": "hi", "token": "s3cret-value"}
        tools = {"write_note": lambda **args: {"ok": True}}
        record = os.path.join(self.directory, "r.jsonl")
        with SessionRecorder.open(record, redactor=redactor) as recorder:  # the store takes the record's redactor
            approvals = Approvals(self.path)
            gate = Gate(tools, redacting, confirm=Person(Remember("always")), approvals=approvals, recorder=recorder)
            self.assertEqual(gate.call("write_note", secret), {"ok": True})
            self.assertIs(approvals.redactor, redactor)
            Gate(tools, redacting, approvals=Approvals(self.path, redactor=Redactor(redacting.redact, b"k" * 16)),
                 recorder=recorder)  # an equal redactor (same section, same key) is the same
            for approvals, message in (
                    (Approvals(self.path, redactor=Redactor(redacting.redact, b"j" * 16)),
                     "the approvals and the record redact differently: give both the same redactor"),
                    (Approvals(self.path, redactor=Redactor(parse_redaction({}), b"k" * 16)),
                     "the approvals and the record redact differently: give both the same redactor")):
                with self.subTest(message), self.assertRaises(ValueError) as caught:
                    Gate(tools, redacting, approvals=approvals, recorder=recorder)
                self.assertEqual(str(caught.exception), message)
        self.assertNotIn("s3cret", self.read())
        with self.assertRaises(ValueError) as caught:  # nothing to redact the file with: the gate does not start
            Gate(tools, redacting, approvals=Approvals(self.path))
        self.assertEqual(str(caught.exception), f"the policy redacts, and the approvals in {self.path} would hold "
                                                "secrets in clear text: give Approvals the record's redactor (redactor=)")
        Gate(tools, redacting, approvals=Approvals())  # session approvals only: nothing is written

    def test_remembering_needs_approvals_and_a_failure_to_remember_is_recorded(self) -> None:
        self.assertEqual(self.gate(Person(Remember("always"))).call("write_note", {"text": "a"}), {"ok": True})
        record = os.path.join(self.directory, "r.jsonl")
        with SessionRecorder.open(record) as recorder:
            gate = self.gate(Person(Remember("always")), approvals=Approvals(), recorder=recorder)
            self.assertEqual(gate.call("write_note", {"text": "b"}), {"ok": True})
        self.assertEqual(self.metas(record), [{"x-remember-error": "no approvals file to remember it in"}])
        self.assertEqual(self.notes, ["a", "b"])


class ConsoleTest(unittest.TestCase):
    def test_the_console_approver_offers_remembering_when_asked_to(self) -> None:
        answers, prompts = io.StringIO("s\nalways\ny\nA\nno\n"), io.StringIO()
        approve = ConsoleApprover(answers, prompts, remember=True)
        self.assertEqual([approve("write_note", {"n": n}) for n in range(5)],
                         [Remember("session"), Remember("always"), True, Remember("always"), False])
        self.assertEqual(prompts.getvalue(), "".join(
            f'approve write_note {{"n":{n}}}? [y/N/s(ession)/a(lways)] ' for n in range(5)))
        plain = ConsoleApprover(io.StringIO("a\n"), io.StringIO())  # not offered: a is no yes
        self.assertIs(plain("write_note", {}), False)


class AnswerTest(unittest.TestCase):
    def test_the_question_offers_remembering_only_when_asked_to(self) -> None:
        sent: list[dict[str, Any]] = []
        confirmation = ClientConfirmation(sent.append)
        confirmation.elicitation = True
        confirmation.remember = ("once", "session", "always")
        call = mock.Mock(message={"id": 1}, key="1", target={"id": 1})
        threading.Thread(target=confirmation.ask, args=("write_note", {"text": "hi"}, call), daemon=True).start()
        for _ in range(200):
            if sent:
                break
            time.sleep(0.01)
        confirmation.close()
        self.assertEqual(sent[0]["params"]["requestedSchema"]["properties"]["remember"], {
            "type": "string", "title": "Remember this answer", "enum": ["once", "session", "always"],
            "default": "once", "description": "once: this call only; session: identical calls until this "
                                              "session ends; always: identical calls from now on (kept in the approvals file)"})

    def test_what_an_answer_means(self) -> None:
        offered = ("once", "session", "always")
        for answer, expected in (
                ({"action": "accept", "content": {"approve": True}}, True),
                ({"action": "accept", "content": {"approve": True, "remember": "once"}}, True),
                ({"action": "accept", "content": {"approve": True, "remember": "session"}}, Remember("session")),
                ({"action": "accept", "content": {"approve": True, "remember": "always"}}, Remember("always")),
                ({"action": "accept", "content": {"approve": True, "remember": "forever"}}, True),
                ({"action": "accept", "content": {"approve": False, "remember": "always"}}, False),
                ({"action": "decline", "content": {"approve": True, "remember": "always"}}, False)):
            with self.subTest(answer=answer):
                self.assertEqual(decision(answer, offered), expected)
        # a scope that was not offered is a plain yes
        self.assertIs(decision({"action": "accept", "content": {"approve": True, "remember": "always"}},
                               ("once", "session")), True)


class CommandTest(Folder):
    def test_list_shows_each_approval_escaped_in_file_order(self) -> None:
        self.write('{"id": "z", "tool": "write_note", "args": {"text": "\\u001b[2J\\u202e"}, "created": "2026"}\n'
                   '{"id": "a", "tool": "bad\\u001bname", "when": [{"arg": "p", "glob": ["*.md"]}], '
                   '"note": "by hand"}\n')
        self.assertEqual(run("approvals", "list", "--file", self.path), (0, (
            'approvals: 2\n'
            'z write_note args {"text":"\\u001b[2J\\u202e"} created "2026"\n'
            'a "bad\\u001bname" when [{"arg":"p","glob":["*.md"]}] note "by hand"\n'), ""))
        self.assertEqual(run("approvals", "list", "--file", os.path.join(self.directory, "none.jsonl")),
                         (0, "approvals: 0\n", ""))

    def test_revoke_removes_one_line_and_keeps_the_others(self) -> None:
        self.write('{"id": "a", "tool": "t", "args": {}}\n{"id": "b", "tool": "t", "args": {"x": 1}}\n'
                   '{"id": "c", "tool": "t", "args": {"x": 2}}\n')
        self.assertEqual(run("approvals", "revoke", "b", "--file", self.path),
                         (0, 'revoked b t args {"x":1}\n', ""))
        self.assertEqual(self.read(), '{"id": "a", "tool": "t", "args": {}}\n{"id": "c", "tool": "t", "args": '
                                      '{"x": 2}}\n')

    def test_errors_are_one_line_and_exit_2(self) -> None:
        self.write('{"id": "a", "tool": "t", "args": {}}\n')
        self.assertEqual(run("approvals", "revoke", "b", "--file", self.path),
                         (2, "", f"error: no approval b in {self.path}\n"))
        self.write('{"id": "a", "tool": "t", "args": {}}\n{"id": "a", "tool": "t"}\n')
        for command in ("list", "revoke a"):
            with self.subTest(command=command):
                self.assertEqual(run("approvals", *command.split(), "--file", self.path), (2, "", (
                    f'error: {self.path}:2: an approval has exactly one of "args" (the exact arguments) and "when" '
                    '(conditions)\n')))
        self.assertEqual(self.read(), '{"id": "a", "tool": "t", "args": {}}\n{"id": "a", "tool": "t"}\n')


if __name__ == "__main__":
    unittest.main()
