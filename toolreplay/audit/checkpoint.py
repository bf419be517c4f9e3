"""Signed checkpoints of a sealed session: (origin, size, head) in the signed-note shape, and their checks.

A checkpoint is a signed note (https://c2sp.org/signed-note): three text lines, a blank line, and one
or more signature lines `— KEYNAME BASE64` (em dash U+2014):

    toolreplay-hash-chain-v1 example.com/agent-7/run-42
    6
    <base64 of the 32-byte digest of link 5; 32 zero bytes when the chain is empty>

    — alice@example.com <base64 of key ID (4 bytes) || signature>

That one is not a C2SP tlog-checkpoint: the head is the last digest of a hash chain, not an RFC 6962
Merkle root, so it has no inclusion or consistency proofs of size log(n); a consumer checks it against
the links themselves. The first line says so by its first word, and is two words where a tlog origin
is one, so no tlog client can take it for one of its own. The other kind, `seal --tlog`, is a real
C2SP tlog-checkpoint (https://c2sp.org/tlog-checkpoint): the origin alone on the first line, and the
root of the Merkle tree over the links' digests (`toolreplay.audit.merkle`) on the third.

The signatures are checked as signed notes require: a line from an unknown key is ignored, a known key
that fails rejects the note, and a note with no valid known signature is rejected; the text of a
rejected note is not looked at.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from toolreplay.audit.chain import ChainReport, ChainWalk, LinkFact, walk_link_facts
from toolreplay.audit.signers import (
    SSH_NAMESPACE,
    AllowedSigner,
    HmacKey,
    SshSigner,
    check_key_name,
    ssh_verify,
    sshsig_public_key,
)
from toolreplay.errors import InputError, UsageError
from toolreplay.format import output

__all__ = ["KIND", "CHAIN", "TLOG", "Checkpoint", "SignatureLine",
            "Keys", "SignatureCheck", "CheckpointFinding", "CheckpointReport",
           "note_text", "format_checkpoint", "parse_checkpoint", "parse_signature_line", "read_checkpoint",
           "check_origin", "check_checkpoint",
           "check_previous", "signature_findings", "write_atomically", "CheckpointWriter", "CheckpointVerification",
           "verify_checkpoints"]

KIND = "toolreplay-hash-chain-v1"
CHAIN = "hash-chain"  # the kinds of checkpoint: the head of the hash chain, or a tlog-checkpoint's Merkle root
TLOG = "tlog"
EM_DASH = "\u2014"
MAX_SIGNATURES = 64
_MAX_BYTES = 1 << 20
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")
_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")

Signer = HmacKey | SshSigner


@dataclass(frozen=True)
class SignatureLine:
    """One signature line: the key name, the 4-byte key ID, the signature bytes, the line it is on."""

    name: str
    key_id: bytes
    signature: bytes
    line: int


@dataclass(frozen=True)
class Checkpoint:
    """A parsed checkpoint: what it commits to (origin, size, head as hex: the chain's last digest, or the
    Merkle root for a tlog-checkpoint), the signed text, its signatures, its kind (`CHAIN` or `TLOG`)."""

    origin: str
    size: int
    head: str
    text: bytes
    signatures: tuple[SignatureLine, ...]
    path: str = ""
    kind: str = CHAIN


def check_origin(origin: str) -> str:
    """An origin as a checkpoint carries it: what a key name may be (no spaces, `+` or control characters)."""
    return check_key_name(origin, "origin")


def note_text(origin: str, size: int, head: str, kind: str = CHAIN) -> bytes:
    """The signed text of a checkpoint: kind and origin (the origin alone for `TLOG`), size, head (from its
    64 hex characters) in base64."""
    head64 = base64.b64encode(bytes.fromhex(head)).decode("ascii")
    first = check_origin(origin) if kind == TLOG else f"{KIND} {check_origin(origin)}"
    return f"{first}\n{size}\n{head64}\n".encode()


def format_checkpoint(origin: str, size: int, head: str, signers: Sequence[Signer], kind: str = CHAIN) -> bytes:
    """A whole signed checkpoint: the note text, a blank line, one signature line per signer."""
    if not signers:
        raise UsageError("a checkpoint needs at least one key to sign it")
    text = note_text(origin, size, head, kind)
    lines = [f"{EM_DASH} {signer.name} {base64.b64encode(signer.sign(text)).decode('ascii')}\n" for signer in signers]
    return text + b"\n" + "".join(lines).encode()


def _b64(text: str) -> bytes | None:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if base64.b64encode(data).decode("ascii") == text else None


def parse_checkpoint(data: bytes, path: str) -> Checkpoint:
    """Parse a checkpoint strictly; anything else is an InputError naming the line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, data[:exc.start].count(b"\n") + 1, "invalid UTF-8") from None
    if text.startswith("\ufeff"):
        raise InputError(path, 1, "byte-order mark at start of file")
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        if _CONTROL.search(line):
            raise InputError(path, number, "control character (a checkpoint has only text lines)")
    if text and not text.endswith("\n"):
        raise InputError(path, len(lines), "the last line does not end with a newline")
    lines.pop()
    if len(lines) < 5:
        raise InputError(path, len(lines) + 1, "expected 3 text lines, a blank line and a signature line")
    first, _, origin = lines[0].partition(" ")
    kind = CHAIN
    if first != KIND:  # a tlog-checkpoint: the origin alone
        if not lines[0] or " " in lines[0]:
            raise InputError(path, 1, f"expected an origin (a tlog-checkpoint) or '{KIND} ORIGIN' (a hash-chain head)")
        kind, origin = TLOG, lines[0]
    elif not origin or origin != origin.strip() or " " in origin:
        raise InputError(path, 1, f"expected '{KIND} ORIGIN' (a ToolReplay hash-chain head, not a Merkle root)")
    try:
        check_origin(origin)
    except UsageError:
        raise InputError(path, 1, "the origin must not contain spaces, '+' or control characters") from None
    if not _SIZE.fullmatch(lines[1]):
        raise InputError(path, 2, "size must be a decimal number of links, without leading zeros")
    head = _b64(lines[2])
    if head is None or len(head) != 32:
        what = "root hash must be the base64 of a 32-byte SHA-256 Merkle root" if kind == TLOG else (
            "head must be the base64 of a 32-byte digest")
        raise InputError(path, 3, what)
    if lines[3] != "":
        raise InputError(path, 4, "expected a blank line after the 3 text lines (no extension lines)")
    signatures = tuple(parse_signature_line(line, number, path) for number, line in enumerate(lines[4:], 5))
    if len(signatures) > MAX_SIGNATURES:
        raise InputError(path, 5 + MAX_SIGNATURES, f"more than {MAX_SIGNATURES} signature lines")
    return Checkpoint(origin, int(lines[1]), head.hex(), "\n".join(lines[:3]).encode() + b"\n", signatures, path,
                      kind)


def parse_signature_line(line: str, number: int, path: str) -> SignatureLine:
    """One signature line `— KEYNAME BASE64` of a signed note (line `number` of `path`), strictly."""
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] != EM_DASH:
        raise InputError(path, number, f"expected a signature line '{EM_DASH} KEYNAME BASE64'")
    name, encoded = parts[1], parts[2]
    try:
        check_key_name(name)
    except UsageError:
        raise InputError(path, number, "the key name must not be empty or contain spaces or '+'") from None
    signature = _b64(encoded)
    if signature is None or len(signature) < 5:
        raise InputError(path, number, "the signature must be base64 of a 4-byte key ID and a signature")
    return SignatureLine(name, signature[:4], signature[4:], number)


def read_checkpoint(path: str, display: str | None = None) -> Checkpoint:
    """Read and parse a checkpoint file; messages name it as `display` (default: `path`)."""
    shown = path if display is None else display
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {shown}: {exc.strerror or exc}") from None
    if len(data) > _MAX_BYTES:
        raise InputError(shown, None, "larger than 1 MiB: not a checkpoint")
    return parse_checkpoint(data, shown)


# --- signatures ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignatureCheck:
    """Which signature lines verified, which came from a known key and failed, which were from unknown keys."""

    valid: tuple[str, ...]
    invalid: tuple[str, ...]
    unknown: tuple[str, ...]

    @property
    def trusted(self) -> bool:
        """At least one known key verified and none failed (signed-note: a failing known key rejects)."""
        return bool(self.valid) and not self.invalid


@dataclass(frozen=True)
class Keys:
    """The keys a verifier trusts: an allowed_signers file (OpenSSH) and HMAC secrets."""

    allowed_signers_path: str | None = None
    allowed_signers: tuple[AllowedSigner, ...] = ()
    hmac_keys: tuple[HmacKey, ...] = ()

    def check(self, checkpoint: Checkpoint) -> SignatureCheck:
        """Verify every signature line from a known key; ignore the others."""
        return self.check_note(checkpoint.text, checkpoint.signatures)

    def check_note(self, text: bytes, signatures: Iterable[SignatureLine],
                   namespace: str = SSH_NAMESPACE) -> SignatureCheck:
        """`check` for any signed note: its text and signature lines, SSH signatures in `namespace`."""
        valid: list[str] = []
        invalid: list[str] = []
        unknown: list[str] = []
        for line in signatures:
            verdict = self._check_line(text, line, namespace)
            (unknown if verdict is None else valid if verdict else invalid).append(line.name)
        return SignatureCheck(tuple(valid), tuple(invalid), tuple(unknown))

    def _check_line(self, text: bytes, line: SignatureLine, namespace: str) -> bool | None:
        """True or False for a known key's verdict; None when (name, key ID) is no key of ours."""
        known = False
        for key in self.hmac_keys:
            if key.name == line.name and key.key_id == line.key_id:
                known = True
                if key.verify(text, line.signature):
                    return True
        for signer in self.allowed_signers:
            if signer.cert_authority or not signer.allows(line.name) or signer.key_id(line.name) != line.key_id:
                continue
            known = True
            parsed = sshsig_public_key(line.signature)
            if parsed is not None and parsed[0] == signer.public_key and parsed[1] == namespace:
                assert self.allowed_signers_path is not None
                if ssh_verify(self.allowed_signers_path, line.name, text, line.signature, namespace):
                    return True
        return False if known else None


# --- checks against the chain -------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckpointFinding:
    """One thing wrong with a checkpoint or with the chain it commits to: a kind and a message."""

    kind: str
    message: str


@dataclass(frozen=True)
class CheckpointReport:
    """One checkpoint checked: its signatures, then (when they are trusted) what it commits to against the file."""

    path: str
    signatures: SignatureCheck
    checkpoint: Checkpoint
    links: int
    found_head: str | None
    findings: tuple[CheckpointFinding, ...] = field(default=())

    @property
    def trusted(self) -> bool:
        """Whether its signatures let its text be read at all."""
        return self.signatures.trusted

    @property
    def verified(self) -> bool:
        """Trusted, and no finding."""
        return self.trusted and not self.findings

    @property
    def unanchored(self) -> int:
        """Links in the file after the ones the checkpoint commits to."""
        return max(self.links - self.checkpoint.size, 0)


def signature_findings(check: SignatureCheck, label: str) -> list[CheckpointFinding]:
    """What is wrong with a note's signatures: a known key that failed, or no known key at all."""
    findings = [CheckpointFinding("signature-invalid",
                                  f"{label} has a signature by known key '{name}' that does not verify")
                for name in check.invalid]
    if not check.valid and not check.invalid:
        findings.append(CheckpointFinding("unknown-key", f"{label} has no signature from a known key"))
    return findings


def check_checkpoint(checkpoint: Checkpoint, signatures: SignatureCheck, walk: ChainWalk, *, origin: str | None = None,
                     label: str = "the checkpoint") -> CheckpointReport:
    """Check a checkpoint against a walked chain: origin, truncation, and the head at its size."""
    findings = signature_findings(signatures, label)
    found: str | None = None
    if signatures.trusted:
        if origin is not None and checkpoint.origin != origin:
            findings.append(CheckpointFinding(
                "origin-mismatch", f"{label} is for origin '{checkpoint.origin}', expected '{origin}'"))
        size = checkpoint.size
        if walk.links < size:
            findings.append(CheckpointFinding(
                "truncated", f"{label} commits to {size} links, the file has {walk.links}"))
        elif checkpoint.kind == TLOG:
            found = walk.roots[size]
            if found != checkpoint.head:
                findings.append(CheckpointFinding(
                    "rewritten", f"the first {size} links do not hash to the Merkle root of {label}"))
        else:
            found = walk.heads[size]
            if found != checkpoint.head:
                where = f"the link at {size - 1}" if size else "the empty chain"
                findings.append(CheckpointFinding("rewritten", f"{where} does not match the head of {label}"))
    return CheckpointReport(checkpoint.path, signatures, checkpoint, walk.links, found, tuple(findings))


def check_previous(current: CheckpointReport, previous: CheckpointReport) -> list[CheckpointFinding]:
    """A newer checkpoint against an older one of the same log: same origin, and its size has not shrunk.

    That the older head is still in the chain at its position is the older report's own `rewritten` check.
    """
    if not (current.trusted and previous.trusted):
        return []
    findings = []
    new, old = current.checkpoint, previous.checkpoint
    if new.origin != old.origin:
        findings.append(CheckpointFinding(
            "origin-mismatch", f"the checkpoint is for origin '{new.origin}', the previous one for '{old.origin}'"))
    if new.size < old.size:
        findings.append(CheckpointFinding(
            "shrunk", f"the checkpoint commits to {new.size} links, the previous one to {old.size}"))
    return findings


@dataclass(frozen=True)
class CheckpointVerification:
    """`verify --checkpoint`: the chain's own report, the checkpoint's, the previous one's and what lies between."""

    chain: ChainReport
    checkpoint: CheckpointReport
    previous: CheckpointReport | None = None
    between: tuple[CheckpointFinding, ...] = ()

    @property
    def findings(self) -> list[CheckpointFinding]:
        """Every checkpoint finding, in the order they are reported."""
        found = list(self.checkpoint.findings)
        if self.previous is not None:
            found += self.previous.findings
        return found + list(self.between)

    @property
    def ok(self) -> bool:
        """An intact chain and no finding: exit 0."""
        return self.chain.intact and not self.findings


def verify_checkpoints(facts: Iterable[LinkFact], checkpoint: Checkpoint, keys: Keys, *,
                       previous: Checkpoint | None = None, origin: str | None = None) -> CheckpointVerification:
    """Check the signatures, walk the chain once, and check the checkpoint (and an older one) against it."""
    signatures = keys.check(checkpoint)
    previous_signatures = keys.check(previous) if previous is not None else None
    sizes: set[int] = set()
    roots: set[int] = set()
    for note, check in ((checkpoint, signatures), (previous, previous_signatures)):
        if note is not None and check is not None and check.trusted:
            (roots if note.kind == TLOG else sizes).add(note.size)
    walk = walk_link_facts(facts, sizes, roots)
    report = check_checkpoint(checkpoint, signatures, walk, origin=origin)
    if previous is None or previous_signatures is None:
        return CheckpointVerification(walk.report, report)
    older = check_checkpoint(previous, previous_signatures, walk, origin=origin, label="the previous checkpoint")
    return CheckpointVerification(walk.report, report, older, tuple(check_previous(report, older)))


# --- writing -------------------------------------------------------------------------------------------


def write_atomically(path: str, data: bytes) -> None:
    """Write a whole file or nothing (`toolreplay.format.output.write_atomically`: the umask respected for
    a new file, the mode of a replaced one kept)."""
    with output.write_atomically(path) as target:
        target.write(data)


class CheckpointWriter:
    """Writes a signed checkpoint of a growing chain every `every` links and when the recording closes."""

    def __init__(self, path: str, origin: str, signers: Sequence[Signer], every: int = 100) -> None:
        if every < 1:
            raise ValueError("every must be at least 1")
        if not signers:
            raise ValueError("a checkpoint needs at least one key to sign it")
        self.path = path
        self.origin = check_origin(origin)
        self.signers = tuple(signers)
        self.every = every
        self.written_size: int | None = None

    def write(self, size: int, head: str) -> None:
        """Sign and write the checkpoint of the first `size` links, whose last digest is `head`."""
        write_atomically(self.path, format_checkpoint(self.origin, size, head, self.signers))
        self.written_size = size

    def appended(self, size: int, head: str) -> None:
        """Called after each link: write when `size` is a multiple of `every`."""
        if size % self.every == 0 and size != self.written_size:
            self.write(size, head)

    def closed(self, size: int, head: str) -> None:
        """Called when the recording ends: write unless this size is already written."""
        if size != self.written_size:
            self.write(size, head)

