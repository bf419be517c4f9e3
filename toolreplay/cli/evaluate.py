"""`eval SUITE --agent MODULE:CALLABLE ...`: score agents on a suite; exit 1 when one misses a threshold."""

from __future__ import annotations

import argparse
import os
import sys
from fractions import Fraction
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.evaluation.agent import load_agents
from toolreplay.evaluation.metrics import MATCH_MODES
from toolreplay.evaluation.report import Thresholds, eval_json, eval_text, unmet_thresholds
from toolreplay.evaluation.runner import DEFAULT_MAX_STEPS, evaluate
from toolreplay.evaluation.suite import load_suite

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
    suite = load_suite(args.suite)
    # Like `python -m`, let agents live in the current directory even under the console script.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    agents = load_agents(args.agent)
    report = evaluate(suite, agents, trials=args.trials, max_steps=args.max_steps, match=args.match,
                      record_dir=args.record)
    thresholds = Thresholds(args.min_success, args.min_tool_match)
    io.stdout.write(eval_json(report, thresholds) if args.format == "json" else eval_text(report, thresholds))
    return 1 if unmet_thresholds(report, thresholds) else 0


def register(subparsers: Any) -> None:
    """Add `eval`."""
    parser = subparsers.add_parser(
        "eval", help="run agents over a suite and score answers and tool calls",
        epilog="exit codes:\n  0  every agent met the thresholds (or none were given)\n  1  an agent did not\n"
               "  2  usage error, a suite that does not validate, an agent that cannot be imported")
    parser.add_argument("suite", metavar="SUITE", help="the suite file (JSON)")
    parser.add_argument("--agent", metavar="MODULE:CALLABLE", action="append", required=True,
                        help="an agent to evaluate (repeatable)")
    parser.add_argument("--min-success", metavar="X", type=_share,
                        help="exit 1 when an agent's success is below X")
    parser.add_argument("--min-tool-match", metavar="X", type=_share,
                        help="exit 1 when an agent's tool match is below X")
    parser.add_argument("--trials", metavar="K", type=_positive, default=1,
                        help="run each case K times and report pass^1..pass^K (default: 1)")
    parser.add_argument("--max-steps", metavar="N", type=_positive, default=DEFAULT_MAX_STEPS,
                        help=f"tool calls allowed per case (default: {DEFAULT_MAX_STEPS})")
    parser.add_argument("--match", choices=MATCH_MODES,
                        help="tool match mode for cases that set none (default: strict)")
    parser.add_argument("--record", metavar="DIR", help="write each run as a session: DIR/AGENT/CASE.jsonl")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="report format (default: text)")
    parser.set_defaults(run=_run_eval)
