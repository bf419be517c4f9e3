"""The runtime gate (docs/guard.md): what an agent's tool request must pass before a real tool runs.

Each request goes through, in this order (one method each; docs/guard.md has the details):

1. **recording** — once the record could not be written, every request is refused, unrecorded
   (`recording failed: ...`, stop reason `record`); the record is also checked to be the file opened;
2. **budgets** — once a limit is passed, every request is refused naming it (`max_steps`, `budget`,
   `time`);
3. **allowlist** — a tool the policy does not allow, or that the host did not supply, never runs;
4. **unknown outcome** — a write that started and never got a result on record (the host died, or it
   was interrupted) is not run again until a person has resolved it;
4b. **rules** — the policy's argument rules (docs/policy.md), deny > ask > allow: a firing deny rule
   refuses (`denied by rule ID: REASON`); a firing ask rule sends the call to confirmation like a
   write tool; a firing allow rule lets a write tool run without it;
5. **idempotency** — a write (a policy write tool, or a mutator named to the gate) that ran is never
   run again for an identical canonical call (and idempotency key): the retry gets the original
   response; a retry racing the original waits for it. A repeatable tool (`repeatable_tools`) is a
   write whose every call is a new action, unless the host gives the same key again. Reads run every
   time, unless the read cache is on: then an identical read is answered from the earlier one while
   no write has run since;
6. **confirmation** — a write tool (or a call an ask rule caught) runs only when the host's
   `confirm(tool, args)` returns True for that exact call; nothing the model writes into the call counts;
   a refusal says whether the person declined, nobody could be asked, or the question timed out. With
   `approvals=`, an approval a person asked to remember (`Remember`) answers the question instead
   of asking again, and the record's meta names it (`x-approval`); an answer wrapped in `Decided` (the
   approvals inbox's) names who gave it (`x-decided-by`);
7. the tool runs (a write only after its intent is on disk); what it returns (or raises) becomes the
   response; a host whose server refused the call before running it (`CallRefused`: an HTTP 401 or
   403) gets it refused (`refused by the server: ...`), a write included, its intent settled.

Every request, whatever happened to it, is appended to the recorder when one is given, before its
answer is returned; its outcome (`ran`, `cached`, `refused`, `cancelled`, `unknown`) is known there.
The record of a write (a write tool, a mutator, a repeatable tool) says so (`meta.mutates`), so an
audit of it needs no list of the tools that change state.

Front ends: a Python host passes its tool functions and a `confirm` callback; a front end that runs
the tools itself (the MCP proxy) passes a `ToolHost` (host.py), and hands each request its own `context`,
which the gate gives back to the host's `run` and `confirm` for that request only.

The gate's parts, each its own module: the answers and refusals as types (outcomes.py), what a host gives
and raises (host.py), the idempotency store (idempotency.py), reading a continued record back
(resume.py), and the terminal approver (console.py); this module is the order of the checks.
"""

from __future__ import annotations

import copy
import functools
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from toolreplay.errors import ToolReplayError
from toolreplay.format.canonical import CanonicalError, canonical_bytes
from toolreplay.format.records import format_ts, read_session
from toolreplay.guard.approvals import Approvals, ApprovalsError, Decided, Remember
from toolreplay.guard.console import ConsoleApprover
from toolreplay.guard.host import (
    AnswerLost,
    CallCancelled,
    CallRefused,
    CannotConfirmError,
    Confirm,
    ConfirmationDeferred,
    FunctionHost,
    NotSent,
    ToolHost,
)
from toolreplay.guard.idempotency import Earlier, IdempotencyStore, Pending
from toolreplay.guard.outcomes import (
    DECLINED,
    NOT_ASKED,
    OUTCOMES,
    STOP_REASONS,
    TIMED_OUT,
    Answer,
    Outcome,
    Refusal,
    StopReason,
)
from toolreplay.guard.request import Request
from toolreplay.guard.resume import resume
from toolreplay.policy.model import Policy
from toolreplay.policy.redaction import holds_marks
from toolreplay.policy.refusals import REFUSAL_PREFIXES, is_refusal
from toolreplay.policy.rules import COUNTED_OUTCOMES, RuleSet, RuleState, Ruling

if TYPE_CHECKING:
    from toolreplay.guard.receipts import Receipted, Receipts
    from toolreplay.guard.recorder import SessionRecorder
    from toolreplay.guard.resume import GateHistory
    from toolreplay.guard.screen import Screen

__all__ = ["Answer", "AnswerLost", "CallCancelled", "CallRefused", "CannotConfirmError", "ConfirmationDeferred", "Gate",
           "ConsoleApprover", "OUTCOMES", "STOP_REASONS", "MAX_NESTING", "REMEMBER_BYTES", "REFUSAL_PREFIXES",
           "Confirm", "Outcome", "Refusal", "ToolHost", "is_refusal"]

# Arguments and results nested deeper than this are refused: every reader of the record can hold them.
MAX_NESTING = 256

# The responses the gate holds to answer repeats, in canonical bytes, for the writes and for the read
# cache each (docs/guard.md, Memory): past it the oldest write keeps only its record index.
REMEMBER_BYTES = 16 * 1024 * 1024

_WAITED_FOR_CANCELLED = Refusal("cancelled", "cancelled: an identical call it waited for was cancelled")


class _RunLater(Exception):  # noqa: N818 - a signal inside the gate, not an error
    """handle_async: the gate let the call run; its caller awaits the tool (`_run_async`)."""

    def __init__(self, pending: Pending, call: Request) -> None:
        super().__init__()
        self.pending = pending
        self.call = call  # as decided: with the approval its record names


class _WaitFor(Exception):  # noqa: N818 - a signal inside the gate, not an error
    """handle_async: an identical call is still running; its caller waits for it, then goes on (`_repeated`)."""

    def __init__(self, pending: Pending) -> None:
        super().__init__()
        self.pending = pending


class Gate:
    """Puts a policy between an agent and its real tools; `call` is the agent's only way in."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]] | ToolHost, policy: Policy, *,
                 confirm: Confirm | None = None, recorder: SessionRecorder | None = None,
                 clock: Callable[[], float] = time.monotonic, screen: Screen | None = None,
                 mutators: Iterable[str] = (), repeatable: Iterable[str] = (), read_cache: bool = False,
                 remember_bytes: int = REMEMBER_BYTES, wall_clock: Callable[[], int] = time.time_ns,
                 record_meta: Callable[[str], Mapping[str, Any] | None] | None = None,
                 approvals: Approvals | None = None,
                 host_asks: Callable[[str, dict[str, Any], Any], bool] | None = None,
                 receipts: Receipts | None = None, history: GateHistory | None = None) -> None:
        """Tools are called as `func(**args)`; the session's clock starts now.

        `mutators` are more tools that change state (like write tools, but asked for no confirmation);
        `repeatable` are more tools like the policy's `repeatable_tools` (they change state, and each
        call without a key runs as a new action); `read_cache=True` answers an identical read from the
        earlier one while no write has run since. A recorder that continues a record brings back the
        writes it holds (they are not run again), the writes whose outcome is unknown (they are refused),
        the steps and result bytes of the budgets and the history of the rules.

        `tools` may instead be a `ToolHost` (then `confirm` is not used): a front end running the tools.
        `remember_bytes` bounds the responses held to answer repeats (the writes', the read cache's).
        `wall_clock` (ns since the epoch) dates each record's `meta.ts`. `record_meta(tool)` gives more
        keys for a record's `meta` (format 1.1 `x-` keys, say which server served the tool), or None.
        `approvals` are the approvals a person asked to remember: one that matches a call answers its
        confirmation (nothing else), and a `Remember("session")` or `Remember("always")` answer adds one.
        `host_asks(tool, args, context)` is the host's own approval flag (a framework tool's
        `needs_approval`; a `ToolHost` with an `asks` method gives it): a call it says True for needs a
        person's yes whatever the policy allows (at least an ask; a deny still denies).
        `receipts` (receipts.py) make a signed approval receipt the only yes: the host is not asked.
        `history` is the recorder's record already read back for a gate like this one (resume.py, kept by a
        long-lived process between short gates on one record): the gate starts from a copy of it instead of
        reading the record (ValueError when it was read for another policy or other tools, or does not reach
        the recorder's end). Its rules' times must be on this gate's `clock`.
        """
        self._host: ToolHost = FunctionHost(tools, confirm) if isinstance(tools, Mapping) else tools
        self._policy = policy
        self._writes, self._repeatable = _write_tools(policy, mutators, repeatable)
        self._read_cache = read_cache
        self._recorder = recorder
        self._clock = clock
        self._wall_clock = wall_clock
        self._record_meta = record_meta
        self._screen = screen
        self._receipts = receipts
        self._host_asks = host_asks if host_asks is not None else getattr(self._host, "asks", None)
        if approvals is not None:  # the approvals file redacts as the record does, or the gate does not start
            approvals.redact_as(None if recorder is None else recorder.redactor, policy.redact is not None)
        self._approvals = None if approvals is None else approvals.for_session()  # "session": this gate's
        self._started = clock()
        self._lock = threading.Lock()
        self._steps = 0
        self._result_bytes = 0
        self._stop_reason: StopReason | None = None
        self._record_error: str | None = None
        if history is not None:
            if recorder is None or not self._fits(history, recorder, read_cache, remember_bytes):
                raise ValueError("the history was read for another gate or another record")
            started = history.start(recorder)
            assert started.store is not None
            self._store, self._rule_set, self._rules = started.store, history.rule_set, started.rules
            self._steps, self._result_bytes = started.steps, started.result_bytes
            self._check_resumed_budget()
            return
        self._store = IdempotencyStore(read_cache=read_cache, remember_bytes=remember_bytes)
        self._rule_set = RuleSet(policy.rules)
        self._rules = RuleState(self._rule_set) if policy.rules else None
        if recorder is not None and (recorder.resumed_records or recorder.previous_intents):
            resumed = resume(recorder, policy, self._store, writes=self._writes, repeatable=self._repeatable,
                             rules=self._rules, rule_set=self._rule_set, started=self._started,
                             now=self._wall_clock())
            self._steps, self._result_bytes = resumed.steps, resumed.result_bytes
            self._check_resumed_budget()

    def _fits(self, history: GateHistory, recorder: SessionRecorder, read_cache: bool, remember_bytes: int) -> bool:
        """Whether a kept history is this gate's own reading of the recorder's record."""
        return (history.policy is self._policy and history.writes == self._writes
                and history.repeatable == self._repeatable and history.redacting == (recorder.redactor is not None)
                and history.store.read_cache == read_cache and history.store.remember_bytes == remember_bytes
                and history.can_start(recorder))

    def _check_resumed_budget(self) -> None:
        limit = self._policy.limits.max_result_bytes
        if limit is not None and self._result_bytes > limit:
            self._stop_reason = "budget"

    @property
    def stop_reason(self) -> StopReason | None:
        """None while within budget and recording, else what stopped the session."""
        return self._stop_reason

    @property
    def record_error(self) -> str | None:
        """None while the record can be written, else why it could not."""
        return self._record_error

    @property
    def steps(self) -> int:
        """Requests seen so far, refused ones included (not those refused because recording failed)."""
        return self._steps

    @property
    def result_bytes(self) -> int:
        """Canonical bytes of the results of the tools run so far."""
        return self._result_bytes

    @property
    def unknown_outcomes(self) -> tuple[str, ...]:
        """The calls (`TOOL ARGS`) started but never recorded, refused until a person resolves them."""
        return self._store.unknown_outcomes()

    def call(self, tool: str, args: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
        """Run one request of the agent through the gate; return the response the agent sees.

        `key` is an idempotency key (say the model's tool_call_id): identical writes with different
        keys both run; the same key (or none) twice runs once, except that a repeatable tool's calls
        without a key all run. Reads ignore it.
        """
        return self.handle(tool, args, key=key).response

    def handle(self, tool: str, args: dict[str, Any], *, key: str | None = None, call_id: str | None = None,
               context: Any = None, variant: bytes = b"", turn: int | None = None) -> Answer:
        """`call` for front ends: the answer with its outcome. `call_id` is the id the model or the
        protocol gave the call, `turn` the model turn that asked for it (both go to the record's meta);
        `context` goes to the host's `run` and `confirm` for this call only.
        `variant` is what else makes the request distinct (an MCP task request): an identical call with
        another variant is not answered by this one; a record holds no variant, so a continued record
        answers only calls without one; an unknown outcome refuses every variant."""
        request = self._request(tool, args, key, call_id, context, False, variant, turn, None)
        return self._handed_out(request, self._decide(request))

    def handle_continued(self, tool: str, args: dict[str, Any], *, call_id: str | None = None, context: Any = None,
                         variant: bytes = b"", turn: int | None = None) -> Answer:
        """`handle` for a call the gate already passed, continued (a protocol round trip): it is checked for
        recording, budgets, the allowlist and an unknown outcome, then runs as a new action (no rules, no
        idempotency, no confirmation: those were decided in its first round)."""
        answer = self._decide(self._request(tool, args, None, call_id, context, True, variant, turn, None))
        return Answer(_copy_json(answer.response), answer.outcome, answer.index, answer.refusal)

    async def handle_async(self, tool: str, args: dict[str, Any], run: Callable[[dict[str, Any]], Awaitable[Any]],
                           *, key: str | None = None, call_id: str | None = None, context: Any = None,
                           turn: int | None = None) -> Answer:
        """`handle` for an async front end, in its event loop, without a thread: the gate decides and records
        as `handle` does, and the tool it lets run is `await run(args)` (instead of the host's `run`). The
        host's `confirm` is called in the loop: it must answer at once (or raise ConfirmationDeferred). A
        request identical to one still running waits for it (on a worker thread: that is rare)."""
        import asyncio

        request = self._request(tool, args, key, call_id, context, False, b"", turn, asyncio.current_task())
        step: Callable[[], Answer] = functools.partial(self._decide, request)
        while True:
            try:
                answer = step()
            except _RunLater as later:  # the gate let it run: the tool runs here, in the loop
                answer = await self._run_async(later.call, later.pending, run)
            except _WaitFor as wait:  # an identical call is running: wait, then decide after it
                await asyncio.to_thread(wait.pending.done.wait)
                step = functools.partial(self._repeated, request, wait.pending)
                continue
            return self._handed_out(request, answer)

    def _handed_out(self, request: Request, answer: Answer) -> Answer:
        """The answer as the front end gets it: a copy of its response (the gate may hold it to answer a
        repeat, and a refusal's is shared), except the response of a read that ran with no read cache: the
        gate's own copy of the tool's result, which nothing else holds."""
        if answer.outcome == "ran" and not request.write and not self._read_cache:
            return answer
        return Answer(_copy_json(answer.response), answer.outcome, answer.index, answer.refusal)

    def _request(self, tool: str, args: dict[str, Any], key: str | None, call_id: str | None, context: Any,
                 passed: bool, variant: bytes, turn: int | None, owner: Any) -> Request:
        """Check a request's values and make it a Request."""
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool must be a non-empty string")
        if not isinstance(args, dict):
            raise ValueError("args must be a JSON object (a dict)")
        if key is not None and not isinstance(key, str):
            raise ValueError("key must be a string or None")
        # when the request reached the gate, for the record's meta (no record, no clock reading)
        started_ns, started = (self._wall_clock(), time.perf_counter()) if self._recorder is not None else (0, 0.0)
        try:
            identity = self._identity(tool, args)
        except (CanonicalError, RecursionError) as exc:
            raise ValueError(f"args have no JSON form: {exc}") from None
        try:  # what is checked, confirmed and recorded; the model's dict may change
            copied = _copy_within(args)
        except _TooDeep:
            raise ValueError(f"args have no JSON form: nested deeper than {MAX_NESTING} levels") from None
        fresh = passed or (key is None and tool in self._repeatable)
        if turn is not None and (type(turn) is not int or turn < 0):
            raise ValueError("turn must be a non-negative integer or None")
        return Request(tool, copied, identity, key, tool in self._writes, fresh, call_id, turn, context,
                     passed, variant, started_ns, started, owner)

    def needs_confirmation(self, tool: str, args: dict[str, Any], *, key: str | None = None,
                           context: Any = None) -> bool:
        """Whether this call would ask `confirm` now: it passes the earlier checks and has not run.
        Records and counts nothing (for a framework that asks before it calls the tool). `context` is the
        host's per-call value, as `handle` takes it (its own approval flag reads it)."""
        try:
            call = Request(tool, _copy_json(args), self._identity(tool, args), key, tool in self._writes,
                           key is None and tool in self._repeatable, context=context)
        except (CanonicalError, RecursionError, TypeError):
            return False
        max_steps = self._policy.limits.max_steps
        if self._record_error is not None or self._stop_reason is not None or (
                max_steps is not None and self._steps >= max_steps):
            return False
        if self._check_allowed(call) is not None or self._check_outcome_known(call) is not None:
            return False
        ruling = self._check_rules(call)
        if ruling is not None and self._rules is not None:
            self._rules.withdraw(ruling)
        if ruling is not None and ruling.refusal is not None:
            return False
        return (self._store.earlier(call) is None and self._needs_confirmation(call, ruling)
                and self._remembered(call) is None)

    def plain_read(self, tool: str) -> bool:
        """Whether no call of `tool` can ever ask `confirm`, nor write an intent: it is no write (of the policy
        or named to the gate), no rule applies to it, and the host has no approval flag of its own. A front end
        may run such a call where nothing may wait for a person (`handle_async` in its event loop)."""
        return (tool not in self._writes and self._host_asks is None
                and (self._rules is None or not self._rule_set.applies_to(tool)))

    def _identity(self, tool: str, args: dict[str, Any]) -> bytes:
        """The call's canonical form, as the record holds it: a redacting record holds the redacted call,
        which is what repeats are matched by, in this session and in a continued record (equal secrets
        redact alike, different ones differently)."""
        redactor = None if self._recorder is None else self._recorder.redactor
        return canonical_bytes({"tool": tool, "args": args if redactor is None else redactor.args(args)})

    def _decide(self, call: Request) -> Answer:
        failure = self._check_recording()
        if failure is not None:
            return Answer(failure.response, "refused", None, failure)
        for check in (self._check_budget, self._check_allowed, self._check_outcome_known):
            refusal = check(call)
            if refusal is not None:
                return self._refuse(call, refusal)
        if call.passed:  # its rules, idempotency and confirmation were decided in its first round
            return self._run(call, Pending())
        ruling = self._check_rules(call)
        if ruling is not None:  # set on this request's own Request, not copied: replace() costs microseconds
            object.__setattr__(call, "ruling", ruling)
            if ruling.denials:
                return self._refuse(call, _denied(ruling))
        earlier = self._store.earlier(call)
        if earlier is not None:
            return self._repeat(call, earlier)
        if self._needs_confirmation(call, ruling):
            approval = self._remembered(call)
            if approval is not None:  # a person's earlier answer, remembered: not asked again
                call = replace(call, approval=("x-approval", approval))
            else:
                try:
                    answer = self._confirmation_refusal(call, ruling)
                except CallCancelled as exc:
                    return self._refuse(call, _cancelled(exc, False), "cancelled")
                if isinstance(answer, Refusal):
                    return self._refuse(call, answer)
                if self._receipts is not None and _receipted(answer):  # the receipt goes whole into the record
                    call = replace(call, approval=("x-receipt", answer.note))  # type: ignore[union-attr]
                elif isinstance(answer, Remember):
                    call = self._remember(call, answer)
                if call.approval is None:  # a plain yes, on record: the audit tells it from a call that needed none
                    call = replace(call, approval=("x-confirmed", "once"))
        pending, owner = self._store.register(call)
        if not owner:  # an identical call started while this one was being confirmed
            return self._repeat(call, pending)
        return self._run(call, pending)

    # -- the checks, in order ---------------------------------------------------------------------

    def _check_recording(self) -> Refusal | None:
        """Refuse (unrecorded) once recording failed, or when the record is no longer writable."""
        if self._recorder is not None and self._record_error is None:
            try:
                self._recorder.check()
            except (OSError, ValueError) as exc:
                self._recording_failed(exc)
        if self._record_error is None:
            return None
        return Refusal("recording", "recording failed: " + self._record_error)

    def _check_budget(self, call: Request) -> Refusal | None:
        """Count the request; return the refusal when a limit is passed, else None."""
        limits = self._policy.limits
        with self._lock:
            self._steps += 1
            if self._stop_reason is None:
                if limits.max_steps is not None and self._steps > limits.max_steps:
                    self._stop_reason = "max_steps"
                elif limits.max_seconds is not None and self._clock() - self._started > limits.max_seconds:
                    self._stop_reason = "time"
            if self._stop_reason is None:
                return None
            return Refusal("budget", "budget exceeded: " + self._stop_reason)

    def _check_allowed(self, call: Request) -> Refusal | None:
        if call.tool not in self._policy.allowed_tools:
            return Refusal("not_allowed", "tool not allowed: " + call.tool)
        refusal = self._host.refusal(call.tool)
        return refusal if refusal is None or isinstance(refusal, Refusal) else Refusal("host", refusal)

    def _check_outcome_known(self, call: Request) -> Refusal | None:
        if not call.write or not self._store.is_unknown(call.identity):
            return None
        where = ("delete its line from " + os.path.basename(self._recorder.intents_path) if self._recorder is not None
                 else "start a new gate")
        return Refusal("unknown_outcome", f"outcome unknown: an identical {call.tool} call started earlier and its "
                       f"result was never recorded; a person must check whether it took effect, then {where}")

    def _check_rules(self, call: Request) -> Ruling | None:
        """The rules' ruling on the call (None without rules); unless denied, it counts as executed."""
        if self._rules is None:
            return None
        return self._rules.check(call.tool, self._rule_set.prepare(call.tool, call.args), self._clock())

    def _needs_confirmation(self, call: Request, ruling: Ruling | None = None) -> bool:
        """Rules first (ask > allow), then the host's own approval flag, then write_tools."""
        if ruling is not None and ruling.asks:
            return True
        if self._host_asks is not None and self._host_asks(call.tool, call.args, call.context):
            return True
        if ruling is not None and ruling.allowed:
            return False
        return call.tool in self._policy.write_tools

    def _remembered(self, call: Request) -> str | None:
        """The id of a remembered approval that answers the call's confirmation, else None."""
        return None if self._approvals is None else self._approvals.find(call.tool, call.args)

    def _remember(self, call: Request, answer: Remember) -> Request:
        """Keep a person's yes for the session or for good; the call, noting the approval for its record."""
        if self._approvals is None:
            return call
        try:
            approval = self._approvals.remember(call.tool, call.args, answer.scope)
        except ApprovalsError as exc:  # the person's yes still stands, for this call
            return replace(call, approval=("x-remember-error", str(exc)))
        return call if approval is None else replace(call, approval=("x-remembered", approval))

    def _confirmation_refusal(self, call: Request, ruling: Ruling | None) -> Refusal | Remember | Receipted | None:
        """Ask; None (or a Remember) for a yes, else the refusal. A call not confirmed did not run: the rules
        must not count it."""
        refusal: Refusal | Remember | Receipted | None = NOT_ASKED
        try:
            refusal = self._ask(call) if self._receipts is None else self._ask_receipts(call)
        finally:
            if isinstance(refusal, Refusal) and ruling is not None and self._rules is not None:
                self._rules.withdraw(ruling)
        return refusal

    def _ask_receipts(self, call: Request) -> Receipted | Refusal:
        """The call's approval receipt, perhaps signed by a person asked in the inbox (who goes to the record)."""
        assert self._receipts is not None
        answer, by = self._receipts.ask(call.identity, call.tool, _copy_json(call.args))
        if by is not None:
            object.__setattr__(call, "decided_by", by)
        return answer

    def _ask(self, call: Request) -> Refusal | Remember | None:
        """None when the host's `confirm` returned True, the `Remember` it returned; DECLINED for False,
        TIMED_OUT for a TimeoutError, else NOT_ASKED (CannotConfirmError, a failing approver, an answer that
        is not a bool)."""
        try:
            answer = self._host.confirm(call.tool, _copy_json(call.args), call.context)
        except CallCancelled:
            raise
        except TimeoutError:
            return TIMED_OUT
        except ConfirmationDeferred:  # not decided yet: the same request comes back with the answer
            with self._lock:
                self._steps -= 1
            raise
        except Exception:  # CannotConfirmError, or a failing approver: nobody said yes, nor no
            return NOT_ASKED
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: on record, then on its way
            self._refuse(call, _interrupted(exc))
            raise
        if isinstance(answer, Decided):  # who answered goes to the record, whatever the answer
            object.__setattr__(call, "decided_by", answer.by)
            answer = answer.answer
        if answer is True:
            return None
        if isinstance(answer, Remember):
            return answer
        return DECLINED if answer is False else NOT_ASKED

    # -- running and recording --------------------------------------------------------------------

    def _repeat(self, call: Request, earlier: Earlier) -> Answer:
        if isinstance(earlier, dict):
            return self._record(call, earlier, "cached")
        if isinstance(earlier, int):
            return self._from_record(call, earlier)
        if not earlier.done.is_set():
            if call.owner is not None:  # handle_async waits in its event loop
                if earlier.owner is call.owner:
                    return self._refuse(call, _reentrant(call))
                raise _WaitFor(earlier)
            if earlier.thread == threading.get_ident():
                return self._refuse(call, _reentrant(call))
            earlier.done.wait()
        return self._repeated(call, earlier)

    def _repeated(self, call: Request, earlier: Pending) -> Answer:
        """Answer a repeat once the identical call it waited for has finished."""
        if earlier.cancelled:
            return self._after_cancelled(call)
        response = earlier.response
        if response is None:  # no longer held
            return self._from_record(call, earlier.index)
        if earlier.refusal is not None:
            return self._record(call, response, "refused", refusal=earlier.refusal)
        return self._record(call, response, "cached")

    def _from_record(self, call: Request, index: int | None) -> Answer:
        """Answer a repeat of a write whose response is no longer held: read back from the record."""
        response = None
        if index is not None and self._recorder is not None:
            try:
                with open(self._recorder.path, "rb") as handle:
                    response = next((record.response for record in read_session(handle, self._recorder.path)
                                     if record.index == index), None)
            except (OSError, ToolReplayError):
                response = None
        if response is None:  # it still does not run again
            return self._refuse(call, Refusal("already_ran", f"already ran: an identical {call.tool} call ran "
                                              "earlier; its answer is no longer held in memory and cannot be read "
                                              "back from a record"))
        if self._withheld(response):
            return self._refuse(call, Refusal("already_ran", f"already ran: an identical {call.tool} call ran "
                                              "earlier; its answer is no longer held in memory, and the record "
                                              "holds it only redacted"))
        return self._record(call, response, "cached")

    def _withheld(self, recorded: dict[str, Any]) -> bool:
        """Whether a response read back from a redacting record is not the answer the client got: the real
        one is held only in memory, and the record's differs from it wherever it holds a mark."""
        redactor = None if self._recorder is None else self._recorder.redactor
        return redactor is not None and holds_marks(recorded)

    def _after_cancelled(self, call: Request) -> Answer:
        """An identical call this one waited for was cancelled: a read runs; a write whose outcome is now
        unknown is refused as such, any other write is refused (its retry is confirmed afresh)."""
        if not call.write:
            pending, owner = self._store.register(call)
            return self._run(call, pending) if owner else self._repeat(call, pending)
        return self._refuse(call, self._check_outcome_known(call) or _WAITED_FOR_CANCELLED)

    def _run(self, call: Request, pending: Pending) -> Answer:
        if call.owner is not None:  # handle_async runs the tool in its event loop (_run_async)
            raise _RunLater(pending, call)
        try:
            intent = self._start(call, pending)
            if isinstance(intent, Answer):
                return intent
            try:
                result = self._host.run(call.tool, _copy_json(call.args), call.context)
            except BaseException as exc:
                return self._failed(call, pending, intent, exc)
            return self._ran(call, pending, intent, result)
        finally:
            pending.done.set()

    async def _run_async(self, call: Request, pending: Pending,
                         run: Callable[[dict[str, Any]], Awaitable[Any]]) -> Answer:
        """`_run` for handle_async: the tool is awaited in the caller's event loop."""
        pending.owner = call.owner
        try:
            intent = self._start(call, pending)
            if isinstance(intent, Answer):
                return intent
            try:
                result = await run(_copy_json(call.args))
            except BaseException as exc:  # asyncio's CancelledError included: the call was interrupted
                return self._failed(call, pending, intent, exc)
            return self._ran(call, pending, intent, result)
        finally:
            pending.done.set()

    def _start(self, call: Request, pending: Pending) -> int | None | Answer:
        """Before the tool runs: its intent (a write's, on disk), or the refusal when it cannot be written."""
        try:
            return self._announce(call)
        except (OSError, ValueError) as exc:  # no intent on disk: the write must not run
            self._recording_failed(exc)
            self._store.forget(call)
            pending.refusal = Refusal("recording", "recording failed: " + (self._record_error or ""))
            pending.response = pending.refusal.response
            return Answer(pending.response, "refused", None, pending.refusal)
        except BaseException:
            self._store.forget(call)
            raise

    def _failed(self, call: Request, pending: Pending, intent: int | None, exc: BaseException) -> Answer:
        """The tool raised: the agent sees an error (a cancelled or interrupted call goes on record as such;
        an interruption then goes on its way)."""
        self._after_write(call)
        unrun = _not_run(exc)
        if unrun is not None:  # nothing ran: refused, its intent settled, and an identical call runs anew
            pending.refusal, pending.response = unrun, unrun.response
            answer = self._record(call, unrun.response, "refused", intent, refusal=unrun)
            self._store.forget(call)
            return answer
        if isinstance(exc, AnswerLost):
            if not call.write:  # a read simply failed
                failure = _failure(f"ConnectionError: {exc}")
                return self._finish(call, pending, intent, failure, len(failure["error"]) + 24)
            # a write was sent and no answer comes: it may or may not have taken effect
            lost = Refusal("unknown_outcome", f"outcome unknown: {exc}; whether the write took effect is unknown")
            pending.response = lost.response
            pending.cancelled = True
            # on record before a retry is refused
            answer = self._record(call, pending.response, "unknown", refusal=lost)
            self._store.forget(call, unknown=True)
            return answer
        if isinstance(exc, CallCancelled):  # no answer comes; a write that started may or may not have taken effect
            unknown = call.write and exc.started
            cancelled = _cancelled(exc, unknown)
            pending.response = cancelled.response
            pending.cancelled = True
            answer = self._record(call, pending.response, "unknown" if unknown else "cancelled", refusal=cancelled)
            self._store.forget(call, unknown=unknown)  # after the record: a retry refused for it comes after it
            return answer
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: on record, then on its way
            interrupted = _interrupted(exc)
            pending.response = interrupted.response
            self._store.forget(call, unknown=call.write)
            self._record(call, pending.response, "unknown" if call.write else "cancelled", refusal=interrupted)
            raise exc
        failure = _failure(_describe(exc))  # the agent sees the failure; the host keeps running
        return self._finish(call, pending, intent, failure, len(failure["error"]) + 24)

    def _ran(self, call: Request, pending: Pending, intent: int | None, result: Any) -> Answer:
        """The tool returned `result`: count it, screen it, record it and hold it for repeats."""
        self._after_write(call)
        try:
            response = result if isinstance(result, dict) else {"result": result}
            try:
                copied = _copy_within(response)  # the tool may keep and change what it returned
            except _TooDeep:
                raise ValueError(f"tool result has no JSON form: nested deeper than {MAX_NESTING} levels") from None
            encoded = canonical_bytes(copied)  # its size, and the bytes its record holds
            response = copied
        except Exception as exc:  # the agent sees the failure; the host keeps running
            failure = _failure(_describe(exc))
            return self._finish(call, pending, intent, failure, len(failure["error"]) + 24)
        limit = self._policy.limits.max_result_bytes
        size = len(encoded)
        with self._lock:
            self._result_bytes += size
            if limit is not None and self._result_bytes > limit and self._stop_reason is None:
                self._stop_reason = "budget"
        if self._screen is not None:
            self._screen.check(call.tool, call.args, response)
        return self._finish(call, pending, intent, response, size, encoded)

    def _finish(self, call: Request, pending: Pending, intent: int | None, response: dict[str, Any],
                size: int, encoded: bytes | None = None) -> Answer:
        answer = self._record(call, response, "ran", intent, encoded=encoded)
        pending.response, pending.index, pending.refusal = answer.response, answer.index, answer.refusal
        self._store.hold(call, pending, size)
        return answer

    def _after_write(self, call: Request) -> None:
        if call.write:  # whatever it did, earlier reads may be stale now
            self._store.clear_reads()

    def _announce(self, call: Request) -> int | None:
        """Before a write: empty the read cache and sync its intent (its number, None without a recorder)."""
        if not call.write:
            return None
        self._store.clear_reads()
        return None if self._recorder is None else self._recorder.announce(call.tool, call.args, call.key)

    def _refuse(self, call: Request, refusal: Refusal, outcome: Outcome = "refused") -> Answer:
        return self._record(call, refusal.response, outcome, refusal=refusal)

    def _record(self, call: Request, response: dict[str, Any], outcome: Outcome, intent: int | None = None, *,
                refusal: Refusal | None = None, encoded: bytes | None = None) -> Answer:
        """Append the request with `response` before it is answered, with its `meta` (docs/format.md: when
        it reached the gate, how long until now, its call id, `outcome`, `mutates` for a tool that changes
        state); if that fails, the refusal that replaces it. A call that did not run (refused, cached,
        cancelled) no longer counts for the rules. `encoded` is the response's canonical bytes, when made
        already: neither they nor the args (the call's identity holds them) are encoded again."""
        if call.ruling is not None and outcome not in COUNTED_OUTCOMES and self._rules is not None:
            self._rules.withdraw(call.ruling)
        if self._recorder is None:
            return Answer(response, outcome, None, refusal)
        failed: Outcome = "unknown" if outcome == "ran" and call.write else "refused"
        if self._record_error is not None:
            lost = Refusal("recording", "recording failed: " + self._record_error)
            return Answer(lost.response, failed, None, lost)
        meta: dict[str, Any] = {"ts": format_ts(call.started_ns),
                                "duration_ms": round((time.perf_counter() - call.started) * 1000, 3)}
        if call.call_id is not None:
            meta["call_id"] = call.call_id
        if call.turn is not None:
            meta["turn"] = call.turn
        if call.approval is not None:
            meta[call.approval[0]] = call.approval[1]
        if call.decided_by is not None:
            meta["x-decided-by"] = call.decided_by
        if call.ruling is not None and call.ruling.shadows:
            meta["x-shadow"] = [_shadow(*entry) for entry in call.ruling.shadows]
        meta["outcome"] = outcome
        if call.write:  # the record says which calls change state, so replay needs no --mutator for them
            meta["mutates"] = True
        if self._record_meta is not None:
            meta.update(self._record_meta(call.tool) or ())
        # the identity holds the args as a record without redaction does (a redacting recorder encodes its own)
        args_bytes = _identity_args(call.identity) if self._recorder.redactor is None else None
        try:
            index = self._recorder.append(call.tool, call.args, response, intent=intent, meta=meta,
                                          args_bytes=args_bytes, response_bytes=encoded)
        except (OSError, ValueError) as exc:
            self._recording_failed(exc)
            lost = Refusal("recording", "recording failed: " + (self._record_error or ""))
            return Answer(lost.response, failed, None, lost)
        return Answer(response, outcome, index, refusal)

    def _recording_failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._record_error is None:
                self._record_error = str(exc)
            if self._stop_reason is None:
                self._stop_reason = "record"


def read_history(policy: Policy, recorder: SessionRecorder, *, mutators: Iterable[str] = (),
                 repeatable: Iterable[str] = (), read_cache: bool = False, remember_bytes: int = REMEMBER_BYTES,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], int] = time.time_ns) -> GateHistory:
    """The recorder's record read back (`recorder.history()`) as a gate with these options resumes it, to be
    kept and given to such gates as `history=` (each starts from a copy); its rules' times are on `clock`."""
    from toolreplay.guard.resume import GateHistory

    writes, repeats = _write_tools(policy, mutators, repeatable)
    history = GateHistory(policy, writes=writes, repeatable=repeats, redacting=recorder.redactor is not None,
                          store=IdempotencyStore(read_cache=read_cache, remember_bytes=remember_bytes))
    history.add(recorder.history(), started=clock(), now=wall_clock())
    return history


def _write_tools(policy: Policy, mutators: Iterable[str], repeatable: Iterable[str]) -> tuple[frozenset[str],
                                                                                             frozenset[str]]:
    """A gate's writes and its repeatable writes (the policy's, and those named to the gate)."""
    repeats = frozenset(policy.repeatable_tools) | frozenset(repeatable)
    return frozenset(policy.write_tools) | frozenset(mutators) | repeats, repeats


def _identity_args(identity: bytes) -> bytes:
    """The canonical args of a call from its identity, `{"args":ARGS,"tool":TOOL}` ("args" sorts first; the
    last `,"tool":` is the key's, since a quote inside the encoded tool name is escaped)."""
    return identity[8:identity.rindex(b',"tool":')]


def _failure(message: str) -> dict[str, Any]:
    """The response of a tool that failed (it ran, or may have: no refusal)."""
    return {"ok": False, "error": message}


def _receipted(answer: object) -> bool:
    """Whether a confirmation's answer is an approval receipt (only a gate with receipts loads their module)."""
    from toolreplay.guard.receipts import Receipted

    return isinstance(answer, Receipted)


def _shadow(rule_id: str, effect: str, reason: str) -> dict[str, str]:
    """One entry of `meta["x-shadow"]`: a shadow rule that would have decided this call."""
    return {"rule": rule_id, "effect": effect, "reason": reason}


def _denied(ruling: Ruling) -> Refusal:
    rule_id, reason = ruling.denials[0]
    return Refusal("rule", f"denied by rule {rule_id}: {reason}", rule_id)


def _reentrant(call: Request) -> Refusal:
    return Refusal("reentrant", f"re-entrant call: {call.tool} is already running this identical call")


def _interrupted(exc: BaseException) -> Refusal:
    return Refusal("interrupted", f"interrupted: {type(exc).__name__}")


def _not_run(exc: BaseException) -> Refusal | None:
    """The refusal of a call the host says never ran: not sent, its server being down (`NotSent`), or refused
    by the server before it ran, as with HTTP 401 or 403 (`CallRefused`); None for any other failure."""
    if isinstance(exc, NotSent):
        return Refusal("unavailable", f"server unavailable: {exc}")
    if isinstance(exc, CallRefused):
        return Refusal("server", f"refused by the server: {exc}")
    return None


def _cancelled(exc: CallCancelled, unknown: bool) -> Refusal:
    why = str(exc) or "the call was cancelled"
    return Refusal("cancelled", f"cancelled: {why}" + ("; whether the write took effect is unknown" if unknown else ""))


_IMMUTABLE = frozenset({str, int, float, bool, type(None)})


def _copy_json(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists and scalars), several times faster than `copy.deepcopy`,
    which it falls back to for anything else (a tuple, a host's own object)."""
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _IMMUTABLE else _copy_json(item) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _IMMUTABLE else _copy_json(item) for item in value]
    if kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


class _TooDeep(Exception):  # noqa: N818 - a signal inside the gate, not an error
    """_copy_within: the value nests deeper than MAX_NESTING levels."""


class _Unusual(Exception):  # noqa: N818 - a signal inside the gate, not an error
    """_copy_plain: a value other than a dict, a list or a scalar (a tuple, a subclass, a host's object)."""


def _copy_within(value: Any) -> Any:
    """`_copy_json` of a value nested at most MAX_NESTING levels, else _TooDeep (`_too_deep`'s levels): one walk
    for dicts, lists and scalars; the two walks of `_too_deep` and `_copy_json` for anything else."""
    try:
        return _copy_plain(value, 1)
    except _Unusual:
        if _too_deep(value):
            raise _TooDeep from None
        return _copy_json(value)


def _copy_plain(value: Any, depth: int) -> Any:
    """A copy of a dict or a list of dicts, lists and scalars at `depth` (the top value's being 1)."""
    if depth > MAX_NESTING:
        raise _TooDeep
    kind = type(value)
    if kind is dict:
        return {key: item if type(item) in _IMMUTABLE else _copy_plain(item, depth + 1) for key, item in value.items()}
    if kind is list:
        return [item if type(item) in _IMMUTABLE else _copy_plain(item, depth + 1) for item in value]
    raise _Unusual


def _too_deep(value: Any) -> bool:
    """True when containers nest deeper than MAX_NESTING (walked a level at a time, without recursion)."""
    level: list[Any] = [value]  # the values at one depth, the top value's being 1
    for _ in range(MAX_NESTING):
        below: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                below.extend(item.values())
            elif isinstance(item, (list, tuple)):
                below.extend(item)
        if not below:
            return False
        level = below
    return any(isinstance(item, (dict, list, tuple)) for item in level)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (CanonicalError, RecursionError)):
        return f"ValueError: tool result has no JSON form: {exc}"
    return f"{type(exc).__name__}: {exc}"
