"""The approvals inbox: request files, decisions taken once, timeouts, stale ids, redaction, the gate's record."""

from __future__ import annotations

import os
import stat
import tempfile
import threading
import time
import unittest
from typing import Any

from toolreplay.format.canonical import canonical_json as json_text
from toolreplay.format.records import read_session
from toolreplay.guard.approvals import Approvals, Decided, Remember
from toolreplay.guard.gate import Gate
from toolreplay.guard.inbox import Inbox, InboxError, Request, decide, inbox_folder, pending_requests
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy
from toolreplay.policy.redaction import Redactor, parse_redaction

POLICY = Policy("notes", frozenset({"write_note", "read_note"}), frozenset({"write_note"}))


def wait_for_request(records: str, timeout: float = 5.0, now: float | None = None) -> Request:
    """The first call waiting in the folder's inbox (fails the test when none comes)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for item in pending_requests(records, now):
            if isinstance(item, Request):
                return item
        time.sleep(0.005)
    raise AssertionError("no request came")


class Asking:
    """Runs `inbox.ask` on a thread; `result` is its Decided, or the exception it raised."""

    def __init__(self, inbox: Inbox, tool: str = "write_note", args: dict[str, Any] | None = None) -> None:
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, args=(inbox, tool, args or {"text": "hi"}))
        self.thread.start()

    def _run(self, inbox: Inbox, tool: str, args: dict[str, Any]) -> None:
        try:
            self.result = inbox.ask(tool, args, rule="ask-writes")
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.result = exc

    def join(self) -> Any:
        self.thread.join(10)
        return self.result


class InboxTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.records = self.tmp.name

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_request_file_is_private_and_says_the_call(self) -> None:
        asking = Asking(Inbox(self.records, session="s1.jsonl", front_end="library"))
        request = wait_for_request(self.records)
        self.assertEqual(stat.S_IMODE(os.stat(inbox_folder(self.records)).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(request.path).st_mode), 0o600)
        self.assertEqual((request.tool, request.args, request.rule, request.session, request.front_end),
                         ("write_note", {"text": "hi"}, "ask-writes", "s1.jsonl", "library"))
        self.assertRegex(request.id, r"^[A-Za-z0-9_-]{24}$")
        decide(self.records, request.id, "approve", "once", "alice")
        self.assertEqual(asking.join(), Decided(True, "alice"))
        self.assertEqual(os.listdir(inbox_folder(self.records)), [])  # both files gone

    def test_each_verdict_and_scope_reaches_the_call(self) -> None:
        cases = [("approve", "once", Decided(True, "bob")), ("approve", "session", Decided(Remember("session"), "bob")),
                 ("approve", "always", Decided(Remember("always"), "bob")), ("deny", "once", Decided(False, "bob")),
                 ("deny", "always", Decided(False, "bob"))]
        for verdict, scope, expected in cases:
            with self.subTest(verdict=verdict, scope=scope):
                asking = Asking(Inbox(self.records))
                decision = decide(self.records, wait_for_request(self.records).id, verdict, scope, "bob")
                self.assertEqual(decision.scope, scope if verdict == "approve" else "once")
                self.assertEqual(asking.join(), expected)

    def test_a_decision_is_taken_once(self) -> None:
        clock = [1000.0]
        inbox = Inbox(self.records, clock=lambda: clock[0], sleep=lambda _: time.sleep(0.001))
        asking = Asking(inbox)
        request = wait_for_request(self.records, now=clock[0])
        # two consoles decide together: exactly one wins, the other is told
        outcomes: list[str] = []
        barrier = threading.Barrier(8)

        def console(verdict: str) -> None:
            barrier.wait()
            try:
                outcomes.append(decide(self.records, request.id, verdict, "once", verdict, clock=lambda: clock[0]).by)
            except InboxError as exc:
                outcomes.append(str(exc))
        threads = [threading.Thread(target=console, args=("approve" if n % 2 else "deny",)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [item for item in outcomes if item in ("approve", "deny")]
        self.assertEqual(len(winners), 1, outcomes)
        # a loser is told it was decided, or (when the call already went on) that it waits no more
        refusals = {f"the call {request.id} was already decided",
                    f"no call waits as {request.id} any more (answered, timed out or gone)"}
        self.assertLessEqual(set(outcomes) - set(winners), refusals)
        self.assertEqual(len(outcomes), 8)
        self.assertEqual(asking.join(), Decided(winners[0] == "approve", winners[0]))

    def test_a_timeout_refuses_and_closes_the_request(self) -> None:
        clock = [1000.0]

        def sleep(_: float) -> None:
            clock[0] += 1

        inbox = Inbox(self.records, timeout=5, clock=lambda: clock[0], sleep=sleep)
        with self.assertRaisesRegex(TimeoutError, "^nobody decided within 5 seconds$"):
            inbox.ask("write_note", {"text": "hi"})
        self.assertEqual(os.listdir(inbox_folder(self.records)), [])

    def test_stale_and_unknown_ids_are_refused(self) -> None:
        asking = Asking(Inbox(self.records))
        request = wait_for_request(self.records)
        decide(self.records, request.id, "deny", "once", "carol")
        asking.join()
        cases = [(request.id, f"no call waits as {request.id} any more (answered, timed out or gone)"),
                 ("../../etc/passwd", "no such waiting call (the id is not an inbox id)"),
                 ("A" * 24, "no call waits as " + "A" * 24 + " any more (answered, timed out or gone)")]
        for request_id, message in cases:
            with self.subTest(request_id=request_id):
                with self.assertRaises(InboxError) as caught:
                    decide(self.records, request_id, "approve", "once", "carol")
                self.assertEqual(str(caught.exception), message)
        self.assertEqual(os.listdir(inbox_folder(self.records)), [])  # no decision left behind

    def test_a_request_past_its_deadline_is_not_listed_nor_decided(self) -> None:
        clock = [1000.0]
        inbox = Inbox(self.records, timeout=5, clock=lambda: clock[0], sleep=lambda _: time.sleep(0.001))
        asking = Asking(inbox)
        request = wait_for_request(self.records, now=clock[0])
        self.assertEqual(list(pending_requests(self.records, now=1006.0)), [])
        with self.assertRaisesRegex(InboxError, "past its deadline"):
            decide(self.records, request.id, "approve", "once", "dave", clock=lambda: 1006.0)
        clock[0] = 1006.0
        self.assertIsInstance(asking.join(), TimeoutError)

    def test_bad_verdicts_and_scopes_are_refused(self) -> None:
        for verdict, scope, message in [("yes", "once", "unknown verdict 'yes': approve or deny"),
                                        ("approve", "forever", "unknown scope 'forever': one of once, session, always")]:
            with self.subTest(verdict=verdict), self.assertRaises(InboxError) as caught:
                decide(self.records, "A" * 24, verdict, scope, "eve")
            self.assertEqual(str(caught.exception), message)

    def test_a_malformed_decision_approves_nothing(self) -> None:
        asking = Asking(Inbox(self.records))
        request = wait_for_request(self.records)
        with open(os.path.join(inbox_folder(self.records), request.id + ".decision.json"), "w") as handle:
            handle.write(json_text({"id": request.id, "verdict": "approve", "scope": "once"}))  # no "by"
        result = asking.join()
        self.assertIsInstance(result, InboxError)
        self.assertEqual(str(result), f"malformed decision for {request.id}: field \"by\" (who decided) is a string")

    def test_an_unreadable_request_is_listed_as_such(self) -> None:
        os.makedirs(inbox_folder(self.records))
        path = os.path.join(inbox_folder(self.records), "B" * 24 + ".request.json")
        with open(path, "w") as handle:
            handle.write('{"id": "' + "B" * 24 + '", "tool": ')
        [item] = list(pending_requests(self.records))
        self.assertIsInstance(item, tuple)
        self.assertEqual(item[0], path)
        self.assertTrue(item[1].startswith("unreadable request: "), item)

    def test_the_request_holds_the_arguments_redacted(self) -> None:
        redactor = Redactor(parse_redaction({"builtin": False, "fields": ["token"]}), b"k" * 16)
        asking = Asking(Inbox(self.records, redactor=redactor), args={"token": "s3cret-value", "text": "hi"})
        request = wait_for_request(self.records)
        with open(request.path, encoding="utf-8") as handle:
            data = handle.read()
        self.assertNotIn("s3cret-value", data)
        self.assertEqual(request.args, redactor.args({"token": "s3cret-value", "text": "hi"}))
        self.assertEqual(request.args["text"], "hi")
        decide(self.records, request.id, "deny", "once", "frank")
        asking.join()

    def test_not_a_folder(self) -> None:
        with self.assertRaisesRegex(InboxError, "it is not a folder$"):
            Inbox(os.path.join(self.records, "missing"))


class GateWithInboxTest(unittest.TestCase):
    """The gate records who decided (`x-decided-by`), and how (`x-remembered` for a remembered yes)."""

    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.records = self.tmp.name
        self.path = os.path.join(self.records, "s.jsonl")
        self.notes: list[str] = []

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def _gate(self, approvals: Approvals | None = None) -> tuple[Gate, SessionRecorder]:
        recorder = SessionRecorder.open(self.path)
        tools = {"write_note": lambda text: self.notes.append(text) or {"ok": True}}
        return Gate(tools, POLICY, confirm=Inbox(self.records, session="s.jsonl"), recorder=recorder,
                    approvals=approvals), recorder

    def _call_and_decide(self, gate: Gate, text: str, verdict: str, scope: str, by: str) -> dict[str, Any]:
        result: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: result.update(gate.call("write_note", {"text": text})))
        thread.start()
        decide(self.records, wait_for_request(self.records).id, verdict, scope, by)
        thread.join(10)
        return result

    def test_approved_and_denied_calls_name_who_decided(self) -> None:
        gate, recorder = self._gate(Approvals(os.path.join(self.records, "approvals.jsonl")))
        self.assertEqual(self._call_and_decide(gate, "one", "approve", "once", "alice"), {"ok": True})
        self.assertEqual(self._call_and_decide(gate, "two", "deny", "once", "bob"),
                         {"ok": False, "error": "confirmation declined"})
        self.assertEqual(self._call_and_decide(gate, "three", "approve", "session", "carol"), {"ok": True})
        recorder.close()
        self.assertEqual(self.notes, ["one", "three"])
        with open(self.path, "rb") as handle:
            records = list(read_session(handle, self.path))
        metas = [{key: value for key, value in (record.meta or {}).items() if key.startswith("x-")}
                 for record in records]
        self.assertEqual([record.outcome for record in records], ["ran", "refused", "ran"])
        self.assertEqual([meta["x-decided-by"] for meta in metas], ["alice", "bob", "carol"])
        self.assertTrue(metas[2]["x-remembered"].startswith("session-"))

    def test_a_plain_confirm_records_no_decider(self) -> None:
        recorder = SessionRecorder.open(self.path)
        gate = Gate({"write_note": lambda text: {"ok": True}}, POLICY, confirm=lambda tool, args: True,
                    recorder=recorder)
        gate.call("write_note", {"text": "x"})
        recorder.close()
        with open(self.path, "rb") as handle:
            [record] = list(read_session(handle, self.path))
        self.assertNotIn("x-decided-by", record.meta or {})


if __name__ == "__main__":
    unittest.main()
