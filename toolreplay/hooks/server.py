"""The hook server (docs/hooks.md, "The hook server"): one process per records folder that has the guard loaded.

A hook is a new process per tool call; most of its time would be Python loading the guard. The fast hook
command (toolreplay/cli/hook_client.py) hands each event to this server over DIR/.toolreplay-hook.sock,
and the server runs it through the command line's own `hook AGENT` (`toolreplay.cli.main`, with the
event as standard input): the same decision, the same record, the same output bytes and exit code.

- One server per folder: it holds DIR/.toolreplay-hook.lock (flock) while it runs; a second one exits.
- The socket is the owner's only (mode 0600, in the owner's records folder).
- Each event is handled in a thread of its own; events of one session take turns on the session's lock,
  as separate processes do, and a hook process without the server can work beside it.
- It ends after `IDLE_SECONDS` without an event, or as soon as its socket is removed or replaced (the
  folder deleted, say), or on SIGTERM; it removes its socket first, so a client either reaches it or
  finds no server and handles the event itself.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

from toolreplay.cli import main as command_line
from toolreplay.cli._io import IO
from toolreplay.hooks.client import PROTOCOL, SOCKET_NAME, identity

try:
    import fcntl
except ImportError:  # pragma: no cover - platform dependent
    fcntl = None  # type: ignore[assignment]

__all__ = ["IDLE_SECONDS", "LOCK_NAME", "MAX_REQUEST_BYTES", "serve"]

LOCK_NAME = ".toolreplay-hook.lock"
IDLE_SECONDS = 600.0
# The largest event taken (a Write's whole content is in its tool_input); a larger one is handled by the
# client itself.
MAX_REQUEST_BYTES = 64 << 20
_READ_SECONDS = 10.0  # a client sends its whole request at once; one that stalls is dropped
_TICK_SECONDS = 0.25


def serve(records: str, idle_seconds: float = IDLE_SECONDS) -> int:
    """Serve DIR's hook events until idle; 0 when it ran or another server has the folder, 1 when it cannot
    start (the clients then handle their events themselves)."""
    records = os.path.abspath(records)
    try:
        lock = os.open(os.path.join(records, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return 1
    try:
        if fcntl is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return 0  # another server has the folder
        return _Server(records, idle_seconds).run()
    finally:
        os.close(lock)


class _Server:
    def __init__(self, records: str, idle_seconds: float) -> None:
        self.path = os.path.join(records, SOCKET_NAME)
        self.idle_seconds = idle_seconds
        self.identity = identity()
        self.busy = 0
        self.last = time.monotonic()
        self.state = threading.Lock()
        self.stop = threading.Event()

    def run(self) -> int:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                if os.path.lexists(self.path):
                    os.unlink(self.path)  # a server that ended without removing it: the folder's lock is ours
                mask = os.umask(0o077)
                try:
                    listener.bind(self.path)
                finally:
                    os.umask(mask)
                os.chmod(self.path, 0o600)
                listener.listen(64)
            except OSError:
                return 1
            mine = os.stat(self.path).st_ino
            if threading.current_thread() is threading.main_thread():  # a server in a test's thread keeps it
                signal.signal(signal.SIGTERM, lambda *_: self.stop.set())
            listener.settimeout(_TICK_SECONDS)
            while not self.stop.is_set():
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    if self._should_end(mine):
                        break
                    continue
                except OSError:
                    break
                with self.state:
                    self.busy += 1
                threading.Thread(target=self._serve_one, args=(connection,), daemon=True).start()
        finally:
            self._remove(mine if "mine" in locals() else None)
            listener.close()
        # the events in hand are finished before the process ends
        while True:
            with self.state:
                if not self.busy:
                    return 0
            time.sleep(0.01)

    def _should_end(self, mine: int) -> bool:
        try:
            if os.stat(self.path).st_ino != mine:
                return True  # removed or replaced: another server, or the folder is gone
        except OSError:
            return True
        with self.state:
            return not self.busy and time.monotonic() - self.last > self.idle_seconds

    def _remove(self, mine: int | None) -> None:
        try:
            if mine is not None and os.stat(self.path).st_ino == mine:
                os.unlink(self.path)
        except OSError:
            pass

    def _serve_one(self, connection: socket.socket) -> None:
        try:
            with connection:
                connection.settimeout(_READ_SECONDS)
                request = self._read(connection)
                if request is None:
                    return  # closed without an answer: the client handles the event itself
                arguments, cwd, data = request
                connection.sendall(b"A")  # from here on the event may be recorded: the client never redoes it
                io = IO.memory(data)
                if cwd != os.getcwd():  # the server's folder is its first client's: most events come from there
                    arguments = _absolute(arguments, cwd)
                code = command_line(["hook", *arguments], io)
                out, err = io.out().encode("utf-8"), io.err().encode("utf-8", "surrogateescape")
                connection.sendall(b"%d\0%d\0" % (code, len(out)) + out + err)
        except OSError:
            pass  # the client went away; whatever was decided is on record
        finally:
            with self.state:
                self.busy -= 1
                self.last = time.monotonic()

    def _read(self, connection: socket.socket) -> tuple[list[str], str, bytes] | None:
        chunks, size = [], 0
        while chunk := connection.recv(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                return None
        parts = b"".join(chunks).split(b"\0", 4)
        if len(parts) != 5 or parts[0] != PROTOCOL:
            return None
        if parts[1] != self.identity:
            connection.sendall(b"V")  # another version's client: it handles the event; this server ends
            self.stop.set()
            return None
        if not parts[3].isdigit():
            return None
        count = int(parts[3])
        rest = parts[4].split(b"\0", count)
        if len(rest) != count + 1:
            return None
        arguments = [part.decode("utf-8", "surrogateescape") for part in rest[:count]]
        return arguments, parts[2].decode("utf-8", "surrogateescape"), rest[count]


def _absolute(arguments: list[str], cwd: str) -> list[str]:
    """The hook's file options as the client meant them: relative to the client's working folder."""
    resolved = list(arguments)
    for position in range(2, len(resolved), 2):
        if resolved[position - 1].startswith("--") and not resolved[position].startswith("/"):
            resolved[position] = os.path.join(cwd, resolved[position])
    return resolved
