"""An evaluation suite from imported logs: yesterday's conversations as today's regression cases.

Per conversation with a user request and a final answer, a case (id: the conversation's position,
`0000`, `0001`, ..., as `import --split` names its sessions): the request is the question, the final
answer the expected answer, the recorded calls the expected tools (the calls of one turn as one group),
and the conversation's session is the case's own cassette (`cassettes/ID.jsonl`, answered
sequentially). `recorded.json` keeps what the recorded agent did, turn by turn, and its answer, for
`toolreplay.evaluation.recorded:recorded_agent`, which replays it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from toolreplay.importers import ImportedSession, ImportResult, Transcript

__all__ = ["CASSETTE_FOLDER", "RECORDING_FILE", "SUITE_FILE", "LogSuite", "suite_from_import"]

SUITE_FILE = "suite.json"
RECORDING_FILE = "recorded.json"
CASSETTE_FOLDER = "cassettes"


@dataclass(frozen=True)
class LogSuite:
    """The files of a suite (path relative to its folder, and its lines), and what was left out."""

    files: tuple[tuple[str, tuple[str, ...]], ...]
    cases: int
    longest: int  # the most calls of one case: `eval --max-steps` must allow them
    skipped: tuple[str, ...]  # one line per reason, naming the conversations


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _encodable(*texts: str) -> bool:
    try:
        for text in texts:
            text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _grouped(session: ImportedSession, turns: tuple[int, ...]) -> list[list[dict[str, Any]]]:
    """The session's calls, one list per turn."""
    groups: list[list[dict[str, Any]]] = []
    last = None
    for call, turn in zip(session.calls, turns, strict=True):
        if turn != last:
            groups.append([])
            last = turn
        groups[-1].append({"tool": call.tool, "args": call.args})
    return groups


def _case_lines(case_id: str, question: str, answer: str, groups: list[list[dict[str, Any]]],
                last: bool) -> Iterator[str]:
    yield "    {\n"
    yield f'      "id": {_dumps(case_id)},\n'
    yield f'      "question": {_dumps(question)},\n'
    yield f'      "expected_answer": {_dumps(answer)},\n'
    if groups:
        yield '      "expected_tools": [\n'
        items = [_dumps(group[0] if len(group) == 1 else group) for group in groups]
        yield ",\n".join(f"        {item}" for item in items) + "\n"
        yield "      ],\n"
    else:
        yield '      "expected_tools": [],\n'
    cassette = {"cassette": f"{CASSETTE_FOLDER}/{case_id}.jsonl", "responses": "sequential"}
    yield f'      "tools": {_dumps(cassette)}\n'
    yield "    }\n" if last else "    },\n"


def suite_from_import(result: ImportResult, transcripts: Sequence[Transcript]) -> LogSuite:
    """The suite of an import's conversations that have a request and an answer (`transcripts` from
    `import_file(..., transcripts=...)`, one per session)."""
    no_request: list[int] = []
    no_answer: list[int] = []
    bad_text: list[int] = []
    kept: list[tuple[str, Transcript, ImportedSession]] = []
    for session, transcript in zip(result.sessions, transcripts, strict=True):
        if transcript.request is None:
            no_request.append(session.position)
        elif transcript.answer is None:
            no_answer.append(session.position)
        elif not _encodable(transcript.request, transcript.answer):
            bad_text.append(session.position)
        else:
            kept.append((f"{session.position:04d}", transcript, session))
    skipped = [f"{_positions(found)}: {reason}; not in the suite" for found, reason in (
        (no_request, "no user request (no user message with text)"),
        (no_answer, "no final answer (no assistant text after the last tool call)"),
        (bad_text, "the request or answer is not valid Unicode (a lone surrogate)"),
    ) if found]
    suite = ["{\n", '  "cases": [\n']
    recording = ["{\n", '  "cases": {\n']
    files: list[tuple[str, tuple[str, ...]]] = []
    for number, (case_id, transcript, session) in enumerate(kept):
        assert transcript.request is not None and transcript.answer is not None
        groups = _grouped(session, transcript.turns)
        last = number == len(kept) - 1
        suite.extend(_case_lines(case_id, transcript.request, transcript.answer, groups, last))
        played = _dumps({"turns": groups, "answer": transcript.answer})
        recording.append(f"    {_dumps(case_id)}: {played}{'' if last else ','}\n")
        files.append((f"{CASSETTE_FOLDER}/{case_id}.jsonl", tuple(session.lines())))
    suite.extend(["  ]\n", "}\n"])
    recording.extend(["  }\n", "}\n"])
    if kept:
        files[:0] = [(SUITE_FILE, tuple(suite)), (RECORDING_FILE, tuple(recording))]
    longest = max((len(session.calls) for _, _, session in kept), default=0)
    return LogSuite(tuple(files), len(kept), longest, tuple(skipped))


def _positions(found: list[int]) -> str:
    noun = "conversation" if len(found) == 1 else "conversations"
    return f"{noun} {', '.join(str(position) for position in found)}"
