"""`toolreplay eval` in-process: exit codes 0/1/2, thresholds, formats, recording, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Any
from xml.etree import ElementTree

from tests.support import require
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.evaluation import Answer, Conversation, NamedAgent, ToolCall, eval_junit, evaluate, parse_suite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "samples", "eval-suite.json")
MOCK = "toolreplay.demos.orders:mock_model"
SLOPPY = "toolreplay.demos.orders:sloppy_model"


def run(*argv: str) -> tuple[int, str, str]:
    streams = IO.memory()
    code = main(list(argv), streams)
    return code, streams.out(), streams.err()


class EvalCommandTest(unittest.TestCase):
    def test_a_failed_run_fails_by_default(self) -> None:
        code, out, err = run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY)
        self.assertEqual((code, err), (1, ""))
        lines = out.splitlines()
        self.assertEqual(lines[0], f"suite: {SUITE} (5 cases, 1 trial, step limit 10)")
        self.assertEqual(lines[3], "sloppy_model      5     0.80        0.60            2.0          0          0")
        self.assertEqual(lines[5], "failed: 2")
        code, out, err = run("eval", SUITE, "--agent", MOCK)
        self.assertEqual((code, err, out.splitlines()[-2:]), (0, "", ["", "failed: 0"]))
        for form in ("json", "junit"):
            with self.subTest(form=form):
                self.assertEqual(run("eval", SUITE, "--agent", SLOPPY, "--format", form)[0], 1)
                self.assertEqual(run("eval", SUITE, "--agent", MOCK, "--format", form)[0], 0)

    def test_a_threshold_says_what_passes(self) -> None:
        # Any threshold, even 0, replaces the default: failed runs no longer fail the command by themselves.
        for option in ("--min-success", "--min-tool-match"):
            with self.subTest(option=option):
                code, out, _ = run("eval", SUITE, "--agent", SLOPPY, option, "0")
                self.assertEqual(code, 0)
                self.assertIn("\nfailed: 2\n", out)
                self.assertTrue(out.endswith("\nthresholds: met\n"))

    def test_thresholds(self) -> None:
        code, out, _ = run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--min-success", "0.8",
                           "--min-tool-match", "0.6")
        self.assertEqual(code, 0)
        self.assertTrue(out.endswith("\nthresholds: met\n"))
        code, out, _ = run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--min-success", "0.81",
                           "--min-tool-match", "0.7")
        self.assertEqual(code, 1)
        self.assertTrue(out.endswith("\nthresholds: not met\nsloppy_model: success 0.80 is below 0.81\n"
                                     "sloppy_model: tool match 0.60 is below 0.7\n"))
        self.assertEqual(run("eval", SUITE, "--agent", MOCK, "--min-success", "1", "--min-tool-match", "1")[0], 0)

    def test_json_has_the_same_facts(self) -> None:
        code, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--format", "json", "--min-tool-match", "0.7")
        self.assertEqual(code, 1)
        document = json.loads(out)
        (agent,) = document["agents"]
        self.assertEqual((agent["agent"], agent["success"], agent["tool_match"], agent["average_steps"]),
                         ("sloppy_model", 0.8, 0.6, 2.0))
        self.assertEqual(document["thresholds"]["unmet"], ["sloppy_model: tool match 0.60 is below 0.7"])
        third = agent["results"][2]
        self.assertEqual((third["case"], third["success"], third["tool_match"], third["called"]),
                         ("all-orders-completed", True, False, [{"tool": "get_order", "args": {"order_id": 3015}}]))
        self.assertEqual(len(document["failed"]), 2)

    def test_trials_add_pass_hat_k_columns(self) -> None:
        code, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--trials", "3")
        self.assertEqual(code, 1)
        self.assertEqual(out.splitlines()[:3], [
            f"suite: {SUITE} (5 cases, 3 trials, step limit 10)",
            "agent         cases  success  tool match  average steps  redundant  overreach  pass^1  pass^2  pass^3",
            "sloppy_model      5     0.80        0.60            2.0          0          0    0.80    0.80    0.80"])
        self.assertIn("sloppy_model case 3 trial 2 all-orders-completed: tool match failed (strict)", out)

    def test_shipped_cassette_suite(self) -> None:
        code, out, _ = run("eval", os.path.join(ROOT, "samples", "eval-cassette.json"), "--agent", MOCK,
                           "--agent", SLOPPY)
        self.assertEqual(code, 1)
        self.assertEqual(out.splitlines()[2:4], [
            "mock_model        5     1.00        1.00            2.0          0          0",
            "sloppy_model      5     0.60        0.60            2.0          0          0"])
        self.assertTrue(out.endswith('; no recording for [get_order {"order_id":3021}]\n'))

    def test_match_option(self) -> None:
        _, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--match", "superset")
        self.assertIn("tool match failed (superset)", out)

    def test_recorded_sessions_pass_replay_and_scope(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            self.assertEqual(run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--record", directory)[0], 1)
            for agent in ("mock_model", "sloppy_model"):
                scope = os.path.join(directory, agent, "scope.json")
                for name in sorted(os.listdir(os.path.join(directory, agent))):
                    if not name.endswith(".jsonl"):
                        continue
                    session = os.path.join(directory, agent, name)
                    with self.subTest(session=session):
                        self.assertEqual(run("replay", session),
                                         (0, "calls: 1\ndivergence: none\nfindings: 0\n", ""))
                        self.assertEqual(run("scope", session, scope), (0, "calls: 1\nfindings: 0\n", ""))

    def test_bad_input_exits_2_with_one_error_line(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            bad_suite = os.path.join(directory, "suite.json")
            with open(bad_suite, "w", encoding="utf-8") as handle:
                handle.write('{"tools": {"module": "toolreplay.demos.orders:TOOLS"}, "cases": [{"id": "x"}]}')
            cases = [
                (["eval", bad_suite, "--agent", MOCK], f'error: {bad_suite}: cases[0]: missing field "question"\n'),
                (["eval", SUITE, "--agent", "no_such_agents_xyz:agent"],
                 "error: cannot import agent 'no_such_agents_xyz:agent': ModuleNotFoundError: "
                 "No module named 'no_such_agents_xyz'\n"),
                (["eval", SUITE, "--agent", "toolreplay.demos.orders"],
                 "error: agent must be MODULE:CALLABLE, got 'toolreplay.demos.orders'\n"),
                (["eval", SUITE, "--agent", "toolreplay.demos.orders:missing"],
                 "error: cannot import agent 'toolreplay.demos.orders:missing': no attribute 'missing'\n"),
                (["eval", SUITE, "--agent", "toolreplay.demos.orders:SUITE"],
                 "error: agent 'toolreplay.demos.orders:SUITE' is not callable\n"),
                (["eval", SUITE, "--agent", MOCK, "--agent", MOCK], f"error: agent '{MOCK}' given twice\n"),
                (["eval", SUITE], "error: the following arguments are required: --agent\n"),
                (["eval", SUITE, "--agent", MOCK, "--trials", "0"],
                 "error: argument --trials: must be at least 1, got 0\n"),
                (["eval", SUITE, "--agent", MOCK, "--max-steps", "x"],
                 "error: argument --max-steps: not an integer: 'x'\n"),
                (["eval", SUITE, "--agent", MOCK, "--min-success", "1.5"],
                 "error: argument --min-success: must be between 0 and 1, got 1.5\n"),
                (["eval", SUITE, "--agent", MOCK, "--min-tool-match", "most"],
                 "error: argument --min-tool-match: not a number: 'most'\n"),
                (["eval", os.path.join(directory, "none.json"), "--agent", MOCK],
                 f"error: cannot read {os.path.join(directory, 'none.json')}: No such file or directory\n"),
            ]
            for argv, error in cases:
                with self.subTest(argv=argv):
                    code, out, err = run(*argv)
                    self.assertEqual((code, out), (2, ""))
                    if error.startswith("error: argument") or "arguments are required" in error:
                        # Bad arguments: the error line, then the usage and where to find help.
                        first, rest = err.split("\n", 1)
                        self.assertEqual(first + "\n", error)
                        self.assertTrue(rest.startswith("usage: toolreplay eval "), err)
                        self.assertTrue(rest.endswith("Try 'toolreplay eval --help' for more information.\n"), err)
                    else:
                        self.assertEqual(err, error)


SUITE_2 = os.path.join(ROOT, "samples", "eval-suite-2.json")
CAREFUL = "toolreplay.demos.bookings:careful_agent"
HASTY = "toolreplay.demos.bookings:hasty_agent"


class CiOutputTest(unittest.TestCase):
    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.directory = directory.name

    def baseline(self, agent: str, renamed: str | None = None) -> str:
        code, out, _ = run("eval", SUITE, "--agent", agent, "--format", "json")
        path = os.path.join(self.directory, "baseline.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(out if renamed is None else out.replace('"agent": "mock_model"', f'"agent": "{renamed}"'))
        return path

    def test_output_file_holds_the_report_and_stdout_nothing(self) -> None:
        code, out, err = run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--format", "json")
        target = os.path.join(self.directory, "report.json")
        self.assertEqual(run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--format", "json", "-o", target),
                         (code, "", err))
        with open(target, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), out)
        self.assertEqual(code, 1)
        missing = os.path.join(self.directory, "no", "such", "report.json")
        code, out, err = run("eval", SUITE, "--agent", MOCK, "-o", missing)
        self.assertEqual((code, out, os.path.exists(missing)), (2, "", False))
        self.assertTrue(err.startswith("error: "), err)

    def test_junit_one_test_case_per_case_and_agent(self) -> None:
        from xml.etree import ElementTree

        code, out, err = run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--format", "junit",
                             "--min-tool-match", "0.7")
        self.assertEqual((code, err), (1, ""))
        root = ElementTree.fromstring(out)
        self.assertEqual((root.tag, root.get("tests"), root.get("failures")), ("testsuites", "11", "3"))
        self.assertEqual([(suite.get("name"), suite.get("tests"), suite.get("failures")) for suite in root],
                         [("mock_model", "5", "0"), ("sloppy_model", "5", "2"), ("thresholds", "1", "1")])
        failures = [(case.get("classname"), case.get("name"), case[0].get("message"))
                    for suite in root for case in suite if len(case)]
        # the case's name is its id and question, so a suite made from logs (ids 0000, 0001) names its cases
        self.assertEqual(failures[0], ("sloppy_model", "all-orders-completed: I'm customer C-1042 and my last order "
                                                       "was 3015. Are all my orders completed?",
                                       'sloppy_model case 3 all-orders-completed: tool match failed (strict): expected '
                                       '[count_orders {"customer_id":"C-1042"}], called [get_order {"order_id":3015}]; '
                                       'answer correct: "Order 3015 is completed."'))
        self.assertEqual(failures[2], ("thresholds", "thresholds", "sloppy_model: tool match 0.60 is below 0.7"))
        self.assertTrue(out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="toolreplay eval '))

    def test_junit_with_trials_joins_the_failed_runs(self) -> None:
        from xml.etree import ElementTree

        _, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--format", "junit", "--trials", "2")
        (suite,) = ElementTree.fromstring(out)
        failure = suite[2][0]
        self.assertEqual(failure.text.splitlines()[1][:46], "sloppy_model case 3 trial 2 all-orders-complet")

    def test_baseline_reports_regressions_and_fails_only_on_them(self) -> None:
        same = self.baseline(SLOPPY)
        code, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--baseline", same)
        self.assertEqual(code, 0)  # two failures, both failing in the baseline too
        self.assertTrue(out.endswith(f"\n\nbaseline: {same}\nregressions: 0\nfixed: 0\n"))
        better = self.baseline(MOCK, renamed="sloppy_model")
        code, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--baseline", better)
        self.assertEqual(code, 1)
        self.assertIn(f"\nbaseline: {better}\nregressions: 2\nsloppy_model case 3 all-orders-completed: tool match "
                      "failed (strict)", out)
        self.assertTrue(out.endswith("\nfixed: 0\n"))
        code, out, _ = run("eval", SUITE, "--agent", MOCK, "--baseline", same.replace("baseline", "x"))
        self.assertEqual(code, 2)

    def test_fixed_cases_and_json(self) -> None:
        worse = self.baseline(SLOPPY)
        with open(worse, encoding="utf-8") as handle:
            text = handle.read().replace('"agent": "sloppy_model"', '"agent": "mock_model"')
        with open(worse, "w", encoding="utf-8") as handle:
            handle.write(text)
        code, out, _ = run("eval", SUITE, "--agent", MOCK, "--baseline", worse, "--format", "json")
        self.assertEqual(code, 0)
        self.assertEqual(json.loads(out)["baseline"], {
            "path": worse, "regressions": [],
            "fixed": [{"agent": "mock_model", "case": "all-orders-completed"},
                      {"agent": "mock_model", "case": "orders-placed"}]})

    def test_junit_with_a_baseline_skips_known_failures(self) -> None:
        from xml.etree import ElementTree

        same = self.baseline(SLOPPY)
        code, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--baseline", same, "--format", "junit")
        self.assertEqual(code, 0)
        (suite,) = ElementTree.fromstring(out)
        self.assertEqual((suite.get("failures"), suite.get("skipped")), ("0", "2"))
        self.assertTrue(suite[2][0].get("message", "").startswith("fails in the baseline too: sloppy_model case 3"))

    def test_malformed_baselines(self) -> None:
        path = os.path.join(self.directory, "b.json")
        for document, message in (
                ({"command": "replay"}, 'not an `eval --format json` result (no "command": "eval")'),
                ({"command": "eval"}, "agents must be an array, not missing"),
                ({"command": "eval", "agents": [{"agent": "a", "results": [{"case": "c", "success": 1}]}]},
                 "agents[0].results[0].success must be true or false, not number"),
                ({"command": "eval", "agents": [{"agent": 3}]}, "agents[0].agent must be a string, not number")):
            with self.subTest(message=message):
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(document, handle)
                self.assertEqual(run("eval", SUITE, "--agent", MOCK, "--baseline", path),
                                 (2, "", f"error: {path}: {message}\n"))

    def test_concurrency_gives_the_same_bytes(self) -> None:
        outputs = {run("eval", SUITE_2, "--agent", CAREFUL, "--agent", HASTY, "--trials", "3", "--concurrency", n,
                       "--format", form)[1] for n in ("1", "4") for form in ("text",)}
        self.assertEqual(len(outputs), 1)
        code, out, err = run("eval", SUITE, "--agent", MOCK, "--concurrency", "0")
        self.assertEqual((code, out, err.splitlines()[0]),
                         (2, "", "error: argument --concurrency: must be at least 1, got 0"))

    def test_record_cassette_then_replay_it(self) -> None:
        cassette = os.path.join(self.directory, "bookings-cassette.jsonl")
        code, live, _ = run("eval", SUITE_2, "--agent", CAREFUL, "--record-cassette", cassette)
        self.assertEqual(code, 0)
        with open(SUITE_2, encoding="utf-8") as handle:
            text = handle.read().replace('{"factory": "toolreplay.demos.bookings:make_tools"}',
                                         '{"cassette": "bookings-cassette.jsonl"}')
        suite = os.path.join(self.directory, "suite.json")
        with open(suite, "w", encoding="utf-8") as handle:
            handle.write(text)
        code, replayed, _ = run("eval", suite, "--agent", CAREFUL)
        self.assertEqual((code, replayed.splitlines()[1:]), (0, live.splitlines()[1:]))
        with open(cassette, "rb") as recorded, open(os.path.join(ROOT, "samples", "bookings-cassette.jsonl"),
                                                    "rb") as shipped:
            self.assertEqual(recorded.read(), shipped.read())
        missing = os.path.join(self.directory, "no", "c.jsonl")
        self.assertEqual(run("eval", SUITE_2, "--agent", CAREFUL, "--record-cassette", missing),
                         (2, "", f"error: cannot write {missing}: No such file or directory\n"))

    def test_second_suite_report(self) -> None:
        code, out, _ = run("eval", SUITE_2, "--agent", CAREFUL, "--agent", HASTY)
        self.assertEqual(code, 1)
        self.assertEqual(out.splitlines()[2:6], [
            "careful_agent      2     1.00        1.00            4.0          2          0",
            "hasty_agent        2     0.00        0.00            2.0          0          0",
            "",
            "failed: 2"])
        self.assertIn('; book_table argument "date" (expected "2026-12-24", got "2026-12-25"); answer has the '
                      'information: "Booked: B-1."; scorer toolreplay.demos.bookings:booking_made said no', out)


def odd_agent(conversation: Conversation) -> ToolCall | Answer:
    """Calls with U+FFFF in an argument, answers with U+FFFF, U+FFFE and C0 controls (tab and NUL)."""
    if conversation.calls:
        return Answer("Order \uffff is \ufffe\tshipped\x00\x1b[2J.")
    return ToolCall("get_order", {"order_id": "30\uffff1"})


ODD_LINE = ('odd_agent case 1 odd: tool match failed (strict): expected [get_order {"order_id":"\\uffff"}], '
            'called [get_order {"order_id":"30\\uffff1"}]; get_order argument "order_id" (expected "\\uffff", '
            'got "30\\uffff1"); answer missing "\\uffff\\ufffe": "Order \\uffff is \\ufffe\\tshipped\\u0000'
            '\\u001b[2J."')


def _junit_parser() -> Any:
    try:
        import junitparser  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return junitparser


class JunitConsumerTest(unittest.TestCase):
    """The JUnit report as a real consumer reads it, whatever characters the agent or the suite hold."""

    def setUp(self) -> None:
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        self.suite = os.path.join(directory.name, "odd\uffff.json")
        with open(self.suite, "w", encoding="utf-8") as handle:
            json.dump({"tools": {"module": "toolreplay.demos.orders:TOOLS"}, "cases": [
                {"id": "odd", "question": "Where is order \uffff?", "expected_answer": "\uffff\ufffe",
                 "expected_tools": [{"tool": "get_order", "args": {"order_id": "\uffff"}}]}]}, handle)

    def junit(self, *options: str) -> str:
        code, out, err = run("eval", self.suite, "--agent", "tests.test_cli_evaluate:odd_agent", "--agent", MOCK,
                             "--format", "junit", *options)
        self.assertEqual((code, err), (1, ""))
        return out

    def test_forbidden_characters_are_shown_escaped_and_errors_is_there(self) -> None:
        out = self.junit("--min-success", "1")
        self.assertFalse(set(out) & {"\uffff", "\ufffe", "\x00", "\x1b"})
        root = ElementTree.fromstring(out.encode("utf-8"))
        self.assertEqual(root.get("name"), "toolreplay eval " + self.suite.replace("\uffff", "\\uffff"))
        self.assertEqual([(element.tag, element.get("errors")) for element in root.iter()
                          if element.tag in ("testsuites", "testsuite")],
                         [("testsuites", "0"), ("testsuite", "0"), ("testsuite", "0"), ("testsuite", "0")])
        failure = root.find("testsuite/testcase/failure")
        assert failure is not None
        self.assertEqual((failure.get("message"), failure.text), (ODD_LINE, ODD_LINE))

    def test_a_real_junit_consumer_reads_it(self) -> None:
        junitparser = _junit_parser()
        require(junitparser is not None, "junitparser is not installed (pip install junitparser)")
        with_baseline = os.path.join(os.path.dirname(self.suite), "baseline.json")
        with open(with_baseline, "w", encoding="utf-8") as handle:
            handle.write(run("eval", self.suite, "--agent", "tests.test_cli_evaluate:odd_agent", "--format",
                             "json")[1])
        for options in ((), ("--min-success", "1"), ("--baseline", with_baseline)):
            with self.subTest(options=options):
                code, out, _ = run("eval", self.suite, "--agent", "tests.test_cli_evaluate:odd_agent",
                                   "--format", "junit", *options)
                self.assertEqual(code, 0 if options[:1] == ("--baseline",) else 1)
                document = junitparser.JUnitXml.fromstring(out.encode("utf-8"))
                suites = list(document)
                self.assertEqual(suites[0].name, "odd_agent")
                self.assertEqual((suites[0].tests, suites[0].errors), (1, 0))
                (case,) = list(suites[0])
                self.assertEqual(case.name, "odd: Where is order \\uffff?")
                (result,) = case.result
                if options[:1] == ("--baseline",):
                    self.assertIsInstance(result, junitparser.Skipped)
                    self.assertEqual(result.message, "fails in the baseline too: " + ODD_LINE)
                else:
                    self.assertIsInstance(result, junitparser.Failure)
                    self.assertEqual((result.message, result.text), (ODD_LINE, ODD_LINE))
                    self.assertEqual(suites[0].failures, 1)

    def test_lone_surrogates_from_the_python_api(self) -> None:
        # Files cannot hold a lone surrogate (the strict JSON reader refuses it); a suite built in Python can.
        suite = parse_suite({"tools": {"module": "toolreplay.demos.orders:TOOLS"}, "cases": [
            {"id": "s", "question": "q", "expected_answer": "x\ud801y", "expected_tools": []}]}, "s\udc00.json")
        report = evaluate(suite, [NamedAgent("a", "m:a", lambda conversation: Answer("no"))])
        out = eval_junit(report)
        root = ElementTree.fromstring(out.encode("utf-8"))
        self.assertEqual(root.get("name"), "toolreplay eval s\\udc00.json")
        failure = root.find("testsuite/testcase/failure")
        assert failure is not None
        self.assertEqual(failure.text, 'a case 1 s: tools ok; answer missing "x\\ud801y": "no"')


MEETING_TOOLS = {"book_meeting": lambda **args: {"ok": True, "id": "M-1"}}


def late_meeting_agent(conversation: Conversation) -> ToolCall | Answer:
    """Books the meeting half an hour late, with an extra field."""
    if conversation.calls:
        return Answer("Booked M-1.")
    return ToolCall("book_meeting", {"title": "Sync", "time": {"start": "09:30", "end": "10:00"}, "room": "A"})


class ArgumentModeCommandTest(unittest.TestCase):
    def suite(self, args_match: Any, directory: str) -> str:
        path = os.path.join(directory, "meetings.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"tools": {"module": "tests.test_cli_evaluate:MEETING_TOOLS"}, "cases": [
                {"id": "sync", "question": "Book the sync at 9.", "expected_answer": "M-1", "args_match": args_match,
                 "expected_tools": [{"tool": "book_meeting",
                                     "args": {"title": "Sync", "time": {"start": "09:00", "end": "10:00"}}}]}]},
                      handle)
        return path

    def test_a_nested_field_is_compared(self) -> None:
        # "time.start" used to be read as a top-level key that neither side has: the check always passed.
        with tempfile.TemporaryDirectory() as directory:
            for args_match, tools in ((["time.start"], 'book_meeting argument "time.start" (expected "09:00", got '
                                                        '"09:30")'),
                                      ([["time", "end"], "title"], None)):
                with self.subTest(args_match=args_match):
                    code, out, err = run("eval", self.suite(args_match, directory), "--agent",
                                         "tests.test_cli_evaluate:late_meeting_agent")
                    self.assertEqual((code, err), (0 if tools is None else 1, ""))
                    self.assertTrue(tools in out if tools else out.endswith("failed: 0\n"), out)

    def test_subset_and_superset_as_in_agentevals_with_a_warning(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            for args_match, extras_allowed, warned in (("superset", True, True), ("includes", True, False),
                                                       ("subset", False, True), ("within", False, False)):
                with self.subTest(args_match=args_match):
                    path = self.suite(args_match, directory)
                    result = run("eval", path, "--agent", "tests.test_cli_evaluate:late_meeting_agent")
                    # The call adds "room" and gets "time" wrong: only "time" fails a superset check.
                    self.assertEqual(result[0], 1)
                    self.assertEqual(result[2].startswith(f'warning: {path}: args_match "{args_match}" (cases[0].'
                                                          'args_match) now means what it means in agentevals: '),
                                     warned)
                    self.assertEqual(result[2].count("\n"), int(warned))
                    made = ('"time" (expected {"end":"10:00","start":"09:00"}, got {"end":"10:00","start":"09:30"})'
                            if extras_allowed else '"room" (expected none, got "A")')
                    self.assertIn(f"book_meeting argument {made}", result[1])


class CurrentDirectoryTest(unittest.TestCase):
    def test_suite_tools_and_agent_import_from_the_current_directory_without_it_on_the_path(self) -> None:
        # `python -P -m` leaves the current directory off sys.path, as the `toolreplay` console script does.
        with tempfile.TemporaryDirectory() as directory:
            with open(os.path.join(directory, "local_tools.py"), "w", encoding="utf-8") as handle:
                handle.write("from toolreplay.evaluation import Answer, ToolCall\n"
                             "TOOLS = {'ping': lambda: {'pong': True}}\n"
                             "def agent(conversation):\n"
                             "    return Answer('pong') if conversation.calls else ToolCall('ping', {})\n")
            with open(os.path.join(directory, "suite.json"), "w", encoding="utf-8") as handle:
                json.dump({"tools": {"module": "local_tools:TOOLS"}, "cases": [
                    {"id": "p", "question": "ping?", "expected_answer": "pong", "expected_tools": ["ping"]}]},
                    handle)
            done = subprocess.run([sys.executable, "-P", "-m", "toolreplay", "eval", "suite.json", "--agent",
                                   "local_tools:agent"], cwd=directory, env=dict(os.environ, PYTHONPATH=ROOT),
                                  capture_output=True, text=True, check=False)
        self.assertEqual((done.returncode, done.stderr), (0, ""))
        self.assertEqual(done.stdout.splitlines()[2], "agent      1     1.00        1.00            2.0          0          0")


if __name__ == "__main__":
    unittest.main()
