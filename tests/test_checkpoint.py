"""Signed checkpoints: the note format, strict parsing, HMAC and real OpenSSH signatures, every tamper class."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from typing import Any
from unittest import mock

from tests.support import integration, require
from toolreplay.audit.chain import seal_records
from toolreplay.audit.checkpoint import (
    KIND,
    CheckpointWriter,
    format_checkpoint,
    note_text,
    parse_checkpoint,
)
from toolreplay.audit.signers import HmacKey, SshSigner, read_allowed_signers
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import InputError, UsageError
from toolreplay.format.canonical import canonical_json
from toolreplay.format.records import read_session
from toolreplay.guard.recorder import SessionRecorder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRTY = os.path.join(ROOT, "samples", "session-dirty.jsonl")
CLEAN = os.path.join(ROOT, "samples", "session-clean.jsonl")
ORIGIN = "example.com/agent-7/run-42"
SSH_KEYGEN = shutil.which("ssh-keygen")
SECRET = b"0123456789abcdef0123456789abcdef"
ZEROS = "0" * 64


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin)
    code = main(list(argv), io)
    return code, io.out(), io.err()


def sealed_lines(path: str = DIRTY) -> list[str]:
    with open(path, "rb") as handle:
        return [line.decode() for line in seal_records(read_session(handle, "x"))]


def digest_of(line: str) -> str:
    digest: str = json.loads(line)["digest"]
    return digest


def edit(line: str, **changes: Any) -> str:
    link = json.loads(line)
    link.update(changes)
    return json.dumps(link) + "\n"


def relink(link: dict[str, Any], prev: str) -> str:
    """The link with `prev` and a digest recomputed over it: what someone who can write the file can do."""
    record = {key: link[key] for key in ("index", "tool", "args", "response")}
    digest = hashlib.sha256((prev + canonical_json(record)).encode()).hexdigest()
    return json.dumps({**record, "prev": prev, "digest": digest}) + "\n"


def reseal(lines: list[str]) -> list[str]:
    out, prev = [], ZEROS
    for line in lines:
        out.append(relink(json.loads(line), prev))
        prev = digest_of(out[-1])
    return out


class Workspace(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name
        self.secret = self.write("secret", SECRET + b"\n")
        self.lines = sealed_lines()
        self.heads = [ZEROS] + [digest_of(line) for line in self.lines]

    def write(self, name: str, data: bytes | str) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        return path

    def read(self, path: str) -> str:
        with open(path, encoding="utf-8") as handle:
            return handle.read()


class NoteFormatTest(Workspace):
    def test_note_text(self) -> None:
        head = self.heads[6]
        self.assertEqual(
            note_text(ORIGIN, 6, head),
            f"{KIND} {ORIGIN}\n6\n{base64.b64encode(bytes.fromhex(head)).decode()}\n".encode(),
        )
        self.assertEqual(note_text(ORIGIN, 0, ZEROS).split(b"\n")[2], base64.b64encode(bytes(32)))

    def test_hmac_signature_line(self) -> None:
        key = HmacKey("ci.example.com/key1", SECRET)
        data = format_checkpoint(ORIGIN, 6, self.heads[6], [key])
        text = note_text(ORIGIN, 6, self.heads[6])
        key_id = hashlib.sha256(
            b"ci.example.com/key1\n\xfftoolreplay/hmac-sha256\n" + hashlib.sha256(SECRET).digest()
        ).digest()[:4]
        mac = __import__("hmac").new(SECRET, text, "sha256").digest()
        self.assertEqual(
            data, text + b"\n\xe2\x80\x94 ci.example.com/key1 " + base64.b64encode(key_id + mac) + b"\n"
        )
        parsed = parse_checkpoint(data, "cp")
        self.assertEqual((parsed.origin, parsed.size, parsed.head, parsed.text), (ORIGIN, 6, self.heads[6], text))
        self.assertEqual([(s.name, s.key_id, s.signature, s.line) for s in parsed.signatures],
                         [("ci.example.com/key1", key_id, mac, 5)])

    def test_strict_parsing(self) -> None:
        good = format_checkpoint(ORIGIN, 6, self.heads[6], [HmacKey("k", SECRET)]).decode()
        lines = good.split("\n")
        head64 = lines[2]
        sig = lines[4]
        cases = [
            ("", "cp:1: expected 3 text lines, a blank line and a signature line"),
            (good[:-1], "cp:5: the last line does not end with a newline"),
            ("\n".join(lines[:4]) + "\n", "cp:5: expected 3 text lines, a blank line and a signature line"),
            (good.replace(KIND, "example.com/log"),
             f"cp:1: expected an origin (a tlog-checkpoint) or '{KIND} ORIGIN' (a hash-chain head)"),
            (good.replace(f"{KIND} ", f"{KIND}  "),
             f"cp:1: expected '{KIND} ORIGIN' (a ToolReplay hash-chain head, not a Merkle root)"),
            (good.replace(ORIGIN, "a+b"), "cp:1: the origin must not contain spaces, '+' or control characters"),
            (good.replace("\n6\n", "\n06\n"), "cp:2: size must be a decimal number of links, without leading zeros"),
            (good.replace("\n6\n", "\n-6\n"), "cp:2: size must be a decimal number of links, without leading zeros"),
            (good.replace(head64, head64[:-1]), "cp:3: head must be the base64 of a 32-byte digest"),
            (good.replace(head64, base64.b64encode(bytes(31)).decode()),
             "cp:3: head must be the base64 of a 32-byte digest"),
            (good.replace(head64 + "\n", head64 + "\nextension\n"),
             "cp:4: expected a blank line after the 3 text lines (no extension lines)"),
            (good.replace("\n\n", "\n\n\n"), "cp:5: expected a signature line '\u2014 KEYNAME BASE64'"),
            (good.replace(sig, sig.replace("\u2014", "-")), "cp:5: expected a signature line '\u2014 KEYNAME BASE64'"),
            (good.replace(sig, sig.replace(" k ", " k  ")), "cp:5: expected a signature line '\u2014 KEYNAME BASE64'"),
            (good.replace(sig, sig.replace(" k ", " k+1 ")),
             "cp:5: the key name must not be empty or contain spaces or '+'"),
            (good.replace(sig, "\u2014 k AAAA"),
             "cp:5: the signature must be base64 of a 4-byte key ID and a signature"),
            (good.replace(sig, "\u2014 k " + sig.split(" ")[2] + "="),
             "cp:5: the signature must be base64 of a 4-byte key ID and a signature"),
            (good.replace("\n", "\r\n"), "cp:1: control character (a checkpoint has only text lines)"),
            (good + sig + "\x1b[2K\n", "cp:6: control character (a checkpoint has only text lines)"),
            ("\ufeff" + good, "cp:1: byte-order mark at start of file"),
            (good + (sig + "\n") * 64, "cp:69: more than 64 signature lines"),
        ]
        for text, message in cases:
            with self.subTest(message=message, text=text[:40]):
                with self.assertRaises(InputError) as caught:
                    parse_checkpoint(text.encode(), "cp")
                self.assertEqual(str(caught.exception), message)
        with self.assertRaises(InputError) as caught:
            parse_checkpoint(good.encode() + b"\xff\n", "cp")
        self.assertEqual(str(caught.exception), "cp:6: invalid UTF-8")
        self.assertEqual(len(parse_checkpoint((good + (sig + "\n") * 63).encode(), "cp").signatures), 64)


class HmacCommandTest(Workspace):
    def seal(self, *extra: str) -> tuple[str, str]:
        sealed, checkpoint = os.path.join(self.tmp, "s.jsonl"), os.path.join(self.tmp, "cp")
        code = run("seal", DIRTY, "-o", sealed, "--checkpoint", checkpoint, "--origin", ORIGIN,
                   "--hmac-key", "ci.example.com/key1", self.secret, *extra)
        self.assertEqual(code, (0, "", ""))
        return sealed, checkpoint

    def verify(self, sealed: str, checkpoint: str, *extra: str) -> tuple[int, str, str]:
        return run("verify", sealed, "--checkpoint", checkpoint, "--hmac-key", "ci.example.com/key1", self.secret,
                   *extra)

    def test_seal_writes_the_same_chain_and_a_checkpoint(self) -> None:
        sealed, checkpoint = self.seal()
        self.assertEqual(self.read(sealed), "".join(self.lines))
        key = HmacKey("ci.example.com/key1", SECRET)
        self.assertEqual(self.read(checkpoint), format_checkpoint(ORIGIN, 6, self.heads[6], [key]).decode())
        self.assertEqual(self.verify(sealed, checkpoint, "--origin", ORIGIN), (0, (
            "chain: intact\ncheckpoint: verified\nsigned by: ci.example.com/key1\n"
            f"origin: {ORIGIN}\nanchored: 6 of 6 links\n"), ""))

    def test_seal_to_stdout_with_checkpoint(self) -> None:
        checkpoint = os.path.join(self.tmp, "cp")
        self.assertEqual(run("seal", DIRTY, "--checkpoint", checkpoint, "--origin", ORIGIN, "--hmac-key", "k",
                             self.secret), (0, "".join(self.lines), ""))
        self.assertEqual(parse_checkpoint(self.read(checkpoint).encode(), "cp").size, 6)

    def test_wrong_secret_is_an_unknown_key(self) -> None:
        sealed, checkpoint = self.seal()
        other = self.write("other", b"another secret, 32 bytes long!!!")
        self.assertEqual(run("verify", sealed, "--checkpoint", checkpoint, "--hmac-key", "ci.example.com/key1", other),
                         (1, "chain: intact\ncheckpoint: failed\nignored signature: ci.example.com/key1 (unknown key)\n"
                             "unknown-key: the checkpoint has no signature from a known key\n", ""))

    def test_forged_mac_with_the_right_key_id_is_rejected(self) -> None:
        sealed, checkpoint = self.seal()
        text = self.read(checkpoint)
        signature = base64.b64decode(text.split(" ")[-1])
        forged = base64.b64encode(signature[:4] + bytes(32)).decode()
        self.write("cp", text.rsplit(" ", 1)[0] + " " + forged + "\n")
        self.assertEqual(self.verify(sealed, checkpoint), (1, (
            "chain: intact\ncheckpoint: failed\n"
            "signature-invalid: the checkpoint has a signature by known key 'ci.example.com/key1' that does not "
            "verify\n"), ""))

    def test_json(self) -> None:
        sealed, checkpoint = self.seal()
        self.write("s.jsonl", "".join(self.lines[:5]))
        code, out, err = self.verify(sealed, checkpoint, "--format", "json")
        self.assertEqual((code, err), (1, ""))
        self.assertEqual(json.loads(out), {
            "command": "verify", "chain": "intact", "links_checked": 5, "first_broken_index": None, "field": None,
            "expected": None, "found": None,
            "checkpoint": {
                "path": checkpoint, "status": "failed", "signed_by": ["ci.example.com/key1"],
                "invalid_signatures": [], "ignored_signatures": [], "origin": ORIGIN, "size": 6,
                "head": self.heads[6], "links": 5, "found_head": None, "unanchored": 0,
                "findings": [{"kind": "truncated", "message": "the checkpoint commits to 6 links, the file has 5"}]},
            "findings": [{"kind": "truncated", "message": "the checkpoint commits to 6 links, the file has 5"}]})

    def test_bad_input_is_exit_2(self) -> None:
        sealed, checkpoint = self.seal()
        short = self.write("short", b"too short\n")
        bad = self.write("bad", "not a checkpoint\n")
        missing = os.path.join(self.tmp, "missing")
        cases = [
            (["verify", sealed, "--checkpoint", bad, "--hmac-key", "k", self.secret],
             f"error: {bad}:2: expected 3 text lines, a blank line and a signature line\n"),
            (["verify", sealed, "--checkpoint", checkpoint],
             "error: --checkpoint needs the keys to trust: --allowed-signers FILE or --hmac-key NAME SECRET_FILE\n"),
            (["verify", sealed, "--previous", checkpoint, "--hmac-key", "k", self.secret],
             "error: --previous, --origin, --allowed-signers and --hmac-key go with --checkpoint FILE\n"),
            (["verify", sealed, "--allowed-signers", self.secret],
             "error: --previous, --origin, --allowed-signers and --hmac-key go with --checkpoint FILE\n"),
            (["verify", sealed, "--checkpoint", self.write("big", b"x" * (1 << 20) + b"\n"), "--hmac-key", "k",
              self.secret], f"error: {os.path.join(self.tmp, 'big')}: larger than 1 MiB: not a checkpoint\n"),
            (["verify", sealed, "--checkpoint", missing, "--hmac-key", "k", self.secret],
             f"error: cannot read {missing}: No such file or directory\n"),
            (["verify", sealed, "--checkpoint", checkpoint, "--hmac-key", "k", short],
             f"error: {short}: an HMAC secret must be at least 16 bytes, this one has 9\n"),
            (["seal", DIRTY, "--checkpoint", checkpoint, "--hmac-key", "k", self.secret],
             "error: --checkpoint needs --origin ORIGIN (the name of this log)\n"),
            (["seal", DIRTY, "--checkpoint", checkpoint, "--origin", ORIGIN],
             "error: --checkpoint needs a key to sign with: --ssh-key NAME KEY_FILE or --hmac-key NAME FILE\n"),
            (["seal", DIRTY, "--origin", ORIGIN],
             "error: --origin, --ssh-key, --hmac-key and --tlog go with --checkpoint FILE\n"),
            (["seal", DIRTY, "--checkpoint", checkpoint, "--origin", "a b", "--hmac-key", "k", self.secret],
             "error: origin 'a b' must be non-empty, without spaces, '+' or control characters\n"),
            (["seal", DIRTY, "--checkpoint", checkpoint, "--origin", ORIGIN, "--hmac-key", "a+b", self.secret],
             "error: key name 'a+b' must be non-empty, without spaces, '+' or control characters\n"),
        ]
        for argv, message in cases:
            with self.subTest(message):
                self.assertEqual(run(*argv), (2, "", message))

    def test_a_failed_seal_writes_no_checkpoint(self) -> None:
        checkpoint = os.path.join(self.tmp, "cp")
        bad = self.write("bad.jsonl", self.read(DIRTY) + "[]\n")
        self.assertEqual(run("seal", bad, "--checkpoint", checkpoint, "--origin", ORIGIN, "--hmac-key", "k",
                             self.secret), (2, "", f"error: {bad}:7: record must be a JSON object, not array\n"))
        self.assertFalse(os.path.exists(checkpoint))

    def test_empty_chain(self) -> None:
        empty = self.write("empty.jsonl", "")
        sealed, checkpoint = os.path.join(self.tmp, "s.jsonl"), os.path.join(self.tmp, "cp")
        self.assertEqual(run("seal", empty, "-o", sealed, "--checkpoint", checkpoint, "--origin", ORIGIN,
                             "--hmac-key", "k", self.secret), (0, "", ""))
        self.assertEqual(self.read(checkpoint).split("\n")[1:3], ["0", base64.b64encode(bytes(32)).decode()])
        self.assertEqual(run("verify", sealed, "--checkpoint", checkpoint, "--hmac-key", "k", self.secret), (0, (
            "chain: empty (0 links)\ncheckpoint: verified\nsigned by: k\n"
            f"origin: {ORIGIN}\nanchored: 0 of 0 links\n"), ""))


@integration
class RecorderCheckpointTest(Workspace):
    CALLS = [("read_file", {"path": f"f{i}"}, {"text": str(i)}) for i in range(5)]

    def test_every_k_records_and_at_close(self) -> None:
        session, checkpoint = os.path.join(self.tmp, "live.jsonl"), os.path.join(self.tmp, "live.cp")
        writer = CheckpointWriter(checkpoint, ORIGIN, [HmacKey("k", SECRET)], every=2)
        sizes = []
        with SessionRecorder.open(session, sealed=True, checkpoints=writer) as recorder:
            for tool, args, response in self.CALLS:
                recorder.append(tool, args, response)
                sizes.append(parse_checkpoint(self.read(checkpoint).encode(), "cp").size
                             if os.path.exists(checkpoint) else None)
        self.assertEqual(sizes, [None, 2, 2, 4, 4])
        final = parse_checkpoint(self.read(checkpoint).encode(), "cp")
        self.assertEqual((final.size, final.head), (5, recorder.last_digest))
        self.assertEqual(run("verify", session, "--checkpoint", checkpoint, "--hmac-key", "k", self.secret)[0], 0)

    def test_resumed_recording_keeps_anchoring(self) -> None:
        session, checkpoint = os.path.join(self.tmp, "live.jsonl"), os.path.join(self.tmp, "live.cp")
        first = os.path.join(self.tmp, "first.cp")
        with SessionRecorder.open(session, sealed=True,
                                  checkpoints=CheckpointWriter(first, ORIGIN, [HmacKey("k", SECRET)], every=10)) as rec:
            for call in self.CALLS[:3]:
                rec.append(*call)
        with SessionRecorder.open(session, sealed=True,
                                  checkpoints=CheckpointWriter(checkpoint, ORIGIN, [HmacKey("k", SECRET)])) as rec:
            for call in self.CALLS[3:]:
                rec.append(*call)
        self.assertEqual(run("verify", session, "--checkpoint", checkpoint, "--previous", first, "--hmac-key", "k",
                             self.secret), (0, (
                                 "chain: intact\ncheckpoint: verified\nsigned by: k\n"
                                 f"origin: {ORIGIN}\nanchored: 5 of 5 links\n"
                                 "previous checkpoint: verified\nsigned by: k\n"
                                 f"origin: {ORIGIN}\nanchored: 3 of 5 links\n"), ""))

    def test_a_checkpoint_that_cannot_be_written_is_raised_after_the_record_landed(self) -> None:
        session = os.path.join(self.tmp, "live.jsonl")
        missing = os.path.join(self.tmp, "no-such-directory", "cp")
        writer = CheckpointWriter(missing, ORIGIN, [HmacKey("k", SECRET)], every=1)
        with SessionRecorder.open(session, sealed=True, checkpoints=writer) as recorder:
            with self.assertRaises(UsageError) as caught:
                recorder.append(*self.CALLS[0])
            self.assertEqual(str(caught.exception), f"cannot write {missing}: No such file or directory")
            self.assertEqual(recorder.next_index, 1)
            writer.path = os.path.join(self.tmp, "cp")
        self.assertEqual(run("verify", session, "--checkpoint", writer.path, "--hmac-key", "k", self.secret)[1],
                         f"chain: intact\ncheckpoint: verified\nsigned by: k\norigin: {ORIGIN}\n"
                         "anchored: 1 of 1 links\n")

    def test_plain_recording_cannot_have_checkpoints(self) -> None:
        writer = CheckpointWriter(os.path.join(self.tmp, "cp"), ORIGIN, [HmacKey("k", SECRET)])
        with self.assertRaisesRegex(ValueError, "checkpoints need a sealed recording"):
            SessionRecorder.open(os.path.join(self.tmp, "plain.jsonl"), checkpoints=writer)

    def test_checkpoint_file_mode_is_kept(self) -> None:
        checkpoint = self.write("cp", "")
        os.chmod(checkpoint, 0o600)
        CheckpointWriter(checkpoint, ORIGIN, [HmacKey("k", SECRET)]).write(0, ZEROS)
        self.assertEqual(os.stat(checkpoint).st_mode & 0o777, 0o600)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["cp", "secret"])


def _keygen(path: str, comment: str) -> str:
    assert SSH_KEYGEN is not None
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], check=True)
    with open(path + ".pub", encoding="ascii") as handle:
        keytype, key = handle.read().split()[:2]
    return f"{keytype} {key}"


@integration
class SshCase(Workspace):
    """Real ssh-keygen: alice is trusted (allowed_signers), mallory is not."""

    keys: str = ""

    @classmethod
    def setUpClass(cls) -> None:
        if SSH_KEYGEN is None:
            return
        cls._keys = tempfile.TemporaryDirectory()
        cls.keys = cls._keys.name
        cls.alice_pub = _keygen(os.path.join(cls.keys, "alice"), "alice")
        cls.mallory_pub = _keygen(os.path.join(cls.keys, "mallory"), "mallory")

    @classmethod
    def tearDownClass(cls) -> None:
        if SSH_KEYGEN is not None:
            cls._keys.cleanup()

    def setUp(self) -> None:
        require(SSH_KEYGEN is not None, "ssh-keygen (OpenSSH) is not installed")
        super().setUp()
        self.alice = SshSigner("alice@example.com", os.path.join(self.keys, "alice"))
        self.mallory = SshSigner("mallory@example.com", os.path.join(self.keys, "mallory"))
        self.allowed = self.write("allowed_signers", f"# trusted\nalice@example.com {self.alice_pub}\n")
        self.sealed = self.write("s.jsonl", "".join(self.lines))
        self.checkpoint = self.write("cp", format_checkpoint(ORIGIN, 6, self.heads[6], [self.alice]))

    def verify(self, lines: list[str] | None = None, *extra: str, checkpoint: str | None = None) -> tuple[int, str, str]:
        if lines is not None:
            self.write("s.jsonl", "".join(lines))
        return run("verify", self.sealed, "--checkpoint", checkpoint or self.checkpoint,
                   "--allowed-signers", self.allowed, *extra)


VERIFIED = "checkpoint: verified\nsigned by: alice@example.com\norigin: example.com/agent-7/run-42\n"
FAILED = "checkpoint: failed\nsigned by: alice@example.com\norigin: example.com/agent-7/run-42\n"
INTACT = "chain: intact\n"


def broken(position: int, expected: str, found: str) -> str:
    return f"chain: broken\nfirst broken link: index {position}\nexpected: {expected}\nfound: {found}\n"


REWRITTEN = "rewritten: the link at 5 does not match the head of the checkpoint\n"


class SshSignatureTest(SshCase):
    def test_seal_with_ssh_key_then_verify(self) -> None:
        sealed, checkpoint = os.path.join(self.tmp, "out.jsonl"), os.path.join(self.tmp, "out.cp")
        self.assertEqual(run("seal", DIRTY, "-o", sealed, "--checkpoint", checkpoint, "--origin", ORIGIN,
                             "--ssh-key", "alice@example.com", self.alice.key_file), (0, "", ""))
        self.assertEqual(self.read(checkpoint), self.read(self.checkpoint))  # ed25519 signs deterministically
        self.assertEqual(run("verify", sealed, "--checkpoint", checkpoint, "--allowed-signers", self.allowed),
                         (0, INTACT + VERIFIED + "anchored: 6 of 6 links\n", ""))

    def test_the_signature_is_an_sshsig_blob_ssh_keygen_accepts(self) -> None:
        assert SSH_KEYGEN is not None
        line = self.read(self.checkpoint).split("\n")[4]
        blob = base64.b64decode(line.split(" ")[2])[4:]
        self.assertTrue(blob.startswith(b"SSHSIG\x00\x00\x00\x01"))
        armored = base64.b64encode(blob).decode()
        signature = self.write("cp.sig", "-----BEGIN SSH SIGNATURE-----\n" + armored
                               + "\n-----END SSH SIGNATURE-----\n")
        done = subprocess.run([SSH_KEYGEN, "-Y", "verify", "-f", self.allowed, "-I", "alice@example.com",
                               "-n", "toolreplay-checkpoint", "-s", signature],
                              input=note_text(ORIGIN, 6, self.heads[6]), capture_output=True)
        self.assertEqual(done.returncode, 0, done.stderr)

    def test_unknown_key_next_to_a_valid_one_is_ignored(self) -> None:
        self.write("cp", format_checkpoint(ORIGIN, 6, self.heads[6], [self.mallory, self.alice]))
        self.assertEqual(self.verify(), (0, (
            "chain: intact\ncheckpoint: verified\nsigned by: alice@example.com\n"
            "ignored signature: mallory@example.com (unknown key)\n"
            f"origin: {ORIGIN}\nanchored: 6 of 6 links\n"), ""))

    def test_known_key_that_fails_rejects_the_checkpoint(self) -> None:
        # alice's signature line of another checkpoint, pasted under this one's text, next to a valid one
        other = format_checkpoint(ORIGIN, 5, self.heads[5], [self.alice]).decode().split("\n")[4]
        self.write("cp", self.read(self.checkpoint) + other + "\n")
        self.assertEqual(self.verify(), (1, (
            "chain: intact\ncheckpoint: failed\nsigned by: alice@example.com\n"
            "signature-invalid: the checkpoint has a signature by known key 'alice@example.com' that does not "
            "verify\n"), ""))

    def test_known_key_in_a_signature_made_by_another_key_is_rejected(self) -> None:
        # mallory signs, but the line claims alice's name and key ID
        mallory_line = base64.b64decode(
            format_checkpoint(ORIGIN, 6, self.heads[6], [self.mallory]).decode().split("\n")[4].split(" ")[2])
        alice_id = base64.b64decode(self.read(self.checkpoint).split("\n")[4].split(" ")[2])[:4]
        forged = base64.b64encode(alice_id + mallory_line[4:]).decode()
        self.write("cp", note_text(ORIGIN, 6, self.heads[6]).decode() + f"\n\u2014 alice@example.com {forged}\n")
        self.assertEqual(self.verify()[0:2], (1, (
            "chain: intact\ncheckpoint: failed\n"
            "signature-invalid: the checkpoint has a signature by known key 'alice@example.com' that does not "
            "verify\n")))

    def test_tampered_checkpoint_lines(self) -> None:
        text = self.read(self.checkpoint)
        head64 = text.split("\n")[2]
        for old, new in [("\n6\n", "\n5\n"), (head64, base64.b64encode(bytes(32)).decode()),
                         (ORIGIN, "example.com/agent-7/run-43")]:
            with self.subTest(new):
                self.write("cp", text.replace(old, new))
                self.assertEqual(self.verify(), (1, (
                    "chain: intact\ncheckpoint: failed\n"
                    "signature-invalid: the checkpoint has a signature by known key 'alice@example.com' that does "
                    "not verify\n"), ""))

    def test_full_reseal_with_another_key(self) -> None:
        lines = list(self.lines)
        lines[3] = edit(lines[3], response={"count": 99})
        forged = reseal(lines)
        self.write("cp", format_checkpoint(ORIGIN, 6, digest_of(forged[5]), [self.mallory]))
        self.assertEqual(self.verify(forged), (1, (
            "chain: intact\ncheckpoint: failed\nignored signature: mallory@example.com (unknown key)\n"
            "unknown-key: the checkpoint has no signature from a known key\n"), ""))

    def test_full_reseal_against_the_real_checkpoint(self) -> None:
        lines = list(self.lines)
        lines[3] = edit(lines[3], response={"count": 99})
        self.assertEqual(self.verify(reseal(lines)), (1, INTACT + FAILED + REWRITTEN, ""))

    def test_checkpoint_from_another_session(self) -> None:
        clean = sealed_lines(CLEAN)
        self.write("cp", format_checkpoint("example.com/agent-7/run-41", 4, digest_of(clean[3]), [self.alice]))
        self.assertEqual(self.verify(None, "--origin", ORIGIN), (1, (
            "chain: intact\ncheckpoint: failed\nsigned by: alice@example.com\norigin: example.com/agent-7/run-41\n"
            "origin-mismatch: the checkpoint is for origin 'example.com/agent-7/run-41', "
            f"expected '{ORIGIN}'\n"
            "rewritten: the link at 3 does not match the head of the checkpoint\n"), ""))

    def test_truncated_by_one_link(self) -> None:
        self.assertEqual(self.verify(self.lines[:5]), (1, (
            INTACT + FAILED + "truncated: the checkpoint commits to 6 links, the file has 5\n"), ""))

    def test_truncated_to_zero(self) -> None:
        self.assertEqual(self.verify([]), (1, (
            "chain: empty (0 links)\n" + FAILED + "truncated: the checkpoint commits to 6 links, the file has 0\n"),
            ""))

    def test_links_after_the_checkpoint_are_not_yet_anchored(self) -> None:
        self.write("cp", format_checkpoint(ORIGIN, 4, self.heads[4], [self.alice]))
        self.assertEqual(self.verify(), (0, (
            INTACT + VERIFIED + "anchored: 4 of 6 links\nnot yet anchored: 2 links after the checkpoint\n"), ""))

    def test_tamper_classes_of_the_sealed_file(self) -> None:
        d = self.heads[1:]  # d[i] is the digest of link i
        insert = relink({"index": 2, "tool": "read_file", "args": {"path": "x"}, "response": {}}, d[1])
        edited = json.loads(edit(self.lines[3], response={"count": 99}))
        resealed_one = relink(edited, d[2])
        cases: list[tuple[str, list[str], str]] = [
            ("edit response", self.lines[:3] + [edit(self.lines[3], response={"count": 99})] + self.lines[4:],
             broken(3, json.loads(relink(edited, d[2]))["digest"], d[3]) + FAILED + REWRITTEN),
            ("reorder", self.lines[:2] + [self.lines[3], self.lines[2]] + self.lines[4:],
             broken(2, d[1], d[2]) + FAILED + REWRITTEN),
            ("delete middle", self.lines[:2] + self.lines[3:],
             broken(2, d[1], d[2]) + FAILED + "truncated: the checkpoint commits to 6 links, the file has 5\n"),
            ("delete first", self.lines[1:],
             broken(0, ZEROS, d[0]) + FAILED + "truncated: the checkpoint commits to 6 links, the file has 5\n"),
            ("insert link", self.lines[:2] + [insert] + self.lines[2:],
             broken(3, digest_of(insert), d[1]) + FAILED + REWRITTEN),
            ("insert copy", self.lines[:3] + [self.lines[1]] + self.lines[3:],
             broken(3, d[2], d[0]) + FAILED + REWRITTEN),
            ("edit and reseal one link", self.lines[:3] + [resealed_one] + self.lines[4:],
             broken(4, digest_of(resealed_one), d[3]) + FAILED + REWRITTEN),
            # The content the checkpoint signed is unchanged: the checkpoint holds, the chain's own fields do not.
            ("prev only", self.lines[:3] + [edit(self.lines[3], prev="f" * 64)] + self.lines[4:],
             broken(3, d[2], "f" * 64) + VERIFIED + "anchored: 6 of 6 links\n"),
            ("digest of last link only", self.lines[:5] + [edit(self.lines[5], digest=ZEROS)],
             broken(5, d[5], ZEROS) + VERIFIED + "anchored: 6 of 6 links\n"),
        ]
        for field, value in (("tool", "search2"), ("args", {"query": "install", "limit": 11})):
            changed = json.loads(edit(self.lines[3], **{field: value}))
            cases.append((f"edit {field}", self.lines[:3] + [edit(self.lines[3], **{field: value})] + self.lines[4:],
                          broken(3, json.loads(relink(changed, d[2]))["digest"], d[3]) + FAILED + REWRITTEN))
        cases.append(("first prev", [edit(self.lines[0], prev="1" + "0" * 63)] + self.lines[1:],
                      broken(0, ZEROS, "1" + "0" * 63) + VERIFIED + "anchored: 6 of 6 links\n"))
        renumbered = json.loads(edit(self.lines[4], index=7))
        cases.append(("renumber", self.lines[:4] + [edit(self.lines[4], index=7)] + self.lines[5:],
                      broken(4, json.loads(relink(renumbered, d[3]))["digest"], d[4]) + FAILED + REWRITTEN))
        for name, lines, expected in cases:
            with self.subTest(name):
                self.assertEqual(self.verify(lines), (1, expected, ""))

    def test_white_space_and_key_order_do_not_matter(self) -> None:
        respelled = [json.dumps(dict(reversed(list(json.loads(line).items()))), indent=None,
                                separators=(" ,  ", " : ")) + "\r\n\n" for line in self.lines]
        self.assertEqual(self.verify(respelled), (0, INTACT + VERIFIED + "anchored: 6 of 6 links\n", ""))

    def test_previous_checkpoint(self) -> None:
        older = self.write("old.cp", format_checkpoint(ORIGIN, 4, self.heads[4], [self.alice]))
        self.assertEqual(self.verify(None, "--previous", older), (0, (
            INTACT + VERIFIED + "anchored: 6 of 6 links\n"
            "previous checkpoint: verified\nsigned by: alice@example.com\n"
            f"origin: {ORIGIN}\nanchored: 4 of 6 links\n"), ""))
        # the newer one given as the older: it shrank
        self.assertEqual(self.verify(None, "--previous", self.checkpoint, checkpoint=older), (1, (
            INTACT + VERIFIED + "anchored: 4 of 6 links\nnot yet anchored: 2 links after the checkpoint\n"
            "previous checkpoint: verified\nsigned by: alice@example.com\n"
            f"origin: {ORIGIN}\nanchored: 6 of 6 links\n"
            "shrunk: the checkpoint commits to 4 links, the previous one to 6\n"), ""))

    def test_previous_head_no_longer_in_the_chain(self) -> None:
        lines = list(self.lines)
        lines[1] = edit(lines[1], response={"text": "rewritten"})
        forged = reseal(lines)
        older = self.write("old.cp", format_checkpoint(ORIGIN, 4, self.heads[4], [self.alice]))
        self.write("cp", format_checkpoint(ORIGIN, 6, digest_of(forged[5]), [self.alice]))  # the key signed a lie
        self.assertEqual(self.verify(forged, "--previous", older), (1, (
            INTACT + VERIFIED + "anchored: 6 of 6 links\n"
            "previous checkpoint: failed\nsigned by: alice@example.com\n"
            f"origin: {ORIGIN}\n"
            "rewritten: the link at 3 does not match the head of the previous checkpoint\n"), ""))

    def test_previous_of_another_origin(self) -> None:
        older = self.write("old.cp", format_checkpoint("example.com/other", 4, self.heads[4], [self.alice]))
        code, out, _ = self.verify(None, "--previous", older)
        self.assertEqual((code, out.splitlines()[-1]), (
            1, "origin-mismatch: the checkpoint is for origin 'example.com/agent-7/run-42', the previous one for "
               "'example.com/other'"))

    def test_allowed_signers_patterns_and_options(self) -> None:
        self.write("allowed_signers", f'*@example.com,!mallory@example.com namespaces="toolreplay-checkpoint" '
                                      f"{self.alice_pub}\n")
        self.assertEqual(self.verify()[0], 0)
        self.write("allowed_signers", f'alice@example.com namespaces="file" {self.alice_pub}\n')
        self.assertEqual(self.verify()[1].splitlines()[-1].split(":")[0], "signature-invalid")
        self.write("allowed_signers", f"bob@example.com {self.alice_pub}\n")
        self.assertEqual(self.verify()[1].splitlines()[-1],
                         "unknown-key: the checkpoint has no signature from a known key")
        signers = read_allowed_signers(self.write("allowed_signers", f"!a,b* cert-authority {self.alice_pub}\n"))
        self.assertEqual([(s.principals, s.cert_authority, s.allows("bob"), s.allows("a")) for s in signers],
                         [("!a,b*", True, True, False)])

    def test_bad_allowed_signers_line(self) -> None:
        self.write("allowed_signers", "# ok\n\nalice@example.com ssh-ed25519 notbase64\n")
        self.assertEqual(self.verify(), (2, "", f"error: {self.allowed}:3: expected PRINCIPALS [OPTIONS] KEYTYPE "
                                                "BASE64-KEY\n"))

    def test_ssh_keygen_missing(self) -> None:
        with mock.patch("shutil.which", return_value=None):
            self.assertEqual(self.verify(), (2, "", "error: ssh-keygen not found: install OpenSSH (package "
                                                    "openssh-client) to use SSH keys\n"))
            self.assertEqual(run("seal", DIRTY, "--checkpoint", self.checkpoint, "--origin", ORIGIN, "--ssh-key",
                                 "a", self.alice.key_file),
                             (2, "", "error: ssh-keygen not found: install OpenSSH (package openssh-client) to use "
                                     "SSH keys\n"))

    def test_signing_with_a_missing_key(self) -> None:
        missing = os.path.join(self.tmp, "nokey")
        code, out, err = run("seal", DIRTY, "--checkpoint", os.path.join(self.tmp, "x.cp"), "--origin", ORIGIN,
                             "--ssh-key", "a", missing)
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith(f"error: ssh-keygen could not sign with {missing}: "), err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x.cp")))

    def test_recorder_with_ssh_key(self) -> None:
        session, checkpoint = os.path.join(self.tmp, "live.jsonl"), os.path.join(self.tmp, "live.cp")
        writer = CheckpointWriter(checkpoint, ORIGIN, [self.alice], every=3)
        with SessionRecorder.open(session, sealed=True, checkpoints=writer) as recorder:
            for i in range(4):
                recorder.append("read_file", {"path": str(i)}, {})
                if i == 2:
                    self.assertEqual(self.read(checkpoint).split("\n")[1], "3")
        self.assertEqual(run("verify", session, "--checkpoint", checkpoint, "--allowed-signers", self.allowed),
                         (0, INTACT + VERIFIED + "anchored: 4 of 4 links\n", ""))


if __name__ == "__main__":
    unittest.main()
