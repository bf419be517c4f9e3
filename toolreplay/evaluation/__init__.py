"""Evaluate agents over a suite of cases, scoring the answer and the path.

The pieces, one module each: `agent` (the protocol), `suite` (the file format), `tools` (module or
cassette tools), `metrics` (success, tool match, pass^k), `runner` (runs through the guard's Gate),
`report` (text and JSON).
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
from toolreplay.evaluation.metrics import MATCH_MODES, ExpectedCall, pass_hat_k, tools_match
from toolreplay.evaluation.report import Thresholds, eval_json, eval_text, unmet_thresholds
from toolreplay.evaluation.runner import (
           DEFAULT_MAX_STEPS,
           AgentReport,
           CaseRun,
           EvalReport,
           evaluate,
           run_case,
)
from toolreplay.evaluation.suite import Case, Suite, load_suite, parse_suite

__all__ = [
    "Agent", "AgentReport", "Answer", "CallResult", "Case", "CaseRun", "Conversation", "DEFAULT_MAX_STEPS",
    "EvalReport", "ExpectedCall", "MATCH_MODES", "NamedAgent", "Suite", "Thresholds", "ToolCall", "eval_json",
    "eval_text", "evaluate", "load_agents", "load_suite", "parse_suite", "pass_hat_k", "run_case",
    "tools_match", "unmet_thresholds",
]
