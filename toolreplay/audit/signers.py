"""The keys that sign and verify checkpoints: OpenSSH keys through `ssh-keygen -Y`, and HMAC-SHA256 secrets.

A signature line of a signed note names its key and starts with a 4-byte key ID; the pair (name, ID)
says which key made it. Both IDs follow the signed-note recommendation for signature types that have
no assigned byte (0xff followed by a longer identifier):

    key ID = SHA-256(key name || 0x0A || 0xFF || type || 0x0A || key material)[:4]

with type `toolreplay/sshsig` and the public key blob (the base64-decoded middle of an OpenSSH public
key line) for OpenSSH, and type `toolreplay/hmac-sha256` and SHA-256(secret) for HMAC.

- OpenSSH: the signature is the binary SSHSIG blob that `ssh-keygen -Y sign -n toolreplay-checkpoint`
  writes armored; ToolReplay keeps it unarmored after the key ID, and armors it again to verify with
  `ssh-keygen -Y verify` against an allowed_signers file (the key name is the signer identity, `-I`).
  No cryptography of our own: ssh-keygen signs and verifies.
- HMAC-SHA256: the signature is HMAC-SHA256(secret, note text). Anyone who can verify can also sign.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field

from toolreplay.errors import InputError, UsageError

__all__ = ["SSH_NAMESPACE", "APPROVAL_NAMESPACE", "HmacKey", "SshSigner", "AllowedSigner", "read_allowed_signers",
           "read_hmac_secret", "read_secret_file", "key_id", "ssh_verify", "sshsig_public_key", "find_ssh_keygen"]

SSH_NAMESPACE = "toolreplay-checkpoint"
APPROVAL_NAMESPACE = "toolreplay-approval"  # approval receipts: a checkpoint signature never passes for one
_SSH_TYPE = b"toolreplay/sshsig"
_HMAC_TYPE = b"toolreplay/hmac-sha256"
_ARMOR_BEGIN = "-----BEGIN SSH SIGNATURE-----"
_ARMOR_END = "-----END SSH SIGNATURE-----"
_MIN_SECRET = 16


def key_id(name: str, kind: bytes, material: bytes) -> bytes:
    """The 4-byte key ID of a key: SHA-256(name, newline, 0xff, kind, newline, material), first 4 bytes."""
    return hashlib.sha256(name.encode("utf-8") + b"\n\xff" + kind + b"\n" + material).digest()[:4]


def find_ssh_keygen() -> str:
    """The path of ssh-keygen, or a UsageError saying how to get it."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise UsageError("ssh-keygen not found: install OpenSSH (package openssh-client) to use SSH keys")
    return found


# --- HMAC-SHA256 ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HmacKey:
    """A shared secret under a key name: signs and verifies with HMAC-SHA256."""

    name: str
    secret: bytes = field(repr=False)  # never in a traceback or a log line

    @property
    def key_id(self) -> bytes:
        """This key's 4-byte ID (derived from SHA-256 of the secret, not the secret itself)."""
        return key_id(self.name, _HMAC_TYPE, hashlib.sha256(self.secret).digest())

    def sign(self, text: bytes) -> bytes:
        """The signature field of a note line: key ID, then HMAC-SHA256 of the note text."""
        return self.key_id + hmac.new(self.secret, text, hashlib.sha256).digest()

    def verify(self, text: bytes, signature: bytes) -> bool:
        """Whether `signature` (without the key ID) is this key's HMAC of `text`."""
        return hmac.compare_digest(hmac.new(self.secret, text, hashlib.sha256).digest(), signature)


def read_secret_file(path: str) -> bytes:
    """A secret's bytes from a file, one final newline (LF or CRLF) left out; an unreadable file is a UsageError."""
    try:
        with open(path, "rb") as handle:
            secret = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return secret[:-2] if secret.endswith(b"\r\n") else secret[:-1] if secret.endswith(b"\n") else secret


def read_hmac_secret(name: str, path: str) -> HmacKey:
    """A secret from a file (one final newline ignored), at least 16 bytes."""
    secret = read_secret_file(path)
    if len(secret) < _MIN_SECRET:
        raise InputError(path, None, f"an HMAC secret must be at least {_MIN_SECRET} bytes, this one has {len(secret)}")
    return HmacKey(check_key_name(name), secret)


def check_key_name(name: str, what: str = "key name") -> str:
    """A key name as signed notes allow it: not empty, no white space, no `+`, no control character."""
    if not name or "+" in name or any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7f for ch in name):
        raise UsageError(f"{what} {name!r} must be non-empty, without spaces, '+' or control characters")
    return name


# --- OpenSSH ---------------------------------------------------------------------------------------------


def _ssh_string(data: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(data):
        raise ValueError("truncated")
    (length,) = struct.unpack_from(">I", data, offset)
    end = offset + 4 + length
    if end > len(data):
        raise ValueError("truncated")
    return data[offset + 4:end], end


def sshsig_public_key(blob: bytes) -> tuple[bytes, str] | None:
    """The public key blob and namespace of a binary SSHSIG signature, or None when it is not one."""
    if not blob.startswith(b"SSHSIG") or len(blob) < 10 or struct.unpack_from(">I", blob, 6)[0] != 1:
        return None
    try:
        offset = 10
        fields = []
        for _ in range(5):  # public key, namespace, reserved, hash algorithm, signature
            value, offset = _ssh_string(blob, offset)
            fields.append(value)
        namespace = fields[1].decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None
    return (fields[0], namespace) if offset == len(blob) else None


def _armor(blob: bytes) -> str:
    text = base64.b64encode(blob).decode("ascii")
    return _ARMOR_BEGIN + "\n" + "\n".join(text[i:i + 70] for i in range(0, len(text), 70)) + "\n" + _ARMOR_END + "\n"


def _dearmor(text: str) -> bytes:
    lines = text.strip().split("\n")
    if len(lines) < 3 or lines[0] != _ARMOR_BEGIN or lines[-1] != _ARMOR_END:
        raise ValueError("not an armored SSH signature")
    return base64.b64decode("".join(line.strip() for line in lines[1:-1]), validate=True)


def _run(argv: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"cannot run {argv[0]}: {exc}") from None


@dataclass(frozen=True)
class SshSigner:
    """An OpenSSH private key file (or a public key whose private half is in ssh-agent) under a key name."""

    name: str
    key_file: str
    namespace: str = SSH_NAMESPACE

    def sign(self, text: bytes) -> bytes:
        """The signature field of a note line: key ID, then the binary SSHSIG blob from `ssh-keygen -Y sign`."""
        done = _run([find_ssh_keygen(), "-q", "-Y", "sign", "-f", self.key_file, "-n", self.namespace], text)
        if done.returncode != 0:
            reason = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise UsageError(f"ssh-keygen could not sign with {self.key_file}: {reason[-1] if reason else 'failed'}")
        try:
            blob = _dearmor(done.stdout.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise UsageError("ssh-keygen -Y sign wrote something that is not an SSH signature") from None
        parsed = sshsig_public_key(blob)
        if parsed is None or parsed[1] != self.namespace:
            raise UsageError("ssh-keygen -Y sign wrote something that is not an SSH signature")
        return key_id(self.name, _SSH_TYPE, parsed[0]) + blob


@dataclass(frozen=True)
class AllowedSigner:
    """One line of an allowed_signers file: principal patterns, whether it is a CA, the public key blob."""

    line: int
    principals: str
    cert_authority: bool
    public_key: bytes

    def key_id(self, name: str) -> bytes:
        """The ID this key has under `name`."""
        return key_id(name, _SSH_TYPE, self.public_key)

    def allows(self, name: str) -> bool:
        """Whether `name` matches the principals pattern-list (ssh_config PATTERNS: `*`, `?`, `!`)."""
        matched = False
        for pattern in self.principals.split(","):
            negated = pattern.startswith("!")
            if _pattern(pattern[1:] if negated else pattern).fullmatch(name):
                if negated:
                    return False
                matched = True
        return matched


def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern), re.S)


def _fields(line: str) -> list[str]:
    """White-space separated fields; double quotes keep spaces inside one field (as in options)."""
    return re.findall(r'(?:[^\s"]|"[^"]*")+', line)


def _public_key(keytype: str, encoded: str) -> bytes | None:
    try:
        blob = base64.b64decode(encoded, validate=True)
        name, _ = _ssh_string(blob, 0)
    except (ValueError, binascii.Error):
        return None
    return blob if name == keytype.encode("ascii", "replace") else None


def read_allowed_signers(path: str) -> list[AllowedSigner]:
    """The keys of an allowed_signers file (man ssh-keygen, ALLOWED SIGNERS); a line we cannot read is an error."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(path, None, "not valid UTF-8") from None
    signers = []
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = _fields(stripped)
        options = ""
        key = _public_key(*fields[1:3]) if len(fields) >= 3 else None
        if key is None and len(fields) >= 4:
            options = fields[1]
            key = _public_key(*fields[2:4])
        if key is None:
            raise InputError(path, number, "expected PRINCIPALS [OPTIONS] KEYTYPE BASE64-KEY")
        is_ca = "cert-authority" in (option.lower() for option in options.split(","))
        signers.append(AllowedSigner(number, fields[0], is_ca, key))
    return signers


def ssh_verify(allowed_signers: str, name: str, text: bytes, blob: bytes, namespace: str = SSH_NAMESPACE) -> bool:
    """Whether `ssh-keygen -Y verify` accepts `blob` as `name`'s signature of `text` in `namespace`."""
    keygen = find_ssh_keygen()
    handle, signature = tempfile.mkstemp(prefix=".toolreplay-sig-", suffix=".sig")
    try:
        with os.fdopen(handle, "w", encoding="ascii") as out:
            out.write(_armor(blob))
        done = _run([keygen, "-Y", "verify", "-f", allowed_signers, "-I", name, "-n", namespace,
                     "-s", signature], text)
    finally:
        os.unlink(signature)
    return done.returncode == 0
