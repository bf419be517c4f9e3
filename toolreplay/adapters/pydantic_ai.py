"""The guard in front of a pydantic-ai agent's tools (docs/integrations/pydantic-ai.md).

    guard = PydanticAIGuard(policy, recorder=recorder)
    agent = Agent(model, tools=[...], capabilities=[guard], output_type=[str, DeferredToolRequests])

The capability wraps every (non-output) toolset of the run: each call goes through the Gate with
pydantic-ai's `tool_call_id` as its idempotency key. A confirmation becomes pydantic-ai's deferred tool
approval (the run ends with `DeferredToolRequests`; the next run's `DeferredToolResults` answers it); a tool
that needs approval by its own flag (`requires_approval=True`, an `approval_required()` toolset) is asked
for whatever the policy allows (a deny still denies), through the same approval. A
refusal reaches the model as a denied tool return (`ToolDenied`) whose message is the gate's reason.
Needs `pydantic-ai-slim` (the `pydantic-ai` extra); toolreplay's core never imports it.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

from pydantic_ai import ApprovalRequired, RunContext, ToolDenied
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ToolCallPart, ToolReturnPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.toolsets import (
    AbstractToolset,
    ApprovalRequiredToolset,
    CombinedToolset,
    ToolsetTool,
    WrapperToolset,
)
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
        self._denied: set[str] = set()  # tool_call_ids the gate itself denied (already on record)

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
        for message in request_context.messages[-1:]:
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.outcome == "denied":
                    with self._lock:
                        waiting = self._waiting.pop(part.tool_call_id, None)
                        ours = part.tool_call_id in self._denied
                        self._denied.discard(part.tool_call_id)
                    if waiting is None and not ours:  # a tool that needs approval by its own flag: pydantic-ai asked
                        waiting = _declared(request_context.messages, part.tool_call_id)
                    if waiting is not None:
                        await self._core.call_async(waiting[0], waiting[1], part.tool_call_id, _never_run,
                                                    ask=_answer(False), asks=True)
        return request_context

    async def guard_call(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                         toolset: AbstractToolset[Any], tool: ToolsetTool[Any]) -> Any:
        """The one place this adapter calls the gate; `ctx.tool_call_id` is the framework's tool-call id."""
        args = to_jsonable_python(tool_args)
        call_id = ctx.tool_call_id
        ran: list[Any] = []
        asks = _needs_approval(toolset, tool, tool_args, ctx)

        async def run(gate_args: dict[str, Any]) -> Any:
            # the gate had a person's yes for a call that needs approval: the toolset must not ask again
            approved = dataclasses.replace(ctx, tool_call_approved=True) if asks else ctx
            ran.append(await toolset.call_tool(name, tool_args, approved, tool))
            return to_jsonable_python(ran[0])

        ask = None
        if ctx.tool_call_approved:
            ask = _answer(True)
            with self._lock:
                self._waiting.pop(call_id or "", None)
        elif self._approvals and call_id is not None:
            ask = _defer
        try:
            answer = await self._core.call_async(name, args, call_id, run, ask=ask, asks=asks)
        except ConfirmationDeferred:
            with self._lock:
                self._waiting[call_id or ""] = (name, args)
            raise ApprovalRequired(metadata={"toolreplay": "confirmation required"}) from None
        if answer.refusal is not None:
            with self._lock:
                self._denied.add(call_id or "")
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


def _needs_approval(toolset: AbstractToolset[Any], tool: ToolsetTool[Any], tool_args: dict[str, Any],
                    ctx: RunContext[Any]) -> bool:
    """The framework's own approval flag for this call: a tool declared `requires_approval=True` (kind
    "unapproved"), or an `approval_required()` toolset around it whose function says so."""
    if ctx.tool_call_approved:
        return True  # approved by a person through pydantic-ai: the gate asks, the answer is yes
    if tool.tool_def.kind == "unapproved":
        return True
    return any(toolset.approval_required_func(ctx, tool.tool_def, tool_args)
               for toolset in _path_to(toolset, tool.toolset) if isinstance(toolset, ApprovalRequiredToolset))


def _path_to(toolset: AbstractToolset[Any], target: AbstractToolset[Any]) -> list[AbstractToolset[Any]]:
    """The toolsets from `toolset` down to `target`, the one that holds the tool (wrappers and combined
    toolsets on the way); empty when it is not below."""
    if toolset is target:
        return [toolset]
    below: list[AbstractToolset[Any]] = []
    if isinstance(toolset, WrapperToolset):
        below = [toolset.wrapped]
    elif isinstance(toolset, CombinedToolset):
        below = list(toolset.toolsets)
    for child in below:
        path = _path_to(child, target)
        if path:
            return [toolset, *path]
    return []


def _declared(messages: list[ModelMessage], call_id: str) -> tuple[str, dict[str, Any]] | None:
    """The tool and arguments of the model's call with this id (a call pydantic-ai deferred by itself)."""
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_call_id == call_id:
                return part.tool_name, to_jsonable_python(part.args_as_dict())
    return None


def _answer(answer: bool) -> Confirm:
    return lambda tool, args: answer


def _defer(tool: str, args: dict[str, Any]) -> bool:
    raise ConfirmationDeferred(f"{tool} waits for approval")


async def _never_run(args: dict[str, Any]) -> Any:
    raise RuntimeError("a declined call must not run")
