"""The hash chain (docs/format.md): seal a session into links, verify a sealed file.

Both are checks of the one shape (`toolreplay.audit.checks.Check`): `seal_check` keeps the canonical
parts of each record (`seal_fact`) and chains them in order (`seal_facts`); `verify_check` keeps each
link's canonical record and stated digests (`link_fact`) and walks them in order (`verify_link_facts`;
`ChainWalker` is the same walk a link at a time, for the fleet audit's one pass).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any

from toolreplay.audit.checks import Check
from toolreplay.format.records import GENESIS, PLAIN_FACTS, LinkFact, PlainParts, Record, link_fact

if TYPE_CHECKING:
    from toolreplay.audit.merkle import MerkleBuilder


def _builtin_sha256() -> Callable[..., Any]:
    """The interpreter's own SHA-256 (`_sha2` from Python 3.12, `_sha256` before), which hashlib falls back
    to: the same digests, and it loads in a tenth of the time OpenSSL's does, which a hook process (one a
    tool call) pays on every call; hashlib's where neither module is built."""
    for name in ("_sha2", "_sha256"):
        try:
            found: Callable[..., Any] = importlib.import_module(name).sha256
            return found
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256


_sha256 = _builtin_sha256()


def _openssl_sha256() -> Callable[..., Any]:
    """hashlib's SHA-256 (OpenSSL): a third of the builtin's time a link (0.7 against 2 us for a 600-byte
    record), for the loops over a whole file, which pay its 2 ms import once."""
    import hashlib

    return hashlib.sha256

__all__ = ["GENESIS", "link_digest", "link_line", "format_link", "seal_records", "seal_facts", "seal_fact",
           "ChainReport", "verify_chain", "verify_link_facts", "link_fact", "LinkFact", "ChainWalk", "walk_link_facts",
           "line_digest", "ChainWalker", "seal_check", "verify_check"]


def link_digest(prev: str, canonical_record: bytes) -> str:
    """SHA-256 of the previous digest (64 ASCII hex characters) followed by the canonical record."""
    digest: str = _sha256(prev.encode("ascii") + canonical_record).hexdigest()
    return digest


def _link_bytes(index: int, tool: bytes, args: bytes, response: bytes, prev: str, digest: str,
                meta: bytes | None = None) -> bytes:
    middle = response if meta is None else response + b',"meta":' + meta
    return (b'{"index":' + str(index).encode() + b',"tool":' + tool + b',"args":' + args + b',"response":'
            + middle + b',"prev":"' + prev.encode("ascii") + b'","digest":"' + digest.encode("ascii") + b'"}\n')


def link_line(index: int, tool: bytes, args: bytes, response: bytes, prev: str,
              meta: bytes | None = None, sha256: Callable[..., Any] = _sha256) -> tuple[bytes, str]:
    """One link line (with its newline) from canonical parts (`meta`: None for a format-1.0 record),
    chained after `prev`; and its digest (`sha256`: the hash constructor to use). The bytes of
    `canonical_record_bytes` and `format_link`, made in one join each (a recorder writes one a call)."""
    join = b"".join
    before = prev.encode("ascii")
    number = b"%d" % index
    if meta is None:
        digest: str = sha256(join((before, b'{"args":', args, b',"index":', number, b',"response":', response,
                                   b',"tool":', tool, b"}"))).hexdigest()
        return join((b'{"index":', number, b',"tool":', tool, b',"args":', args, b',"response":', response,
                     b',"prev":"', before, b'","digest":"', digest.encode("ascii"), b'"}\n')), digest
    digest = sha256(join((before, b'{"args":', args, b',"index":', number, b',"meta":', meta, b',"response":',
                          response, b',"tool":', tool, b"}"))).hexdigest()
    return join((b'{"index":', number, b',"tool":', tool, b',"args":', args, b',"response":', response,
                 b',"meta":', meta, b',"prev":"', before, b'","digest":"', digest.encode("ascii"), b'"}\n')), digest


def format_link(record: Record, prev: str, digest: str) -> bytes:
    """One link line (with its newline): the record in canonical form, then prev and digest."""
    return _link_bytes(record.index, record.canonical_tool, record.canonical_args, record.canonical_response,
                       prev, digest, record.canonical_meta)


def line_digest(line: bytes) -> str:
    """The digest of a link line made by `link_line` or `format_link` (its last field)."""
    return line[-67:-3].decode("ascii")


SealFact = tuple[int, bytes, bytes, bytes, "bytes | None"]


def seal_fact(record: Record) -> SealFact:
    """What sealing needs of a record: its index and the canonical tool, args, response and meta."""
    return (record.index, record.canonical_tool, record.canonical_args, record.canonical_response,
            None if record.meta is None else record.canonical_meta)


def _plain_seal_fact(parts: PlainParts) -> SealFact:
    """`seal_fact` of a plain record from its parts as the fast reading has them (`iter_facts`)."""
    index, tool, _, _, _, args, response, meta = parts
    return (index, encode_basestring(tool).encode("utf-8"), args.encode("utf-8"), response.encode("utf-8"),
            None if meta is None else meta.encode("utf-8"))


PLAIN_FACTS[seal_fact] = _plain_seal_fact


def seal_records(records: Iterable[Record], prev: str = GENESIS) -> Iterator[bytes]:
    """Yield the link lines of a session, chained from `prev` (64 zeros for a new chain)."""
    return seal_check(prev).over(records)


def seal_check(prev: str = GENESIS) -> Check[SealFact, Iterator[bytes]]:
    """Sealing as a check: `seal_fact` per record, `seal_facts` chained from `prev` (its result is the link lines)."""
    return Check(seal_fact, partial(seal_facts, prev=prev), encodes=True)


def verify_check() -> Check[LinkFact, ChainReport]:
    """Verifying as a check over a sealed file's links: `link_fact` per link, `verify_link_facts` in order."""
    return Check(link_fact, verify_link_facts, links=True)


def seal_facts(facts: Iterable[SealFact], prev: str = GENESIS) -> Iterator[bytes]:
    """`seal_records` over facts already extracted from the records (see `seal_fact`).

    The bytes of `link_line`, made here in one join each for the record hashed and the line written (no
    intermediate byte strings, no call a link): this loop is most of `seal`'s own time."""
    sha256 = _openssl_sha256()
    join = b"".join
    before = prev.encode("ascii")
    for index, tool, args, response, meta in facts:
        number = b"%d" % index
        if meta is None:
            digest = sha256(join((before, b'{"args":', args, b',"index":', number, b',"response":', response,
                                  b',"tool":', tool, b"}"))).hexdigest().encode("ascii")
            yield join((b'{"index":', number, b',"tool":', tool, b',"args":', args, b',"response":', response,
                        b',"prev":"', before, b'","digest":"', digest, b'"}\n'))
        else:
            digest = sha256(join((before, b'{"args":', args, b',"index":', number, b',"meta":', meta,
                                  b',"response":', response, b',"tool":', tool, b"}"))).hexdigest().encode("ascii")
            yield join((b'{"index":', number, b',"tool":', tool, b',"args":', args, b',"response":', response,
                        b',"meta":', meta, b',"prev":"', before, b'","digest":"', digest, b'"}\n'))
        before = digest


@dataclass(frozen=True, slots=True)
class ChainReport:
    """The result of walking a sealed file: intact, or where it first breaks and how."""

    links: int
    broken_at: int | None = None
    field: str | None = None
    expected: str | None = None
    found: str | None = None

    @property
    def intact(self) -> bool:
        """Whether every link checked out."""
        return self.broken_at is None


def verify_chain(links: Iterable[Record]) -> ChainReport:
    """Walk the links in file order; report the first whose prev or digest does not check out."""
    return verify_check().over(links)


def verify_link_facts(facts: Iterable[LinkFact]) -> ChainReport:
    """`verify_chain` over facts already extracted from the links (see `link_fact`)."""
    prev = GENESIS
    count = 0
    sha256 = _openssl_sha256()
    for position, (canonical_record, stated_prev, stated_digest) in enumerate(facts):
        if stated_prev != prev:
            return ChainReport(position + 1, position, "prev", prev, stated_prev)
        digest: str = sha256(prev.encode("ascii") + canonical_record).hexdigest()
        if stated_digest != digest:
            return ChainReport(position + 1, position, "digest", digest, stated_digest)
        prev = digest
        count = position + 1
    return ChainReport(count)


@dataclass(frozen=True, slots=True)
class ChainWalk:
    """`verify_link_facts`'s report, read to the end: how many links the file has, and the heads asked for.

    `heads[size]` is the digest of the first `size` links as their content is now (each recomputed
    from the one before, whatever `prev` and `digest` state), so a checkpoint's head can be compared
    with the content even past a break. `heads[0]` is 64 zeros.
    """

    report: ChainReport
    links: int
    heads: dict[int, str]
    roots: dict[int, str] = field(default_factory=dict)


def walk_link_facts(facts: Iterable[LinkFact], sizes: Collection[int], roots: Collection[int] = ()) -> ChainWalk:
    """Walk every link: the first break as `verify_link_facts` reports it, the link count, the heads at `sizes`
    and the Merkle tree roots (`toolreplay.audit.merkle`, over the content's digests) at `roots`."""
    walker = ChainWalker(sizes, roots)
    for fact in facts:
        walker.add(fact)
    return walker.walk()


class ChainWalker:
    """`walk_link_facts` a link at a time, for a reader that does other checks in the same pass: `add` each
    link's fact in file order, then `walk()`."""

    def __init__(self, sizes: Collection[int], roots: Collection[int] = ()) -> None:
        self._sizes = sizes
        self._root_sizes = roots
        self._roots: dict[int, str] = {}
        self._tree: MerkleBuilder | None = None
        if roots:
            from toolreplay.audit.merkle import EMPTY_ROOT, MerkleBuilder  # only a tlog-checkpoint needs the tree

            self._tree = MerkleBuilder()
            if 0 in roots:
                self._roots[0] = EMPTY_ROOT.hex()
        self._report: ChainReport | None = None
        self._heads = {0: GENESIS} if 0 in sizes else {}
        self._content = self._prev = GENESIS
        self._count = 0
        self._sha256 = _openssl_sha256()

    def add(self, fact: LinkFact) -> None:
        """The next link: its content hashed onto the head, its prev and digest checked until the first break."""
        canonical_record, stated_prev, stated_digest = fact
        position = self._count
        content: str = self._sha256(self._content.encode("ascii") + canonical_record).hexdigest()
        self._content = content
        if self._report is None:
            if stated_prev != self._prev:
                self._report = ChainReport(position + 1, position, "prev", self._prev, stated_prev)
            elif stated_digest != content:
                self._report = ChainReport(position + 1, position, "digest", content, stated_digest)
            self._prev = content
        self._count = position + 1
        if self._count in self._sizes:
            self._heads[self._count] = content
        if self._tree is not None:
            self._tree.add(bytes.fromhex(content))
            if self._count in self._root_sizes:
                self._roots[self._count] = self._tree.root().hex()

    def walk(self) -> ChainWalk:
        """What `walk_link_facts` returns for the links added so far."""
        return ChainWalk(self._report or ChainReport(self._count), self._count, dict(self._heads), dict(self._roots))
