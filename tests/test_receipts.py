"""Approval receipts: the formats, the gate consuming them (forged, other call, other policy, other session,
expired, replayed in a record and across a restart), `toolreplay approve`, and `verify --approvers` offline.

The unit tests sign with HMAC keys (no process to start); the integration tests with real OpenSSH keys
through ssh-keygen, the library path (GuardConfig) and the command line end to end.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
from typing import Any

from tests.support import integration, require
from toolreplay.audit.checkpoint import Keys
from toolreplay.audit.receipts import (
    ApprovalRequest,
    call_digest,
    format_request,
    parse_receipt,
    parse_request,
    policy_digest,
    read_request,
    receipts_text,
    sign_receipt,
    verify_receipts,
)
from toolreplay.audit.signers import HmacKey, SshSigner
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.errors import InputError
from toolreplay.format.canonical import canonical_bytes
from toolreplay.format.records import Record, read_session
from toolreplay.guard.assembly import GuardConfig, GuardConfigError, build_guard
from toolreplay.guard.gate import Gate
from toolreplay.guard.receipts import Receipts
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import load_policy

SSH_KEYGEN = shutil.which("ssh-keygen")
ALICE = HmacKey("alice@example.com", b"alice's secret, 32 bytes long..!")
MALLORY = HmacKey("mallory@example.com", b"mallory's secret, 32 bytes long!")
NOW = 1_800_000_000 * 10**9  # 2027-01-15T08:00:00Z
LATER = NOW + 3600 * 10**9
POLICY = {"agent": "mail", "allowed_tools": ["read_inbox", "send_email", "delete_email"],
          "write_tools": ["send_email", "delete_email"], "repeatable_tools": ["send_email"]}
CALL = {"to": "bob@example.com", "body": "hi"}


def run(*argv: str) -> tuple[int, str, str]:
    io = IO.memory(b"")
    code = main(list(argv), io)
    return code, io.out(), io.err()


def name_of(tool: str, args: dict[str, Any]) -> str:
    return call_digest(tool, args)[:16]


class Desk(unittest.TestCase):
    """A policy file, a receipts folder and a record in a temporary folder; a gate over them."""

    keys = Keys(hmac_keys=(ALICE,))

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.tmp = self._tmp.name
        self.policy = self.write("policy.json", json.dumps(POLICY))
        self.folder = os.path.join(self.tmp, "receipts")
        os.mkdir(self.folder)
        self.record = os.path.join(self.tmp, "run.jsonl")
        self.sent: list[dict[str, Any]] = []
        self.clock = NOW

    def write(self, name: str, data: bytes | str) -> str:
        path = os.path.join(self.tmp, name)
        with open(path, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
        return path

    def tools(self) -> dict[str, Any]:
        def send_email(**args: Any) -> dict[str, Any]:
            self.sent.append(args)
            return {"ok": True}

        return {"send_email": send_email, "delete_email": lambda **args: {"ok": True},
                "read_inbox": lambda: {"mail": []}}

    def gate(self, recorder: SessionRecorder, keys: Keys | None = None, **options: Any) -> Gate:
        receipts = Receipts(self.folder, keys or self.keys, policy_digest(self.policy), recorder.path,
                            clock=lambda: self.clock, history=recorder.history() if recorder.resumed_records else ())
        return Gate(self.tools(), load_policy(self.policy), recorder=recorder, receipts=receipts,
                    wall_clock=lambda: self.clock, **options)

    def request(self, tool: str = "send_email", args: dict[str, Any] | None = None) -> ApprovalRequest:
        return read_request(os.path.join(self.folder, name_of(tool, CALL if args is None else args) + ".request"))

    def approve(self, request: ApprovalRequest, *, signer: Any = ALICE, scope: str = "once", expires: int = LATER,
                name: str | None = None) -> str:
        """Sign `request` into the receipt file of the call named `name` (default: the request's own)."""
        path = os.path.join(self.folder, (name or request.call[:16]) + ".receipt")
        with open(path, "wb") as handle:
            handle.write(sign_receipt(request, [signer], scope, expires))
        return path

    def records(self) -> list[Record]:
        with open(self.record, "rb") as handle:
            return list(read_session(handle, self.record))


def refused(name: str, why: str) -> str:
    return f"approval receipt refused: {name}.receipt: {why}; approve {name}.request of the receipts folder again"


def asked(name: str) -> str:
    return (f"confirmation required: no approval receipt for this call yet; approve {name}.request of the receipts "
            "folder (toolreplay approve)")


class GateTest(Desk):
    def test_a_write_runs_only_with_its_receipt_which_goes_into_the_record(self) -> None:
        name = name_of("send_email", CALL)
        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = self.gate(recorder)
            self.assertEqual(gate.call("send_email", CALL), {"ok": False, "error": asked(name)})
            self.assertEqual(gate.call("read_inbox", {}), {"mail": []})  # a read needs none
            request = self.request()
            self.assertEqual((request.tool, request.args, request.session, request.policy),
                             ("send_email", CALL, self.record, policy_digest(self.policy)))
            self.assertEqual(request.call, hashlib.sha256(canonical_bytes({"tool": "send_email", "args": CALL}))
                             .hexdigest())
            receipt = self.approve(request)
            self.assertEqual(gate.call("send_email", CALL), {"ok": True})
        self.assertEqual(self.sent, [CALL])
        records = self.records()
        self.assertEqual([r.outcome for r in records], ["refused", "ran", "ran"])
        with open(receipt, encoding="utf-8") as handle:
            self.assertEqual(records[2].meta["x-receipt"], handle.read())  # type: ignore[index]
        report = verify_receipts(records, self.keys, policy_digest(self.policy), frozenset(POLICY["write_tools"]))
        self.assertEqual(receipts_text(report), "approvals: verified\napproved by: alice@example.com\n"
                                                "writes: 1 of 1 carry a receipt that holds\n")

    def test_receipts_that_do_not_hold_are_refused_and_the_refusal_recorded(self) -> None:
        name = name_of("send_email", CALL)
        other = {"to": "eve@example.com", "body": "hi"}
        cases = [
            ("forged", lambda: self.approve(self.request(), signer=MALLORY), "not signed by a listed approver"),
            ("other arguments", lambda: self.approve(self.request("send_email", other), name=name),
             "it approves another call (other arguments or another tool)"),
            ("other policy", lambda: self.approve(_with(self.request(), policy="ab" * 32)),
             "it approves the call under another policy"),
            ("other session", lambda: self.approve(_with(self.request(), session="/elsewhere/run.jsonl")),
             "it approves the call in another session"),
            ("expired", lambda: self.approve(self.request(), expires=NOW), "it expired at 2027-01-15T08:00:00Z"),
        ]
        for label, make, why in cases:
            with self.subTest(label):
                for path in os.listdir(self.folder):
                    os.unlink(os.path.join(self.folder, path))
                if os.path.exists(self.record):
                    os.unlink(self.record)
                with SessionRecorder.open(self.record, sealed=True) as recorder:
                    gate = self.gate(recorder)
                    gate.call("send_email", CALL)  # writes the request
                    if label == "other arguments":
                        gate.call("send_email", other)
                    make()
                    self.assertEqual(gate.call("send_email", CALL), {"ok": False, "error": refused(name, why)})
                last = self.records()[-1]
                self.assertEqual((last.outcome, last.response), ("refused", {"ok": False, "error": refused(name, why)}))
                self.assertNotIn("x-receipt", last.meta or {})
                self.assertEqual(self.sent, [])

    def test_a_once_receipt_is_used_once_in_a_record_and_across_a_restart(self) -> None:
        name = name_of("send_email", CALL)
        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = self.gate(recorder)
            gate.call("send_email", CALL)
            request = self.request()
            self.approve(request)
            self.assertEqual(gate.call("send_email", CALL), {"ok": True})
            replayed = refused(name, f"it was already used (nonce {request.nonce})")
            self.assertEqual(gate.call("send_email", CALL), {"ok": False, "error": replayed})  # repeatable: a new send
            fresh = self.request()  # a new request, with a new nonce, for the person to approve
            self.assertNotEqual(fresh.nonce, request.nonce)
        with SessionRecorder.open(self.record, sealed=True) as recorder:  # a restart continues the record
            gate = self.gate(recorder)
            self.assertEqual(gate.call("send_email", CALL), {"ok": False, "error": replayed})
            self.approve(fresh)
            self.assertEqual(gate.call("send_email", CALL), {"ok": True})
        self.assertEqual(self.sent, [CALL, CALL])
        self.assertEqual([r.outcome for r in self.records()], ["refused", "ran", "refused", "refused", "ran"])

    def test_a_session_receipt_answers_identical_calls_of_its_session_only(self) -> None:
        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = self.gate(recorder)
            gate.call("send_email", CALL)
            self.approve(self.request(), scope="session")
            self.assertEqual([gate.call("send_email", CALL) for _ in range(2)], [{"ok": True}] * 2)
        records = self.records()
        report = verify_receipts(records, self.keys, policy_digest(self.policy), frozenset(POLICY["write_tools"]))
        self.assertEqual((report.writes, report.receipted, report.findings), (2, 2, ()))
        other = os.path.join(self.tmp, "other.jsonl")
        with SessionRecorder.open(other, sealed=True) as recorder:
            name = name_of("send_email", CALL)
            self.assertEqual(self.gate(recorder).call("send_email", CALL),
                             {"ok": False, "error": refused(name, "it approves the call in another session")})

    def test_an_always_receipt_answers_any_session_until_it_expires(self) -> None:
        with SessionRecorder.open(self.record, sealed=True) as recorder:
            self.gate(recorder).call("send_email", CALL)
        self.approve(self.request(), scope="always")
        other = os.path.join(self.tmp, "other.jsonl")
        with SessionRecorder.open(other, sealed=True) as recorder:
            gate = self.gate(recorder)
            self.assertEqual([gate.call("send_email", CALL) for _ in range(2)], [{"ok": True}] * 2)
            self.clock = LATER
            name = name_of("send_email", CALL)
            self.assertEqual(gate.call("send_email", CALL),
                             {"ok": False, "error": refused(name, "it expired at 2027-01-15T09:00:00Z")})

    def test_a_malformed_receipt_is_refused_with_its_line(self) -> None:
        name = name_of("send_email", CALL)
        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = self.gate(recorder)
            gate.call("send_email", CALL)
            path = self.approve(self.request())
            with open(path, encoding="utf-8") as handle:
                text = handle.read().replace("scope once", "scope forever")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            self.assertEqual(gate.call("send_email", CALL)["error"],
                             f"approval receipt refused: {name}.receipt:5: scope must be one of once, session, always; "
                             f"approve {name}.request of the receipts folder again")

    def test_an_edited_receipt_no_longer_verifies(self) -> None:
        name = name_of("send_email", CALL)
        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = self.gate(recorder)
            gate.call("send_email", CALL)
            path = self.approve(self.request())
            with open(path, encoding="utf-8") as handle:
                text = handle.read().replace("scope once", "scope always")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            self.assertEqual(gate.call("send_email", CALL)["error"], refused(name, "not signed by a listed approver"))

    def test_a_redacting_record_names_the_call_as_recorded(self) -> None:
        from toolreplay.policy.redaction import Redactor, parse_redaction

        redactor = Redactor(parse_redaction({"builtin": False, "fields": ["body"]}), b"k" * 32)
        with SessionRecorder.open(self.record, sealed=True, redactor=redactor) as recorder:
            gate = self.gate(recorder)
            gate.call("send_email", CALL)
            request = self.request("send_email", redactor.args(CALL))
            self.assertNotIn("hi", json.dumps(request.args))  # no secret in the request file
            self.approve(request)
            self.assertEqual(gate.call("send_email", CALL), {"ok": True})
        report = verify_receipts(self.records(), self.keys, policy_digest(self.policy), frozenset({"send_email"}))
        self.assertEqual((report.receipted, report.findings), (1, ()))


def _with(request: ApprovalRequest, **changes: str) -> ApprovalRequest:
    from dataclasses import replace

    return replace(request, **changes)


class OfflineTest(Desk):
    """A record a guard sealed without checking receipts (each write's meta given by the host): verify
    catches every receipt that does not hold."""

    def sealed(self, notes: list[str | None], tool: str = "send_email") -> list[Record]:
        pending = list(notes)

        def meta(name: str) -> dict[str, Any]:
            note = pending.pop(0) if name == tool else None
            return {} if note is None else {"x-receipt": note}

        with SessionRecorder.open(self.record, sealed=True) as recorder:
            gate = Gate(self.tools(), load_policy(self.policy), recorder=recorder, confirm=lambda tool, args: True,
                        record_meta=meta, wall_clock=lambda: self.clock)
            for _ in notes:
                gate.call(tool, CALL)
        return self.records()

    def receipt(self, *, args: dict[str, Any] = CALL, signer: Any = ALICE, scope: str = "once", expires: int = LATER,
                policy: str | None = None, nonce: str = "0" * 32) -> str:
        request = ApprovalRequest("send_email", args, call_digest("send_email", args),
                                  policy or policy_digest(self.policy), self.record, nonce)
        return sign_receipt(request, [signer], scope, expires).decode()

    def report(self, records: list[Record]) -> str:
        return receipts_text(verify_receipts(records, self.keys, policy_digest(self.policy),
                                             frozenset(POLICY["write_tools"])))

    def test_findings(self) -> None:
        good = self.receipt()
        cases = [
            ([good, self.receipt(nonce="1" * 32)], "approvals: verified\napproved by: alice@example.com\n"
                                                   "writes: 2 of 2 carry a receipt that holds\n"),
            ([good, None], "approvals: failed\napproved by: alice@example.com\n"
                           "writes: 1 of 2 carry a receipt that holds\n"
                           "record 1 (send_email): no-receipt: the write ran without an approval receipt\n"),
            ([good, good], "approvals: failed\napproved by: alice@example.com\nwrites: 1 of 2 carry a receipt that holds\n"
                           f"record 1 (send_email): replayed: the receipt (nonce {'0' * 32}) was already used by "
                           "record 0\n"),
            ([self.receipt(signer=MALLORY)], "approvals: failed\nwrites: 0 of 1 carry a receipt that holds\n"
             "record 0 (send_email): signature-invalid: the receipt is not signed by a listed approver\n"),
            ([self.receipt(args={"to": "eve@example.com"})], "approvals: failed\nwrites: 0 of 1 carry a receipt that "
             "holds\nrecord 0 (send_email): call-mismatch: the receipt approves another call (other arguments or "
             "another tool)\n"),
            ([self.receipt(policy="ab" * 32)], "approvals: failed\nwrites: 0 of 1 carry a receipt that holds\n"
             "record 0 (send_email): policy-mismatch: the receipt approves the call under another policy\n"),
            ([self.receipt(expires=NOW)], "approvals: failed\nwrites: 0 of 1 carry a receipt that holds\n"
             "record 0 (send_email): expired: the receipt expired at 2027-01-15T08:00:00Z, the call came at "
             "2027-01-15T08:00:00.000Z\n"),
            (["not a receipt\n"], "approvals: failed\nwrites: 0 of 1 carry a receipt that holds\n"
             "record 0 (send_email): bad-receipt: the receipt cannot be read: x-receipt:1: not an approval receipt: "
             "expected 'toolreplay-approval-v1'\n"),
        ]
        for notes, expected in cases:
            with self.subTest(expected.splitlines()[-1]):
                if os.path.exists(self.record):
                    os.unlink(self.record)
                self.assertEqual(self.report(self.sealed(notes)), expected)

    def test_session_and_always_receipts_may_answer_identical_calls(self) -> None:
        for scope in ("session", "always"):
            with self.subTest(scope):
                if os.path.exists(self.record):
                    os.unlink(self.record)
                note = self.receipt(scope=scope)
                self.assertEqual(self.report(self.sealed([note, note])).splitlines()[0], "approvals: verified")

    def test_a_receipt_on_a_read_is_checked_too_and_a_read_needs_none(self) -> None:
        records = self.sealed([self.receipt(signer=MALLORY)], tool="read_inbox")
        self.assertEqual(self.report(records).splitlines()[-1],
                         "record 0 (read_inbox): signature-invalid: the receipt is not signed by a listed approver")
        os.unlink(self.record)
        self.assertEqual(self.report(self.sealed([None], tool="read_inbox")),
                         "approvals: verified\nwrites: 0 of 0 carry a receipt that holds\n")


class FormatTest(unittest.TestCase):
    REQUEST = ApprovalRequest("send_email", CALL, call_digest("send_email", CALL), "ab" * 32, "/r/run.jsonl", "c" * 32)

    def receipt_lines(self) -> list[str]:
        return sign_receipt(self.REQUEST, [ALICE], "once", LATER).decode().split("\n")

    def test_a_request_round_trips(self) -> None:
        data = format_request(self.REQUEST)
        self.assertEqual(parse_request(data, "r.request"), self.REQUEST)

    def test_invalid_requests(self) -> None:
        good = json.loads(format_request(self.REQUEST))
        cases = [
            (b"[", "r.request:1: not a JSON approval request: "),
            (b"{}", 'r.request:1: not an approval request: expected an object with "request": '
                    '"toolreplay-approval-request-v1"'),
            ({**good, "extra": 1}, 'r.request:1: unknown field "extra"'),
            ({k: v for k, v in good.items() if k != "nonce"}, 'r.request:1: missing field "nonce"'),
            ({**good, "call": "AB" * 32}, 'r.request:1: field "call" must be 64 lowercase hex characters'),
            ({**good, "nonce": "c" * 31}, 'r.request:1: field "nonce" must be 32 lowercase hex characters'),
            ({**good, "session": "a\nb"}, 'r.request:1: field "session": session must be one line of text without '
                                          "control characters or outer spaces"),
            ({**good, "args": {"to": "eve@example.com"}},
             'r.request:1: field "call" is not the SHA-256 of the tool and args the request shows'),
        ]
        for data, message in cases:
            with self.subTest(message):
                raw = data if isinstance(data, bytes) else json.dumps(data).encode()
                with self.assertRaises(InputError) as caught:
                    parse_request(raw, "r.request")
                self.assertTrue(str(caught.exception).startswith(message), str(caught.exception))

    def test_a_receipt_parses(self) -> None:
        receipt = parse_receipt("\n".join(self.receipt_lines()).encode(), "x.receipt")
        self.assertEqual((receipt.call, receipt.policy, receipt.session, receipt.scope, receipt.expires, receipt.nonce),
                         (self.REQUEST.call, "ab" * 32, "/r/run.jsonl", "once", "2027-01-15T09:00:00Z", "c" * 32))
        self.assertEqual([line.name for line in receipt.signatures], ["alice@example.com"])

    def test_invalid_receipts(self) -> None:
        def edited(number: int, line: str | None) -> bytes:
            lines = self.receipt_lines()
            if line is None:
                del lines[number - 1]
            else:
                lines[number - 1] = line
            return "\n".join(lines).encode()

        cases = [
            (edited(1, "toolreplay-hash-chain-v1 x"), "x:1: not an approval receipt: expected 'toolreplay-approval-v1'"),
            (edited(2, "cal " + "a" * 64), "x:2: expected 'call ...'"),
            (edited(3, "policy " + "A" * 64), "x:3: expected 64 lowercase hex characters"),
            (edited(4, "session  padded"), "x:4: session must be one line of text without control characters or "
                                           "outer spaces"),
            (edited(5, "scope forever"), "x:5: scope must be one of once, session, always"),
            (edited(6, "expires 2027-01-15T09:00:00.000Z"), "x:6: expires must be a UTC time to the second, like "
                                                            "2026-12-02T08:00:00Z"),
            (edited(6, "expires 2027-13-15T09:00:00Z"), "x:6: expires must be a UTC time to the second, like "
                                                        "2026-12-02T08:00:00Z"),
            (edited(7, "nonce xyz"), "x:7: nonce must be 32 lowercase hex characters"),
            (edited(8, "extension"), "x:8: expected a blank line after the 7 text lines"),
            (edited(9, "- alice AAAA"), "x:9: expected a signature line '\u2014 KEYNAME BASE64'"),
            (edited(9, None), "x:9: expected 7 text lines, a blank line and a signature line"),
            ("\n".join(self.receipt_lines()[:-1]).encode() + b"x", "x:9: the last line does not end with a "
                                                                        "newline"),
            (b"\xff\n", "x:1: invalid UTF-8"),
        ]
        for data, message in cases:
            with self.subTest(message):
                with self.assertRaises(InputError) as caught:
                    parse_receipt(data, "x")
                self.assertEqual(str(caught.exception), message)

    def test_the_assembly_checks_its_description(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            policy = os.path.join(tmp, "policy.json")
            with open(policy, "w", encoding="utf-8") as handle:
                json.dump(POLICY, handle)
            cases = [
                (GuardConfig(policy, approvers="allowed"), "approval receipts need both the approvers (an "
                                                          "allowed_signers file) and the receipts folder"),
                (GuardConfig(policy, receipts=tmp), "approval receipts need both the approvers (an allowed_signers "
                                                    "file) and the receipts folder"),
                (GuardConfig(policy, approvers="a", receipts=tmp, approvals="approvals.jsonl"),
                 "approval receipts and an approvals file do not go together: a remembered approval would let a call "
                 "run without a receipt"),
                (GuardConfig(load_policy(policy), approvers="a", receipts=tmp),
                 "approval receipts need the policy as a file: a receipt names its SHA-256"),
                (GuardConfig(policy, approvers="a", receipts=policy),
                 f"the receipts folder {policy} is not a folder"),
            ]
            for config, message in cases:
                with self.subTest(message), self.assertRaises(GuardConfigError) as caught:
                    build_guard(config)
                self.assertEqual(str(caught.exception), message)


def _keygen(path: str) -> str:
    assert SSH_KEYGEN is not None
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", path], check=True)
    with open(path + ".pub", encoding="utf-8") as handle:
        return " ".join(handle.read().split()[:2])


class SshDesk(Desk):
    """A Desk with real OpenSSH keys: alice is an approver, mallory is not."""

    @classmethod
    def setUpClass(cls) -> None:
        if SSH_KEYGEN is None:
            return
        cls._keys = tempfile.TemporaryDirectory()
        cls.alice_key = os.path.join(cls._keys.name, "alice")
        cls.mallory_key = os.path.join(cls._keys.name, "mallory")
        cls.alice_pub = _keygen(cls.alice_key)
        cls.mallory_pub = _keygen(cls.mallory_key)

    @classmethod
    def tearDownClass(cls) -> None:
        if SSH_KEYGEN is not None:
            cls._keys.cleanup()

    def setUp(self) -> None:
        require(SSH_KEYGEN is not None, "ssh-keygen (OpenSSH) is not installed")
        super().setUp()
        self.approvers = self.write("approvers", f"alice@example.com {self.alice_pub}\n")
        self.guard = build_guard(GuardConfig(self.policy, record=self.record, approvers=self.approvers,
                                             receipts=self.folder))

    def call(self, tool: str = "send_email", args: dict[str, Any] | None = None) -> dict[str, Any]:
        """One call in a gate of its own over the record (a process that starts, continues the record, ends)."""
        with self.guard.open_record() as recorder:
            return self.guard.gate(self.tools(), recorder=recorder).call(tool, CALL if args is None else args)

    def approve_cli(self, *extra: str, key: str = "alice") -> tuple[int, str, str]:
        name = name_of("send_email", CALL)
        return run("approve", os.path.join(self.folder, name + ".request"), "--ssh-key", f"{key}@example.com",
                   self.alice_key if key == "alice" else self.mallory_key, *extra)

    def verify(self, *extra: str) -> tuple[int, str, str]:
        return run("verify", self.record, "--approvers", self.approvers, "--policy", self.policy, *extra)



@integration
class SshTest(SshDesk):
    """Real OpenSSH keys: the library path built by GuardConfig, `toolreplay approve`, `verify --approvers`."""

    def test_a_record_whose_writes_each_carry_a_receipt_verifies(self) -> None:
        name = name_of("send_email", CALL)
        self.assertEqual(self.call(), {"ok": False, "error": asked(name)})
        code, out, err = self.approve_cli("--expires", "2099-01-01T00:00:00Z")
        receipt = os.path.join(self.folder, name + ".receipt")
        self.assertEqual((code, out, err), (0, 'approved: send_email {"body":"hi","to":"bob@example.com"} (once, '
                                               f"until 2099-01-01T00:00:00Z)\nreceipt: {receipt}\n", ""))
        self.assertEqual(self.call(), {"ok": True})
        self.assertEqual(self.call("read_inbox", {}), {"mail": []})
        self.assertEqual(self.verify(), (0, "chain: intact\napprovals: verified\napproved by: alice@example.com\n"
                                            "writes: 1 of 1 carry a receipt that holds\n", ""))
        code, out, _ = self.verify("--format", "json")
        self.assertEqual((code, json.loads(out)["approvals"]),
                         (0, {"verified": True, "approvers": ["alice@example.com"], "writes": 1, "receipted": 1,
                              "refused": 0, "findings": []}))

    def test_forged_and_replayed_receipts_are_refused_live_and_the_record_says_so(self) -> None:
        name = name_of("send_email", CALL)
        self.call()
        self.assertEqual(self.approve_cli(key="mallory")[0], 0)  # signed, by a key the guard does not list
        self.assertEqual(self.call(), {"ok": False, "error": refused(name, "not signed by a listed approver")})
        request = self.request()
        self.approve_cli()
        self.assertEqual(self.call(), {"ok": True})
        self.assertEqual(self.call(), {"ok": False,  # a new process: the nonce is read back from the record
                                       "error": refused(name, f"it was already used (nonce {request.nonce})")})
        self.assertEqual(self.verify(), (0, "chain: intact\napprovals: verified\napproved by: alice@example.com\n"
                                            "writes: 1 of 1 carry a receipt that holds\nrefused: 2 call(s) whose "
                                            "receipt the guard refused (they did not run)\n", ""))
        self.assertEqual(self.sent, [CALL])

    def test_a_record_with_receipts_that_do_not_hold_fails_offline(self) -> None:
        # a guard that listed mallory too: its record holds a receipt the real approvers never signed
        both = self.write("both", f"alice@example.com {self.alice_pub}\nmallory@example.com {self.mallory_pub}\n")
        lax = build_guard(GuardConfig(self.policy, record=self.record, approvers=both, receipts=self.folder))
        with lax.open_record() as recorder:
            gate = lax.gate(self.tools(), recorder=recorder)
            gate.call("send_email", CALL)
            request = self.request()
            self.approve(request, signer=SshSigner("mallory@example.com", self.mallory_key))
            self.assertEqual(gate.call("send_email", CALL), {"ok": True})
        self.assertEqual(self.verify(), (1, "chain: intact\napprovals: failed\nwrites: 0 of 1 carry a receipt that "
                                            "holds\nrecord 1 (send_email): signature-invalid: the receipt is not "
                                            "signed by a listed approver\n", ""))
        other = self.write("other-policy.json", json.dumps({**POLICY, "agent": "other"}))
        code, out, _ = run("verify", self.record, "--approvers", both, "--policy", other)
        self.assertEqual((code, out.splitlines()[-1]), (1, "record 1 (send_email): policy-mismatch: the receipt "
                                                           "approves the call under another policy"))

    def test_a_broken_chain_fails_and_findings_come_as_json(self) -> None:
        self.call()
        self.approve_cli()
        self.call()
        with open(self.record, encoding="utf-8") as handle:
            lines = handle.readlines()
        edited = json.loads(lines[1])
        del edited["meta"]["x-receipt"]  # the receipt taken out of the record: its link no longer hashes
        with open(self.record, "w", encoding="utf-8") as handle:
            handle.write(lines[0] + json.dumps(edited) + "\n")
        code, out, _ = self.verify("--format", "json")
        document = json.loads(out)
        self.assertEqual((code, document["chain"], document["first_broken_index"], document["approvals"]),
                         (1, "broken", 1, {"verified": False, "approvers": [], "writes": 1, "receipted": 0,
                                           "refused": 0, "findings": [
                                               {"index": 1, "tool": "send_email", "kind": "no-receipt",
                                                "message": "the write ran without an approval receipt"}]}))

    def test_a_checkpoint_signature_is_no_receipt(self) -> None:
        self.call()
        request = self.request()
        # the receipt's text signed in the checkpoints' namespace: ssh-keygen -Y verify refuses it
        from toolreplay.audit.receipts import receipt_text
        from toolreplay.audit.signers import SshSigner as Signer

        text = receipt_text(request, "once", "2099-01-01T00:00:00Z")
        import base64

        line = base64.b64encode(Signer("alice@example.com", self.alice_key).sign(text)).decode()
        with open(os.path.join(self.folder, request.call[:16] + ".receipt"), "wb") as handle:
            handle.write(text + f"\n\u2014 alice@example.com {line}\n".encode())
        self.assertEqual(self.call()["error"], refused(request.call[:16], "not signed by a listed approver"))

    def test_approve_and_verify_bad_input(self) -> None:
        self.call()
        request = os.path.join(self.folder, name_of("send_email", CALL) + ".request")
        bad = self.write("bad.request", "{}\n")
        cases = [
            (("approve", request, "--ssh-key", "alice@example.com", self.alice_key, "--expires", "2000-01-01T00:00:00Z"),
             "error: --expires 2000-01-01T00:00:00Z: that time has passed\n"),
            (("approve", request, "--ssh-key", "alice@example.com", self.alice_key, "--expires", "soon"),
             "error: --expires 'soon': expected a duration (30m, 8h, 7d) or a UTC time like 2026-12-02T08:00:00Z\n"),
            (("approve", bad, "--ssh-key", "alice@example.com", self.alice_key),
             f'error: {bad}:1: not an approval request: expected an object with "request": '
             '"toolreplay-approval-request-v1"\n'),
            (("verify", self.record, "--approvers", self.approvers),
             "error: --approvers needs the policy the guard ran with: --policy POLICY\n"),
            (("verify", self.record, "--policy", self.policy), "error: --policy goes with --approvers ALLOWED_SIGNERS\n"),
            (("verify", self.record, "--approvers", bad, "--policy", self.policy),
             f"error: {bad}:1: expected PRINCIPALS [OPTIONS] KEYTYPE BASE64-KEY\n"),
        ]
        for argv, message in cases:
            with self.subTest(message):
                self.assertEqual(run(*argv), (2, "", message))
        self.assertEqual(os.listdir(self.folder), [name_of("send_email", CALL) + ".request"])  # no receipt written


@integration
class ProxyTest(SshDesk):
    """The MCP proxy: a client that can answer elicitations is not asked; only a receipt lets the write run."""

    def test_the_proxy_runs_a_write_only_with_its_receipt(self) -> None:
        from tests.test_mcp_proxy import Proxy, call, initialize, text_result

        args = {"text": "hi"}
        name = name_of("write_note", args)

        def start() -> Proxy:
            proxy = Proxy(self.tmp, "--approvers", self.approvers, "--receipts", self.folder)
            self.addCleanup(proxy.kill)
            proxy.ask(initialize(capabilities={"elicitation": {}}))  # it could answer its own question
            proxy.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            return proxy

        proxy = start()
        self.assertEqual(proxy.ask(call(1, "write_note", **args)), text_result(1, "toolreplay: " + asked(name), True))
        code, _, err = run("approve", os.path.join(self.folder, name + ".request"), "--ssh-key", "alice@example.com",
                           self.alice_key)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(proxy.ask(call(2, "write_note", **args)), text_result(2, 'write_note {"text": "hi"}', False))
        self.assertEqual(proxy.close()[0], 0)
        proxy = start()  # a restart on the same record: the identical write already ran, it is answered from it
        self.assertEqual(proxy.ask(call(3, "write_note", **args)), text_result(3, 'write_note {"text": "hi"}', False))
        self.assertEqual(proxy.close()[0], 0)
        # the proxy ran with the policy Proxy wrote over self.policy (the tiny server's)
        code, out, _ = run("verify", proxy.record, "--approvers", self.approvers, "--policy", self.policy)
        self.assertEqual((code, out), (0, "chain: intact\napprovals: verified\napproved by: alice@example.com\n"
                                          "writes: 1 of 1 carry a receipt that holds\n"))


if __name__ == "__main__":
    unittest.main()
