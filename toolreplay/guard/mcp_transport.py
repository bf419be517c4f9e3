"""The MCP proxy's transport: the client on the proxy's own stdin/stdout, the server as a child process.

It moves lines and knows nothing of what they mean: one reader thread per side hands each non-blank
line to the router, writes to either side are serialised, and the proxy's own messages go to the
diagnostics stream. It also starts and stops the server process.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import IO, TextIO

from toolreplay.errors import UsageError
from toolreplay.guard.mcp_wire import read_lines

__all__ = ["StdioTransport"]

LineHandler = Callable[[bytes], None]


class StdioTransport:
    """The two stdio connections of one proxied session; `stop` may be called from any thread."""

    def __init__(self, command: list[str], *, client_in: IO[bytes], client_out: IO[bytes],
                 diagnostics: TextIO) -> None:
        """Nothing starts before `start`; `diagnostics` receives the proxy's own messages."""
        self._command = command
        self._client_in = client_in
        self._client_out = client_out
        self._diagnostics = diagnostics
        self._child: subprocess.Popen[bytes] | None = None
        self._client_lock = threading.Lock()
        self._server_lock = threading.Lock()
        self._diag_lock = threading.Lock()
        self._finished = threading.Event()
        self._server_reader: threading.Thread | None = None
        self.closing = False
        self.exit_reason = ""

    def start(self, from_client: LineHandler, from_server: LineHandler,
              server_ended: Callable[[], None]) -> None:
        """Start the server and both readers; a server that cannot be started is a UsageError."""
        try:
            self._child = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        except OSError as exc:
            raise UsageError(f"cannot start the server {self._command[0]}: {exc.strerror or exc}") from None
        self._server_reader = threading.Thread(target=self._read_server, args=(from_server, server_ended),
                                               name="mcp-server-reader", daemon=True)
        client_reader = threading.Thread(target=self._read_client, args=(from_client,), name="mcp-client-reader",
                                         daemon=True)
        self._server_reader.start()
        client_reader.start()

    def wait(self) -> None:
        """Block until either side ended or `stop` was called."""
        self._finished.wait()

    def stop(self, reason: str = "stopped") -> None:
        """End the session from any thread (a signal handler, a test)."""
        if not self._finished.is_set():
            self.exit_reason = self.exit_reason or reason
            self._finished.set()

    def close_server(self) -> int:
        """Close the server's input, wait for it to exit (terminate, then kill it); return its status."""
        child = self._child
        assert child is not None
        self.closing = True
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
        if self._server_reader is not None:
            self._server_reader.join(timeout=5)
        if child.stdout is not None:
            child.stdout.close()
        return child.returncode if child.returncode is not None else 0

    def _read_client(self, handle: LineHandler) -> None:
        try:
            for line in read_lines(self._client_in):
                if line.strip():
                    handle(line)
        except (OSError, ValueError) as exc:
            self.say(f"client input failed: {exc}")
        self.stop("client closed its input")

    def _read_server(self, handle: LineHandler, ended: Callable[[], None]) -> None:
        child = self._child
        assert child is not None and child.stdout is not None
        try:
            for line in read_lines(child.stdout):  # in chunks: a raw pipe's readline reads a byte at a time
                if line.strip():
                    handle(line)
        except (OSError, ValueError) as exc:
            self.say(f"server output failed: {exc}")
        if not self.closing:
            self.stop("server exited")
        ended()

    def to_client(self, data: bytes) -> None:
        """Write one or more whole lines to the client; a client that is gone ends the session."""
        with self._client_lock:
            try:
                self._client_out.write(data)
                self._client_out.flush()
            except (OSError, ValueError):
                self.stop("client closed its output")

    def to_server(self, data: bytes) -> None:
        """Write one or more whole lines to the server."""
        child = self._child
        with self._server_lock:
            try:
                assert child is not None and child.stdin is not None
                child.stdin.write(data)
                child.stdin.flush()
            except (OSError, ValueError):
                self.say("the server no longer reads its input")

    def say(self, text: str) -> None:
        """One line of the proxy's own on the diagnostics stream."""
        with self._diag_lock:
            try:
                self._diagnostics.write("toolreplay mcp-proxy: " + text + "\n")
                self._diagnostics.flush()
            except (OSError, ValueError):
                pass
