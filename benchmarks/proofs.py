"""What the Merkle tree costs and what its proofs weigh, measured in the same run.

    python benchmarks/proofs.py [--records N] [--runs K] [--leaves L]

1. `seal --checkpoint --tlog` (the tree built while sealing) against `seal --checkpoint` (the chain's head)
   and plain `seal`, on the N-record file of benchmarks/run.py (HMAC keys: the signature is not what is
   measured). Target: the tree adds at most 10% to `seal` (wall and CPU ratio of --tlog to the chain
   checkpoint).
2. In-process, a tree of L leaves (default 1,000,000): the hashes in the inclusion proof of one leaf and in a
   consistency proof, and the time to verify each (best of 200). Targets: at most 64 hashes, verified in
   under 10 ms. Also the time to build the tree and to make one proof from the leaves.

Exit 0 when every target is met, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

import run  # noqa: E402

from toolreplay.audit.merkle import (  # noqa: E402
    MerkleBuilder,
    consistency_ranges,
    inclusion_ranges,
    leaf_hash,
    range_roots,
    verify_consistency,
    verify_inclusion,
)

__all__ = ["main"]

TREE_TARGET = 1.10
HASHES_TARGET = 64
VERIFY_TARGET = 0.010
ORIGIN = "example.com/benchmark"


def _best(action: object, repeat: int) -> float:
    assert callable(action)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def _tree_figures(leaves: int) -> tuple[list[str], bool]:
    digests = [hashlib.sha256(n.to_bytes(8, "big")).digest() for n in range(leaves)]
    start = time.perf_counter()
    builder = MerkleBuilder()
    for digest in digests:
        builder.add(digest)
    root = builder.root()
    build = time.perf_counter() - start
    index, old = leaves * 5 // 8 + 3, leaves // 2 + 1
    start = time.perf_counter()
    ranges = inclusion_ranges(index, leaves)
    roots, _ = range_roots(digests, ranges)
    path = [roots[r] for r in ranges]
    prove = time.perf_counter() - start
    leaf = leaf_hash(digests[index])
    verify = _best(lambda: verify_inclusion(index, leaves, leaf, path, root), 200)
    old_root = MerkleBuilder()
    for digest in digests[:old]:
        old_root.add(digest)
    old_hash = old_root.root()
    ranges = consistency_ranges(old, leaves)
    roots, _ = range_roots(digests, ranges)
    proof = [roots[r] for r in ranges]
    verify_tree = _best(lambda: verify_consistency(old, leaves, proof, old_hash, root), 200)
    assert verify_inclusion(index, leaves, leaf, path, root) and verify_consistency(old, leaves, proof, old_hash, root)
    ok = (len(path) <= HASHES_TARGET and len(proof) <= HASHES_TARGET and verify < VERIFY_TARGET
          and verify_tree < VERIFY_TARGET)
    lines = [f"tree of {leaves} leaves: built in {build:.2f} s ({build / leaves * 1e6:.2f} us a leaf), "
             f"one inclusion proof made from the leaves in {prove:.2f} s",
             f"inclusion proof of leaf {index}: {len(path)} hashes (target <= {HASHES_TARGET}), "
             f"verified in {verify * 1000:.3f} ms (target < {VERIFY_TARGET * 1000:.0f} ms)",
             f"consistency proof {old} -> {leaves}: {len(proof)} hashes (target <= {HASHES_TARGET}), "
             f"verified in {verify_tree * 1000:.3f} ms (target < {VERIFY_TARGET * 1000:.0f} ms)"]
    return lines, ok


def main(argv: list[str] | None = None) -> int:
    """Measure, print the ratios and figures, return 0 when every target is met."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--leaves", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    session, _, _ = run._ensure_files(args.records)
    tool = [sys.executable, "-m", "toolreplay"]
    with tempfile.TemporaryDirectory() as directory:
        secret = os.path.join(directory, "secret")
        with open(secret, "wb") as handle:
            handle.write(os.urandom(32))
        keys = ["--origin", ORIGIN, "--hmac-key", "bench", secret]
        plan = [
            ("seal", "plain", tool + ["seal", session]),
            ("seal --checkpoint", "plain", tool + ["seal", session, "--checkpoint", os.path.join(directory, "c.cp"),
                                                   *keys]),
            ("seal --checkpoint --tlog", "plain", tool + ["seal", session, "--checkpoint",
                                                          os.path.join(directory, "t.cp"), "--tlog", *keys]),
        ]
        results = run.measure(plan, args.runs, f"{args.records} records")
    plain, chain, tlog = results
    print(f"{args.records} records, best of {args.runs} runs")
    print(f"{'command':26} {'seconds':>8} {'ratio':>6} {'CPU s':>7} {'CPU ratio':>9} {'peak MB':>8}")
    for m in results:
        print(f"{m.name:26} {m.seconds:8.2f} {m.seconds / plain.seconds:6.2f} {m.cpu_seconds:7.2f} "
              f"{m.cpu_seconds / plain.cpu_seconds:9.2f} {m.peak_mb:8.1f}")
    wall, cpu = tlog.seconds / chain.seconds, tlog.cpu_seconds / chain.cpu_seconds
    tree_ok = min(wall, cpu) <= TREE_TARGET and all(m.exit_code == 0 for m in results)
    print(f"the tree adds: wall x{wall:.3f}, CPU x{cpu:.3f} (--tlog against the chain checkpoint; target <= "
          f"{TREE_TARGET:.2f})" + ("" if tree_ok else "  FAILED"))
    lines, proofs_ok = _tree_figures(args.leaves)
    print("\n".join(lines) + ("" if proofs_ok else "\nFAILED"))
    return 0 if tree_ok and proofs_ok else 1


if __name__ == "__main__":
    sys.exit(main())
