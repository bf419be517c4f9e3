"""The hook server (docs/hooks.md, "The hook server"): one process per records folder that has the guard loaded.

A hook is a new process per tool call; most of its time would be Python loading the guard. The fast hook
command (toolreplay/hooks/client.py) hands each event to this server over DIR/.toolreplay-hook.sock
(the protocol is toolreplay/hooks/protocol.py), and the server answers it with the hooks' own core, as
`toolreplay hook AGENT` does (toolreplay/hooks/reply.py): the same decision, the same record, the same
output bytes and exit code.

- One server per folder: it holds DIR/.toolreplay-hook.lock (flock) while it runs; a second one exits.
- Only in a private folder (the user's or root's, that neither its group nor others can write): elsewhere
  it does not start, and its clients decide their events themselves.
- The socket is the owner's only (mode 0600, in the owner's records folder).
- Each event is handled in a thread of its own; events of one session take turns on the session's lock,
  as separate processes do, and a hook process without the server can work beside it.
- It ends after `IDLE_SECONDS` without an event, or as soon as its socket is removed or replaced (the
  folder deleted, say), or on SIGTERM; it removes its socket first, so a client either reaches it or
  finds no server and handles the event itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time

from toolreplay.hooks.cache import HookCache
from toolreplay.hooks.protocol import (
    NOT_PATHS,
    SOCKET_NAME,
    frame_answer,
    identity,
    is_private_folder,
    parse_request,
    plain_options,
)
from toolreplay.hooks.reply import reply_to_event

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
_BINDING_NAME = ".toolreplay-hook.new"  # the socket until it listens (`_Server.run`)


def serve(records: str, idle_seconds: float = IDLE_SECONDS) -> int:
    """Serve DIR's hook events until idle; 0 when it ran or another server has the folder, 1 when it cannot
    start, or DIR is not private (the clients then handle their events themselves)."""
    records = os.path.abspath(records)
    if not is_private_folder(records):  # another user could reach or replace the socket: no server
        return 1
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
        self.cache = HookCache()  # the guards and each session's record, kept between events

    def run(self) -> int:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # The socket is made under another name and renamed into place once it listens: a client that finds
            # the socket can connect (one that came between bind and listen would be refused, decide itself and
            # start a second server for nothing). The name is no longer than the socket's (a path's limit).
            binding = os.path.join(os.path.dirname(self.path), _BINDING_NAME)
            try:
                if os.path.lexists(binding):
                    os.unlink(binding)  # a server that ended before renaming it: the folder's lock is ours
                mask = os.umask(0o077)
                try:
                    listener.bind(binding)
                finally:
                    os.umask(mask)
                os.chmod(binding, 0o600)
                listener.listen(64)
                os.replace(binding, self.path)  # (over one a server that ended left behind)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(binding)
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
                    self.cache.close()
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
                agent, options, cwd, data = request
                connection.sendall(b"A")  # from here on the event may be recorded: the client never redoes it
                if cwd != os.getcwd():  # the server's folder is its first client's: most events come from there
                    # the hook's file options as the client meant them: relative to the client's working folder
                    options = {name: value if name in NOT_PATHS else os.path.join(cwd, value)
                               for name, value in options.items()}
                reply = reply_to_event(data, options["--policy"], options["--records"], options.get("--redact-key"),
                                       agent, options.get("--inbox"), options.get("--inbox-timeout"), self.cache)
                connection.sendall(frame_answer(reply.code, reply.stdout.encode("utf-8"),
                                                reply.stderr.encode("utf-8", "surrogateescape")))
        except OSError:
            pass  # the client went away; whatever was decided is on record
        finally:
            with self.state:
                self.busy -= 1
                self.last = time.monotonic()

    def _read(self, connection: socket.socket) -> tuple[str, dict[str, str], str, bytes] | None:
        """The agent, the hook's options, the client's working folder and the event; None when it is none."""
        chunks, size = [], 0
        while chunk := connection.recv(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                return None
        request = parse_request(b"".join(chunks))
        if request is None:
            return None
        client, arguments, cwd, data = request
        if client != self.identity:
            connection.sendall(b"V")  # another version's client: it handles the event; this server ends
            self.stop.set()
            return None
        options = plain_options(arguments)
        if options is None:  # not an event of the fast client's: nothing is decided here
            return None
        return arguments[0], options, cwd, data
