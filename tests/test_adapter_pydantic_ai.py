"""The pydantic-ai adapter against the real pydantic-ai (its FunctionModel scripts the model): the behaviour table."""

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

HAVE = importlib.util.find_spec("pydantic_ai") is not None
REASON = "pydantic-ai-slim is not installed (.ci/install.d/60-frameworks.sh installs it)"


def run_table(tools: Tools, guard: Any) -> tuple[Any, list[str]]:
    """Run the scripted agent to the end, answering each approval request from the table."""
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(message, ModelResponse) for message in messages)
        if turn == len(STEPS):
            return ModelResponse(parts=[TextPart("done")])
        step = STEPS[turn]
        return ModelResponse(parts=[ToolCallPart(step.tool, dict(step.args), tool_call_id=step.call_id)])

    agent = Agent(FunctionModel(model), tools=[tools.get_order, tools.cancel_order, tools.refund, tools.write_note],
                  capabilities=[guard], output_type=[str, DeferredToolRequests])
    result = asyncio.run(agent.run("go"))
    asked = []
    while isinstance(result.output, DeferredToolRequests):
        approvals = {}
        for call in result.output.approvals:
            asked.append(call.tool_call_id)
            approvals[call.tool_call_id] = next(step.answer for step in STEPS
                                                if step.call_id == call.tool_call_id and step.answer is not None)
        result = asyncio.run(agent.run(message_history=result.all_messages(),
                                       deferred_tool_results=DeferredToolResults(approvals=approvals)))
    return result, asked


def model_got(result: Any) -> list[tuple[str, str, Any]]:
    from pydantic_ai.messages import ToolReturnPart

    return [(part.tool_call_id, part.outcome, part.content) for message in result.all_messages()
            for part in message.parts if isinstance(part, ToolReturnPart)]


@integration
class PydanticAIAdapterTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_behaviour_table(self) -> None:
        from toolreplay.adapters.pydantic_ai import PydanticAIGuard

        tools = Tools()
        path = os.path.join(self.tmp, "session.jsonl")
        with SessionRecorder.open(path, sealed=True) as recorder:
            guard = PydanticAIGuard(policy(), recorder=recorder)
            result, asked = run_table(tools, guard)
        self.assertEqual(result.output, "done")
        self.assertEqual(tools.saw, TOOLS_SAW)
        self.assertEqual(asked, ["call_4", "call_5"])
        expected = []
        for step in STEPS:
            if step.response.get("ok") is False:
                message = "The tool call was denied." if step.answer is False else step.response["error"]
                expected.append((step.call_id, "denied", message))
            else:
                expected.append((step.call_id, "success", step.response))
        self.assertEqual(model_got(result), expected)
        check_record(self, path, self.tmp)

    def test_confirm_callback_when_approvals_are_off(self) -> None:
        from toolreplay.adapters.pydantic_ai import PydanticAIGuard

        questions = []

        def confirm(tool: str, args: dict[str, Any]) -> bool:
            questions.append((tool, args))
            return bool(args["order_id"] == 1)

        tools = Tools()
        guard = PydanticAIGuard(policy(), confirm=confirm, approvals=False)
        result, asked = run_table(tools, guard)
        self.assertEqual(asked, [])
        self.assertEqual(questions, [("cancel_order", {"order_id": 1}), ("cancel_order", {"order_id": 2})])
        self.assertEqual(tools.saw, TOOLS_SAW)
        self.assertIn(("call_5", "denied", "confirmation declined"), model_got(result))

    def test_without_the_guard_every_call_runs(self) -> None:
        """The table's script itself: unguarded, the forbidden and rule-breaking calls reach the tools."""
        tools = Tools()
        result, asked = run_table(tools, _NoGuard())
        self.assertEqual(asked, [])
        self.assertEqual(len(tools.saw), 8)
        self.assertEqual(result.output, "done")


def _NoGuard() -> Any:
    from pydantic_ai.capabilities import AbstractCapability

    class NoGuard(AbstractCapability[Any]):
        pass

    return NoGuard()


def run_once(tools: Tools, guard: Any, toolset: str, answer: bool | None) -> tuple[list[str], Any]:
    """One get_order call (a read the policy allows outright) from a tool that needs approval by its own
    flag (`requires_approval=True`, or a toolset's `approval_required()`); `answer` answers the approval."""
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, Tool
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.toolsets import FunctionToolset

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if any(isinstance(message, ModelResponse) for message in messages):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("get_order", {"order_id": 1}, tool_call_id="call_a")])

    if toolset == "requires_approval":
        options: dict[str, Any] = {"tools": [Tool(tools.get_order, requires_approval=True)]}
    else:
        options = {"toolsets": [FunctionToolset([tools.get_order]).approval_required()]}
    agent = Agent(FunctionModel(model), capabilities=[guard], output_type=[str, DeferredToolRequests], **options)
    result = asyncio.run(agent.run("go"))
    asked = [call.tool_call_id for call in result.output.approvals] \
        if isinstance(result.output, DeferredToolRequests) else []
    if asked and answer is not None:
        result = asyncio.run(agent.run(message_history=result.all_messages(),
                                       deferred_tool_results=DeferredToolResults(approvals={"call_a": answer})))
    return asked, result


@integration
class PydanticAIOwnApprovalTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_a_tools_own_approval_flag_is_kept_as_an_ask(self) -> None:
        from toolreplay.adapters.pydantic_ai import PydanticAIGuard

        for toolset in ("requires_approval", "approval_required"):
            for answer in (True, False):
                with self.subTest(toolset=toolset, answer=answer):
                    tools = Tools()
                    path = os.path.join(self.tmp, f"{toolset}-{answer}.jsonl")
                    with SessionRecorder.open(path, sealed=True) as recorder:
                        asked, result = run_once(tools, PydanticAIGuard(policy(), recorder=recorder), toolset, answer)
                    self.assertEqual((asked, len(tools.saw), result.output), (["call_a"], int(answer), "done"))
                    with open(path, encoding="utf-8") as handle:
                        outcomes = [json.loads(line)["meta"]["outcome"] for line in handle]
                    self.assertEqual(outcomes, ["ran"] if answer else ["refused"])

    def test_without_framework_approvals_the_confirm_callback_is_asked(self) -> None:
        from toolreplay.adapters.pydantic_ai import PydanticAIGuard

        for answer in (True, False):
            with self.subTest(answer=answer):
                questions: list[str] = []
                tools = Tools()
                def confirm(tool: str, args: dict[str, Any], answer: bool = answer, asked: list[str] = questions) -> bool:
                    asked.append(tool)
                    return answer

                guard = PydanticAIGuard(policy(), approvals=False, confirm=confirm)
                asked, result = run_once(tools, guard, "approval_required", None)
                self.assertEqual((asked, questions, len(tools.saw), result.output),
                                 ([], ["get_order"], int(answer), "done"))


@integration
class PydanticAIOldImportPathTest(AdapterCase):
    HAVE, REASON = HAVE, REASON

    def test_the_import_path_of_0_6_names_the_same_guard(self) -> None:
        from toolreplay.adapters.pydantic_ai import PydanticAIGuard
        from toolreplay.guard.adapters.pydantic_ai import PydanticAIGuard as old

        self.assertIs(old, PydanticAIGuard)


if __name__ == "__main__":
    unittest.main()
