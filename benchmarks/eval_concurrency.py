"""`eval --concurrency 8` against `--concurrency 1`, in the same run, for an agent that waits on its model.

    python benchmarks/eval_concurrency.py [--cases N] [--trials K] [--sleep SECONDS] [--runs R]

The agent is the orders demo's `mock_model` with a sleep before every turn (50 ms by default), the
time a remote model takes to answer: the evaluation waits, it does not compute. The suite is the
orders demo's five cases repeated to N cases (default 20), each run K times (default 3), so 60 runs
of two turns each. Each setting runs R times (default 3, interleaved); the best wall time counts.
The report of both settings must be the same bytes. Target (issue 14): `--concurrency 8` at least 6x
faster than `--concurrency 1`. Exit 0 when met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from toolreplay.demos.orders import SUITE, mock_model  # noqa: E402
from toolreplay.evaluation.agent import Answer, Conversation, NamedAgent, ToolCall  # noqa: E402
from toolreplay.evaluation.report import eval_text  # noqa: E402
from toolreplay.evaluation.runner import evaluate  # noqa: E402
from toolreplay.evaluation.suite import parse_suite  # noqa: E402

TARGET = 6.0


def slow_agent(seconds: float) -> NamedAgent:
    """The demo's right-tool script, waiting `seconds` per turn like a remote model."""
    def agent(conversation: Conversation) -> ToolCall | Answer:
        time.sleep(seconds)
        return mock_model(conversation)
    return NamedAgent("slow_model", "benchmarks:slow_model", agent)


def suite_of(cases: int) -> Any:
    """The demo suite's cases repeated (with fresh ids) up to `cases`."""
    document = copy.deepcopy(SUITE)
    base = document["cases"]
    document["cases"] = [dict(base[n % len(base)], id=f"{base[n % len(base)]['id']}-{n}") for n in range(cases)]
    return parse_suite(document, "benchmark-suite")


def timed(suite: Any, agent: NamedAgent, trials: int, concurrency: int) -> tuple[float, str]:
    start = time.perf_counter()
    report = evaluate(suite, [agent], trials=trials, concurrency=concurrency)
    return time.perf_counter() - start, eval_text(report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    suite, agent = suite_of(args.cases), slow_agent(args.sleep)
    best = {1: float("inf"), 8: float("inf")}
    reports = set()
    for _ in range(args.runs):
        for concurrency in (1, 8):
            seconds, report = timed(suite, agent, args.trials, concurrency)
            best[concurrency] = min(best[concurrency], seconds)
            reports.add(report)
    ratio = best[1] / best[8]
    out = io.StringIO()
    out.write(f"runs: {args.cases} cases x {args.trials} trials, {args.sleep * 1000:g} ms per model turn\n")
    out.write(f"--concurrency 1: {best[1]:.2f} s\n--concurrency 8: {best[8]:.2f} s\n")
    out.write(f"speed-up: {ratio:.1f}x (target >= {TARGET:g}x)\n")
    out.write(f"same report: {'yes' if len(reports) == 1 else 'NO'}\n")
    sys.stdout.write(out.getvalue())
    return 0 if ratio >= TARGET and len(reports) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
