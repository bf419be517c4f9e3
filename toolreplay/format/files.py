"""Small private files written whole, and lock files: the one way the guard's side files do each.

`write_atomically` (format/output.py) writes a user's output file with the mode a user expects; these are
for the files the guard keeps beside a record (intents, a hook's pending calls, locks): created 0600
(they hold calls verbatim), and light to import (a hook process starts for every tool call).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["lock_descriptor", "locked", "open_private", "replace_privately"]


def open_private(path: str, flags: int) -> int:
    """An `opener` that creates files 0600 (the umask can only narrow it): records hold calls verbatim."""
    return os.open(path, flags, 0o600)


def replace_privately(path: str, chunks: Iterable[bytes], *, sync: bool = True) -> None:
    """Replace `path` with the chunks, whole or not at all: written to `PATH.tmp` (created 0600; a leftover is
    removed first, it would keep its own mode), synced (unless `sync=False`: whole for every reader, but a
    crash of the machine may leave the old file, or an empty one), renamed over `path`. OSError when it cannot."""
    temporary = path + ".tmp"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # a leftover: removed, not reused
        os.unlink(temporary)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with open(descriptor, "wb") as handle:
        for chunk in chunks:
            handle.write(chunk)
        handle.flush()
        if sync:
            os.fsync(handle.fileno())
    os.replace(temporary, path)


@contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the lock file `path` (created 0600) exclusively between processes, waiting for it; closing
    releases it. OSError when it cannot be opened or locked."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        lock_descriptor(descriptor)
        yield
    finally:
        os.close(descriptor)


def lock_descriptor(descriptor: int, *, wait: bool = True) -> None:
    """Lock an open file exclusively between processes (flock; nothing where the platform has none); with
    `wait=False`, an OSError at once when another holds it. Closing the file releases it."""
    if fcntl is not None:
        fcntl.flock(descriptor, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
