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
   response; a read is answered from an identical earlier read only while no write has run since;
   a retry racing the original waits for it;
6. **confirmation** — a write tool (or a call an ask rule caught) runs only when the host's
   `confirm(tool, args)` returns True for that exact call; nothing the model writes into the call counts;
   a refusal says whether the person declined, nobody could be asked, or the question timed out;
7. the tool runs (a write only after its intent is on disk); what it returns (or raises) becomes the
   response.

Every request, whatever happened to it, is appended to the recorder when one is given.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from toolreplay.errors import ToolReplayError
from toolreplay.format.canonical import CanonicalError, canonical_bytes, canonical_json
from toolreplay.policy.model import Policy
from toolreplay.policy.refusals import REFUSAL_PREFIXES, is_refusal
from toolreplay.policy.rules import RuleSet, RuleState, Ruling

if TYPE_CHECKING:
    from toolreplay.format.records import Record
    from toolreplay.guard.intents import Intent
    from toolreplay.guard.recorder import SessionRecorder
    from toolreplay.guard.screen import Screen

__all__ = ["Gate", "ConsoleApprover", "CannotConfirmError", "ConfirmationDeferred", "STOP_REASONS", "MAX_NESTING",
           "REFUSAL_PREFIXES", "is_refusal"]

STOP_REASONS = ("max_steps", "budget", "time", "record")

# Arguments and results nested deeper than this are refused: every reader of the record can hold them.
MAX_NESTING = 256

Confirm = Callable[[str, dict[str, Any]], bool]

# The three ways a confirmation is refused, each its own text (the first is the SPEC's).
NOT_ASKED, DECLINED, TIMED_OUT = "confirmation required", "confirmation declined", "confirmation timed out"


class CannotConfirmError(ToolReplayError):
    """Raised by a `confirm` callback that has no way to ask a person (no terminal, a client that cannot ask)."""


class ConfirmationDeferred(ToolReplayError):
    """Raised by a `confirm` callback whose answer comes later, out of band (a framework's approval request or
    interrupt): the gate records nothing, does not count the request, and lets this propagate; the host asks,
    then makes the same call again. The framework adapters (toolreplay/guard/adapters) use it."""


@dataclass(frozen=True, slots=True)
class _Call:
    """One request as the gate handles it: `identity` is the canonical call, `key` the host's idempotency key."""

    tool: str
    args: dict[str, Any]
    identity: bytes
    key: str | None
    write: bool


class _Pending:
    """A call being executed: identical requests wait on `done` and then read `response`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.thread = threading.get_ident()
        self.response: dict[str, Any] = {"ok": False,
                                         "error": "RuntimeError: the original call did not finish"}


class Gate:
    """Puts a policy between an agent and its real tools; `call` is the agent's only way in."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]], policy: Policy, *,
                 confirm: Confirm | None = None, recorder: SessionRecorder | None = None,
                 clock: Callable[[], float] = time.monotonic, screen: Screen | None = None,
                 mutators: Iterable[str] = (), read_cache: bool = True) -> None:
        """Tools are called as `func(**args)`; the session's clock starts now.

        `mutators` are more tools that change state (like write tools, but asked for no confirmation);
        `read_cache=False` runs every read. A recorder that continues a record brings back the writes
        it holds (they are not run again) and the writes whose outcome is unknown (they are refused).
        """
        self._tools = dict(tools)
        self._policy = policy
        self._writes = frozenset(policy.write_tools) | frozenset(mutators)
        self._read_cache = read_cache
        self._confirm = confirm
        self._recorder = recorder
        self._clock = clock
        self._screen = screen
        self._started = clock()
        self._lock = threading.Lock()
        self._steps = 0
        self._result_bytes = 0
        self._stop_reason: str | None = None
        self._record_error: str | None = None
        self._written: dict[tuple[bytes, str | None], _Pending] = {}
        self._reads: dict[bytes, _Pending] = {}
        self._recorded: dict[bytes, dict[str, Any]] = {}
        self._unknown: dict[bytes, str] = {}
        self._rule_set = RuleSet(policy.rules)
        self._rules = RuleState(self._rule_set) if policy.rules else None
        if recorder is not None and (recorder.resumed_records or recorder.previous_intents):
            self._resume(recorder)

    @property
    def stop_reason(self) -> str | None:
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
        with self._lock:
            return tuple(sorted(self._unknown.values()))

    def call(self, tool: str, args: dict[str, Any], *, key: str | None = None) -> dict[str, Any]:
        """Run one request of the agent through the gate; return the response the agent sees.

        `key` is an idempotency key (say the model's tool_call_id): identical writes with different
        keys both run; the same key (or none) twice runs once. Reads ignore it.
        """
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool must be a non-empty string")
        if not isinstance(args, dict):
            raise ValueError("args must be a JSON object (a dict)")
        if key is not None and not isinstance(key, str):
            raise ValueError("key must be a string or None")
        try:
            identity = canonical_bytes({"tool": tool, "args": args})
        except (CanonicalError, RecursionError) as exc:
            raise ValueError(f"args have no JSON form: {exc}") from None
        if _too_deep(args):
            raise ValueError(f"args have no JSON form: nested deeper than {MAX_NESTING} levels")
        # what is checked, confirmed and recorded; the model's dict may change
        request = _Call(tool, copy.deepcopy(args), identity, key, tool in self._writes)
        return copy.deepcopy(self._decide(request))

    def needs_confirmation(self, tool: str, args: dict[str, Any], *, key: str | None = None) -> bool:
        """Whether `call` with these args would ask `confirm` now: it passes the earlier checks and has not
        run. Records and counts nothing (for a framework that asks before it calls the tool)."""
        try:
            call = _Call(tool, copy.deepcopy(args), canonical_bytes({"tool": tool, "args": args}), key,
                         tool in self._writes)
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
        return self._earlier(call) is None and self._needs_confirmation(call, ruling)

    def _decide(self, call: _Call) -> dict[str, Any]:
        failure = self._check_recording()
        if failure is not None:
            return failure
        for check in (self._check_budget, self._check_allowed, self._check_outcome_known):
            refusal = check(call)
            if refusal is not None:
                return self._refuse(call, refusal)
        ruling = self._check_rules(call)
        if ruling is not None and ruling.refusal is not None:
            return self._refuse(call, ruling.refusal)
        earlier = self._earlier(call)
        if earlier is not None:
            return self._repeat(call, earlier)
        if self._needs_confirmation(call, ruling):
            refusal = self._confirmation_refusal(call, ruling)
            if refusal is not None:
                return self._refuse(call, refusal)
        pending, owner = self._register(call)
        if not owner:  # an identical call started while this one was being confirmed
            return self._repeat(call, pending)
        return self._run(call, pending)

    # -- the checks, in order ---------------------------------------------------------------------

    def _check_recording(self) -> dict[str, Any] | None:
        """Refuse (unrecorded) once recording failed, or when the record is no longer writable."""
        if self._recorder is not None and self._record_error is None:
            try:
                self._recorder.check()
            except (OSError, ValueError) as exc:
                self._recording_failed(exc)
        if self._record_error is None:
            return None
        return {"ok": False, "error": "recording failed: " + self._record_error}

    def _check_budget(self, call: _Call) -> str | None:
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
            return "budget exceeded: " + self._stop_reason

    def _check_allowed(self, call: _Call) -> str | None:
        if call.tool not in self._policy.allowed_tools or call.tool not in self._tools:
            return "tool not allowed: " + call.tool
        return None

    def _check_outcome_known(self, call: _Call) -> str | None:
        if not call.write:
            return None
        with self._lock:
            unknown = call.identity in self._unknown
        if not unknown:
            return None
        where = ("delete its line from " + os.path.basename(self._recorder.intents_path) if self._recorder is not None
                 else "start a new gate")
        return (f"outcome unknown: an identical {call.tool} call started earlier and its result was never "
                f"recorded; a person must check whether it took effect, then {where}")

    def _earlier(self, call: _Call) -> _Pending | dict[str, Any] | None:
        """The identical earlier call that answers this one (a recorded write's response), else None."""
        with self._lock:
            if call.write:
                recorded = self._recorded.get(call.identity)
                if recorded is not None:
                    return recorded
                return self._written.get((call.identity, call.key))
            return self._reads.get(call.identity)

    def _check_rules(self, call: _Call) -> Ruling | None:
        """The rules' ruling on the call (None without rules); unless denied, it counts as executed."""
        if self._rules is None:
            return None
        return self._rules.check(call.tool, self._rule_set.prepare(call.tool, call.args), self._clock())

    def _needs_confirmation(self, call: _Call, ruling: Ruling | None = None) -> bool:
        """Rules first (ask > allow), then write_tools."""
        if ruling is not None and ruling.asks:
            return True
        if ruling is not None and ruling.allowed:
            return False
        return call.tool in self._policy.write_tools

    def _confirmation_refusal(self, call: _Call, ruling: Ruling | None) -> str | None:
        """Ask; None for a yes, else the refusal. A call not confirmed did not run: the rules must not count it."""
        refusal: str | None = NOT_ASKED
        try:
            refusal = self._ask(call)
        finally:
            if refusal is not None and ruling is not None and self._rules is not None:
                self._rules.withdraw(ruling)
        return refusal

    def _ask(self, call: _Call) -> str | None:
        """None when `confirm` returned True; DECLINED for False, TIMED_OUT for a TimeoutError, else NOT_ASKED."""
        if self._confirm is None:
            return NOT_ASKED
        try:
            answer = self._confirm(call.tool, copy.deepcopy(call.args))
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
        if answer is True:
            return None
        return DECLINED if answer is False else NOT_ASKED

    # -- running and recording --------------------------------------------------------------------

    def _register(self, call: _Call) -> tuple[_Pending, bool]:
        """The call's pending entry, and whether this request owns (runs) it."""
        with self._lock:
            table: dict[Any, _Pending] = self._written if call.write else self._reads
            slot: Any = (call.identity, call.key) if call.write else call.identity
            pending = table.get(slot)
            if pending is not None:
                return pending, False
            pending = _Pending()
            if call.write or self._read_cache:
                table[slot] = pending
            return pending, True

    def _repeat(self, call: _Call, earlier: _Pending | dict[str, Any]) -> dict[str, Any]:
        if isinstance(earlier, dict):
            return self._record(call, earlier)
        if not earlier.done.is_set() and earlier.thread == threading.get_ident():
            return self._refuse(call, f"re-entrant call: {call.tool} is already running this identical call")
        earlier.done.wait()
        return self._record(call, earlier.response)

    def _run(self, call: _Call, pending: _Pending) -> dict[str, Any]:
        try:
            try:
                intent = self._announce(call)
            except (OSError, ValueError) as exc:  # no intent on disk: the write must not run
                self._recording_failed(exc)
                self._forget(call)
                pending.response = _refusal("recording failed: " + (self._record_error or ""))
                return pending.response
            except BaseException:
                self._forget(call)
                raise
            try:
                response = self._execute(call)
            except BaseException as exc:  # KeyboardInterrupt, SystemExit: on record, then on its way
                pending.response = _refusal(_interrupted(exc))
                self._forget(call, unknown=call.write)
                self._record(call, pending.response)
                raise
            pending.response = self._record(call, response, intent)
            return pending.response
        finally:
            pending.done.set()

    def _announce(self, call: _Call) -> int | None:
        """Before a write: empty the read cache and sync its intent (its number, None without a recorder)."""
        if not call.write:
            return None
        with self._lock:
            self._reads.clear()
        return None if self._recorder is None else self._recorder.announce(call.tool, call.args, call.key)

    def _forget(self, call: _Call, unknown: bool = False) -> None:
        """Drop the call's pending entry (it did not run, or its outcome is unknown)."""
        with self._lock:
            if call.write:
                self._written.pop((call.identity, call.key), None)
                if unknown:
                    self._unknown[call.identity] = f"{call.tool} {canonical_json(call.args)}"
            else:
                self._reads.pop(call.identity, None)

    def _execute(self, call: _Call) -> dict[str, Any]:
        try:
            try:
                result = self._tools[call.tool](**copy.deepcopy(call.args))
            finally:
                if call.write:  # whatever it did, earlier reads may be stale now
                    with self._lock:
                        self._reads.clear()
            response = result if isinstance(result, dict) else {"result": result}
            if _too_deep(response):
                raise ValueError(f"tool result has no JSON form: nested deeper than {MAX_NESTING} levels")
            size = len(canonical_bytes(response))
            response = copy.deepcopy(response)  # the tool may keep and change what it returned
        except Exception as exc:  # the agent sees the failure; the host keeps running
            return _refusal(_describe(exc))
        limit = self._policy.limits.max_result_bytes
        with self._lock:
            self._result_bytes += size
            if limit is not None and self._result_bytes > limit and self._stop_reason is None:
                self._stop_reason = "budget"
        if self._screen is not None:
            self._screen.check(call.tool, call.args, response)
        return response

    def _refuse(self, call: _Call, message: str) -> dict[str, Any]:
        return self._record(call, _refusal(message))

    def _record(self, call: _Call, response: dict[str, Any], intent: int | None = None) -> dict[str, Any]:
        """Append the request with `response`; if that fails, the refusal that replaces it."""
        if self._recorder is None:
            return response
        if self._record_error is not None:
            return _refusal("recording failed: " + self._record_error)
        try:
            self._recorder.append(call.tool, call.args, response, intent=intent)
        except (OSError, ValueError) as exc:
            self._recording_failed(exc)
            return _refusal("recording failed: " + (self._record_error or ""))
        return response

    def _recording_failed(self, exc: BaseException) -> None:
        with self._lock:
            if self._record_error is None:
                self._record_error = str(exc)
            if self._stop_reason is None:
                self._stop_reason = "record"

    # -- a record continued after a restart -------------------------------------------------------

    def _resume(self, recorder: SessionRecorder) -> None:
        """Bring back the writes the record holds and find the announced writes it does not."""
        intents = list(recorder.previous_intents)
        wanted = {intent.call for intent in intents}
        landed: dict[bytes, list[int]] = {}
        for record in recorder.history():
            self._remember_for_rules(record)
            if record.tool not in self._writes or is_refusal(record.response):
                continue
            identity = record.canonical_call
            self._recorded.setdefault(identity, record.response)
            if identity in wanted:
                landed.setdefault(identity, []).append(record.index)
        unknown = _unresolved(intents, landed)
        for intent in unknown:
            self._unknown[intent.call] = f"{intent.tool} {canonical_json(intent.args)}"
        recorder.keep_intents(unknown)


    def _remember_for_rules(self, record: Record) -> None:
        """A resumed record counts for later rules (`after`, `count`, `rate`) as when it was made."""
        if self._rules is None or record.tool not in self._policy.allowed_tools:
            return
        ruling = self._rules.check(record.tool, self._rule_set.prepare(record.tool, record.args), self._started)
        if is_refusal(record.response):
            self._rules.withdraw(ruling)


def _unresolved(intents: list[Intent], landed: dict[bytes, list[int]]) -> list[Intent]:
    """The intents no record answers: a done line must name a record of the same call; an intent
    without one is answered only by a record of its call at or after its start, and only when no
    other intent shares that call (then which record is whose cannot be told)."""
    claimed = {intent.done for intent in intents if intent.done is not None}
    sharing: dict[bytes, int] = {}
    for intent in intents:
        sharing[intent.call] = sharing.get(intent.call, 0) + 1
    unknown = []
    for intent in intents:
        indexes = landed.get(intent.call, [])
        if intent.done is not None:
            resolved = intent.done in indexes
        else:
            resolved = sharing[intent.call] == 1 and any(
                index >= intent.start and index not in claimed for index in indexes)
        if not resolved:
            unknown.append(intent)
    return unknown


def _refusal(message: str) -> dict[str, Any]:
    return {"ok": False, "error": message}


def _interrupted(exc: BaseException) -> str:
    return f"interrupted: {type(exc).__name__}"


def _too_deep(value: Any) -> bool:
    """True when containers nest deeper than MAX_NESTING (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > MAX_NESTING:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (CanonicalError, RecursionError)):
        return f"ValueError: tool result has no JSON form: {exc}"
    return f"{type(exc).__name__}: {exc}"


class ConsoleApprover:
    """A confirmation callback that asks a person on the terminal; only `y` or `yes` approves."""

    def __init__(self, input: TextIO | None = None, output: TextIO | None = None) -> None:
        """Read answers from `input` (default stdin), write prompts to `output` (default stderr)."""
        self._input = input
        self._output = output
        self._lock = threading.Lock()

    def __call__(self, tool: str, args: dict[str, Any]) -> bool:
        """Show the exact call and ask; any answer but yes declines, end of input is CannotConfirmError."""
        source = self._input if self._input is not None else sys.stdin
        sink = self._output if self._output is not None else sys.stderr
        # ASCII-only JSON: what the person approves cannot hide behind control or bidi characters.
        shown = json.dumps(args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        with self._lock:  # one question at a time, even when agents call from several threads
            sink.write(f"approve {_shown_name(tool)} {shown}? [y/N] ")
            sink.flush()
            answer = source.readline()
            if not answer.endswith("\n"):
                sink.write("\n")
        if not answer:
            raise CannotConfirmError("no answer: the input ended")
        return answer.strip().lower() in ("y", "yes")


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.:/-]+")


def _shown_name(tool: str) -> str:
    """A tool name as the terminal shows it: as is when plain, else as ASCII-only JSON (control characters,
    escapes, spaces and look-alike letters cannot reach the terminal raw)."""
    return tool if _PLAIN_NAME.fullmatch(tool) else json.dumps(tool, ensure_ascii=True)
