"""The session recorder: plain and sealed lines, resume, crashes, and the audit commands on its files."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import unittest
import unittest.mock
from typing import Any

from tests.faults import FullDiskHandle, fill, small_tmpfs
from tests.support import integration
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import format_record, read_session
from toolreplay.guard.intents import Intent, IntentFile, read_intents
from toolreplay.guard.recorder import RecordingError, SessionRecorder, open_shared_intents

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CALLS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("list_dir", {"path": "docs"}, {"entries": ["intro.md", "install.md"]}),
    ("read_file", {"path": "docs/intro.md"}, {"text": "h\u00e9llo", "n": 1.0}),
    ("search", {"q": "install", "limit": 10}, {"count": 2e-7, "big": 12345678901234567890}),
    ("write_file", {"path": "docs/intro.md", "text": "edited"},
     {"ok": False, "error": "tool not allowed: write_file"}),
]


def cli(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


class RecorderCase(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)

    def path(self, name: str = "session.jsonl") -> str:
        return os.path.join(self.directory, name)

    def record(self, path: str, calls: Any = CALLS, sealed: bool = False) -> list[int]:
        with SessionRecorder.open(path, sealed=sealed) as recorder:
            return [recorder.append(tool, args, response) for tool, args, response in calls]

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        with open(path, "wb") as handle:
            handle.write(data)


class LinkHashTest(RecorderCase):
    def test_links_are_the_same_bytes_with_hashlib_loaded_or_not(self) -> None:
        # the recorder hashes with hashlib's SHA-256 once the process has loaded it, else the builtin one
        import hashlib

        without, loaded = self.path("without.jsonl"), self.path("loaded.jsonl")
        with unittest.mock.patch.dict(sys.modules):
            del sys.modules["hashlib"]
            with unittest.mock.patch.object(hashlib, "sha256", side_effect=AssertionError("hashlib used")):
                self.record(without, sealed=True)
        calls: list[bytes] = []
        original = hashlib.sha256

        def counted(data: bytes = b"") -> Any:
            calls.append(data)
            return original(data)

        with unittest.mock.patch.object(hashlib, "sha256", counted):
            self.record(loaded, sealed=True)
        self.assertEqual(len(calls), len(CALLS))
        self.assertEqual(self.read_bytes(without), self.read_bytes(loaded))
        code, out, err = cli("verify", loaded)
        self.assertEqual((code, err), (0, ""), out)


class PlainTest(RecorderCase):
    def test_lines_are_session_records(self) -> None:
        path = self.path()
        self.assertEqual(self.record(path), [0, 1, 2, 3])
        expected = "".join(format_record(i, *call) + "\n" for i, call in enumerate(CALLS))
        self.assertEqual(self.read_bytes(path), expected.encode("ascii"))

    def test_each_record_is_on_disk_when_append_returns(self) -> None:
        path = self.path()
        with SessionRecorder.open(path) as recorder:
            for position, call in enumerate(CALLS):
                recorder.append(*call)
                with open(path, "rb") as handle:
                    self.assertEqual(len(list(read_session(handle, path))), position + 1)

    def test_replay_and_scope_read_it(self) -> None:
        path = self.path()
        self.record(path)
        self.assertEqual(cli("replay", path), (0, "calls: 4\ndivergence: none\nfindings: 0\n", ""))
        scope = self.path("scope.json")
        self.write_bytes(scope, b'{"agent": "docs-reader", "allowed_tools": ["list_dir", "read_file", '
                                b'"search"], "limits": {"max_steps": 3}}')
        finding = "index 3: permission-overreach: tool 'write_file' is not in the declared scope for agent"
        self.assertEqual(cli("scope", path, scope),
                         (1, f"calls: 4\nfindings: 1\n{finding} 'docs-reader'\n", ""))

    def test_resume_continues_the_index(self) -> None:
        path = self.path()
        self.record(path, CALLS[:2])
        self.assertEqual(self.record(path, CALLS[2:]), [2, 3])
        with open(path, "rb") as handle:
            self.assertEqual([r.index for r in read_session(handle, path)], [0, 1, 2, 3])
        self.assertEqual(self.read_bytes(path).count(b'"index": 0,'), 1)

    def test_value_without_json_form_writes_nothing(self) -> None:
        path = self.path()
        with SessionRecorder.open(path) as recorder:
            for tool, args, response, message in (
                    ("t", {"x": float("nan")}, {}, "record has no JSON form: nan has no JSON form"),
                    ("t", {}, {"s": "\ud800"}, "record has no JSON form: string holds a lone surrogate"),
                    ("t", {}, {1: 2}, "record has no JSON form: object key 1 is not a string"),
                    ("", {}, {}, "tool must be a non-empty string"),
                    ("t", [], {}, "args and response must be JSON objects")):
                with self.subTest(message=message), self.assertRaises(ValueError) as caught:
                    recorder.append(tool, args, response)  # type: ignore[arg-type]
                self.assertEqual(str(caught.exception), message)
            self.assertEqual(recorder.append("t", {}, {}), 0)
        self.assertEqual(self.read_bytes(path), b'{"index": 0, "tool": "t", "args": {}, "response": {}}\n')

    def test_closed_recorder_refuses(self) -> None:
        recorder = SessionRecorder.open(self.path())
        recorder.close()
        recorder.close()
        with self.assertRaises(ValueError):
            recorder.append("t", {}, {})

    def test_threads_get_distinct_indexes(self) -> None:
        path = self.path()
        barrier = threading.Barrier(4, timeout=10)
        with SessionRecorder.open(path, sealed=True) as recorder:
            def work(n: int) -> None:
                barrier.wait()
                for k in range(25):
                    recorder.append("t", {"thread": n, "k": k}, {})

            threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
        with open(path, "rb") as handle:
            self.assertEqual([r.index for r in read_session(handle, path)], list(range(100)))
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))

    def test_second_recorder_on_the_same_file_is_refused(self) -> None:
        if sys.platform == "win32":
            self.skipTest("no advisory locks")
        path = self.path()
        with SessionRecorder.open(path), self.assertRaises(UsageError) as caught:
            SessionRecorder.open(path)
        self.assertEqual(str(caught.exception), f"{path} is already being recorded by another recorder")

    def test_unwritable_path(self) -> None:
        path = os.path.join(self.directory, "missing", "s.jsonl")
        with self.assertRaises(UsageError) as caught:
            SessionRecorder.open(path)
        self.assertEqual(str(caught.exception), f"cannot write {path}: No such file or directory")


class SealedTest(RecorderCase):
    def test_bytes_equal_what_seal_writes(self) -> None:
        plain, sealed = self.path("plain.jsonl"), self.path("sealed.jsonl")
        self.record(plain)
        self.record(sealed, sealed=True)
        code, out, err = cli("seal", plain)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_bytes(sealed), out.encode("utf-8"))

    def test_spec_vectors(self) -> None:
        path = self.path()
        self.record(path, CALLS[1:3], sealed=True)
        lines = self.read_bytes(path).decode("utf-8").splitlines()
        self.assertTrue(lines[0].endswith('"digest":"b22851d4b1f3512b57943baca026cc7ae7f400a408066c9008e0a074d994660c"}'))
        self.assertTrue(lines[1].endswith('"digest":"5a907aa582be564d20ed2dd38b8c5d69bccec06721b50da1ba89901ac7db05f5"}'))

    def test_verify_replay_scope_work_on_it(self) -> None:
        path = self.path()
        self.record(path, sealed=True)
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))
        self.assertEqual(cli("replay", path), (0, "calls: 4\ndivergence: none\nfindings: 0\n", ""))

    def test_editing_any_line_breaks_that_link(self) -> None:
        path = self.path()
        self.record(path, sealed=True)
        original = self.read_bytes(path).split(b"\n")
        edits = ((b'"tool":"', b'"tool":"x'), (b'"args":{', b'"args":{"extra":1,'),
                 (b'"response":{', b'"response":{"extra":1,'), (b'{"index":', b'{"index":1'))
        for position in range(len(CALLS)):
            for old, new in edits:
                with self.subTest(line=position, edit=new):
                    lines = list(original)
                    lines[position] = lines[position].replace(old, new, 1)
                    self.write_bytes(path, b"\n".join(lines))
                    code, out, err = cli("verify", path)
                    self.assertEqual((code, err), (1, ""))
                    self.assertEqual(out.split("\n")[:2],
                                     ["chain: broken", f"first broken link: index {position}"])

    def test_resume_continues_the_chain(self) -> None:
        sealed, plain = self.path("sealed.jsonl"), self.path("plain.jsonl")
        self.record(sealed, CALLS[:1], sealed=True)
        self.assertEqual(self.record(sealed, CALLS[1:3], sealed=True), [1, 2])
        self.assertEqual(self.record(sealed, CALLS[3:], sealed=True), [3])
        self.record(plain)
        self.assertEqual(cli("verify", sealed), (0, "chain: intact\n", ""))
        self.assertEqual(self.read_bytes(sealed), cli("seal", plain)[1].encode("utf-8"))

    def test_last_digest(self) -> None:
        path = self.path()
        self.record(path, CALLS[1:3], sealed=True)
        with SessionRecorder.open(path, sealed=True) as recorder:
            self.assertEqual((recorder.next_index, recorder.last_digest),
                             (2, "5a907aa582be564d20ed2dd38b8c5d69bccec06721b50da1ba89901ac7db05f5"))

    def test_kept_history_is_the_records_read_to_continue_the_file(self) -> None:
        path = self.path()
        self.record(path, CALLS[:3], sealed=True)
        with SessionRecorder.open(path, sealed=True, keep_history=True) as recorder:
            recorder.append(*CALLS[3])
            with open(path, "r+b") as handle:  # the first pass read it; history() does not read it again
                handle.write(b"x")
            self.assertEqual([(r.index, r.tool, r.args) for r in recorder.history()],
                             [(index, tool, args) for index, (tool, args, _) in enumerate(CALLS[:3])])
            self.assertRaises(InputError, list, recorder.history())  # given once: a second call reads the file

    def test_broken_chain_is_not_continued(self) -> None:
        path = self.path()
        self.record(path, sealed=True)
        data = self.read_bytes(path).replace(b"edited", b"EDITED")
        self.write_bytes(path, data)
        with self.assertRaises(InputError) as caught:
            SessionRecorder.open(path, sealed=True)
        self.assertEqual(str(caught.exception),
                         f"{path}:4: chain broken at link index 3; a broken chain cannot be continued")
        self.assertEqual(self.read_bytes(path), data)

    def test_mode_must_match_the_file(self) -> None:
        plain, sealed = self.path("plain.jsonl"), self.path("sealed.jsonl")
        self.record(plain, CALLS[:1])
        self.record(sealed, CALLS[:1], sealed=True)
        cases = ((plain, True, "file holds plain records; cannot continue it as a sealed record"),
                 (sealed, False, "file holds sealed links; cannot continue it as a plain record"))
        for path, flag, message in cases:
            with self.subTest(path=path), self.assertRaises(InputError) as caught:
                SessionRecorder.open(path, sealed=flag)
            self.assertEqual(str(caught.exception), f"{path}: {message}")


@integration
class CrashTest(RecorderCase):
    def test_torn_final_line_is_cut_off_on_resume(self) -> None:
        for sealed in (False, True):
            with self.subTest(sealed=sealed):
                path = self.path(f"crash-{sealed}.jsonl")
                self.record(path, sealed=sealed)
                data = self.read_bytes(path)
                cut = data.rindex(b"\n", 0, len(data) - 1) + 1 + 25  # 25 bytes into the last line
                self.write_bytes(path, data[:cut])
                # valid up to the last complete line: the audit reports the torn line, nothing before it
                code, out, err = cli("replay", path)
                self.assertEqual((code, out), (2, ""))
                self.assertTrue(err.startswith(f"error: {path}:4: invalid JSON"), err)
                with SessionRecorder.open(path, sealed=sealed) as recorder:
                    self.assertEqual((recorder.truncated_bytes, recorder.next_index), (25, 3))
                    self.assertEqual(recorder.append(*CALLS[3]), 3)
                self.assertEqual(self.read_bytes(path), data)

    def test_torn_multibyte_character_is_cut_off(self) -> None:
        path = self.path()
        self.record(path, [("t", {}, {}), ("t", {"s": "\u00e9"}, {})], sealed=True)
        data = self.read_bytes(path)
        cut = data.index(b"\xc3") + 1
        self.write_bytes(path, data[:cut])
        with SessionRecorder.open(path, sealed=True) as recorder:
            self.assertEqual(recorder.next_index, 1)
            recorder.append("t", {"s": "\u00e9"}, {})
        self.assertEqual(self.read_bytes(path), data)

    def test_complete_final_record_without_newline_is_kept(self) -> None:
        path = self.path()
        self.record(path, CALLS[:2])
        self.write_bytes(path, self.read_bytes(path)[:-1])
        with SessionRecorder.open(path) as recorder:
            self.assertEqual((recorder.truncated_bytes, recorder.append(*CALLS[2])), (0, 2))
        with open(path, "rb") as handle:
            self.assertEqual([r.index for r in read_session(handle, path)], [0, 1, 2])

    def test_complete_but_wrong_final_record_is_an_error_not_a_tear(self) -> None:
        path = self.path()
        self.record(path, CALLS[:2])
        data = self.read_bytes(path)[:-1].replace(b'"index": 1', b'"index": 5')
        self.write_bytes(path, data)
        with self.assertRaises(InputError) as caught:
            SessionRecorder.open(path)
        self.assertEqual(str(caught.exception), f"{path}:2: index 5 out of order: expected 1")
        self.assertEqual(self.read_bytes(path), data)

    def test_bad_line_before_the_end_is_an_error_and_the_file_is_untouched(self) -> None:
        path = self.path()
        self.record(path)
        data = self.read_bytes(path)
        lines = data.split(b"\n")
        lines[1] = lines[1][:20]
        broken = b"\n".join(lines)
        self.write_bytes(path, broken)
        with self.assertRaises(InputError) as caught:
            SessionRecorder.open(path)
        self.assertEqual(str(caught.exception).split(": ")[0], f"{path}:2")
        self.assertEqual(self.read_bytes(path), broken)

    def test_process_killed_after_three_records(self) -> None:
        if not hasattr(signal, "SIGKILL"):
            self.skipTest("no SIGKILL on this platform")
        path = self.path()
        script = (
            "import os, signal, sys\n"
            "from toolreplay.guard.recorder import SessionRecorder\n"
            "recorder = SessionRecorder.open(sys.argv[1], sealed=True)\n"
            "for n in range(3):\n"
            "    recorder.append('read_file', {'n': n}, {'text': 'x' * 100})\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
        env = dict(os.environ, PYTHONPATH=ROOT)
        result = subprocess.run([sys.executable, "-c", script, path], env=env, capture_output=True,
                                timeout=60, check=False)
        self.assertEqual(result.returncode, -signal.SIGKILL)
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))
        with SessionRecorder.open(path, sealed=True) as recorder:
            self.assertEqual(recorder.append("read_file", {"n": 3}, {}), 3)
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))


class FailedWriteTest(RecorderCase):
    def test_full_filesystem_leaves_no_half_line(self) -> None:
        directory = small_tmpfs(self)
        path = os.path.join(directory, "s.jsonl")
        with SessionRecorder.open(path, sealed=True) as recorder:
            recorder.append(*CALLS[0])
            before = self.read_bytes(path)
            filler = fill(directory)
            big = {"text": "x" * 20000}
            for _ in range(2):
                with self.assertRaises(RecordingError) as caught:
                    recorder.append("read_file", {}, big)
                self.assertEqual(str(caught.exception), f"cannot write {path}: No space left on device")
                self.assertEqual(self.read_bytes(path), before)
            os.unlink(filler)  # space is back: the chain goes on from the last complete link
            self.assertEqual(recorder.append("read_file", {}, big), 1)
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))

    def test_simulated_full_disk_leaves_no_half_line(self) -> None:
        path = self.path()
        with SessionRecorder.open(path, sealed=True) as recorder:
            recorder.append(*CALLS[0])
            before = self.read_bytes(path)
            handle = recorder._handle = FullDiskHandle(recorder._handle)  # type: ignore[attr-defined]
            with self.assertRaises(OSError) as caught:
                recorder.append(*CALLS[1])
            self.assertIsInstance(caught.exception, RecordingError)
            self.assertEqual(self.read_bytes(path), before)
            handle.full = False
            self.assertEqual(recorder.append(*CALLS[1]), 1)
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))

    def test_a_half_line_that_cannot_be_cut_stops_the_recorder(self) -> None:
        path = self.path()

        class Unshrinkable(FullDiskHandle):
            def fileno(self) -> int:
                return -1  # ftruncate fails

        with SessionRecorder.open(path) as recorder:
            real = recorder._handle  # type: ignore[attr-defined]
            recorder._handle = Unshrinkable(real)  # type: ignore[attr-defined]
            with self.assertRaises(RecordingError):
                recorder.append(*CALLS[0])
            recorder._handle = real  # type: ignore[attr-defined]
            message = f"cannot write {path}: No space left on device (and a partial line could not be cut off)"
            self.assertEqual(recorder.stopped, message)
            for attempt in (recorder.check, lambda: recorder.append(*CALLS[0])):
                with self.assertRaises(RecordingError) as caught:
                    attempt()
                self.assertEqual(str(caught.exception), message)

    def test_file_deleted_or_replaced_while_held(self) -> None:
        for how in ("delete", "replace", "rename away"):
            with self.subTest(how=how):
                path = self.path(how + ".jsonl")
                with SessionRecorder.open(path) as recorder:
                    recorder.append(*CALLS[0])
                    if how == "delete":
                        os.unlink(path)
                    elif how == "replace":
                        self.write_bytes(path + ".new", b"")
                        os.replace(path + ".new", path)
                    else:
                        os.rename(path, path + ".old")
                    for attempt in (recorder.check, lambda: recorder.append(*CALLS[1])):
                        with self.assertRaises(RecordingError) as caught:
                            attempt()
                        self.assertEqual(str(caught.exception),
                                         f"{path} was deleted or replaced while being recorded")


class FileModeTest(RecorderCase):
    """Records and intents hold arguments and results verbatim: created 0600, never wider than the umask allows."""

    def with_umask(self, mask: int) -> None:
        old = os.umask(mask)
        self.addCleanup(os.umask, old)

    def mode(self, path: str) -> int:
        return os.stat(path).st_mode & 0o777

    def test_record_and_intents_are_created_0600(self) -> None:
        self.with_umask(0o022)
        path = self.path()
        with SessionRecorder.open(path, sealed=True) as recorder:
            recorder.announce("write_file", {"path": "a"})
            self.assertEqual((self.mode(path), self.mode(path + ".intents")), (0o600, 0o600))
        with SessionRecorder.open(path, sealed=True) as recorder:
            recorder.keep_intents(list(recorder.previous_intents))  # rewritten whole, through a temporary file
            self.assertEqual(self.mode(path + ".intents"), 0o600)

    def test_the_umask_can_only_narrow_it(self) -> None:
        self.with_umask(0o237)  # without the 0600 it would be 0o440
        path = self.path()
        self.record(path)
        self.assertEqual(self.mode(path), 0o400)

    def test_an_existing_file_keeps_its_mode(self) -> None:
        path = self.path()
        self.write_bytes(path, b"")
        os.chmod(path, 0o640)
        self.record(path)
        self.assertEqual(self.mode(path), 0o640)


class ResumePointTest(RecorderCase):
    def test_a_recorder_opened_at_its_point_reads_nothing_while_the_file_is_unchanged(self) -> None:
        path = self.path()
        with SessionRecorder.open(path, sealed=True) as recorder:
            for call in CALLS[:2]:
                recorder.append(*call)
            point = recorder.resume_point()
        assert point is not None
        self.assertEqual((point.next_index, point.size, point.sealed), (2, os.path.getsize(path), True))
        with unittest.mock.patch("toolreplay.guard.recorder._resume", side_effect=AssertionError("read")):
            with SessionRecorder.open(path, sealed=True, at=point) as recorder:
                self.assertTrue(recorder.opened_at_point)
                self.assertEqual((recorder.next_index, recorder.last_digest), (2, point.prev))
                self.assertEqual(recorder.append(*CALLS[2]), 2)
                self.assertEqual([record.index for record in recorder.records_since(point)], [2])
        self.assertEqual(cli("verify", path), (0, "chain: intact\n", ""))
        # the file moved on without it: read whole
        with SessionRecorder.open(path, sealed=True, at=point) as recorder:
            self.assertFalse(recorder.opened_at_point)
            self.assertEqual(recorder.next_index, 3)
            point = recorder.resume_point()
        with self.assertRaises(InputError):  # a sealed point does not open the file as a plain record
            SessionRecorder.open(path, sealed=False, at=point)

    def test_a_file_changed_in_place_is_read_whole_and_its_broken_chain_refused(self) -> None:
        path = self.path()
        with SessionRecorder.open(path, sealed=True) as recorder:
            recorder.append(*CALLS[0])
            recorder.append(*CALLS[1])
            point = recorder.resume_point()
        assert point is not None
        data = self.read_bytes(path)
        self.write_bytes(path, data.replace(b'"intro.md"', b'"intro.mx"', 1))  # the same size
        self.assertEqual(os.path.getsize(path), point.size)
        os.utime(path, ns=(point.mtime_ns, point.mtime_ns + 1_000_000))
        with self.assertRaises(InputError) as caught:
            SessionRecorder.open(path, sealed=True, at=point)
        self.assertIn("chain broken at link index 0", str(caught.exception))

    def test_records_since_a_point_are_checked_against_its_chain(self) -> None:
        path = self.path()
        with SessionRecorder.open(path, sealed=True) as recorder:
            recorder.append(*CALLS[0])
            point = recorder.resume_point()
            recorder.append(*CALLS[1])
            recorder.append(*CALLS[2])
            assert point is not None
            self.assertEqual([(record.index, record.tool) for record in recorder.records_since(point)],
                             [(1, "read_file"), (2, "search")])
            later = recorder.resume_point()
            assert later is not None
            self.assertEqual(recorder.records_since(later), [])
        lines = self.read_bytes(path).split(b"\n")
        lines[2] = lines[2].replace(b'"install"', b'"uninstall"')
        self.write_bytes(path, b"\n".join(lines))
        with self.assertRaises(InputError) as caught:  # the size changed: read whole, the broken link found
            SessionRecorder.open(path, sealed=True, at=later)
        self.assertIn(":3: chain broken at link index 2", str(caught.exception))


class IntentFileTest(RecorderCase):
    def test_announced_write_is_on_disk_until_its_record_lands(self) -> None:
        path = self.path()
        intents = path + ".intents"
        with SessionRecorder.open(path) as recorder:
            recorder.append(*CALLS[0])
            first = recorder.announce("write_file", {"path": "a"}, "call_1")
            second = recorder.announce("write_file", {"path": "b"})
            self.assertEqual(self.read_bytes(intents), (
                b'{"args":{"path":"a"},"from":1,"intent":0,"key":"call_1","tool":"write_file"}\n'
                b'{"args":{"path":"b"},"from":1,"intent":1,"key":null,"tool":"write_file"}\n'))
            self.assertEqual(recorder.append("write_file", {"path": "a"}, {"ok": True}, intent=first), 1)
            self.assertTrue(self.read_bytes(intents).endswith(b'{"done":0,"index":1}\n'))
            recorder.append("write_file", {"path": "b"}, {"ok": True}, intent=second)
            self.assertFalse(os.path.exists(intents))  # nothing open: removed
            third = recorder.announce("write_file", {"path": "c"})  # the next intent makes it anew
            self.assertEqual(self.read_bytes(intents),
                             b'{"args":{"path":"c"},"from":3,"intent":2,"key":null,"tool":"write_file"}\n')
            recorder.append("write_file", {"path": "c"}, {"ok": True}, intent=third)
        self.assertFalse(os.path.exists(intents))  # and none left on close

    def test_open_intent_survives_close_and_is_read_back(self) -> None:
        path = self.path()
        with SessionRecorder.open(path) as recorder:
            recorder.announce("write_file", {"path": "a"})
        with SessionRecorder.open(path) as recorder:
            self.assertEqual(recorder.previous_intents, (Intent(0, 0, "write_file", {"path": "a"}, None),))
            self.assertEqual(recorder.announce("write_file", {"path": "b"}), 1)

    def test_torn_last_line_is_ignored_and_a_bad_line_is_an_error(self) -> None:
        path = self.path("x.intents")
        good = b'{"args":{},"from":0,"intent":0,"key":null,"tool":"t"}\n'
        self.write_bytes(path, good + b'{"args":{},"fr')
        self.assertEqual(read_intents(path), [Intent(0, 0, "t", {}, None)])
        for bad in (b'{"args":{},"fr\n', b'{"done":5,"index":0}\n', b'{"args":{},"from":0,"intent":0,"tool":"t"}\n',
                    b'{"done":0,"index":-1}\n', b'[]\n'):
            with self.subTest(bad=bad):
                self.write_bytes(path, good + bad)
                with self.assertRaises(InputError) as caught:
                    read_intents(path)
                self.assertTrue(str(caught.exception).startswith(f"{path}:2: not an intent line"), caught.exception)

    def test_intent_file_deleted_while_in_use(self) -> None:
        path = self.path()
        with SessionRecorder.open(path) as recorder:
            recorder.announce("write_file", {"path": "a"})
            os.unlink(path + ".intents")
            with self.assertRaises(RecordingError) as caught:
                recorder.announce("write_file", {"path": "b"})
            self.assertEqual(str(caught.exception),
                             f"cannot write {path}.intents: {path}.intents was deleted or replaced while in use")

    def test_announce_on_a_full_disk_raises(self) -> None:
        directory = small_tmpfs(self)
        path = os.path.join(directory, "s.jsonl")
        with SessionRecorder.open(path) as recorder:
            fill(directory)
            with self.assertRaises(RecordingError) as caught:
                recorder.announce("write_file", {})
            self.assertEqual(str(caught.exception), f"cannot write {path}.intents: No space left on device")


class LastingIntentsTest(RecorderCase):
    """An intent file a long-lived owner keeps open across recorders of one record (the hook server's)."""

    def test_kept_across_recorders_settled_by_lines_and_checked_against_the_path(self) -> None:
        path = self.path()
        intents = path + ".intents"
        kept = IntentFile(intents, [], lasting=True)
        self.addCleanup(kept.release)
        self.assertTrue(kept.unchanged())  # no file, none open
        with SessionRecorder.open(path, intents=kept) as recorder:
            first = recorder.announce("write_file", {"path": "a"}, "call_1")
        self.assertEqual(read_intents(intents), [Intent(0, 0, "write_file", {"path": "a"}, "call_1")])  # stays
        self.assertTrue(kept.unchanged())
        kept.rebase()
        with SessionRecorder.open(path, intents=kept) as recorder:
            self.assertEqual(recorder.previous_intents, (Intent(0, 0, "write_file", {"path": "a"}, "call_1"),))
            recorder.keep_intents(list(recorder.previous_intents))  # nothing to cut: the file is left as it is
            recorder.append("write_file", {"path": "a"}, {"ok": True}, intent=first)
        self.assertEqual(self.read_bytes(intents), b'{"args":{"path":"a"},"from":0,"intent":0,"key":"call_1",'
                                                   b'"tool":"write_file"}\n{"done":0,"index":0}\n')
        self.assertTrue(kept.unchanged())
        kept.rebase()
        with SessionRecorder.open(path, intents=kept) as recorder:
            self.assertEqual(recorder.previous_intents, ())
            self.assertEqual(recorder.announce("write_file", {"path": "b"}), 1)  # numbers go on in one file
        with open(intents, "ab") as other:  # another process appends: no longer the file it left
            other.write(b'{"args":{},"from":2,"intent":2,"key":null,"tool":"t"}\n')
        self.assertFalse(kept.unchanged())
        kept.release()
        os.unlink(intents)
        self.assertFalse(kept.unchanged())  # closed, and no file: still not the one it left (that one had an intent)
        fresh = IntentFile(intents, [], lasting=True)
        self.addCleanup(fresh.release)
        self.assertTrue(fresh.unchanged())
        with SessionRecorder.open(path, intents=fresh) as recorder:
            recorder.announce("t", {})
        os.replace(path, path + ".moved")
        self.write_bytes(intents + ".new", b"")
        os.replace(intents + ".new", intents)  # replaced: another inode
        self.assertFalse(fresh.unchanged())


class SharedIntentsTest(RecorderCase):
    """One intent file for the records of a folder (the listener's sessions of one upstream)."""

    CUT_SHORT = {"ok": False, "error": "outcome unknown: the proxy stopped while this write ran, before its result "
                                       "was recorded; whether it took effect is unknown"}

    def test_each_record_announces_into_the_shared_file_under_its_own_name(self) -> None:
        shared = open_shared_intents(self.path("up.intents"), clock=lambda: 0)
        with SessionRecorder.open(self.path("a.jsonl"), intents=shared) as a, \
                SessionRecorder.open(self.path("b.jsonl"), intents=shared) as b:
            first = a.announce("write_file", {"path": "x"})
            b.announce("write_file", {"path": "y"})
            self.assertEqual(a.intents_path, self.path("up.intents"))
            self.assertEqual(self.read_bytes(self.path("up.intents")), (
                b'{"args":{"path":"x"},"from":0,"intent":0,"key":null,"record":"a.jsonl","tool":"write_file"}\n'
                b'{"args":{"path":"y"},"from":0,"intent":1,"key":null,"record":"b.jsonl","tool":"write_file"}\n'))
            a.append("write_file", {"path": "x"}, {"ok": True}, intent=first)
            b.keep_intents([])  # a gate that resumes keeps the earlier intents only: b's own stays
            self.assertEqual(read_intents(self.path("up.intents")), [
                Intent(1, 0, "write_file", {"path": "y"}, None, record="b.jsonl")])
        self.assertTrue(os.path.exists(self.path("up.intents")))  # a recorder leaves a shared file open
        with self.assertRaises(UsageError) as caught:  # and it has one opener at a time
            open_shared_intents(self.path("up.intents"))
        self.assertEqual(str(caught.exception), f"{self.path('up.intents')} is already in use by another proxy")
        shared.close()

    def test_reopened_after_a_crash_a_write_without_its_record_is_recorded_unknown_and_kept(self) -> None:
        shared = open_shared_intents(self.path("up.intents"))
        with SessionRecorder.open(self.path("a.jsonl"), sealed=True, intents=shared) as a:
            a.append(*CALLS[0])
            a.announce("write_file", {"path": "ran"})
            a.append("write_file", {"path": "ran"}, {"ok": True})  # landed; its done line never came
            a.announce("write_file", {"path": "cut"})
        shared.close()  # the process died: the file keeps both intents
        self.write_bytes(self.path("up.intents"), self.read_bytes(self.path("up.intents")) + (
            b'{"args":{"path":"gone"},"from":0,"intent":7,"key":null,"record":"missing.jsonl","tool":"write_file"}\n'))
        shared = open_shared_intents(self.path("up.intents"), clock=lambda: 0)
        self.assertEqual(shared.earlier, (Intent(1, 2, "write_file", {"path": "cut"}, None),
                                          Intent(7, 0, "write_file", {"path": "gone"}, None)))
        with SessionRecorder.open(self.path("b.jsonl"), intents=shared) as b:
            self.assertEqual(b.previous_intents, shared.earlier)
        shared.close()
        with open(self.path("a.jsonl"), "rb") as handle:
            records = list(read_session(handle, self.path("a.jsonl")))
        self.assertEqual([(record.tool, record.args, record.response, record.meta) for record in records[2:]], [
            ("write_file", {"path": "cut"}, self.CUT_SHORT, {"outcome": "unknown", "ts": "1970-01-01T00:00:00.000Z"})])
        self.assertEqual(cli("verify", self.path("a.jsonl")), (0, "chain: intact\n", ""))
        shared = open_shared_intents(self.path("up.intents"))  # once more: nothing recorded twice
        self.assertEqual([intent.args for intent in shared.earlier], [{"path": "cut"}, {"path": "gone"}])
        shared.close()
        with open(self.path("a.jsonl"), "rb") as handle:
            self.assertEqual(len(list(read_session(handle, self.path("a.jsonl")))), 3)
        os.unlink(self.path("up.intents"))  # a person resolved them
        shared = open_shared_intents(self.path("up.intents"))
        self.assertEqual(shared.earlier, ())
        shared.close()
        self.assertFalse(os.path.exists(self.path("up.intents")))

    def test_a_record_name_that_is_not_a_file_name_of_the_folder_is_an_error(self) -> None:
        for name in ("../a.jsonl", "", "..", "a/b"):
            with self.subTest(name=name):
                self.write_bytes(self.path("up.intents"), ('{"args":{},"from":0,"intent":0,"key":null,"record":'
                                                           f'"{name}","tool":"t"}}\n').encode())
                with self.assertRaises(InputError) as caught:
                    open_shared_intents(self.path("up.intents"))
                self.assertEqual(str(caught.exception), f"{self.path('up.intents')}:1: not an intent line (expected "
                                                        "an intent or a done line)")


if __name__ == "__main__":
    unittest.main()


class MetaTest(RecorderCase):
    """Format 1.1: the recorder writes a record's `meta`, sealed like the rest, or leaves it out on request."""

    META = {"ts": "2026-12-01T16:00:00.123Z", "duration_ms": 4.5, "call_id": "7", "outcome": "ran"}

    def test_plain_record_with_meta(self) -> None:
        path = self.path()
        with SessionRecorder.open(path) as recorder:
            recorder.append("t", {"a": 1}, {"ok": True}, meta=self.META)
        self.assertEqual(self.read_bytes(path), (format_record(0, "t", {"a": 1}, {"ok": True}, self.META)
                                                 + "\n").encode())

    def test_sealed_record_with_meta_is_what_seal_writes(self) -> None:
        plain, sealed = self.path("plain.jsonl"), self.path("sealed.jsonl")
        for path, is_sealed in ((plain, False), (sealed, True)):
            with SessionRecorder.open(path, sealed=is_sealed) as recorder:
                recorder.append("t", {"a": 1}, {"ok": True}, meta=self.META)
                recorder.append("t", {"a": 2}, {"ok": True})
        code, out, err = cli("seal", plain)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(self.read_bytes(sealed).decode(), out)
        self.assertEqual(cli("verify", sealed), (0, "chain: intact\n", ""))
        # A continued record resumes after a record with meta.
        with SessionRecorder.open(sealed, sealed=True) as recorder:
            self.assertEqual(recorder.append("t", {"a": 3}, {}, meta={"outcome": "refused"}), 2)
        self.assertEqual(cli("verify", sealed), (0, "chain: intact\n", ""))

    def test_format_1_0_option_leaves_meta_out(self) -> None:
        path = self.path()
        with SessionRecorder.open(path, format_1_0=True) as recorder:
            recorder.append("t", {"a": 1}, {"ok": True}, meta=self.META)
        self.assertEqual(self.read_bytes(path), (format_record(0, "t", {"a": 1}, {"ok": True}) + "\n").encode())

    def test_a_meta_the_format_does_not_allow_writes_nothing(self) -> None:
        path = self.path()
        with SessionRecorder.open(path) as recorder:
            for meta, message in (({"ts": "yesterday"}, 'meta field "ts" must be an RFC 3339 time'),
                                  ({"turn": -1}, 'meta field "turn" must not be negative'),
                                  ({"mood": "calm"}, 'unknown meta field "mood"')):
                with self.subTest(message), self.assertRaises(ValueError) as caught:
                    recorder.append("t", {}, {}, meta=meta)
                self.assertIn(message, str(caught.exception))
            self.assertEqual(recorder.next_index, 0)
        self.assertEqual(self.read_bytes(path), b"")
