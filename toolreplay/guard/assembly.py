"""One assembly of a guard: a single typed description (`GuardConfig`), built and validated once
(`build_guard`), and what it builds for each scope (docs/architecture.md).

Every front end gets its guard from here, from the command line or from Python, and decides nothing
about recording, redaction or approvals itself. The scopes are in the types:

- per process, a `Guard`: the policy, the redactor and its key, the approvals file, the pins file;
- per client session, `Guard.gate(...)`: the gate's state (budgets, idempotency, the rules' history)
  and the session's approvals (`Guard.session_approvals()`);
- per record, `Guard.open_record(path)`: the recorder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from toolreplay.errors import UsageError
from toolreplay.policy.model import Policy, load_policy
from toolreplay.policy.redaction import MIN_KEY_BYTES, Redaction, Redactor

if TYPE_CHECKING:
    from toolreplay.audit.checkpoint import Keys
    from toolreplay.guard.approvals import Approvals
    from toolreplay.guard.gate import Gate
    from toolreplay.guard.host import Confirm, ToolHost
    from toolreplay.guard.inbox import Inbox
    from toolreplay.guard.receipts import Receipts
    from toolreplay.guard.recorder import SessionRecorder
    from toolreplay.guard.resume import GateHistory

__all__ = ["Guard", "GuardConfig", "GuardConfigError", "build_guard", "build_redactor"]


class GuardConfigError(UsageError):
    """A guard described wrongly (a redaction without its key, a key without a redaction, ...)."""


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """A guard, described once: what every front end builds its core from.

    `policy` is a Policy or the path of its file. `record` is one record file (the stdio proxy, a Python
    host), `records` a folder of one record per session (the HTTP listener, the hooks): at most one of
    them. `approvals` is the approvals file; `redact_key` the key for the policy's `redact` section, or
    the path of its file (needed when anything is recorded, kept off the record); `pins` the pins file
    (the MCP proxy's). `read_cache`, `mutators` and `repeatable` tune the gate (docs/guard.md). `confirm`
    is the confirmation channel of a Python host (a front end with its own, the MCP client or the
    agent, ignores it). `approvers` (an OpenSSH allowed_signers file) and `receipts` (a folder) make a
    signed approval receipt the only yes to a call that needs one (toolreplay/guard/receipts.py): then no
    front end's own confirmation is asked; the policy must be a file (a receipt names its SHA-256).
    `inbox` is a records folder whose approvals inbox a person answers from `toolreplay serve`
    (toolreplay/guard/inbox.py): it becomes the confirmation channel of a Python host, and of a front end
    whose own channel cannot ask (an MCP client without elicitation); `inbox_timeout` seconds later an
    unanswered question is refused."""

    policy: Policy | str
    record: str | None = None
    records: str | None = None
    approvals: str | None = None
    redact_key: bytes | str | None = None
    pins: str | None = None
    read_cache: bool = False
    mutators: tuple[str, ...] = ()
    repeatable: tuple[str, ...] = ()
    confirm: Confirm | None = field(default=None, compare=False)
    approvers: str | None = None
    receipts: str | None = None
    inbox: str | None = None
    inbox_timeout: float = 300.0

    @property
    def recording(self) -> bool:
        """Whether anything is recorded (a record file or a records folder)."""
        return self.record is not None or self.records is not None


@dataclass(frozen=True, slots=True)
class Guard:
    """A guard as built for one process: the loaded policy, the redactor, the approvals file's store."""

    config: GuardConfig
    policy: Policy
    redactor: Redactor | None = None
    approvals: Approvals | None = None
    approvers: Keys | None = None  # the keys whose receipts approve calls, and the policy file's SHA-256
    policy_digest: str | None = None
    confirm: Confirm | None = field(default=None, compare=False)  # the config's, or its inbox's

    def confirmation(self, front_end: str | None = None, session: str | None = None) -> Confirm | None:
        """The guard's own confirmation channel for one client session (`front_end` and `session` name it
        in the inbox): the inbox's when the guard has one, else the config's `confirm`."""
        if self.config.inbox is None:
            return self.confirm
        from toolreplay.guard.inbox import Inbox

        return Inbox(self.config.inbox, timeout=self.config.inbox_timeout, session=session, front_end=front_end,
                     redactor=self.redactor)

    def open_record(self, path: str | None = None, **options: Any) -> SessionRecorder:
        """The recorder of one record (sealed, with the guard's redactor): `path`, by default the guard's
        record file (a records folder names each session's record itself); `options` go to
        SessionRecorder.open."""
        from toolreplay.guard.recorder import SessionRecorder

        path = path if path is not None else self.config.record
        if path is None:
            raise ValueError("open_record needs a path: the guard has no record file")
        return SessionRecorder.open(path, sealed=True, redactor=self.redactor, **options)

    def session_approvals(self) -> Approvals | None:
        """The approvals file's store a client session's gate is given (each gate keeps its own `session`
        approvals over it: `Approvals.for_session`)."""
        return self.approvals

    def gate(self, tools: Mapping[str, Callable[..., Any]] | ToolHost, *, recorder: SessionRecorder | None = None,
             confirm: Confirm | None = None, approvals: Approvals | None = None, **options: Any) -> Gate:
        """The gate of one client session, over `tools` (or a host): the guard's policy, read cache,
        mutators and repeatable tools; `approvals` default to the session's; `options` go to `Gate`
        (record_meta, screen, clock, ...)."""
        from toolreplay.guard.gate import Gate

        config = self.config
        if self.approvers is not None and "receipts" not in options:
            options["receipts"] = self.receipts(recorder)
        return Gate(tools, self.policy, confirm=confirm if confirm is not None else self.confirm, recorder=recorder,
                    mutators=config.mutators, repeatable=config.repeatable, read_cache=config.read_cache,
                    approvals=approvals if approvals is not None else self.session_approvals(), **options)

    def read_history(self, recorder: SessionRecorder, **options: Any) -> GateHistory:
        """The recorder's record read back as this guard's gates resume it, kept by a long-lived process that
        opens one record for one short gate after another (the hook server) and given to each as
        `gate(..., history=...)`; `options` (clock, wall_clock, remember_bytes) as the gates get them."""
        from toolreplay.guard.gate import read_history

        config = self.config
        return read_history(self.policy, recorder, mutators=config.mutators, repeatable=config.repeatable,
                            read_cache=config.read_cache, **options)

    def receipts(self, recorder: SessionRecorder | None = None) -> Receipts:
        """The receipts folder as one session's gate sees it: the session is the record (its absolute path;
        a gate without one gets a name of its own), and a continued record's receipts are used already."""
        from toolreplay.guard.receipts import Receipts, new_session

        if self.approvers is None or self.policy_digest is None or self.config.receipts is None:
            raise ValueError("the guard has no approvers: GuardConfig(approvers=..., receipts=...)")
        if recorder is None:
            session = new_session()
            return Receipts(self.config.receipts, self.approvers, self.policy_digest, session,
                            inbox=self._receipt_inbox(session))
        history = recorder.history() if recorder.resumed_records else ()
        session = os.path.abspath(recorder.path)
        return Receipts(self.config.receipts, self.approvers, self.policy_digest, session, history=history,
                        inbox=self._receipt_inbox(session))

    def _receipt_inbox(self, session: str) -> Inbox | None:
        """The inbox where a call without its receipt waits for a person to sign one, when the guard has one."""
        if self.config.inbox is None:
            return None
        from toolreplay.guard.inbox import Inbox

        return Inbox(self.config.inbox, timeout=self.config.inbox_timeout, session=session, redactor=self.redactor)


def build_guard(config: GuardConfig) -> Guard:
    """Validate the description and build the process's parts: load the policy, read the redaction key
    (fail closed: a policy that redacts records nothing without its key), open the approvals file (a
    malformed one is an InputError). GuardConfigError (a UsageError) for a wrong description."""
    if config.record is not None and config.records is not None:
        raise GuardConfigError("a guard records to one record file or to a records folder, not both")
    policy = config.policy if isinstance(config.policy, Policy) else load_policy(config.policy)
    # what is written (a record, a records folder, an approvals file) is redacted: an approvals file alone too
    redactor = build_redactor(policy.redact, config.redact_key,
                              recording=config.recording or config.approvals is not None)
    approvals = None
    if config.approvals is not None:
        from toolreplay.guard.approvals import Approvals

        approvals = Approvals(config.approvals, root=policy.root, redactor=redactor)
    approvers, digest = _approvers(config)
    if config.inbox is not None and config.confirm is not None:
        raise GuardConfigError("a guard asks a person through its confirm callback or through the inbox, not both")
    if config.inbox is not None and not config.inbox_timeout > 0:
        raise GuardConfigError(f"the inbox timeout must be more than 0 seconds, not {config.inbox_timeout}")
    if config.inbox is not None and config.records is not None and _same_path(config.inbox, config.records):
        try:  # the guard's own records folder: made now (as a front end would make it), so its inbox can be kept
            os.makedirs(config.records, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise GuardConfigError(f"cannot create the records folder {config.records}: "
                                   f"{exc.strerror or exc}") from None
    guard = Guard(config, policy, redactor, approvals, approvers, digest, config.confirm)
    if config.inbox is not None:
        guard = replace(guard, confirm=guard.confirmation("python"))
    return guard


def _same_path(first: str, second: str) -> bool:
    return os.path.abspath(first) == os.path.abspath(second)


def _approvers(config: GuardConfig) -> tuple[Keys | None, str | None]:
    """The approvers' keys and the policy file's SHA-256, when receipts approve calls."""
    if config.approvers is None and config.receipts is None:
        return None, None
    if config.approvers is None or config.receipts is None:
        raise GuardConfigError("approval receipts need both the approvers (an allowed_signers file) and the "
                               "receipts folder")
    if config.approvals is not None:
        raise GuardConfigError("approval receipts and an approvals file do not go together: a remembered approval "
                               "would let a call run without a receipt")
    if not isinstance(config.policy, str):
        raise GuardConfigError("approval receipts need the policy as a file: a receipt names its SHA-256")
    if not os.path.isdir(config.receipts):
        raise GuardConfigError(f"the receipts folder {config.receipts} is not a folder")
    from toolreplay.audit.checkpoint import Keys
    from toolreplay.audit.receipts import policy_digest
    from toolreplay.audit.signers import find_ssh_keygen, read_allowed_signers

    signers = tuple(read_allowed_signers(config.approvers))
    find_ssh_keygen()
    return Keys(os.path.abspath(config.approvers), signers), policy_digest(config.policy)


def build_redactor(redaction: Redaction | None, key: bytes | str | None, *, recording: bool) -> Redactor | None:
    """The redactor of what is written (records, an approvals file: `recording`): a policy with a `redact`
    section needs a key kept off the record (the bytes, or the path of its file); None when nothing is
    written or nothing is redacted. GuardConfigError for a
    key without a redaction, a redaction without a key, or a key too short; an unreadable key file is the
    UsageError of reading it."""
    if redaction is None:
        if key is not None:
            raise GuardConfigError("--redact-key needs a policy with a \"redact\" section")
        return None
    if not recording:
        return None
    if key is None:
        raise GuardConfigError("the policy's \"redact\" section needs --redact-key FILE (a key of at least "
                               f"{MIN_KEY_BYTES} bytes, kept off the record)")
    if isinstance(key, str):
        from toolreplay.audit.signers import read_secret_file  # only with a key file: it loads the signers

        secret = read_secret_file(key)
    else:
        secret = key
    try:
        return Redactor(redaction, secret)
    except ValueError as exc:
        raise GuardConfigError(f"--redact-key {key if isinstance(key, str) else 'bytes'}: {exc}") from None
