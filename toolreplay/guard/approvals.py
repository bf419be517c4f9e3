"""Approvals a person asked to remember: for this session, or for good (docs/guard.md, Remembered approvals).

A remembered approval answers one question only, the confirmation of a call: a write tool's, or an
`ask` rule's. Everything before it (recording, budgets, the allowlist, unknown outcomes, the deny
rules, idempotency) still decides first; an approval never lets a call through any of them.

The approvals file holds one approval a line (JSON Lines), so every mistake has a line number:

    {"args":{"text":"hi"},"created":"2026-12-01T19:00:00.000Z","id":"3f2a9c01b2c4","tool":"write_note"}
    {"id":"docs-writes","tool":"write_file","when":[{"arg":"path","under":["docs"]}],"note":"docs only"}

`id` (letters, digits, `_`, `.`, `-`; not starting `session-`) and `tool` are required, and exactly one
of `args` (the exact arguments, compared in canonical form) and `when` (argument conditions in the
policy rules' vocabulary, all of which must hold; one that cannot be evaluated does not hold).
`created` and `note` are optional strings. `"redacted": true` (with `args` only) says the arguments are
held as a redacting record holds them (secrets replaced by their keyed hash, `toolreplay.policy.redaction`):
such an approval matches a call whose arguments redact to them with the same key, and no call when the
store has no redactor. A store with a redactor writes only such lines, and the gate gives a store the
record's redactor (`Approvals.redact_as`): with a policy that redacts, no secret reaches the file.
A person adds lines by hand or by answering `always`;
the file is rewritten whole (a temporary file renamed over it) under a lock on `FILE.lock`, so two
proxies sharing it never lose each other's approvals and a reader never sees half a file.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError, ToolReplayError, UsageError
from toolreplay.format.canonical import canonical_bytes, canonical_json
from toolreplay.format.files import locked
from toolreplay.format.records import format_ts
from toolreplay.format.strictjson import JSONLineError, StrictLoader
from toolreplay.policy.redaction import Redactor
from toolreplay.policy.ruleparse import parse_arg_conditions
from toolreplay.policy.rules import ArgCondition

__all__ = ["SCOPES", "Approval", "Approvals", "ApprovalsError", "Decided", "Remember", "read_approvals",
           "revoke_approval"]

# What a person may answer besides yes: this call only, every identical call in this session, for good.
SCOPES = ("once", "session", "always")

_ID = re.compile(r"[A-Za-z0-9_.-]+")
_FIELDS = frozenset({"id", "tool", "args", "when", "created", "note", "redacted"})
_SESSION = "session-"


class ApprovalsError(ToolReplayError):
    """An approval could not be remembered (no file to keep it in, a malformed file, a failed write)."""


@dataclass(frozen=True, slots=True)
class Remember:
    """A `confirm` callback's yes that also asks to remember it: `scope` is one of SCOPES."""

    scope: str

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {self.scope!r}")


@dataclass(frozen=True, slots=True)
class Decided:
    """A `confirm` callback's answer that names who gave it (`by`, kept in the record's meta as
    `x-decided-by`): `answer` is what the callback would have returned, True, False or a Remember."""

    answer: bool | Remember
    by: str


@dataclass(frozen=True, slots=True)
class Approval:
    """One remembered approval: of `tool`, with exactly these arguments (`args`) or those `when` allows."""

    id: str
    tool: str
    args: bytes | None  # canonical bytes of the exact arguments
    when: tuple[ArgCondition, ...]
    fields: dict[str, Any]  # the line's object as written
    line: int = 0  # its line in the file (0: a session approval)
    redacted: bool = False  # `args` are the redacted arguments

    def matches(self, tool: str, args: dict[str, Any], redacted: bytes | None = None) -> bool:
        """Whether this approval answers the confirmation of the call (an unreadable condition: no);
        `redacted` is the canonical form of the call's redacted arguments (None: not known)."""
        if tool != self.tool:
            return False
        if self.redacted:
            return redacted is not None and redacted == self.args
        if self.args is not None:
            return canonical_bytes(args) == self.args
        return all(condition.evaluate(args) is True for condition in self.when)

    def describe(self) -> str:
        """One line for a person: id, tool, what it matches, when it was made (escaped: ASCII-only JSON)."""
        tool = self.tool if _PLAIN.fullmatch(self.tool) else json.dumps(self.tool, ensure_ascii=True)
        kind = "args" if "args" in self.fields else "when"
        text = f"{self.id} {tool} {kind} {_ascii(self.fields[kind])}"
        if "created" in self.fields:
            text += " created " + _ascii(self.fields["created"])
        if "note" in self.fields:
            text += " note " + _ascii(self.fields["note"])
        if self.redacted:
            text += " redacted"
        return text


_PLAIN = re.compile(r"[A-Za-z0-9_.:/-]+")


def _ascii(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def parse_approval(obj: Any, root: tuple[str, ...] | None = None, line: int = 0) -> Approval:
    """Validate one approval object; a ValueError says what is wrong."""
    if not isinstance(obj, dict):
        raise ValueError("an approval must be a JSON object")
    for key in obj:
        if key not in _FIELDS:
            raise ValueError(f"unknown field {json.dumps(key)[:60]} (known: args, created, id, note, redacted, tool, "
                             "when)")
    approval_id = obj.get("id")
    if not isinstance(approval_id, str) or not _ID.fullmatch(approval_id) or approval_id.startswith(_SESSION):
        raise ValueError("field \"id\" must be letters, digits, \"_\", \".\" or \"-\", not starting \"session-\"")
    if not isinstance(obj.get("tool"), str) or not obj["tool"]:
        raise ValueError("field \"tool\" must be a tool name (a non-empty string)")
    if ("args" in obj) == ("when" in obj):
        raise ValueError("an approval has exactly one of \"args\" (the exact arguments) and \"when\" (conditions)")
    for key in ("created", "note"):
        if key in obj and not isinstance(obj[key], str):
            raise ValueError(f"field \"{key}\" must be a string")
    if "redacted" in obj and (obj["redacted"] is not True or "args" not in obj):
        raise ValueError("field \"redacted\" is true, with \"args\", or left out")
    if "args" in obj:
        if not isinstance(obj["args"], dict):
            raise ValueError("field \"args\" must be an object (the call's arguments)")
        return Approval(approval_id, obj["tool"], canonical_bytes(obj["args"]), (), obj, line, "redacted" in obj)
    return Approval(approval_id, obj["tool"], None, parse_arg_conditions(obj["when"], "when", root), obj, line)


def _parse_lines(path: str, data: bytes, root: tuple[str, ...] | None) -> list[Approval]:
    """The approvals of a file's bytes, in file order; InputError naming the line of the first mistake."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, None, "not valid UTF-8") from None
    found: list[Approval] = []
    seen: dict[str, int] = {}
    loader = StrictLoader()
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = loader.loads(line)
            loader.canonical(obj)
            approval = parse_approval(obj, root, number)
        except (JSONLineError, ValueError) as exc:
            raise InputError(path, number, str(exc)) from None
        if approval.id in seen:
            raise InputError(path, number, f"approval id {approval.id} is used by line {seen[approval.id]}")
        seen[approval.id] = number
        found.append(approval)
    return found


def _read_bytes(path: str) -> bytes | None:
    """The file's bytes, None when it does not exist; UsageError when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _root_segments(root: str | None) -> tuple[str, ...] | None:
    return None if root is None else tuple(segment for segment in root.split("/") if segment)


def read_approvals(path: str, root: str | None = None) -> list[Approval]:
    """The approvals of a file, in file order (none when it does not exist); errors name the file and line.

    `root` is the policy's root folder, against which `under` conditions read absolute paths."""
    data = _read_bytes(path)
    return [] if data is None else _parse_lines(path, data, _root_segments(root))


@contextmanager
def _locked(path: str) -> Iterator[None]:
    """Hold the approvals file's lock (`PATH.lock`) between processes, for a read-change-write."""
    with locked(path + ".lock"):
        yield


def _write_whole(path: str, data: bytes) -> None:
    """Replace the file with `data`: a synced temporary file renamed over it (whole or not at all)."""
    directory = os.path.dirname(os.path.abspath(path))
    import tempfile  # here: a hook process, which never writes approvals, need not load it

    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".toolreplay-approvals-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _lines_without(data: bytes, line: int) -> bytes:
    lines = data.split(b"\n")
    del lines[line - 1]
    return b"\n".join(lines)


def revoke_approval(path: str, approval_id: str) -> Approval:
    """Remove an approval from its file (under the lock, written whole); UsageError for an unknown id."""
    with _locked(path):
        data = _read_bytes(path)
        approvals = [] if data is None else _parse_lines(path, data, None)
        approval = next((item for item in approvals if item.id == approval_id), None)
        if approval is None or data is None:
            raise UsageError(f"no approval {approval_id} in {path}")
        try:
            _write_whole(path, _lines_without(data, approval.line))
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        return approval


class Approvals:
    """The remembered approvals of one gate: the file's (re-read whenever it changed) and this session's.

    A gate is one client session: `Gate` keeps its own `for_session()` of the store it is given, so a
    `session` yes never answers another gate's (another client session's) question; `always` approvals
    are shared through the file."""

    def __init__(self, path: str | None = None, *, root: str | None = None,
                 clock: Callable[[], int] = time.time_ns, redactor: Redactor | None = None,
                 redact: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        """Read the file now (a malformed one is an InputError; a missing one holds none yet, but its folder
        must exist: a UsageError otherwise).

        Without `path` only session approvals are kept. `root` is the policy's root folder (for `under`
        conditions); `clock` (ns since the epoch) dates the approvals remembered for good. `redactor` (the
        record's) keeps the arguments of those approvals redacted: no secret in the file; a gate with a
        redacting record gives it its own (`redact_as`). `redact` (a `Redactor.args`) is the older spelling."""
        self.path = path
        self._root_folder = root
        self._root = _root_segments(root)
        self._clock = clock
        self.redactor = redactor
        self._redact = redactor.args if redactor is not None else redact
        self._lock = threading.Lock()
        self._session: list[Approval] = []
        self._file: list[Approval] = []
        self._seen: tuple[int, int, int] | None = None
        self.error: str | None = None  # why the file's approvals do not apply now (it became malformed)
        if path is not None:
            if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise UsageError(f"cannot keep approvals in {path}: its folder does not exist")
            self._file = read_approvals(path, root)
            self._seen = _signature(path)

    def redact_as(self, redactor: Redactor | None, redacts: bool) -> None:
        """Redact as the record does (`redactor`: the record's, None without one; `redacts`: the policy has a
        `redact` section): a store without its own takes the record's; ValueError when the two differ, or
        when the file would hold the arguments of a redacting policy in clear text."""
        if redactor is not None:
            if self._redact is None:
                self.redactor, self._redact = redactor, redactor.args
            elif self.redactor is not None and not self.redactor.same_as(redactor):
                raise ValueError("the approvals and the record redact differently: give both the same redactor")
        elif redacts and self.path is not None and self._redact is None:
            raise ValueError(f"the policy redacts, and the approvals in {self.path} would hold secrets in clear "
                             "text: give Approvals the record's redactor (redactor=)")

    def for_session(self) -> Approvals:
        """The same file's approvals with no session approvals yet: the store of one more client session."""
        with self._lock:
            other = copy.copy(self)
        other._lock = threading.Lock()
        other._session = []
        return other

    def find(self, tool: str, args: dict[str, Any]) -> str | None:
        """The id of the first approval that answers this call's confirmation (the file's, then the session's)."""
        with self._lock:
            self._refresh()
            approvals = [*self._file, *self._session]
        redacted = None
        if self._redact is not None and any(approval.redacted and approval.tool == tool for approval in approvals):
            redacted = canonical_bytes(self._redact(args))
        return next((approval.id for approval in approvals if approval.matches(tool, args, redacted)), None)

    def remember(self, tool: str, args: dict[str, Any], scope: str) -> str | None:
        """Remember a person's yes to this exact call for `scope`; its approval's id (None for `once`).

        An identical approval already remembered is not added twice: its id is returned."""
        if scope == "once":
            return None
        if scope == "session":
            exact = canonical_bytes(args)
            with self._lock:
                for approval in self._session:
                    if approval.tool == tool and approval.args == exact:
                        return approval.id
                approval_id = _SESSION + _new_id()
                self._session.append(Approval(approval_id, tool, exact, (), {"tool": tool, "args": args}))
                return approval_id
        if scope != "always":
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
        if self.path is None:
            raise ApprovalsError("no approvals file to remember it in")
        try:
            return self._append(self.path, tool, args)
        except ToolReplayError as exc:
            raise ApprovalsError(str(exc)) from None
        except OSError as exc:
            raise ApprovalsError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def _append(self, path: str, tool: str, args: dict[str, Any]) -> str:
        fields: dict[str, Any] = {"tool": tool, "args": args}
        if self._redact is not None:
            fields = {"tool": tool, "args": self._redact(args), "redacted": True}
        exact = canonical_bytes(fields["args"])
        with _locked(path):
            data = _read_bytes(path) or b""
            approvals = _parse_lines(path, data, self._root)
            for approval in approvals:
                if approval.tool == tool and approval.args == exact and approval.redacted == ("redacted" in fields):
                    return approval.id
            used = {approval.id for approval in approvals}
            approval_id = _new_id()
            while approval_id in used:  # pragma: no cover - 48 random bits
                approval_id = _new_id()
            line = canonical_json({"id": approval_id, **fields, "created": format_ts(self._clock())}).encode("utf-8")
            if data and not data.endswith(b"\n"):
                data += b"\n"
            _write_whole(path, data + line + b"\n")
            with self._lock:
                self._seen = None  # read back at the next find
            return approval_id

    def _refresh(self) -> None:
        """Re-read the file when it changed (lock held); a malformed file applies no approval, missing none."""
        if self.path is None:
            return
        signature = _signature(self.path)
        if signature == self._seen:
            return
        self._seen = signature
        try:
            self._file = read_approvals(self.path, self._root_folder)
            self.error = None
        except ToolReplayError as exc:
            self._file = []
            self.error = str(exc)


def _signature(path: str) -> tuple[int, int, int] | None:
    """What changes when the file is replaced or written: (inode, size, mtime); None when it is missing."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


def _new_id() -> str:
    """A random approval id (12 hex digits); `secrets` (which loads hmac) only when one is made."""
    import secrets

    return secrets.token_hex(6)
