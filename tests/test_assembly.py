"""One assembly of a guard: a GuardConfig is validated once and builds each scope's parts."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import unittest
from typing import Any

from toolreplay.errors import ToolReplayError, UsageError
from toolreplay.guard.assembly import Guard, GuardConfig, GuardConfigError, build_guard, build_redactor
from toolreplay.policy.model import Policy, parse_policy

KEY = b"k" * 16
REDACTING = {"agent": "a", "allowed_tools": ["send", "read"], "write_tools": ["send"],
             "redact": {"fields": ["token"]}}


class BuildGuardTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.directory, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def test_wrong_descriptions_are_refused_with_their_message(self) -> None:
        plain = Policy("a", frozenset({"read"}))
        redacting = parse_policy(REDACTING)
        cases: list[tuple[GuardConfig, str]] = [
            (GuardConfig(plain, record="r.jsonl", records="dir"),
             "a guard records to one record file or to a records folder, not both"),
            (GuardConfig(plain, redact_key=KEY), '--redact-key needs a policy with a "redact" section'),
            (GuardConfig(redacting, record="r.jsonl"),
             'the policy\'s "redact" section needs --redact-key FILE (a key of at least 16 bytes, kept off the record)'),
            (GuardConfig(redacting, records="dir", redact_key=b"short"),
             "--redact-key bytes: a redaction key must be at least 16 bytes"),
        ]
        for config, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(GuardConfigError) as caught:
                    build_guard(config)
                self.assertEqual(str(caught.exception), message)
                self.assertIsInstance(caught.exception, UsageError)  # the command line's exit 2

    def test_a_key_file_is_read_once_and_redacts_only_what_is_recorded(self) -> None:
        key = self.write("key", KEY + b"\n")
        policy = self.write("p.json", json.dumps(REDACTING).encode())
        guard = build_guard(GuardConfig(policy, record=os.path.join(self.directory, "r.jsonl"), redact_key=key))
        self.assertEqual(guard.policy.agent, "a")
        assert guard.redactor is not None
        self.assertNotEqual(guard.redactor.args({"token": "s"}), {"token": "s"})
        self.assertEqual(guard.redactor.args({"token": "s"}), build_redactor(
            guard.policy.redact, KEY, recording=True).args({"token": "s"}))  # type: ignore[union-attr]
        self.assertIsNone(build_guard(GuardConfig(policy, redact_key=key)).redactor)  # nothing recorded
        missing = os.path.join(self.directory, "missing")
        with self.assertRaisesRegex(UsageError, "^cannot read .*missing: No such file or directory$"):
            build_guard(GuardConfig(policy, record="r.jsonl", redact_key=missing))

    def test_each_scope_gets_its_part(self) -> None:
        ran: list[dict[str, Any]] = []
        policy = Policy("a", frozenset({"send", "note"}))
        guard = build_guard(GuardConfig(policy, records=self.directory, mutators=("send",), repeatable=("note",),
                                        read_cache=True, approvals=os.path.join(self.directory, "approvals.jsonl"),
                                        confirm=lambda tool, args: True))
        self.assertIsInstance(guard, Guard)
        # per client session: a gate with the guard's options and the session's approvals
        first = guard.gate({"send": lambda **args: ran.append(args) or {"ok": True}, "note": lambda: {}})
        second = guard.gate({"send": lambda **args: ran.append(args) or {"ok": True}, "note": lambda: {}})
        self.assertEqual((first._writes, first._repeatable, first._read_cache),
                         (frozenset({"send", "note"}), frozenset({"note"}), True))
        # each session its own "session" approvals, over the one approvals file
        self.assertIsNot(first._approvals, second._approvals)
        self.assertEqual((first._approvals.path, second._approvals.path), (guard.approvals.path,) * 2)
        self.assertEqual([first.call("send", {"n": 1}), first.call("send", {"n": 1}), second.call("send", {"n": 1})],
                         [{"ok": True}] * 3)
        self.assertEqual(ran, [{"n": 1}, {"n": 1}])  # each session's own idempotency
        # per record: sealed, with the guard's redactor
        with guard.open_record(os.path.join(self.directory, "s.jsonl")) as recorder:
            self.assertIs(recorder.redactor, guard.redactor)

    def test_an_inbox_in_the_guards_own_records_folder_is_made_with_it(self) -> None:
        records = os.path.join(self.directory, "records")  # the listener makes it later: the inbox needs it now
        guard = build_guard(GuardConfig(Policy("a", frozenset({"send"})), records=records, inbox=records + "/"))
        self.assertTrue(os.path.isdir(os.path.join(records, ".toolreplay-inbox")))
        self.assertEqual(os.stat(records).st_mode & 0o777, 0o700)
        self.assertIsNotNone(guard.confirm)
        elsewhere = os.path.join(self.directory, "elsewhere")  # any other folder must exist: a typo is not made
        with self.assertRaisesRegex(ToolReplayError, f"^cannot keep an inbox in {elsewhere}: it is not a folder$"):
            build_guard(GuardConfig(Policy("a", frozenset({"send"})), records=records, inbox=elsewhere))


if __name__ == "__main__":
    unittest.main()
