"""Import of OpenHands event streams (`openhands`): V0 actions and observations, the agent SDK's events.

The events take the shapes of real ones: V0 as OpenHands' own tests/runtime/trajs/*.json hold them
(`tool_call_metadata` with the model's whole `model_response`, `cause`, `success`), the SDK's as its
tests/sdk/conversation/goal/fixtures/events.jsonl (`tool_call`, `llm_response_id`, `action_id`,
`observation.is_error`); both files are import fixtures (tests/fixtures/import/openhands).
"""

from __future__ import annotations

import json
import unittest
from typing import Any

from tests.test_importers_meta import _lines, _run, _run_split


def _action(event_id: int, call_id: str, response_id: str, tool: str, sent: str, timestamp: str,
            **more: Any) -> dict[str, Any]:
    """A V0 action the model asked for: its `model_response` holds the arguments it sent."""
    calls = more.pop("calls", [{"id": call_id, "type": "function", "function": {"name": tool, "arguments": sent}}])
    return {"id": event_id, "timestamp": timestamp, "source": "agent", "message": "", "action": "run",
            "tool_call_metadata": {"function_name": tool, "tool_call_id": call_id, "model_response": {
                "id": response_id, "object": "chat.completion", "choices": [{"index": 0, "message": {
                    "role": "assistant", "content": None, "tool_calls": calls}}]},
                "total_calls_in_response": len(calls)},
            "args": more.pop("args", {"command": "ls", "is_input": False, "thought": ""}), **more}


def _observation(event_id: int, cause: int, content: str, **more: Any) -> dict[str, Any]:
    return {"id": event_id, "timestamp": "2025-01-27T23:16:57.600730", "source": "agent", "message": "",
            "cause": cause, "observation": more.pop("observation", "run"), "content": content, **more}


USER = {"id": 0, "timestamp": "2025-01-27T23:16:50.239610", "source": "user", "message": "Tidy up",
        "action": "message", "args": {"content": "Tidy up", "image_urls": None, "wait_for_response": False}}


def _record(index: int, tool: str, args: str, response: str, meta: str) -> str:
    return f'{{"index": {index}, "tool": "{tool}", "args": {args}, "response": {response}, "meta": {meta}}}\n'


class V0Test(unittest.TestCase):
    def test_calls_arguments_replies_errors_and_meta(self) -> None:
        both = [{"id": "toolu_a", "type": "function", "function": {"name": "execute_bash",
                                                                    "arguments": '{"command": "ls"}'}},
                {"id": "toolu_b", "type": "function", "function": {"name": "execute_bash",
                                                                    "arguments": '{"command": "pwd"}'}}]
        events = [
            USER,
            # Two calls of one model response: one turn; the model's own arguments, not OpenHands' `args`.
            _action(1, "toolu_a", "chatcmpl-1", "execute_bash", "", "2025-01-27T23:16:54.105108+01:00", calls=both),
            _action(2, "toolu_b", "chatcmpl-1", "execute_bash", "", "2025-01-27T23:16:54.105108", calls=both),
            # Answered in the other order; the second observation names its call only by `cause`.
            _observation(3, 2, "/workspace", success=False),
            _observation(4, 1, "a.txt", tool_call_metadata={"function_name": "execute_bash", "tool_call_id": "toolu_a"}),
            {"id": 5, "timestamp": "2025-01-27T23:16:58", "source": "agent", "message": "Done?", "action": "message",
             "args": {"content": "Done?", "image_urls": None, "wait_for_response": True}},
            # A response without the call's id: the event's `args` are the arguments.
            _action(6, "toolu_c", "chatcmpl-2", "str_replace_editor", "", "2025-01-27T23:17:00", calls=[],
                    args={"path": "/workspace/a.txt"}),
            _observation(7, 6, "ERROR: no such file", observation="error"),
            _action(8, "toolu_d", "chatcmpl-3", "execute_bash", '{"command": "rm a.txt"}', "2025-01-27T23:17:01"),
            _observation(9, 8, "Action has been rejected by the user! Reason: no", observation="user_rejected"),
            # Observations that answer no call: a state change, a cause that is not a call.
            {"id": 10, "timestamp": "2025-01-27T23:17:02", "source": "environment", "message": "",
             "observation": "agent_state_changed", "content": "", "extras": {"agent_state": "finished"}},
            _observation(11, 0, "recalled")]
        self.assertEqual(
            _run("openhands", json.dumps(events).encode()),
            (0,
             _record(0, "execute_bash", '{"command": "ls"}', '{"text": "a.txt"}',
                     '{"ts": "2025-01-27T22:16:54.105108Z", "call_id": "toolu_a", "turn": 0}')
             + _record(1, "execute_bash", '{"command": "pwd"}', '{"error": true, "text": "/workspace"}',
                       '{"call_id": "toolu_b", "turn": 0}')
             + _record(2, "str_replace_editor", '{"path": "/workspace/a.txt"}',
                       '{"error": true, "text": "ERROR: no such file"}', '{"call_id": "toolu_c", "turn": 2}')
             + _record(3, "execute_bash", '{"command": "rm a.txt"}',
                       '{"error": true, "text": "Action has been rejected by the user! Reason: no"}',
                       '{"call_id": "toolu_d", "turn": 3}'),
             ""))

    def test_an_evaluation_output_is_one_conversation_per_instance(self) -> None:
        history = [USER, _action(1, "toolu_a", "chatcmpl-1", "execute_bash", '{"command": "ls"}', "2025-01-27T23:16:54"),
                   _observation(2, 1, "a.txt")]
        code, sessions, err = _run_split("auto", _lines({"instance_id": "django-1", "history": history},
                                                        {"instance_id": "django-2", "history": history[:1]}))
        self.assertEqual((code, err), (0, "detected format: openhands\n"))
        self.assertEqual(sessions, [_record(0, "execute_bash", '{"command": "ls"}', '{"text": "a.txt"}',
                                            '{"call_id": "toolu_a", "turn": 0}'), ""])


def _sdk_action(event_id: str, call_id: str, response_id: str, **more: Any) -> dict[str, Any]:
    return {"id": event_id, "timestamp": "2026-06-16T05:39:48.701247", "source": "agent", "thought": [],
            "action": {"command": "ls", "is_input": False, "kind": "TerminalAction"}, "tool_name": "terminal",
            "tool_call_id": call_id, "llm_response_id": response_id, "kind": "ActionEvent", **more}


class SdkTest(unittest.TestCase):
    def test_arguments_replies_errors_and_turns(self) -> None:
        events = [
            {"id": "m0", "timestamp": "2026-06-16T05:39:18", "source": "user", "kind": "MessageEvent",
             "llm_message": {"role": "user", "content": [{"type": "text", "text": "List files"}]}},
            # Without `tool_call`, the arguments are the action without its `kind`.
            _sdk_action("a1", "call_1", "resp_1"),
            _sdk_action("a2", "call_2", "resp_1", tool_call={"id": "call_2", "name": "terminal",
                                                               "arguments": '{"command": "pwd"}'}),
            {"id": "o2", "source": "environment", "tool_name": "terminal", "action_id": "a2", "kind": "ObservationEvent",
             "observation": {"content": [{"type": "text", "text": "/w"}], "is_error": False}},
            {"id": "o1", "source": "environment", "tool_name": "terminal", "tool_call_id": "call_1",
             "kind": "ObservationEvent", "observation": {"content": "a.txt", "kind": "TerminalObservation"}},
            {"id": "m1", "source": "agent", "kind": "MessageEvent", "llm_response_id": "resp_2",
             "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "Now deleting."}]}},
            _sdk_action("a3", "call_3", "resp_3", timestamp="2026-06-16T05:40:00+00:00"),
            {"id": "e3", "source": "agent", "tool_name": "terminal", "tool_call_id": "call_3", "kind": "AgentErrorEvent",
             "error": "terminal crashed"}]
        self.assertEqual(
            _run("openhands", _lines(*events)),
            (0,
             _record(0, "terminal", '{"command": "ls", "is_input": false}', '{"text": "a.txt"}',
                     '{"call_id": "call_1", "turn": 0}')
             + _record(1, "terminal", '{"command": "pwd"}', '{"text": "/w"}', '{"call_id": "call_2", "turn": 0}')
             + _record(2, "terminal", '{"command": "ls", "is_input": false}', '{"error": true, "text": "terminal crashed"}',
                       '{"ts": "2026-06-16T05:40:00Z", "call_id": "call_3", "turn": 2}'),
             ""))


class MalformedTest(unittest.TestCase):
    def test_one_error_line_with_the_position(self) -> None:
        for events, message in (
                ([USER, 3], "conversation 0, message 1: not an OpenHands event (an object)"),
                ([USER, dict(_action(1, "c", "r", "x", "{}", "t"), tool_call_metadata={"tool_call_id": "c"})],
                 'conversation 0, message 1: "tool_call_metadata" must be an object with a "function_name" string'),
                ([USER, dict(_action(1, "c", "r", "x", "{}", "t"), tool_call_metadata="x")],
                 'conversation 0, message 1: "tool_call_metadata" must be an object with a "function_name" string'),
                ([USER, _sdk_action("a", "c", "r", tool_name=7)],
                 'conversation 0, message 1: an ActionEvent has no "tool_name" string')):
            with self.subTest(message=message):
                lines = "not a message object, unlike line 1" if events[1] == 3 else message  # the layout's word
                self.assertEqual(_run("openhands", _lines(*events)), (2, "", f"error: <stdin>:2: {lines}\n"))
                self.assertEqual(_run("openhands", json.dumps(events).encode()),
                                 (2, "", f"error: <stdin>: {message}\n"))


    def test_what_the_fuzz_found(self) -> None:
        # An observation kind that is not a string, and a model response whose tool call is not an object,
        # are data of another shape, not a traceback.
        odd_kind = [USER, _action(1, "c", "r", "x", '{"a": 1}', "2025-01-27T23:16:54"), _observation(2, 1, "ok", observation=[{}])]
        self.assertEqual(_run("openhands", json.dumps(odd_kind).encode()), (0, _record(
            0, "x", '{"a": 1}', '{"text": "ok"}', '{"call_id": "c", "turn": 0}'), ""))
        odd_call = [USER, _action(1, "c", "r", "x", "", "2025-01-27T23:16:54", calls=["x", {"id": "c"}], args={"b": 2}),
                    _observation(2, 1, "ok")]
        self.assertEqual(_run("openhands", json.dumps(odd_call).encode()), (0, _record(
            0, "x", '{"b": 2}', '{"text": "ok"}', '{"call_id": "c", "turn": 0}'), ""))


if __name__ == "__main__":
    unittest.main()
