"""The guard as Claude Code hooks (docs/hooks.md): one short-lived process per hook event.

Claude Code runs the hook command for each event with one JSON object on stdin. This module decides
and records; the command line (toolreplay/cli/hook.py) reads stdin and writes the answer.

- **PreToolUse**: the gate decides on the call (allowlist, rules, budgets, unknown outcomes,
  idempotency; a call that needs confirmation is `ask`: Claude Code asks the person). A refusal is
  recorded at once. An allowed write's intent is synced before the answer; the record of the call is
  held back, because the tool runs in Claude Code after the hook answered.
- **PostToolUse** / **PostToolUseFailure**: the held-back record is written with the tool's response
  (or its error), `meta.call_id` = `tool_use_id`, and the write's intent is settled.
- **SessionEnd**: the record is opened, checked and closed.

One sealed session per Claude Code session: RECORDS/SESSION_ID.jsonl, beside it SESSION_ID.lock
(every hook process holds it, exclusively, from opening the record to its last write), .intents (the
gate's write-ahead intents) and .pending (the calls allowed and not yet completed: their held-back
record). A PreToolUse whose Post never came leaves its write's intent open: an identical write is then
refused as an unknown outcome until a person resolves it.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError, ToolReplayError
from toolreplay.format.canonical import canonical_json
from toolreplay.format.strictjson import read_json_file
from toolreplay.guard.intents import open_private
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy, parse_policy
from toolreplay.policy.redaction import MIN_KEY_BYTES, Redactor

try:
    import fcntl
except ImportError:  # pragma: no cover - platform dependent
    fcntl = None  # type: ignore[assignment]

__all__ = ["CLAUDE_CODE_WRITES", "EVENTS", "HookAnswer", "HookError", "handle_hook", "settings_snippet"]

# The events the hook handles (the settings snippet registers exactly these).
EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionEnd")

# Claude Code's built-in tools that change state: each call is a new action (running `npm test` twice
# is two runs), so they are the gate's repeatable writes: an intent is synced before they run, and an
# identical call after one that never completed is refused as an unknown outcome. The policy's
# write_tools need confirmation (`ask`), its repeatable_tools are added to these.
CLAUDE_CODE_WRITES = ("Bash", "Edit", "MultiEdit", "NotebookEdit", "Write")

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_REASON_CHARS = 2000


class HookError(ToolReplayError):
    """The hook cannot decide or record: the command says why on one line and blocks the call."""


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """What the hook answers: for PreToolUse a decision (allow, deny, ask) and the reason; else None."""

    decision: str | None = None
    reason: str = ""

    def output(self) -> dict[str, Any] | None:
        """The JSON Claude Code reads on stdout (PreToolUse only)."""
        if self.decision is None:
            return None
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": self.decision,
                                       "permissionDecisionReason": self.reason}}


def settings_snippet(command: str) -> dict[str, Any]:
    """The `hooks` block of a Claude Code settings.json that runs `command` for the four events."""
    entry = [{"matcher": "*", "hooks": [{"type": "command", "command": command}]}]
    return {"hooks": {event: entry for event in EVENTS}}


def handle_hook(data: bytes, policy_path: str, records: str, redact_key: str | None = None) -> HookAnswer:
    """Decide on and record one hook event (the bytes Claude Code wrote on stdin); HookError when it cannot.
    `redact_key` is the file of the key for the policy's `redact` section (as mcp-proxy's --redact-key):
    secrets are replaced by a keyed hash before anything is written."""
    payload = _payload(data)
    event = payload["hook_event_name"]
    session = payload["session_id"]
    base = os.path.join(records, session)
    if not os.path.isdir(records):
        raise HookError(f"records folder {records} does not exist")
    with _Locked(base + ".lock"):
        if event == "PreToolUse":
            policy = _load_policy(policy_path, payload)
            return _pre(payload, policy, base, _redactor(policy, redact_key))
        if event in ("PostToolUse", "PostToolUseFailure"):
            # the response goes on record: with the policy's redaction, if it has one
            _post(payload, base, _redactor(_load_policy(policy_path, payload), redact_key))
        else:
            _open(base).close()
        return HookAnswer()


# -- the input --------------------------------------------------------------------------------------

def _payload(data: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HookError("hook input is not a JSON object (invalid JSON)") from None
    if not isinstance(payload, dict):
        raise HookError("hook input is not a JSON object")
    event = payload.get("hook_event_name")
    if event not in EVENTS:
        shown = json.dumps(event, ensure_ascii=True)[:60]
        raise HookError(f"unknown hook event {shown} (handled: {', '.join(EVENTS)})")
    session = payload.get("session_id")
    if not isinstance(session, str) or not _SESSION_ID.fullmatch(session):
        raise HookError("session_id must be a plain file name (letters, digits, _ . -; up to 128)")
    if event != "SessionEnd":
        for field in ("tool_name", "tool_use_id"):
            if not isinstance(payload.get(field), str) or not payload[field]:
                raise HookError(f"{event} input has no {field}")
        if not isinstance(payload.get("tool_input"), dict):
            raise HookError(f"{event} input has no tool_input object")
    if event == "PreToolUse":
        cwd = payload.get("cwd")
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise HookError("PreToolUse input has no absolute cwd")
    return payload


def _load_policy(path: str, payload: dict[str, Any]) -> Policy:
    """The policy; without a `root`, the hook's cwd (the project) is its root (a Post event checks no path:
    there, without a cwd, any root does)."""
    try:
        obj = read_json_file(path)
        cwd = payload.get("cwd")
        if isinstance(obj, dict) and "root" not in obj:
            obj = dict(obj, root=cwd if isinstance(cwd, str) and cwd.startswith("/") else "/")
        try:
            policy = parse_policy(obj, os.path.dirname(os.path.abspath(path)))
        except ValueError as exc:
            raise InputError(path, None, str(exc)) from None
    except ToolReplayError as exc:
        raise HookError(f"policy does not load: {exc}") from None
    return policy


def _redactor(policy: Policy, key_path: str | None) -> Redactor | None:
    """The record's redactor, as mcp-proxy's: a policy with a `redact` section needs a key kept off the record
    (fail closed: without one nothing is recorded, the call is blocked)."""
    if policy.redact is None:
        if key_path is not None:
            raise HookError("--redact-key needs a policy with a \"redact\" section")
        return None
    if key_path is None:
        raise HookError("the policy's \"redact\" section needs --redact-key FILE (a key of at least "
                        f"{MIN_KEY_BYTES} bytes, kept off the record)")
    from toolreplay.audit.signers import read_secret_file  # only with a key: the hook needs no other signer

    try:
        return Redactor(policy.redact, read_secret_file(key_path))
    except (ToolReplayError, ValueError) as exc:
        raise HookError(f"--redact-key {key_path}: {exc}") from None


# -- the record -------------------------------------------------------------------------------------

class _HoldingRecorder(SessionRecorder):
    """A recorder that holds back the record of a call the gate let run: Claude Code runs the tool after
    the hook answered, so its record is written by PostToolUse (with the response). Refusals and other
    answers are written at once."""

    held: tuple[int | None, dict[str, Any]] | None = None

    def append(self, tool: str, args: dict[str, Any], response: dict[str, Any], *,
               intent: int | None = None, meta: dict[str, Any] | None = None) -> int:
        if meta is not None and meta.get("outcome") == "ran":
            self.held = (intent, dict(meta))
            return self.next_index
        return super().append(tool, args, response, intent=intent, meta=meta)


def _open(base: str, cls: type[SessionRecorder] = SessionRecorder, *, keep_history: bool = False,
          redactor: Redactor | None = None) -> SessionRecorder:
    try:
        return cls.open(base + ".jsonl", sealed=True, keep_history=keep_history, redactor=redactor)
    except ToolReplayError as exc:
        raise HookError(f"cannot open the record: {exc}") from None


class _Locked:
    """An exclusive lock on RECORDS/SESSION.lock, held by one hook process at a time."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd = -1

    def __enter__(self) -> None:
        try:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        except OSError as exc:
            if self._fd >= 0:
                os.close(self._fd)
            raise HookError(f"cannot lock {self._path}: {exc.strerror or exc}") from None

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)  # closing releases the lock


def _read_pending(base: str) -> dict[str, Any]:
    try:
        with open(base + ".pending", "rb") as handle:
            pending = json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HookError(f"cannot read {base}.pending: {exc}") from None
    if not isinstance(pending, dict):
        raise HookError(f"cannot read {base}.pending: not a JSON object")
    return pending


def _write_pending(base: str, pending: dict[str, Any]) -> None:
    """Replace the pending file whole (synced), or remove it when nothing is pending."""
    path = base + ".pending"
    try:
        if not pending:
            if os.path.exists(path):
                os.unlink(path)
            return
        temporary = path + ".tmp"
        if os.path.exists(temporary):
            os.unlink(temporary)
        with open(temporary, "wb", opener=open_private) as handle:
            handle.write((canonical_json(pending) + "\n").encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        raise HookError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- the events -------------------------------------------------------------------------------------

class _ClaudeCodeHost:
    """The gate's host: Claude Code runs the tool after the hook answers, and asks the person itself."""

    asked = False

    def refusal(self, tool: str) -> str | None:
        return None  # the policy's allowlist decides

    def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
        return {}  # the response comes with PostToolUse; this record is held back

    def confirm(self, tool: str, args: dict[str, Any], context: Any) -> bool:
        self.asked = True  # answered `ask`: Claude Code puts the exact call to the person
        return True


def _pre(payload: dict[str, Any], policy: Policy, base: str, redactor: Redactor | None) -> HookAnswer:
    from toolreplay.guard.gate import Gate  # the decision needs it; Post and SessionEnd do not

    tool, args, call_id = payload["tool_name"], payload["tool_input"], payload["tool_use_id"]
    pending = _read_pending(base)
    # one read: the chain and the gate's history; with a redactor, the gate matches calls by their redacted
    # form (what the record holds), as in mcp-proxy
    recorder = _open(base, _HoldingRecorder, keep_history=True, redactor=redactor)
    assert isinstance(recorder, _HoldingRecorder)
    try:
        if call_id in pending:
            raise HookError(f"tool_use_id {json.dumps(call_id, ensure_ascii=True)[:80]} was already allowed "
                            "and has not completed")
        host = _ClaudeCodeHost()
        gate = Gate(host, policy, recorder=recorder, repeatable=CLAUDE_CODE_WRITES)
        try:
            answer = gate.handle(tool, args, key=call_id, call_id=call_id)
        except ValueError as exc:
            raise HookError(f"tool_input cannot be recorded: {exc}") from None
        if answer.outcome != "ran":
            reason = answer.response.get("error") if answer.outcome != "cached" else None
            if not isinstance(reason, str):
                reason = f"already ran: an identical {tool} call is on record and is not run again"
            return HookAnswer("deny", "toolreplay: " + reason[:_REASON_CHARS])
        assert recorder.held is not None
        intent, meta = recorder.held
        # the arguments as the record will hold them: no secret waits in the pending file either
        pending[call_id] = {"tool": tool, "args": args if redactor is None else redactor.args(args), "intent": intent,
                            "meta": meta, "started_ns": time.time_ns()}
        _write_pending(base, pending)
    finally:
        recorder.close()
    if host.asked:
        return HookAnswer("ask", "toolreplay: the policy asks a person to confirm this call")
    return HookAnswer("allow", "toolreplay: allowed by the policy")


def _post(payload: dict[str, Any], base: str, redactor: Redactor | None) -> None:
    call_id = payload["tool_use_id"]
    pending = _read_pending(base)
    entry = pending.get(call_id)
    if not isinstance(entry, dict):
        raise HookError(f"{payload['hook_event_name']} for tool_use_id "
                        f"{json.dumps(call_id, ensure_ascii=True)[:80]} without a PreToolUse that allowed it")
    if entry.get("tool") != payload["tool_name"]:
        raise HookError(f"{payload['hook_event_name']} names another tool than its PreToolUse")
    if payload["hook_event_name"] == "PostToolUse":
        response = payload.get("tool_response")
        if not isinstance(response, dict):
            response = {"result": response}
    else:
        error = payload.get("error")
        response = {"ok": False, "error": error if isinstance(error, str) else "the tool failed"}
    if redactor is not None:  # the pending arguments are already redacted: only the response is left
        response = redactor.response(response)
    meta = dict(entry["meta"])
    meta["duration_ms"] = round(meta.get("duration_ms", 0) + (time.time_ns() - entry["started_ns"]) / 1e6, 3)
    recorder = _open(base)
    try:
        try:
            recorder.append(entry["tool"], entry["args"], response, intent=entry["intent"], meta=meta)
        except (OSError, ValueError) as exc:
            raise HookError(f"cannot record {entry['tool']}: {exc}") from None
        del pending[call_id]
        _write_pending(base, pending)
    finally:
        recorder.close()

