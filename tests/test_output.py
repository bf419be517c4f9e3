"""Output files and streams: written whole or not at all, with the expected mode, and every failure
to write is one `error:` line and exit 2 (a closed pipe: exit 141, quietly)."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any
from unittest import mock

from tests.support import integration, require
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import UsageError
from toolreplay.format.output import Output, replace_atomically, umask, write_atomically

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")
CLEAN = os.path.join(SAMPLES, "session-clean.jsonl")
OPENAI = os.path.join(SAMPLES, "import", "openai-chat.json")


def run(*argv: str) -> tuple[int, str, str]:
    io = IO.memory()
    code = main(list(argv), io)
    return code, io.out(), io.err()


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _sealed_clean() -> bytes:
    io = IO.memory()
    main(["seal", CLEAN], io)
    return io.out().encode()


class _Recording(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[int] = []

    def write(self, data: Any) -> int:
        self.writes.append(len(data))
        return super().write(data)


class WriteAllTest(unittest.TestCase):
    def test_the_bytes_of_write_in_batches_of_a_mebibyte(self) -> None:
        chunks = [bytes([65 + i % 26]) * (1000 + i) for i in range(3000)]  # about 7.5 MB
        for first in (b"", b"head"):
            with self.subTest(first=first):
                by_one, all_at_once = _Recording(), _Recording()
                for handle, many in ((by_one, False), (all_at_once, True)):
                    output = Output(handle, "x")
                    output.write(first)
                    if many:
                        output.write_all(iter(chunks))
                    else:
                        for chunk in chunks:
                            output.write(chunk)
                    output.write(b"tail")
                    output.flush()
                self.assertEqual(all_at_once.getvalue(), first + b"".join(chunks) + b"tail")
                self.assertEqual(all_at_once.writes, by_one.writes)
                self.assertEqual(len(all_at_once.writes), 8)


class ModesTest(unittest.TestCase):
    """seal -o, import -o and demo injection --record: the umask for a new file, the old mode for a replaced one."""

    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.old_umask = os.umask(0o077)
        self.addCleanup(os.umask, self.old_umask)

    def commands(self, target: str) -> list[list[str]]:
        return [["seal", CLEAN, "-o", target], ["import", "openai-chat", OPENAI, "-o", target],
                ["demo", "injection", "--record", target]]

    def test_new_files_respect_the_umask_and_replaced_files_keep_their_mode(self) -> None:
        for argv in self.commands(os.path.join(self.folder.name, "out.jsonl")):
            with self.subTest(argv[0]):
                target = argv[-1]
                if os.path.exists(target):
                    os.unlink(target)
                self.assertEqual(run(*argv)[0], 0)
                self.assertEqual(_mode(target), 0o600)
                os.chmod(target, 0o640)
                self.assertEqual(run(*argv)[0], 0)
                self.assertEqual(_mode(target), 0o640)
                os.umask(0o022)
                os.unlink(target)
                self.assertEqual(run(*argv)[0], 0)
                self.assertEqual(_mode(target), 0o644)
                os.umask(0o077)
                self.assertEqual(sorted(os.listdir(self.folder.name)), ["out.jsonl"])

    def test_umask_is_read_without_changing_it(self) -> None:
        self.assertEqual(umask(), 0o077)
        self.assertEqual(os.umask(0o077), 0o077)


class TargetsTest(unittest.TestCase):
    """What `seal -o` does with a symbolic link, a device, a folder."""

    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def test_a_symbolic_link_is_followed(self) -> None:
        real = os.path.join(self.folder.name, "real.sealed")
        link = os.path.join(self.folder.name, "link.sealed")
        with open(real, "wb") as handle:
            handle.write(b"old\n")
        os.chmod(real, 0o600)
        os.symlink("real.sealed", link)
        self.assertEqual(run("seal", CLEAN, "-o", link), (0, "", ""))
        self.assertTrue(os.path.islink(link))
        with open(real, "rb") as handle:
            self.assertEqual(handle.read(), _sealed_clean())
        self.assertEqual(_mode(real), 0o600)
        self.assertEqual(sorted(os.listdir(self.folder.name)), ["link.sealed", "real.sealed"])

    def device(self, name: str, minor: int) -> str:
        """A private copy of /dev/null (minor 3) or /dev/full (minor 7): the system's own are never risked."""
        path = os.path.join(self.folder.name, name)
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        except (OSError, AttributeError):
            require(False, "making a device node (root on Linux)")
        return path

    def test_a_device_is_written_directly_and_stays_a_device(self) -> None:
        null = self.device("null", 3)
        self.assertEqual(run("seal", CLEAN, "-o", null), (0, "", ""))
        self.assertTrue(stat.S_ISCHR(os.stat(null).st_mode))

    def test_every_command_with_an_output_file_leaves_a_device_a_device(self) -> None:
        null = self.device("null", 3)
        sessions = os.path.join(self.folder.name, "sessions")
        os.mkdir(sessions)
        with open(CLEAN, "rb") as source, open(os.path.join(sessions, "s.jsonl"), "wb") as copy:
            copy.write(source.read())
        for argv in (["seal", CLEAN, "-o", null], ["import", "openai-chat", OPENAI, "-o", null],
                     ["audit", sessions, "-o", null], ["demo", "injection", "--record", null]):
            with self.subTest(argv[0]):
                self.assertEqual(run(*argv)[0] in (0, 1), True)
                self.assertTrue(stat.S_ISCHR(os.stat(null).st_mode))
        self.assertEqual(sorted(os.listdir(self.folder.name)), ["null", "sessions"])

    def test_a_named_pipe_is_written_directly(self) -> None:
        import threading

        fifo = os.path.join(self.folder.name, "fifo")
        os.mkfifo(fifo)
        received: list[bytes] = []

        def read() -> None:
            with open(fifo, "rb") as pipe:
                received.append(pipe.read())

        reader = threading.Thread(target=read)
        reader.start()
        self.assertEqual(run("seal", CLEAN, "-o", fifo), (0, "", ""))
        reader.join()
        self.assertEqual(received, [_sealed_clean()])
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))

    def test_a_full_device_is_an_error_and_stays_a_device(self) -> None:
        full = self.device("full", 7)
        self.assertEqual(run("seal", CLEAN, "-o", full),
                         (2, "", f"error: cannot write {full}: No space left on device\n"))
        self.assertTrue(stat.S_ISCHR(os.stat(full).st_mode))

    def test_a_folder_is_refused(self) -> None:
        self.assertEqual(run("seal", CLEAN, "-o", self.folder.name),
                         (2, "", f"error: cannot write {self.folder.name}: Is a directory\n"))

    def test_an_input_error_leaves_the_target_as_it_was(self) -> None:
        target = os.path.join(self.folder.name, "out.sealed")
        bad = os.path.join(self.folder.name, "bad.jsonl")
        with open(bad, "wb") as handle:
            handle.write(b"{\n")
        with open(target, "wb") as handle:
            handle.write(b"old\n")
        self.assertEqual(run("seal", bad, "-o", target)[0], 2)
        with open(target, "rb") as handle:
            self.assertEqual(handle.read(), b"old\n")
        self.assertEqual(sorted(os.listdir(self.folder.name)), ["bad.jsonl", "out.sealed"])


def _mount_tmpfs(folder: str) -> bool:
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", folder],
                          capture_output=True).returncode == 0


@integration
class FullDiskTest(unittest.TestCase):
    """A full file system: a real small tmpfs where this process may mount one, else a simulated ENOSPC."""

    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.session = os.path.join(self.folder.name, "big.jsonl")
        with open(self.session, "w", encoding="utf-8") as handle:
            for index in range(2000):
                handle.write(json.dumps({"index": index, "tool": "t", "args": {"n": index},
                                         "response": {"text": "x" * 40}}) + "\n")
        self.disk = os.path.join(self.folder.name, "disk")
        os.mkdir(self.disk)

    def test_seal_onto_a_full_disk(self) -> None:
        target = os.path.join(self.disk, "out.sealed")
        if _mount_tmpfs(self.disk):
            self.addCleanup(subprocess.run, ["umount", self.disk], check=False)
            with open(target, "wb") as handle:
                handle.write(b"old\n")
            self.assertEqual(run("seal", self.session, "-o", target),
                             (2, "", f"error: cannot write {target}: No space left on device\n"))
        else:
            with open(target, "wb") as handle:
                handle.write(b"old\n")
            with mock.patch("os.fsync", side_effect=OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))):
                self.assertEqual(run("seal", self.session, "-o", target),
                                 (2, "", f"error: cannot write {target}: No space left on device\n"))
        with open(target, "rb") as handle:
            self.assertEqual(handle.read(), b"old\n")
        self.assertEqual(os.listdir(self.disk), ["out.sealed"])


class LibraryTest(unittest.TestCase):
    def test_write_atomically_keeps_nothing_after_an_error(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            target = os.path.join(folder, "f")
            with self.assertRaises(KeyError), write_atomically(target) as output:
                output.write(b"partial")
                raise KeyError("stop")
            self.assertEqual(os.listdir(folder), [])
            with write_atomically(target) as output:
                output.write(b"whole")
            with open(target, "rb") as handle:
                self.assertEqual(handle.read(), b"whole")

    def test_replace_atomically_gives_a_path_to_fill(self) -> None:
        with tempfile.TemporaryDirectory() as folder:
            target = os.path.join(folder, "f")
            with replace_atomically(target) as spool:
                with open(spool, "w", encoding="utf-8") as handle:
                    handle.write("x")
            with open(target, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), "x")
            with self.assertRaises(UsageError), replace_atomically(folder):
                pass
            self.assertEqual(os.listdir(folder), ["f"])


def _command(*argv: str) -> list[str]:
    return [sys.executable, "-m", "toolreplay", *argv]


@integration
class StreamsTest(unittest.TestCase):
    """Real processes: standard output on a full device, a closed pipe, SIGTERM and SIGKILL mid-seal."""

    def setUp(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.env = {**os.environ, "PYTHONPATH": ROOT}

    def test_standard_output_on_a_full_device(self) -> None:
        require(os.path.exists("/dev/full"), "/dev/full (Linux)")
        sealed = os.path.join(self.folder.name, "s.sealed")
        with open(sealed, "wb") as handle:
            handle.write(_sealed_clean())
        for argv in (["verify", sealed], ["replay", CLEAN], ["seal", CLEAN], ["version"]):
            with self.subTest(argv[0]), open("/dev/full", "wb") as full:
                done = subprocess.run(_command(*argv), stdout=full, stderr=subprocess.PIPE, env=self.env)
                self.assertEqual((done.returncode, done.stderr.decode()),
                                 (2, "error: cannot write standard output: No space left on device\n"))

    def test_a_closed_pipe_exits_141_quietly(self) -> None:
        big = os.path.join(self.folder.name, "big.jsonl")
        with open(big, "w", encoding="utf-8") as handle:
            for index in range(6000):
                handle.write(json.dumps({"index": index, "tool": "read", "args": {}, "response": {"t": index % 3}})
                             + "\n")
        process = subprocess.Popen(_command("replay", big), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   env=self.env)
        assert process.stdout is not None and process.stderr is not None
        self.assertEqual(process.stdout.readline(), b"calls: 6000\n")
        process.stdout.close()
        self.assertEqual((process.wait(), process.stderr.read()), (141, b""))
        process.stderr.close()

    def seal_from_a_fifo(self, sig: int) -> tuple[int, list[str]]:
        """Start `seal FIFO -o out`, feed it part of a session, send `sig` while it waits for the rest."""
        fifo = os.path.join(self.folder.name, "in.fifo")
        os.mkfifo(fifo)
        out = os.path.join(self.folder.name, "out", "s.sealed")
        os.mkdir(os.path.dirname(out))
        process = subprocess.Popen(_command("seal", fifo, "-o", out), stderr=subprocess.PIPE, env=self.env)
        with open(fifo, "wb") as feed:
            with open(CLEAN, "rb") as handle:
                feed.write(handle.read())
            feed.flush()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not self._blocked_reading(process.pid):
                time.sleep(0.05)
            process.send_signal(sig)
            code = process.wait()
        assert process.stderr is not None
        process.stderr.close()
        return code, os.listdir(os.path.dirname(out))

    @staticmethod
    def _blocked_reading(pid: int) -> bool:
        """Whether the process sleeps with the output's temporary file open (so it is mid-seal)."""
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
            targets = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            return False
        return state == "S" and any("/out/" in target for target in targets)

    def test_sigterm_mid_seal_leaves_no_temporary_file(self) -> None:
        require(sys.platform.startswith("linux"), "Linux /proc")
        self.assertEqual(self.seal_from_a_fifo(signal.SIGTERM), (143, []))

    def test_sigkill_mid_seal_leaves_no_temporary_file(self) -> None:
        require(sys.platform.startswith("linux"), "Linux /proc")
        self.assertEqual(self.seal_from_a_fifo(signal.SIGKILL), (-signal.SIGKILL, []))


if __name__ == "__main__":
    unittest.main()
