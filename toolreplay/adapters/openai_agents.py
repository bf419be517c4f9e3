"""The guard in front of an OpenAI Agents SDK agent's function tools (docs/integrations/openai-agents.md).

    guard = OpenAIAgentsGuard(policy, recorder=recorder)
    agent = Agent(name="support", tools=guard.wrap([get_order, cancel_order]), hooks=guard.hooks)

`wrap` returns copies of the `FunctionTool`s whose `on_invoke_tool` goes through the Gate (the SDK's
`call_id` is the idempotency key) and whose `needs_approval` asks the gate whether this call needs a
person (a tool's own `needs_approval` is kept: when it says yes, the gate asks whatever the policy
allows, and a deny still denies): the SDK then interrupts the run (`result.interruptions`;
`state.approve`/`state.reject`). A
refusal reaches the model as the tool's output text, the gate's reason. `hooks` puts a rejected call on
record (the SDK never invokes it). Needs `openai-agents` (the `openai-agents` extra); toolreplay's core
never imports it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable
from typing import Any

from agents import AgentHooks, FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from toolreplay.adapters._core import Confirm, GuardCore
from toolreplay.guard.gate import Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

__all__ = ["OpenAIAgentsGuard"]


class OpenAIAgentsGuard:
    """Puts a ToolReplay Gate in front of an Agents SDK agent's function tools."""

    def __init__(self, policy: Policy, *, recorder: SessionRecorder | None = None, confirm: Confirm | None = None,
                 approvals: bool = True, **gate_options: Any) -> None:
        """`approvals=True` asks confirmations through the SDK's tool approval; False uses `confirm`."""
        self._core = GuardCore(policy, confirm=confirm, recorder=recorder, **gate_options)
        self._approvals = approvals
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[str, dict[str, Any]]] = {}  # call_id -> the call sent for approval
        self._flagged: set[str] = set()  # call ids whose tool's own needs_approval said yes
        self.hooks: AgentHooks[Any] = _DeclineRecorder(self)

    @property
    def gate(self) -> Gate:
        """The gate (its steps, stop reason and record error)."""
        return self._core.gate

    def wrap(self, tools: Iterable[FunctionTool]) -> list[FunctionTool]:
        """Copies of the function tools whose calls go through the gate."""
        return [self._wrap_one(tool) for tool in tools]

    def _wrap_one(self, tool: FunctionTool) -> FunctionTool:
        if not isinstance(tool, FunctionTool):
            raise TypeError(f"only FunctionTools can be guarded, not {type(tool).__name__}")
        invoke = tool.on_invoke_tool
        own = tool.needs_approval  # the tool's own flag: kept, as at least an ask of the gate

        async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
            return await self.guard_call(tool.name, arguments, context, invoke)

        async def needs_approval(context: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
            asks = own if isinstance(own, bool) else bool(await own(context, params, call_id))
            if asks:
                with self._lock:
                    self._flagged.add(call_id)
            if not self._approvals or not self._core.needs_confirmation(tool.name, params, call_id, asks=asks):
                return False
            with self._lock:
                self._waiting[call_id] = (tool.name, dict(params))
            return True

        return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool, needs_approval=needs_approval)

    async def guard_call(self, name: str, arguments: str, context: ToolContext[Any], invoke: Any) -> Any:
        """The one place this adapter calls the gate; `context.tool_call_id` is the framework's tool-call id."""
        call_id = context.tool_call_id
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return f"invalid arguments for {name}: not a JSON object"
        ran: list[Any] = []

        async def run(gate_args: dict[str, Any]) -> Any:
            ran.append(await invoke(context, json.dumps(gate_args)))
            return ran[0]

        with self._lock:
            approved = self._waiting.pop(call_id, None) is not None and context.is_tool_approved(name, call_id)
            asks = call_id in self._flagged
            self._flagged.discard(call_id)
        ask = _answer(True) if approved else None
        answer = await self._core.call_async(name, args, call_id, run, ask=ask, asks=asks)
        if answer.refusal is not None:
            return answer.refusal.message
        return ran[0] if ran else answer.response

    async def record_declines(self, context: RunContextWrapper[Any]) -> None:
        """Put on record each call sent for approval that the person rejected (the SDK never invokes it)."""
        with self._lock:
            declined = [(call_id, call) for call_id, call in self._waiting.items()
                        if context.is_tool_approved(call[0], call_id) is False]
            flagged = {call_id for call_id, _ in declined if call_id in self._flagged}
            for call_id, _ in declined:
                del self._waiting[call_id]
                self._flagged.discard(call_id)
        for call_id, (tool, args) in declined:
            await self._core.call_async(tool, args, call_id, _never_run, ask=_answer(False),
                                        asks=call_id in flagged)


class _DeclineRecorder(AgentHooks[Any]):
    def __init__(self, guard: OpenAIAgentsGuard) -> None:
        self._guard = guard

    async def on_llm_start(self, context: RunContextWrapper[Any], agent: Any, system_prompt: str | None,
                           input_items: list[Any]) -> None:
        await self._guard.record_declines(context)


def _answer(answer: bool) -> Confirm:
    return lambda tool, args: answer


async def _never_run(args: dict[str, Any]) -> Any:
    raise RuntimeError("a declined call must not run")
