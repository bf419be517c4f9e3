"""The runtime gate (docs/guard.md): what an agent's tool request must pass before a real tool runs.

Each request goes through, in this order:

1. **budgets** — once a limit is passed, every request is refused naming it (`max_steps`, `budget`,
   `time`);
2. **allowlist** — a tool the policy does not allow, or that the host did not supply, never runs;
3. **idempotency** — a request canonically identical to one already executed returns that response,
   without running anything (and without asking a human again); a retry racing the original waits for it;
4. **confirmation** — a write tool runs only when the host's `confirm(tool, args)` returns True for
   that exact call; nothing the model writes into the call counts;
5. the tool runs; what it returns (or raises) becomes the response.

Every request, whatever happened to it, is appended to the recorder when one is given.
"""

from __future__ import annotations

import copy
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TextIO

from toolreplay.format.canonical import CanonicalError, canonical_bytes
from toolreplay.policy.model import Policy

if TYPE_CHECKING:
    from toolreplay.guard.recorder import SessionRecorder
    from toolreplay.guard.screen import Screen

__all__ = ["Gate", "ConsoleApprover", "STOP_REASONS"]

STOP_REASONS = ("max_steps", "budget", "time")

Confirm = Callable[[str, dict[str, Any]], bool]


class _Pending:
    """A call being executed: identical requests wait on `done` and then read `response`."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.response: dict[str, Any] = {"ok": False,
                                         "error": "RuntimeError: the original call did not finish"}


class Gate:
    """Puts a policy between an agent and its real tools; `call` is the agent's only way in."""

    def __init__(self, tools: Mapping[str, Callable[..., Any]], policy: Policy, *,
                 confirm: Confirm | None = None, recorder: SessionRecorder | None = None,
                 clock: Callable[[], float] = time.monotonic, screen: Screen | None = None) -> None:
        """Tools are called as `func(**args)`; the session's clock starts now."""
        self._tools = dict(tools)
        self._policy = policy
        self._confirm = confirm
        self._recorder = recorder
        self._clock = clock
        self._screen = screen
        self._started = clock()
        self._lock = threading.Lock()
        self._steps = 0
        self._result_bytes = 0
        self._stop_reason: str | None = None
        self._calls: dict[bytes, _Pending] = {}

    @property
    def stop_reason(self) -> str | None:
        """None while within budget, else the limit that stopped the session."""
        return self._stop_reason

    @property
    def steps(self) -> int:
        """Requests seen so far, refused ones included."""
        return self._steps

    @property
    def result_bytes(self) -> int:
        """Canonical bytes of the results of the tools run so far."""
        return self._result_bytes

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one request of the agent through the gate; return the response the agent sees."""
        if not isinstance(tool, str) or not tool:
            raise ValueError("tool must be a non-empty string")
        if not isinstance(args, dict):
            raise ValueError("args must be a JSON object (a dict)")
        try:
            key = canonical_bytes({"tool": tool, "args": args})
        except (CanonicalError, RecursionError) as exc:
            raise ValueError(f"args have no JSON form: {exc}") from None
        args = copy.deepcopy(args)  # what is checked, confirmed and recorded; the model's dict may change
        response = self._decide(tool, args, key)
        return copy.deepcopy(response)

    def _decide(self, tool: str, args: dict[str, Any], key: bytes) -> dict[str, Any]:
        refusal = self._count_step()
        if refusal is None and (tool not in self._policy.allowed_tools or tool not in self._tools):
            refusal = "tool not allowed: " + tool
        if refusal is not None:
            return self._record(tool, args, {"ok": False, "error": refusal})
        with self._lock:
            pending = self._calls.get(key)
        if pending is not None:
            return self._duplicate(tool, args, pending)
        if tool in self._policy.write_tools and not self._confirmed(tool, args):
            return self._record(tool, args, {"ok": False, "error": "confirmation required"})
        with self._lock:
            pending = self._calls.get(key)
            owner = pending is None
            if owner:
                pending = self._calls[key] = _Pending()
        assert pending is not None
        if not owner:  # an identical call started while this one was being confirmed
            return self._duplicate(tool, args, pending)
        try:
            pending.response = self._execute(tool, args)
            self._record(tool, args, pending.response)
        finally:
            pending.done.set()
        return pending.response

    def _count_step(self) -> str | None:
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

    def _confirmed(self, tool: str, args: dict[str, Any]) -> bool:
        if self._confirm is None:
            return False
        try:
            return self._confirm(tool, copy.deepcopy(args)) is True
        except Exception:  # a failing approver approves nothing
            return False

    def _duplicate(self, tool: str, args: dict[str, Any], pending: _Pending) -> dict[str, Any]:
        pending.done.wait()
        return self._record(tool, args, pending.response)

    def _execute(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        try:
            result = self._tools[tool](**copy.deepcopy(args))
            response = result if isinstance(result, dict) else {"result": result}
            size = len(canonical_bytes(response))
            response = copy.deepcopy(response)  # the tool may keep and change what it returned
        except Exception as exc:  # the agent sees the failure; the host keeps running
            return {"ok": False, "error": _describe(exc)}
        limit = self._policy.limits.max_result_bytes
        with self._lock:
            self._result_bytes += size
            if limit is not None and self._result_bytes > limit and self._stop_reason is None:
                self._stop_reason = "budget"
        if self._screen is not None:
            self._screen.check(tool, args, response)
        return response

    def _record(self, tool: str, args: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        if self._recorder is not None:
            self._recorder.append(tool, args, response)
        return response


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
        """Show the exact call and ask; end of input or any other answer refuses."""
        source = self._input if self._input is not None else sys.stdin
        sink = self._output if self._output is not None else sys.stderr
        # ASCII-only JSON: what the person approves cannot hide behind control or bidi characters.
        shown = json.dumps(args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        with self._lock:  # one question at a time, even when agents call from several threads
            sink.write(f"approve {tool} {shown}? [y/N] ")
            sink.flush()
            answer = source.readline()
            if not answer.endswith("\n"):
                sink.write("\n")
        return answer.strip().lower() in ("y", "yes")
