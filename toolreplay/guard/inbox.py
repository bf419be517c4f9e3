"""The approvals inbox (docs/console.md): a confirmation channel over a records folder, for any front end.

A call that needs a person writes a request file into `FOLDER/.toolreplay-inbox/` and waits; a person
(through `toolreplay serve`, or any program that writes a decision file) approves or denies it:

    ID.request.json   {"id", "tool", "args", "rule", "session", "front_end", "asked", "deadline", "pid",
                       "receipt"}
    ID.decision.json  {"id", "verdict": "approve"|"deny", "scope": "once"|"session"|"always", "by", "at"}

`ID` is unguessable (`secrets.token_urlsafe`): only who can read the folder can name a waiting call. Both
files are written whole (a synced temporary file, then a link or a rename) and created 0600, in a folder
created 0700. A decision is taken once: it is linked into place, which fails when a decision is already
there, so two consoles (or a console and the waiting call's timeout) cannot both decide; the first wins
and the other is told. A decision about a call that no longer waits (it timed out, it was answered, its
process ended past its deadline) is refused as stale and changes nothing. A call ends by writing which
decision it took (`ID.done.json`, the decision's nonce), then removing its request, then the decision,
so a console can always tell whether its decision was the one taken.

The waiting call reads only the decision file of its own id, and only a well-formed `approve` approves:
a timeout refuses (`confirmation timed out`), a malformed decision refuses. The arguments in the request
are redacted as the record holds them when the inbox is given the record's redactor: no secret reaches
the inbox that the record would not hold.

A call that only an approval receipt lets run (a guard with approvers, toolreplay/guard/receipts.py) names
its receipt request file in `receipt`: an approval is then a receipt signed with an approver's key, written
beside that request before the decision, which the call checks as any receipt (the console signs it).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolreplay.errors import ToolReplayError
from toolreplay.format.records import format_ts
from toolreplay.guard.approvals import SCOPES, Decided, Remember

if TYPE_CHECKING:
    from toolreplay.policy.redaction import Redactor

__all__ = ["INBOX_FOLDER", "DEFAULT_TIMEOUT", "Decision", "Inbox", "InboxError", "Request", "decide",
           "inbox_folder", "pending_requests"]

INBOX_FOLDER = ".toolreplay-inbox"
DEFAULT_TIMEOUT = 300.0  # seconds a call waits for a person before it is refused
VERDICTS = ("approve", "deny")
_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
_REQUEST, _DECISION, _DONE = ".request.json", ".decision.json", ".done.json"
_MAX_NAME = 200  # characters of a person's name kept in a decision
_POLL = 0.01  # seconds between two looks for the decision (an approval reaches the call within a few of them)


class InboxError(ToolReplayError):
    """A decision could not be taken: a stale or unknown id, one already decided, a bad verdict or scope."""


@dataclass(frozen=True, slots=True)
class Request:
    """A call waiting in the inbox, as its request file says."""

    id: str
    tool: str
    args: dict[str, Any]
    rule: str | None
    session: str | None
    front_end: str | None
    asked: str
    deadline: float  # seconds since the epoch
    path: str  # the request file
    receipt: str | None = None  # the receipt request file, when only a signed receipt approves the call


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's answer to one request."""

    id: str
    verdict: str  # "approve" or "deny"
    scope: str  # one of SCOPES (what an approval is remembered for)
    by: str  # who decided
    at: str


def inbox_folder(records: str) -> str:
    """The inbox folder of a records folder."""
    return os.path.join(records, INBOX_FOLDER)


def _write_new(path: str, data: bytes, *, replace: bool) -> bool:
    """Write `path` whole, 0600: a synced temporary file renamed (`replace`) or linked (else) into place.
    False when not replacing and `path` already exists."""
    folder = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if replace:
            os.replace(temporary, path)
            return True
        try:
            os.link(temporary, path)
        except FileExistsError:
            return False
        return True
    finally:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass


def _read_json(path: str) -> dict[str, Any] | None:
    """The JSON object of a file; None when it is missing; ValueError when it is not one."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except FileNotFoundError:
        return None
    value = json.loads(data.decode("utf-8"))
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _quietly(path: str) -> dict[str, Any] | None:
    """A file's JSON object, None when it is missing or unreadable."""
    try:
        return _read_json(path)
    except (OSError, ValueError, RecursionError):
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _parse_request(path: str, obj: dict[str, Any]) -> Request:
    """A request from its file's object; ValueError saying what is wrong."""
    request_id, tool, args = obj.get("id"), obj.get("tool"), obj.get("args")
    if not isinstance(request_id, str) or not _ID.fullmatch(request_id):
        raise ValueError("field \"id\" is not an inbox id")
    if os.path.basename(path) != request_id + _REQUEST:
        raise ValueError("field \"id\" does not match the file name")
    if not isinstance(tool, str) or not isinstance(args, dict):
        raise ValueError("fields \"tool\" (a string) and \"args\" (an object) are required")
    optional = {name: obj.get(name) for name in ("rule", "session", "front_end", "receipt")}
    if any(value is not None and not isinstance(value, str) for value in optional.values()):
        raise ValueError("fields \"rule\", \"session\", \"front_end\" and \"receipt\" are strings when given")
    deadline, asked = obj.get("deadline"), obj.get("asked")
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not isinstance(asked, str):
        raise ValueError("fields \"asked\" (a time) and \"deadline\" (seconds since the epoch) are required")
    return Request(request_id, tool, args, optional["rule"], optional["session"], optional["front_end"], asked,
                   float(deadline), path, optional["receipt"])


def parse_decision(obj: dict[str, Any], request_id: str) -> Decision:
    """A decision from its file's object; ValueError saying what is wrong."""
    verdict, scope, by, at = obj.get("verdict"), obj.get("scope", "once"), obj.get("by"), obj.get("at", "")
    if obj.get("id") != request_id:
        raise ValueError("the decision names another id")
    if verdict not in VERDICTS:
        raise ValueError("field \"verdict\" is \"approve\" or \"deny\"")
    if scope not in SCOPES:
        raise ValueError("field \"scope\" is one of " + ", ".join(SCOPES))
    if not isinstance(by, str) or not isinstance(at, str):
        raise ValueError("field \"by\" (who decided) is a string")
    return Decision(request_id, verdict, scope, by[:_MAX_NAME], at)


def pending_requests(records: str, now: float | None = None) -> Iterator[Request | tuple[str, str]]:
    """The calls waiting in a records folder's inbox, oldest first: each a Request, or (file, why) for a
    request file that cannot be read. Requests already decided or past their deadline are left out."""
    folder = inbox_folder(records)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    moment = time.time() if now is None else now
    found: list[tuple[str, Request | tuple[str, str]]] = []
    decided = {name[:-len(_DECISION)] for name in names if name.endswith(_DECISION)}
    for name in names:
        if not name.endswith(_REQUEST) or name[:-len(_REQUEST)] in decided:
            continue
        path = os.path.join(folder, name)
        try:
            obj = _read_json(path)
            if obj is None:
                continue  # answered meanwhile
            request = _parse_request(path, obj)
        except (OSError, ValueError, RecursionError) as exc:
            found.append(("", (path, f"unreadable request: {exc}")))
            continue
        if request.deadline >= moment:
            found.append((request.asked + request.id, request))
    found.sort(key=lambda item: item[0])
    yield from (item for _, item in found)


def decide(records: str, request_id: str, verdict: str, scope: str, by: str, *,
           clock: Callable[[], float] = time.time) -> Decision:
    """Decide a waiting call once; InboxError when the id is unknown or stale, or already decided."""
    if verdict not in VERDICTS:
        raise InboxError(f"unknown verdict {verdict!r}: approve or deny")
    if scope not in SCOPES:
        raise InboxError(f"unknown scope {scope!r}: one of {', '.join(SCOPES)}")
    if not isinstance(request_id, str) or not _ID.fullmatch(request_id):
        raise InboxError("no such waiting call (the id is not an inbox id)")
    folder = inbox_folder(records)
    request_path = os.path.join(folder, request_id + _REQUEST)
    decision_path = os.path.join(folder, request_id + _DECISION)
    try:
        obj = _read_json(request_path)
        request = None if obj is None else _parse_request(request_path, obj)
    except (OSError, ValueError, RecursionError) as exc:
        raise InboxError(f"the request {request_id} cannot be read: {exc}") from None
    if request is None:
        raise InboxError(f"no call waits as {request_id} any more (answered, timed out or gone)")
    if request.deadline < clock():
        raise InboxError(f"the call {request_id} is past its deadline: it was refused")
    decision = Decision(request_id, verdict, scope if verdict == "approve" else "once", by[:_MAX_NAME],
                        format_ts(int(clock() * 1e9)))
    nonce = secrets.token_hex(8)  # tells our decision file from another's
    data = json.dumps({"id": decision.id, "verdict": decision.verdict, "scope": decision.scope, "by": decision.by,
                       "at": decision.at, "nonce": nonce}, ensure_ascii=True, sort_keys=True).encode("ascii")
    try:
        taken = _write_new(decision_path, data, replace=False)
    except OSError as exc:
        raise InboxError(f"cannot write the decision into {folder}: {exc.strerror or exc}") from None
    if not taken:
        earlier = _quietly(decision_path)
        if earlier is not None and earlier.get("verdict") == "timeout":
            raise InboxError(f"the call {request_id} timed out: it was refused")
        raise InboxError(f"the call {request_id} was already decided")
    # Linked: the call reads it, unless it had already ended (then nobody ever will). A call ends by
    # writing which decision it took (ID.done.json), then removing its request, then the decision: while
    # the request is there it has taken none; once it is gone, the done file or our decision says.
    if os.path.exists(request_path):
        return decision
    done = _quietly(os.path.join(folder, request_id + _DONE))
    if done is not None and done.get("taken") == nonce:
        return decision
    ours = _quietly(decision_path)
    if ours is None and done is None:  # read, and the call has finished since
        return decision
    if ours is not None and ours.get("nonce") == nonce:  # unread: the call had ended before our link
        _unlink(decision_path)
    raise InboxError(f"no call waits as {request_id} any more (answered, timed out or gone)")


class Inbox:
    """A `confirm` callback (for `Gate(confirm=...)` and every front end taking one) that asks through the
    inbox of a records folder and waits for a person's decision; a timeout refuses."""

    def __init__(self, records: str, *, timeout: float = DEFAULT_TIMEOUT, session: str | None = None,
                 front_end: str | None = None, redactor: Redactor | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep) -> None:
        """Ask in `records`' inbox (created 0700 when missing; the records folder must exist).

        `session` and `front_end` name where the call comes from, as the page shows it; `redactor` (the
        record's) redacts the arguments in the request file as the record holds them."""
        if not os.path.isdir(records):
            raise InboxError(f"cannot keep an inbox in {records}: it is not a folder")
        self.folder = inbox_folder(records)
        self.records = records
        os.makedirs(self.folder, mode=0o700, exist_ok=True)
        self.timeout = timeout
        self.session = session
        self.front_end = front_end
        self.redactor = redactor
        self._clock = clock
        self._sleep = sleep

    def __call__(self, tool: str, args: dict[str, Any]) -> Decided:
        """Ask about this exact call and wait for the decision (see `ask`)."""
        return self.ask(tool, args)

    def ask(self, tool: str, args: dict[str, Any], *, rule: str | None = None, session: str | None = None,
            receipt: str | None = None) -> Decided:
        """Write the request, wait for its decision: a Decided naming who answered, its answer True (once), a
        Remember (session, always) or False (deny). TimeoutError when nobody decided in time. `receipt` is the
        receipt request file an approval must sign (the call runs only with its receipt)."""
        request_id = secrets.token_urlsafe(18)
        now = self._clock()
        shown = args if self.redactor is None else self.redactor.args(args)
        obj = {"id": request_id, "tool": tool, "args": shown, "rule": rule,
               "session": session if session is not None else self.session, "front_end": self.front_end,
               "asked": format_ts(int(now * 1e9)), "deadline": now + self.timeout, "pid": os.getpid()}
        if receipt is not None:
            obj["receipt"] = receipt
        request_path = os.path.join(self.folder, request_id + _REQUEST)
        decision_path = os.path.join(self.folder, request_id + _DECISION)
        done_path = os.path.join(self.folder, request_id + _DONE)
        _write_new(request_path, json.dumps(obj, ensure_ascii=True, sort_keys=True).encode("ascii"), replace=True)
        taken: list[str] = []  # the nonce of the decision read
        try:
            return self._wait(request_id, decision_path, now + self.timeout, taken)
        finally:  # which decision was taken, then the request, then the decision (see `decide`)
            try:
                _write_new(done_path, json.dumps({"taken": taken[0] if taken else None}).encode("ascii"),
                           replace=True)
            except OSError:
                pass
            _unlink(request_path)
            _unlink(decision_path)
            _unlink(done_path)

    def _wait(self, request_id: str, decision_path: str, deadline: float, taken: list[str]) -> Decided:
        while True:
            if os.path.exists(decision_path):
                return self._answer(request_id, decision_path, taken)
            if self._clock() >= deadline:
                nonce = secrets.token_hex(8)
                closed = json.dumps({"id": request_id, "verdict": "timeout", "nonce": nonce}).encode("ascii")
                if _write_new(decision_path, closed, replace=False):  # closed: no console can decide it now
                    taken.append(nonce)
                    raise TimeoutError(f"nobody decided within {self.timeout:g} seconds")
                return self._answer(request_id, decision_path, taken)  # decided at the last moment
            self._sleep(_POLL)

    def _answer(self, request_id: str, decision_path: str, taken: list[str]) -> Decided:
        try:
            obj = _read_json(decision_path)
            if obj is None:
                raise ValueError("the decision disappeared")
            taken.append(str(obj.get("nonce")))
            decision = parse_decision(obj, request_id)
        except (OSError, ValueError, RecursionError) as exc:  # refused: nobody said yes, nor no
            raise InboxError(f"malformed decision for {request_id}: {exc}") from None
        if decision.verdict != "approve":
            return Decided(False, decision.by)
        return Decided(True if decision.scope == "once" else Remember(decision.scope), decision.by)
