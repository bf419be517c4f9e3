"""The parallel reader must give exactly what the serial reader gives: the same facts, the same error."""

from __future__ import annotations

import os
import tempfile
import unittest

from toolreplay.audit.chain import link_fact, seal_fact, seal_records
from toolreplay.audit.replay import call_fact
from toolreplay.audit.scope import tool_fact
from toolreplay.errors import InputError
from toolreplay.format.chunks import _fork_context, read_facts
from toolreplay.format.records import read_session


def _record(index: int, tool: str = "read_file", **args: object) -> bytes:
    args = args or {"path": f"docs/{index % 7}.md"}
    body = ", ".join(f'"{k}": "{v}"' for k, v in args.items())
    return (f'{{"index": {index}, "tool": "{tool}", "args": {{{body}}}, '
            f'"response": {{"text": "r{index % 5}", "n": {index}.0}}}}\n').encode()


def _session(count: int) -> bytes:
    return b"".join(_record(i) for i in range(count))


@unittest.skipIf(_fork_context() is None, "the parallel reader needs fork (Linux)")
class ParallelMatchesSerialTest(unittest.TestCase):
    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def write(self, data: bytes) -> str:
        path = os.path.join(self.folder.name, "s.jsonl")
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def both(self, data: bytes, extract: object = call_fact, links: bool = False) -> tuple[object, object]:
        """(serial, parallel) outcome: the list of facts, or the error's text."""
        path = self.write(data)
        outcomes = []
        for jobs in (1, 2):
            try:
                outcomes.append(list(read_facts(path, extract, links=links, jobs=jobs, chunk_bytes=150,
                                                min_parallel_bytes=0)))  # type: ignore[arg-type]
            except InputError as exc:
                outcomes.append(str(exc))
        return outcomes[0], outcomes[1]

    def assert_same(self, data: bytes, extract: object = call_fact, links: bool = False) -> object:
        serial, parallel = self.both(data, extract, links)
        self.assertEqual(serial, parallel)
        return serial

    def test_valid_sessions_give_the_same_facts_in_order(self) -> None:
        for count in (0, 1, 2, 5, 40):
            for extract in (call_fact, tool_fact, seal_fact):
                facts = self.assert_same(_session(count), extract)
                self.assertEqual(len(facts), count)  # type: ignore[arg-type]

    def test_blank_lines_crlf_and_no_final_newline(self) -> None:
        data = b"\n\n" + _session(10).replace(b"\n", b"\r\n\n   \n") + _record(10).rstrip(b"\n")
        self.assertEqual(len(self.assert_same(data)), 11)  # type: ignore[arg-type]

    def test_an_error_anywhere_is_reported_at_the_same_line(self) -> None:
        bad_lines = [b"{\n", b"[]\n", b'{"index": 3}\n', b'{"index": 1, "tool": "t", "args": {"a": 1, "a": 2}, '
                     b'"response": {}}\n', b"\xff\n"]
        for position in (0, 1, 7, 19, 39):
            for bad in bad_lines:
                lines = [_record(i) for i in range(40)]
                lines[position] = bad
                outcome = self.assert_same(b"".join(lines))
                self.assertIsInstance(outcome, str)
                self.assertIn(f"s.jsonl:{position + 1}:", outcome)  # type: ignore[arg-type]

    def test_index_out_of_order_at_a_chunk_boundary(self) -> None:
        for position in range(1, 30):
            lines = [_record(i) for i in range(30)]
            lines[position] = _record(position + 1)
            outcome = self.assert_same(b"".join(lines))
            self.assertEqual(outcome, f"{self.folder.name}/s.jsonl:{position + 1}: index {position + 1} out of "
                                      f"order: expected {position}")

    def test_the_first_error_in_the_file_wins(self) -> None:
        lines = [_record(i) for i in range(40)]
        lines[30] = b"{\n"
        lines[12] = b"[1]\n"
        self.assertTrue(str(self.assert_same(b"".join(lines))).endswith("s.jsonl:13: record must be a JSON "
                                                                         "object, not array"))

    def test_byte_order_mark_only_counts_on_the_first_line(self) -> None:
        self.assertIn(":1: byte-order mark", str(self.assert_same(b"\xef\xbb\xbf" + _session(30))))

    def test_sealed_files_and_mixing(self) -> None:
        path = self.write(_session(30))
        with open(path, "rb") as handle:
            sealed = b"".join(seal_records(read_session(handle, path)))
        self.assertEqual(len(self.assert_same(sealed, link_fact, links=True)), 30)  # type: ignore[arg-type]
        self.assertEqual(len(self.assert_same(sealed, call_fact)), 30)  # type: ignore[arg-type]
        links = sealed.splitlines(keepends=True)
        plain = _session(30).splitlines(keepends=True)
        for position in (1, 14, 29):
            self.assertIn("plain record in a sealed file", str(self.assert_same(
                b"".join(links[:position] + plain[position:position + 1] + links[position + 1:]))))
            self.assertIn("sealed link in a file of plain records", str(self.assert_same(
                b"".join(plain[:position] + links[position:position + 1] + plain[position + 1:]))))

    def test_random_damage_gives_the_same_outcome(self) -> None:
        import random

        rng = random.Random(2026)
        pristine = _session(40)
        for _ in range(60):
            data = bytearray(pristine)
            for _ in range(rng.randint(1, 3)):
                position = rng.randrange(len(data))
                action = rng.randrange(4)
                if action == 0:
                    data[position] = rng.choice(b'{}[]",:\n 0x\xff')
                elif action == 1:
                    del data[position]
                elif action == 2:
                    data[position:position] = rng.choice([b"\n", b'"a": 1, ', b"\r", b"\xef\xbb\xbf"])
                else:
                    lines = bytes(data).splitlines(keepends=True)
                    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
                    lines[i], lines[j] = lines[j], lines[i]
                    data = bytearray(b"".join(lines))
            self.assert_same(bytes(data))

    def test_links_keep_their_own_numbering(self) -> None:
        path = self.write(_session(30))
        with open(path, "rb") as handle:
            links = b"".join(seal_records(read_session(handle, path))).splitlines(keepends=True)
        links[3], links[20] = links[20], links[3]
        self.assertEqual(len(self.assert_same(b"".join(links), link_fact, links=True)), 30)  # type: ignore[arg-type]


if __name__ == "__main__":
    unittest.main()
