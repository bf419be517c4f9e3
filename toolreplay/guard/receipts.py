"""Approval receipts at the gate (docs/evidence.md, Approval receipts): a call that needs a person's yes
runs only with a receipt signed by a listed approver, for this exact call, policy and session, not
expired, and (scope `once`) never used before; the receipt goes whole into the record's meta.

How a receipt reaches the gate: through a receipts folder, the same for every front end. For a call
held back, the gate writes `FOLDER/<first 16 hex of the call digest>.request` and refuses the call
(`confirmation required: ...`); the person copies the request to their own machine, runs
`toolreplay approve NAME.request --ssh-key ...` and puts the `NAME.receipt` it writes into the folder;
the same call, made again, then runs. Nothing the client or the model sends counts: a receipt is
verified against the approvers' public keys, and a client has no private key to sign one with.

With an approvals inbox (GuardConfig(inbox=...), toolreplay/guard/inbox.py), a call without a receipt that
holds waits there instead of being refused at once: the inbox request names the receipt request, and an
approval from `toolreplay serve --ssh-key` is a receipt signed with the console's key, written beside the
request before the decision; the call then runs with that receipt, checked as any other. A denial, a
timeout, or an approval that comes without a receipt that holds refuses it.

Used nonces are read back from the record when a gate continues it, so a restart cannot replay one.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolreplay.errors import InputError, ToolReplayError
from toolreplay.format.output import write_atomically
from toolreplay.guard.outcomes import DECLINED, NOT_ASKED, TIMED_OUT, Refusal

if TYPE_CHECKING:  # the gate imports this module; the receipts' format (and ssh-keygen's) loads with a Receipts
    from toolreplay.audit.checkpoint import Keys
    from toolreplay.format.records import Record
    from toolreplay.guard.inbox import Inbox

__all__ = ["Receipted", "Receipts", "new_session"]


@dataclass(frozen=True, slots=True)
class Receipted:
    """A call approved by a receipt: the note (for `meta["x-receipt"]`), who signed it, its scope."""

    note: str
    approver: str
    scope: str


class Receipts:
    """The receipts folder of one gate (one session): checks and consumes the receipt of a call."""

    def __init__(self, folder: str, keys: Keys, policy: str, session: str, *,
                 clock: Callable[[], int] = time.time_ns, history: Iterable[Record] = (),
                 inbox: Inbox | None = None) -> None:
        """`keys` are the approvers (an allowed_signers file), `policy` the SHA-256 of the policy file,
        `session` what names this session (the record's path), `clock` the wall clock (ns since the epoch);
        `history` the records of a continued record, whose receipts are used already; `inbox` where a call
        without a receipt waits for a person to sign one (`ask`)."""
        self.folder = folder
        self.session = session
        self.inbox = inbox
        self._keys = keys
        self._policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._used: set[str] = set()
        from toolreplay.audit.receipts import parse_receipt

        for record in history:
            note = (record.meta or {}).get("x-receipt")
            if isinstance(note, str):
                try:
                    self._used.add(parse_receipt(note.encode("utf-8"), "x-receipt").nonce)
                except (InputError, UnicodeEncodeError):
                    continue

    def answer(self, identity: bytes) -> Receipted | Refusal:
        """The receipt that approves the call whose canonical form (as recorded) is `identity`, consumed;
        else the refusal (and a request file for the person to approve)."""
        from toolreplay.audit.receipts import check_receipt_signature, parse_receipt

        call = hashlib.sha256(identity).hexdigest()
        name = _name(call)
        try:
            with open(os.path.join(self.folder, name + ".receipt"), "rb") as handle:
                data = handle.read(1 << 20)
        except FileNotFoundError:
            self._request(identity, call, name)
            return Refusal("not_asked", f"confirmation required: no approval receipt for this call yet; approve "
                                        f"{name}.request of the receipts folder (toolreplay approve)")
        except OSError as exc:
            return self._refused(identity, call, name, f"cannot read it: {exc.strerror or exc}")
        try:
            receipt = parse_receipt(data, name + ".receipt")
        except InputError as exc:
            return self._refused(identity, call, name, str(exc).removeprefix(name + ".receipt"), bare=True)
        approver = check_receipt_signature(receipt, self._keys)
        why = None
        if approver is None:
            why = "not signed by a listed approver"
        elif receipt.call != call:
            why = "it approves another call (other arguments or another tool)"
        elif receipt.policy != self._policy:
            why = "it approves the call under another policy"
        elif receipt.scope != "always" and receipt.session != self.session:
            why = "it approves the call in another session"
        elif self._clock() >= receipt.expires_ns:
            why = f"it expired at {receipt.expires}"
        if why is not None:
            return self._refused(identity, call, name, why)
        with self._lock:  # checked and consumed at once: two identical calls cannot both use a once receipt
            replayed = receipt.scope == "once" and receipt.nonce in self._used
            self._used.add(receipt.nonce)
        if replayed:
            return self._refused(identity, call, name, f"it was already used (nonce {receipt.nonce})")
        assert approver is not None
        return Receipted(receipt.note, approver, receipt.scope)

    def ask(self, identity: bytes, tool: str, args: dict[str, Any]) -> tuple[Receipted | Refusal, str | None]:
        """The receipt that approves the call (`answer`); without one, and with an inbox, the call waits there for
        a person, whose approval brings the receipt: the answer then, and who decided (None when nobody did)."""
        answer = self.answer(identity)
        if self.inbox is None or not isinstance(answer, Refusal) or answer.reason not in ("not_asked", "receipt"):
            return answer, None
        from toolreplay.guard.inbox import InboxError

        request = os.path.join(self.folder, _name(hashlib.sha256(identity).hexdigest()) + ".request")
        if not os.path.isfile(request):  # it could not be written: nothing for a person to sign
            return answer, None
        try:
            decided = self.inbox.ask(tool, args, receipt=os.path.abspath(request))
        except TimeoutError:
            return TIMED_OUT, None
        except InboxError:  # a malformed decision: nobody said yes, nor no
            return NOT_ASKED, None
        if decided.answer is False:
            return DECLINED, decided.by
        return self.answer(identity), decided.by  # a yes counts only with the receipt it brought

    def _refused(self, identity: bytes, call: str, name: str, why: str, bare: bool = False) -> Refusal:
        """The refusal of a receipt that does not hold; a request the person can approve is in the folder."""
        self._request(identity, call, name)
        where = f"{name}.receipt{why}" if bare else f"{name}.receipt: {why}"
        return Refusal("receipt", f"approval receipt refused: {where}; approve {name}.request of the receipts "
                                  "folder again")

    def _request(self, identity: bytes, call: str, name: str) -> None:
        """Write the call's request file, unless one the person can still approve is there (its nonce unused)."""
        from toolreplay.audit.receipts import ApprovalRequest, format_request, parse_request

        path = os.path.join(self.folder, name + ".request")
        try:
            with open(path, "rb") as handle:
                earlier = parse_request(handle.read(1 << 20), path)
            if (earlier.call, earlier.policy, earlier.session) == (call, self._policy, self.session):
                with self._lock:
                    if earlier.nonce not in self._used:
                        return
        except (OSError, InputError):
            pass
        shown = json.loads(identity)  # the call as the record holds it: redacted where the record redacts
        request = ApprovalRequest(shown["tool"], shown["args"], call, self._policy, self.session, secrets.token_hex(16))
        try:
            with write_atomically(path) as output:
                output.write(format_request(request))
        except (OSError, ToolReplayError):  # the refusal stands; the next attempt writes the request again
            return


def new_session() -> str:
    """A session name for a gate that records nothing: unique to it."""
    return "gate-" + secrets.token_hex(8)


def _name(call: str) -> str:
    """The name of a call's request and receipt files in the folder: the first 16 hex of its digest."""
    return call[:16]
