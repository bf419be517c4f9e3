"""Output files written whole or not at all, with the mode a user expects.

Every file a command writes (`seal -o`, `import -o`, `demo injection --record`) goes through
`write_atomically` (bytes written by the caller) or `replace_atomically` (a path the caller fills):

- a new path or a regular file: the data goes to a temporary file in the same folder, renamed over
  the target once complete. A new file gets the mode the umask allows (0666 minus the umask); a
  replaced file keeps its mode. Where the platform allows (Linux, most file systems) the temporary
  file has no name until it is complete (`O_TMPFILE`), so a killed process leaves nothing behind;
  elsewhere it is `.toolreplay-*.tmp`, removed on any error and on SIGTERM (the command line turns
  SIGTERM into a clean exit), but left by SIGKILL or a power cut;
- a symbolic link is followed: the file it points to is replaced, the link stays;
- anything else that is not a folder (a device such as /dev/null, a named pipe) is written
  directly, once the data is complete;
- a folder is refused.

Any failure (no space left, no permission, a read-only file system) is a `UsageError`:
`cannot write PATH: REASON`, and the target is left as it was.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO

from toolreplay.errors import UsageError

__all__ = ["Output", "write_atomically", "replace_atomically", "umask"]

_BATCH = 1 << 20
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000


def umask() -> int:
    """The process's umask, read without changing it where the platform tells it (Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # pragma: no cover - not Linux
    os.umask(mask)  # pragma: no cover
    return mask  # pragma: no cover


class Output:
    """A write-only binary sink that batches writes and reports a failure as `cannot write PATH`."""

    def __init__(self, handle: IO[bytes], shown: str) -> None:
        self._handle = handle
        self._shown = shown
        self._parts: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        """Add bytes to the output."""
        self._parts.append(data)
        self._size += len(data)
        if self._size >= _BATCH:
            self.flush()

    def write_all(self, chunks: Iterable[bytes]) -> None:
        """`write` each of `chunks`, in one call (a sealed file is written a line at a time)."""
        parts = self._parts
        size = self._size
        for data in chunks:
            parts.append(data)
            size += len(data)
            if size >= _BATCH:
                self._size = size
                self.flush()  # empties `parts` in place
                size = 0
        self._size = size

    def flush(self) -> None:
        """Hand what is batched to the operating system."""
        try:
            self._handle.write(b"".join(self._parts))
            self._handle.flush()
        except OSError as exc:
            raise _cannot_write(self._shown, exc) from None
        self._parts.clear()
        self._size = 0


def _cannot_write(shown: str, exc: OSError) -> UsageError:
    return UsageError(f"cannot write {shown}: {exc.strerror or exc}")


def _target(path: str) -> tuple[str, os.stat_result | None]:
    """The file to write (a symbolic link resolved) and its status, None when it does not exist."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    try:
        status = os.stat(target)
    except FileNotFoundError:
        return target, None
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    if stat.S_ISDIR(status.st_mode):
        raise UsageError(f"cannot write {path}: Is a directory")
    return target, status


def _mode(status: os.stat_result | None) -> int:
    return stat.S_IMODE(status.st_mode) if status is not None else 0o666 & ~umask()


def _open_unnamed(directory: str) -> int | None:
    """A file with no name yet in `directory` (Linux O_TMPFILE), or None where that is not possible."""
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(directory, flag | os.O_RDWR | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return None  # the file system does not support it: use a named temporary file


def _link(fd: int, name: str) -> None:
    """Give the unnamed file `fd` the name `name`: through /proc (any user), else AT_EMPTY_PATH (root)."""
    try:
        os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)
        return
    except OSError as first:
        error = first
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.linkat(fd, b"", _AT_FDCWD, os.fsencode(name), _AT_EMPTY_PATH) == 0:
            return
    except (OSError, AttributeError):  # pragma: no cover - no C library to call
        pass
    raise error


def _link_unnamed(fd: int, directory: str, target: str) -> None:
    """Name the complete unnamed file under a fresh temporary name, then rename that over `target`.
    Where the file cannot be linked, its bytes are copied into a named temporary file instead."""
    name = os.path.join(directory, f".toolreplay-{os.urandom(8).hex()}.tmp")
    try:
        _link(fd, name)
    except FileExistsError:  # pragma: no cover - 64 random bits
        raise
    except OSError:
        _copy_to_named(fd, name)
    try:
        os.replace(name, target)
    except BaseException:
        os.unlink(name)
        raise


def _copy_to_named(fd: int, name: str) -> None:
    copy = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(copy, stat.S_IMODE(os.fstat(fd).st_mode))
        offset = 0
        while True:
            data = os.pread(fd, _BATCH, offset)
            if not data:
                break
            view = memoryview(data)
            while view:
                view = view[os.write(copy, view):]
            offset += len(data)
        os.fsync(copy)
    except BaseException:
        os.close(copy)
        os.unlink(name)
        raise
    os.close(copy)


@contextmanager
def write_atomically(path: str) -> Iterator[Output]:
    """Yield an Output; when the block ends without an error, `path` holds exactly what was written."""
    target, status = _target(path)
    if status is not None and not stat.S_ISREG(status.st_mode):
        with tempfile.TemporaryFile() as spool:
            output = Output(spool, path)
            yield output
            output.flush()
            spool.seek(0)
            try:
                with open(target, "wb") as device:
                    shutil.copyfileobj(spool, device, _BATCH)
            except OSError as exc:
                raise _cannot_write(path, exc) from None
        return
    directory = os.path.dirname(os.path.abspath(target))
    fd = _open_unnamed(directory)
    name: str | None = None
    try:
        if fd is None:
            fd, name = tempfile.mkstemp(dir=directory, prefix=".toolreplay-", suffix=".tmp")
        os.fchmod(fd, _mode(status))
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        raise _cannot_write(path, exc) from None
    try:
        with open(fd, "wb", closefd=True) as handle:
            output = Output(handle, path)
            yield output
            output.flush()
            try:
                os.fsync(fd)
                if name is None:
                    _link_unnamed(fd, directory, target)
                else:
                    os.replace(name, target)
                    name = None
            except OSError as exc:
                raise _cannot_write(path, exc) from None
    finally:
        if name is not None and os.path.lexists(name):
            os.unlink(name)


@contextmanager
def replace_atomically(path: str) -> Iterator[str]:
    """Yield a temporary path for the caller to write; when the block ends without an error, `path`
    holds what the temporary file holds (its mode as `write_atomically` would set it)."""
    target, status = _target(path)
    directory = os.path.dirname(os.path.abspath(target))
    if status is not None and not stat.S_ISREG(status.st_mode):
        directory = None  # type: ignore[assignment]  # a device: fill a file elsewhere, then copy it
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".toolreplay-", suffix=".tmp")
        os.close(fd)
    except OSError as exc:
        raise _cannot_write(path, exc) from None
    try:
        yield name
        try:
            if status is not None and not stat.S_ISREG(status.st_mode):
                with open(name, "rb") as done, open(target, "wb") as device:
                    shutil.copyfileobj(done, device, _BATCH)
            else:
                os.chmod(name, _mode(status))
                os.replace(name, target)
        except OSError as exc:
            raise _cannot_write(path, exc) from None
    finally:
        if os.path.lexists(name):
            os.unlink(name)
