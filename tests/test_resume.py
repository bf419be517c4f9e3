"""A gate started from a kept history (toolreplay/guard/resume.py `GateHistory`, `Gate(history=...)`) against a
gate that reads the whole record: the same answers and the same record, over short gates one after another
on one record (as the hook servers run them); a history that is not the gate's is refused."""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from collections.abc import Callable
from typing import Any

from toolreplay.guard.assembly import GuardConfig, build_guard
from toolreplay.guard.gate import read_history
from toolreplay.guard.recorder import ResumePoint, SessionRecorder
from toolreplay.guard.resume import GateHistory
from toolreplay.policy.model import parse_policy

POLICY = parse_policy({
    "agent": "shop", "allowed_tools": ["get_order", "cancel_order", "note"],
    "limits": {"max_steps": 12},
    "rules": [{"id": "few-gets", "tools": ["get_order"], "effect": "deny", "reason": "three gets",
               "unless": [{"count": "get_order", "max": 3}]},
              {"id": "get-first", "tools": ["cancel_order"], "effect": "deny", "reason": "get it first",
               "unless": [{"after": "get_order", "same": ["order_id"]}]}]})
TOOLS: dict[str, Callable[..., Any]] = {
    "get_order": lambda order_id: {"id": order_id, "status": "open"},
    "cancel_order": lambda order_id: {"id": order_id, "cancelled": True},
    "note": lambda text: {"noted": text},
}
CALLS = [("get_order", {"order_id": 1}), ("cancel_order", {"order_id": 2}), ("cancel_order", {"order_id": 1}),
         ("cancel_order", {"order_id": 1}), ("note", {"text": "a"}), ("note", {"text": "a"}),
         ("get_order", {"order_id": 2}), ("get_order", {"order_id": 3}), ("get_order", {"order_id": 4}),
         ("cancel_order", {"order_id": 3}), ("note", {"text": "b"}), ("get_order", {"order_id": 1}),
         ("note", {"text": "c"}), ("note", {"text": "d"})]
OPTIONS: dict[str, Any] = {"mutators": ("cancel_order",), "repeatable": ("note",)}


class KeptHistoryTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.guard = build_guard(GuardConfig(POLICY, records=self.directory, mutators=OPTIONS["mutators"],
                                             repeatable=OPTIONS["repeatable"]))

    def open(self, name: str, at: ResumePoint | None = None) -> SessionRecorder:
        # only the outcome in meta: the two runs' records can be compared byte for byte
        return SessionRecorder.open(os.path.join(self.directory, name), sealed=True, meta_keys=("outcome",), at=at)

    def answers(self, name: str, kept: bool) -> tuple[list[Any], bytes]:
        """Each call through a gate of its own on one record: reading the whole record, or from a kept history."""
        answers, point, history = [], None, None
        for tool, args in CALLS:
            recorder = self.open(name, point)
            with recorder:
                if kept:
                    if history is None:
                        history = self.guard.read_history(recorder)
                    start = recorder.resume_point()
                    gate = self.guard.gate(TOOLS, recorder=recorder, history=history)
                else:
                    gate = self.guard.gate(TOOLS, recorder=recorder)
                answer = gate.handle(tool, args)
                answers.append((answer.response, answer.outcome))
                if kept:
                    assert start is not None and history is not None
                    history.add(recorder.records_since(start), started=0.0, now=0)
                    point = recorder.resume_point()
                    self.assertTrue(recorder.opened_at_point or len(answers) == 1)
        with open(os.path.join(self.directory, name), "rb") as handle:
            return answers, handle.read()

    def test_gates_from_a_kept_history_answer_and_record_as_gates_reading_the_record(self) -> None:
        fresh = self.answers("fresh.jsonl", kept=False)
        self.assertEqual(self.answers("kept.jsonl", kept=True), fresh)
        outcomes = [outcome for _, outcome in fresh[0]]
        self.assertEqual(outcomes, ["ran", "refused", "ran", "cached", "ran", "ran", "ran", "ran", "refused",
                                    "ran", "ran", "refused", "refused", "refused"])
        self.assertEqual(fresh[0][1][0]["error"], "denied by rule get-first: get it first")
        self.assertEqual(fresh[0][8][0]["error"], "denied by rule few-gets: three gets")
        self.assertEqual(fresh[0][11][0]["error"], "denied by rule few-gets: three gets")
        self.assertEqual(fresh[0][-1][0]["error"], "budget exceeded: max_steps")

    def test_a_history_read_for_another_policy_or_other_tools_is_refused(self) -> None:
        with self.open("s.jsonl") as recorder:
            other = build_guard(GuardConfig(parse_policy({"agent": "shop", "allowed_tools": ["note"]}),
                                            records=self.directory))
            for history in (other.read_history(recorder), read_history(POLICY, recorder)):
                with self.assertRaises(ValueError):
                    self.guard.gate(TOOLS, recorder=recorder, history=history)

    def test_an_intent_older_than_what_the_history_holds_needs_a_full_read(self) -> None:
        with self.open("s.jsonl") as recorder:
            gate = self.guard.gate(TOOLS, recorder=recorder)
            for tool, args in CALLS[:3]:
                gate.handle(tool, args)
        with self.open("s.jsonl") as recorder:
            history = self.guard.read_history(recorder)
            self.guard.gate(TOOLS, recorder=recorder, history=history)  # no intent: the history keeps none
            point = recorder.resume_point()
        # an intent announced before the last records (a crash, a hand edit) may be settled by one of them
        with open(os.path.join(self.directory, "s.jsonl.intents"), "w", encoding="utf-8") as out:
            out.write('{"args":{"order_id":1},"from":1,"intent":0,"key":null,"tool":"cancel_order"}\n')
        with self.open("s.jsonl", point) as recorder:
            self.assertTrue(recorder.opened_at_point)
            self.assertFalse(history.can_start(recorder))
            with self.assertRaises(ValueError):
                self.guard.gate(TOOLS, recorder=recorder, history=history)
            # read again, it settles the intent with the record at index 2 as a full read does
            gate = self.guard.gate(TOOLS, recorder=recorder, history=self.guard.read_history(recorder))
            self.assertEqual(gate.unknown_outcomes, ())
            self.assertEqual(gate.handle("cancel_order", {"order_id": 1}).outcome, "cached")

    def test_a_history_takes_only_the_records_that_follow_it(self) -> None:
        with self.open("s.jsonl") as recorder:
            history = self.guard.read_history(recorder)
            start = recorder.resume_point()
            recorder.append("note", {"text": "x"}, {"noted": "x"})
            recorder.append("note", {"text": "y"}, {"noted": "y"})
            assert start is not None
            appended = recorder.records_since(start)
        with self.assertRaises(ValueError):
            history.add(appended[1:], started=0.0, now=0)
        history.add(appended, started=0.0, now=0)
        self.assertEqual((history.next_index, history.steps), (2, 2))
        self.assertIsInstance(history, GateHistory)


if __name__ == "__main__":
    unittest.main()
