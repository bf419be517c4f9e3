"""What each framework adapter adds to one tool call, over the framework's own call path (recorder off).

    python benchmarks/adapters.py [--calls N]

For each framework installed (pydantic-ai, LangGraph, the OpenAI Agents SDK): the framework's own
path for one call of a small read tool (pydantic-ai: `FunctionToolset.call_tool`; LangGraph:
what ToolNode does with one call, `tool.invoke(tool_call)`; Agents SDK: `FunctionTool.on_invoke_tool`),
then the same path with the guard in front (`GuardedToolset`, `LangGraphGuard.wrap_tool_call`,
`OpenAIAgentsGuard.wrap`), every call with distinct arguments so no cache answers it. Rounds alternate
between the two (7 each), best round of each, microseconds per call; the difference is the adapter's
cost, against the target of 200 us (issue 30). The machine's load moves single figures: re-run before
believing a near miss.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from toolreplay.policy.model import Policy  # noqa: E402

POLICY = Policy("bench", frozenset({"get_order"}))
TARGET_US = 200.0


def get_order(order_id: int) -> dict[str, int]:
    """Look an order up."""
    return {"order_id": order_id, "status": 1}


ROUNDS = 7
_serial = itertools.count()  # every call of a run gets arguments never seen before: no cache answers it


def _compare(plain: Callable[[int], None], guarded: Callable[[int], None], calls: int) -> tuple[float, float]:
    """Best round of each, microseconds per call; the rounds alternate, so both see the same machine load."""
    best = [float("inf"), float("inf")]
    for _ in range(ROUNDS):
        for side, run in enumerate((plain, guarded)):
            start = time.perf_counter()
            run(calls)
            best[side] = min(best[side], time.perf_counter() - start)
    return best[0] / calls * 1e6, best[1] / calls * 1e6


def _sync(run: Callable[[int], Awaitable[None]]) -> Callable[[int], None]:
    return lambda n: asyncio.run(run(n))


def pydantic_ai(calls: int) -> tuple[float, float]:
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.toolsets import FunctionToolset
    from pydantic_ai.usage import RunUsage

    from toolreplay.adapters.pydantic_ai import GuardedToolset, PydanticAIGuard

    plain = FunctionToolset([get_order])
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="c")

    def measure(toolset: Any) -> Callable[[int], None]:
        async def run(n: int) -> None:
            tool = (await plain.get_tools(ctx))["get_order"]
            for i in itertools.islice(_serial, n):
                await toolset.call_tool("get_order", {"order_id": i}, ctx, tool)
        return _sync(run)

    guard = PydanticAIGuard(POLICY)
    figures = _compare(measure(plain), measure(GuardedToolset(plain, guard=guard)), calls)
    assert guard.gate.steps == ROUNDS * calls, guard.gate.steps  # every call went through the gate
    return figures


def langgraph(calls: int) -> tuple[float, float]:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from toolreplay.adapters.langgraph import LangGraphGuard

    tool = StructuredTool.from_function(get_order)

    def execute(request: Any) -> Any:  # what ToolNode does with a call: invoke the tool on it
        message = tool.invoke(request.tool_call)
        assert isinstance(message, ToolMessage)
        return message

    def request(i: int) -> Any:
        call = {"name": "get_order", "args": {"order_id": i}, "id": f"c{i}", "type": "tool_call"}
        return ToolCallRequest(tool_call=call, tool=tool, state={}, runtime=None)  # type: ignore[arg-type]

    def plain(n: int) -> None:
        for i in itertools.islice(_serial, n):
            execute(request(i))

    guard = LangGraphGuard(POLICY)

    def guarded(n: int) -> None:
        for i in itertools.islice(_serial, n):
            guard.wrap_tool_call(request(i), execute)

    figures = _compare(plain, guarded, calls)
    assert guard.gate.steps == ROUNDS * calls, guard.gate.steps
    return figures


def openai_agents(calls: int) -> tuple[float, float]:
    from agents import function_tool
    from agents.tool_context import ToolContext

    from toolreplay.adapters.openai_agents import OpenAIAgentsGuard

    plain = function_tool(get_order)
    guard = OpenAIAgentsGuard(POLICY)
    (guarded_tool,) = guard.wrap([plain])

    def measure(tool: Any) -> Callable[[int], None]:
        async def run(n: int) -> None:
            for i in itertools.islice(_serial, n):
                arguments = f'{{"order_id": {i}}}'
                context = ToolContext(context=None, tool_name="get_order", tool_call_id=f"c{i}",
                                      tool_arguments=arguments)
                await tool.on_invoke_tool(context, arguments)
        return _sync(run)

    figures = _compare(measure(plain), measure(guarded_tool), calls)
    assert guard.gate.steps == ROUNDS * calls, guard.gate.steps
    return figures


FRAMEWORKS: list[tuple[str, str, Callable[[int], tuple[float, float]]]] = [
    ("pydantic-ai", "pydantic_ai", pydantic_ai), ("langgraph", "langgraph", langgraph),
    ("openai-agents", "agents", openai_agents)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="tool calls per round (default 1000)")
    options = parser.parse_args()
    print(f"{'framework':<14} {'own path us':>12} {'guarded us':>11} {'added us':>9} {'target':>7}  result")
    failed = False
    for name, module, measure in FRAMEWORKS:
        if importlib.util.find_spec(module) is None:
            print(f"{name:<14} not installed")
            continue
        base, guarded = measure(options.calls)
        added = guarded - base
        failed = failed or added > TARGET_US
        print(f"{name:<14} {base:>12.1f} {guarded:>11.1f} {added:>9.1f} {TARGET_US:>7.0f}  "
              f"{'met' if added <= TARGET_US else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
