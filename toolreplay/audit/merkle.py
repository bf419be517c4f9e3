"""The Merkle tree of a sealed session (RFC 9162 §2.1): its root, inclusion and consistency proofs.

Leaf *i* is the 32 raw bytes of link *i*'s digest; a leaf hash is SHA-256(0x00 || digest), an inner
node SHA-256(0x01 || left || right), and the tree over *n* leaves splits at the largest power of two
below *n*. The root of no leaves is SHA-256 of nothing.

Everything here streams: `MerkleBuilder` keeps one hash per perfect subtree of the leaves added so far
(at most log2(n) + 1 of them), and the proofs are computed in one pass over the leaves, each hash of a
proof being the root of a range of leaves known before the pass starts.
"""

from __future__ import annotations

from binascii import unhexlify as _unhexlify
from collections.abc import Iterable, Iterator, Sequence

from toolreplay.audit.chain import GENESIS, _sha256, link_digest

__all__ = ["EMPTY_ROOT", "leaf_hash", "node_hash", "MerkleBuilder", "SessionTree", "merkle_root", "inclusion_ranges",
           "consistency_ranges", "range_roots", "verify_inclusion", "verify_consistency"]

EMPTY_ROOT: bytes = _sha256(b"").digest()


def leaf_hash(digest: bytes) -> bytes:
    """The hash of a leaf: SHA-256(0x00 || the link's 32-byte digest)."""
    value: bytes = _sha256(b"\x00" + digest).digest()
    return value


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an inner node: SHA-256(0x01 || left || right)."""
    value: bytes = _sha256(b"\x01" + left + right).digest()
    return value


class MerkleBuilder:
    """The root of a growing tree in O(log n) memory: `add` each leaf in order, then `root()`."""

    __slots__ = ("size", "_stack")

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[bytes] = []  # roots of perfect subtrees, largest first: the bits of `size`

    def add(self, digest: bytes) -> None:
        """The next leaf, from its link's 32-byte digest."""
        self.add_hash(_sha256(b"\x00" + digest).digest())

    def add_hash(self, hashed: bytes) -> None:
        """The next leaf, from its leaf hash (or the next subtree root, when it is aligned)."""
        stack = self._stack
        stack.append(hashed)
        self.size = size = self.size + 1
        while not size & 1:
            right = stack.pop()
            stack.append(_sha256(b"\x01" + stack.pop() + right).digest())
            size >>= 1

    def through_lines(self, lines: Iterable[bytes]) -> Iterator[bytes]:
        """Yield link lines unchanged, adding each one's digest (its last field) as a leaf: `add` inlined, as
        sealing with a tlog-checkpoint runs it once a link in the one process that chains them."""
        stack, push, pop, sha256, unhexlify = self._stack, self._stack.append, self._stack.pop, _sha256, _unhexlify
        size = self.size
        try:
            for line in lines:
                push(sha256(b"\x00" + unhexlify(line[-67:-3])).digest())
                size += 1
                bits = size
                while not bits & 1:
                    right = pop()
                    stack[-1] = sha256(b"\x01" + stack[-1] + right).digest()
                    bits >>= 1
                yield line
        finally:
            self.size = size

    def root(self) -> bytes:
        """The root of the leaves added so far (`EMPTY_ROOT` for none)."""
        stack = self._stack
        if not stack:
            return EMPTY_ROOT
        value = stack[-1]
        for left in reversed(stack[:-1]):
            value = node_hash(left, value)
        return value


class SessionTree(MerkleBuilder):
    """The tree of a session as `seal` makes it, from each record's canonical form in order: plain or sealed,
    the same records give the same root (a sealed file's links are hashed from their content, like
    `verify --checkpoint` does), so a report can cite the tree of what it read."""

    __slots__ = ("_prev",)

    def __init__(self) -> None:
        super().__init__()
        self._prev = GENESIS

    def add_record(self, canonical_record: bytes) -> None:
        """The next record, from its canonical bytes: chained after the one before, its digest a leaf."""
        self._prev = link_digest(self._prev, canonical_record)
        self.add(bytes.fromhex(self._prev))


def merkle_root(digests: Iterable[bytes]) -> bytes:
    """The root of the tree over these 32-byte digests."""
    builder = MerkleBuilder()
    for digest in digests:
        builder.add(digest)
    return builder.root()


def _split(size: int) -> int:
    """The largest power of two smaller than `size` (at least 2)."""
    return 1 << ((size - 1).bit_length() - 1)


Range = tuple[int, int]


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The leaf ranges whose roots make the audit path of leaf `index` in a tree of `size` (RFC 9162
    §2.1.3.1, PATH), in proof order: from the leaf's sibling up."""
    if not 0 <= index < size:
        raise ValueError(f"index {index} is not in a tree of {size}")
    ranges: list[Range] = []
    low, high = 0, size
    while high - low > 1:
        middle = low + _split(high - low)
        if index < middle:
            ranges.append((middle, high))
            high = middle
        else:
            ranges.append((low, middle))
            low = middle
    ranges.reverse()
    return ranges


def consistency_ranges(old_size: int, new_size: int) -> list[Range]:
    """The leaf ranges whose roots make the consistency proof from `old_size` to `new_size` (RFC 9162
    §2.1.4.1, SUBPROOF), in proof order. Empty when the sizes are equal."""
    if not 0 < old_size <= new_size:
        raise ValueError(f"no consistency proof from {old_size} to {new_size}")
    ranges: list[Range] = []
    low, high, m, whole = 0, new_size, old_size, True
    while m != high - low:
        split = _split(high - low)
        if m <= split:
            ranges.append((low + split, high))
            high = low + split
        else:
            ranges.append((low, low + split))
            low, m, whole = low + split, m - split, False
    if not whole:
        ranges.append((low, high))
    ranges.reverse()
    return ranges


def range_roots(digests: Iterable[bytes], ranges: Sequence[Range]) -> tuple[dict[Range, bytes], MerkleBuilder]:
    """One pass over the leaves: the root of each of `ranges` (disjoint), and a builder holding the root of
    all the leaves read. One range is built at a time, so memory stays O(log n)."""
    pending = sorted(ranges)
    roots: dict[Range, bytes] = {}
    whole = MerkleBuilder()
    part: MerkleBuilder | None = None
    position = 0
    current = pending[position] if pending else None
    for index, digest in enumerate(digests):
        hashed = _sha256(b"\x00" + digest).digest()
        whole.add_hash(hashed)
        if current is None or index < current[0]:
            continue
        if part is None:
            part = MerkleBuilder()
        part.add_hash(hashed)
        if index + 1 == current[1]:
            roots[current] = part.root()
            part = None
            position += 1
            current = pending[position] if position < len(pending) else None
    return roots, whole


def verify_inclusion(index: int, size: int, leaf: bytes, path: Sequence[bytes], root: bytes) -> bool:
    """Whether `path` leads from the leaf hash `leaf` at `index` to `root` of a tree of `size` (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < size:
        return False
    fn, sn, value = index, size - 1, leaf
    for sibling in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            value = node_hash(sibling, value)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            value = node_hash(value, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and value == root


def verify_consistency(old_size: int, new_size: int, proof: Sequence[bytes], old_root: bytes, new_root: bytes) -> bool:
    """Whether `proof` shows the tree of `new_size` with `new_root` extends the one of `old_size` with
    `old_root` (RFC 9162 §2.1.4.2). Equal sizes need an empty proof and equal roots."""
    if not 0 < old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old tree is a subtree, its root starts the path
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    first = second = path[0]
    for node in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            first = node_hash(node, first)
            second = node_hash(node, second)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            second = node_hash(second, node)
        fn >>= 1
        sn >>= 1
    return sn == 0 and first == old_root and second == new_root
