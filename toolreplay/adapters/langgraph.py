"""The guard in front of a LangGraph `ToolNode` (docs/integrations/langgraph.md).

    guard = LangGraphGuard(policy, recorder=recorder)
    tools = ToolNode([...], wrap_tool_call=guard.wrap_tool_call, awrap_tool_call=guard.awrap_tool_call)

Each tool call of the node goes through the Gate with the call's `id` as its idempotency key. A
confirmation is a LangGraph `interrupt` (the graph needs a checkpointer): resume it with
`Command(resume=True)` or `Command(resume=False)`. A tool that calls `interrupt` itself (its own way to
ask a person) pauses the graph as it would unguarded: the paused attempt is on record as cancelled, and
the tool's run on resume is the call. A refusal reaches the model as a `ToolMessage` with
`status="error"` whose content is the gate's reason. Needs `langchain-core` and `langgraph` (the
`langgraph` extra); toolreplay's core never imports them.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp, GraphInterrupt
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from toolreplay.adapters._core import Confirm, GuardCore
from toolreplay.guard.gate import Answer, CallCancelled, ConfirmationDeferred, Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

__all__ = ["LangGraphGuard"]

Result: TypeAlias = ToolMessage | Command[Any]


class LangGraphGuard:
    """Puts a ToolReplay Gate in front of the tools of a LangGraph ToolNode."""

    def __init__(self, policy: Policy, *, recorder: SessionRecorder | None = None, confirm: Confirm | None = None,
                 interrupts: bool = True, **gate_options: Any) -> None:
        """`interrupts=True` asks confirmations with LangGraph's `interrupt`; False uses `confirm`."""
        self._core = GuardCore(policy, confirm=confirm, recorder=recorder, **gate_options)
        self._interrupts = interrupts

    @property
    def gate(self) -> Gate:
        """The gate (its steps, stop reason and record error)."""
        return self._core.gate

    def wrap_tool_call(self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Result]) -> Result:
        """ToolNode's `wrap_tool_call`: the one place this adapter calls the gate (`call["id"]` is the
        framework's tool-call id)."""
        call = request.tool_call
        ran: list[Result] = []

        paused: list[GraphBubbleUp] = []

        def run(gate_args: dict[str, Any]) -> Any:
            try:
                ran.append(execute(request.override(tool_call={**call, "args": gate_args})))
            except GraphBubbleUp as pause:  # the tool's own interrupt: it asks a person
                raise _paused(paused, pause) from None
            return _json_form(ran[0])

        ask = self._ask_by_interrupt(call.get("id")) if self._interrupts else None
        try:
            answer = self._core.call(call["name"], dict(call["args"]), call.get("id"), run, ask=ask)
        except ConfirmationDeferred as deferred:
            raise deferred.__cause__ or deferred from None  # the GraphInterrupt: the graph pauses here
        if paused:
            raise paused[0]  # on record as paused; the graph pauses, and the tool runs again on resume
        return _message(call, answer, ran)

    async def awrap_tool_call(self, request: ToolCallRequest,
                              execute: Callable[[ToolCallRequest], Awaitable[Result]]) -> Result:
        """ToolNode's `awrap_tool_call` (the graph run with `ainvoke`/`astream`)."""
        call = request.tool_call
        ran: list[Result] = []

        paused: list[GraphBubbleUp] = []

        async def run(gate_args: dict[str, Any]) -> Any:
            try:
                ran.append(await execute(request.override(tool_call={**call, "args": gate_args})))
            except GraphBubbleUp as pause:
                raise _paused(paused, pause) from None
            return _json_form(ran[0])

        ask = self._ask_by_interrupt(call.get("id")) if self._interrupts else None
        try:
            answer = await self._core.call_async(call["name"], dict(call["args"]), call.get("id"), run, ask=ask)
        except ConfirmationDeferred as deferred:
            raise deferred.__cause__ or deferred from None
        if paused:
            raise paused[0]
        return _message(call, answer, ran)

    @staticmethod
    def _ask_by_interrupt(call_id: str | None) -> Confirm:
        def ask(tool: str, args: dict[str, Any]) -> bool:
            try:
                answer = interrupt({"toolreplay": "confirmation required", "tool": tool, "args": args,
                                    "tool_call_id": call_id})
            except GraphInterrupt as pause:  # the first time: pause the graph, record nothing
                raise ConfirmationDeferred(f"{tool} waits for a resume") from pause
            return answer is True if isinstance(answer, bool) else _not_a_bool(answer)
        return ask


def _paused(paused: list[GraphBubbleUp], pause: GraphBubbleUp) -> CallCancelled:
    """A tool that interrupts the graph itself (LangGraph's `interrupt`, its way to ask a person) did not
    fail: the gate records the call as cancelled before its effect (LangGraph runs the tool again from its
    start on resume, and that run is the call), and the interrupt goes on to pause the graph."""
    paused.append(pause)
    return CallCancelled("paused: the tool interrupted the graph to ask a person; it runs again on resume",
                         started=False)


def _not_a_bool(answer: Any) -> bool:
    raise ValueError(f"resume with True or False, not {type(answer).__name__}")  # the gate: confirmation required


def _json_form(result: Result) -> Any:
    """What the record holds for a tool's result: the ToolMessage's content (a JSON object read back as one)."""
    if not isinstance(result, ToolMessage):
        raise TypeError("the tool returned a Command; the guard records ToolMessage results only")
    content = result.content
    if result.status == "error":
        return {"ok": False, "error": content if isinstance(content, str) else json.dumps(content)}
    if isinstance(content, str):
        try:
            value = json.loads(content)
        except ValueError:
            return content
        return value if isinstance(value, dict) else content
    return content


def _message(call: Any, answer: Answer, ran: list[Result]) -> Result:
    """What the model gets: the tool's own message when it ran, else the gate's answer as a ToolMessage."""
    if answer.refusal is not None:
        return ToolMessage(content=answer.refusal.message, name=call["name"], tool_call_id=call.get("id") or "",
                           status="error")
    if ran:
        return ran[0]
    response = answer.response
    failed = response.get("ok") is False and isinstance(response.get("error"), str)  # the tool raised
    return ToolMessage(content=json.dumps(response, ensure_ascii=False), name=call["name"],
                       tool_call_id=call.get("id") or "", status="error" if failed else "success")
