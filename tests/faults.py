"""Faults for the guard's tests: a real small full filesystem (root on Linux) and a simulated ENOSPC."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import unittest
from typing import Any

__all__ = ["FullDiskHandle", "fill", "small_tmpfs"]


def small_tmpfs(test: unittest.TestCase, size: str = "64k") -> str:
    """Mount a tmpfs of `size` for the test (unmounted at cleanup); skip the test when that is not possible."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        raise unittest.SkipTest("mounting a small tmpfs needs root on Linux (the simulated full disk test runs)")
    directory = tempfile.mkdtemp()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", directory],
                            capture_output=True, check=False)
    if result.returncode != 0:
        os.rmdir(directory)
        raise unittest.SkipTest("cannot mount a tmpfs here: " + result.stderr.decode(errors="replace").strip())

    def unmount() -> None:
        subprocess.run(["umount", "-l", directory], capture_output=True, check=False)
        os.rmdir(directory)

    test.addCleanup(unmount)
    return directory


def fill(directory: str) -> str:
    """Write a filler file until the filesystem is full; return its path (delete it to free the space)."""
    path = os.path.join(directory, "filler")
    with open(path, "wb", buffering=0) as handle:
        while True:
            try:
                handle.write(b"\0" * 512)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return path


class FullDiskHandle:
    """Wraps a real unbuffered file: each write puts `partial` bytes on disk, then raises ENOSPC."""

    def __init__(self, real: Any, partial: int = 7) -> None:
        self.real = real
        self.partial = partial
        self.full = True

    def write(self, data: Any) -> int:
        if not self.full:
            return int(self.real.write(data))
        if self.partial:
            self.real.write(bytes(data[: self.partial]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)
