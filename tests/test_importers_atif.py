"""Import of ATIF trajectories (`atif`): the steps' `tool_calls` and `observation.results`.

Trajectories take the shape of ATIF's RFC (Harbor docs/rfcs/0001-trajectory-format.md, whose example
is the fixture tests/fixtures/import/atif/rfc-example.json) and of Harbor's pydantic models
(`Step`, `ToolCall`, `ObservationResult` with `source_call_id`, `content` as text or content parts,
`subagent_trajectory_ref`).
"""

from __future__ import annotations

import json
import unittest
from typing import Any

from tests.test_importers_meta import _lines, _run, _run_split


def _trajectory(*steps: dict[str, Any], session: str = "s-1") -> dict[str, Any]:
    return {"schema_version": "ATIF-v1.6", "session_id": session,
            "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "openai/gpt-5"}, "steps": list(steps)}


def _step(step_id: int, source: str, *calls: tuple[str, str, Any], timestamp: str | None = None,
          results: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": step_id, "source": source, "message": ""}
    if timestamp is not None:
        step["timestamp"] = timestamp
    if calls:
        step["tool_calls"] = [{"tool_call_id": i, "function_name": n, "arguments": a} for i, n, a in calls]
    if results is not None:
        step["observation"] = {"results": results}
    return step


class AtifTest(unittest.TestCase):
    def test_calls_replies_times_and_turns(self) -> None:
        data = json.dumps(_trajectory(
            _step(1, "user", timestamp="2025-10-11T10:30:00Z"),
            _step(2, "agent", ("c1", "search", {"q": "GOOGL"}), ("c2", "search", '{"q": "MSFT"}'),
                  timestamp="2025-10-11T12:30:02.250+02:00",
                  results=[{"source_call_id": "c2", "content": [{"type": "text", "text": "412"}]},
                           {"source_call_id": "c1", "content": '{"price": 185.35}'}]),
            _step(3, "agent"),  # a turn without calls still counts
            _step(4, "system", ("c3", "reset", {}), results=[{"source_call_id": "c3", "content": None}]),
            _step(5, "agent", ("c4", "finish", None)),
            _step(6, "system", results=[{"source_call_id": "c4", "content": "done"}])), indent=2).encode()
        self.assertEqual(_run("atif", data), (
            0,
            '{"index": 0, "tool": "search", "args": {"q": "GOOGL"}, "response": {"price": 185.35}, "meta": {"ts": '
            '"2025-10-11T10:30:02.250Z", "call_id": "c1", "turn": 0}}\n'
            '{"index": 1, "tool": "search", "args": {"q": "MSFT"}, "response": {"text": "412"}, "meta": {"ts": '
            '"2025-10-11T10:30:02.250Z", "call_id": "c2", "turn": 0}}\n'
            '{"index": 2, "tool": "reset", "args": {}, "response": {"text": ""}, "meta": {"call_id": "c3"}}\n'
            '{"index": 3, "tool": "finish", "args": {}, "response": {"text": "done"}, "meta": {"call_id": "c4", '
            '"turn": 2}}\n',
            ""))

    def test_many_trajectories_are_many_conversations(self) -> None:
        one = _trajectory(_step(1, "agent", ("c1", "ls", {}), results=[{"source_call_id": "c1", "content": "a"}]))
        for data in (_lines(one, one), json.dumps([one, one]).encode()):
            code, sessions, err = _run_split("auto", data)
            self.assertEqual((code, err, len(sessions)), (0, "detected format: atif\n", 2))

    def test_a_trajectory_without_calls_is_detected_and_empty(self) -> None:
        self.assertEqual(_run("auto", json.dumps(_trajectory(_step(1, "user"))).encode()),
                         (0, "", "detected format: atif\n"))


class MalformedTest(unittest.TestCase):
    def test_one_error_line_with_the_position(self) -> None:
        for step, message in (
                ("step", "an ATIF step must be an object"),
                ({"step_id": 1, "source": "agent", "tool_calls": {}}, '"tool_calls" must be an array'),
                (_step(1, "agent", ("c1", "", {})), 'a tool call must be an object with a "function_name" string'),
                ({"step_id": 1, "source": "agent", "tool_calls": ["ls"]},
                 'a tool call must be an object with a "function_name" string'),
                ({"step_id": 1, "source": "agent", "observation": {"results": {}}},
                 '"observation" must be an object with a "results" array'),
                ({"step_id": 1, "source": "agent", "observation": {"results": ["x"]}},
                 "an observation result must be an object")):
            with self.subTest(message=message):
                data = _lines(_trajectory(_step(0, "user"), step), _trajectory())
                self.assertEqual(_run("atif", data),
                                 (2, "", f"error: <stdin>:1: conversation 0, message 1: {message}\n"))
        self.assertEqual(_run("atif", b'{"schema_version": "ATIF-v1.6", "steps": 3}'),
                         (2, "", "error: <stdin>: conversation 0: \"steps\" must be an array of messages\n"))


if __name__ == "__main__":
    unittest.main()
