"""`demo eval`: seed 001's table, computed by the real metric code, exactly."""

from __future__ import annotations

import io
import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.demos import evaluation
from toolreplay.demos.orders import SUITE
from toolreplay.evaluation.agent import load_agents
from toolreplay.evaluation.runner import evaluate
from toolreplay.evaluation.suite import parse_suite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TABLE = """\
agent         cases  success  tool match  average steps  redundant  overreach
mock_model        5     1.00        1.00            2.0          0          0
sloppy_model      5     0.80        0.60            2.0          0          0

failed: 2
sloppy_model case 3 all-orders-completed: tool match failed (strict): expected [count_orders {"customer_id":"C-1042"}], \
called [get_order {"order_id":3015}]; answer correct: "Order 3015 is completed."
sloppy_model case 4 orders-placed: tool match failed (strict): expected [count_orders {"customer_id":"C-2077"}], \
called [get_order {"order_id":3021}]; answer missing "4 orders": "Order 3021 is shipped."
"""
DEMO = "suite: toolreplay.demos.orders:SUITE (5 cases, 1 trial, step limit 10)\n" + TABLE


class DemoEvalTest(unittest.TestCase):
    def test_exact_output(self) -> None:
        out = io.StringIO()
        self.assertEqual(evaluation.run(out), 1)
        self.assertEqual(out.getvalue(), DEMO)

    def test_through_the_cli(self) -> None:
        streams = IO.memory()
        self.assertEqual(main(["demo", "eval"], streams), 1)  # as `eval` exits: two runs failed
        self.assertEqual((streams.out(), streams.err()), (DEMO, ""))

    def test_third_case_is_a_tool_match_failure_with_a_correct_answer(self) -> None:
        report = evaluate(parse_suite(SUITE, "s"), load_agents(list(evaluation.AGENTS)))
        mock, sloppy = report.agents
        third = sloppy.runs[2]
        self.assertEqual((third.case.id, third.success, third.tool_match), ("all-orders-completed", True, False))
        self.assertEqual([(call.tool, call.args) for call in third.calls], [("get_order", {"order_id": 3015})])
        self.assertIn("completed", third.answer or "")
        self.assertEqual([run.passed for run in mock.runs], [True] * 5)
        self.assertEqual([(run.success, run.tool_match) for run in sloppy.runs],
                         [(True, True), (True, True), (True, False), (False, False), (True, True)])

    def test_record_directory(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            self.assertEqual(evaluation.run(io.StringIO(), record=directory), 1)
            self.assertEqual(sorted(os.listdir(os.path.join(directory, "sloppy_model"))),
                             ["all-orders-completed.jsonl", "delivery-date.jsonl", "order-status.jsonl",
                              "orders-placed.jsonl", "refund-status.jsonl", "scope.json"])
            with open(os.path.join(directory, "sloppy_model", "all-orders-completed.jsonl"), encoding="utf-8") as f:
                self.assertEqual(f.read(), '{"index": 0, "tool": "get_order", "args": {"order_id": 3015}, "response": '
                                           '{"order_id": 3015, "customer_id": "C-1042", "status": "completed", '
                                           '"items": ["water filter"], "total": "420.00"}, "meta": {"turn": 0, "outcome": "ran"}}\n')

    def test_docs_show_the_real_output(self) -> None:
        # docs/evaluate.md's examples are all run by test_readme; this pins the demo's block there
        with open(os.path.join(ROOT, "docs", "evaluate.md"), encoding="utf-8") as handle:
            self.assertIn("```console\n$ python -m toolreplay demo eval\n" + DEMO + "```", handle.read())


if __name__ == "__main__":
    unittest.main()
