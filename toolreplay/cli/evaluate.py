"""`eval SUITE --agent MODULE:CALLABLE ...`: score agents on a suite; exit 1 when a run fails.

With `--min-success`, `--min-tool-match` or `--baseline`, those say what passes instead: exit 1 only
on an unmet threshold or a regression.
"""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.errors import UsageError
from toolreplay.evaluation.agent import load_agents
from toolreplay.evaluation.baseline import compare_with_baseline, load_baseline
from toolreplay.evaluation.metrics import MATCH_MODES
from toolreplay.evaluation.report import Thresholds, eval_json, eval_junit, eval_text, exit_code
from toolreplay.evaluation.runner import DEFAULT_MAX_STEPS, cite_runs, evaluate
from toolreplay.evaluation.suite import load_suite
from toolreplay.format.output import write_atomically
from toolreplay.format.text import escape_text

__all__ = ["register"]


def _share(text: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _run_eval(args: argparse.Namespace, io: IO) -> int:
    # Like `python -m`, let tool modules, factories, scorers and agents live in the current directory
    # even under the console script, whose sys.path does not hold it: before the suite imports any.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    if args.cite and (args.format != "json" or args.record is None):
        raise UsageError("--cite goes with --format json and --record DIR (the sessions it cites)")
    suite = load_suite(args.suite)
    for warning in suite.warnings:
        io.stderr.write(escape_text(f"warning: {suite.path}: {warning}") + "\n")
    agents = load_agents(args.agent)
    baseline = load_baseline(args.baseline) if args.baseline is not None else None
    report = evaluate(suite, agents, trials=args.trials, max_steps=args.max_steps, match=args.match,
                      record_dir=args.record, concurrency=args.concurrency, record_cassette=args.record_cassette)
    thresholds = Thresholds(args.min_success, args.min_tool_match)
    comparison = compare_with_baseline(report, baseline) if baseline is not None else None
    if args.cite:
        text = eval_json(report, thresholds, comparison, cite_runs(report, args.record))
    else:
        render = {"text": eval_text, "json": eval_json, "junit": eval_junit}[args.format]
        text = render(report, thresholds, comparison)
    if args.output:
        with write_atomically(args.output) as output:
            output.write(text.encode("utf-8"))
    else:
        io.stdout.write(text)
    return exit_code(report, thresholds, comparison)


def register(subparsers: Any) -> None:
    """Add `eval`."""
    parser = subparsers.add_parser(
        "eval", help="run agents over a suite and score answers and tool calls",
        epilog="exit codes:\n  0  every run passed; with --min-success, --min-tool-match or --baseline: every\n"
               "     agent met the thresholds and no case regressed against the baseline\n"
               "  1  a run failed; with those options: an agent missed a threshold, or a case regressed\n"
               "  2  usage error, a suite that does not validate, an agent, factory or scorer that\n"
               "     cannot be imported, a malformed baseline")
    parser.add_argument("suite", metavar="SUITE", help="the suite file (JSON)")
    parser.add_argument("--agent", metavar="MODULE:CALLABLE", action="append", required=True,
                        help="an agent to evaluate (repeatable)")
    parser.add_argument("--min-success", metavar="X", type=_share,
                        help="exit 1 when an agent's success is below X (not on every failed run)")
    parser.add_argument("--min-tool-match", metavar="X", type=_share,
                        help="exit 1 when an agent's tool match is below X (not on every failed run)")
    parser.add_argument("--trials", metavar="K", type=_positive, default=1,
                        help="run each case K times and report pass^1..pass^K (default: 1)")
    parser.add_argument("--max-steps", metavar="N", type=_positive, default=DEFAULT_MAX_STEPS,
                        help=f"tool calls allowed per case (default: {DEFAULT_MAX_STEPS})")
    parser.add_argument("--match", choices=MATCH_MODES,
                        help="tool match mode for cases that set none (default: strict)")
    parser.add_argument("--record", metavar="DIR", help="write each run as a session: DIR/AGENT/CASE.jsonl")
    parser.add_argument("--record-cassette", metavar="FILE",
                        help="write every call the tools answered as one session, a cassette for the suite")
    parser.add_argument("--concurrency", metavar="N", type=_positive, default=1,
                        help="run N cases or trials at a time, in threads (default: 1); the report is the same")
    parser.add_argument("--baseline", metavar="FILE",
                        help="an earlier --format json result: report regressions, exit 1 only on those "
                             "(and on unmet thresholds)")
    parser.add_argument("--format", choices=("text", "json", "junit"), default="text",
                        help="report format: text, json or JUnit XML (default: text)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the report to FILE (atomically) instead of standard output")
    parser.add_argument("--cite", action="store_true",
                        help="with --format json and --record DIR: each run names its recorded session and that "
                             "session's Merkle tree (size and root, as seal --tlog makes it)")
    parser.set_defaults(run=_run_eval)
