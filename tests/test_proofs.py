"""The Merkle tree, tlog-checkpoints, inclusion and consistency proofs: RFC 6962 vectors, the commands, every
bad input, and Go's golang.org/x/mod/sumdb (note, tlog) as an independent verifier."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from tests.support import integration, require
from tests.test_checkpoint import DIRTY, ORIGIN, SECRET, run
from toolreplay.audit.merkle import (
    EMPTY_ROOT,
    MerkleBuilder,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    node_hash,
    range_roots,
    verify_consistency,
    verify_inclusion,
)

HERE = os.path.dirname(os.path.abspath(__file__))
GO_SOURCE = os.path.join(HERE, "fixtures", "tlogverify", "main.go")
GOCODE = "/usr/share/gocode"  # Debian's golang-golang-x-mod-dev

# RFC 6962's test leaves (certificate-transparency's merkle_tree_test) and the roots of their first n.
CT_LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                        "606162636465666768696a6b6c6d6e6f")]
CT_ROOTS = ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"]


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162's definition, recursively: what the streaming code must agree with."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _path(m: int, leaves: list[bytes]) -> list[bytes]:
    if len(leaves) <= 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return _path(m, leaves[:k]) + [_mth(leaves[k:])] if m < k else _path(m - k, leaves[k:]) + [_mth(leaves[:k])]


def _subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    if m == len(leaves):
        return [] if whole else [_mth(leaves)]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if m <= k:
        return _subproof(m, leaves[:k], whole) + [_mth(leaves[k:])]
    return _subproof(m - k, leaves[k:], False) + [_mth(leaves[:k])]


class MerkleTreeTest(unittest.TestCase):
    def test_rfc6962_vectors(self) -> None:
        builder = MerkleBuilder()
        self.assertEqual(builder.root(), EMPTY_ROOT)
        self.assertEqual(EMPTY_ROOT.hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        for leaf, root in zip(CT_LEAVES, CT_ROOTS, strict=True):
            builder.add(leaf)
            self.assertEqual(builder.root().hex(), root)

    def test_proofs_match_the_definition_and_verify(self) -> None:
        for size in range(1, 34):
            leaves = [hashlib.sha256(bytes([n])).digest() for n in range(size)]
            root = _mth(leaves)
            for index in range(size):
                ranges = inclusion_ranges(index, size)
                roots, whole = range_roots(leaves, ranges)
                path = [roots[r] for r in ranges]
                self.assertEqual((path, whole.root()), (_path(index, leaves), root), (index, size))
                self.assertTrue(verify_inclusion(index, size, leaf_hash(leaves[index]), path, root))
                self.assertFalse(verify_inclusion(index, size, leaf_hash(leaves[index - 1] if index else b"x"),
                                                  path, root))
                if path:
                    self.assertFalse(verify_inclusion(index, size, leaf_hash(leaves[index]), path[:-1], root))
            for old in range(1, size + 1):
                ranges = consistency_ranges(old, size)
                roots, _ = range_roots(leaves, ranges)
                proof = [roots[r] for r in ranges]
                self.assertEqual(proof, _subproof(old, leaves, True), (old, size))
                self.assertTrue(verify_consistency(old, size, proof, _mth(leaves[:old]), root))
                self.assertFalse(verify_consistency(old, size, proof, _mth(leaves[:old - 1]), root))
                if proof:
                    self.assertFalse(verify_consistency(old, size, proof[1:], _mth(leaves[:old]), root))

    def test_a_million_leaves_need_at_most_64_hashes(self) -> None:
        self.assertEqual(len(inclusion_ranges(123_456, 1_000_000)), 20)
        self.assertEqual([len(consistency_ranges(old, 1_000_000)) for old in (1, 3, 524_288, 524_289, 999_999)],
                         [20, 21, 1, 21, 13])


class _ProofCase(unittest.TestCase):
    """A sealed session of 6 links and one of its first 4, each with an HMAC-signed tlog-checkpoint."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.secret = self.path("ci.secret")
        with open(self.secret, "wb") as handle:
            handle.write(SECRET + b"\n")
        self.keys = ["--hmac-key", "ci", self.secret]
        self.sealed, self.cp = self.seal("run.jsonl", None)
        self.early, self.early_cp = self.seal("early.jsonl", 4)

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def seal(self, name: str, lines: int | None) -> tuple[str, str]:
        with open(DIRTY, "rb") as handle:
            data = b"".join(handle.readlines()[:lines])
        sealed, cp = self.path(name), self.path(name + ".cp")
        code, _, err = run("seal", "-", "-o", sealed, "--checkpoint", cp, "--tlog", "--origin", ORIGIN, *self.keys,
                           stdin=data)
        self.assertEqual((code, err), (0, ""))
        return sealed, cp

    def prove(self, *argv: str, name: str = "proof.json") -> str:
        out = self.path(name)
        self.assertEqual(run("prove", *argv, "-o", out), (0, "", ""))
        return out

    def verify(self, proof: str, *extra: str) -> tuple[int, str, str]:
        return run("verify", "--proof", proof, "--checkpoint", self.cp, *self.keys, *extra)

    def edited(self, source: str, **changes: object) -> str:
        with open(source, encoding="utf-8") as handle:
            document = json.load(handle)
        document.update(changes)
        self.edits = getattr(self, "edits", 0) + 1
        out = self.path(f"edited-{self.edits}.json")
        with open(out, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
        return out



class ProofCommandTest(_ProofCase):
    """seal --tlog, prove, verify --proof with an HMAC key: what each says, and each bad input."""

    def test_tlog_checkpoint(self) -> None:
        with open(self.cp, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        with open(self.sealed, encoding="utf-8") as handle:
            digests = [bytes.fromhex(json.loads(line)["digest"]) for line in handle]
        self.assertEqual(lines[:2], [ORIGIN, "6"])
        self.assertEqual(lines[2], __import__("base64").b64encode(_mth(digests)).decode())
        self.assertEqual(run("verify", self.sealed, "--checkpoint", self.cp, *self.keys), (0, (
            "chain: intact\ncheckpoint: verified\nkind: tlog-checkpoint (the root of the Merkle tree over the links)\n"
            f"signed by: ci\norigin: {ORIGIN}\nanchored: 6 of 6 links\n"), ""))
        code, out, _ = run("verify", self.early, "--checkpoint", self.cp, *self.keys)
        self.assertEqual((code, out.splitlines()[-1]), (1, "truncated: the checkpoint commits to 6 links, the file has 4"))
        with open(self.sealed, encoding="utf-8") as handle:
            forged = handle.read().replace('"count":2', '"count":0')
        code, out, _ = run("seal", "-", stdin=forged.encode())
        forged_path = self.path("forged.jsonl")
        with open(forged_path, "w", encoding="utf-8") as handle:
            handle.write(out)
        code, out, _ = run("verify", forged_path, "--checkpoint", self.cp, *self.keys)
        self.assertEqual((code, out.splitlines()[-1]),
                         (1, "rewritten: the first 6 links do not hash to the Merkle root of the checkpoint"))

    def test_inclusion(self) -> None:
        proof = self.prove(self.sealed, "3")
        with open(proof, encoding="utf-8") as handle:
            document = json.load(handle)
        with open(self.sealed, encoding="utf-8") as handle:
            link = json.loads(handle.readlines()[3])
        self.assertEqual(list(document), ["proof", "index", "tree_size", "leaf", "hashes", "record"])
        self.assertEqual((document["index"], document["tree_size"], document["leaf"], document["record"]),
                         (3, 6, link["digest"], link))
        self.assertEqual(len(document["hashes"]), 3)
        self.assertEqual(self.verify(proof), (0, (
            f"inclusion proof: verified\nsigned by: ci\norigin: {ORIGIN}\n"
            "proven: the record at index 3 (tool search) is link 3 of the 6 links ci signed\n"), ""))
        code, out, _ = self.verify(proof, "--format", "json")
        self.assertEqual((code, json.loads(out)), (0, {
            "command": "verify", "proof": "inclusion", "status": "verified", "signed_by": ["ci"],
            "ignored_signatures": [], "origin": ORIGIN, "index": 3, "tree_size": 6, "tool": "search", "findings": []}))

    def test_inclusion_tampered(self) -> None:
        proof = self.prove(self.sealed, "3")
        with open(proof, encoding="utf-8") as handle:
            document = json.load(handle)
        record, hashes = document["record"], document["hashes"]
        cases = [
            ({"record": {**record, "response": {"count": 0, "hits": []}}},
             "record-mismatch: the record does not hash to the proof's leaf"),
            ({"hashes": [hashes[0], hashes[2], hashes[1]]},
             "root-mismatch: the audit path does not lead to the checkpoint's root"),
            ({"hashes": hashes[:2]},
             "path-length: the proof has 2 hashes, an audit path for index 3 in a tree of 6 has 3"),
            ({"index": 2}, "index-mismatch: the record has index 3, the proof is for index 2"),
            ({"tree_size": 5}, "size-mismatch: the proof is for a tree of 5 links, the checkpoint commits to 6"),
        ]
        for changes, finding in cases:
            with self.subTest(finding=finding):
                code, out, err = self.verify(self.edited(proof, **changes))
                self.assertEqual((code, out.splitlines()[0], finding in out.splitlines(), err),
                                 (1, "inclusion proof: failed", True, ""))
        other = self.path("other.secret")
        with open(other, "wb") as handle:
            handle.write(b"another secret of 32 bytes, too.")
        self.assertEqual(run("verify", "--proof", proof, "--checkpoint", self.cp, "--hmac-key", "ci2", other), (1, (
            "inclusion proof: failed\nignored signature: ci (unknown key)\n"
            "unknown-key: the checkpoint has no signature from a known key\n"), ""))
        with open(self.cp, encoding="utf-8") as handle:
            forged = handle.read().replace("\n6\n", "\n5\n")
        forged_cp = self.path("forged.cp")
        with open(forged_cp, "w", encoding="utf-8") as handle:
            handle.write(forged)
        self.assertEqual(run("verify", "--proof", proof, "--checkpoint", forged_cp, *self.keys), (1, (
            "inclusion proof: failed\n"
            "signature-invalid: the checkpoint has a signature by known key 'ci' that does not verify\n"), ""))
        code, out, _ = self.verify(proof, "--origin", "example.com/other")
        self.assertEqual((code, out.splitlines()[-1]), (1, (
            f"origin-mismatch: the checkpoint is for origin '{ORIGIN}', expected 'example.com/other'")))

    def test_consistency(self) -> None:
        proof = self.prove("--consistency", "4", self.sealed)
        with open(proof, encoding="utf-8") as handle:
            self.assertEqual(list(json.load(handle)), ["proof", "old_size", "new_size", "hashes"])
        self.assertEqual(self.verify(proof, "--previous", self.early_cp), (0, (
            f"consistency proof: verified\nsigned by: ci\nprevious signed by: ci\norigin: {ORIGIN}\n"
            "proven: the 6 links signed by ci begin with the 4 links the previous checkpoint signed, unchanged "
            "(append-only)\n"), ""))
        code, out, _ = run("verify", "--proof", proof, "--checkpoint", self.early_cp, "--previous", self.cp,
                           *self.keys)
        self.assertEqual((code, out.splitlines()[-2:]), (1, [
            "size-mismatch: the proof's new_size is 6, the checkpoint commits to 4 links",
            "size-mismatch: the proof's old_size is 4, the previous checkpoint commits to 6 links"]))
        # A rewritten log whose first 4 links changed: no proof from it reaches the old checkpoint.
        with open(self.sealed, encoding="utf-8") as handle:
            forged = handle.read().replace('"query":"install"', '"query":"uninstall"')
        _, resealed, _ = run("seal", "-", stdin=forged.encode())
        forged_path = self.path("forged.jsonl")
        with open(forged_path, "w", encoding="utf-8") as handle:
            handle.write(resealed)
        forged_proof = self.prove("--consistency", "4", forged_path)
        code, out, _ = self.verify(forged_proof, "--previous", self.early_cp)
        self.assertEqual((code, out.splitlines()[-1]),
                         (1, "not-consistent: the proof does not show the checkpoint extends the previous one"))

    def test_bad_input(self) -> None:
        proof = self.prove(self.sealed, "3")
        consistency_copy = self.prove("--consistency", "4", self.sealed, name="consistency.json")
        with open(proof, encoding="utf-8") as handle:
            text = handle.read()
        truncated = self.path("truncated.json")
        with open(truncated, "w", encoding="utf-8") as handle:
            handle.write(text[:len(text) // 2])
        chain_cp = self.path("chain.cp")
        self.assertEqual(run("seal", self.sealed, "-o", self.path("x.jsonl"), "--checkpoint", chain_cp, "--origin",
                             ORIGIN, *self.keys)[0], 0)
        broken = self.path("broken.jsonl")
        with open(self.sealed, encoding="utf-8") as handle:
            lines = handle.readlines()
        with open(broken, "w", encoding="utf-8") as handle:
            handle.writelines([lines[0], lines[1].replace('"path":"docs', '"path":"src'), *lines[2:]])
        cases = [
            (["prove", self.sealed, "6"], "error: index 6 is out of range: the tree has 6 links\n"),
            (["prove", self.sealed, "1", "--size", "7"], f"error: {self.sealed} has 6 links, fewer than the tree size 7\n"),
            (["prove", "--consistency", "0", self.sealed],
             "error: the old size must be at least 1 (every log extends the empty one)\n"),
            (["prove", "--consistency", "7", self.sealed], "error: the old size 7 is larger than the tree size 6\n"),
            (["prove", self.sealed], "error: prove needs INDEX (an inclusion proof) or --consistency OLD_SIZE "
                                     "(a consistency proof), not both\n"),
            (["prove", broken, "3"], f"error: {broken}: the chain is broken at link 1 (toolreplay verify says how): "
                                     "a broken chain proves nothing\n"),
            (["verify", "--proof", truncated, "--checkpoint", self.cp, *self.keys],
             f"error: {truncated}:12: invalid JSON: Expecting property name enclosed in double quotes (column 3)\n"),
            (["verify", "--proof", self.edited(proof, index=6), "--checkpoint", self.cp, *self.keys],
             f"error: {self.path('edited-1.json')}: index 6 is out of range: the tree has 6 links\n"),
            (["verify", "--proof", self.edited(proof, hashes=["00"]), "--checkpoint", self.cp, *self.keys],
             f"error: {self.path('edited-2.json')}: hashes[0] must be 64 lowercase hex characters\n"),
            (["verify", "--proof", self.edited(proof, extra=1), "--checkpoint", self.cp, *self.keys],
             f"error: {self.path('edited-3.json')}: unknown field 'extra'\n"),
            (["verify", "--proof", self.edited(proof, record={"index": 3}), "--checkpoint", self.cp, *self.keys],
             f"error: {self.path('edited-4.json')}: 'record' is not a sealed record: missing field \"tool\"\n"),
            (["verify", "--proof", proof, "--checkpoint", chain_cp, *self.keys],
             f"error: {chain_cp}:1: a hash-chain checkpoint: proofs are checked against a tlog-checkpoint "
             "(toolreplay seal --tlog)\n"),
            (["verify", "--proof", consistency_copy, "--checkpoint", self.cp, *self.keys],
             "error: a consistency proof is checked against two checkpoints: --previous OLD_CHECKPOINT\n"),
            (["verify", "--proof", proof, "--checkpoint", self.cp, "--previous", self.early_cp, *self.keys],
             "error: --previous goes with a consistency proof, this one is an inclusion proof\n"),
            (["verify", self.sealed, "--proof", proof, "--checkpoint", self.cp, *self.keys],
             "error: --proof is checked without the session: give no SEALED file\n"),
            (["verify", "--proof", proof, *self.keys],
             "error: --proof needs the checkpoint it proves against: --checkpoint FILE\n"),
            (["verify", "--proof", self.edited(proof, hashes=["0" * 64] * 129), "--checkpoint", self.cp, *self.keys],
             f"error: {self.path('edited-5.json')}: 'hashes' must be a list of at most 128 hashes\n"),
            (["verify", "--proof", self.edited(proof, proof="other"), "--checkpoint", self.cp, *self.keys],
             f"error: {self.path('edited-6.json')}: 'proof' must be 'inclusion' or 'consistency'\n"),
        ]
        for argv, message in cases:
            with self.subTest(argv=argv[:3]):
                self.assertEqual(run(*argv), (2, "", message))


def _go_available() -> bool:
    return shutil.which("go") is not None and os.path.isdir(os.path.join(GOCODE, "src", "golang.org", "x", "mod",
                                                                         "sumdb", "tlog"))


@integration
class GoVerifierTest(_ProofCase):
    """Go's note.Open, tlog.CheckRecord and tlog.CheckTree accept ToolReplay's checkpoints and proofs, with an
    HMAC key and an ed25519 SSH key (SSHSIG checked in Go), and reject tampered ones."""

    def setUp(self) -> None:
        require(_go_available(), "Go and golang-golang-x-mod-dev (apt-get install golang-go golang-golang-x-mod-dev)")
        super().setUp()
        build = self.path("go")
        os.makedirs(build)
        shutil.copy(GO_SOURCE, os.path.join(build, "main.go"))
        self.binary = os.path.join(build, "tlogverify")
        env = {**os.environ, "GO111MODULE": "off", "GOPATH": GOCODE, "GOCACHE": os.path.join(build, "cache"),
               "GOFLAGS": ""}
        subprocess.run(["go", "build", "-o", self.binary, "main.go"], cwd=build, env=env, check=True,
                       capture_output=True, timeout=300)

    def go(self, key: str, checkpoint: str, kind: str, proof: str, *previous: str) -> str:
        done = subprocess.run([self.binary, key, checkpoint, kind, proof, *previous], capture_output=True,
                              text=True, timeout=60)
        return f"{done.returncode} {done.stdout.strip()}"

    def test_go_accepts_and_rejects(self) -> None:
        key = f"hmac:ci:{self.secret}"
        inclusion = self.prove(self.sealed, "5", name="inclusion.json")
        self.assertEqual(self.go(key, self.cp, "inclusion", inclusion), "0 ok")
        for index in range(6):
            with self.subTest(index=index):
                self.assertEqual(self.go(key, self.cp, "inclusion", self.prove(self.sealed, str(index))), "0 ok")
        consistency = self.prove("--consistency", "4", self.sealed)
        self.assertEqual(self.go(key, self.cp, "consistency", consistency, self.early_cp), "0 ok")
        for old in (1, 2, 3, 5, 6):
            _, cp = self.seal(f"part{old}.jsonl", old)
            with self.subTest(old=old):
                self.assertEqual(self.go(key, self.cp, "consistency", self.prove("--consistency", str(old),
                                                                                  self.sealed), cp), "0 ok")
        with open(inclusion, encoding="utf-8") as handle:
            document = json.load(handle)
        hashes = document["hashes"]
        tampered = self.edited(inclusion, hashes=[hashes[0][::-1], *hashes[1:]])
        self.assertEqual(self.go(key, self.cp, "inclusion", tampered), "1 invalid transparency proof")
        consistency = self.prove("--consistency", "4", self.sealed)
        with open(consistency, encoding="utf-8") as handle:
            consistency_hashes = json.load(handle)["hashes"]
        tampered = self.edited(consistency, hashes=["0" * 64] + consistency_hashes[1:])
        self.assertEqual(self.go(key, self.cp, "consistency", tampered, self.early_cp), "1 invalid transparency proof")
        with open(self.cp, encoding="utf-8") as handle:
            forged = handle.read().replace("\n6\n", "\n5\n")
        forged_cp = self.path("forged.cp")
        with open(forged_cp, "w", encoding="utf-8") as handle:
            handle.write(forged)
        self.assertTrue(self.go(key, forged_cp, "inclusion", inclusion).startswith(
            "1 note.Open: invalid signature for key ci+"))

    def test_go_checks_a_sealed_report(self) -> None:
        report = self.path("report.json")
        code, _, _ = run("audit", self.sealed, "--format", "json", "--cite", "-o", report)
        cp = self.path("report.cp")
        self.assertEqual(run("seal", "--report", report, "--checkpoint", cp, "--origin", ORIGIN, *self.keys),
                         (0, "", ""))
        with open(report, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        leaf = self.path("leaf.json")
        for name, value in (("leaf.json", digest), ("other.json", hashlib.sha256(b"another").hexdigest())):
            with open(self.path(name), "w", encoding="utf-8") as handle:
                json.dump({"index": 0, "tree_size": 1, "leaf": value, "hashes": []}, handle)
        self.assertEqual(self.go(f"hmac:ci:{self.secret}", cp, "inclusion", leaf), "0 ok")
        self.assertEqual(self.go(f"hmac:ci:{self.secret}", cp, "inclusion", self.path("other.json")),
                         "1 invalid transparency proof")

    def test_go_checks_the_ssh_signature(self) -> None:
        require(shutil.which("ssh-keygen") is not None, "ssh-keygen (OpenSSH)")
        key = self.path("ci-key")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f", key], check=True)
        cp = self.path("ssh.cp")
        self.assertEqual(run("seal", self.sealed, "-o", self.path("ssh.jsonl"), "--checkpoint", cp, "--tlog",
                             "--origin", ORIGIN, "--ssh-key", "ci@example.com", key)[0], 0)
        proof = self.prove(self.sealed, "2")
        self.assertEqual(self.go(f"ssh:ci@example.com:{key}.pub", cp, "inclusion", proof), "0 ok")
        self.assertEqual(self.go(f"ssh:other@example.com:{key}.pub", cp, "inclusion", proof),
                         "1 note.Open: note has no verifiable signatures")


class SealedReportTest(_ProofCase):
    """`seal --report` signs a report whole (a tlog-checkpoint of one leaf); `verify --report` checks it."""

    def test_seal_and_verify_a_report(self) -> None:
        report = self.path("report.json")
        self.assertEqual(run("audit", self.sealed, "--format", "json", "--cite", "-o", report)[0], 1)
        cp = self.path("report.cp")
        self.assertEqual(run("seal", "--report", report, "--checkpoint", cp, "--origin", "example.com/audit-1",
                             *self.keys), (0, "", ""))
        with open(report, "rb") as handle:
            data = handle.read()
        digest = hashlib.sha256(data).hexdigest()
        with open(cp, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        self.assertEqual(lines[:3], ["example.com/audit-1", "1", __import__("base64").b64encode(
            leaf_hash(bytes.fromhex(digest))).decode()])
        self.assertEqual(run("verify", "--report", report, "--checkpoint", cp, *self.keys), (0, (
            f"report: verified\nsigned by: ci\norigin: example.com/audit-1\n"
            f"proven: {report} (sha256 {digest}) is the report ci signed\n"), ""))
        code, out, _ = run("verify", "--report", report, "--checkpoint", cp, *self.keys, "--format", "json")
        self.assertEqual((code, json.loads(out)), (0, {
            "command": "verify", "report": report, "status": "verified", "signed_by": ["ci"],
            "ignored_signatures": [], "origin": "example.com/audit-1", "sha256": digest, "findings": []}))
        with open(report, "wb") as handle:
            handle.write(data.replace(b'"findings_total": 2', b'"findings_total": 0'))
        self.assertEqual(run("verify", "--report", report, "--checkpoint", cp, *self.keys), (1, (
            "report: failed\nsigned by: ci\norigin: example.com/audit-1\n"
            "report-mismatch: the report is not the one the checkpoint signed\n"), ""))
        code, out, _ = run("verify", "--report", report, "--checkpoint", self.cp, *self.keys)
        self.assertEqual((code, out.splitlines()[-1]),
                         (1, "size-mismatch: the checkpoint commits to 6 links, a sealed report is 1"))
        cases = [
            (["seal", "--report", report], "error: --report needs --checkpoint FILE, --origin ORIGIN and a key to "
                                           "sign with\n"),
            (["seal", self.sealed, "--report", report, "--checkpoint", cp, "--origin", ORIGIN, *self.keys],
             "error: --report signs a report file: give no SESSION and no -o\n"),
            (["verify", "--report", report, *self.keys],
             "error: --report needs the checkpoint that sealed it: --checkpoint FILE\n"),
            (["verify", self.sealed, "--report", report, "--checkpoint", cp, *self.keys],
             "error: --report is checked alone: give no SEALED, --proof or --previous\n"),
            (["verify", "--report", self.path("missing.json"), "--checkpoint", cp, *self.keys],
             f"error: cannot read {self.path('missing.json')}: No such file or directory\n"),
        ]
        for argv, message in cases:
            with self.subTest(argv=argv[:3]):
                self.assertEqual(run(*argv), (2, "", message))


class CiteTest(_ProofCase):
    """`audit --cite` and `eval --cite`: each session's tree, the one `seal --tlog` signs."""

    def tlog_root(self, cp: str) -> tuple[int, str]:
        with open(cp, encoding="utf-8") as handle:
            lines = handle.read().split("\n")
        return int(lines[1]), __import__("base64").b64decode(lines[2]).hex()

    def test_audit_cites_each_session(self) -> None:
        fleet = self.path("fleet")
        os.makedirs(fleet)
        shutil.copy(DIRTY, os.path.join(fleet, "a-plain.jsonl"))
        shutil.copy(self.sealed, os.path.join(fleet, "b-sealed.jsonl"))
        shutil.copy(self.early, os.path.join(fleet, "c-early.jsonl"))
        code, out, err = run("audit", fleet, "--format", "json", "--cite")
        sessions = json.loads(out)["sessions"]
        size, root = self.tlog_root(self.cp)
        early = self.tlog_root(self.early_cp)
        self.assertEqual((code, err), (1, ""))
        self.assertEqual([s["tree"] for s in sessions], [{"size": size, "root": root}] * 2
                         + [{"size": early[0], "root": early[1]}])
        self.assertEqual(list(sessions[0])[-1], "tree")
        code, out, _ = run("audit", fleet, "--format", "json")
        self.assertEqual([("tree" in s) for s in json.loads(out)["sessions"]], [False] * 3)

    def test_audit_checks_a_tlog_checkpoint_beside_a_session(self) -> None:
        fleet = self.path("fleet")
        os.makedirs(fleet)
        shutil.copy(self.sealed, os.path.join(fleet, "run.jsonl"))
        shutil.copy(self.cp, os.path.join(fleet, "run.checkpoint"))
        shutil.copy(self.early, os.path.join(fleet, "cut.jsonl"))
        shutil.copy(self.cp, os.path.join(fleet, "cut.checkpoint"))
        code, out, _ = run("audit", fleet, "--format", "json", *self.keys)
        statuses = [(s["checkpoint"]["status"], s["checkpoint"]["findings"]) for s in json.loads(out)["sessions"]]
        self.assertEqual((code, statuses), (1, [
            ("failed", [{"kind": "truncated", "message": "the checkpoint commits to 6 links, the file has 4"}]),
            ("anchored", [])]))

    def test_eval_cites_each_recorded_run(self) -> None:
        suite = os.path.join(os.path.dirname(DIRTY), "eval-suite.json")
        record = self.path("rec")
        code, out, err = run("eval", suite, "--agent", "toolreplay.demos.orders:sloppy_model", "--format", "json",
                             "--record", record, "--cite")
        self.assertEqual((code, err), (1, ""))
        results = json.loads(out)["agents"][0]["results"]
        self.assertEqual(len(results), 5)
        for result in results:
            with self.subTest(case=result["case"]):
                session = os.path.join(record, "sloppy_model", result["case"] + ".jsonl")
                self.assertEqual(result["session"], session)
                cp = self.path(result["case"] + ".cp")
                self.assertEqual(run("seal", session, "-o", self.path("s.jsonl"), "--checkpoint", cp, "--tlog",
                                     "--origin", ORIGIN, *self.keys)[0], 0)
                size, root = self.tlog_root(cp)
                self.assertEqual(result["tree"], {"size": size, "root": root})
        code, out, _ = run("eval", suite, "--agent", "toolreplay.demos.orders:sloppy_model", "--format", "json")
        self.assertEqual([("tree" in r) for r in json.loads(out)["agents"][0]["results"]], [False] * 5)
        self.assertEqual(run("eval", suite, "--agent", "toolreplay.demos.orders:sloppy_model", "--cite"),
                         (2, "", "error: --cite goes with --format json and --record DIR (the sessions it cites)\n"))
