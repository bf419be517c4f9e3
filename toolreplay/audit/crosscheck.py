"""Compare a host's own transcripts with the guard's hook records of the same sessions.

A transcript (a Claude Code transcript, a Codex rollout, a Gemini CLI chat recording; read by the
importers) says which calls the host ran; the record `DIR/SESSION_ID.jsonl` that `toolreplay hook`
wrote (and its `SESSION_ID.pending`, the calls allowed whose Post never came) says which calls passed
the guard and how it decided. A transcript call pairs with a record entry by call id
(`meta.call_id`, Claude Code's `tool_use_id`), or, where either side has no id, with the earliest
unpaired entry of the same tool and canonical arguments. Findings:

- `bypassed`: a call the host ran that no record entry pairs with;
- `ran-after-deny`: a call the guard refused (`meta.outcome` `refused`) whose result in the
  transcript is not that refusal (an error holding `toolreplay:` or the refusal's text);
- `not-run`: an entry the guard allowed that no transcript call pairs with;
- `no-record`: a transcript session with no record at all.

A refused call whose result in the transcript is the refusal counts as a deny honoured (what a
canary, a harmless call the policy denies, proves).

A call the transcript shows without a result, or whose result is the hook's own refusal (a blocked
call leaves a `toolreplay:` line), did not run. A transcript and a record that share no call at all
are not the same session: an input error, never a list of false `bypassed`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from toolreplay.errors import InputError
from toolreplay.format.canonical import canonical_bytes
from toolreplay.format.records import read_session
from toolreplay.format.strictjson import JSONLineError, StrictLoader
from toolreplay.format.text import escape_text
from toolreplay.importers import import_file
from toolreplay.importers.pairing import NO_RESPONSE

__all__ = ["Finding", "SessionCheck", "CrossCheck", "crosscheck", "render_text", "render_json", "FindingKind"]

FindingKind = Literal["bypassed", "ran-after-deny", "not-run", "no-record"]
_KINDS: tuple[FindingKind, ...] = ("bypassed", "ran-after-deny", "not-run", "no-record")
_HOOK_MARK = "toolreplay:"
_SESSION_LOOK = 200  # how many lines of a JSON Lines transcript may come before its session id
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")  # a session id the hook names a record by


@dataclass(frozen=True)
class Finding:
    """One thing that does not add up: its kind, where (transcript, session), which call, and why."""

    kind: FindingKind
    transcript: str
    session: str
    tool: str | None
    call_id: str | None
    record_index: int | None
    detail: str


@dataclass(frozen=True)
class SessionCheck:
    """One transcript's session: its record (None when there is none) and how many calls each side has."""

    transcript: str
    session: str
    format: str
    record: str | None
    host_calls: int
    record_calls: int
    honoured: int = 0  # calls the guard refused whose result in the host is that refusal
    others: tuple[str, ...] = ()  # more transcripts of the same session (a Claude Code sub-agent's)


@dataclass(frozen=True)
class CrossCheck:
    """The sessions compared and the findings, in transcript order."""

    sessions: tuple[SessionCheck, ...]
    findings: tuple[Finding, ...]

    @property
    def failed(self) -> bool:
        """Whether a call ran that the guard did not pass, or refused (exit 1)."""
        return any(finding.kind in ("bypassed", "ran-after-deny") for finding in self.findings)


@dataclass
class _Entry:
    """A call the guard saw: a record's (index, outcome) or a pending one's (index None)."""

    index: int | None
    tool: str
    call: bytes
    call_id: str | None
    outcome: str
    refusal: str | None
    paired: bool = False


@dataclass
class _HostCall:
    transcript: str
    tool: str
    call: bytes
    call_id: str | None
    response: dict[str, Any]
    entry: _Entry | None = field(default=None)


def _first_session_id(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    for key in ("sessionId", "session_id", "thread_id"):
        if isinstance(value.get(key), str) and value[key]:
            return str(value[key])
    payload = value.get("payload")
    if value.get("type") == "session_meta" and isinstance(payload, dict) and isinstance(payload.get("id"), str):
        return str(payload["id"])
    if "type" not in value and "role" not in value and isinstance(value.get("id"), str) and "instructions" in value:
        return str(value["id"])  # an older Codex rollout's first line
    return None


def transcript_session_id(path: str) -> str | None:
    """The host's session id of a transcript: Claude Code's `sessionId`, a Codex rollout's `session_meta`
    id (or `thread.started`'s `thread_id`), a Gemini CLI recording's `sessionId`; None when none is found."""
    loads = StrictLoader().loads
    try:
        with open(path, "rb") as handle:
            first = handle.readline()
            try:
                found = _first_session_id(loads(first.decode("utf-8")))
            except (JSONLineError, UnicodeDecodeError):  # not one JSON value a line: a JSON document
                try:
                    return _first_session_id(loads((first + handle.read()).decode("utf-8")))
                except (JSONLineError, UnicodeDecodeError):
                    return None
            for _ in range(_SESSION_LOOK):
                if found is not None:
                    return found
                line = handle.readline()
                if not line:
                    return None
                try:
                    found = _first_session_id(loads(line.decode("utf-8")))
                except (JSONLineError, UnicodeDecodeError):
                    return None
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    return found


def _call_bytes(tool: str, args: Any) -> bytes:
    return canonical_bytes({"args": args, "tool": tool})


def _record_entries(base: str) -> Iterator[_Entry]:
    path = base + ".jsonl"
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    with handle:
        for record in read_session(handle, path):
            meta = record.meta or {}
            call_id = meta.get("call_id") if isinstance(meta.get("call_id"), str) else None
            error = record.response.get("error")
            yield _Entry(record.index, record.tool, record.canonical_call, call_id, record.outcome,
                         error if isinstance(error, str) else None)
    try:
        with open(base + ".pending", "rb") as handle:
            pending = StrictLoader().loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return
    except (OSError, JSONLineError, UnicodeDecodeError) as exc:
        raise InputError(base + ".pending", None, f"not a readable pending file: {exc}") from None
    for key, entry in pending.items() if isinstance(pending, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("tool"), str) and isinstance(entry.get("args"), dict):
            call_id = None if "seq" in entry else key  # an agent without ids keys its pending calls by number
            yield _Entry(None, entry["tool"], _call_bytes(entry["tool"], entry["args"]), call_id, "allowed", None)


def _host_calls(path: str) -> tuple[str, list[_HostCall]]:
    with open(path, "rb") as handle:
        result = import_file(handle, "auto", path)
    calls = []
    for session in result.sessions:  # sub-agents too: their calls fire the same session's hooks
        for call in session.calls:
            call_id = (call.meta or {}).get("call_id")
            calls.append(_HostCall(path, call.tool, _call_bytes(call.tool, call.args),
                                   call_id if isinstance(call_id, str) else None, call.response))
    return result.format, calls


def _pair(calls: list[_HostCall], entries: list[_Entry]) -> None:
    by_id = {entry.call_id: entry for entry in entries if entry.call_id is not None}
    for call in calls:
        entry = by_id.get(call.call_id) if call.call_id is not None else None
        if entry is not None and not entry.paired:
            call.entry, entry.paired = entry, True
    for call in calls:  # where one side has no id: the earliest unpaired entry of the same call
        if call.entry is not None:
            continue
        for entry in entries:
            if not entry.paired and entry.call == call.call and (entry.call_id is None or call.call_id is None):
                call.entry, entry.paired = entry, True
                break


def _text(response: dict[str, Any]) -> str:
    return json.dumps(response, ensure_ascii=False)


def _ran(call: _HostCall) -> bool:
    """Whether the host shows the call as run: a result that is not missing and not the hook's refusal."""
    return call.response != NO_RESPONSE and _HOOK_MARK not in _text(call.response)


def _shows_refusal(call: _HostCall, entry: _Entry) -> bool:
    text = _text(call.response)
    if call.response.get("error") is not True:
        return False
    return _HOOK_MARK in text or entry.refusal is not None and json.dumps(entry.refusal[:60])[1:-1] in text


def _honoured(calls: list[_HostCall]) -> int:
    return sum(1 for call in calls if call.entry is not None and call.entry.outcome in ("refused", "cached")
               and _shows_refusal(call, call.entry))


def _check_session(transcript: str, session: str, calls: list[_HostCall], entries: list[_Entry],
                   record: str) -> list[Finding]:
    _pair(calls, entries)
    if calls and entries and not any(call.entry is not None for call in calls):
        raise InputError(transcript, None, f"session {session}: its {len(calls)} calls and the {len(entries)} of "
                                           f"{record} have no call in common (no call id, no tool with the same "
                                           "arguments): not the same session; nothing compared")
    found: list[Finding] = []
    for call in calls:
        entry = call.entry
        if entry is None:
            if _ran(call):
                found.append(Finding("bypassed", call.transcript, session, call.tool, call.call_id, None,
                                     "ran in the host, never passed the guard"))
        elif entry.outcome in ("refused", "cached") and call.response != NO_RESPONSE \
                and not _shows_refusal(call, entry):
            found.append(Finding("ran-after-deny", call.transcript, session, call.tool, call.call_id, entry.index,
                                 f"ran after the guard denied it ({entry.refusal or 'refused'})"))
    for entry in entries:
        if not entry.paired and entry.outcome in ("ran", "allowed", "unknown"):
            found.append(Finding("not-run", transcript, session, entry.tool, entry.call_id, entry.index,
                                 "the guard allowed it; the host never shows it"))
    return found


def _session_of(transcript: str) -> str:
    session = transcript_session_id(transcript)
    if session is None:
        raise InputError(transcript, None, "no session id found (a Claude Code transcript's sessionId, a Codex "
                                           "rollout's session_meta, a Gemini CLI recording's sessionId)")
    if _PLAIN_NAME.fullmatch(session) is None:
        raise InputError(transcript, None, f"session id {json.dumps(session)[:80]} is not a plain file name "
                                           "(letters, digits, _ . -; up to 128): no record can be named by it")
    return session


def crosscheck(transcripts: list[str], records: str) -> CrossCheck:
    """Compare the transcripts with their sessions' records in the folder `records` (the transcripts of
    one session, a Claude Code sub-agent's among them, together). Raises InputError on a transcript or
    record that cannot be read, or a pair that is not the same session."""
    if not os.path.isdir(records):
        raise InputError(records, None, "not a folder of hook records")
    by_session: dict[str, list[tuple[str, str, list[_HostCall]]]] = {}
    for transcript in transcripts:
        session = _session_of(transcript)
        by_session.setdefault(session, []).append((transcript, *_host_calls(transcript)))
    sessions: list[SessionCheck] = []
    findings: list[Finding] = []
    for session, parts in by_session.items():
        first, fmt = parts[0][0], parts[0][1]
        others = tuple(part[0] for part in parts[1:])
        calls = [call for part in parts for call in part[2]]
        base = os.path.join(records, session)
        if not os.path.isfile(base + ".jsonl"):
            sessions.append(SessionCheck(first, session, fmt, None, len(calls), 0, others=others))
            findings.append(Finding("no-record", first, session, None, None, None,
                                    f"no record {base}.jsonl ({len(calls)} calls in the host)"))
            continue
        entries = list(_record_entries(base))
        findings.extend(_check_session(first, session, calls, entries, base + ".jsonl"))
        sessions.append(SessionCheck(first, session, fmt, base + ".jsonl", len(calls), len(entries),
                                     _honoured(calls), others))
    return CrossCheck(tuple(sessions), tuple(findings))


def _where(finding: Finding) -> str:
    call = ""
    if finding.tool is not None:
        call = f", call {finding.call_id} ({finding.tool})" if finding.call_id else f", call ({finding.tool})"
        if finding.record_index is not None:
            call += f", record {finding.record_index}"
    return f"{finding.transcript}: session {finding.session}{call}"


def render_text(report: CrossCheck) -> str:
    """One line per finding, then a summary line."""
    lines = [escape_text(f"{finding.kind}: {_where(finding)}: {finding.detail}") + "\n" for finding in report.findings]
    counts = {kind: sum(1 for finding in report.findings if finding.kind == kind) for kind in _KINDS}
    compared = sum(session.host_calls for session in report.sessions)
    summary = ", ".join(f"{counts[kind]} {kind}" for kind in _KINDS)
    plural = "s" if len(report.sessions) != 1 else ""
    honoured = sum(session.honoured for session in report.sessions)
    lines.append(f"crosscheck: {len(report.sessions)} session{plural}, {compared} host calls: {summary}; "
                 f"{honoured} {'deny' if honoured == 1 else 'denies'} honoured\n")
    return "".join(lines)


def render_json(report: CrossCheck) -> str:
    """The report as one JSON document (sessions, findings, counts)."""
    document = {
        "sessions": [{"transcripts": [s.transcript, *s.others], "session": s.session, "format": s.format,
                      "record": s.record,
                      "host_calls": s.host_calls, "record_calls": s.record_calls, "honoured": s.honoured}
                     for s in report.sessions],
        "findings": [{"kind": f.kind, "transcript": f.transcript, "session": f.session, "tool": f.tool,
                      "call_id": f.call_id, "record_index": f.record_index, "detail": f.detail}
                     for f in report.findings],
        "counts": {kind: sum(1 for f in report.findings if f.kind == kind) for kind in _KINDS},
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"
