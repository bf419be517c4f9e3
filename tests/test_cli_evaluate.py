"""`toolreplay eval` in-process: exit codes 0/1/2, thresholds, formats, recording, bad input."""

from __future__ import annotations

import json
import os
import tempfile
import unittest

from toolreplay.cli import main
from toolreplay.cli._io import IO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "samples", "eval-suite.json")
MOCK = "toolreplay.demos.orders:mock_model"
SLOPPY = "toolreplay.demos.orders:sloppy_model"


def run(*argv: str) -> tuple[int, str, str]:
    streams = IO.memory()
    code = main(list(argv), streams)
    return code, streams.out(), streams.err()


class EvalCommandTest(unittest.TestCase):
    def test_report_only_by_default(self) -> None:
        code, out, err = run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY)
        self.assertEqual((code, err), (0, ""))
        lines = out.splitlines()
        self.assertEqual(lines[0], f"suite: {SUITE} (5 cases, 1 trial, step limit 10)")
        self.assertEqual(lines[3], "sloppy_model      5     0.80        0.60            2.0          0          0")
        self.assertEqual(lines[5], "failed: 2")

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
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines()[:3], [
            f"suite: {SUITE} (5 cases, 3 trials, step limit 10)",
            "agent         cases  success  tool match  average steps  redundant  overreach  pass^1  pass^2  pass^3",
            "sloppy_model      5     0.80        0.60            2.0          0          0    0.80    0.80    0.80"])
        self.assertIn("sloppy_model case 3 trial 2 all-orders-completed: tool match failed (strict)", out)

    def test_shipped_cassette_suite(self) -> None:
        code, out, _ = run("eval", os.path.join(ROOT, "samples", "eval-cassette.json"), "--agent", MOCK,
                           "--agent", SLOPPY)
        self.assertEqual(code, 0)
        self.assertEqual(out.splitlines()[2:4], [
            "mock_model        5     1.00        1.00            2.0          0          0",
            "sloppy_model      5     0.60        0.60            2.0          0          0"])
        self.assertTrue(out.endswith('; no recording for [get_order {"order_id":3021}]\n'))

    def test_match_option(self) -> None:
        _, out, _ = run("eval", SUITE, "--agent", SLOPPY, "--match", "superset")
        self.assertIn("tool match failed (superset)", out)

    def test_recorded_sessions_pass_replay_and_scope(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            self.assertEqual(run("eval", SUITE, "--agent", MOCK, "--agent", SLOPPY, "--record", directory)[0], 0)
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


if __name__ == "__main__":
    unittest.main()
