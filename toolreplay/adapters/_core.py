"""What the framework adapters share: one Gate in front of the framework's tools, reached per call.

The gate comes from the one assembly (toolreplay.guard.assembly) with the adapter as its host; each
adapter hands the framework's own way of running that call (a closure) and of asking a person to
`GuardCore.call`, the only place an adapter calls the gate, and the gate gives them back to the host as
the call's context (the one way per-call context travels). So the allowlist, rules, idempotency,
budgets, confirmation and the record are the gate's, unchanged.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from toolreplay.guard.assembly import Guard, GuardConfig, build_guard
from toolreplay.guard.host import CannotConfirmError
from toolreplay.guard.outcomes import Answer
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

__all__ = ["Confirm", "GuardCore"]

Confirm = Callable[[str, dict[str, Any]], bool]


@dataclass(slots=True)
class _Invocation:
    """One call in flight: how to run it, and how the framework asks a person (None: the guard's `confirm`)."""

    run: Callable[[dict[str, Any]], Any]
    ask: Confirm | None
    asks: bool = False  # the framework's own approval flag for this call (the tool's needs_approval)


class GuardCore:
    """A Gate whose tools are whatever the framework runs for the current call (the gate's host)."""

    def __init__(self, policy: Policy | Guard, *, confirm: Confirm | None = None,
                 recorder: SessionRecorder | None = None, **gate_options: Any) -> None:
        """`policy` is the assembled guard, or a Policy (then `mutators`, `repeatable` and `read_cache` among
        `gate_options` describe the guard); `confirm` answers confirmations the framework cannot ask itself;
        the other `gate_options` go to `Gate`."""
        if isinstance(policy, Policy):
            policy = build_guard(GuardConfig(policy, mutators=tuple(gate_options.pop("mutators", ())),
                                             repeatable=tuple(gate_options.pop("repeatable", ())),
                                             read_cache=gate_options.pop("read_cache", False)))
        self._confirm = confirm
        self.gate = policy.gate(self, recorder=recorder, **gate_options)

    def needs_confirmation(self, tool: str, args: dict[str, Any], call_id: str | None, *, asks: bool = False) -> bool:
        """Whether the gate would ask a person for this call now (`asks`: the framework's own flag says it
        needs approval); records and counts nothing."""
        return self.gate.needs_confirmation(tool, args, key=call_id, context=_Invocation(_not_here, None, asks))

    def call(self, tool: str, args: dict[str, Any], call_id: str | None, run: Callable[[dict[str, Any]], Any], *,
             ask: Confirm | None = None, asks: bool = False) -> Answer:
        """Put one framework tool call through the gate: the one place an adapter calls it. `call_id` is the
        framework's tool-call id (the idempotency key). `run(args)` runs the framework's tool when the gate
        lets it. `ask(tool, args)` is the framework's way to ask a person (its approval or interrupt): it
        answers True or False, or raises ConfirmationDeferred (nothing recorded) when the answer comes in a
        later call; without it the guard's `confirm` callback asks. `asks=True`: the framework's own approval
        flag is set for this call (its tool needs approval), so the gate asks whatever the policy allows."""
        # the framework's id is the idempotency key and the record's meta.call_id
        return self.gate.handle(tool, args, key=call_id, call_id=call_id, context=_Invocation(run, ask, asks))

    async def call_async(self, tool: str, args: dict[str, Any], call_id: str | None,
                         run: Callable[[dict[str, Any]], Awaitable[Any]], *,
                         ask: Confirm | None = None, asks: bool = False) -> Answer:
        """`call` for an async framework, in its event loop: the gate decides and records here (it is quick)
        and the tool is awaited here, no thread in between. The guard's own `confirm` callback may block (a
        person at a terminal): a call it must confirm goes through the gate on a worker thread instead."""
        if ask is None and self._confirm is not None and self.needs_confirmation(tool, args, call_id, asks=asks):
            return await self._call_on_thread(tool, args, call_id, run, asks)
        return await self.gate.handle_async(tool, args, run, key=call_id, call_id=call_id,
                                            context=_Invocation(_not_here, ask, asks))

    async def _call_on_thread(self, tool: str, args: dict[str, Any], call_id: str | None,
                              run: Callable[[dict[str, Any]], Awaitable[Any]], asks: bool) -> Answer:
        """The gate on a worker thread, the tool on this event loop."""
        loop = asyncio.get_running_loop()

        def run_on_loop(gate_args: dict[str, Any]) -> Any:
            return asyncio.run_coroutine_threadsafe(_awaited(run(gate_args)), loop).result()

        return await asyncio.to_thread(functools.partial(self.call, tool, args, call_id, run_on_loop, asks=asks))

    # -- the gate's host: the call's own context says how to run it and how to ask ------------------

    def refusal(self, tool: str) -> None:
        return None  # every tool the policy allows is the framework's to run

    def asks(self, tool: str, args: dict[str, Any], invocation: _Invocation | None) -> bool:
        """The framework's own approval flag for this call: the gate asks a person whatever the policy allows."""
        return invocation is not None and invocation.asks

    def run(self, tool: str, args: dict[str, Any], invocation: _Invocation) -> Any:
        return invocation.run(args)

    def confirm(self, tool: str, args: dict[str, Any], invocation: _Invocation) -> bool:
        if invocation.ask is not None:
            return invocation.ask(tool, args)
        if self._confirm is None:
            raise CannotConfirmError("no confirm callback was given to the guard")
        return self._confirm(tool, args)


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def _not_here(args: dict[str, Any]) -> Any:
    raise RuntimeError("handle_async awaits the tool itself")
