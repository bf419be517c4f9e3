"""The guard in front of a pydantic-ai agent's tools (docs/integrations/pydantic-ai.md).

    guard = PydanticAIGuard(policy, recorder=recorder)
    agent = Agent(model, tools=[...], capabilities=[guard], output_type=[str, DeferredToolRequests])

The capability wraps every (non-output) toolset of the run: each call goes through the Gate with
pydantic-ai's `tool_call_id` as its idempotency key. A confirmation becomes pydantic-ai's deferred tool
approval (the run ends with `DeferredToolRequests`; the next run's `DeferredToolResults` answers it). A
refusal reaches the model as a denied tool return (`ToolDenied`) whose message is the gate's reason.
Needs `pydantic-ai-slim` (the `pydantic-ai` extra); toolreplay's core never imports it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from pydantic_ai import ApprovalRequired, RunContext, ToolDenied
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ToolReturnPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_core import to_jsonable_python

from toolreplay.adapters._core import Confirm, GuardCore
from toolreplay.guard.gate import ConfirmationDeferred, Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

__all__ = ["PydanticAIGuard", "GuardedToolset"]


class PydanticAIGuard(AbstractCapability[Any]):
    """A pydantic-ai capability that puts a ToolReplay Gate in front of every tool of the agent."""

    def __init__(self, policy: Policy, *, recorder: SessionRecorder | None = None, confirm: Confirm | None = None,
                 approvals: bool = True, **gate_options: Any) -> None:
        """`approvals=True` asks confirmations through deferred tool approval; False uses `confirm`."""
        self._core = GuardCore(policy, confirm=confirm, recorder=recorder, **gate_options)
        self._approvals = approvals
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[str, dict[str, Any]]] = {}  # tool_call_id -> the call sent for approval

    @property
    def gate(self) -> Gate:
        """The gate (its steps, stop reason and record error)."""
        return self._core.gate

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any]:
        """Every tool of the run goes through the gate."""
        return GuardedToolset(toolset, guard=self)

    async def before_model_request(self, ctx: RunContext[Any],
                                   request_context: ModelRequestContext) -> ModelRequestContext:
        """A call sent for approval and denied never reaches a toolset: its decline goes on record here,
        before the model reads the denial."""
        with self._lock:
            if not self._waiting:
                return request_context
        for message in request_context.messages[-1:]:
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.outcome == "denied":
                    with self._lock:
                        waiting = self._waiting.pop(part.tool_call_id, None)
                    if waiting is not None:
                        await self._core.call_async(waiting[0], waiting[1], part.tool_call_id, _never_run,
                                                    ask=_answer(False))
        return request_context

    async def guard_call(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                         toolset: AbstractToolset[Any], tool: ToolsetTool[Any]) -> Any:
        """The one place this adapter calls the gate; `ctx.tool_call_id` is the framework's tool-call id."""
        args = to_jsonable_python(tool_args)
        call_id = ctx.tool_call_id
        ran: list[Any] = []

        async def run(gate_args: dict[str, Any]) -> Any:
            ran.append(await toolset.call_tool(name, tool_args, ctx, tool))
            return to_jsonable_python(ran[0])

        ask = None
        if ctx.tool_call_approved:
            ask = _answer(True)
            with self._lock:
                self._waiting.pop(call_id or "", None)
        elif self._approvals and call_id is not None:
            ask = _defer
        try:
            answer = await self._core.call_async(name, args, call_id, run, ask=ask)
        except ConfirmationDeferred:
            with self._lock:
                self._waiting[call_id or ""] = (name, args)
            raise ApprovalRequired(metadata={"toolreplay": "confirmation required"}) from None
        if answer.refusal is not None:
            return ToolDenied(answer.refusal.message)
        return ran[0] if ran else answer.response


@dataclass
class GuardedToolset(WrapperToolset[Any]):
    """A toolset whose calls go through a PydanticAIGuard (the capability wraps toolsets with it)."""

    guard: PydanticAIGuard | None = None

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        """Through the gate."""
        if self.guard is None:
            raise RuntimeError("GuardedToolset needs a guard")
        return await self.guard.guard_call(name, tool_args, ctx, self.wrapped, tool)


def _answer(answer: bool) -> Confirm:
    return lambda tool, args: answer


def _defer(tool: str, args: dict[str, Any]) -> bool:
    raise ConfirmationDeferred(f"{tool} waits for approval")


async def _never_run(args: dict[str, Any]) -> Any:
    raise RuntimeError("a declined call must not run")
