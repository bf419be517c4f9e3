"""Run the audit over every real session: `python benchmarks/walk_corpus.py [CORPUS_DIR]`.

For each session in ../shared/corpus/real/ (one folder per source run): `replay` with the default
mutators, `replay --mutators` with the domain's write tools (scopes/DOMAIN-mutators.txt), and
`seal | verify`, all in-process through `toolreplay.cli.main`. The domain comes from the folder name
(airline, retail, telecom); a folder whose name names none gets the domain whose tools cover most of
the tools its sessions call, or none when no domain covers any. Prints a summary and exits 1 if any
replay exited 2 or any chain was not intact (issue 2, "Done when").
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

from toolreplay.cli import main as toolreplay_main  # noqa: E402
from toolreplay.cli._io import IO  # noqa: E402

__all__ = ["DOMAINS", "Summary", "walk", "main"]

DOMAINS = ("airline", "retail", "telecom")
DEFAULT_CORPUS = os.path.join("..", "shared", "corpus", "real")
_FINDING = re.compile(r"index \d+: ([a-z-]+): ", re.MULTILINE)


@dataclass
class Summary:
    """What the walk saw: counts, exit codes, findings per kind, chains, and what went wrong."""

    sessions: int = 0
    calls: int = 0
    exits: dict[str, Counter[int]] = field(
        default_factory=lambda: {"default": Counter(), "domain": Counter()})
    findings: dict[str, Counter[str]] = field(
        default_factory=lambda: {"default": Counter(), "domain": Counter()})
    intact: int = 0
    domains: dict[str, list[str]] = field(default_factory=dict)  # folder -> [domain, how it was found]
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No replay exited 2 and every chain was intact."""
        return not self.failures and self.intact == self.sessions


def _run(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin)
    code = toolreplay_main(argv, io)
    return code, io.out(), io.err()


def _session_tools(folder: str) -> set[str]:
    tools: set[str] = set()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as handle:
            tools.update(m.decode() for m in re.findall(rb'"tool": *"([^"]+)"', handle.read()))
    return tools


def _domain_tools(corpus: str, domain: str) -> set[str]:
    import json

    with open(os.path.join(corpus, "scopes", f"{domain}-agent.json"), encoding="utf-8") as handle:
        tools = set(json.load(handle)["allowed_tools"])
    with open(os.path.join(corpus, "scopes", f"{domain}-mutators.txt"), encoding="utf-8") as handle:
        tools.update(line.split("#")[0].strip() for line in handle if line.split("#")[0].strip())
    return tools


def find_domain(corpus: str, folder: str) -> tuple[str | None, str]:
    """The folder's domain and how it was found: by its name, by its tools, or none."""
    named = [domain for domain in DOMAINS if domain in folder]
    if len(named) == 1:
        return named[0], "name"
    used = _session_tools(os.path.join(corpus, folder))
    cover = sorted(((len(used & _domain_tools(corpus, d)), d) for d in DOMAINS), reverse=True)
    if cover[0][0] == 0:
        return None, "none"
    return cover[0][1], "tools"


def _audit_session(path: str, mutators: str | None, summary: Summary) -> None:
    runs = [("default", ["replay", path])]
    if mutators is not None:
        runs.append(("domain", ["replay", path, "--mutators", mutators]))
    for label, argv in runs:
        code, out, err = _run(argv)
        summary.exits[label][code] += 1
        summary.findings[label].update(_FINDING.findall(out))
        if code not in (0, 1):
            summary.failures.append(f"{path}: replay ({label} mutators) exit {code}: {err.strip()}")
        if label == "default" and out.startswith("calls: "):
            summary.calls += int(out.split("\n", 1)[0].split()[1])
    if mutators is None:  # no domain: the domain run is the default run
        summary.exits["domain"][code] += 1
        summary.findings["domain"].update(_FINDING.findall(out))
    code, sealed, err = _run(["seal", path])
    if code != 0:
        summary.failures.append(f"{path}: seal exit {code}: {err.strip()}")
        return
    code, out, err = _run(["verify", "-"], sealed.encode("utf-8"))
    if code == 0 and out == "chain: intact\n":
        summary.intact += 1
    else:
        summary.failures.append(f"{path}: verify exit {code}: {(out + err).strip()}")


def walk(corpus: str) -> Summary:
    """Audit every session under `corpus` (one folder per run, plus scopes/)."""
    summary = Summary()
    for folder in sorted(os.listdir(corpus)):
        if folder == "scopes" or not os.path.isdir(os.path.join(corpus, folder)):
            continue
        domain, how = find_domain(corpus, folder)
        summary.domains[folder] = [domain or "none", how]
        mutators = None if domain is None else os.path.join(corpus, "scopes", f"{domain}-mutators.txt")
        for name in sorted(os.listdir(os.path.join(corpus, folder))):
            summary.sessions += 1
            _audit_session(os.path.join(corpus, folder, name), mutators, summary)
    return summary


def _counts(counter: Counter[str] | Counter[int]) -> str:
    return ", ".join(f"{key}: {count}" for key, count in sorted(counter.items())) or "none"


def format_summary(corpus: str, summary: Summary) -> str:
    """The report: counts, exit codes, findings per kind with and without mutators, chains, failures."""
    by_domain: Counter[str] = Counter(domain for domain, _ in summary.domains.values())
    lines = [f"corpus: {corpus} ({len(summary.domains)} folders)",
             f"sessions: {summary.sessions}", f"calls: {summary.calls}",
             "domains: " + ", ".join(f"{d} {by_domain[d]}" for d in sorted(by_domain))]
    shown = {"tools": "from the tools it calls", "none": "calls no domain's tools: default mutators only"}
    lines += [f"  {folder}: {domain} ({shown[how]})" for folder, (domain, how) in summary.domains.items()
              if how != "name"]
    lines += [f"replay exit codes, default mutators: {_counts(summary.exits['default'])}",
              f"replay exit codes, domain mutators: {_counts(summary.exits['domain'])}",
              f"findings, default mutators: {_counts(summary.findings['default'])}",
              f"findings, domain mutators: {_counts(summary.findings['domain'])}",
              f"chains intact: {summary.intact}/{summary.sessions}",
              f"failures: {len(summary.failures)}"]
    lines += [f"  {failure}" for failure in summary.failures[:20]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Walk the corpus, print the summary; exit 1 on any replay exit 2 or broken chain, 2 without a corpus."""
    args = list(sys.argv[1:] if argv is None else argv)
    corpus = args[0] if args else DEFAULT_CORPUS
    directory = corpus if os.path.isabs(corpus) or args else os.path.join(ROOT, corpus)
    if not os.path.isdir(directory):
        sys.stderr.write(f"error: {corpus}: no such corpus folder\n")
        return 2
    summary = walk(directory)
    sys.stdout.write(format_summary(corpus, summary).replace(directory + os.sep, ""))
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
