"""Compare an evaluation with a baseline (an earlier `eval --format json` result), case by case.

A case passes when every trial of it passed both checks (success and tool match). A regression is a
case, of an agent, that passed in the baseline and fails now; a fix is the reverse. Cases or agents
the baseline does not have are neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError
from toolreplay.evaluation.runner import AgentReport, CaseRun, EvalReport
from toolreplay.format.strictjson import json_type_name, read_json_file

__all__ = ["Baseline", "BaselineComparison", "compare_with_baseline", "load_baseline", "parse_baseline"]


@dataclass(frozen=True, slots=True)
class Baseline:
    """Whether each (agent, case id) passed in the baseline, and the file it came from."""

    path: str
    passed: dict[tuple[str, str], bool]


@dataclass(frozen=True, slots=True)
class BaselineComparison:
    """The runs that regressed (failed runs of cases that passed before) and the cases now fixed."""

    path: str
    regressions: tuple[tuple[AgentReport, CaseRun], ...]
    fixed: tuple[tuple[AgentReport, CaseRun], ...]

    def known_failure(self, agent: AgentReport, run: CaseRun) -> bool:
        """A failed run that is not a regression (its case failed in the baseline too, or is new)."""
        return not run.passed and all(run is not other for _, other in self.regressions)


def _field(obj: dict[str, Any], name: str, kind: type, where: str) -> Any:
    value = obj.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {str: "a string", bool: "true or false", list: "an array", int: "an integer"}[kind]
        shown = "missing" if name not in obj else json_type_name(value)
        raise ValueError(f"{where}.{name} must be {expected}, not {shown}")
    return value


def parse_baseline(document: Any, path: str) -> Baseline:
    """Validate a parsed `eval --format json` result; errors are InputErrors naming PATH and the field."""
    try:
        if not isinstance(document, dict) or document.get("command") != "eval":
            raise ValueError("not an `eval --format json` result (no \"command\": \"eval\")")
        passed: dict[tuple[str, str], bool] = {}
        for number, agent in enumerate(_field(document, "agents", list, "")):
            where = f"agents[{number}]"
            if not isinstance(agent, dict):
                raise ValueError(f"{where} must be an object, not {json_type_name(agent)}")
            name = _field(agent, "agent", str, where)
            for position, result in enumerate(_field(agent, "results", list, where)):
                at = f"{where}.results[{position}]"
                if not isinstance(result, dict):
                    raise ValueError(f"{at} must be an object, not {json_type_name(result)}")
                case = _field(result, "case", str, at)
                ok = _field(result, "success", bool, at) and _field(result, "tool_match", bool, at)
                passed[name, case] = passed.get((name, case), True) and ok
    except ValueError as exc:
        raise InputError(path, None, str(exc).removeprefix(".")) from None
    return Baseline(path, passed)


def load_baseline(path: str) -> Baseline:
    """Read a baseline file (strict JSON); an unreadable file is a UsageError."""
    return parse_baseline(read_json_file(path), path)


def compare_with_baseline(report: EvalReport, baseline: Baseline) -> BaselineComparison:
    """Regressions (each failed run of a case that passed in the baseline) and fixes, in report order."""
    regressions: list[tuple[AgentReport, CaseRun]] = []
    fixed: list[tuple[AgentReport, CaseRun]] = []
    for agent in report.agents:
        now: dict[str, bool] = {}
        first: dict[str, CaseRun] = {}
        for run in agent.runs:
            now[run.case.id] = now.get(run.case.id, True) and run.passed
            first.setdefault(run.case.id, run)
        for run in agent.runs:
            before = baseline.passed.get((agent.name, run.case.id))
            if before is True and not run.passed:
                regressions.append((agent, run))
        for case_id, run in first.items():
            if baseline.passed.get((agent.name, case_id)) is False and now[case_id]:
                fixed.append((agent, run))
    return BaselineComparison(baseline.path, tuple(regressions), tuple(fixed))
