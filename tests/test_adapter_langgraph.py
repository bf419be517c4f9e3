"""The LangGraph adapter against the real LangGraph (a ToolNode in a graph, GenericFakeChatModel scripting the
model, an in-memory checkpointer for the interrupts): the behaviour table, sync and async."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import unittest
from typing import Any

from tests.adapter_table import STEPS, TOOLS_SAW, AdapterCase, Tools, check_record, policy
from tests.support import integration
from toolreplay.guard import SessionRecorder

HAVE = importlib.util.find_spec("langgraph") is not None and importlib.util.find_spec("langchain_core") is not None
REASON = "langgraph / langchain-core are not installed (.ci/install.d/60-frameworks.sh installs them)"


def build_graph(tools: Tools, guard: Any) -> Any:
    """model -> tools -> model ..., the model a GenericFakeChatModel playing the table's script."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    script = [AIMessage(content="", tool_calls=[{"name": step.tool, "args": dict(step.args), "id": step.call_id}])
              for step in STEPS] + [AIMessage(content="done")]
    model = GenericFakeChatModel(messages=iter(script))
    functions = [tools.get_order, tools.cancel_order, tools.refund, tools.write_note]
    node_options = {} if guard is None else {"wrap_tool_call": guard.wrap_tool_call,
                                             "awrap_tool_call": guard.awrap_tool_call}
    tool_node = ToolNode([StructuredTool.from_function(f) for f in functions], **node_options)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", tool_node)
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def run_table(graph: Any, use_async: bool = False) -> tuple[list[Any], list[str]]:
    """Run to the end, resuming each interrupt with the table's answer; the final messages and who was asked."""
    from langgraph.types import Command

    config = {"configurable": {"thread_id": "t"}}

    def invoke(value: Any) -> dict[str, Any]:
        if use_async:
            return asyncio.run(graph.ainvoke(value, config))  # type: ignore[no-any-return]
        return graph.invoke(value, config)  # type: ignore[no-any-return]

    state = invoke({"messages": [("user", "go")]})
    asked = []
    while state.get("__interrupt__"):
        (pause,) = state["__interrupt__"]
        call_id = pause.value["tool_call_id"]
        asked.append(call_id)
        answer = next(step.answer for step in STEPS if step.call_id == call_id and step.answer is not None)
        state = invoke(Command(resume=answer))
    return state["messages"], asked


def model_got(messages: list[Any]) -> list[tuple[str, str, Any]]:
    from langchain_core.messages import ToolMessage

    return [(m.tool_call_id, m.status, m.content) for m in messages if isinstance(m, ToolMessage)]


def expected_messages() -> list[tuple[str, str, Any]]:
    expected = []
    for step in STEPS:
        if step.response.get("ok") is False:
            expected.append((step.call_id, "error", step.response["error"]))
        else:
            expected.append((step.call_id, "success", json.dumps(step.response)))
    return expected


@integration
class LangGraphAdapterTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def check_table(self, use_async: bool) -> None:
        from toolreplay.adapters.langgraph import LangGraphGuard

        tools = Tools()
        path = os.path.join(self.tmp, "session.jsonl")
        with SessionRecorder.open(path, sealed=True) as recorder:
            guard = LangGraphGuard(policy(), recorder=recorder)
            messages, asked = run_table(build_graph(tools, guard), use_async)
        self.assertEqual(messages[-1].content, "done")
        self.assertEqual(tools.saw, TOOLS_SAW)
        self.assertEqual(asked, ["call_4", "call_5"])
        self.assertEqual(model_got(messages), expected_messages())
        check_record(self, path, self.tmp)

    def test_behaviour_table(self) -> None:
        self.check_table(use_async=False)

    def test_behaviour_table_async(self) -> None:
        self.check_table(use_async=True)

    def test_confirm_callback_when_interrupts_are_off(self) -> None:
        from toolreplay.adapters.langgraph import LangGraphGuard

        questions = []

        def confirm(tool: str, args: dict[str, Any]) -> bool:
            questions.append((tool, args))
            return bool(args["order_id"] == 1)

        tools = Tools()
        messages, asked = run_table(build_graph(tools, LangGraphGuard(policy(), confirm=confirm, interrupts=False)))
        self.assertEqual(asked, [])
        self.assertEqual(questions, [("cancel_order", {"order_id": 1}), ("cancel_order", {"order_id": 2})])
        self.assertEqual(tools.saw, TOOLS_SAW)
        self.assertEqual(model_got(messages), expected_messages())

    def test_a_tool_that_raises_is_an_error_message_on_record(self) -> None:
        from langchain_core.tools import StructuredTool
        from langgraph.prebuilt.tool_node import ToolCallRequest

        from toolreplay.adapters.langgraph import LangGraphGuard
        from toolreplay.policy.model import Policy

        def lookup(order_id: int) -> dict[str, Any]:
            """Look an order up."""
            raise ValueError("database is down")

        tool = StructuredTool.from_function(lookup)
        path = os.path.join(self.tmp, "session.jsonl")
        with SessionRecorder.open(path) as recorder:
            guard = LangGraphGuard(Policy("a", frozenset({"lookup"})), recorder=recorder)
            call = {"name": "lookup", "args": {"order_id": 1}, "id": "c1", "type": "tool_call"}
            request = ToolCallRequest(tool_call=call, tool=tool, state={}, runtime=None)  # type: ignore[arg-type]
            message = guard.wrap_tool_call(request, lambda r: tool.invoke(r.tool_call))
        error = {"ok": False, "error": "ValueError: database is down"}
        self.assertEqual((message.status, json.loads(message.content), message.tool_call_id), ("error", error, "c1"))
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(json.loads(handle.read())["response"], error)

    def test_without_the_guard_every_call_runs(self) -> None:
        """The table's script itself: unguarded, the forbidden and rule-breaking calls reach the tools."""
        tools = Tools()
        messages, asked = run_table(build_graph(tools, None))
        self.assertEqual((asked, len(tools.saw), messages[-1].content), ([], 8, "done"))


@integration
class LangGraphToolInterruptTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_a_tool_that_interrupts_for_a_person_pauses_the_graph(self) -> None:
        """get_order is a read the policy allows outright; the tool itself asks a person with LangGraph's
        `interrupt`: the graph pauses (the guard does not take the interrupt for the tool's failure), and on
        resume the tool runs again: the paused attempt is on record as cancelled, then the call that ran."""
        for use_async in (False, True):
            with self.subTest(use_async=use_async):
                self.check_a_tool_interrupt(use_async)

    def check_a_tool_interrupt(self, use_async: bool) -> None:
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.tools import StructuredTool
        from langgraph.checkpoint.memory import InMemorySaver
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition
        from langgraph.types import Command, interrupt

        from toolreplay.adapters.langgraph import LangGraphGuard

        ran: list[int] = []

        def get_order(order_id: int) -> dict[str, Any]:
            """Look up an order, once a person says yes."""
            if interrupt({"question": f"show order {order_id}?"}) is not True:
                return {"ok": False, "error": "the person said no"}
            ran.append(order_id)
            return {"ok": True, "order_id": order_id}

        path = os.path.join(self.tmp, f"interrupt-{use_async}.jsonl")
        model = GenericFakeChatModel(messages=iter([
            AIMessage(content="", tool_calls=[{"name": "get_order", "args": {"order_id": 1}, "id": "c1"}]),
            AIMessage(content="done")]))
        with SessionRecorder.open(path, sealed=True) as recorder:
            guard = LangGraphGuard(policy(), recorder=recorder)
            node = ToolNode([StructuredTool.from_function(get_order)], wrap_tool_call=guard.wrap_tool_call,
                            awrap_tool_call=guard.awrap_tool_call)
            graph = StateGraph(MessagesState)
            graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
            graph.add_node("tools", node)
            graph.add_edge(START, "agent")
            graph.add_conditional_edges("agent", tools_condition, ["tools", END])
            graph.add_edge("tools", "agent")
            app = graph.compile(checkpointer=InMemorySaver())
            config = {"configurable": {"thread_id": "t"}}

            def invoke(value: Any) -> Any:
                return asyncio.run(app.ainvoke(value, config)) if use_async else app.invoke(value, config)

            state = invoke({"messages": [("user", "go")]})
            pauses = [pause.value for pause in state.get("__interrupt__", ())]
            self.assertEqual((pauses, ran), ([{"question": "show order 1?"}], []))
            state = invoke(Command(resume=True))
        self.assertEqual((ran, model_got(state["messages"])),
                         ([1], [("c1", "success", json.dumps({"ok": True, "order_id": 1}))]))
        with open(path, encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle]
        paused = "cancelled: paused: the tool interrupted the graph to ask a person; it runs again on resume"
        self.assertEqual([(line["meta"]["outcome"], line["response"]) for line in lines],
                         [("cancelled", {"ok": False, "error": paused}), ("ran", {"ok": True, "order_id": 1})])


@integration
class LangGraphOldImportPathTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_the_import_path_of_0_6_names_the_same_guard(self) -> None:
        from toolreplay.adapters.langgraph import LangGraphGuard
        from toolreplay.guard.adapters.langgraph import LangGraphGuard as old

        self.assertIs(old, LangGraphGuard)


if __name__ == "__main__":
    unittest.main()
