"""Real trajectories (../shared/corpus/raw) import to exactly the corpus sessions (../shared/corpus/real).

The corpus sessions are format 1.0: the imported records equal them once their `meta` (the ids and
turns the raw files have; their times, local without a UTC offset, are not kept) is set aside.

The corpus names each session after its conversation: tau-bench `task{task_id}_trial{trial}_{position}`,
tau2 `{position:03d}_task{task_id}`, with task ids and trials read from the raw file itself. Every
imported session is also run through `replay`, which must accept it (exit 0 or 1, never 2).
"""

from __future__ import annotations

import json
import os
import tempfile
import unittest
from collections.abc import Callable
from typing import Any

from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.records import format_record

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared")
CORPUS = os.path.join(SHARED, "corpus")


def _tau1_name(conversation: dict[str, Any], position: int) -> str:
    return f"task{conversation['task_id']}_trial{conversation['trial']}_{position}.jsonl"


def _tau2_name(simulation: dict[str, Any], position: int) -> str:
    return f"{position:03d}_task{simulation['task_id']}.jsonl"


def _split_meta(session: bytes) -> tuple[bytes, list[Any]]:
    """A session's records without `meta` (as format 1.0 writes them), and each record's meta."""
    records = [json.loads(line) for line in session.splitlines()]
    lines = [format_record(r["index"], r["tool"], r["args"], r["response"]) + "\n" for r in records]
    return "".join(lines).encode("utf-8"), [r.get("meta") for r in records]


# (raw file, format, corpus folder, conversations of the raw file, corpus name of a conversation,
#  expected sessions, expected calls)
CASES: list[
    tuple[str, str, str, Callable[[Any], list[Any]], Callable[[dict[str, Any], int], str], int, int]
] = [
    (
        "tau-bench_gpt-4o-airline.json",
        "openai-chat",
        "tau1_gpt4o_airline",
        lambda doc: doc,
        _tau1_name,
        200,
        1164,
    ),
    (
        "tau2-bench_gpt-4.1-airline.json",
        "tau2",
        "tau2_gpt-4.1_airline_default_gpt-4.1_1trials",
        lambda doc: doc["simulations"],
        _tau2_name,
        20,
        148,
    ),
    (
        "tau2-bench_claude-sonnet-4-5-airline.json",
        "tau2",
        "tau2_claude-sonnet-4-5_airline_default_gpt4.1_1trials",
        lambda doc: doc["simulations"],
        _tau2_name,
        50,
        371,
    ),
]


@unittest.skipUnless(os.path.isdir(SHARED), "../shared (the real-data corpus) is absent")
class RealDataTest(unittest.TestCase):
    def test_raw_files_import_to_the_corpus_sessions(self) -> None:
        for raw, fmt, folder, conversations_of, name_of, sessions, calls in CASES:
            with self.subTest(raw=raw), tempfile.TemporaryDirectory() as tmp:
                raw_path = os.path.join(CORPUS, "raw", raw)
                target = os.path.join(tmp, "out")
                io = IO.memory()
                self.assertEqual(main(["import", fmt, raw_path, "--split", target], io), 0)
                self.assertEqual((io.out(), io.err()), ("", ""))
                with open(raw_path, encoding="utf-8") as handle:
                    conversations = conversations_of(json.load(handle))
                written = sorted(os.listdir(target))
                self.assertEqual(written, [f"{position:04d}.jsonl" for position in range(sessions)])
                expected_dir = os.path.join(CORPUS, "real", folder)
                self.assertEqual(len(os.listdir(expected_dir)), sessions)
                total = 0
                for position, conversation in enumerate(conversations):
                    with open(os.path.join(target, f"{position:04d}.jsonl"), "rb") as handle:
                        got = handle.read()
                    with open(os.path.join(expected_dir, name_of(conversation, position)), "rb") as handle:
                        records, metas = _split_meta(got)
                        self.assertEqual(records, handle.read(), f"{raw}: conversation {position}")
                    for meta in metas:  # every call has its id and was asked for in a model turn
                        self.assertEqual(sorted(meta), ["call_id", "turn"], f"{raw}: conversation {position}")
                    total += got.count(b"\n")
                    self._assert_replay_accepts(os.path.join(target, f"{position:04d}.jsonl"))
                self.assertEqual(total, calls)

    def test_auto_detects_the_raw_files(self) -> None:
        for raw, fmt, *_ in CASES:
            with self.subTest(raw=raw), tempfile.TemporaryDirectory() as tmp:
                io = IO.memory()
                target = os.path.join(tmp, "out")
                self.assertEqual(
                    main(["import", "auto", os.path.join(CORPUS, "raw", raw), "--split", target], io), 0
                )
                self.assertEqual(io.err(), f"detected format: {fmt}\n")

    def _assert_replay_accepts(self, path: str) -> None:
        io = IO.memory()
        code = main(["replay", path], io)
        self.assertIn(code, (0, 1), f"{path}: {io.err()}")
        self.assertEqual(io.err(), "")


if __name__ == "__main__":
    unittest.main()
