"""The guard's side files: written whole and private, and lock files (toolreplay/format/files.py)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import unittest

from toolreplay.format.files import lock_descriptor, locked, replace_privately


class FilesTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.path = os.path.join(self.directory, "side")

    def mode(self, path: str) -> int:
        return stat.S_IMODE(os.stat(path).st_mode)

    def test_a_file_is_replaced_whole_and_private(self) -> None:
        with open(self.path + ".tmp", "wb") as leftover:  # a crash's leftover, readable by all: not reused
            leftover.write(b"old")
        os.chmod(self.path + ".tmp", 0o644)
        replace_privately(self.path, [b"one\n", b"two\n"])
        with open(self.path, "rb") as handle:
            self.assertEqual(handle.read(), b"one\ntwo\n")
        self.assertEqual((self.mode(self.path), os.listdir(self.directory)), (0o600, ["side"]))

    def test_a_lock_is_private_and_held_until_the_block_ends(self) -> None:
        lock = self.path + ".lock"
        with locked(lock):
            self.assertEqual(self.mode(lock), 0o600)
            other = os.open(lock, os.O_RDWR)
            try:
                with self.assertRaises(BlockingIOError):
                    lock_descriptor(other, wait=False)
            finally:
                os.close(other)
        other = os.open(lock, os.O_RDWR)
        try:
            lock_descriptor(other, wait=False)  # released
        finally:
            os.close(other)


if __name__ == "__main__":
    unittest.main()
