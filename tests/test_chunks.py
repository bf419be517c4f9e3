"""The parallel reader must give exactly what the serial reader gives: the same facts, the same error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

from tests.support import integration, kill_parent
from toolreplay.audit.chain import link_fact, seal_fact, seal_records
from toolreplay.audit.replay import call_fact
from toolreplay.audit.scope import tool_fact
from toolreplay.errors import InputError
from toolreplay.format.chunks import CHANGED_MESSAGE, _fork_context, read_facts
from toolreplay.format.records import read_session


def _record(index: int, tool: str = "read_file", **args: object) -> bytes:
    args = args or {"path": f"docs/{index % 7}.md"}
    body = ", ".join(f'"{k}": "{v}"' for k, v in args.items())
    return (f'{{"index": {index}, "tool": "{tool}", "args": {{{body}}}, '
            f'"response": {{"text": "r{index % 5}", "n": {index}.0}}}}\n').encode()


def _session(count: int) -> bytes:
    return b"".join(_record(i) for i in range(count))


@unittest.skipIf(_fork_context() is None, "the parallel reader needs fork (Linux)")
@integration
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
        if not links:  # and the same when the reader is told the facts encode the records (replay, seal)
            path = self.write(data)
            for jobs in (1, 2):
                try:
                    encoded: object = list(read_facts(path, extract, jobs=jobs, chunk_bytes=150,  # type: ignore
                                                      min_parallel_bytes=0, encodes=True))
                except InputError as exc:
                    encoded = str(exc)
                self.assertEqual(encoded, serial)
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

    def test_a_chunk_that_starts_with_a_link_missing_its_digest(self) -> None:
        lines = [_record(i) for i in range(40)]
        for position in range(1, 40):
            damaged = list(lines)
            damaged[position] = damaged[position].replace(b', "response"', b', "prev": "' + b"0" * 64
                                                          + b'", "response"')
            outcome = self.assert_same(b"".join(damaged))
            self.assertTrue(str(outcome).endswith(f':{position + 1}: unknown field "prev"'), outcome)

    def test_an_index_error_after_chunks_of_blank_lines(self) -> None:
        for blanks in (b"\n" * 400, b"   \r\n" * 200):
            for start in (0, 3):
                lines = [_record(i) for i in range(start)] + [blanks, _record(start + 1)]
                outcome = self.assert_same(b"".join(lines))
                wanted = "index must start at 0, got 1" if start == 0 else f"index {start + 1} out of order: " \
                    f"expected {start}"
                self.assertTrue(str(outcome).endswith(wanted), outcome)

    def test_nesting_at_the_limit_in_workers_and_past_it(self) -> None:
        deep = b'{"index": 5, "tool": "t", "args": {"x": ' + b"[" * 510 + b"]" * 510 + b'}, "response": {}}\n'
        lines = [_record(i) for i in range(40)]
        lines[5] = deep
        for extract in (call_fact, seal_fact, tool_fact):
            self.assertEqual(len(self.assert_same(b"".join(lines), extract)), 40)  # type: ignore[arg-type]
        lines[5] = deep.replace(b"[", b"[[", 1).replace(b"]", b"]]", 1)
        self.assertEqual(self.assert_same(b"".join(lines)), f"{self.folder.name}/s.jsonl:6: nesting deeper than 512")

    def test_workers_are_bounded_by_the_chunks(self) -> None:
        from concurrent.futures import ProcessPoolExecutor

        path = self.write(_session(4))  # about 400 bytes: three chunks of 150
        with mock.patch("concurrent.futures.ProcessPoolExecutor", wraps=ProcessPoolExecutor) as pool:
            facts = list(read_facts(path, call_fact, jobs=300, chunk_bytes=150, min_parallel_bytes=0))
        self.assertEqual(len(facts), 4)
        self.assertLessEqual(pool.call_args.kwargs["max_workers"], 3)
        with mock.patch("concurrent.futures.ProcessPoolExecutor", wraps=ProcessPoolExecutor) as pool:
            self.assertEqual(list(read_facts(path, call_fact, jobs=3_000_000_000, chunk_bytes=150,
                                             min_parallel_bytes=0)), facts)

    def test_a_failed_fork_falls_back_to_the_serial_reader(self) -> None:
        path = self.write(_session(40))
        serial = list(read_facts(path, call_fact, jobs=1))
        real_fork = os.fork
        calls = []

        def failing_fork() -> int:
            calls.append(1)
            if len(calls) > 1:
                raise BlockingIOError(11, "Resource temporarily unavailable")
            return real_fork()

        with mock.patch("os.fork", failing_fork):
            self.assertEqual(list(read_facts(path, call_fact, jobs=2, chunk_bytes=150, min_parallel_bytes=0)),
                             serial)
        self.assertEqual(len(calls), 2)


@unittest.skipIf(_fork_context() is None, "the parallel reader needs fork (Linux)")
class FileChangedDuringReadTest(unittest.TestCase):
    """A log rotated, truncated or appended to while it is read is an error, never a mixed answer."""

    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.path = os.path.join(self.folder.name, "s.jsonl")
        with open(self.path, "wb") as handle:
            handle.write(_session(400))

    def read_while(self, change: object, jobs: int) -> str:
        facts = read_facts(self.path, call_fact, jobs=jobs, chunk_bytes=150, min_parallel_bytes=0)
        next(facts)
        change()  # type: ignore[operator]
        with self.assertRaises(InputError) as caught:
            list(facts)
        return str(caught.exception)

    def rotate(self) -> None:
        other = os.path.join(self.folder.name, "new.jsonl")
        with open(other, "wb") as handle:
            handle.write(_session(400).replace(b'"r', b'"R'))
        os.replace(other, self.path)

    def append(self) -> None:
        with open(self.path, "ab") as handle:
            handle.write(_record(400))

    def truncate(self) -> None:
        os.truncate(self.path, 2000)

    def test_each_change_in_each_reader(self) -> None:
        for change in (self.rotate, self.append, self.truncate):
            for jobs in (1, 2):
                with self.subTest(change=change.__name__, jobs=jobs):
                    self.setUp()
                    self.assertEqual(self.read_while(change, jobs), f"{self.path}: {CHANGED_MESSAGE}")

    def test_the_command_line_reports_it(self) -> None:
        from toolreplay.cli import main
        from toolreplay.cli._io import IO

        facts = read_facts  # the command reads through read_facts; change the file after its first fact

        def reading(path: str, extract: object, **options: object) -> object:
            iterator = facts(path, extract, chunk_bytes=150, min_parallel_bytes=0, **options)  # type: ignore
            yield next(iterator)
            self.rotate()
            yield from iterator

        for command in ("seal", "replay", "scope"):
            self.setUp()
            out = os.path.join(self.folder.name, "out.sealed")
            argv = {"seal": ["seal", self.path, "-o", out], "replay": ["replay", self.path],
                    "scope": ["scope", self.path, os.path.join(os.path.dirname(__file__), "..", "samples",
                                                               "scope.json")]}[command]
            io = IO.memory()
            with mock.patch("toolreplay.audit.api.read_facts", reading):
                code = main([*argv, "--jobs", "2"], io)
            self.assertEqual((code, io.out(), io.err()), (2, "", f"error: {self.path}: {CHANGED_MESSAGE}\n"))
            self.assertEqual(os.listdir(self.folder.name), ["s.jsonl"])


_KILLED_READER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[2])
    from toolreplay.format.chunks import read_facts

    def slow(record):
        time.sleep(0.05)
        return record.index

    if __name__ == "__main__":
        facts = read_facts(sys.argv[1], slow, jobs=2, chunk_bytes=150, min_parallel_bytes=0)
        next(facts)
        print("reading", flush=True)
        for _ in facts:
            pass
""")


@unittest.skipUnless(sys.platform.startswith("linux") and _fork_context() is not None, "Linux with fork")
@integration
class KilledParentTest(unittest.TestCase):
    def test_workers_die_with_a_killed_parent(self) -> None:
        for sig in (signal.SIGKILL, signal.SIGTERM):
            with self.subTest(signal=sig.name):
                self.killed_while_reading(sig)

    def killed_while_reading(self, sig: int) -> None:
        with tempfile.TemporaryDirectory() as folder:
            session = os.path.join(folder, "s.jsonl")
            with open(session, "wb") as handle:
                handle.write(_session(400))
            script = os.path.join(folder, "reader.py")
            with open(script, "w", encoding="utf-8") as handle:
                handle.write(_KILLED_READER)
            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            parent = subprocess.Popen([sys.executable, script, session, root], stdout=subprocess.PIPE)
            self.assertEqual(parent.stdout.readline(), b"reading\n")  # type: ignore[union-attr]
            self.assertEqual(kill_parent(parent, sig), (2, []))
            parent.stdout.close()  # type: ignore[union-attr]


@unittest.skipIf(_fork_context() is None, "the parallel reader needs fork (Linux)")
class LineLimitInBothReadersTest(unittest.TestCase):
    def test_a_long_line_is_the_same_error_and_no_range_holds_more_than_the_limit(self) -> None:
        from toolreplay.format.chunks import _boundaries

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "s.jsonl")
            with open(path, "wb") as handle:
                handle.write(_session(20) + b"x" * 5000 + b"\n" + _session(3))
            outcomes = []
            for jobs in (1, 2):
                with self.assertRaises(InputError) as caught:
                    list(read_facts(path, call_fact, jobs=jobs, chunk_bytes=150, min_parallel_bytes=0, max_line=1000))
                outcomes.append(str(caught.exception))
            self.assertEqual(outcomes, [f"{path}:21: line longer than 1000 bytes"] * 2)
            with open(path, "rb") as handle:
                ranges = list(_boundaries(handle.fileno(), os.fstat(handle.fileno()).st_size, 150, 1000))
            self.assertLessEqual(max(end - start for start, end in ranges), 150 + 1000 + 1)
            self.assertEqual(ranges[-1][1], os.path.getsize(path))

    def test_a_torn_last_line_is_the_same_torn_error_in_both_readers(self) -> None:
        from toolreplay.format.records import TornLineError

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "s.jsonl")
            with open(path, "wb") as handle:
                handle.write(_session(40) + _record(40)[:25])
            outcomes = []
            for jobs in (1, 2):
                with self.assertRaises(TornLineError) as caught:
                    list(read_facts(path, call_fact, jobs=jobs, chunk_bytes=150, min_parallel_bytes=0))
                outcomes.append((str(caught.exception), caught.exception.size))
            self.assertEqual(outcomes[0], outcomes[1])
            self.assertEqual(outcomes[0][1], 25)
            self.assertTrue(outcomes[0][0].startswith(f"{path}:41: invalid JSON"), outcomes[0][0])


if __name__ == "__main__":
    unittest.main()
