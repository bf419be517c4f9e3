"""The benchmark's session generator: deterministic, and its output is a valid session."""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import generate  # noqa: E402

from toolreplay.format.records import format_record, read_session  # noqa: E402


def _generate(count: int) -> bytes:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "session.jsonl")
        generate.write_session(count, path)
        with open(path, "rb") as handle:
            return handle.read()


class GenerateTest(unittest.TestCase):
    def test_same_count_gives_same_bytes(self) -> None:
        self.assertEqual(_generate(300), _generate(300))

    def test_smaller_count_gives_a_prefix(self) -> None:
        small, large = _generate(120), _generate(300)
        self.assertEqual(small.count(b"\n"), 120)
        self.assertTrue(large.startswith(small))

    def test_output_is_a_valid_session_of_read_and_write_tools(self) -> None:
        records = list(read_session(io.BytesIO(_generate(500)), "generated.jsonl"))
        self.assertEqual([record.index for record in records], list(range(500)))
        tools = {record.tool for record in records}
        self.assertTrue(tools & set(generate.READ_TOOLS))
        self.assertTrue(tools & set(generate.WRITE_TOOLS))
        self.assertLessEqual(tools, set(generate.READ_TOOLS) | set(generate.WRITE_TOOLS))

    def test_lines_are_in_the_byte_format_of_the_real_corpus(self) -> None:
        data = _generate(200)
        parsed = [json.loads(line) for line in data.splitlines()]
        lines = [format_record(o["index"], o["tool"], o["args"], o["response"]) + "\n" for o in parsed]
        self.assertEqual("".join(lines).encode("ascii"), data)

    def test_output_repeats_calls(self) -> None:
        calls = [record.canonical_call for record in read_session(io.BytesIO(_generate(500)), "g.jsonl")]
        self.assertLess(len(set(calls)), len(calls))

    def test_another_seed_gives_another_session(self) -> None:
        first = next(generate.generate_lines(1))
        self.assertNotEqual(first, next(generate.generate_lines(1, seed=generate.SEED + 1)))

    def test_zero_records_writes_an_empty_file(self) -> None:
        self.assertEqual(_generate(0), b"")


if __name__ == "__main__":
    unittest.main()
