"""Evaluate agents over a suite of cases, scoring the answer and the path.

The pieces, one module each: `agent` (the protocol), `suite` (the file format), `tools` (module,
factory or cassette tools), `metrics` (argument modes, tool match, pass^k), `runner` (runs through
the guard, in parallel if asked), `recording` (what a run writes), `report` (text, JSON, JUnit XML),
`baseline` (regressions against an earlier result), `from_logs` (a suite from imported logs) and
`recorded` (the agent that replays such a suite's recording).
"""

from __future__ import annotations

from toolreplay.evaluation.agent import (
           Agent,
           Answer,
           CallResult,
           Conversation,
           NamedAgent,
           ToolCall,
           load_agents,
)
from toolreplay.evaluation.baseline import compare_with_baseline, load_baseline
from toolreplay.evaluation.metrics import ARGUMENT_MODES, MATCH_MODES, ExpectedCall, pass_hat_k, tools_match
from toolreplay.evaluation.report import Thresholds, eval_json, eval_junit, eval_text, unmet_thresholds
from toolreplay.evaluation.runner import (
           DEFAULT_MAX_STEPS,
           AgentReport,
           CaseRun,
           EvalReport,
           evaluate,
           run_case,
)
from toolreplay.evaluation.suite import Case, Scorer, Suite, load_suite, parse_suite

__all__ = [
    "ARGUMENT_MODES", "Agent", "AgentReport", "Answer", "CallResult", "Case", "CaseRun", "Conversation",
    "DEFAULT_MAX_STEPS", "EvalReport", "ExpectedCall", "MATCH_MODES", "NamedAgent", "Scorer", "Suite",
    "Thresholds", "ToolCall", "compare_with_baseline", "eval_json", "eval_junit", "eval_text", "evaluate",
    "load_agents", "load_baseline", "load_suite", "parse_suite", "pass_hat_k", "run_case", "tools_match",
    "unmet_thresholds",
]
