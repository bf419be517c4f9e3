"""Run agents over a suite: every tool call goes through the guard's Gate, every run can be recorded.

A step limit of N lets a case make N tool calls (the Gate's `max_steps` budget); a request for one
more is refused by the Gate and ends the case without an answer. Average steps counts model turns:
each call of the agent, tool call or final answer.

Each run has its own tools (a factory's fresh table, a cassette's own counts), its own guard and its
own record. Every request reaches the tools: a repeated identical call is not answered from an
earlier response, so a stateful tool or a sequential cassette sees it (the redundant-call count
still reports it). Runs can go in parallel threads (`concurrency`); the report is the same as a
serial run's, byte for byte, because results are put back in suite order.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import math
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from toolreplay.audit.replay import DEFAULT_MUTATORS, audit_replay
from toolreplay.audit.scope import audit_scope
from toolreplay.errors import UsageError
from toolreplay.evaluation.agent import Answer, CallResult, Conversation, NamedAgent, ToolCall
from toolreplay.evaluation.metrics import missing_information, pass_hat_k, tools_match
from toolreplay.evaluation.recording import RunRecording, agent_directory, write_scope, write_session
from toolreplay.evaluation.suite import Case, Scorer, Suite
from toolreplay.format.canonical import CanonicalError, canonical_bytes, canonical_json
from toolreplay.format.records import Record
from toolreplay.guard.gate import Gate
from toolreplay.policy.model import Limits, Policy

__all__ = ["AgentReport", "CaseRun", "EvalReport", "evaluate", "run_case", "cite_runs", "DEFAULT_MAX_STEPS"]

DEFAULT_MAX_STEPS = 10


@dataclass(frozen=True, slots=True)
class CaseRun:
    """One run of one case by one agent: what it called, what it answered, how it scored."""

    case: Case
    position: int
    trial: int
    mode: str
    calls: tuple[CallResult, ...]
    answer: str | None
    steps: int
    missing: tuple[str, ...]
    tool_match: bool
    stop: str | None
    misses: tuple[str, ...]
    redundant: int
    overreach: int
    answered: tuple[bool, ...] = ()
    score: float | None = None
    score_failure: str | None = None

    @property
    def success(self) -> bool:
        """The answer holds every expected piece, the case's scorer passed it, no call went unanswered."""
        return self.answer is not None and not self.missing and not self.misses and self.score_failure is None

    @property
    def passed(self) -> bool:
        """Both checks hold: success and tool match."""
        return self.success and self.tool_match


@dataclass(frozen=True, slots=True)
class AgentReport:
    """Every run of one agent, and the scores over them."""

    name: str
    spec: str
    trials: int
    runs: tuple[CaseRun, ...]

    @property
    def cases(self) -> int:
        """How many cases the agent ran (each `trials` times)."""
        return len(self.runs) // self.trials

    @property
    def success(self) -> Fraction:
        """Share of runs whose answer held the expected information."""
        return Fraction(sum(run.success for run in self.runs), len(self.runs))

    @property
    def tool_match(self) -> Fraction:
        """Share of runs whose calls matched the expected calls."""
        return Fraction(sum(run.tool_match for run in self.runs), len(self.runs))

    @property
    def average_steps(self) -> Fraction:
        """Model turns per run."""
        return Fraction(sum(run.steps for run in self.runs), len(self.runs))

    @property
    def redundant(self) -> int:
        """Redundant-call findings of replay, over all runs."""
        return sum(run.redundant for run in self.runs)

    @property
    def overreach(self) -> int:
        """Permission-overreach findings of scope, over all runs."""
        return sum(run.overreach for run in self.runs)

    def pass_hat(self) -> list[Fraction]:
        """pass^k of the success check for k = 1 .. trials."""
        counts: dict[int, int] = {}
        for run in self.runs:
            counts[run.position] = counts.get(run.position, 0) + run.success
        successes = [counts[position] for position in sorted(counts)]
        return [pass_hat_k(successes, self.trials, k) for k in range(1, self.trials + 1)]

    @property
    def failures(self) -> list[CaseRun]:
        """The runs that failed either check, in suite order."""
        return [run for run in self.runs if not run.passed]


@dataclass(frozen=True, slots=True)
class EvalReport:
    """The evaluation of every agent over one suite."""

    suite: str
    cases: int
    trials: int
    max_steps: int
    agents: tuple[AgentReport, ...]


def _invalid_step(step: Any) -> str | None:
    if isinstance(step, (list, tuple)):
        if not step:
            return "agent returned an empty list of tool calls"
        for call in step:
            if not isinstance(call, ToolCall):
                return f"agent returned a list holding {type(call).__name__}, not only ToolCall"
            problem = _invalid_step(call)
            if problem is not None:
                return problem
        return None
    if isinstance(step, Answer):
        if not isinstance(step.text, str):
            return "agent returned an Answer whose text is not a string"
        try:
            step.text.encode("utf-8")
        except UnicodeEncodeError:
            return "agent returned an Answer whose text is not valid Unicode (a lone surrogate)"
        return None
    if not isinstance(step, ToolCall):
        return f"agent returned {type(step).__name__}, not ToolCall or Answer"
    if not isinstance(step.tool, str) or not step.tool:
        return "agent returned a ToolCall without a tool name"
    if not isinstance(step.args, dict):
        return f"agent returned a ToolCall whose args are {type(step.args).__name__}, not dict"
    try:
        canonical_bytes({"tool": step.tool, "args": step.args})
    except (CanonicalError, RecursionError) as exc:
        return f"agent returned a ToolCall with no JSON form: {exc}"
    return None


def _describe(tool: str, args: dict[str, Any]) -> str:
    return f"{tool} {canonical_json(args)}"


def _record(index: int, call: CallResult) -> Record:
    # The Gate turns a result with no JSON form into an error response, so every response encodes.
    return Record(index, call.tool, call.args, call.response, index + 1)


class _Guard:
    """The run's own Gate (allowlist, the run's step budget, its record), with the read cache off.

    The suite names no write tools and the cache is off, so no request is answered from an earlier
    identical one: the evaluated tools (a stateful cassette, a factory's fresh state) see every call.
    """

    def __init__(self, tools: Mapping[str, Callable[..., Any]], policy: Policy, recorder: Any) -> None:
        self.policy = policy
        self.gate = Gate(tools, policy, recorder=recorder, read_cache=False)

    def call(self, tool: str, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], str | None]:
        """The response to one request, and the limit that refused it (None when it was not refused)."""
        response = self.gate.handle(tool, args, turn=turn).response
        return response, self.gate.stop_reason


def _scored(scorer: Scorer | None, answer: str | None, calls: tuple[CallResult, ...],
            case: Case) -> tuple[float | None, str | None]:
    """The scorer's score (a bool counts 1 or 0) and, when it does not pass the run, why."""
    if scorer is None or answer is None:
        return None, None
    try:
        result = scorer.function(answer, calls, case)
    except Exception as exc:  # the scorer is user code: its failure fails this run only
        return None, f"scorer {scorer.spec} raised {type(exc).__name__}: {exc}"
    if isinstance(result, bool):
        return float(result), None if result else f"scorer {scorer.spec} said no"
    if not isinstance(result, (int, float)) or not math.isfinite(result):
        return None, f"scorer {scorer.spec} returned {type(result).__name__} {result!r:.40}, not a bool or number"
    score = float(result)
    if score < scorer.min_score:
        return score, f"scorer {scorer.spec} gave {score:g}, below {scorer.min_score:g}"
    return score, None


def run_case(agent: NamedAgent, suite: Suite, case: Case, *, position: int = 1, trial: int = 1,
             mode: str = "strict", max_steps: int = DEFAULT_MAX_STEPS, record: str | None = None) -> CaseRun:
    """Run one case once, every call through the guard allowing the suite's tools, at most `max_steps` calls."""
    tools = suite.tools_of(case)
    policy = Policy(agent.name, tools.names, limits=Limits(max_steps=max_steps))
    misses: list[str] = []

    def on_miss(tool: str, args: dict[str, Any], recorded: int) -> None:
        past = f" (call {recorded + 1}, recorded {recorded})" if recorded else ""
        misses.append(_describe(tool, args) + past)

    recording = RunRecording(record)
    complete = False
    try:
        guard = _Guard(tools.bind(on_miss), policy, recording.recorder)
        calls, answered, answer, steps, stop = _converse(agent, suite, case, guard, sorted(policy.allowed_tools),
                                                         max_steps, misses)
        complete = True
    finally:
        recording.finish(complete)
    records = [_record(index, call) for index, call in enumerate(calls)]
    called = [(call.tool, canonical_json(call.args)) for call in calls]
    score, score_failure = _scored(case.scorer, answer, tuple(calls), case)
    return CaseRun(
        case=case, position=position, trial=trial, mode=mode, calls=tuple(calls), answer=answer, steps=steps,
        missing=tuple(missing_information(answer, case.expected_answer)) if answer is not None else (),
        tool_match=tools_match(case.expected_tools, called, mode, case.expected_turns,
                               [call.turn for call in calls]),
        stop=stop, misses=tuple(misses),
        redundant=sum(f.kind == "redundant-call" for f in audit_replay(records, DEFAULT_MUTATORS).findings),
        overreach=len(audit_scope(records, policy).findings), answered=tuple(answered), score=score,
        score_failure=score_failure,
    )


class _Turns:
    """Asks the agent for its next step; an `async def` agent runs on an event loop of this run's own.

    An agent object with a `for_case(suite, case)` method (a reference agent that replays a recording)
    gets it called at the first turn; the callable it returns plays the run."""

    def __init__(self, agent: NamedAgent, suite: Suite, case: Case) -> None:
        self.agent = agent
        self.suite = suite
        self.case = case
        self.play: Callable[[Conversation], Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def next_step(self, conversation: Conversation) -> Any:
        if self.play is None:
            for_case = getattr(self.agent.agent, "for_case", None)
            self.play = for_case(self.suite, self.case) if callable(for_case) else self.agent.agent
        step = self.play(conversation)
        if inspect.isawaitable(step):
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            step = self.loop.run_until_complete(step)
        return step

    def close(self) -> None:
        if self.loop is not None:
            self.loop.close()


def _converse(agent: NamedAgent, suite: Suite, case: Case, guard: _Guard, tools: list[str], max_steps: int,
              misses: list[str]) -> tuple[list[CallResult], list[bool], str | None, int, str | None]:
    """Ask the agent turn by turn until it answers, fails, or the guard stops it at the step limit."""
    calls: list[CallResult] = []
    answered: list[bool] = []
    limit = f"step limit reached: call {max_steps + 1} refused by the guard (max_steps {max_steps})"
    turns = _Turns(agent, suite, case)
    try:
        for steps in range(1, max_steps + 2):
            conversation = Conversation(case.question, tuple(calls), tuple(tools))
            try:
                step = turns.next_step(conversation)
            except Exception as exc:  # the agent's failure fails this case, not the whole evaluation
                return calls, answered, None, steps, f"agent raised {type(exc).__name__}: {exc}"
            problem = _invalid_step(step)
            if problem is not None:
                return calls, answered, None, steps, problem
            if isinstance(step, Answer):
                return calls, answered, step.text, steps, None
            for call in (step if isinstance(step, (list, tuple)) else (step,)):
                args = copy.deepcopy(call.args)
                missed = len(misses)
                response, reason = guard.call(call.tool, args, steps - 1)
                calls.append(CallResult(call.tool, args, copy.deepcopy(response), steps - 1))
                refused = reason is not None or call.tool not in guard.policy.allowed_tools
                answered.append(not refused and len(misses) == missed)
                if reason is not None and response.get("error") == f"budget exceeded: {reason}":
                    stop = limit if reason == "max_steps" else f"stopped by the guard: {reason}"
                    return calls, answered, None, steps, stop
        return calls, answered, None, max_steps + 1, limit
    finally:
        turns.close()


def evaluate(suite: Suite, agents: Sequence[NamedAgent], *, trials: int = 1,
             max_steps: int = DEFAULT_MAX_STEPS, match: str | None = None,
             record_dir: str | None = None, concurrency: int = 1,
             record_cassette: str | None = None) -> EvalReport:
    """Run every case `trials` times per agent, `concurrency` runs at a time.

    `record_dir` gets DIR/AGENT/CASE.jsonl and a scope.json; `record_cassette` one session of every call
    the tools answered, usable as the suite's cassette.
    """
    if trials < 1 or max_steps < 1 or concurrency < 1:
        raise UsageError("trials, max steps and concurrency must be at least 1")
    jobs: list[Callable[[], CaseRun]] = []
    for agent in agents:
        directory = None if record_dir is None else agent_directory(record_dir, agent.name)
        if directory is not None:
            write_scope(directory, Policy(agent.name, suite.tool_names))
        for position, case in enumerate(suite.cases, 1):
            for trial in range(1, trials + 1):
                name = _run_name(case.id, trial, trials)
                record = None if directory is None else os.path.join(directory, name + ".jsonl")
                mode = case.match or match or "strict"
                jobs.append(functools.partial(run_case, agent, suite, case, position=position, trial=trial,
                                              mode=mode, max_steps=max_steps, record=record))
    runs = _run_all(jobs, concurrency)
    per_agent = len(suite.cases) * trials
    reports = [AgentReport(agent.name, agent.spec, trials, tuple(runs[number * per_agent:(number + 1) * per_agent]))
               for number, agent in enumerate(agents)]
    if record_cassette is not None:
        write_session(record_cassette, ((call.tool, call.args, call.response) for agent in reports
                                        for run in agent.runs
                                        for call, answered in zip(run.calls, run.answered, strict=True)
                                        if answered))
    return EvalReport(suite.path, len(suite.cases), trials, max_steps, tuple(reports))


def _run_name(case_id: str, trial: int, trials: int) -> str:
    return case_id if trials == 1 else f"{case_id}.trial-{trial}"


def cite_runs(report: EvalReport, record_dir: str) -> dict[tuple[str, str, int], tuple[str, int, str]]:
    """For each run, (agent, case, trial): its session recorded under `record_dir` and that session's Merkle
    tree (size, root), as `seal --tlog` makes it: what its scores are about, for `toolreplay prove`."""
    from toolreplay.audit.api import session_tree

    cited = {}
    for agent in report.agents:
        directory = agent_directory(record_dir, agent.name)
        for run in agent.runs:
            path = os.path.join(directory, _run_name(run.case.id, run.trial, report.trials) + ".jsonl")
            cited[(agent.name, run.case.id, run.trial)] = (path, *session_tree(path))
    return cited


def _run_all(jobs: Sequence[Callable[[], CaseRun]], concurrency: int) -> list[CaseRun]:
    """Every job's run, in job order, whatever order they finish in."""
    if concurrency == 1 or len(jobs) < 2:
        return [job() for job in jobs]
    executor = ThreadPoolExecutor(max_workers=min(concurrency, len(jobs)), thread_name_prefix="toolreplay-eval")
    try:
        futures = [executor.submit(job) for job in jobs]
        return [future.result() for future in futures]
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
