"""The hook endpoint over HTTP (docs/hooks.md, "HTTP hooks"): `toolreplay hook serve`, no process per event.

Claude Code posts each hook event (the JSON a command hook reads on stdin) to a `type: "http"` hook's URL
and reads the answer from the response: a 2xx with an empty body goes on, a 2xx with a JSON object is read
as a command hook's stdout; with `onFailure: "block"`, any other answer (a non-2xx, no connection, a
timeout) blocks the call. This server answers each event with the hooks' own core (toolreplay/hooks/reply.py),
as `toolreplay hook AGENT` does: the same decision and the same record.

- POST /hook/AGENT (claude-code, gemini-cli, codex) with `Authorization: Bearer TOKEN`; the token is
  DIR/.toolreplay-hook.token (made on first use, the owner's only). A wrong or missing token is 401, a body
  over MAX_BODY_BYTES 413 (not read), a request without a length 411 (a chunked one included), a malformed
  head 400, a head over 64 KiB 431: nothing is decided or recorded, and the connection is closed.
- One connection carries a session's events (keep-alive; `Connection: close` ends it, and an idle one is closed
  after 10 s). Each request's head is read by the strict reader of toolreplay/format/http1.py (not the email
  package's header parser), each answer written whole in one send.
- Decided: 200 with the agent's JSON (or an empty body). Not decided (bad input, a policy that does not load,
  a record that cannot be written) on the pre-tool event: 200 with a deny that names the fault; on a post
  event: 200 with `{"decision": "block", "reason": ...}`; on anything else (not JSON, an unknown event):
  400 with the one line. Never a traceback, never an allow.
- Loopback only unless the caller says otherwise; one server per records folder (DIR/.toolreplay-hook-http.lock),
  and only in a private folder (hooks/protocol.py's trust check).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import socket
import socketserver
import sys
import threading
from typing import Any

from toolreplay.format.http1 import HeadError, Request, read_request
from toolreplay.hooks import core
from toolreplay.hooks.cache import HookCache
from toolreplay.hooks.protocol import is_private_folder
from toolreplay.hooks.reply import reply_to_event

try:
    import fcntl
except ImportError:  # pragma: no cover - platform dependent
    fcntl = None  # type: ignore[assignment]

__all__ = ["DEFAULT_PORT", "HTTP_LOCK_NAME", "MAX_BODY_BYTES", "TOKEN_NAME", "TOKEN_VARIABLE", "HookEndpoint",
           "answer_event", "read_token"]

DEFAULT_PORT = 47213
TOKEN_NAME = ".toolreplay-hook.token"
TOKEN_VARIABLE = "TOOLREPLAY_HOOK_TOKEN"  # the variable the settings' Authorization header reads
HTTP_LOCK_NAME = ".toolreplay-hook-http.lock"
MAX_BODY_BYTES = 64 << 20  # as the socket server's largest event: a Write's whole content is in its tool_input
_PREFIX = "/hook/"
_PREFIX_ERROR = "error: toolreplay hook: "



def read_token(records: str) -> str:
    """DIR's bearer token: read from DIR/.toolreplay-hook.token, made (mode 0600) when there is none; a token
    file others can read is refused (core.HookError)."""
    path = os.path.join(records, TOKEN_NAME)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise core.HookError(f"cannot make {path}: {exc.strerror or exc}") from None
    else:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(secrets.token_urlsafe(32) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
    try:
        status = os.lstat(path)
        if status.st_uid != os.geteuid() or status.st_mode & 0o077 or not os.path.isfile(path):
            raise core.HookError(f"{path} must be a file of yours that no one else can read (chmod 600)")
        with open(path, encoding="ascii") as handle:
            token = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise core.HookError(f"cannot read {path}: {exc}") from None
    if len(token) < 16:
        raise core.HookError(f"{path} holds no token (at least 16 characters)")
    return token


def answer_event(agent: str, body: bytes, policy: str, records: str, redact_key: str | None,
                 cache: HookCache | None = None) -> tuple[int, bytes]:
    """The HTTP status and body answering one event of `agent`: the command hook's decision, and a fault turned
    into the answer that blocks the call (see the module's docstring); `cache` is the server's memory between
    events (toolreplay/hooks/cache.py)."""
    reply = reply_to_event(body, policy, records, redact_key, agent, cache=cache)
    if reply.code == 0:
        return 200, reply.stdout.encode("ascii")
    line = reply.stderr.strip().splitlines()[0] if reply.stderr.strip() else "toolreplay hook: the call is blocked"
    reason = "toolreplay: " + line[len(_PREFIX_ERROR):] if line.startswith(_PREFIX_ERROR) else line
    profile = core.AGENTS[agent]
    event = _event(body, profile)
    if event == profile.pre:
        output = profile.output(core.HookAnswer("deny", reason))
        if output is not None:
            return 200, _json(output)
    if event is not None and event in (profile.post, profile.failure) and agent == "claude-code":
        return 200, _json({"decision": "block", "reason": reason})
    return 400, (line + "\n").encode("ascii", "backslashreplace")


def _event(body: bytes, profile: core.Agent) -> str | None:
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    event = payload.get("hook_event_name") if isinstance(payload, dict) else None
    return event if isinstance(event, str) and event in profile.events else None


def _json(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")


class HookEndpoint:
    """The HTTP hook server of one records folder: `start()` binds and holds the folder, `serve()` answers
    until `stop()`."""

    def __init__(self, records: str, policy: str, redact_key: str | None = None, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT) -> None:
        self.records = os.path.abspath(records)
        self.policy = os.path.abspath(policy)
        self.redact_key = None if redact_key is None else os.path.abspath(redact_key)
        self.host, self.port = host, port
        self._lock = -1
        self._server: _Server | None = None
        self.cache = HookCache()  # the guard and each session's record, kept between events

    @property
    def url(self) -> str:
        """The server's base URL (the bound port, once started)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Take the folder (one server each), read its token and bind; core.HookError when it cannot."""
        core.check_policy(self.policy)  # a policy that does not load would deny every event: say so now
        if not os.path.isdir(self.records):
            raise core.HookError(f"records folder {self.records} does not exist")
        if not is_private_folder(self.records):
            raise core.HookError(f"records folder {self.records} is not private (it must be yours, and neither its "
                                 "group nor others may write it): no hook server there")
        lock = os.path.join(self.records, HTTP_LOCK_NAME)
        try:
            self._lock = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
            if fcntl is not None:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.close()
            raise core.HookError(f"another hook server serves {self.records}") from None
        try:
            token = read_token(self.records)
            self._server = _Server((self.host, self.port), _Handler, self, f"Bearer {token}".encode("ascii"))
        except OSError as exc:
            self.close()
            raise core.HookError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        except core.HookError:
            self.close()
            raise
        self.port = self._server.server_address[1]

    def serve(self) -> None:
        """Answer events until stop() (each in a thread of its own; one session's events take turns on its lock)."""
        assert self._server is not None
        try:
            self._server.serve_forever(poll_interval=0.25)
        finally:
            self.close()

    def stop(self) -> None:
        """End serve() (from another thread or a signal handler)."""
        if self._server is not None:
            threading.Thread(target=self._server.shutdown, daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.server_close()
        self.cache.close()
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1


class _Server(socketserver.ThreadingTCPServer):
    # stopping waits for the events in hand (an event is never cut off halfway through its record); an idle
    # keep-alive connection is closed after _Handler.timeout, so the wait is short
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[socketserver.BaseRequestHandler],
                 endpoint: HookEndpoint, authorization: bytes) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)
        self.endpoint = endpoint
        self.authorization = authorization

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed (the client went away): one line, no traceback."""
        error = sys.exc_info()[1]
        sys.stderr.write(f"toolreplay hook serve: a connection failed ({type(error).__name__})\n")


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            411: "Length Required", 413: "Content Too Large", 431: "Request Header Fields Too Large"}


def _is_length(text: str) -> bool:
    """A Content-Length as RFC 9110 writes it: ASCII digits."""
    return text.isascii() and text.isdigit()


class _Handler(socketserver.StreamRequestHandler):
    """One connection: its requests, one at a time (keep-alive), each head read by format/http1.py's strict
    reader and answered whole in one write."""

    timeout = 10.0  # seconds an idle keep-alive connection is kept
    disable_nagle_algorithm = True  # an answer is one write: it does not wait for the peer's ACK
    server: _Server

    def handle(self) -> None:
        while True:
            try:
                request = read_request(self.rfile)
                if request is None or not self._answer(request):
                    return
            except HeadError as exc:
                self._send(exc.status, f"error: toolreplay hook: {exc}\n".encode("ascii"), keep=False)
                return
            except (TimeoutError, ConnectionError):
                return  # idle past the timeout, or the client went away: it is not waiting for an answer

    def _answer(self, request: Request) -> bool:
        """Answer one request; whether the connection can carry another (a body not read cannot)."""
        headers = request.headers
        length = headers.get("content-length")
        framed = "transfer-encoding" not in headers and (length is None or _is_length(length))
        bodiless = framed and (length is None or not length.strip("0"))
        if request.method != "POST":
            return self._send(405, b"error: toolreplay hook: POST the event\n", keep=request.keep_alive and bodiless)
        agent = request.target[len(_PREFIX):] if request.target.startswith(_PREFIX) else ""
        if agent not in core.AGENTS:
            return self._send(404, b"error: toolreplay hook: no such hook endpoint (POST /hook/AGENT)\n",
                              keep=request.keep_alive and bodiless)
        given = headers.get("authorization", "").encode("latin-1", "replace")
        if not hmac.compare_digest(given, self.server.authorization):
            return self._send(401, b"error: toolreplay hook: a wrong or missing bearer token; nothing recorded\n",
                              keep=False)
        if not framed or length is None:  # chunked (or a length that is no number): not read here
            return self._send(411, b"error: toolreplay hook: the request has no Content-Length\n", keep=False)
        if len(length) > 18 or int(length) > MAX_BODY_BYTES:  # 18 digits at most: not read as a number
            return self._send(413, f"error: toolreplay hook: the event is larger than {MAX_BODY_BYTES:,} bytes; "
                                   "the call is blocked\n".encode("ascii"), keep=False)
        if headers.get("expect", "").lower() == "100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = self.rfile.read(int(length))
        if len(body) < int(length):
            return False  # the client went away mid-body: nothing to answer
        endpoint = self.server.endpoint
        status, answer = answer_event(agent, body, endpoint.policy, endpoint.records, endpoint.redact_key,
                                      endpoint.cache)
        return self._send(status, answer, keep=request.keep_alive, json_body=status == 200)

    def _send(self, status: int, body: bytes, *, keep: bool, json_body: bool = False) -> bool:
        """Write the whole answer at once; `keep` False closes the connection after it."""
        kind = "application/json" if json_body and body else "text/plain; charset=utf-8"
        head = f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
        if status == 401:
            head += "WWW-Authenticate: Bearer\r\n"
        if not keep:
            head += "Connection: close\r\n"
        self.wfile.write(head.encode("ascii") + b"\r\n" + body)
        return keep
