"""The agent protocol: a callable that sees the conversation so far and returns its next step.

    def agent(conversation: Conversation) -> ToolCall | list[ToolCall] | Answer: ...

`conversation.question` is the user's question, `conversation.calls` every earlier tool call with the
response the agent saw (in order, each with the turn that asked for it), `conversation.tools` the
names it may call. Each call of the agent is one model turn: it returns one `ToolCall`, several (a
list or tuple: parallel tool calls of one turn, run in order and recorded with one turn), or the final
`Answer`. An agent may also be an `async def`: each of its runs gets its own event loop, in the
thread that runs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from toolreplay.errors import UsageError

__all__ = ["Agent", "Step", "Answer", "CallResult", "Conversation", "NamedAgent", "ToolCall", "import_callable",
           "load_agent", "load_agents"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """The agent asks for one tool call."""

    tool: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Answer:
    """The agent's final answer to the user."""

    text: str


@dataclass(frozen=True, slots=True)
class CallResult:
    """One earlier tool call and the response the agent saw (a refusal is a response too)."""

    tool: str
    args: dict[str, Any]
    response: dict[str, Any]
    turn: int = 0  # the model turn (from 0) that asked for the call


@dataclass(frozen=True, slots=True)
class Conversation:
    """What the agent knows at its turn: the question, the calls so far, the tools it may call."""

    question: str
    calls: tuple[CallResult, ...] = ()
    tools: tuple[str, ...] = ()


Step: TypeAlias = ToolCall | list[ToolCall] | tuple[ToolCall, ...] | Answer
Agent: TypeAlias = Callable[[Conversation], Step | Awaitable[Step]]


@dataclass(frozen=True, slots=True)
class NamedAgent:
    """An agent with the name the report shows and the MODULE:CALLABLE it was loaded from."""

    name: str
    spec: str
    agent: Agent


def import_callable(spec: str, kind: str = "agent") -> Callable[..., Any]:
    """Import MODULE:CALLABLE (an agent, a scorer, a tools factory); any failure is a UsageError."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"{kind} must be MODULE:CALLABLE, got {spec!r}")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:  # a user's module can fail in any way while importing
        raise UsageError(f"cannot import {kind} {spec!r}: {type(exc).__name__}: {exc}") from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise UsageError(f"cannot import {kind} {spec!r}: no attribute {part!r}")
        value = getattr(value, part)
    if not callable(value):
        raise UsageError(f"{kind} {spec!r} is not callable")
    function: Callable[..., Any] = value
    return function


def load_agent(spec: str) -> Agent:
    """Import MODULE:CALLABLE and check it is callable; any failure is a UsageError."""
    agent: Agent = import_callable(spec, "agent")
    return agent


def load_agents(specs: list[str]) -> list[NamedAgent]:
    """Load each agent once; names are the callable's name, or the full spec where two names clash."""
    if len(set(specs)) != len(specs):
        duplicate = next(spec for spec in specs if specs.count(spec) > 1)
        raise UsageError(f"agent {duplicate!r} given twice")
    short = [spec.partition(":")[2] for spec in specs]
    named = []
    for spec, name in zip(specs, short, strict=True):
        agent = load_agent(spec)
        named.append(NamedAgent(name if short.count(name) == 1 else spec, spec, agent))
    return named
