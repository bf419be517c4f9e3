"""Replay findings on the real corpus with and without --state-aware.

Run: `python benchmarks/state_aware_corpus.py [CORPUS_DIR]`.

For each domain (airline, retail, telecom; a folder's domain as in walk_corpus.py, folders of no
domain are left out), three runs over every session:

- default: `replay --mutators DOMAIN-mutators.txt` (each call against the first identical call);
- state-aware: `replay --state-aware --mutators DOMAIN-mutators.txt`;
- proposed: `replay --state-aware` with the mutators `toolreplay mutators` proposes from the domain's
  sessions, every candidate kept (no review) and no declared domain mutators.

Prints the findings per kind and run, the proposed mutators, and the first example of each new kind.
Exits 1 when state-aware reports more than half the default's non-determinism findings.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from walk_corpus import DEFAULT_CORPUS, DOMAINS, find_domain  # noqa: E402

from toolreplay.audit.mutators import MutatorEvidence, collect_evidence, propose_mutators  # noqa: E402
from toolreplay.audit.replay import (  # noqa: E402
    DEFAULT_MUTATORS,
    audit_call_facts,
    audit_state_facts,
    call_fact,
    state_fact,
)
from toolreplay.cli.audit import read_mutators_file  # noqa: E402
from toolreplay.format.chunks import read_facts  # noqa: E402

__all__ = ["measure", "main"]

RUNS = ("default", "state-aware", "proposed")


def _domain_sessions(corpus: str) -> dict[str, list[str]]:
    sessions: dict[str, list[str]] = {domain: [] for domain in DOMAINS}
    for folder in sorted(os.listdir(corpus)):
        if folder == "scopes" or not os.path.isdir(os.path.join(corpus, folder)):
            continue
        domain, _ = find_domain(corpus, folder)
        if domain is not None:
            sessions[domain] += [os.path.join(corpus, folder, name)
                                 for name in sorted(os.listdir(os.path.join(corpus, folder)))]
    return sessions


def measure(corpus: str) -> str:
    """The report for a corpus folder."""
    lines = []
    seconds = dict.fromkeys(RUNS, 0.0)
    totals: dict[str, Counter[str]] = {run: Counter() for run in RUNS}
    examples: dict[str, str] = {}
    for domain, sessions in _domain_sessions(corpus).items():
        declared = set(DEFAULT_MUTATORS) | set(read_mutators_file(os.path.join(corpus, "scopes",
                                                                               f"{domain}-mutators.txt")))
        evidence = MutatorEvidence()
        for path in sessions:
            collect_evidence(read_facts(path, state_fact, jobs=1), evidence)
        proposed = {c.tool for c in propose_mutators(evidence, DEFAULT_MUTATORS)} | set(DEFAULT_MUTATORS)
        counts: dict[str, Counter[str]] = {run: Counter() for run in RUNS}
        for path in sessions:
            reports = {}
            for run, extract, audit, mutators in (("default", call_fact, audit_call_facts, declared),
                                                  ("state-aware", state_fact, audit_state_facts, declared),
                                                  ("proposed", state_fact, audit_state_facts, proposed)):
                start = time.perf_counter()
                reports[run] = audit(read_facts(path, extract, jobs=1), mutators)  # type: ignore[operator]
                seconds[run] += time.perf_counter() - start
            for run, report in reports.items():
                counts[run].update(f.kind for f in report.findings)
                if run == "state-aware":
                    for f in report.findings:
                        if f.kind not in examples and f.kind in ("changed-after-write", "retry-after-error"):
                            examples[f.kind] = f"{os.path.relpath(path, corpus)}: index {f.index}: {f.message}"
        lines.append(f"{domain}: {len(sessions)} sessions; proposed mutators: {len(proposed - set(DEFAULT_MUTATORS))} "
                     f"({len(proposed & declared - set(DEFAULT_MUTATORS))} of the "
                     f"{len(declared - set(DEFAULT_MUTATORS))} declared)")
        for run in RUNS:
            lines.append(f"  {run}: " + ", ".join(f"{kind} {count}" for kind, count in sorted(counts[run].items())))
            totals[run].update(counts[run])
    lines.append("all domains:")
    for run in RUNS:
        lines.append(f"  {run}: " + ", ".join(f"{kind} {count}" for kind, count in sorted(totals[run].items())))
    lines += [f"example {kind}: {text}" for kind, text in sorted(examples.items())]
    lines.append(f"time: default {seconds['default']:.2f} s, state-aware {seconds['state-aware']:.2f} s "
                 f"({seconds['state-aware'] / max(seconds['default'], 1e-9):.2f}x the default)")
    ratio = totals["state-aware"]["non-determinism"] / max(totals["default"]["non-determinism"], 1)
    lines.append(f"state-aware non-determinism / default: {ratio:.2f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the measurement; exit 1 when state-aware keeps more than half the non-determinism."""
    args = list(sys.argv[1:] if argv is None else argv)
    corpus = args[0] if args else os.path.join(ROOT, DEFAULT_CORPUS)
    if not os.path.isdir(corpus):
        sys.stderr.write(f"error: {corpus}: no such corpus folder\n")
        return 2
    report = measure(corpus)
    sys.stdout.write(report)
    return 0 if float(report.rsplit(": ", 1)[1]) <= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
