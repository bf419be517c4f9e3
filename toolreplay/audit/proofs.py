"""Inclusion and consistency proofs of a sealed session (RFC 9162 §2.1.3, §2.1.4), as JSON files, and their
checks against signed tlog-checkpoints, without the session.

An inclusion proof carries one record (a link, as in the sealed file), its index, the tree size, its
digest (`leaf`) and the audit path (`hashes`); the verifier recomputes the digest from the record
itself. A consistency proof carries the two sizes and the hashes that show the larger tree extends the
smaller one. Making either reads the session once (after a count of its lines) and keeps O(log n)
hashes; a broken chain proves nothing and is refused.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from toolreplay.audit.chain import GENESIS, LinkFact, link_digest
from toolreplay.audit.checkpoint import TLOG, Checkpoint, CheckpointFinding, Keys, SignatureCheck, signature_findings
from toolreplay.audit.merkle import (
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    range_roots,
    verify_consistency,
    verify_inclusion,
)
from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import read_links
from toolreplay.format.strictjson import read_json_file
from toolreplay.format.text import escape_text

__all__ = ["INCLUSION", "CONSISTENCY", "InclusionProof", "ConsistencyProof", "Proof", "count_lines", "prove_inclusion",
           "prove_consistency", "proof_json", "read_proof", "ProofReport", "verify_proof", "proof_text",
           "proof_report_json", "report_root", "ReportCheck", "verify_report", "report_text",
           "report_json"]

INCLUSION = "inclusion"
CONSISTENCY = "consistency"
_MAX_SIZE = 1 << 63
_MAX_HASHES = 128  # a proof in a tree of fewer than 2**63 leaves has at most 2 * 63 hashes
_FIELDS = ("index", "tool", "args", "response", "meta", "prev", "digest")


@dataclass(frozen=True)
class InclusionProof:
    """Record `index` of a tree of `tree_size` links: its digest (`leaf`, hex), its audit path, the record."""

    index: int
    tree_size: int
    leaf: str
    hashes: tuple[str, ...]
    record: dict[str, Any]


@dataclass(frozen=True)
class ConsistencyProof:
    """The tree of `new_size` links extends the one of `old_size`: the hashes that show it."""

    old_size: int
    new_size: int
    hashes: tuple[str, ...]


Proof = InclusionProof | ConsistencyProof


def count_lines(path: str) -> int:
    """The lines of a file that are not blank: the links of a sealed file (the reader checks each one later)."""
    count = 0
    try:
        with open(path, "rb") as handle:
            for line in handle:
                if line.strip(b" \t\r\n"):
                    count += 1
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    return count


def _content(facts: Iterable[LinkFact], size: int, path: str) -> Iterator[tuple[bytes, bytes, str]]:
    """The first `size` links as (canonical record, digest bytes, prev), the chain checked on the way."""
    prev = GENESIS
    position = -1
    for position, (canonical, stated_prev, stated_digest) in enumerate(facts):
        if position == size:
            return
        digest = link_digest(prev, canonical)
        if stated_prev != prev or stated_digest != digest:
            raise InputError(path, None, f"the chain is broken at link {position} (toolreplay verify says how): "
                                         "a broken chain proves nothing")
        yield canonical, bytes.fromhex(digest), prev
        prev = digest
    if position + 1 < size:
        raise InputError(path, None, f"has {position + 1} links, fewer than the tree size {size}")


def _check_size(size: int | None, links: int, path: str) -> int:
    if size is None:
        return links
    if size > links:
        raise UsageError(f"{path} has {links} links, fewer than the tree size {size}")
    return size


def prove_inclusion(facts: Iterable[LinkFact], index: int, links: int, path: str,
                    size: int | None = None) -> InclusionProof:
    """The inclusion proof of link `index` in the tree of the first `size` links (default: all `links`)."""
    size = _check_size(size, links, path)
    if not 0 <= index < size:
        raise UsageError(f"index {index} is out of range: the tree has {size} links")
    ranges = inclusion_ranges(index, size)
    found: list[tuple[bytes, bytes, str]] = []

    def digests() -> Iterator[bytes]:
        for position, (canonical, digest, prev) in enumerate(_content(facts, size, path)):
            if position == index:
                found.append((canonical, digest, prev))
            yield digest

    roots, _ = range_roots(digests(), ranges)
    canonical, digest, prev = found[0]
    record = json.loads(canonical)
    record.update(prev=prev, digest=digest.hex())
    ordered = {name: record[name] for name in _FIELDS if name in record}
    return InclusionProof(index, size, digest.hex(), tuple(roots[r].hex() for r in ranges), ordered)


def prove_consistency(facts: Iterable[LinkFact], old_size: int, links: int, path: str,
                      size: int | None = None) -> ConsistencyProof:
    """The consistency proof from the tree of `old_size` links to the tree of `size` (default: all `links`)."""
    size = _check_size(size, links, path)
    if old_size < 1:
        raise UsageError("the old size must be at least 1 (every log extends the empty one)")
    if old_size > size:
        raise UsageError(f"the old size {old_size} is larger than the tree size {size}")
    ranges = consistency_ranges(old_size, size)
    roots, _ = range_roots((digest for _, digest, _ in _content(facts, size, path)), ranges)
    return ConsistencyProof(old_size, size, tuple(roots[r].hex() for r in ranges))


def proof_json(proof: Proof) -> str:
    """A proof as its JSON file (indented, one final newline)."""
    if isinstance(proof, InclusionProof):
        document: dict[str, Any] = {"proof": INCLUSION, "index": proof.index, "tree_size": proof.tree_size,
                                    "leaf": proof.leaf, "hashes": list(proof.hashes), "record": proof.record}
    else:
        document = {"proof": CONSISTENCY, "old_size": proof.old_size, "new_size": proof.new_size,
                    "hashes": list(proof.hashes)}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# --- reading ---------------------------------------------------------------------------------------------


def _field(document: dict[str, Any], name: str, path: str) -> Any:
    if name not in document:
        raise InputError(path, None, f"not a proof: no '{name}' field")
    return document[name]


def _size(document: dict[str, Any], name: str, path: str, low: int) -> int:
    value = _field(document, name, path)
    if type(value) is not int or not low <= value < _MAX_SIZE:
        raise InputError(path, None, f"'{name}' must be an integer of at least {low}")
    return value


def _hashes(document: dict[str, Any], path: str) -> tuple[str, ...]:
    value = _field(document, "hashes", path)
    if type(value) is not list or len(value) > _MAX_HASHES:
        raise InputError(path, None, f"'hashes' must be a list of at most {_MAX_HASHES} hashes")
    for number, item in enumerate(value):
        if not _is_hex32(item):
            raise InputError(path, None, f"hashes[{number}] must be 64 lowercase hex characters")
    return tuple(value)


def _is_hex32(value: Any) -> bool:
    return type(value) is str and len(value) == 64 and all(ch in "0123456789abcdef" for ch in value)


def read_proof(path: str) -> Proof:
    """Read a proof file strictly: any other shape is an InputError naming the file."""
    document = read_json_file(path)
    if type(document) is not dict:
        raise InputError(path, None, "not a proof: expected a JSON object")
    kind = _field(document, "proof", path)
    if kind == INCLUSION:
        known = {"proof", "index", "tree_size", "leaf", "hashes", "record"}
        tree_size = _size(document, "tree_size", path, 1)
        index = _size(document, "index", path, 0)
        if index >= tree_size:
            raise InputError(path, None, f"index {index} is out of range: the tree has {tree_size} links")
        leaf = _field(document, "leaf", path)
        if not _is_hex32(leaf):
            raise InputError(path, None, "'leaf' must be 64 lowercase hex characters")
        record = _field(document, "record", path)
        if type(record) is not dict:
            raise InputError(path, None, "'record' must be a sealed record (a JSON object)")
        proof: Proof = InclusionProof(index, tree_size, leaf, _hashes(document, path), record)
    elif kind == CONSISTENCY:
        known = {"proof", "old_size", "new_size", "hashes"}
        new_size = _size(document, "new_size", path, 1)
        old_size = _size(document, "old_size", path, 1)
        if old_size > new_size:
            raise InputError(path, None, f"old_size {old_size} is larger than new_size {new_size}")
        proof = ConsistencyProof(old_size, new_size, _hashes(document, path))
    else:
        raise InputError(path, None, f"'proof' must be '{INCLUSION}' or '{CONSISTENCY}'")
    unknown = sorted(set(document) - known)
    if unknown:
        raise InputError(path, None, f"unknown field '{unknown[0]}'")
    return proof


def _parse_record(record: dict[str, Any], path: str) -> tuple[int, str, str, str]:
    """The record of an inclusion proof, read as a sealed file's line: (index, tool, prev, recomputed digest)."""
    line = json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n"
    try:
        parsed = next(read_links(io.BytesIO(line), path), None)
    except InputError as exc:
        raise InputError(path, None, f"'record' is not a sealed record: {exc.message}") from None
    if parsed is None or parsed.prev is None:
        raise InputError(path, None, "'record' is not a sealed record")
    return parsed.index, parsed.tool, parsed.prev, link_digest(parsed.prev, parsed.canonical_record)


# --- checking --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProofReport:
    """A proof checked against its checkpoint(s): their signatures, and what was found wrong."""

    proof: Proof
    checkpoint: Checkpoint
    signatures: SignatureCheck
    previous: Checkpoint | None
    previous_signatures: SignatureCheck | None
    findings: tuple[CheckpointFinding, ...]
    tool: str | None = None

    @property
    def trusted(self) -> bool:
        """Whether every checkpoint it needs has a valid known signature (and no failing one)."""
        return self.signatures.trusted and (self.previous_signatures is None or self.previous_signatures.trusted)

    @property
    def verified(self) -> bool:
        """Trusted, and nothing found: exit 0."""
        return self.trusted and not self.findings


def _tlog(checkpoint: Checkpoint) -> Checkpoint:
    if checkpoint.kind != TLOG:
        raise InputError(checkpoint.path, 1, "a hash-chain checkpoint: proofs are checked against a tlog-checkpoint "
                                             "(toolreplay seal --tlog)")
    return checkpoint


def verify_proof(proof: Proof, proof_path: str, checkpoint: Checkpoint, keys: Keys, *,
                 previous: Checkpoint | None = None, origin: str | None = None) -> ProofReport:
    """Check a proof against a signed tlog-checkpoint (a consistency proof: against `previous` too)."""
    _tlog(checkpoint)
    if isinstance(proof, ConsistencyProof) and previous is None:
        raise UsageError("a consistency proof is checked against two checkpoints: --previous OLD_CHECKPOINT")
    if isinstance(proof, InclusionProof) and previous is not None:
        raise UsageError("--previous goes with a consistency proof, this one is an inclusion proof")
    record = _parse_record(proof.record, proof_path) if isinstance(proof, InclusionProof) else None
    signatures = keys.check(checkpoint)
    findings = signature_findings(signatures, "the checkpoint")
    previous_signatures = None
    if previous is not None:
        previous_signatures = keys.check(_tlog(previous))
        findings += signature_findings(previous_signatures, "the previous checkpoint")
    report = ProofReport(proof, checkpoint, signatures, previous, previous_signatures, (),
                         record[1] if record else None)
    if not report.trusted:  # an untrusted checkpoint's text is not read
        return ProofReport(proof, checkpoint, signatures, previous, previous_signatures, tuple(findings), report.tool)
    if origin is not None and checkpoint.origin != origin:
        findings.append(CheckpointFinding(
            "origin-mismatch", f"the checkpoint is for origin '{checkpoint.origin}', expected '{origin}'"))
    if isinstance(proof, InclusionProof):
        assert record is not None
        findings += _inclusion_findings(proof, record, checkpoint)
    else:
        assert previous is not None
        findings += _consistency_findings(proof, checkpoint, previous)
    return ProofReport(proof, checkpoint, signatures, previous, previous_signatures, tuple(findings), report.tool)


def _inclusion_findings(proof: InclusionProof, record: tuple[int, str, str, str],
                        checkpoint: Checkpoint) -> list[CheckpointFinding]:
    index, _, _, digest = record
    findings = []
    if index != proof.index:
        findings.append(CheckpointFinding(
            "index-mismatch", f"the record has index {index}, the proof is for index {proof.index}"))
    if digest != proof.leaf:
        findings.append(CheckpointFinding("record-mismatch", "the record does not hash to the proof's leaf"))
    if proof.tree_size != checkpoint.size:
        findings.append(CheckpointFinding(
            "size-mismatch", f"the proof is for a tree of {proof.tree_size} links, the checkpoint commits to "
                             f"{checkpoint.size}"))
        return findings
    expected = len(inclusion_ranges(proof.index, proof.tree_size))
    if len(proof.hashes) != expected:
        findings.append(CheckpointFinding(
            "path-length", f"the proof has {len(proof.hashes)} hashes, an audit path for index {proof.index} in a "
                           f"tree of {proof.tree_size} has {expected}"))
    elif not verify_inclusion(proof.index, proof.tree_size, leaf_hash(bytes.fromhex(digest)),
                              [bytes.fromhex(h) for h in proof.hashes], bytes.fromhex(checkpoint.head)):
        findings.append(CheckpointFinding("root-mismatch", "the audit path does not lead to the checkpoint's root"))
    return findings


def _consistency_findings(proof: ConsistencyProof, checkpoint: Checkpoint,
                          previous: Checkpoint) -> list[CheckpointFinding]:
    findings = []
    if previous.origin != checkpoint.origin:
        findings.append(CheckpointFinding(
            "origin-mismatch", f"the checkpoint is for origin '{checkpoint.origin}', the previous one for "
                               f"'{previous.origin}'"))
    for name, stated, committed, label in (("new_size", proof.new_size, checkpoint.size, "the checkpoint"),
                                           ("old_size", proof.old_size, previous.size, "the previous checkpoint")):
        if stated != committed:
            findings.append(CheckpointFinding(
                "size-mismatch", f"the proof's {name} is {stated}, {label} commits to {committed} links"))
    if findings:
        return findings
    expected = len(consistency_ranges(proof.old_size, proof.new_size))
    if len(proof.hashes) != expected:
        findings.append(CheckpointFinding(
            "path-length", f"the proof has {len(proof.hashes)} hashes, a consistency proof from {proof.old_size} "
                           f"to {proof.new_size} has {expected}"))
    elif not verify_consistency(proof.old_size, proof.new_size, [bytes.fromhex(h) for h in proof.hashes],
                                bytes.fromhex(previous.head), bytes.fromhex(checkpoint.head)):
        findings.append(CheckpointFinding(
            "not-consistent", "the proof does not show the checkpoint extends the previous one"))
    return findings


# --- rendering -------------------------------------------------------------------------------------------


def _kind(report: ProofReport) -> str:
    return INCLUSION if isinstance(report.proof, InclusionProof) else CONSISTENCY


def _proven(report: ProofReport) -> str:
    proof, signers = report.proof, ", ".join(report.signatures.valid)
    if isinstance(proof, InclusionProof):
        return (f"the record at index {proof.index} (tool {report.tool}) is link {proof.index} of the "
                f"{proof.tree_size} links {signers} signed")
    return (f"the {proof.new_size} links signed by {signers} begin with the {proof.old_size} links the previous "
            "checkpoint signed, unchanged (append-only)")


def proof_text(report: ProofReport) -> str:
    """`verify --proof` as text: the verdict, who signed, the origin, what is proven or each finding."""
    lines = [f"{_kind(report)} proof: {'verified' if report.verified else 'failed'}\n"]
    for label, check in (("signed by", report.signatures), ("previous signed by", report.previous_signatures)):
        if check is not None and check.valid:
            lines.append(f"{label}: {', '.join(check.valid)}\n")
        for name in check.unknown if check is not None else ():
            lines.append(f"ignored signature: {name} (unknown key)\n")
    if report.trusted:
        lines.append(f"origin: {report.checkpoint.origin}\n")
    if report.verified:
        lines.append(f"proven: {_proven(report)}\n")
    lines += [f"{finding.kind}: {finding.message}\n" for finding in report.findings]
    return "".join(escape_text(line[:-1]) + "\n" for line in lines)


def proof_report_json(report: ProofReport) -> str:
    """The same facts as `proof_text`, as one JSON document."""
    proof = report.proof
    document: dict[str, Any] = {"command": "verify", "proof": _kind(report),
                                "status": "verified" if report.verified else "failed",
                                "signed_by": list(report.signatures.valid),
                                "ignored_signatures": list(report.signatures.unknown)}
    if report.previous_signatures is not None:
        document["previous_signed_by"] = list(report.previous_signatures.valid)
    document["origin"] = report.checkpoint.origin if report.trusted else None
    if isinstance(proof, InclusionProof):
        document.update(index=proof.index, tree_size=proof.tree_size, tool=report.tool)
    else:
        document.update(old_size=proof.old_size, new_size=proof.new_size)
    document["findings"] = [{"kind": f.kind, "message": f.message} for f in report.findings]
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# --- sealed reports --------------------------------------------------------------------------------------


def report_root(data: bytes) -> str:
    """The Merkle root (hex) of a report sealed whole: a tree of one leaf, the report's SHA-256."""
    return leaf_hash(hashlib.sha256(data).digest()).hex()


@dataclass(frozen=True)
class ReportCheck:
    """A report checked against the tlog-checkpoint that sealed it: its signatures, its SHA-256, the findings."""

    checkpoint: Checkpoint
    signatures: SignatureCheck
    sha256: str
    findings: tuple[CheckpointFinding, ...]

    @property
    def verified(self) -> bool:
        """Signed by a trusted key, and the report is the one signed."""
        return self.signatures.trusted and not self.findings


def verify_report(data: bytes, checkpoint: Checkpoint, keys: Keys, *, origin: str | None = None) -> ReportCheck:
    """Check a report file's bytes against the checkpoint `seal --report` wrote for it."""
    _tlog(checkpoint)
    signatures = keys.check(checkpoint)
    findings = signature_findings(signatures, "the checkpoint")
    digest = hashlib.sha256(data).hexdigest()
    if signatures.trusted:
        if origin is not None and checkpoint.origin != origin:
            findings.append(CheckpointFinding(
                "origin-mismatch", f"the checkpoint is for origin '{checkpoint.origin}', expected '{origin}'"))
        if checkpoint.size != 1:
            findings.append(CheckpointFinding(
                "size-mismatch", f"the checkpoint commits to {checkpoint.size} links, a sealed report is 1"))
        elif checkpoint.head != report_root(data):
            findings.append(CheckpointFinding("report-mismatch", "the report is not the one the checkpoint signed"))
    return ReportCheck(checkpoint, signatures, digest, tuple(findings))


def report_text(check: ReportCheck, path: str) -> str:
    """`verify --report` as text."""
    lines = [f"report: {'verified' if check.verified else 'failed'}\n"]
    if check.signatures.valid:
        lines.append(f"signed by: {', '.join(check.signatures.valid)}\n")
    lines += [f"ignored signature: {name} (unknown key)\n" for name in check.signatures.unknown]
    if check.signatures.trusted:
        lines.append(f"origin: {check.checkpoint.origin}\n")
    if check.verified:
        lines.append(f"proven: {path} (sha256 {check.sha256}) is the report "
                     f"{', '.join(check.signatures.valid)} signed\n")
    lines += [f"{finding.kind}: {finding.message}\n" for finding in check.findings]
    return "".join(escape_text(line[:-1]) + "\n" for line in lines)


def report_json(check: ReportCheck, path: str) -> str:
    """The same facts as `report_text`, as one JSON document."""
    trusted = check.signatures.trusted
    document = {"command": "verify", "report": path, "status": "verified" if check.verified else "failed",
                "signed_by": list(check.signatures.valid), "ignored_signatures": list(check.signatures.unknown),
                "origin": check.checkpoint.origin if trusted else None, "sha256": check.sha256,
                "findings": [{"kind": f.kind, "message": f.message} for f in check.findings]}
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
