"""`toolreplay audit`: which files it reads (regular files only, in folders and globs), unreadable folders,
the line limit, and one read per session."""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from unittest import mock

from tests.test_cli import run
from toolreplay.audit.fleet import SessionJob, find_sessions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLES = os.path.join(ROOT, "samples")

DIRTY_LINES = (
    "  index 2: redundant-call: tool 'read_file' repeats the identical call at index 1 with no state change between "
    "them\n"
    "  index 5: non-determinism: tool 'search' returned a different response than the identical call at index 3\n"
)
SUMMARY_TAIL = """\
calls: 6
sessions with findings: 1
findings: 2
sealed: 0
broken chains: 0
findings by kind:
  non-determinism: 1
  redundant-call: 1
findings by tool:
  read_file: 1
  search: 1
most distinct calls with findings:
  2 distinct calls, 2 findings, 6 calls: fleet/a.jsonl
"""


class FleetFolder(unittest.TestCase):
    """A fleet in a temporary folder, the current directory during each test."""

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        cwd = os.getcwd()
        os.chdir(folder.name)
        self.addCleanup(os.chdir, cwd)
        os.makedirs("fleet/sub")
        shutil.copy(os.path.join(SAMPLES, "session-dirty.jsonl"), "fleet/a.jsonl")


class RegularFilesOnlyTest(FleetFolder):
    def setUp(self) -> None:
        super().setUp()
        os.mkfifo("fleet/pipe.jsonl")  # opened for reading, it would wait for a writer for ever
        os.symlink("/dev/zero", "fleet/sub/zero.jsonl")  # read, it would never end

    def test_a_named_pipe_and_a_link_to_a_device_are_skipped_not_opened(self) -> None:
        real_open = open
        opened: list[str] = []

        def recording_open(path: object, *args: object, **kwargs: object) -> object:
            opened.append(str(path))
            if str(path).endswith(("pipe.jsonl", "zero.jsonl")):  # fail here rather than hang or fill memory
                raise AssertionError(f"opened {path}")
            return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

        with mock.patch("builtins.open", recording_open):
            code, out, err = run("audit", "fleet", "--jobs", "1")
        self.assertEqual(code, 1)
        self.assertEqual(out, "fleet/a.jsonl: calls 6, findings 2, divergence index 5\n" + DIRTY_LINES +
                         "fleet/pipe.jsonl: skipped: not a regular file (named pipe)\n"
                         "fleet/sub/zero.jsonl: skipped: not a regular file (character device)\n"
                         "\nsessions: 1\nunreadable: 0\nskipped: 2\n" + SUMMARY_TAIL)
        self.assertEqual(err, "warning: fleet/pipe.jsonl: skipped: not a regular file (named pipe)\n"
                              "warning: fleet/sub/zero.jsonl: skipped: not a regular file (character device)\n")
        self.assertEqual([path for path in opened if path.endswith(".jsonl")], [os.path.abspath("fleet/a.jsonl")])

    def test_globs_skip_them_too_and_json_lists_them_in_the_summary(self) -> None:
        code, out, _ = run("audit", "fleet/**/*.jsonl", "--format", "json")
        self.assertEqual(code, 1)
        self.assertIn('"skipped": 2,\n    "skipped_files": [\n      {\n        "path": "fleet/pipe.jsonl",\n'
                      '        "reason": "not a regular file (named pipe)"\n      },\n', out)
        self.assertNotIn('"path": "fleet/pipe.jsonl",\n      "error"', out)

    def test_a_file_named_on_its_own_is_read_whatever_it_is(self) -> None:
        self.assertEqual(find_sessions(["fleet/sub/zero.jsonl"]),
                         [SessionJob(os.path.abspath("fleet/sub/zero.jsonl"), "fleet/sub/zero.jsonl")])
        code, out, err = run("audit", "fleet/sub/zero.jsonl", "--max-line-bytes", "1000")
        self.assertEqual((code, err), (2, "error: fleet/sub/zero.jsonl:1: line longer than 1000 bytes\n"))
        self.assertTrue(out.startswith("fleet/sub/zero.jsonl: unreadable: fleet/sub/zero.jsonl:1: line longer"))

    def test_a_fleet_without_skipped_files_has_no_skipped_line(self) -> None:
        os.unlink("fleet/pipe.jsonl")
        os.unlink("fleet/sub/zero.jsonl")
        code, out, err = run("audit", "fleet")
        self.assertEqual((code, err), (1, ""))
        self.assertNotIn("skipped", out)


class UnreadableFolderTest(FleetFolder):
    """Tests run as root here, where chmod does not stop a read: the listing of the folder fails instead."""

    def setUp(self) -> None:
        super().setUp()
        shutil.copy(os.path.join(SAMPLES, "session-clean.jsonl"), "fleet/sub/hidden.jsonl")
        real_scandir = os.scandir

        def scandir(path: str) -> object:
            if os.path.abspath(path) == os.path.abspath("fleet/sub"):
                raise PermissionError(13, "Permission denied", path)
            return real_scandir(path)

        patcher = mock.patch("os.scandir", scandir)
        patcher.start()
        self.addCleanup(patcher.stop)

    def test_it_is_an_unreadable_entry_and_exit_2(self) -> None:
        code, out, err = run("audit", "fleet", "--jobs", "1")
        self.assertEqual((code, err), (2, "error: fleet/sub: cannot read folder: Permission denied\n"))
        self.assertEqual(out, "fleet/a.jsonl: calls 6, findings 2, divergence index 5\n" + DIRTY_LINES +
                         "fleet/sub: unreadable: fleet/sub: cannot read folder: Permission denied\n"
                         "\nsessions: 2\nunreadable: 1\n" + SUMMARY_TAIL)

    def test_allow_unreadable_reports_it_without_exit_2(self) -> None:
        code, out, err = run("audit", "fleet", "--allow-unreadable")
        self.assertEqual((code, err), (1, "warning: fleet/sub: cannot read folder: Permission denied\n"))
        self.assertIn("fleet/sub: unreadable: fleet/sub: cannot read folder: Permission denied\n", out)

    def test_a_recursive_glob_reports_it_too(self) -> None:
        code, out, err = run("audit", "fleet/**/*.jsonl")
        self.assertEqual((code, err), (2, "error: fleet/sub: cannot read folder: Permission denied\n"))
        self.assertIn("fleet/sub: unreadable: fleet/sub: cannot read folder: Permission denied\n", out)
        code, out, err = run("audit", os.path.abspath("fleet") + "/**/*.jsonl")
        self.assertEqual((code, err), (2, f"error: {os.path.abspath('fleet/sub')}: cannot read folder: Permission "
                                          "denied\n"))

    def test_the_folder_named_itself(self) -> None:
        self.assertEqual(run("audit", "fleet/sub")[0:3:2],
                         (2, "error: fleet/sub: cannot read folder: Permission denied\n"))


class OneReadPerSessionTest(FleetFolder):
    """Replay, scope, the chain and the checkpoint of a session all come from one pass over one open file."""

    def setUp(self) -> None:
        super().setUp()
        self.assertEqual(run("seal", "fleet/a.jsonl", "-o", "sealed.jsonl")[0], 0)
        with open("sealed.jsonl", encoding="utf-8") as handle:
            links = handle.read().splitlines(keepends=True)
        links[3] = links[3].replace('"install"', '"uninstall"')  # edited after sealing: the chain breaks at 3
        os.unlink("fleet/a.jsonl")
        with open("fleet/s.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(links)
        # the scrubbed copy someone swaps in: a clean session, sealed again, its chain intact
        self.assertEqual(run("seal", os.path.join(SAMPLES, "session-clean.jsonl"), "-o", "scrubbed.jsonl")[0], 0)
        self.real_open = open

    def swapping_open(self, opened: list[str]) -> object:
        """An `open` that replaces fleet/s.jsonl by the scrubbed copy right after its first open."""
        target = os.path.abspath("fleet/s.jsonl")

        def swap(path: object, *args: object, **kwargs: object) -> object:
            handle = self.real_open(path, *args, **kwargs)  # type: ignore[call-overload]
            if path == target:
                opened.append(str(path))
                if len(opened) == 1:
                    os.replace("scrubbed.jsonl", target)
            return handle

        return swap

    def test_the_session_is_opened_once(self) -> None:
        opened: list[str] = []
        with mock.patch("builtins.open", self.swapping_open(opened)), \
                mock.patch("toolreplay.audit.fleet._unchanged", return_value=True, create=True):
            code, out, _ = run("audit", "fleet", "--jobs", "1")
        self.assertEqual(len(opened), 1)
        # findings and chain verdict from the same bytes: the real file's (the swap came after the open)
        self.assertEqual((code, out.splitlines()[0]),
                         (1, "fleet/s.jsonl: calls 6, findings 1, chain broken at index 3"))

    def test_a_file_swapped_while_it_is_read_is_an_error_for_that_session(self) -> None:
        with mock.patch("builtins.open", self.swapping_open([])):
            code, out, err = run("audit", "fleet", "--jobs", "1")
        message = ("fleet/s.jsonl: file changed while it was read (replaced, removed, truncated or written to); "
                   "read it again")
        self.assertEqual((code, out.splitlines()[0], err),
                         (2, f"fleet/s.jsonl: unreadable: {message}", f"error: {message}\n"))

    def test_a_sealed_session_out_of_index_order_still_gets_its_whole_chain(self) -> None:
        with open("fleet/s.jsonl", encoding="utf-8") as handle:
            links = handle.read().splitlines(keepends=True)
        with open("fleet/s.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(links[:2] + links[3:])  # a link deleted: index 3 where 2 was expected
        code, out, _ = run("audit", "fleet")
        self.assertEqual((code, out.splitlines()[0]),
                         (2, "fleet/s.jsonl: unreadable: fleet/s.jsonl:3: index 3 out of order: expected 2"))
        self.assertIn("\nbroken chains: 1\n", out)


if __name__ == "__main__":
    unittest.main()
