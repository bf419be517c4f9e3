"""Test helpers shared by the integration tests: a real component is required in CI, optional locally."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import unittest
from collections.abc import Sequence
from typing import Any

__all__ = ["IN_CI", "PATIENCE", "require", "integration", "is_integration", "kill_parent", "end_worker", "kill_process",
           "wait_for", "size_of"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PATIENCE = 60.0  # seconds a test waits for a server to start or end: the machine's load, not the verdict


def wait_for(condition: Any, what: str) -> None:
    """Until `condition()` is true; an AssertionError naming `what` after PATIENCE seconds."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {PATIENCE:.0f} s for {what}")
        time.sleep(0.005)


def size_of(path: str) -> int:
    """The file's size in bytes; 0 while it does not exist."""
    return os.path.getsize(path) if os.path.exists(path) else 0


def require(available: bool, reason: str) -> None:
    """Skip the calling test with a visible reason when a real component is missing; fail in CI (`CI=true`)."""
    if available:
        return
    if IN_CI:
        raise AssertionError(f"required in CI but missing: {reason}")
    raise unittest.SkipTest(reason)


def integration(cls: Any) -> Any:
    """Mark a test class as part of the integration tier: it starts a real component (an MCP server, a
    Dask cluster, a browser, OpenSSH), other processes, or reads the corpus. `tests.unit` leaves it out."""
    cls.integration_tier = True
    return cls


def is_integration(test: unittest.TestCase) -> bool:
    """Whether a test belongs to the integration tier: its class is marked, or its module sets
    `INTEGRATION_TIER = True`."""
    import sys

    module = sys.modules.get(type(test).__module__)
    return bool(getattr(type(test), "integration_tier", False) or getattr(module, "INTEGRATION_TIER", False))


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux: read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_parent(parent: subprocess.Popen[bytes], sig: int) -> tuple[int, list[int]]:
    """Send `sig` to a running parent: how many child processes it had, and those still alive 10 s later
    (killed then, so a failing test leaves nothing behind). Linux only."""
    workers = _children(parent.pid)
    parent.send_signal(sig)
    parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [pid for pid in workers if _alive(pid)]
    for pid in left:
        os.kill(pid, 9)
    return len(workers), left


def end_worker(batch: Sequence[Any], flag: str | None) -> list[Any]:
    """A batch function for engine tests: ends the process that runs it at once (a worker dying mid-run), every
    time when `flag` is None, else only the first time anywhere (creating `flag`); otherwise returns its batch."""
    if flag is not None:
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return list(batch)
    os._exit(1)


def kill_process(batch: Sequence[Any], pid: int) -> list[Any]:
    """A batch function for engine tests: kills process `pid` (a Dask scheduler, say), then returns its batch."""
    os.kill(pid, signal.SIGKILL)
    return list(batch)
