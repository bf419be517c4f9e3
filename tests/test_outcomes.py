"""Answers and refusals as types: every refusal the gate makes says its reason (and rule), and its text
begins as the record format's wording, so a record read back knows it too."""

from __future__ import annotations

import os
import tempfile
import unittest
from typing import Any

from toolreplay.guard.gate import CallCancelled, Gate
from toolreplay.guard.outcomes import OUTCOMES, STOP_REASONS, Refusal
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import parse_policy
from toolreplay.policy.refusals import REFUSAL_PREFIXES, REFUSAL_WORDING, is_refusal


class RefusalTypeTest(unittest.TestCase):
    def test_the_format_values(self) -> None:
        self.assertEqual(OUTCOMES, ("ran", "cached", "refused", "cancelled", "unknown"))
        self.assertEqual(STOP_REASONS, ("max_steps", "budget", "time", "record"))
        self.assertEqual(REFUSAL_PREFIXES, tuple(REFUSAL_WORDING.values()))

    def test_a_refusal_must_begin_with_its_reasons_wording(self) -> None:
        with self.assertRaisesRegex(ValueError, "^a rule refusal must begin 'denied by rule ': 'no'$"):
            Refusal("rule", "no")
        self.assertEqual(Refusal("host", "anything").response, {"ok": False, "error": "anything"})


class GateRefusalsTest(unittest.TestCase):
    def gate(self, **options: Any) -> Gate:
        def cancelled() -> None:
            raise CallCancelled("gone", started=False)

        tools = {"read": lambda: {"ok": True}, "send": lambda: {"sent": True}, "gone": cancelled,
                 "lookalike": lambda: {"ok": False, "error": "denied by rule r1: it says so itself"}}
        policy = parse_policy({"agent": "a", "allowed_tools": sorted(set(tools) | {"missing"}),
                               "write_tools": ["send"], "limits": options.pop("limits", {}),
                               "rules": options.pop("rules", [])})
        return Gate(tools, policy, **options)

    def test_each_refusal_says_its_reason_and_rule(self) -> None:
        rules = [{"id": "no-x", "effect": "deny", "tools": ["read"], "when": [{"arg": "x", "gt": 0}],
                  "reason": "no x"}]
        spent = self.gate(limits={"max_steps": 1})
        spent.handle("read", {})
        cases = [
            (self.gate(), "nope", {}, Refusal("not_allowed", "tool not allowed: nope")),
            (self.gate(), "missing", {}, Refusal("not_allowed", "tool not allowed: missing")),
            (self.gate(), "send", {}, Refusal("not_asked", "confirmation required")),
            (self.gate(confirm=lambda tool, args: False), "send", {}, Refusal("declined", "confirmation declined")),
            (self.gate(rules=rules), "read", {"x": 1}, Refusal("rule", "denied by rule no-x: no x", "no-x")),
            (spent, "read", {}, Refusal("budget", "budget exceeded: max_steps")),
            (self.gate(), "gone", {}, Refusal("cancelled", "cancelled: gone")),
        ]
        for gate, tool, args, refusal in cases:
            with self.subTest(tool=tool, refusal=refusal.reason):
                answer = gate.handle(tool, args)
                self.assertEqual((answer.refusal, answer.response), (refusal, refusal.response))
                self.assertTrue(is_refusal(answer.response))

    def test_a_tool_answer_that_looks_like_a_refusal_is_the_tools_answer(self) -> None:
        answer = self.gate().handle("lookalike", {})
        self.assertEqual((answer.outcome, answer.refusal), ("ran", None))

    def test_a_repeat_of_a_call_that_ran_is_cached_with_no_refusal(self) -> None:
        directory = tempfile.mkdtemp()
        with SessionRecorder.open(os.path.join(directory, "s.jsonl")) as recorder:
            gate = self.gate(recorder=recorder, confirm=lambda tool, args: True)
            self.assertIsNone(gate.handle("send", {}).refusal)
            again = gate.handle("send", {})
        self.assertEqual((again.outcome, again.refusal), ("cached", None))


if __name__ == "__main__":
    unittest.main()
