"""Running cases through the guard's Gate: cassette tools, step limits, agent failures, recording, trials."""

from __future__ import annotations

import os
import tempfile
import unittest
from fractions import Fraction
from typing import Any

from toolreplay.audit.replay import audit_replay
from toolreplay.audit.scope import audit_scope
from toolreplay.evaluation.agent import Answer, Conversation, NamedAgent, ToolCall
from toolreplay.evaluation.report import failure_line
from toolreplay.evaluation.runner import evaluate, run_case
from toolreplay.evaluation.suite import Suite, parse_suite
from toolreplay.evaluation.tools import load_cassette
from toolreplay.format.records import read_session
from toolreplay.policy.model import load_policy

CASSETTE = (b'{"index": 0, "tool": "get_order", "args": {"order_id": 7, "opts": {"full": true}}, '
            b'"response": {"status": "shipped"}}\n'
            b'{"index": 1, "tool": "get_order", "args": {"order_id": 8}, "response": {"status": "lost"}}\n')


class Script:
    """An agent that plays the given steps in order, one per turn, and keeps what it saw."""

    def __init__(self, *steps: ToolCall | Answer) -> None:
        self.steps = steps
        self.seen: list[Conversation] = []

    def __call__(self, conversation: Conversation) -> ToolCall | Answer:
        self.seen.append(conversation)
        return self.steps[len(conversation.calls)]


def scripted(*steps: ToolCall | Answer) -> NamedAgent:
    return NamedAgent("scripted", "tests:scripted", Script(*steps))


def case_suite(tools: Any, expected_tools: list[Any], expected_answer: Any = "shipped", **case: Any) -> Suite:
    return parse_suite({"tools": tools, "cases": [{"id": "c1", "question": "Where is order 7?",
                                                   "expected_answer": expected_answer,
                                                   "expected_tools": expected_tools, **case}]}, "s.json")


class CassetteTest(unittest.TestCase):
    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.directory = directory.name
        with open(os.path.join(self.directory, "orders.jsonl"), "wb") as handle:
            handle.write(CASSETTE)
        self.suite = case_suite({"cassette": os.path.join(self.directory, "orders.jsonl")}, ["get_order"])

    def run_one(self, *steps: ToolCall | Answer) -> Any:
        return run_case(scripted(*steps), self.suite, self.suite.cases[0])

    def test_identical_call_gets_the_recorded_response(self) -> None:
        agent = scripted(ToolCall("get_order", {"opts": {"full": True}, "order_id": 7.0}), Answer("It is SHIPPED."))
        run = run_case(agent, self.suite, self.suite.cases[0])
        self.assertEqual(run.calls[0].response, {"status": "shipped"})
        self.assertEqual((run.success, run.tool_match, run.steps, run.misses), (True, True, 2, ()))
        conversation = agent.agent.seen[1]  # type: ignore[attr-defined]
        self.assertEqual((conversation.question, conversation.tools), ("Where is order 7?", ("get_order",)))
        self.assertEqual(conversation.calls[0].response, {"status": "shipped"})

    def test_call_with_no_recording_fails_the_case(self) -> None:
        run = self.run_one(ToolCall("get_order", {"order_id": 9}), Answer("shipped, probably"))
        self.assertEqual(run.calls[0].response, {"ok": False, "error": "no recording for this call"})
        self.assertEqual(run.misses, ('get_order {"order_id":9}',))
        self.assertEqual((run.success, run.tool_match, run.missing), (False, True, ()))

    def test_failure_line_names_the_call_with_no_recording(self) -> None:
        agent = scripted(ToolCall("get_order", {"order_id": 9}), Answer("It is shipped."))
        (report,) = evaluate(self.suite, [agent]).agents
        self.assertEqual(failure_line(report, report.runs[0]),
                         'scripted case 1 c1: tools ok; answer has the information: "It is shipped."; '
                         'no recording for [get_order {"order_id":9}]')

    def test_tool_the_cassette_never_recorded_is_refused_as_overreach(self) -> None:
        run = self.run_one(ToolCall("cancel_order", {"order_id": 7}), Answer("shipped"))
        self.assertEqual(run.calls[0].response, {"ok": False, "error": "tool not allowed: cancel_order"})
        self.assertEqual((run.overreach, run.tool_match, run.success), (1, False, True))

    def test_first_recorded_response_wins(self) -> None:
        path = os.path.join(self.directory, "twice.jsonl")
        with open(path, "wb") as handle:
            handle.write(b'{"index": 0, "tool": "t", "args": {}, "response": {"n": 1}}\n'
                         b'{"index": 1, "tool": "t", "args": {}, "response": {"n": 2}}\n')
        self.assertEqual(load_cassette(path).bind(lambda tool, args: None)["t"](), {"n": 1})


class StepLimitAndFailuresTest(unittest.TestCase):
    suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, ["get_order"])

    def test_step_limit_fails_the_case_and_says_why(self) -> None:
        calls = [ToolCall("get_order", {"order_id": 3000 + n}) for n in range(5)]
        run = run_case(scripted(*calls), self.suite, self.suite.cases[0], max_steps=3)
        self.assertIsNone(run.answer)
        self.assertEqual(run.stop, "step limit reached: call 4 refused by the guard (max_steps 3)")
        self.assertEqual(run.calls[-1].response, {"ok": False, "error": "budget exceeded: max_steps"})
        self.assertEqual((len(run.calls), run.steps, run.success), (4, 4, False))

    def test_answer_right_at_the_limit_is_accepted(self) -> None:
        agent = scripted(*[ToolCall("get_order", {"order_id": 3001 + n}) for n in range(3)], Answer("shipped"))
        run = run_case(agent, self.suite, self.suite.cases[0], max_steps=3)
        self.assertEqual((run.answer, run.stop, run.steps), ("shipped", None, 4))

    def test_agent_failures_fail_only_the_case(self) -> None:
        def crash(conversation: Conversation) -> Answer:
            raise RuntimeError("model down")

        for agent, reason in (
                (crash, "agent raised RuntimeError: model down"),
                (lambda c: {"tool": "get_order"}, "agent returned dict, not ToolCall or Answer"),
                (lambda c: ToolCall("get_order", {"x": float("nan")}),
                 "agent returned a ToolCall with no JSON form: nan has no JSON form"),
                (lambda c: ToolCall("get_\ud800", {}),
                 "agent returned a ToolCall with no JSON form: string holds a lone surrogate"),
                (lambda c: Answer("ok \udc80"),
                 "agent returned an Answer whose text is not valid Unicode (a lone surrogate)"),
                (lambda c: ToolCall("", {}), "agent returned a ToolCall without a tool name"),
                (lambda c: Answer(None), "agent returned an Answer whose text is not a string")):  # type: ignore
            with self.subTest(reason=reason):
                run = run_case(NamedAgent("a", "m:a", agent), self.suite, self.suite.cases[0])
                self.assertEqual((run.answer, run.stop, run.steps, run.success), (None, reason, 1, False))

    def test_repeated_call_is_answered_by_the_gate_and_found_redundant(self) -> None:
        call = ToolCall("get_order", {"order_id": 3001})
        run = run_case(scripted(call, call, Answer("shipped")), self.suite, self.suite.cases[0], mode="superset")
        self.assertEqual(run.calls[0].response, run.calls[1].response)
        self.assertEqual((run.redundant, run.tool_match), (1, True))
        run = run_case(scripted(call, call, Answer("shipped")), self.suite, self.suite.cases[0])
        self.assertFalse(run.tool_match)  # strict: get_order once, not twice

    def test_case_mode_beats_the_run_default(self) -> None:
        suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, ["get_order"], match="superset")
        agent = scripted(ToolCall("get_order", {"order_id": 1}), ToolCall("count_orders", {"customer_id": "C"}),
                         Answer("shipped"))
        (report,) = evaluate(suite, [agent], match="strict").agents
        self.assertEqual((report.runs[0].mode, report.runs[0].tool_match), ("superset", True))


def flaky_agent() -> NamedAgent:
    """Answers right on odd-numbered calls of the whole evaluation, wrong on even ones."""
    state = {"n": 0}

    def agent(conversation: Conversation) -> Answer:
        state["n"] += 1
        return Answer("shipped" if state["n"] % 2 else "no idea")

    return NamedAgent("flaky", "tests:flaky", agent)


class TrialsAndRecordingTest(unittest.TestCase):
    def test_trials_and_pass_hat_k(self) -> None:
        suite = parse_suite({"tools": {"module": "toolreplay.demos.orders:TOOLS"}, "cases": [
            {"id": f"c{n}", "question": "q", "expected_answer": "shipped", "expected_tools": []} for n in (1, 2)]},
            "s.json")
        (report,) = evaluate(suite, [flaky_agent()], trials=3).agents
        # runs: c1 -> ok, no, ok (2 of 3); c2 -> no, ok, no (1 of 3)
        self.assertEqual([run.success for run in report.runs], [True, False, True, False, True, False])
        self.assertEqual((report.cases, report.success, report.tool_match), (2, Fraction(1, 2), Fraction(1)))
        # k=1: (2/3 + 1/3) / 2; k=2: (1/3 + 0) / 2; k=3: 0
        self.assertEqual(report.pass_hat(), [Fraction(1, 2), Fraction(1, 6), Fraction(0)])

    def test_record_writes_sessions_that_replay_and_scope_audit(self) -> None:
        suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, ["get_order"])
        call = ToolCall("get_order", {"order_id": 3001})
        with tempfile.TemporaryDirectory() as directory:
            evaluate(suite, [scripted(call, ToolCall("cancel_order", {"order_id": 1}), call, Answer("shipped"))],
                     trials=2, record_dir=directory)
            agent_dir = os.path.join(directory, "scripted")
            self.assertEqual(sorted(os.listdir(agent_dir)), ["c1.trial-1.jsonl", "c1.trial-2.jsonl", "scope.json"])
            path = os.path.join(agent_dir, "c1.trial-1.jsonl")
            with open(path, "rb") as handle:
                records = list(read_session(handle, path))
            self.assertEqual([(r.tool, r.response.get("error")) for r in records],
                             [("get_order", None), ("cancel_order", "tool not allowed: cancel_order"),
                              ("get_order", None)])
            self.assertEqual([f.kind for f in audit_replay(records).findings], ["redundant-call"])
            policy = load_policy(os.path.join(agent_dir, "scope.json"))
            self.assertEqual([f.index for f in audit_scope(records, policy).findings], [1])

    def test_a_second_evaluation_replaces_the_sessions(self) -> None:
        suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, ["get_order"])
        with tempfile.TemporaryDirectory() as directory:
            for _ in range(2):
                evaluate(suite, [scripted(ToolCall("get_order", {"order_id": 3001}), Answer("shipped"))],
                         record_dir=directory)
            with open(os.path.join(directory, "scripted", "c1.jsonl"), "rb") as handle:
                self.assertEqual(len(handle.read().splitlines()), 1)
            self.assertEqual(sorted(os.listdir(os.path.join(directory, "scripted"))), ["c1.jsonl", "scope.json"])


if __name__ == "__main__":
    unittest.main()
