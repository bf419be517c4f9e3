"""The recorded agent: replays, case by case, what the agent of an imported log did.

`toolreplay eval DIR/suite.json --agent toolreplay.evaluation.recorded:recorded_agent` plays each case
of a suite written by `import --suite DIR`: the recorded calls turn by turn (the calls of one turn
together), then the recorded answer, read from `DIR/recorded.json` beside the suite. It knows its case
through the runner's `for_case(suite, case)` hook (by case id, since several conversations may ask the
same question), so it passes its own suite: the baseline a new agent is measured against, and a
check that the edits a person made to the suite still accept the recorded behaviour.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from typing import Any

from toolreplay.evaluation.agent import Answer, Conversation, Step, ToolCall
from toolreplay.evaluation.from_logs import RECORDING_FILE
from toolreplay.evaluation.suite import Case, Suite
from toolreplay.format.strictjson import json_type_name, read_json_file

__all__ = ["Recording", "RecordedAgent", "load_recording", "recorded_agent"]

Recording = dict[str, tuple[tuple[tuple[ToolCall, ...], ...], str]]  # case id -> (turns, answer)


def _turns(value: Any, where: str) -> tuple[tuple[ToolCall, ...], ...]:
    if not isinstance(value, list):
        raise ValueError(f"{where}.turns must be an array, not {json_type_name(value)}")
    turns = []
    for number, group in enumerate(value):
        if not isinstance(group, list) or not group:
            raise ValueError(f"{where}.turns[{number}] must be a non-empty array of calls")
        calls = []
        for member, call in enumerate(group):
            at = f"{where}.turns[{number}][{member}]"
            if (not isinstance(call, dict) or set(call) != {"tool", "args"} or not isinstance(call["tool"], str)
                    or not isinstance(call["args"], dict)):
                raise ValueError(f'{at} must be {{"tool": NAME, "args": OBJECT}}')
            calls.append(ToolCall(call["tool"], call["args"]))
        turns.append(tuple(calls))
    return tuple(turns)


def load_recording(path: str) -> Recording:
    """Read a `recorded.json` (strict JSON): per case id, the recorded turns and answer."""
    document = read_json_file(path)
    try:
        if not isinstance(document, dict) or set(document) != {"cases"} or not isinstance(document["cases"], dict):
            raise ValueError('must be {"cases": {CASE_ID: {"turns": [...], "answer": TEXT}}}')
        recording: Recording = {}
        for case_id, entry in document["cases"].items():
            where = f"cases.{case_id}"
            if not isinstance(entry, dict) or set(entry) != {"turns", "answer"}:
                raise ValueError(f'{where} must be {{"turns": [...], "answer": TEXT}}')
            if not isinstance(entry["answer"], str):
                raise ValueError(f"{where}.answer must be a string, not {json_type_name(entry['answer'])}")
            recording[case_id] = (_turns(entry["turns"], where), entry["answer"])
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return recording


class RecordedAgent:
    """An agent that replays the recording beside the suite; each run gets its case's through `for_case`."""

    __name__ = "recorded_agent"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recordings: dict[str, Recording] = {}

    def _recording(self, suite_path: str) -> Recording:
        path = os.path.join(os.path.dirname(suite_path), RECORDING_FILE)
        with self._lock:  # runs may start in several threads at once
            if path not in self._recordings:
                self._recordings[path] = load_recording(path)
            return self._recordings[path]

    def for_case(self, suite: Suite, case: Case) -> Callable[[Conversation], Step]:
        """The player of one case: its recorded turns, one per call, then its recorded answer."""
        recording = self._recording(suite.path)
        if case.id not in recording:
            raise KeyError(f"{RECORDING_FILE} has no case {json.dumps(case.id)}")
        turns, answer = recording[case.id]

        def play(conversation: Conversation) -> Step:
            turn = conversation.calls[-1].turn + 1 if conversation.calls else 0
            if turn < len(turns):
                return list(turns[turn])
            return Answer(answer)

        return play

    def __call__(self, conversation: Conversation) -> Step:
        """Outside `eval` there is no case to replay."""
        raise RuntimeError("the recorded agent replays a suite's recording: run it with toolreplay eval")


recorded_agent = RecordedAgent()
