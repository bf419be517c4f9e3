"""Backtest a rules policy over one domain of the real corpus: how many sessions break which rule.

    python benchmarks/backtest_policy.py [POLICY] [DOMAIN] [CORPUS_DIR]
    # defaults: samples/airline-policy.json airline ../shared/corpus/real

Runs `scope SESSION POLICY` in-process on every session of the domain (found as `walk_corpus.py`
finds it) and prints a Markdown table: per rule (and for permission-overreach), the sessions with at
least one finding and the findings. Exit 2 when the corpus folder is missing.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from walk_corpus import DEFAULT_CORPUS, find_domain  # noqa: E402

from toolreplay.cli import main as toolreplay_main  # noqa: E402
from toolreplay.cli._io import IO  # noqa: E402
from toolreplay.policy.model import load_policy  # noqa: E402

__all__ = ["Backtest", "backtest", "format_table", "main"]

_FINDING = re.compile(r"^index \d+: (?:policy-violation: .*? by rule ([\w.-]+): |(permission-overreach): )",
                      re.MULTILINE)


@dataclass
class Backtest:
    """Sessions and calls scanned, sessions with no finding, and per rule: sessions hit and findings."""

    sessions: int = 0
    calls: int = 0
    clean: int = 0
    sessions_by_rule: Counter[str] = field(default_factory=Counter)
    findings_by_rule: Counter[str] = field(default_factory=Counter)
    unchecked: list[str] = field(default_factory=list)


def backtest(policy: str, domain: str, corpus: str) -> Backtest:
    """Run scope with the policy over every session of the domain, in folder and file name order."""
    result = Backtest(unchecked=[rule.id for rule in load_policy(policy).rules if rule.has_rate])
    for folder in sorted(os.listdir(corpus)):
        path = os.path.join(corpus, folder)
        if folder == "scopes" or not os.path.isdir(path) or find_domain(corpus, folder)[0] != domain:
            continue
        for name in sorted(os.listdir(path)):
            io = IO.memory()
            code = toolreplay_main(["scope", os.path.join(path, name), policy], io)
            if code == 2:
                raise SystemExit(f"scope failed on {folder}/{name}: {io.err()}")
            out = io.out()
            result.sessions += 1
            result.calls += int(out.split("\n", 1)[0].split()[1])
            hits = [m.group(1) or m.group(2) for m in _FINDING.finditer(out)]
            result.findings_by_rule.update(hits)
            result.sessions_by_rule.update(set(hits))
            result.clean += not hits
    return result


def format_table(result: Backtest, policy: str) -> str:
    """The Markdown table for the docs, rules in policy order, then permission-overreach."""
    names = [rule.id for rule in load_policy(policy).rules] + ["permission-overreach"]
    lines = [f"{result.sessions} sessions, {result.calls} calls; {result.clean} sessions with no finding\n\n",
             "| rule | sessions | findings |\n", "|---|---:|---:|\n"]
    for name in names:
        if name in result.unchecked:
            lines.append(f"| `{name}` | not checked (rate) | - |\n")
        else:
            lines.append(f"| `{name}` | {result.sessions_by_rule[name]} | {result.findings_by_rule[name]} |\n")
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 2 when the corpus is missing."""
    args = sys.argv[1:] if argv is None else argv
    policy = args[0] if len(args) > 0 else os.path.join(ROOT, "samples", "airline-policy.json")
    domain = args[1] if len(args) > 1 else "airline"
    corpus = args[2] if len(args) > 2 else os.path.join(ROOT, DEFAULT_CORPUS)
    if not os.path.isdir(corpus):
        sys.stderr.write(f"no corpus at {corpus}\n")
        return 2
    sys.stdout.write(format_table(backtest(policy, domain, corpus), policy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
