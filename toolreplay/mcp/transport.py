"""The MCP proxy's transport: one session's two ends, the client's and the server's, joined by a link.

A transport moves whole JSON-RPC messages (one per line, ending in LF) and knows nothing of what they
mean. It has two ends, each behind a small protocol so that other transports can take their place:

- a `ClientEnd` is where the client's messages come from and where the proxy's answers go
  (`StdioClient`: the proxy's own stdin/stdout);
- a `ServerEnd` is the upstream server (`StdioServer`: a child process on its stdin/stdout).

`SessionLink` joins one client end and one server end for the router: it starts both, serialises the
writes to each, ends the session when either side ends, and writes the proxy's own messages to the
diagnostics stream.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol, TextIO, TypeVar

from toolreplay.errors import UsageError
from toolreplay.mcp.wire import read_lines

if TYPE_CHECKING:
    import asyncio

__all__ = ["UNPARSED", "ClientEnd", "LineHandler", "MessageHandler", "PendingAnswer", "ServerEnd", "SessionLink",
           "SoonAnswer", "StdioClient", "StdioServer", "say_to"]

LineHandler = Callable[[bytes], None]
_T = TypeVar("_T")
Ended = Callable[[str], None]
# What stands for "not parsed yet" where a line may come with its message already parsed: a layer that
# parsed a line hands on the message too, so that a message is parsed once on its way through the proxy.
UNPARSED: Any = object()


class MessageHandler(Protocol):
    """A line handler that may also be given the line's message, parsed already (or UNPARSED)."""

    def __call__(self, line: bytes, message: Any = UNPARSED, /) -> None:
        """Handle one whole line; `message` is its parsed JSON when the caller has it."""


class PendingAnswer(Protocol):
    """A request a server end sent from the calling thread, whose answer that thread reads (`complete`)
    rather than a thread of the end's own: one thread switch less each way."""

    def complete(self) -> None:
        """Read the answer and hand it on (the end's `on_line`), on this thread; or hand the reading to the
        end's own thread when the answer is not one this thread reads (then it is handed on later)."""

    def abandon(self) -> None:
        """From any thread: nothing waits for the answer any more (the call was cancelled, the server ended);
        `complete` returns, handing nothing on."""


class SoonAnswer(Protocol):
    """A request a server end sent from its event loop at once (`send_soon`), whose answer the calling task
    reads: `answer` hands it on (the end's `on_line`) in that task."""

    async def answer(self) -> None:
        """Read the answer and hand it on, in the calling task."""

    def abandon(self) -> None:
        """From any thread: nothing waits for the answer any more (the call was cancelled); `answer` ends,
        handing nothing on."""


class ClientEnd(Protocol):
    """The client's side of one session."""

    def start(self, on_line: LineHandler, on_ended: Ended) -> None:
        """Start handing each message the client sends to `on_line` (a whole line, LF-terminated or the
        last one); call `on_ended(reason)` once when the client is gone."""

    def send(self, data: bytes) -> None:
        """Deliver one or more whole lines to the client; raise OSError when the client is gone."""

    def close(self) -> None:
        """Stop reading and release what the end holds; called once, when the session ends."""


class ServerEnd(Protocol):
    """The upstream server of one session."""

    def start(self, on_line: LineHandler, on_ended: Ended) -> None:
        """Connect to (or start) the server and hand each message it sends to `on_line`; call
        `on_ended(reason)` once when it is gone. A server that cannot be reached is a UsageError."""

    def send(self, data: bytes) -> None:
        """Deliver one or more whole lines to the server; raise OSError when it no longer reads them."""

    def close(self) -> int:
        """End the connection (stop the process), wait for the reader to finish; the exit status."""


class StdioClient:
    """The client on the proxy's own input and output.

    One thread at a time reads and hands a line to `on_line`, so the lines are handled in order. A line
    that will take long (a tools/call, which waits for the server) may be kept by its thread: `hand_over`,
    called from `on_line`, lets another thread read on while this one goes on with the line, so the call
    needs no hand-off to a worker thread (one thread switch less on its way), and the next line is read
    meanwhile. A thread that kept a line reads again, in turn, when it is done."""

    def __init__(self, client_in: IO[bytes], client_out: IO[bytes]) -> None:
        self._in = client_in
        self._out = client_out
        self._reading = threading.Lock()  # held by the thread that reads and hands on the next line
        self._reader: int | None = None  # that thread's ident, None once it handed the reading over
        self._counts = threading.Lock()
        self._threads = 0  # reading threads, and of them those that kept a line
        self._keeping = 0
        self._ended = False

    def start(self, on_line: LineHandler, on_ended: Ended) -> None:
        """A reader thread hands every non-blank line to `on_line`."""
        self._lines = read_lines(self._in)
        self._on_line, self._on_ended = on_line, on_ended
        self._spawn()

    def _spawn(self) -> None:
        with self._counts:
            self._threads += 1
        threading.Thread(target=self._read, name="mcp-client-reader", daemon=True).start()

    def _read(self) -> None:
        while True:
            self._reading.acquire()
            if self._ended:
                self._reading.release()
                return
            self._reader = threading.get_ident()
            reason = None
            try:
                line = next(self._lines, None)
                if line is None:
                    reason = "client closed its input"
            except (OSError, ValueError) as exc:
                line, reason = None, f"client input failed: {exc}"
            if line is None:
                self._ended = True
                self._reading.release()
                self._on_ended(reason or "client closed its input")
                return
            try:
                if line.strip():
                    self._on_line(line)
            finally:
                if self._reader == threading.get_ident():  # not handed over: the next line is read by this thread
                    self._reading.release()
                else:
                    with self._counts:
                        self._keeping -= 1

    def hand_over(self) -> bool:
        """From `on_line`: let another thread read on while this one keeps its line; False when the thread
        is not the one reading (then it must not keep the line)."""
        if self._reader != threading.get_ident():
            return False
        self._reader = None
        with self._counts:
            self._keeping += 1
            spawn = self._threads == self._keeping  # none waits to read: one more thread
        if spawn:
            self._spawn()
        self._reading.release()
        return True

    def send(self, data: bytes) -> None:
        """Write and flush; a closed output is an OSError."""
        try:
            self._out.write(data)
            self._out.flush()
        except ValueError as exc:  # a closed file object
            raise OSError(str(exc)) from None

    def close(self) -> None:
        """Nothing to release: the proxy's own streams belong to its caller."""


class StdioServer:
    """The server as a child process: its stdin takes the lines, its stdout gives them."""

    def __init__(self, command: list[str], env: Mapping[str, str] | None = None) -> None:
        """`env`: variables set for the server over the proxy's own environment."""
        self._command = command
        self._env = env
        self._child: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    def start(self, on_line: LineHandler, on_ended: Ended) -> None:
        """Start the process and its reader; a command that cannot be started is a UsageError."""
        try:
            env = None if self._env is None else {**os.environ, **self._env}
            self._child = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0,
                                           env=env)
        except OSError as exc:
            raise UsageError(f"cannot start the server {self._command[0]}: {exc.strerror or exc}") from None
        self._reader = threading.Thread(target=self._read, args=(on_line, on_ended), name="mcp-server-reader",
                                        daemon=True)
        self._reader.start()

    def _read(self, on_line: LineHandler, on_ended: Ended) -> None:
        child = self._child
        assert child is not None and child.stdout is not None
        reason = "server exited"
        try:
            for line in read_lines(child.stdout):  # in chunks: a raw pipe's readline reads a byte at a time
                if line.strip():
                    on_line(line)
        except (OSError, ValueError) as exc:
            reason = f"server output failed: {exc}"
        on_ended(reason)

    def send(self, data: bytes) -> None:
        """Write and flush to the server's input."""
        child = self._child
        try:
            assert child is not None and child.stdin is not None
            child.stdin.write(data)
            child.stdin.flush()
        except ValueError as exc:
            raise OSError(str(exc)) from None

    def close(self) -> int:
        """Close the server's input, wait for it to exit (terminate, then kill it); return its status."""
        child = self._child
        if child is None:
            return 0
        try:
            if child.stdin is not None:
                child.stdin.close()
        except OSError:
            pass
        try:
            child.wait(timeout=3)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                child.wait(timeout=3)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)
        if child.stdout is not None:
            child.stdout.close()
        return child.returncode if child.returncode is not None else 0


class SessionLink:
    """One proxied session's client end and server end; `stop` may be called from any thread.

    A server end that reads the messages itself (`RestartingServer`) may offer `send_parsed(line, message)`
    and `start_parsed(on_message, on_ended)`: then a message the router parsed reaches it parsed, and one it
    parsed reaches the router parsed (each line is parsed once, not twice, on its way). One that can send a
    request from the calling thread and let that thread read its answer (`HttpServer`) offers
    `send_call(line, message) -> PendingAnswer | None` (None: it sent the line the usual way). One that runs on an
    event loop another end's messages come in on (`HttpServer` on the `--listen` listener's loop) offers
    `call_loop()` (that loop, from its own thread) and `send_soon(line, message) -> SoonAnswer | None`, which
    sends a request from that loop at once (None: not sent, the line goes the usual way)."""

    def __init__(self, client: ClientEnd, server: ServerEnd, *, diagnostics: TextIO) -> None:
        """Nothing starts before `start`; `diagnostics` receives the proxy's own messages."""
        self._client = client
        self._server = server
        self._send_parsed: Callable[[bytes, Any], None] | None = getattr(server, "send_parsed", None)
        self._send_call: Callable[[bytes, Any], PendingAnswer | None] | None = getattr(server, "send_call", None)
        self._hand_over: Callable[[], bool] | None = getattr(client, "hand_over", None)
        self._client_parsed: Callable[[bytes, Any], None] | None = getattr(client, "send_parsed", None)
        self._send_soon: Callable[[bytes, Any], SoonAnswer | None] | None = getattr(server, "send_soon", None)
        self._call_loop: Callable[[], asyncio.AbstractEventLoop | None] | None = getattr(server, "call_loop", None)
        self._diagnostics = diagnostics
        self._client_lock = threading.Lock()
        self._server_lock = threading.Lock()
        self._diag_lock = threading.Lock()
        self._finished = threading.Event()
        self.closing = False
        self.exit_reason = ""

    def start(self, from_client: MessageHandler, from_server: MessageHandler, server_ended: Callable[[], None]) -> None:
        """Start the server end, then the client end; a server that cannot be started is a UsageError. A client
        end that parsed a line already (`start_parsed`, as the HTTP listener's does) hands the message on too."""

        def client_ended(reason: str) -> None:
            if reason.startswith("client input failed"):
                self.say(reason)
                reason = "client closed its input"
            self.stop(reason)

        def server_gone(reason: str) -> None:
            if reason.startswith("server output failed"):
                self.say(reason)
                reason = "server exited"
            if not self.closing:
                self.stop(reason)
            server_ended()

        start_parsed = getattr(self._server, "start_parsed", None)
        if start_parsed is not None:
            start_parsed(from_server, server_gone)
        else:
            self._server.start(from_server, server_gone)
        client_parsed = getattr(self._client, "start_parsed", None)
        if client_parsed is not None:
            client_parsed(from_client, client_ended)
        else:
            self._client.start(from_client, client_ended)

    def wait(self) -> None:
        """Block until either side ended or `stop` was called."""
        self._finished.wait()

    def stop(self, reason: str = "stopped") -> None:
        """End the session from any thread (a signal handler, a test)."""
        if not self._finished.is_set():
            self.exit_reason = self.exit_reason or reason
            self._finished.set()

    def close_server(self) -> int:
        """End the server end and the client end; the server's exit status."""
        self.closing = True
        status = self._server.close()
        self._client.close()
        return status

    def hand_over(self) -> bool:
        """From the handler of a client's line: whether its thread may keep the line (the client end reads
        on with another thread); False for a client end that cannot, or from another thread."""
        return self._hand_over is not None and self._hand_over()

    def call_loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop running this thread, when the server end sends on it (`send_soon`): a call may then run
        on that loop, with no hand-off to a worker thread; else None."""
        return self._call_loop() if self._call_loop is not None else None

    def to_server_soon(self, data: bytes, message: Any) -> SoonAnswer | None:
        """From `call_loop`: write one request (one line, `message` its JSON) at once when the server end can, its
        `SoonAnswer` for the calling task to read the answer; else None, sent as `to_server` sends it (after what
        is on its way before it; the answer comes through the end's own tasks)."""
        assert self._send_soon is not None
        return self._to_server_at_once(self._send_soon, data, message)

    def to_client(self, data: bytes, message: Any = UNPARSED) -> None:
        """Write one or more whole lines to the client; a client that is gone ends the session. `message`: the
        one line's message, parsed, for a client end that takes it so (`send_parsed`: it is not parsed again)."""
        with self._client_lock:
            try:
                if message is not UNPARSED and self._client_parsed is not None:
                    self._client_parsed(data, message)
                else:
                    self._client.send(data)
            except OSError:
                self.stop("client closed its output")

    def to_server(self, data: bytes, message: Any = UNPARSED) -> None:
        """Write one or more whole lines to the server; `message`: the one line's message, parsed (if it was)."""
        with self._server_lock:
            try:
                if message is not UNPARSED and self._send_parsed is not None:
                    self._send_parsed(data, message)
                else:
                    self._server.send(data)
            except OSError:
                self.say("the server no longer reads its input")

    def to_server_call(self, data: bytes, message: Any) -> PendingAnswer | None:
        """Write one request (one line, `message` its JSON) whose answer the calling thread waits for; its
        `PendingAnswer` when the server end lets this thread read the answer, else None (sent as by
        `to_server`: the answer comes through the end's own reader)."""
        if self._send_call is None:
            self.to_server(data, message)
            return None
        return self._to_server_at_once(self._send_call, data, message)

    def _to_server_at_once(self, send: Callable[[bytes, Any], _T | None], data: bytes, message: Any) -> _T | None:
        """`send` the request at once, as `to_server_call` and `to_server_soon` do, what it gave; when it could
        not (None), the request goes as `to_server` sends it; when the server is gone, None."""
        with self._server_lock:
            try:
                sent = send(data, message)
            except OSError:
                self.say("the server no longer reads its input")
                return None
        if sent is None:
            self.to_server(data, message)
        return sent

    def say(self, text: str) -> None:
        """One line of the proxy's own on the diagnostics stream."""
        say_to(self._diagnostics, self._diag_lock, text)


def say_to(diagnostics: TextIO, lock: threading.Lock, text: str) -> None:
    """One line of the proxy's own on a diagnostics stream, whole (under `lock`); a stream that is gone
    is let be: the proxy goes on without it."""
    with lock:
        try:
            diagnostics.write("toolreplay mcp-proxy: " + text + "\n")
            diagnostics.flush()
        except (OSError, ValueError):
            pass

