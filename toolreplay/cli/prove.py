"""`toolreplay prove`: an inclusion proof of one record, or a consistency proof between two tree sizes."""

from __future__ import annotations

import argparse
from typing import Any

from toolreplay.cli._io import IO
from toolreplay.errors import UsageError

__all__ = ["register"]


def _size(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, not {text!r}")
    return int(text)


def _run_prove(args: argparse.Namespace, io: IO) -> int:
    from toolreplay.audit.api import session_facts, session_file
    from toolreplay.audit.chain import link_fact
    from toolreplay.audit.proofs import Proof, count_lines, proof_json, prove_consistency, prove_inclusion

    if (args.consistency is None) == (args.index is None):
        raise UsageError("prove needs INDEX (an inclusion proof) or --consistency OLD_SIZE (a consistency proof), "
                         "not both")
    with session_file(args.sealed, io.stdin) as job:  # read twice: its links are counted first
        links = count_lines(job.path)
        facts = session_facts(job.path, link_fact, links=True, jobs=args.jobs, max_line=args.max_line_bytes)
        proof: Proof
        if args.index is not None:
            proof = prove_inclusion(facts, args.index, links, job.display, args.size)
        else:
            proof = prove_consistency(facts, args.consistency, links, job.display, args.size)
    text = proof_json(proof)
    if args.output:
        from toolreplay.format.output import write_atomically

        with write_atomically(args.output) as output:
            output.write(text.encode("utf-8"))
    else:
        io.stdout.write(text)
    return 0


def register(subparsers: Any) -> None:
    """Add `prove` to the command line."""
    from toolreplay.cli.audit import _jobs_option

    parser = subparsers.add_parser(
        "prove", help="write a Merkle proof: one record is in the log, or the log only grew",
        description="Write an inclusion proof of the record at INDEX (RFC 9162 audit path), or with --consistency "
                    "a proof that the tree of the whole file extends the tree of its first OLD_SIZE links. Check it "
                    "with `toolreplay verify --proof PROOF --checkpoint TLOG_CHECKPOINT` (seal --tlog), "
                    "without the session.")
    parser.add_argument("sealed", metavar="SEALED", help="sealed file; - for standard input")
    parser.add_argument("index", metavar="INDEX", nargs="?", type=_size, help="the index of the record to prove")
    parser.add_argument("--consistency", metavar="OLD_SIZE", type=_size,
                        help="prove the tree extends the tree of its first OLD_SIZE links")
    parser.add_argument("--size", metavar="N", type=_size,
                        help="the tree of the first N links (the size of the checkpoint to check against; "
                             "default: every link of the file)")
    parser.add_argument("-o", "--output", metavar="PROOF", help="write the proof to PROOF (atomically)")
    _jobs_option(parser)
    parser.set_defaults(run=_run_prove)
