"""`demo eval`: the order-support evaluation, five cases against two scripted models."""

from __future__ import annotations

from typing import TextIO

from toolreplay.demos.orders import SUITE
from toolreplay.evaluation.agent import load_agents
from toolreplay.evaluation.report import eval_text, exit_code
from toolreplay.evaluation.runner import evaluate
from toolreplay.evaluation.suite import parse_suite

__all__ = ["run", "SUITE_NAME", "AGENTS"]

SUITE_NAME = "toolreplay.demos.orders:SUITE"
AGENTS = ("toolreplay.demos.orders:mock_model", "toolreplay.demos.orders:sloppy_model")


def run(out: TextIO, record: str | None = None) -> int:
    """Evaluate both scripted models on the orders suite and print the report; `record` is a directory.
    The exit status is `eval`'s: 1, since the sloppy model fails two cases."""
    suite = parse_suite(SUITE, SUITE_NAME)
    report = evaluate(suite, load_agents(list(AGENTS)), record_dir=record)
    out.write(eval_text(report))
    return exit_code(report)
