"""The console's web server (`toolreplay serve`): routes, the checks every request passes, the live index.

A call that runs only with an approval receipt (a guard with approvers; its inbox request names the receipt
request) is approved by signing that receipt with the console's key (`toolreplay serve --ssh-key`), as
`toolreplay approve` would, before the decision is written; a console without a key can only deny it.

Every request passes, in order: the Host check (on loopback, only a loopback name: no DNS rebinding),
the token (when the console has one: its cookie, or `Authorization: Bearer`), then its route. A GET
never changes what the console serves; every POST carries the page's CSRF token and, when the browser
sends one, an Origin of this console. The console reads records and writes only decision files (the
inbox), receipts (a receipt-only approval) and approvals files (a revoke): it never runs a tool.

`Console.handle` answers one request without a socket (the unit tests call it); `serve` puts it behind
a standard library `ThreadingHTTPServer`.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import os
import re
import secrets
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qs, urlencode, urlsplit

from toolreplay.audit.detail import DetailLimits, build_detail
from toolreplay.audit.fleet import SessionJob, SessionOptions, audit_session
from toolreplay.audit.signers import HmacKey, SshSigner
from toolreplay.console import pages
from toolreplay.console.index import KINDS, Filters, SessionIndex, select
from toolreplay.errors import ToolReplayError
from toolreplay.format.records import read_session, ts_seconds
from toolreplay.guard.approvals import read_approvals, revoke_approval
from toolreplay.guard.hosts import is_loopback
from toolreplay.guard.inbox import InboxError, Request, decide, pending_requests

__all__ = ["Console", "Response", "serve", "parse_since"]

COOKIE = "toolreplay-console"
MAX_FORM_BYTES = 64 * 1024
SESSION_LIMITS = DetailLimits(findings=1000, head=2000, text=3000)  # the calls a session page shows
_SECURITY_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; img-src data:; "
                                "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "same-origin"), ("X-Frame-Options", "DENY"),
    ("Cache-Control", "no-store"), ("Cross-Origin-Resource-Policy", "same-origin"))
_SINCE = re.compile(r"(\d{1,6})([mhd])")
_UNITS = {"m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True, slots=True)
class Response:
    """One answer: status, headers beyond the security headers, body."""

    status: int
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = field(default=())



def parse_since(value: str, now: float) -> float | None:
    """`30m`, `1h`, `7d` (that long ago) or a date `2026-12-01` / time `2026-12-01T10:00:00Z`; ValueError else."""
    value = value.strip()
    if not value:
        return None
    found = _SINCE.fullmatch(value)
    if found:
        return now - int(found.group(1)) * _UNITS[found.group(2)]
    stamp = value if "T" in value else value + "T00:00:00Z"
    if not stamp.endswith("Z"):
        stamp += "Z"
    return ts_seconds(stamp)


def _host_name(host_header: str) -> str:
    """The name part of a Host header (`[::1]:8080` -> `::1`)."""
    if host_header.startswith("["):
        return host_header[1:host_header.find("]")] if "]" in host_header else host_header
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Console:
    """What every request of one console shares: the folders, the index, the person, the tokens."""

    def __init__(self, folders: Sequence[str], *, database: str | None = None, approvals: Sequence[str] = (),
                 person: str = "console", token: bytes | None = None, loopback: bool = True,
                 audit: bool = True, signer: SshSigner | HmacKey | None = None,
                 receipt_seconds: int = 3600) -> None:
        """`signer` (an approver's OpenSSH key, named as the person; an HMAC key for a host that keeps its
        approvers' secrets) signs the receipts of the calls only a receipt approves, each valid for
        `receipt_seconds`."""
        self.signer = signer
        self.receipt_seconds = receipt_seconds
        self.folders = [os.path.abspath(folder) for folder in folders]
        self.approvals = [os.path.abspath(path) for path in approvals]
        self.index = SessionIndex(self.folders, database, audit=audit, exclude=self.approvals)
        self.person = person
        self._token = token
        self._loopback = loopback
        self.csrf = secrets.token_urlsafe(32)
        self._flashes: OrderedDict[str, tuple[str, bool]] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the live index ---------------------------------------------------------------------------------

    def start(self, interval: float = 0.25) -> None:
        """Index the folders now, then keep looking every `interval` seconds on a thread of its own."""
        self.index.refresh()
        self._thread = threading.Thread(target=self._watch, args=(interval,), name="toolreplay-console-index",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop looking at the folders."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _watch(self, interval: float) -> None:
        while not self._stop.is_set():
            try:
                self.index.refresh()
                self.index.audit_pending(0.2)
            except Exception:  # noqa: BLE001 - the console keeps serving what it has; the next look tries again
                pass
            self._stop.wait(interval)

    def pending(self) -> list[Request | tuple[str, str]]:
        """Every call waiting in the folders' inboxes."""
        found: list[Request | tuple[str, str]] = []
        for folder in self.folders:
            found.extend(pending_requests(folder))
        return found

    def version(self, pending: Sequence[Request | tuple[str, str]] | None = None) -> str:
        """What changes whenever a page would show something else: the index, the inbox, the approvals files."""
        waiting = self.pending() if pending is None else pending
        digest = hashlib.sha256()
        for item in waiting:
            digest.update((item.id if isinstance(item, Request) else item[0]).encode("utf-8") + b"\n")
        for path in self.approvals:
            try:
                status = os.stat(path)
                digest.update(f"{status.st_ino}:{status.st_size}:{status.st_mtime_ns}".encode())
            except OSError:
                digest.update(b"-")
        return f"{self.index.version}-{digest.hexdigest()[:16]}"

    # -- one request ------------------------------------------------------------------------------------

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes = b"") -> Response:
        """Answer one request; never raises for what a client sends."""
        lower = {name.lower(): value for name, value in headers.items()}
        refusal = self._check_host(lower.get("host", ""))
        if refusal is not None:
            return refusal
        url = urlsplit(target)
        query = parse_qs(url.query, max_num_fields=20)
        authorized = self._authorized(lower)
        if not authorized and self._token is not None and method == "GET" and "token" in query:
            if hmac.compare_digest(query["token"][0].encode("utf-8", "replace"), self._token):
                cookie = f"{COOKIE}={self._token.decode('ascii', 'replace')}; HttpOnly; SameSite=Strict; Path=/"
                return Response(303, headers=(("Location", url.path or "/"), ("Set-Cookie", cookie)))
        if not authorized:
            return self._message(401, "Token needed", "this console needs its token: open the address "
                                 "`toolreplay serve` printed (it carries ?token=...)")
        try:
            if method == "GET":
                return self._get(url.path, query)
            if method == "POST":
                return self._post(url.path, lower, body)
        except Exception as exc:  # noqa: BLE001 - a bug must not end the console: the page says what broke
            return self._message(500, "Something went wrong", f"{type(exc).__name__}: {exc}")
        return self._message(405, "Method not allowed", f"{method} is not served here", (("Allow", "GET, POST"),))

    def _check_host(self, host: str) -> Response | None:
        if self._loopback and not is_loopback(_host_name(host)):
            return self._message(421, "Wrong host", "this console answers only to a loopback name (localhost, "
                                 "127.0.0.1, [::1])")
        return None

    def _authorized(self, headers: Mapping[str, str]) -> bool:
        if self._token is None:
            return True
        given = headers.get("authorization", "")
        if given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode("utf-8", "replace"), self._token):
            return True
        try:
            cookie = SimpleCookie(headers.get("cookie", ""))
        except CookieError:
            return False
        morsel = cookie.get(COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value.encode("utf-8", "replace"), self._token)

    def _message(self, status: int, title: str, message: str,
                 headers: tuple[tuple[str, str], ...] = ()) -> Response:
        return Response(status, pages.message_page(title, message).encode("utf-8"), headers=headers)

    def _flash(self, query: Mapping[str, list[str]]) -> tuple[str | None, bool]:
        key = query.get("flash", [""])[0]
        with self._lock:
            message, error = self._flashes.get(key, (None, False))
        return message, error

    def _redirect(self, path: str, message: str, error: bool) -> Response:
        key = secrets.token_urlsafe(9)
        with self._lock:
            self._flashes[key] = (message, error)
            while len(self._flashes) > 200:
                self._flashes.popitem(last=False)
        return Response(303, headers=(("Location", f"{path}?{urlencode({'flash': key})}"),))

    # -- GET ----------------------------------------------------------------------------------------------

    def _get(self, path: str, query: Mapping[str, list[str]]) -> Response:
        if path == "/console.js":
            return Response(200, pages.SCRIPT.encode("utf-8"), "text/javascript; charset=utf-8")
        if path == "/api/version":
            waiting = self.pending()
            data = {"version": self.version(waiting), "waiting": sum(isinstance(item, Request) for item in waiting)}
            return Response(200, json.dumps(data).encode("ascii"), "application/json")
        if path == "/":
            return self._sessions(query)
        if path == "/session":
            return self._session(query.get("path", [""])[0])
        if path == "/inbox":
            waiting = self.pending()
            message, error = self._flash(query)
            return Response(200, pages.inbox_page(waiting, self.csrf, self.person, self.version(waiting), message,
                                                  error, signs=self.signer is not None).encode("utf-8"))
        if path == "/approvals":
            return self._approvals(query)
        return self._message(404, "Not found", f"nothing is served at {path}")

    def _sessions(self, query: Mapping[str, list[str]]) -> Response:
        def one(name: str) -> str:
            return query.get(name, [""])[0]

        since_text = one("since")
        problems = list(self.index.problems)
        try:
            since = parse_since(since_text, time.time())
        except ValueError:
            since = None
            problems.append(f"since {since_text!r}: expected 30m, 1h, 7d or a date such as 2026-12-01")
        kind = one("kind") if one("kind") in KINDS else ""
        filters = Filters(one("tool"), kind, one("rule"), since)
        page = int(one("page")) if one("page").isdigit() and len(one("page")) < 7 else 0
        rows = self.index.rows()
        shown, total = select(rows, filters, page * pages.PAGE_SIZE, pages.PAGE_SIZE)
        tools, rules = self.index.choices()
        waiting = self.pending()
        html = pages.sessions_page(shown, total, filters, since_text, page, tools, rules, problems,
                                   self.version(waiting), sum(isinstance(item, Request) for item in waiting), len(rows))
        return Response(200, html.encode("utf-8"))

    def _session(self, path: str) -> Response:
        row = self.index.find(path)
        if row is None:
            return self._message(404, "No such session", "the console lists no session file at that path (it may "
                                 "have been moved or deleted)")
        job = SessionJob(row.path, row.name)
        result = audit_session(job, SessionOptions())
        detail = build_detail(job, result.calls, result.divergence, result.findings, SESSION_LIMITS, result.chain,
                              result.sealed, result.finding_count, result.error, result.by_kind, result.checkpoint,
                              result.information)
        waiting = self.pending()
        html = pages.session_page(row, detail, list(_marks(job, SESSION_LIMITS.head)), self.version(waiting),
                                  sum(isinstance(item, Request) for item in waiting))
        return Response(200, html.encode("utf-8"))

    def _approvals(self, query: Mapping[str, list[str]]) -> Response:
        files: list[tuple[str, Sequence[object] | str]] = []
        for path in self.approvals:
            try:
                files.append((path, read_approvals(path)))
            except ToolReplayError as exc:
                files.append((path, str(exc)))
        message, error = self._flash(query)
        waiting = self.pending()
        html = pages.approvals_page(files, self.csrf, self.version(waiting),  # type: ignore[arg-type]
                                    sum(isinstance(item, Request) for item in waiting), message, error)
        return Response(200, html.encode("utf-8"))

    # -- POST ---------------------------------------------------------------------------------------------

    def _post(self, path: str, headers: Mapping[str, str], body: bytes) -> Response:
        if path not in ("/inbox/decide", "/approvals/revoke"):
            return self._message(404, "Not found", f"nothing is served at {path}")
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != headers.get("host", ""):
            return self._message(403, "Refused", "the form came from another site")
        if headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return self._message(400, "Bad form", "expected a form (application/x-www-form-urlencoded)")
        if len(body) > MAX_FORM_BYTES:
            return self._message(413, "Bad form", "the form is too large")
        try:
            form = parse_qs(body.decode("utf-8"), max_num_fields=10, strict_parsing=True)
        except (UnicodeDecodeError, ValueError):
            return self._message(400, "Bad form", "the form could not be read")
        token = form.get("csrf", [""])[0]
        if not hmac.compare_digest(token.encode("utf-8"), self.csrf.encode("ascii")):
            return self._message(403, "Refused", "the form carries no valid CSRF token: reload the page and try again")
        if path == "/inbox/decide":
            return self._decide(form)
        return self._revoke(form)

    def _decide(self, form: Mapping[str, list[str]]) -> Response:
        request_id = form.get("id", [""])[0]
        verdict, _, scope = form.get("decision", [""])[0].partition(":")
        found = next(((folder, item) for folder in self.folders for item in pending_requests(folder)
                      if isinstance(item, Request) and item.id == request_id), None)
        if found is None:
            return self._redirect("/inbox", f"no call waits as {request_id} any more (answered, timed out or "
                                  "gone): nothing was decided", True)
        folder, request = found
        receipt = None
        if verdict == "approve" and request.receipt is not None:  # its yes is a receipt, signed before the decision
            try:
                receipt = self._sign(request, scope or "once")
            except ToolReplayError as exc:
                return self._redirect("/inbox", f"{exc}: nothing was decided", True)
        try:
            decision = decide(folder, request_id, verdict, scope or "once", self.person)
        except InboxError as exc:
            if receipt is not None:  # the call no longer waits: its receipt must not approve a later one
                _remove(receipt)
            return self._redirect("/inbox", f"{exc}: nothing was decided", True)
        said = "approved " + decision.scope if decision.verdict == "approve" else "denied"
        return self._redirect("/inbox", f"{said}: {request_id} (as {self.person})", False)

    def _sign(self, request: Request, scope: str) -> str:
        """Sign the receipt that approves a receipt-only call (as `toolreplay approve` does); its path.
        ToolReplayError saying why it cannot be (no key, a request that is not the call shown, ssh-keygen)."""
        from toolreplay.audit.receipts import SCOPES, approve_request, read_request

        if self.signer is None:
            raise ToolReplayError(f"the call {request.id} runs only with an approval receipt signed by an approver, "
                                  "and this console has no key to sign one (toolreplay serve --ssh-key KEY)")
        path = request.receipt or ""
        if not os.path.isabs(path) or not path.endswith(".request") or scope not in SCOPES:
            raise ToolReplayError(f"the call {request.id} names no receipt request this console can sign")
        wanted = read_request(path)
        if (wanted.tool, wanted.args) != (request.tool, request.args):
            raise ToolReplayError(f"the receipt request of {request.id} is for another call than the one shown")
        return approve_request(path, [self.signer], scope, time.time_ns() + self.receipt_seconds * 1_000_000_000,
                               request=wanted)[1]

    def _revoke(self, form: Mapping[str, list[str]]) -> Response:
        path, approval_id = form.get("file", [""])[0], form.get("id", [""])[0]
        if path not in self.approvals:  # only the files the console was given
            return self._redirect("/approvals", "that approvals file is not one this console shows", True)
        try:
            approval = revoke_approval(path, approval_id)
        except ToolReplayError as exc:
            return self._redirect("/approvals", str(exc), True)
        return self._redirect("/approvals", "revoked " + approval.describe(), False)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _marks(job: SessionJob, limit: int) -> Iterable[pages.CallMark]:
    """The calls of a session that did not simply run (blocked, approved, unknown, cancelled), in order."""
    try:
        with open(job.path, "rb") as handle:
            for record in read_session(handle, job.display):
                if record.index >= limit:
                    return
                meta = record.meta or {}
                outcome = record.outcome
                by = meta.get("x-decided-by")
                how = f"decided by {by}" if isinstance(by, str) else ""
                if not how and "x-confirmed" in meta:
                    how = "confirmed by a person"
                if isinstance(meta.get("x-receipt"), str):
                    how = f"{how}; with an approval receipt" if how else "with an approval receipt"
                for key, label in (("x-remembered", "remembered as"), ("x-approval", "by remembered approval"),
                                   ("x-remember-error", "not remembered:")):
                    if isinstance(meta.get(key), str):
                        how = f"{how}; {label} {meta[key]}" if how else f"{label} {meta[key]}"
                if outcome in ("ran", "cached") and how:
                    yield pages.CallMark(record.index, record.tool, "approved", how)
                elif outcome == "refused":
                    error = record.response.get("error")
                    reason = error if isinstance(error, str) else "refused"
                    yield pages.CallMark(record.index, record.tool, "blocked", f"{reason}; {how}" if how else reason)
                elif outcome in ("unknown", "cancelled"):
                    yield pages.CallMark(record.index, record.tool, outcome, how)
    except (OSError, ToolReplayError, RecursionError):
        return  # the timeline's audit says why the rest cannot be read


class _Handler(http.server.BaseHTTPRequestHandler):
    console: Console
    server_version = "toolreplay-console"
    protocol_version = "HTTP/1.1"

    def version_string(self) -> str:
        return self.server_version

    def _answer(self, method: str) -> None:
        length = self.headers.get("Content-Length", "0")
        size = int(length) if length.isdigit() else -1
        if size < 0 or size > MAX_FORM_BYTES:
            response = Response(413 if size > 0 else 400, b"bad request body\n", "text/plain; charset=utf-8")
            self.close_connection = True
        else:
            body = self.rfile.read(size) if size else b""
            response = self.console.handle(method, self.path, dict(self.headers.items()), body)
        self.send_response(response.status)
        for name, value in (*_SECURITY_HEADERS, ("Content-Type", response.content_type),
                            ("Content-Length", str(len(response.body))), *response.headers):
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._answer("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._answer("DELETE")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the signature http.server calls
        pass


class _Server6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6


def serve(console: Console, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """A started server for the console (call `serve_forever`, then `server_close` and `console.stop()`)."""
    handler = type("ConsoleHandler", (_Handler,), {"console": console})
    server = (_Server6 if ":" in host else http.server.ThreadingHTTPServer)((host, port), handler)
    server.daemon_threads = True
    console.start()
    return server
