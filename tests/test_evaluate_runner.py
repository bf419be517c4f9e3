"""Running cases through the guard's Gate: cassette tools, step limits, agent failures, recording, trials."""

from __future__ import annotations

import json
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
    fields = {"id": "c1", "question": "Where is order 7?", "expected_answer": expected_answer,
              "expected_tools": expected_tools, **case}
    return parse_suite({"tools": tools, "cases": [{key: value for key, value in fields.items()
                                                   if value is not None}]}, "s.json")


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

    def test_first_mode_answers_every_identical_call_with_the_first_response(self) -> None:
        path = os.path.join(self.directory, "twice.jsonl")
        with open(path, "wb") as handle:
            handle.write(b'{"index": 0, "tool": "t", "args": {}, "response": {"n": 1}}\n'
                         b'{"index": 1, "tool": "t", "args": {}, "response": {"n": 2}}\n')
        play = load_cassette(path, "first").bind(lambda tool, args, recorded: None)["t"]
        self.assertEqual([play(), play(), play()], [{"n": 1}] * 3)
        misses: list[tuple[str, dict[str, Any], int]] = []
        play = load_cassette(path).bind(lambda *miss: misses.append(miss))["t"]
        self.assertEqual([play(), play(), play()], [{"n": 1}, {"n": 2}, {"ok": False, "error": (
            "no recording for this call: call 3, the cassette recorded 2")}])
        self.assertEqual(misses, [("t", {}, 2)])


READ_WRITE_READ = (b'{"index": 0, "tool": "list_bookings", "args": {"customer_id": "C-7"}, "response": {"bookings": []}}\n'
                   b'{"index": 1, "tool": "book_table", "args": {"customer_id": "C-7"}, "response": {"booking_id": "B-1"}}\n'
                   b'{"index": 2, "tool": "list_bookings", "args": {"customer_id": "C-7"}, '
                   b'"response": {"bookings": ["B-1"]}}\n')


class SequentialCassetteTest(unittest.TestCase):
    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.path = os.path.join(directory.name, "bookings.jsonl")
        with open(self.path, "wb") as handle:
            handle.write(READ_WRITE_READ)
        self.read = ToolCall("list_bookings", {"customer_id": "C-7"})
        self.write = ToolCall("book_table", {"customer_id": "C-7"})

    def suite(self, responses: str) -> Suite:
        return case_suite({"cassette": self.path, "responses": responses}, [], expected_answer="B-1")

    def test_read_after_write_replays_the_response_recorded_after_the_write(self) -> None:
        suite = self.suite("sequential")
        run = run_case(scripted(self.read, self.write, self.read, Answer("B-1")), suite, suite.cases[0])
        self.assertEqual([call.response for call in run.calls],
                         [{"bookings": []}, {"booking_id": "B-1"}, {"bookings": ["B-1"]}])
        self.assertEqual((run.misses, run.answered), ((), (True, True, True)))

    def test_a_call_past_the_recording_is_a_miss_that_says_so(self) -> None:
        suite = self.suite("sequential")
        run = run_case(scripted(self.read, self.read, self.read, Answer("B-1")), suite, suite.cases[0])
        self.assertEqual(run.calls[2].response,
                         {"ok": False, "error": "no recording for this call: call 3, the cassette recorded 2"})
        self.assertEqual((run.misses, run.success, run.answered),
                         (('list_bookings {"customer_id":"C-7"} (call 3, recorded 2)',), False, (True, True, False)))

    def test_first_mode_replays_the_stale_read(self) -> None:
        suite = self.suite("first")
        run = run_case(scripted(self.read, self.write, self.read, Answer("B-1")), suite, suite.cases[0])
        self.assertEqual(run.calls[2].response, {"bookings": []})

    def test_counts_start_again_for_every_run(self) -> None:
        suite = self.suite("sequential")
        agent = scripted(self.read, self.write, self.read, Answer("B-1"))
        (report,) = evaluate(suite, [agent], trials=3).agents
        self.assertEqual([run.calls[2].response for run in report.runs], [{"bookings": ["B-1"]}] * 3)


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

    def test_repeated_call_reaches_the_tool_and_is_found_redundant(self) -> None:
        call = ToolCall("get_order", {"order_id": 3001})
        run = run_case(scripted(call, call, Answer("shipped")), self.suite, self.suite.cases[0], mode="superset")
        self.assertEqual(run.calls[0].response, run.calls[1].response)
        self.assertEqual((run.redundant, run.tool_match), (1, True))
        run = run_case(scripted(call, call, Answer("shipped")), self.suite, self.suite.cases[0])
        self.assertFalse(run.tool_match)  # strict: get_order once, not twice

    def test_every_request_reaches_the_tools(self) -> None:
        from toolreplay.evaluation.tools import ModuleTools

        seen: list[int] = []
        tools = ModuleTools("m:T", {"tick": lambda: seen.append(1) or {"n": len(seen)}})
        suite = Suite("s", tools, case_suite({"module": "toolreplay.demos.orders:TOOLS"}, []).cases)
        call = ToolCall("tick", {})
        run = run_case(scripted(call, call, call, Answer("shipped")), suite, suite.cases[0])
        self.assertEqual([c.response for c in run.calls], [{"n": 1}, {"n": 2}, {"n": 3}])
        self.assertEqual(run.redundant, 2)

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


class FactoryTest(unittest.TestCase):
    BOOK = ToolCall("book_table", {"customer_id": "C-7", "date": "2026-12-24", "party_size": 4})

    def runs(self, tools: dict[str, str], trials: int = 3) -> list[Any]:
        suite = case_suite(tools, ["book_table"], expected_answer="B-1")
        agent = NamedAgent("a", "m:a", lambda c: Answer(str(c.calls[0].response.get("booking_id")))
                           if c.calls else self.BOOK)
        (report,) = evaluate(suite, [agent], trials=trials).agents
        return [run.calls[0].response["booking_id"] for run in report.runs]

    def test_every_run_starts_from_the_same_state(self) -> None:
        self.assertEqual(self.runs({"factory": "toolreplay.demos.bookings:make_tools"}), ["B-1", "B-1", "B-1"])

    def test_a_plain_dict_shares_its_state_between_runs(self) -> None:
        from toolreplay.demos import bookings

        first = len(bookings.TOOLS["list_bookings"]("C-7")["bookings"])
        self.assertEqual(self.runs({"module": "toolreplay.demos.bookings:TOOLS"}),
                         [f"B-{first + n}" for n in (1, 2, 3)])

    def test_a_factory_that_changes_its_tools_is_an_error(self) -> None:
        from toolreplay.errors import UsageError
        from toolreplay.evaluation.tools import FactoryTools

        tables = iter([{"a": print}, {"b": print}])
        tools = FactoryTools("m:f", lambda: next(tables), frozenset({"a"}))
        self.assertEqual(list(tools.bind(lambda *miss: None)), ["a"])
        with self.assertRaisesRegex(UsageError, "tools factory 'm:f' returned other tools than on its first call"):
            tools.bind(lambda *miss: None)


def scorer_suite(scorer: str, **case: Any) -> Suite:
    return case_suite({"module": "toolreplay.demos.orders:TOOLS"}, [], scorer=scorer, **case)


def judge(answer: str, calls: Any, case: Any) -> Any:
    return {"yes": True, "no": False, "high": 0.9, "low": 0.2, "text": "fine"}[answer]


class ScorerTest(unittest.TestCase):
    def run_answer(self, answer: str, **case: Any) -> Any:
        suite = scorer_suite("tests.test_evaluate_runner:judge", expected_answer=None, **case)
        return run_case(scripted(Answer(answer)), suite, suite.cases[0])

    def test_bool_and_number_results(self) -> None:
        for answer, score, failure in (
                ("yes", 1.0, None), ("no", 0.0, "scorer tests.test_evaluate_runner:judge said no"),
                ("high", 0.9, None), ("low", 0.2, "scorer tests.test_evaluate_runner:judge gave 0.2, below 0.5"),
                ("text", None, "scorer tests.test_evaluate_runner:judge returned str 'fine', not a bool or number"),
                ("boom", None, "scorer tests.test_evaluate_runner:judge raised KeyError: 'boom'")):
            with self.subTest(answer=answer):
                run = self.run_answer(answer)
                self.assertEqual((run.score, run.score_failure, run.success), (score, failure, failure is None))

    def test_min_score(self) -> None:
        self.assertFalse(self.run_answer("high", min_score=0.95).success)

    def test_beside_expected_answer_both_must_hold(self) -> None:
        suite = scorer_suite("tests.test_evaluate_runner:judge", expected_answer="ye")
        run = run_case(scripted(Answer("no")), suite, suite.cases[0])
        self.assertEqual((run.missing, run.score_failure is not None), (("ye",), True))
        (report,) = evaluate(suite, [scripted(Answer("no"))]).agents
        self.assertEqual(failure_line(report, report.runs[0]), 'scripted case 1 c1: tools ok; answer missing "ye": '
                                                               '"no"; scorer tests.test_evaluate_runner:judge said no')

    def test_end_state_scorer_of_the_bookings_demo(self) -> None:
        from toolreplay.demos.bookings import booking_made

        suite = parse_suite({"tools": {"factory": "toolreplay.demos.bookings:make_tools"}, "cases": [
            {"id": "b", "question": "I'm customer C-7: book a table for 4 on 2026-12-24.", "expected_tools": [],
             "scorer": "toolreplay.demos.bookings:booking_made"}]}, "s.json")
        book = ToolCall("book_table", {"customer_id": "C-7", "date": "2026-12-24", "party_size": 4})
        runs = [run_case(scripted(*steps, Answer("done")), suite, suite.cases[0])
                for steps in ((book,), (book, book), ())]
        self.assertEqual([run.success for run in runs], [True, False, False])
        self.assertIs(booking_made("", (), suite.cases[0]), False)


async def async_agent(conversation: Conversation) -> ToolCall | Answer:
    import asyncio

    await asyncio.sleep(0)
    if conversation.calls:
        return Answer(f"Order is {conversation.calls[0].response['status']}")
    return ToolCall("get_order", {"order_id": 3001})


class ConcurrencyTest(unittest.TestCase):
    def test_async_agent(self) -> None:
        suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, ["get_order"])
        run = run_case(NamedAgent("async", "m:a", async_agent), suite, suite.cases[0])
        self.assertEqual((run.answer, run.passed), ("Order is shipped", True))

    def test_same_report_bytes_as_a_serial_run(self) -> None:
        from toolreplay.demos.orders import SUITE
        from toolreplay.evaluation.agent import load_agents
        from toolreplay.evaluation.report import eval_json, eval_text

        suite = parse_suite(SUITE, "orders")
        agents = load_agents(["toolreplay.demos.orders:mock_model", "toolreplay.demos.orders:sloppy_model",
                              "toolreplay.demos.bookings:careful_agent"])
        with tempfile.TemporaryDirectory() as directory:
            outputs = []
            for concurrency in (1, 8):
                report = evaluate(suite, agents, trials=3, concurrency=concurrency,
                                  record_dir=os.path.join(directory, str(concurrency)))
                outputs.append((eval_text(report), eval_json(report)))
            self.assertEqual(outputs[0], outputs[1])
            for agent in ("mock_model", "sloppy_model"):
                for name in sorted(os.listdir(os.path.join(directory, "1", agent))):
                    with open(os.path.join(directory, "1", agent, name), "rb") as one, \
                            open(os.path.join(directory, "8", agent, name), "rb") as eight:
                        self.assertEqual(one.read(), eight.read())

    def test_a_failing_run_stops_the_evaluation_with_its_error(self) -> None:
        from toolreplay.errors import UsageError
        from toolreplay.evaluation.tools import FactoryTools

        calls = {"n": 0}

        def factory() -> dict[str, Any]:
            calls["n"] += 1
            if calls["n"] > 2:
                raise RuntimeError("database down")
            return {"t": dict}

        suite = Suite("s", FactoryTools("m:f", factory, frozenset({"t"})), case_suite(
            {"module": "toolreplay.demos.orders:TOOLS"}, []).cases)
        with self.assertRaisesRegex(UsageError, "tools factory 'm:f' raised RuntimeError: database down"):
            evaluate(suite, [scripted(Answer("shipped"))], trials=4, concurrency=2)


class JunitTest(unittest.TestCase):
    def test_hostile_tool_names_stay_well_formed_xml(self) -> None:
        from xml.etree import ElementTree

        from toolreplay.evaluation.report import eval_junit

        suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, ["get_order"])
        hostile = "get_order\x1b[2J\x00</failure><x>\u202e"
        (report,) = [evaluate(suite, [scripted(ToolCall(hostile, {"q": "\x07"}), Answer("shipped"))])]
        root = ElementTree.fromstring(eval_junit(report))
        message = root[0][0][0].get("message", "")
        self.assertIn("called [get_order\\x1b[2J\\x00</failure><x>\\u202e {\"q\":\"\\u0007\"}]", message)


class RecordCassetteTest(unittest.TestCase):
    def test_a_recorded_cassette_replays_the_live_run(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            cassette = os.path.join(directory, "live.jsonl")
            live = parse_suite({"tools": {"factory": "toolreplay.demos.bookings:make_tools"}, "cases": [
                {"id": "b", "question": "I'm customer C-7: book a table for 4 on 2026-12-24.",
                 "expected_answer": "B-1", "expected_tools": []}]}, os.path.join(directory, "suite.json"))
            from toolreplay.evaluation.agent import load_agents
            from toolreplay.evaluation.report import eval_text

            agents = load_agents(["toolreplay.demos.bookings:careful_agent"])
            first = evaluate(live, agents, record_cassette=cassette)
            with open(cassette, "rb") as handle:
                records = list(read_session(handle, cassette))
            self.assertEqual([record.tool for record in records], ["list_bookings", "book_table", "list_bookings"])
            replayed = parse_suite({"tools": {"cassette": "live.jsonl"}, "cases": [
                {"id": "b", "question": "I'm customer C-7: book a table for 4 on 2026-12-24.",
                 "expected_answer": "B-1", "expected_tools": []}]}, os.path.join(directory, "suite.json"))
            second = evaluate(replayed, agents)
            self.assertEqual(eval_text(first).splitlines()[1:], eval_text(second).splitlines()[1:])
            self.assertEqual(sorted(os.listdir(directory)), ["live.jsonl"])

    def test_refused_calls_and_misses_are_left_out(self) -> None:
        suite = case_suite({"module": "toolreplay.demos.orders:TOOLS"}, [])
        agent = scripted(ToolCall("nope", {}), ToolCall("get_order", {"order_id": 3001}),
                         ToolCall("get_order", {"order_id": 3002}), Answer("x"))
        with tempfile.TemporaryDirectory() as directory:
            cassette = os.path.join(directory, "c.jsonl")
            evaluate(suite, [agent], max_steps=2, record_cassette=cassette)
            with open(cassette, "rb") as handle:
                self.assertEqual([(r.index, r.tool) for r in read_session(handle, cassette)], [(0, "get_order")])


if __name__ == "__main__":
    unittest.main()


class ParallelTurnTest(unittest.TestCase):
    """Several tool calls in one turn: run in order, recorded with one turn, matched as a set in strict
    mode (agentevals' strict trajectory match compares the tool calls of one message as a set)."""

    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.cassette = os.path.join(directory.name, "orders.jsonl")
        with open(self.cassette, "wb") as handle:
            handle.write(CASSETTE)

    def run_turns(self, expected_tools: list[Any], *turns: Any, mode: str = "strict") -> Any:
        suite = case_suite({"cassette": self.cassette}, expected_tools, match=mode)
        steps = iter(turns)
        seen: list[Conversation] = []

        def agent(conversation: Conversation) -> Any:
            seen.append(conversation)
            return next(steps)

        run = run_case(NamedAgent("parallel", "tests:parallel", agent), suite, suite.cases[0], mode=mode)
        return run, seen

    def test_two_calls_in_one_turn_match_a_group_in_either_order(self) -> None:
        seven, eight = ToolCall("get_order", {"order_id": 7, "opts": {"full": True}}), ToolCall("get_order", {"order_id": 8})
        expected = [[{"tool": "get_order", "args": {"order_id": 7}, "args_match": "includes"},
                     {"tool": "get_order", "args": {"order_id": 8}}]]
        for order in ((seven, eight), (eight, seven)):
            with self.subTest(order=[call.args["order_id"] for call in order]):
                run, seen = self.run_turns(expected, list(order), Answer("shipped"))
                self.assertTrue(run.tool_match)
                self.assertEqual(run.steps, 2)
                self.assertEqual([call.turn for call in run.calls], [0, 0])
                self.assertEqual([call.response for call in run.calls],
                                 [{"status": "shipped"}, {"status": "lost"}] if order[0] is seven
                                 else [{"status": "lost"}, {"status": "shipped"}])
                self.assertEqual(len(seen[1].calls), 2)

    def test_the_same_calls_in_two_turns_do_not_match_one_group_in_strict_mode(self) -> None:
        seven, eight = ToolCall("get_order", {"order_id": 7, "opts": {"full": True}}), ToolCall("get_order", {"order_id": 8})
        expected = [[{"tool": "get_order", "args": {"order_id": 7, "opts": {"full": True}}},
                     {"tool": "get_order", "args": {"order_id": 8}}]]
        run, _ = self.run_turns(expected, seven, eight, Answer("shipped"))
        self.assertFalse(run.tool_match)
        self.assertEqual([call.turn for call in run.calls], [0, 1])
        # One turn expected per call: two turns match, one turn of two does not.
        flat = [{"tool": "get_order", "args": {"order_id": 7, "opts": {"full": True}}},
                {"tool": "get_order", "args": {"order_id": 8}}]
        self.assertTrue(self.run_turns(flat, seven, eight, Answer("shipped"))[0].tool_match)
        self.assertFalse(self.run_turns(flat, [seven, eight], Answer("shipped"))[0].tool_match)
        # Unordered mode ignores turns.
        self.assertTrue(self.run_turns(flat, [eight, seven], Answer("shipped"), mode="unordered")[0].tool_match)

    def test_a_bad_list_fails_the_run_with_a_reason(self) -> None:
        for step, reason in (([], "agent returned an empty list of tool calls"),
                             ([ToolCall("get_order", {"order_id": 7}), "x"],
                              "agent returned a list holding str, not only ToolCall"),
                             ([ToolCall("", {})], "agent returned a ToolCall without a tool name")):
            with self.subTest(reason):
                run, _ = self.run_turns(["get_order"], step)
                self.assertEqual((run.stop, run.calls), (reason, ()))

    def test_a_group_in_the_suite_is_checked(self) -> None:
        with self.assertRaises(Exception) as caught:
            case_suite({"cassette": self.cassette}, [[]])
        self.assertIn("cases[0].expected_tools[0]: a group of calls made in one turn must not be empty",
                      str(caught.exception))
        with self.assertRaises(Exception) as caught:
            case_suite({"cassette": self.cassette}, [["get_order", ["get_order"]]])
        self.assertIn("cases[0].expected_tools[0][1]: groups do not nest", str(caught.exception))


class RecordedTurnTest(unittest.TestCase):
    def test_the_record_of_a_run_holds_each_calls_turn_and_outcome_and_no_time(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            cassette = os.path.join(directory, "orders.jsonl")
            with open(cassette, "wb") as handle:
                handle.write(CASSETTE)
            suite = case_suite({"cassette": cassette}, [["get_order", "get_order"]])
            steps = iter([[ToolCall("get_order", {"order_id": 8}), ToolCall("get_order", {"order_id": 7,
                                                                                           "opts": {"full": True}})],
                          ToolCall("refund", {}), Answer("shipped")])
            record = os.path.join(directory, "run.jsonl")
            run_case(NamedAgent("a", "tests:a", lambda conversation: next(steps)), suite, suite.cases[0],
                     record=record)
            with open(record, encoding="utf-8") as handle:
                metas = [json.loads(line)["meta"] for line in handle]
        self.assertEqual(metas, [{"turn": 0, "outcome": "ran"}, {"turn": 0, "outcome": "ran"},
                                 {"turn": 1, "outcome": "refused"}])
