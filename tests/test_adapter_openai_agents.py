"""The OpenAI Agents SDK adapter against the real SDK (its testing.ScriptedModel plays the model): the behaviour
table."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import unittest
from typing import Any

from tests.adapter_table import TOOLS_SAW, AdapterCase, Tools, check_record, policy, steps
from tests.support import integration
from toolreplay.guard import SessionRecorder
from toolreplay.policy.model import Limits

HAVE = importlib.util.find_spec("agents") is not None
REASON = "openai-agents is not installed (.ci/install.d/60-frameworks.sh installs it)"
REJECTED = "Tool execution was not approved."


# The Agents SDK drops a tool call whose call_id it has seen (its own idempotency): it never redelivers one.
STEPS = steps(redelivers=False)


def run_table(tools: Tools, guard: Any) -> tuple[Any, list[str]]:
    """Run the scripted agent to the end, answering each approval request from the table."""
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    script = [[function_call(step.tool, dict(step.args), call_id=step.call_id)] for step in STEPS]
    model = ScriptedModel([*script, [assistant_message("done")]])
    functions = [function_tool(f) for f in (tools.get_order, tools.cancel_order, tools.refund, tools.write_note)]
    if guard is None:
        agent = Agent(name="shop", model=model, tools=list(functions))
    else:
        agent = Agent(name="shop", model=model, tools=list(guard.wrap(functions)), hooks=guard.hooks)
    config = RunConfig(tracing_disabled=True)
    result = asyncio.run(Runner.run(agent, "go", max_turns=20, run_config=config))
    asked = []
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            call_id = item.raw_item.call_id
            asked.append(call_id)
            answer = next(step.answer for step in STEPS if step.call_id == call_id and step.answer is not None)
            (state.approve if answer else state.reject)(item)
        result = asyncio.run(Runner.run(agent, state, max_turns=20, run_config=config))
    return result, asked


def model_got(result: Any) -> list[tuple[str, Any]]:
    return [(item.raw_item["call_id"], item.output) for item in result.new_items if item.type == "tool_call_output_item"]


@integration
class OpenAIAgentsAdapterTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_behaviour_table(self) -> None:
        from toolreplay.adapters.openai_agents import OpenAIAgentsGuard

        tools = Tools()
        path = os.path.join(self.tmp, "session.jsonl")
        with SessionRecorder.open(path, sealed=True) as recorder:
            guard = OpenAIAgentsGuard(policy(redelivers=False), recorder=recorder)
            result, asked = run_table(tools, guard)
        self.assertEqual(result.final_output, "done")
        self.assertEqual(tools.saw, TOOLS_SAW)
        self.assertEqual(asked, ["call_4", "call_5"])
        self.assertEqual(model_got(result), expected_outputs(REJECTED))
        check_record(self, path, self.tmp, redelivers=False)

    def test_a_restarted_host_does_not_run_a_recorded_write_again(self) -> None:
        """Idempotency through the SDK: a new guard on the same record answers a write it holds (any
        call_id), without asking a person and without running the tool."""
        from agents import Agent, RunConfig, Runner, function_tool
        from agents.testing import ScriptedModel, assistant_message, function_call

        from toolreplay.adapters.openai_agents import OpenAIAgentsGuard

        path = os.path.join(self.tmp, "session.jsonl")
        with SessionRecorder.open(path, sealed=True) as recorder:
            run_table(Tools(), OpenAIAgentsGuard(policy(redelivers=False), recorder=recorder))
        tools = Tools()
        with SessionRecorder.open(path, sealed=True) as recorder:
            # A continued record brings the steps back too: the table's step budget is spent, so lift it here.
            guard = OpenAIAgentsGuard(dataclasses.replace(policy(redelivers=False), limits=Limits()), recorder=recorder)
            model = ScriptedModel([[function_call("cancel_order", {"order_id": 1}, call_id="call_9")],
                                   [assistant_message("done")]])
            agent = Agent(name="shop", model=model, tools=guard.wrap([function_tool(tools.cancel_order)]),
                          hooks=guard.hooks)
            result = asyncio.run(Runner.run(agent, "again", run_config=RunConfig(tracing_disabled=True)))
        self.assertEqual((result.interruptions, tools.saw), ([], []))
        self.assertEqual(model_got(result), [("call_9", {"ok": True, "order_id": 1})])
        with open(path, encoding="utf-8") as handle:
            self.assertEqual(len(handle.readlines()), len(STEPS) + 1)

    def test_confirm_callback_when_approvals_are_off(self) -> None:
        from toolreplay.adapters.openai_agents import OpenAIAgentsGuard

        questions = []

        def confirm(tool: str, args: dict[str, Any]) -> bool:
            questions.append((tool, args))
            return bool(args["order_id"] == 1)

        tools = Tools()
        guard = OpenAIAgentsGuard(policy(redelivers=False), confirm=confirm, approvals=False)
        result, asked = run_table(tools, guard)
        self.assertEqual(asked, [])
        self.assertEqual(questions, [("cancel_order", {"order_id": 1}), ("cancel_order", {"order_id": 2})])
        self.assertEqual(tools.saw, TOOLS_SAW)
        self.assertEqual(model_got(result), expected_outputs("confirmation declined"))

    def test_a_tools_own_needs_approval_is_kept_as_an_ask(self) -> None:
        """get_order is a read the policy allows outright; its own needs_approval=True still interrupts the
        run (approve: it runs; reject: it does not, and the refusal is on record), and without SDK
        approvals the guard's confirm callback is asked."""
        from agents import Agent, RunConfig, Runner, function_tool
        from agents.testing import ScriptedModel, assistant_message, function_call

        from toolreplay.adapters.openai_agents import OpenAIAgentsGuard

        def needs(context: Any, params: dict[str, Any], call_id: str) -> Any:
            async def answer() -> bool:
                return bool(params["order_id"] == 2)
            return answer()

        config = RunConfig(tracing_disabled=True)
        for flag, order, approve in ((True, 1, True), (True, 1, False), (needs, 2, True), (needs, 1, None)):
            with self.subTest(flag=flag, order=order, approve=approve):
                tools = Tools()
                path = os.path.join(self.tmp, f"own-{order}-{approve}-{flag is True}.jsonl")
                with SessionRecorder.open(path, sealed=True) as recorder:
                    guard = OpenAIAgentsGuard(policy(redelivers=False), recorder=recorder)
                    model = ScriptedModel([[function_call("get_order", {"order_id": order}, call_id="call_a")],
                                           [assistant_message("done")]])
                    tool = function_tool(tools.get_order, needs_approval=flag)
                    agent = Agent(name="shop", model=model, tools=guard.wrap([tool]), hooks=guard.hooks)
                    result = asyncio.run(Runner.run(agent, "go", run_config=config))
                    asked = [item.raw_item.call_id for item in result.interruptions]
                    if approve is not None:
                        state = result.to_state()
                        for item in result.interruptions:
                            (state.approve if approve else state.reject)(item)
                        result = asyncio.run(Runner.run(agent, state, run_config=config))
                self.assertEqual(asked, [] if approve is None else ["call_a"])
                self.assertEqual(len(tools.saw), 0 if approve is False else 1)
                with open(path, encoding="utf-8") as handle:
                    outcomes = [json.loads(line)["meta"]["outcome"] for line in handle]
                self.assertEqual(outcomes, ["refused" if approve is False else "ran"])

        questions: list[str] = []
        tools = Tools()
        guard = OpenAIAgentsGuard(policy(redelivers=False), approvals=False,
                                  confirm=lambda tool, args: questions.append(tool) is None and False)
        model = ScriptedModel([[function_call("get_order", {"order_id": 1}, call_id="call_b")],
                               [assistant_message("done")]])
        agent = Agent(name="shop", model=model, tools=guard.wrap([function_tool(tools.get_order, needs_approval=True)]))
        result = asyncio.run(Runner.run(agent, "go", run_config=config))
        self.assertEqual((questions, tools.saw, model_got(result)),
                         (["get_order"], [], [("call_b", "confirmation declined")]))

    def test_without_the_guard_every_call_runs(self) -> None:
        """The table's script itself: unguarded, the forbidden and rule-breaking calls reach the tools."""
        tools = Tools()
        result, asked = run_table(tools, None)
        self.assertEqual((asked, len(tools.saw), result.final_output), ([], 7, "done"))


def expected_outputs(declined: str) -> list[tuple[str, Any]]:
    """A refusal is the tool's output text (the gate's reason); a result is the tool's own."""
    return [(step.call_id, (declined if step.answer is False else step.response["error"])
             if step.response.get("ok") is False else step.response) for step in STEPS]


@integration
class OpenAIAgentsOldImportPathTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_the_import_path_of_0_6_names_the_same_guard(self) -> None:
        from toolreplay.adapters.openai_agents import OpenAIAgentsGuard
        from toolreplay.guard.adapters.openai_agents import OpenAIAgentsGuard as old

        self.assertIs(old, OpenAIAgentsGuard)


if __name__ == "__main__":
    unittest.main()
