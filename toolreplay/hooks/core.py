"""The guard as an agent's hooks (docs/hooks.md, docs/hooks-gemini-cli.md, docs/hooks-codex.md): a process per event.

Claude Code and Gemini CLI run the hook command for each event with one JSON object on stdin. This module
decides and records for both, with one core: an `Agent` profile names the agent's events, the field of
its call id (if it has one), its built-in writes, whether it can ask a person, and how the decision is
printed. The command line (toolreplay/cli/hook.py) reads stdin and writes the answer.

Claude Code's events (Gemini CLI's are BeforeTool, AfterTool and SessionEnd, the same steps):

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

Codex (toolreplay/hooks/codex.py) has PreToolUse and PostToolUse with a `tool_use_id`, a PermissionRequest
(when Codex itself would ask the person: denied unless it is about a call a PreToolUse allowed), no session
end, and hooks that cannot ask; an `apply_patch` is decided with the `path` of each file it touches.

With an approvals inbox (`--inbox DIR`, GuardConfig(inbox=...)), a call the policy wants confirmed waits in
DIR's inbox for a person's decision from `toolreplay serve` (whatever the agent: Claude Code is not asked to
ask), bounded by the inbox timeout (DEFAULT_INBOX_TIMEOUT, under the agents' hook timeouts): approved, it
is allowed; denied, timed out or decided by nobody, it is denied. The record names who decided.

Gemini CLI gives a call no id: an AfterTool completes the oldest pending BeforeTool of the session with the
same tool_name and the same canonical tool_input (first in, first out), and the record has no
`meta.call_id`. Its hooks cannot ask a person: a call the policy wants confirmed is denied.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolreplay.errors import InputError, ToolReplayError
from toolreplay.format.canonical import canonical_json
from toolreplay.format.files import locked, replace_privately
from toolreplay.format.strictjson import parse_json_bytes, read_json_file
from toolreplay.guard.assembly import Guard, GuardConfig, GuardConfigError, build_guard
from toolreplay.guard.intents import IntentFile, read_intents
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.hooks import codex
from toolreplay.hooks.cache import HookCache, SessionState
from toolreplay.hooks.protocol import DEFAULT_INBOX_TIMEOUT, MAX_INBOX_TIMEOUT, inbox_seconds
from toolreplay.policy.model import Policy, parse_policy
from toolreplay.policy.redaction import Redactor

if TYPE_CHECKING:
    from toolreplay.guard.gate import Gate
    from toolreplay.guard.host import Confirm

__all__ = ["AGENTS", "CLAUDE_CODE", "CLAUDE_CODE_WRITES", "CODEX", "DEFAULT_INBOX_TIMEOUT", "EVENTS", "GEMINI_CLI",
           "GEMINI_CLI_WRITES", "Agent", "HookAnswer", "HookError", "check_policy", "handle_hook", "hook_seconds",
           "http_settings_snippet", "inbox_timeout", "settings_snippet"]

# Claude Code's built-in tools that change state: each call is a new action (running `npm test` twice
# is two runs), so they are the gate's repeatable writes: an intent is synced before they run, and an
# identical call after one that never completed is refused as an unknown outcome. The policy's
# write_tools need confirmation (`ask`), its repeatable_tools are added to these.
CLAUDE_CODE_WRITES = ("Bash", "Edit", "MultiEdit", "NotebookEdit", "Write")
# Gemini CLI's built-in tools that change state (its tools reference: kind Execute or Edit, and the
# memory tool), repeatable writes as Claude Code's.
GEMINI_CLI_WRITES = ("replace", "run_shell_command", "save_memory", "write_file")

_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_REASON_CHARS = 2000


class HookError(ToolReplayError):
    """The hook cannot decide or record: the command says why on one line and blocks the call."""


@dataclass(frozen=True, slots=True)
class HookAnswer:
    """What the hook answers: for the pre-tool event a decision (allow, deny, ask) and the reason; else None."""

    decision: str | None = None
    reason: str = ""
    event: str | None = None  # the event answered, when it is not the pre-tool event (Codex's PermissionRequest)

    def output(self) -> dict[str, Any] | None:
        """The JSON Claude Code reads on stdout (PreToolUse only)."""
        if self.decision is None:
            return None
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": self.decision,
                                       "permissionDecisionReason": self.reason}}


def _gemini_output(answer: HookAnswer) -> dict[str, Any] | None:
    """The JSON Gemini CLI reads on stdout (BeforeTool only): `decision` allow or deny, and the `reason` the
    model gets as the tool's error."""
    if answer.decision is None:
        return None
    if answer.decision == "allow":
        return {"decision": "allow"}
    return {"decision": answer.decision, "reason": answer.reason}


@dataclass(frozen=True, slots=True)
class Agent:
    """What differs between agents' hook systems; the decision and the record are the same code."""

    name: str
    title: str
    pre: str  # the event before a tool runs: the gate decides
    post: str  # after it ran: the held-back record is written with the response
    failure: str | None  # after it failed, when the agent has such an event
    end: str | None  # the session ended: the record is checked and closed (None: the agent has no such event)
    call_id: str | None  # the input field of the call's id; None: a post event is paired first in, first out
    writes: tuple[str, ...]  # the agent's built-in writes (repeatable)
    can_ask: bool  # whether the agent can put a call to a person (else such a call is denied)
    output: Callable[[HookAnswer], dict[str, Any] | None]
    permission: str | None = None  # the event the agent sends when it would ask the person itself (Codex)
    # the arguments the gate decides on and records, from the pre event and the policy (default: tool_input)
    gate_args: Callable[[dict[str, Any], Policy], dict[str, Any]] | None = None

    @property
    def events(self) -> tuple[str, ...]:
        """The events the hook handles (the settings snippet registers exactly these)."""
        return tuple(event for event in (self.pre, self.permission, self.post, self.failure, self.end) if event)


CLAUDE_CODE = Agent("claude-code", "Claude Code", "PreToolUse", "PostToolUse", "PostToolUseFailure", "SessionEnd",
                    "tool_use_id", CLAUDE_CODE_WRITES, True, HookAnswer.output)
GEMINI_CLI = Agent("gemini-cli", "Gemini CLI", "BeforeTool", "AfterTool", None, "SessionEnd", None,
                   GEMINI_CLI_WRITES, False, _gemini_output)


def _codex_output(answer: HookAnswer) -> dict[str, Any] | None:
    return codex.output(answer.event or "PreToolUse", answer.decision, answer.reason)


CODEX = Agent("codex", "Codex", "PreToolUse", "PostToolUse", None, None, "tool_use_id", codex.CODEX_WRITES, False,
              _codex_output, codex.PERMISSION_EVENT, codex.gate_args)
AGENTS = {agent.name: agent for agent in (CLAUDE_CODE, GEMINI_CLI, CODEX)}

# Claude Code's events (kept for the callers of this name).
EVENTS = CLAUDE_CODE.events


def hook_seconds(inbox_timeout: float) -> int:
    """The hook timeout to register for a hook whose calls may wait `inbox_timeout` seconds in the inbox: that and
    20 s more (the hook's own work, the fast client starting its server), whole seconds."""
    return int(inbox_timeout + 0.999) + 20


def settings_snippet(command: str, agent: Agent = CLAUDE_CODE, *, hook_seconds: int | None = None) -> dict[str, Any]:
    """The `hooks` block of the agent's settings.json that runs `command` for its events (matcher `*`);
    `hook_seconds` the hook's timeout, when the agent's default is not meant (Gemini CLI's `timeout` is in
    milliseconds, Claude Code's and Codex's in seconds)."""
    hook: dict[str, Any] = {"type": "command", "command": command}
    if agent is GEMINI_CLI:
        hook = {"name": "toolreplay", **hook}  # the name Gemini CLI's /hooks commands enable and disable
    if hook_seconds is not None:
        hook["timeout"] = hook_seconds * 1000 if agent is GEMINI_CLI else hook_seconds
    entry = [{"matcher": "*", "hooks": [hook]}]
    return {"hooks": {event: entry for event in agent.events}}


def http_settings_snippet(url: str, token_variable: str, agent: Agent = CLAUDE_CODE) -> dict[str, Any]:
    """The `hooks` block of Claude Code's settings.json that posts its events to the hook endpoint at `url`
    (`type: "http"`), with the bearer token from the environment variable `token_variable`, and
    `onFailure: "block"`: an endpoint that is down or refuses blocks the call instead of letting it run."""
    hook = {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{token_variable}}}"},
            "allowedEnvVars": [token_variable], "onFailure": "block"}
    entry = [{"matcher": "*", "hooks": [hook]}]
    return {"hooks": {event: entry for event in agent.events}}


def inbox_timeout(text: str | None) -> float:
    """The seconds of `--inbox-timeout` (DEFAULT_INBOX_TIMEOUT when not given); HookError when it is no number of
    seconds more than 0 and at most a day."""
    seconds = inbox_seconds(text)
    if seconds is None:
        raise HookError(f"--inbox-timeout {json.dumps(text, ensure_ascii=True)[1:-1][:40]}: expected seconds, more "
                        f"than 0 and at most {MAX_INBOX_TIMEOUT:.0f}")
    return seconds


def handle_hook(data: bytes, policy_path: str, records: str, redact_key: str | None = None,
                agent: Agent = CLAUDE_CODE, cache: HookCache | None = None, *, inbox: str | None = None,
                timeout: float | None = None) -> HookAnswer:
    """Decide on and record one hook event (the bytes the agent wrote on stdin); HookError when it cannot.
    `redact_key` is the file of the key for the policy's `redact` section (as mcp-proxy's --redact-key):
    secrets are replaced by a keyed hash before anything is written. `cache` is a hook server's memory
    between events (toolreplay/hooks/cache.py): the same decisions and the same record, without reading
    the policy and the session's record again while they are unchanged. `inbox` is a records folder whose
    approvals inbox a call that needs a person waits in, `timeout` seconds at most (DEFAULT_INBOX_TIMEOUT)."""
    payload = _payload(data, agent)
    event = payload["hook_event_name"]
    session = payload["session_id"]
    base = os.path.join(records, session)
    if not os.path.isdir(records):
        raise HookError(f"records folder {records} does not exist")
    with _Locked(base + ".lock"):
        state = cache.session(base) if cache is not None else None
        kept = state
        try:
            if event == agent.pre:
                guard = _guard_for(policy_path, payload, records, redact_key, agent, cache, inbox,
                                   DEFAULT_INBOX_TIMEOUT if timeout is None else timeout)
                return _pre(payload, guard, base, agent, state)
            if event == agent.permission:
                guard = _guard_for(policy_path, payload, records, redact_key, agent, cache)
                return _permission(payload, base, guard.redactor, agent)
            if event != agent.end:
                # the response goes on record: with the policy's redaction, if it has one
                _post(payload, base, _guard_for(policy_path, payload, records, redact_key, agent, cache).redactor,
                      agent, state)
            else:
                if state is not None:
                    state.release()
                _open(base).close()
                state = None  # the session ended: nothing kept for it
        except HookError:
            raise  # the state is where the event's recorder left the file (or as it was: none was opened)
        except BaseException:
            state = None  # a fault of ours: the next event reads everything again
            raise
        finally:
            if cache is not None:
                if state is not None and state.point is not None:
                    cache.keep(base, state)
                else:
                    cache.forget(base)
                    if kept is not None:
                        kept.release()
        return HookAnswer()


# -- the input --------------------------------------------------------------------------------------

def _payload(data: bytes, agent: Agent) -> dict[str, Any]:
    try:
        payload = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise HookError("hook input is not a JSON object (invalid JSON)") from None
    if not isinstance(payload, dict):
        raise HookError("hook input is not a JSON object")
    event = payload.get("hook_event_name")
    if event not in agent.events:
        shown = json.dumps(event, ensure_ascii=True)[:60]
        raise HookError(f"unknown hook event {shown} (handled: {', '.join(agent.events)})")
    session = payload.get("session_id")
    if not isinstance(session, str) or not _SESSION_ID.fullmatch(session):
        raise HookError("session_id must be a plain file name (letters, digits, _ . -; up to 128)")
    if event != agent.end:
        ids = (agent.call_id,) if agent.call_id and event != agent.permission else ()
        for field in ("tool_name", *ids):
            if not isinstance(payload.get(field), str) or not payload[field]:
                raise HookError(f"{event} input has no {field}")
        if not isinstance(payload.get("tool_input"), dict):
            raise HookError(f"{event} input has no tool_input object")
    if event in (agent.pre, agent.permission):
        cwd = payload.get("cwd")
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            raise HookError(f"{event} input has no absolute cwd")
    return payload


def check_policy(path: str) -> None:
    """HookError unless the policy file loads (as each event will load it; its root is then the event's cwd)."""
    _load_policy(path, {})


def _load_policy(path: str, payload: dict[str, Any]) -> Policy:
    """The policy; without a `root`, the hook's cwd (the project) is its root (a Post event checks no path:
    there, without a cwd, any root does)."""
    try:
        obj = read_json_file(path)
    except ToolReplayError as exc:
        raise HookError(f"policy does not load: {exc}") from None
    return _policy_from(obj, path, payload)


def _policy_from(obj: Any, path: str, payload: dict[str, Any]) -> Policy:
    """The policy of the file's JSON `obj`, its root the event's cwd when it names none."""
    root = _default_root(obj, payload)
    if root is not None:
        obj = dict(obj, root=root)
    try:
        return parse_policy(obj, os.path.dirname(os.path.abspath(path)))
    except ValueError as exc:
        raise HookError(f"policy does not load: {InputError(path, None, str(exc))}") from None


def _default_root(obj: Any, payload: dict[str, Any]) -> str | None:
    """The root a policy file's JSON `obj` gets when it names none: the event's cwd (any root, "/", for an event
    without one); None when it names its own (or is no object: the parser says what is wrong)."""
    if not isinstance(obj, dict) or "root" in obj:
        return None
    cwd = payload.get("cwd")
    return cwd if isinstance(cwd, str) and cwd.startswith("/") else "/"


def _guard_for(policy_path: str, payload: dict[str, Any], records: str, redact_key: str | None, agent: Agent,
               cache: HookCache | None, inbox: str | None = None, timeout: float = DEFAULT_INBOX_TIMEOUT) -> Guard:
    """The event's guard: built from the files (a process per event), or, with a cache, the one built
    earlier from the same bytes of the policy file and of the key file (and the same root, for a policy that
    takes it from the event's cwd)."""
    if cache is None:
        return _guard(_load_policy(policy_path, payload), records, redact_key, agent, inbox, timeout)
    try:
        policy_bytes = _read_bytes(policy_path)
        key_bytes = None if redact_key is None else _read_bytes(redact_key)
    except OSError:  # the error as the files' own readers word it
        return _guard(_load_policy(policy_path, payload), records, redact_key, agent, inbox, timeout)
    obj = cache.policy_object((policy_path, policy_bytes), lambda: _parse_policy_bytes(policy_path, policy_bytes))
    key = (policy_path, policy_bytes, _default_root(obj, payload), records, redact_key, key_bytes, agent.name, inbox,
           timeout)

    def build() -> Guard:
        guard = _guard(_policy_from(obj, policy_path, payload), records, redact_key, agent, inbox, timeout)
        try:
            unchanged = key_bytes is None or _read_bytes(redact_key or "") == key_bytes
        except OSError:
            unchanged = False
        if not unchanged:  # the key file changed while the guard was built: nothing is kept of it
            raise _Changed(guard)
        return guard

    try:
        return cache.guard(key, build)
    except _Changed as changed:
        return changed.guard


class _Changed(Exception):  # noqa: N818 - a signal, not an error
    """A guard built from a file that changed meanwhile: used for this event, not kept."""

    def __init__(self, guard: Guard) -> None:
        super().__init__()
        self.guard = guard


def _read_bytes(path: str) -> bytes:
    """The file's bytes, in as few system calls as can be (the server reads the policy at every event)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(descriptor, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def _parse_policy_bytes(path: str, data: bytes) -> Any:
    try:
        return parse_json_bytes(data, path)
    except ToolReplayError as exc:
        raise HookError(f"policy does not load: {exc}") from None


def _guard(policy: Policy, records: str, redact_key: str | None, agent: Agent, inbox: str | None = None,
           timeout: float = DEFAULT_INBOX_TIMEOUT) -> Guard:
    """The hook's guard, assembled as mcp-proxy's (toolreplay.guard.assembly): the policy's redaction needs
    a key kept off the record (fail closed: without one nothing is recorded, the call is blocked); the
    agent's built-in writes are repeatable; `inbox` the approvals inbox a call that needs a person waits in."""
    try:
        return build_guard(GuardConfig(policy, records=records, redact_key=redact_key, repeatable=agent.writes,
                                       inbox=inbox, inbox_timeout=timeout))
    except GuardConfigError as exc:
        raise HookError(str(exc)) from None
    except ToolReplayError as exc:  # the key file cannot be read, or the inbox cannot be kept
        if inbox is not None:
            from toolreplay.guard.inbox import InboxError  # loaded with an inbox only

            if isinstance(exc, InboxError):
                raise HookError(str(exc)) from None
        raise HookError(f"--redact-key {redact_key}: {exc}") from None


# -- the record -------------------------------------------------------------------------------------

class _HoldingRecorder(SessionRecorder):
    """A recorder that holds back the record of a call the gate let run: Claude Code runs the tool after
    the hook answered, so its record is written by PostToolUse (with the response). Refusals and other
    answers are written at once."""

    held: tuple[int | None, dict[str, Any]] | None = None

    def append(self, tool: str, args: dict[str, Any], response: dict[str, Any], *,
               intent: int | None = None, meta: dict[str, Any] | None = None, args_bytes: bytes | None = None,
               response_bytes: bytes | None = None) -> int:
        if meta is not None and meta.get("outcome") == "ran":
            self.held = (intent, dict(meta))
            return self.next_index
        return super().append(tool, args, response, intent=intent, meta=meta, args_bytes=args_bytes,
                              response_bytes=response_bytes)


def _open(base: str, cls: type[SessionRecorder] = SessionRecorder, *, keep_history: bool = False,
          redactor: Redactor | None = None, state: SessionState | None = None) -> SessionRecorder:
    """The session's recorder; with a hook server's state, opened where the server left the record, with the
    intent file it keeps open."""
    at = None if state is None else state.point
    try:
        return cls.open(base + ".jsonl", sealed=True, keep_history=keep_history, redactor=redactor, at=at,
                        intents=_lasting_intents(base, state))
    except ToolReplayError as exc:
        raise HookError(f"cannot open the record: {exc}") from None


def _lasting_intents(base: str, state: SessionState | None) -> IntentFile | None:
    """The intent file a hook server keeps open for the session, if it is still the one it left (or none is
    there); else it is read now, and kept from now on when it holds no settled intent (one that does is left to
    the recorder to read and cut down, as a hook process does: None)."""
    if state is None:
        return None
    kept = state.intents  # once: a server short of room may release it from another thread
    if kept is not None:
        if kept.unchanged():
            kept.rebase()
            return kept
        state.release()
    path = base + ".jsonl.intents"
    try:
        intents = read_intents(path)
    except ToolReplayError:
        return None  # the recorder reads it again and says what is wrong
    if any(intent.done is not None for intent in intents):
        return None
    state.intents = IntentFile(path, intents, lasting=True)
    return state.intents


def _opened(recorder: SessionRecorder, state: SessionState | None) -> None:
    """A hook server's recorder is open: where its file stands (the point the records appended from now on are
    read back from); a state whose point the file no longer matches is forgotten."""
    if state is None:
        return
    if not recorder.opened_at_point:
        state.guard = state.history = None
    state.point = recorder.resume_point()


def _closing(recorder: SessionRecorder, state: SessionState | None) -> None:
    """Before a hook server's recorder closes: the records this event appended go into the kept history, and
    the state moves to where the file now stands (unknown if the records cannot be read back)."""
    if state is None or state.point is None:
        return
    start = state.point
    try:
        state.point = recorder.resume_point()
        if state.point is not None and state.history is not None and state.point.size != start.size:
            state.history.add(recorder.records_since(start), started=time.monotonic(), now=time.time_ns())
    except (OSError, ValueError, ToolReplayError):
        state.point = None  # read whole at the next event, which says what is wrong


class _Locked:
    """An exclusive lock on RECORDS/SESSION.lock, held by one hook process at a time."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __enter__(self) -> None:
        hold = locked(self._path)
        try:
            hold.__enter__()
        except OSError as exc:
            raise HookError(f"cannot lock {self._path}: {exc.strerror or exc}") from None
        self._hold = hold

    def __exit__(self, *exc: object) -> None:
        self._hold.__exit__(None, None, None)  # closing releases the lock


def _read_pending(base: str, state: SessionState | None = None) -> dict[str, Any]:
    """The pending calls; with a hook server's state, those it wrote last while the file is still that one (or
    still absent), without reading it."""
    path = base + ".pending"
    if state is not None and state.pending is not None:
        try:
            now: tuple[int, ...] | None = _file_identity(os.stat(path))
        except FileNotFoundError:
            now = None
        except OSError:
            now = ()
        if now == state.pending[0]:
            return dict(state.pending[1])
    try:
        with open(path, "rb") as handle:
            identity: tuple[int, ...] | None = _file_identity(os.fstat(handle.fileno()))
            data = handle.read()
        # empty: never written so (an empty one is removed), a replace the machine's crash cut short
        pending = json.loads(data.decode("utf-8")) if data else {}
    except FileNotFoundError:
        identity, pending = None, {}
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise HookError(f"cannot read {base}.pending: {exc}") from None
    if not isinstance(pending, dict):
        raise HookError(f"cannot read {base}.pending: not a JSON object")
    if state is not None:
        state.pending = (identity, dict(pending))
    return pending


def _file_identity(status: os.stat_result) -> tuple[int, ...]:
    """What tells one version of a small file from another (a replace makes a new inode; times change)."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def _write_pending(base: str, pending: dict[str, Any], state: SessionState | None = None) -> None:
    """Replace the pending file whole, or remove it when nothing is pending.

    Not synced: what makes an allowed write safe is its intent, synced before the answer. A crash of the
    machine can lose the pending file's last change (or leave it empty): a call allowed just before has no
    held-back record then, and its Post (there is none when the agent died with the machine) is blocked; its
    intent stays open, so an identical write is refused as of unknown outcome until a person resolves it,
    as when the Post never came. The record's own lines are not synced either (docs/guard.md, The record):
    the intent is the one thing on disk before the tool runs. A crash of the hook process alone loses
    nothing (the file is written whole and renamed into place)."""
    path = base + ".pending"
    if state is not None:
        state.pending = None  # unknown until written
    try:
        if not pending:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            identity = None
        else:
            replace_privately(path, [(canonical_json(pending) + "\n").encode("utf-8")], sync=False)
            identity = _file_identity(os.stat(path))
    except OSError as exc:
        raise HookError(f"cannot write {path}: {exc.strerror or exc}") from None
    if state is not None:
        state.pending = (identity, dict(pending))


# -- the events -------------------------------------------------------------------------------------

class _AgentHost:
    """The gate's host: the agent runs the tool after the hook answers, and asks the person itself if it can;
    with an inbox, the person answers there, and the hook waits for the decision."""

    asked = False

    def __init__(self, can_ask: bool, inbox: Confirm | None = None) -> None:
        self._can_ask = can_ask
        self._inbox = inbox

    def refusal(self, tool: str) -> None:
        return None  # the policy's allowlist decides

    def run(self, tool: str, args: dict[str, Any], context: Any) -> Any:
        return {}  # the response comes with the post event; this record is held back

    def confirm(self, tool: str, args: dict[str, Any], context: Any) -> Any:
        self.asked = True
        if self._inbox is not None:  # a Decided naming the person; a timeout or a malformed decision refuses
            return self._inbox(tool, args)
        if not self._can_ask:  # Gemini CLI: no hook answer makes it ask; nobody said yes
            from toolreplay.guard.host import CannotConfirmError

            raise CannotConfirmError("the agent's hooks cannot ask a person")
        return True  # answered `ask`: Claude Code puts the exact call to the person


def _pre(payload: dict[str, Any], guard: Guard, base: str, agent: Agent, state: SessionState | None) -> HookAnswer:
    redactor = guard.redactor

    tool, args = payload["tool_name"], payload["tool_input"]
    if agent.gate_args is not None:
        try:
            args = agent.gate_args(payload, guard.policy)
        except ValueError as exc:
            raise HookError(str(exc)) from None
    call_id = payload[agent.call_id] if agent.call_id else None
    pending = _read_pending(base, state)
    # one read: the chain and the gate's history; with a redactor, the gate matches calls by their redacted
    # form (what the record holds), as in mcp-proxy
    recorder = _open(base, _HoldingRecorder, keep_history=True, redactor=redactor, state=state)
    assert isinstance(recorder, _HoldingRecorder)
    try:
        _opened(recorder, state)
        if call_id is not None and call_id in pending:
            raise HookError(f"{agent.call_id} {json.dumps(call_id, ensure_ascii=True)[:80]} was already allowed "
                            "and has not completed")
        inbox = guard.confirmation(f"hook {agent.name}", os.path.abspath(base + ".jsonl"))
        host = _AgentHost(agent.can_ask, inbox)
        gate = _gate(guard, host, recorder, state)
        try:
            answer = gate.handle(tool, args, key=call_id, call_id=call_id)
        except ValueError as exc:
            raise HookError(f"tool_input cannot be recorded: {exc}") from None
        if answer.outcome != "ran":
            reason = answer.response.get("error") if answer.outcome != "cached" else None
            if not isinstance(reason, str):
                reason = f"already ran: an identical {tool} call is on record and is not run again"
            elif host.asked and inbox is not None:
                timed_out = answer.refusal is not None and answer.refusal.reason == "timed_out"
                reason += (f" (nobody decided in the approvals inbox within {guard.config.inbox_timeout:g} s)"
                           if timed_out else " (asked in the approvals inbox)") + "; it did not run"
            elif host.asked and not agent.can_ask:
                reason += (f": the policy asks a person to confirm this call, and {agent.title} hooks cannot ask; "
                           "it did not run")
            return HookAnswer("deny", "toolreplay: " + reason[:_REASON_CHARS])
        assert recorder.held is not None
        intent, meta = recorder.held
        # the arguments as the record will hold them: no secret waits in the pending file either
        entry = {"tool": tool, "args": args if redactor is None else redactor.args(args), "intent": intent,
                 "meta": meta, "started_ns": time.time_ns()}
        if call_id is None:  # no id: the post event finds its call by tool and arguments, the oldest first
            entry["seq"] = max((item.get("seq", 0) for item in pending.values() if isinstance(item, dict)),
                               default=0) + 1
            call_id = str(entry["seq"])
        pending[call_id] = entry
        _write_pending(base, pending, state)
    finally:
        _closing(recorder, state)
        recorder.close()
    if host.asked and inbox is not None:
        return HookAnswer("allow", "toolreplay: approved in the approvals inbox"
                          + (f" by {meta['x-decided-by']}" if isinstance(meta.get("x-decided-by"), str) else ""))
    if host.asked:
        return HookAnswer("ask", "toolreplay: the policy asks a person to confirm this call")
    return HookAnswer("allow", "toolreplay: allowed by the policy")


def _permission(payload: dict[str, Any], base: str, redactor: Redactor | None, agent: Agent) -> HookAnswer:
    """The agent would ask the person about a call: no answer (the person decides) when a pre event allowed that
    call and it has not completed, else a deny (nothing the guard allowed asks for it)."""
    try:
        allowed = codex.permission_matches(payload, _read_pending(base), redactor)
    except (ValueError, RecursionError) as exc:
        raise HookError(f"tool_input cannot be recorded: {exc}") from None
    if allowed:
        return HookAnswer(None, "", payload["hook_event_name"])
    reason = (f"toolreplay: no {agent.pre} allowed this {codex.shown(payload['tool_name'])} call, so no approval "
              "is given for it")
    return HookAnswer("deny", reason, payload["hook_event_name"])


def _gate(guard: Guard, host: _AgentHost, recorder: SessionRecorder, state: SessionState | None) -> Gate:
    """The event's gate: with a hook server's state, started from the session's kept history (read once
    more when there is none for this guard, or it does not cover the record's intents)."""
    clock, wall_clock = time.monotonic, time.time_ns  # looked up at each event: a test sets the time
    if state is None:
        return guard.gate(host, recorder=recorder, clock=clock, wall_clock=wall_clock)
    if state.guard is not guard or state.history is None or not state.history.can_start(recorder):
        state.guard, state.history = guard, guard.read_history(recorder, clock=clock, wall_clock=wall_clock)
    return guard.gate(host, recorder=recorder, history=state.history, clock=clock, wall_clock=wall_clock)


def _post(payload: dict[str, Any], base: str, redactor: Redactor | None, agent: Agent,
          state: SessionState | None) -> None:
    event = payload["hook_event_name"]
    pending = _read_pending(base, state)
    if agent.call_id is not None:
        call_id = payload[agent.call_id]
        entry = pending.get(call_id)
        if not isinstance(entry, dict):
            raise HookError(f"{event} for {agent.call_id} {json.dumps(call_id, ensure_ascii=True)[:80]} without a "
                            f"{agent.pre} that allowed it")
        if entry.get("tool") != payload["tool_name"]:
            raise HookError(f"{event} names another tool than its {agent.pre}")
    else:
        call_id = _paired(payload, pending, redactor, agent)
        entry = pending[call_id]
    if event == agent.post:
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
    recorder = _open(base, state=state)
    try:
        _opened(recorder, state)
        try:
            recorder.append(entry["tool"], entry["args"], response, intent=entry["intent"], meta=meta)
        except (OSError, ValueError) as exc:
            raise HookError(f"cannot record {entry['tool']}: {exc}") from None
        del pending[call_id]
        _write_pending(base, pending, state)
    finally:
        _closing(recorder, state)
        recorder.close()


def _paired(payload: dict[str, Any], pending: dict[str, Any], redactor: Redactor | None, agent: Agent) -> str:
    """The pending call a post event without a call id completes: the oldest with the same tool_name and the
    same canonical tool_input (as the record holds it: redacted, with a redactor)."""
    tool, args = payload["tool_name"], payload["tool_input"]
    try:
        wanted = canonical_json(args if redactor is None else redactor.args(args))
        matches = [(entry["seq"], key) for key, entry in pending.items()
                   if isinstance(entry, dict) and entry.get("tool") == tool and isinstance(entry.get("seq"), int)
                   and canonical_json(entry.get("args")) == wanted]
    except (ValueError, RecursionError) as exc:
        raise HookError(f"tool_input cannot be recorded: {exc}") from None
    if not matches:
        raise HookError(f"{payload['hook_event_name']} for {json.dumps(tool, ensure_ascii=True)[:80]} without a "
                        f"{agent.pre} that allowed it (no call of that tool_name and tool_input is pending)")
    return min(matches)[1]
