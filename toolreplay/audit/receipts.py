"""Approval receipts (docs/evidence.md, Approval receipts): a person's yes to one call, as a signed note
a client cannot forge, and the offline check that every write of a record carried one.

An approval request (JSON, written by the guard for the call it holds back) names the call by the
SHA-256 of its canonical form as the record holds it (`{"tool": ..., "args": ...}`, redacted where the
record redacts), the policy by the SHA-256 of its file, the session, and a fresh nonce. A receipt is a
signed note (https://c2sp.org/signed-note) over those and the scope and expiry the person chose:

    toolreplay-approval-v1
    call 9f2c...(64 hex)
    policy 4b1e...(64 hex)
    session /var/lib/agent/run-42.jsonl
    scope once
    expires 2026-12-02T08:00:00Z
    nonce 3f2a9c01b2c4d5e6f708192a3b4c5d6e

    — alice@example.com <base64 of key ID (4 bytes) || SSHSIG>

signed with `ssh-keygen -Y sign -n toolreplay-approval` (so no checkpoint signature passes for one).
The guard consumes it once (`toolreplay.guard.receipts`) and keeps it whole in the record's
`meta["x-receipt"]`; `verify_receipts` checks a record against an allowed_signers file and the policy.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolreplay.audit.checkpoint import EM_DASH, Keys, SignatureLine, parse_signature_line
from toolreplay.audit.signers import APPROVAL_NAMESPACE, HmacKey, SshSigner
from toolreplay.errors import InputError, UsageError
from toolreplay.format.canonical import canonical_bytes
from toolreplay.format.records import Record, ts_nanoseconds
from toolreplay.format.strictjson import StrictLoader

__all__ = ["RECEIPT_KIND", "REQUEST_KIND", "REFUSED", "SCOPES", "ApprovalRequest", "Receipt", "ReceiptFinding",
           "ReceiptReport", "call_digest", "policy_digest", "format_request", "parse_request", "read_request",
           "receipt_text", "sign_receipt", "receipt_path", "approve_request", "parse_receipt", "read_receipt",
           "check_receipt_signature", "format_expiry", "parse_expiry", "verify_receipts", "receipts_text",
           "receipts_json"]

REQUEST_KIND = "toolreplay-approval-request-v1"
RECEIPT_KIND = "toolreplay-approval-v1"
# once: this call; session: identical calls in the request's session; always: identical calls in any session
SCOPES = ("once", "session", "always")
REFUSED = "approval receipt refused: "  # how the guard's refusal of a receipt begins (policy/refusals.py)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NONCE = re.compile(r"[0-9a-f]{32}")
_EXPIRY = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIELDS = ("call", "policy", "session", "scope", "expires", "nonce")
_REQUEST_KEYS = frozenset({"request", "tool", "args", "call", "policy", "session", "nonce"})
_MAX_BYTES = 1 << 20


def call_digest(tool: str, args: dict[str, Any]) -> str:
    """The SHA-256 (hex) of a call's canonical form `{"tool": ..., "args": ...}`, as a record holds it."""
    return hashlib.sha256(canonical_bytes({"tool": tool, "args": args})).hexdigest()


def policy_digest(path: str) -> str:
    """The SHA-256 (hex) of a policy file's bytes: a receipt approves a call under exactly that policy."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def format_expiry(nanoseconds: int) -> str:
    """An expiry as a receipt holds it: UTC, to the second (`2026-12-02T08:00:00Z`)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(nanoseconds // 1_000_000_000))


def parse_expiry(text: str) -> int:
    """An expiry as a receipt holds it, in nanoseconds since the epoch; ValueError for anything else."""
    if not _EXPIRY.fullmatch(text):
        raise ValueError(f"not a UTC time to the second: {text!r}")
    time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")  # a real date and time (no month 13)
    return ts_nanoseconds(text)


def _session(value: str) -> str:
    if not value or value != value.strip() or _CONTROL.search(value):
        raise ValueError("session must be one line of text without control characters or outer spaces")
    return value


# --- requests --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalRequest:
    """A call the guard holds back until a person approves it: what a receipt is signed over."""

    tool: str
    args: dict[str, Any]
    call: str
    policy: str
    session: str
    nonce: str


def format_request(request: ApprovalRequest) -> bytes:
    """The request file: one JSON object, keys sorted, one line."""
    return (json.dumps({"request": REQUEST_KIND, "tool": request.tool, "args": request.args, "call": request.call,
                        "policy": request.policy, "session": request.session, "nonce": request.nonce},
                       sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def parse_request(data: bytes, path: str) -> ApprovalRequest:
    """Parse a request file strictly; an InputError says what is wrong, and the call digest must match."""
    try:
        obj = StrictLoader().loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(path, None, "not valid UTF-8") from None
    except ValueError as exc:
        raise InputError(path, 1, f"not a JSON approval request: {exc}") from None
    if not isinstance(obj, dict) or obj.get("request") != REQUEST_KIND:
        raise InputError(path, 1, f'not an approval request: expected an object with "request": "{REQUEST_KIND}"')
    for key in sorted(set(obj) ^ _REQUEST_KEYS):
        raise InputError(path, 1, f'{"unknown" if key in obj else "missing"} field "{key}"')
    tool, args = obj["tool"], obj["args"]
    if not isinstance(tool, str) or not tool or not isinstance(args, dict):
        raise InputError(path, 1, 'field "tool" must be a non-empty string and "args" an object')
    for key in ("call", "policy"):
        if not isinstance(obj[key], str) or not _HEX64.fullmatch(obj[key]):
            raise InputError(path, 1, f'field "{key}" must be 64 lowercase hex characters')
    if not isinstance(obj["nonce"], str) or not _NONCE.fullmatch(obj["nonce"]):
        raise InputError(path, 1, 'field "nonce" must be 32 lowercase hex characters')
    try:
        session = _session(obj["session"]) if isinstance(obj["session"], str) else _session("")
    except ValueError as exc:
        raise InputError(path, 1, f'field "session": {exc}') from None
    if call_digest(tool, args) != obj["call"]:
        raise InputError(path, 1, 'field "call" is not the SHA-256 of the tool and args the request shows')
    return ApprovalRequest(tool, args, obj["call"], obj["policy"], session, obj["nonce"])


def read_request(path: str) -> ApprovalRequest:
    """Read and parse a request file."""
    return parse_request(_read(path), path)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_BYTES:
        raise InputError(path, None, "larger than 1 MiB")
    return data


# --- receipts --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Receipt:
    """A parsed receipt: what it approves, the signed text, its signatures, the whole note."""

    call: str
    policy: str
    session: str
    scope: str
    expires: str
    nonce: str
    text: bytes
    signatures: tuple[SignatureLine, ...]
    note: str = field(repr=False, default="")

    @property
    def expires_ns(self) -> int:
        """The expiry in nanoseconds since the epoch."""
        return ts_nanoseconds(self.expires)


def receipt_text(request: ApprovalRequest, scope: str, expires: str) -> bytes:
    """The signed text of a receipt for `request`."""
    if scope not in SCOPES:
        raise UsageError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    values = (request.call, request.policy, _session(request.session), scope, expires, request.nonce)
    body = "".join(f"{name} {value}\n" for name, value in zip(_FIELDS, values, strict=True))
    return (RECEIPT_KIND + "\n" + body).encode()


def sign_receipt(request: ApprovalRequest, signers: Sequence[SshSigner | HmacKey], scope: str,
                 expires_ns: int) -> bytes:
    """A whole receipt: the text, a blank line, one signature line per key (an OpenSSH key signs in the
    approval namespace; an HMAC key, for a host that keeps its own approvers' secrets, as for checkpoints)."""
    if not signers:
        raise UsageError("a receipt needs a key to sign it: --ssh-key NAME KEY_FILE")
    import base64

    text = receipt_text(request, scope, format_expiry(expires_ns))
    lines = []
    for signer in signers:
        if isinstance(signer, SshSigner):
            signer = SshSigner(signer.name, signer.key_file, APPROVAL_NAMESPACE)
        signature = signer.sign(text)
        lines.append(f"{EM_DASH} {signer.name} {base64.b64encode(signature).decode('ascii')}\n")
    return text + b"\n" + "".join(lines).encode()


def receipt_path(request_path: str) -> str:
    """Where the receipt of a request file goes: NAME.receipt beside NAME.request."""
    stem = request_path[:-len(".request")] if request_path.endswith(".request") else request_path
    return stem + ".receipt"


def approve_request(request_path: str, signers: Sequence[SshSigner | HmacKey], scope: str, expires_ns: int,
                    output: str | None = None, request: ApprovalRequest | None = None) -> tuple[ApprovalRequest, str]:
    """A person's approval of the request file at `request_path` (or of `request`, read from it already): its
    receipt, signed by `signers`, written whole to `output` (default: NAME.receipt beside it); the request and
    the receipt's path. What `toolreplay approve` and the console's approve button do."""
    from toolreplay.audit.checkpoint import write_atomically

    request = read_request(request_path) if request is None else request
    receipt = sign_receipt(request, signers, scope, expires_ns)
    path = output or receipt_path(request_path)
    write_atomically(path, receipt)
    return request, path


def parse_receipt(data: bytes, path: str) -> Receipt:
    """Parse a receipt strictly; anything else is an InputError naming the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, data[:exc.start].count(b"\n") + 1, "invalid UTF-8") from None
    if not text.endswith("\n"):
        raise InputError(path, text.count("\n") + 1, "the last line does not end with a newline")
    lines = text[:-1].split("\n")
    if lines[0] != RECEIPT_KIND:
        raise InputError(path, 1, f"not an approval receipt: expected '{RECEIPT_KIND}'")
    if len(lines) < 9:
        raise InputError(path, len(lines) + 1, "expected 7 text lines, a blank line and a signature line")
    values = []
    for number, (name, line) in enumerate(zip(_FIELDS, lines[1:7], strict=True), 2):
        if not line.startswith(name + " "):
            raise InputError(path, number, f"expected '{name} ...'")
        values.append(line[len(name) + 1:])
    call, policy, session, scope, expires, nonce = values
    if not _HEX64.fullmatch(call) or not _HEX64.fullmatch(policy):
        raise InputError(path, 2 if not _HEX64.fullmatch(call) else 3, "expected 64 lowercase hex characters")
    try:
        _session(session)
    except ValueError as exc:
        raise InputError(path, 4, str(exc)) from None
    if scope not in SCOPES:
        raise InputError(path, 5, f"scope must be one of {', '.join(SCOPES)}")
    try:
        parse_expiry(expires)
    except ValueError:
        raise InputError(path, 6, "expires must be a UTC time to the second, like 2026-12-02T08:00:00Z") from None
    if not _NONCE.fullmatch(nonce):
        raise InputError(path, 7, "nonce must be 32 lowercase hex characters")
    if lines[7] != "":
        raise InputError(path, 8, "expected a blank line after the 7 text lines")
    signatures = tuple(parse_signature_line(line, number, path) for number, line in enumerate(lines[8:], 9))
    return Receipt(call, policy, session, scope, expires, nonce, "\n".join(lines[:7]).encode() + b"\n",
                   signatures, text)


def read_receipt(path: str) -> Receipt:
    """Read and parse a receipt file."""
    return parse_receipt(_read(path), path)


def check_receipt_signature(receipt: Receipt, keys: Keys) -> str | None:
    """The approver whose signature verified, or None: a known key that fails, or no known key, rejects it."""
    check = keys.check_note(receipt.text, receipt.signatures, APPROVAL_NAMESPACE)
    return check.valid[0] if check.trusted else None


# --- the offline check of a record --------------------------------------------------------------------


@dataclass(frozen=True)
class ReceiptFinding:
    """One write whose approval does not hold: its record index, tool, a kind and a message."""

    index: int
    tool: str
    kind: str
    message: str


@dataclass(frozen=True)
class ReceiptReport:
    """`verify --approvers`: the writes that ran, those with a receipt that holds, who approved, what is wrong."""

    writes: int
    receipted: int
    approvers: tuple[str, ...]
    refused: int  # calls the guard refused for their receipt (they did not run)
    findings: tuple[ReceiptFinding, ...] = ()

    @property
    def verified(self) -> bool:
        """Every write that ran carries a receipt that holds."""
        return not self.findings


def verify_receipts(records: Iterable[Record], keys: Keys, policy: str, writes: frozenset[str]) -> ReceiptReport:
    """Check every record that ran a write (a tool of `writes`, or any call carrying a receipt): its
    receipt verifies against `keys`, approves this exact call under the policy whose digest is `policy`,
    had not expired when the call reached the guard (`meta.ts`), and a once receipt is used once."""
    findings: list[ReceiptFinding] = []
    approvers: set[str] = set()
    used: dict[str, tuple[int, str]] = {}  # nonce -> (first record using it, its call)
    counted = receipted = refused = 0
    for record in records:
        meta = record.meta or {}
        note = meta.get("x-receipt")
        error = record.response.get("error")
        if record.outcome == "refused" and isinstance(error, str) and error.startswith(REFUSED):
            refused += 1
        if record.outcome != "ran" or (note is None and record.tool not in writes):
            continue
        counted += 1
        found = _check_record(record, note, keys, policy, used)
        if isinstance(found, str):
            approvers.add(found)
            receipted += 1
        else:
            findings.append(ReceiptFinding(record.index, record.tool, *found))
    return ReceiptReport(counted, receipted, tuple(sorted(approvers)), refused, tuple(findings))


def _check_record(record: Record, note: Any, keys: Keys, policy: str,
                  used: dict[str, tuple[int, str]]) -> str | tuple[str, str]:
    """The approver of one write, or (kind, message) for what is wrong with its receipt."""
    if note is None:
        return "no-receipt", "the write ran without an approval receipt"
    try:
        if not isinstance(note, str):
            raise InputError("x-receipt", None, "not a string")
        receipt = parse_receipt(note.encode("utf-8"), "x-receipt")
    except (InputError, UnicodeEncodeError) as exc:
        return "bad-receipt", f"the receipt cannot be read: {exc}"
    approver = check_receipt_signature(receipt, keys)
    if approver is None:
        return "signature-invalid", "the receipt is not signed by a listed approver"
    if receipt.call != call_digest(record.tool, record.args):
        return "call-mismatch", "the receipt approves another call (other arguments or another tool)"
    if receipt.policy != policy:
        return "policy-mismatch", "the receipt approves the call under another policy"
    ts = (record.meta or {}).get("ts")
    if not isinstance(ts, str):
        return "undated", "the record has no meta.ts to check the receipt's expiry against"
    if ts_nanoseconds(ts) >= receipt.expires_ns:
        return "expired", f"the receipt expired at {receipt.expires}, the call came at {ts}"
    earlier = used.get(receipt.nonce)
    if earlier is not None and (receipt.scope == "once" or earlier[1] != receipt.call):
        return "replayed", f"the receipt (nonce {receipt.nonce}) was already used by record {earlier[0]}"
    used.setdefault(receipt.nonce, (record.index, receipt.call))
    return approver


def receipts_text(report: ReceiptReport) -> str:
    """The text report of `verify --approvers`: a verdict, who approved, the counts, one line per finding."""
    lines = [f"approvals: {'verified' if report.verified else 'failed'}"]
    if report.approvers:
        lines.append("approved by: " + ", ".join(report.approvers))
    lines.append(f"writes: {report.receipted} of {report.writes} carry a receipt that holds")
    if report.refused:
        lines.append(f"refused: {report.refused} call(s) whose receipt the guard refused (they did not run)")
    lines += [f"record {f.index} ({_shown(f.tool)}): {f.kind}: {f.message}" for f in report.findings]
    return "".join(line + "\n" for line in lines)


def _shown(tool: str) -> str:
    return tool if re.fullmatch(r"[A-Za-z0-9_.:/-]+", tool) else json.dumps(tool, ensure_ascii=True)


def receipts_json(report: ReceiptReport) -> dict[str, Any]:
    """The JSON object of `verify --approvers` (under "approvals")."""
    return {"verified": report.verified, "approvers": list(report.approvers), "writes": report.writes,
            "receipted": report.receipted, "refused": report.refused,
            "findings": [{"index": f.index, "tool": f.tool, "kind": f.kind, "message": f.message}
                         for f in report.findings]}
