"""The evaluation report as text or JSON: pure functions of an EvalReport and the thresholds."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any
from xml.etree import ElementTree

from toolreplay.evaluation.baseline import BaselineComparison
from toolreplay.evaluation.metrics import argument_mismatches
from toolreplay.evaluation.runner import AgentReport, CaseRun, EvalReport
from toolreplay.format.canonical import canonical_json
from toolreplay.format.text import escape_text

__all__ = ["Thresholds", "eval_json", "eval_junit", "eval_text", "exit_code", "failure_line", "unmet_thresholds"]

_ANSWER_SHOWN = 160  # characters of an answer quoted on a failure line


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The minimum success and tool match every agent must reach; None checks nothing."""

    min_success: Fraction | None = None
    min_tool_match: Fraction | None = None


def unmet_thresholds(report: EvalReport, thresholds: Thresholds) -> list[str]:
    """One message per agent and metric below its threshold, in report order."""
    unmet = []
    for agent in report.agents:
        for metric, value, minimum in (("success", agent.success, thresholds.min_success),
                                       ("tool match", agent.tool_match, thresholds.min_tool_match)):
            if minimum is not None and value < minimum:
                unmet.append(f"{agent.name}: {metric} {_ratio(value)} is below {_plain(minimum)}")
    return unmet


def exit_code(report: EvalReport, thresholds: Thresholds = Thresholds(),
              comparison: BaselineComparison | None = None) -> int:
    """What `eval` exits with: with no threshold and no baseline, 1 when any run failed (like a test
    runner); else 1 when an agent missed a threshold or a case regressed; 0 otherwise."""
    if comparison is None and thresholds == Thresholds():
        return 1 if any(agent.failures for agent in report.agents) else 0
    regressed = comparison is not None and bool(comparison.regressions)
    return 1 if unmet_thresholds(report, thresholds) or regressed else 0


def _case_name(case_id: str, question: str) -> str:
    """A JUnit test case's name: the case id and its question (first line, at most 80 characters), so a
    suite made from logs (ids 0000, 0001, ...) still names what each case asks."""
    first = question.strip().splitlines()[0] if question.strip() else ""
    shown = first if len(first) <= 80 else first[:79] + "…"
    return f"{case_id}: {shown}" if shown else case_id


def _ratio(value: Fraction) -> str:
    return f"{float(value):.2f}"


def _plain(value: Fraction) -> str:
    return format(float(value), "g")


def _calls(items: Sequence[object]) -> str:
    return "[" + ", ".join(str(item) for item in items) + "]"


def _quoted(answer: str) -> str:
    shown = answer if len(answer) <= _ANSWER_SHOWN else answer[:_ANSWER_SHOWN - 3] + "..."
    return json.dumps(shown, ensure_ascii=False)


def _answer_part(run: CaseRun) -> str:
    if run.answer is None:
        return f"no answer: {run.stop}"
    if run.missing:
        return "answer missing " + ", ".join(json.dumps(piece, ensure_ascii=False) for piece in run.missing) \
            + ": " + _quoted(run.answer)
    if not run.case.expected_answer:
        return "answer: " + _quoted(run.answer)
    return ("answer correct: " if run.success else "answer has the information: ") + _quoted(run.answer)


def failure_line(agent: AgentReport, run: CaseRun) -> str:
    """One line for a failed run: which case, what was expected, what was called or answered."""
    trial = f" trial {run.trial}" if agent.trials > 1 else ""
    if run.tool_match:
        tools = "tools ok"
    else:
        called = [f"{call.tool} {canonical_json(call.args)}" for call in run.calls]
        tools = (f"tool match failed ({run.mode}): expected {_calls(run.case.expected_tools)}, "
                 f"called {_calls(called)}")
        made = [(call.tool, canonical_json(call.args)) for call in run.calls]
        tools += "".join(f"; {note}" for note in argument_mismatches(run.case.expected_tools, made))
    misses = f"; no recording for {_calls(run.misses)}" if run.misses else ""
    scorer = f"; {run.score_failure}" if run.score_failure else ""
    return f"{agent.name} case {run.position}{trial} {run.case.id}: {tools}; {_answer_part(run)}{misses}{scorer}"


def _table(report: EvalReport) -> list[str]:
    pass_columns = [f"pass^{k}" for k in range(1, report.trials + 1)] if report.trials > 1 else []
    header = ["agent", "cases", "success", "tool match", "average steps", "redundant", "overreach",
              *pass_columns]
    rows = [header]
    for agent in report.agents:
        rows.append([agent.name, str(agent.cases), _ratio(agent.success), _ratio(agent.tool_match),
                     f"{float(agent.average_steps):.1f}", str(agent.redundant), str(agent.overreach),
                     *(_ratio(value) for value in (agent.pass_hat() if pass_columns else []))])
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    return ["  ".join(cell.ljust(widths[0]) if column == 0 else cell.rjust(widths[column])
                      for column, cell in enumerate(row)).rstrip() for row in rows]


def _baseline_lines(comparison: BaselineComparison) -> list[str]:
    regressions = [failure_line(agent, run) for agent, run in comparison.regressions]
    fixed = [f"{agent.name} case {run.position} {run.case.id}" for agent, run in comparison.fixed]
    return ["", f"baseline: {comparison.path}", f"regressions: {len(regressions)}", *regressions,
            f"fixed: {len(fixed)}", *fixed]


def eval_text(report: EvalReport, thresholds: Thresholds = Thresholds(),
              comparison: BaselineComparison | None = None) -> str:
    """The table (one row per agent), one line per failed run, unmet thresholds, then regressions if any."""
    trials = "1 trial" if report.trials == 1 else f"{report.trials} trials"
    lines = [f"suite: {report.suite} ({report.cases} cases, {trials}, step limit {report.max_steps})"]
    lines += _table(report)
    failures = [escape_text(failure_line(agent, run)) for agent in report.agents for run in agent.failures]
    lines += ["", f"failed: {len(failures)}", *failures]
    unmet = unmet_thresholds(report, thresholds)
    if thresholds.min_success is not None or thresholds.min_tool_match is not None:
        lines += ["", "thresholds: " + ("met" if not unmet else "not met"), *unmet]
    if comparison is not None:
        lines += _baseline_lines(comparison)
    return "\n".join(escape_text(line) for line in lines) + "\n"


Citations = Mapping[tuple[str, str, int], tuple[str, int, str]]  # (agent, case, trial) -> (session, size, root)


def _run_object(run: CaseRun, agent: str = "", citations: Citations | None = None) -> dict[str, Any]:
    document = _run_fields(run)
    if citations is not None:  # --cite: the recorded session of this run, and its tree
        path, size, root = citations[(agent, run.case.id, run.trial)]
        document["session"] = path
        document["tree"] = {"size": size, "root": root}
    return document


def _run_fields(run: CaseRun) -> dict[str, Any]:
    return {"case": run.case.id, "position": run.position, "trial": run.trial, "match": run.mode,
            "success": run.success, "tool_match": run.tool_match, "steps": run.steps, "answer": run.answer,
            "missing": list(run.missing), "stop": run.stop, "no_recording": list(run.misses),
            "expected_tools": [str(item) for item in run.case.expected_tools],
            "called": [{"tool": call.tool, "args": call.args} for call in run.calls],
            "findings": {"redundant-call": run.redundant, "permission-overreach": run.overreach},
            **({"scorer": run.case.scorer.spec, "score": run.score, "scorer_failure": run.score_failure}
               if run.case.scorer is not None else {})}


def _agent_object(agent: AgentReport, citations: Citations | None = None) -> dict[str, Any]:
    return {"agent": agent.name, "spec": agent.spec, "cases": agent.cases, "runs": len(agent.runs),
            "success": float(agent.success), "tool_match": float(agent.tool_match),
            "average_steps": float(agent.average_steps),
            "pass^k": [float(value) for value in agent.pass_hat()],
            "findings": {"redundant-call": agent.redundant, "permission-overreach": agent.overreach},
            "results": [_run_object(run, agent.name, citations) for run in agent.runs]}


def _optional_float(value: Fraction | None) -> float | None:
    return None if value is None else float(value)


def eval_json(report: EvalReport, thresholds: Thresholds = Thresholds(),
              comparison: BaselineComparison | None = None, citations: Citations | None = None) -> str:
    """The same facts as `eval_text`, and every run's details, as one JSON document; with `citations`
    (`toolreplay.evaluation.runner.cite_runs`), each run names its recorded session and that session's tree."""
    limits = {"min_success": _optional_float(thresholds.min_success),
              "min_tool_match": _optional_float(thresholds.min_tool_match),
              "unmet": unmet_thresholds(report, thresholds)}
    document = {"command": "eval", "suite": report.suite, "cases": report.cases, "trials": report.trials,
                "max_steps": report.max_steps,
                "agents": [_agent_object(agent, citations) for agent in report.agents],
                "failed": [failure_line(agent, run) for agent in report.agents for run in agent.failures],
                "thresholds": limits}
    if comparison is not None:
        document["baseline"] = {
            "path": comparison.path,
            "regressions": [failure_line(agent, run) for agent, run in comparison.regressions],
            "fixed": [{"agent": agent.name, "case": run.case.id} for agent, run in comparison.fixed]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# What XML 1.0 cannot hold at all, not even as a character reference: lone surrogates, U+FFFE, U+FFFF.
# (The C0 controls other than tab, LF and CR are the others; `escape_text` already shows those.)
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _xml(text: str) -> str:
    """`text` as `escape_text` shows it, and every other character XML 1.0 forbids as `\\uNNNN`."""
    return _NOT_XML.sub(lambda match: f"\\u{ord(match.group()):04x}", escape_text(text))


def eval_junit(report: EvalReport, thresholds: Thresholds = Thresholds(),
               comparison: BaselineComparison | None = None) -> str:
    """JUnit XML: a test suite per agent, a test case per case (its failure: the failed runs' lines).

    With a baseline, a case that fails but did not regress is `skipped` (known failure), so only
    regressions fail the build; unmet thresholds are one more failed test case, `thresholds`. Every
    text and attribute is escaped so that any XML 1.0 parser reads it; `errors` is always 0 (an agent
    that raised fails its run: a failure).
    """
    root = ElementTree.Element("testsuites", name=_xml(f"toolreplay eval {report.suite}"))
    total = failed = 0
    for agent in report.agents:
        suite = ElementTree.SubElement(root, "testsuite", name=_xml(agent.name))
        by_case: dict[int, list[CaseRun]] = {}
        for run in agent.runs:
            by_case.setdefault(run.position, []).append(run)
        suite_failures = skipped = 0
        for runs in by_case.values():
            case = ElementTree.SubElement(suite, "testcase", classname=_xml(agent.name),
                                          name=_xml(_case_name(runs[0].case.id, runs[0].case.question)))
            bad = [run for run in runs if not run.passed]
            if not bad:
                continue
            lines = [_xml(failure_line(agent, run)) for run in bad]
            if comparison is not None and all(comparison.known_failure(agent, run) for run in bad):
                ElementTree.SubElement(case, "skipped", message="fails in the baseline too: " + lines[0])
                skipped += 1
                continue
            failure = ElementTree.SubElement(case, "failure", message=lines[0], type="eval")
            failure.text = "\n".join(lines)
            suite_failures += 1
        suite.set("tests", str(len(by_case)))
        suite.set("failures", str(suite_failures))
        suite.set("errors", "0")
        suite.set("skipped", str(skipped))
        total += len(by_case)
        failed += suite_failures
    if thresholds.min_success is not None or thresholds.min_tool_match is not None:
        unmet = [_xml(line) for line in unmet_thresholds(report, thresholds)]
        suite = ElementTree.SubElement(root, "testsuite", name="thresholds", tests="1",
                                       failures=str(int(bool(unmet))), errors="0", skipped="0")
        case = ElementTree.SubElement(suite, "testcase", classname="thresholds", name="thresholds")
        if unmet:
            failure = ElementTree.SubElement(case, "failure", message=unmet[0], type="threshold")
            failure.text = "\n".join(unmet)
        total += 1
        failed += bool(unmet)
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", "0")
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"
