"""Every real session of ../shared/corpus/real: replay (with and without the domain's mutators),
seal | verify.

The bulk goes through the same library calls the commands make (building the argument parser costs more
than auditing a small session); one session per folder also goes through `main`, exit codes included.
"""

from __future__ import annotations

import io
import json
import os
import unittest

from toolreplay.audit.chain import seal_records, verify_chain
from toolreplay.audit.render import chain_text
from toolreplay.audit.replay import DEFAULT_MUTATORS, ReplayReport, audit_replay
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.cli.audit import read_mutators_file
from toolreplay.format.records import read_links, read_session

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL = os.path.join(ROOT, "..", "shared", "corpus", "real")
DOMAINS = ("airline", "retail", "telecom")


def run(*argv: str, stdin: bytes = b"") -> tuple[int, str, str]:
    io = IO.memory(stdin)
    code = main(list(argv), io)
    return code, io.out(), io.err()


def _mutators_file(folder: str) -> str | None:
    """The domain's mutators file, from the folder name; None when the name holds no known domain."""
    domains = [domain for domain in DOMAINS if domain in folder]
    if len(domains) != 1:
        return None
    path = os.path.join(REAL, "scopes", f"{domains[0]}-mutators.txt")
    return path if os.path.isfile(path) else None


def _sessions() -> list[tuple[str, str | None]]:
    found = []
    for folder in sorted(os.listdir(REAL)):
        directory = os.path.join(REAL, folder)
        if folder == "scopes" or not os.path.isdir(directory):
            continue
        mutators = _mutators_file(folder)
        found += [
            (os.path.join(directory, name), mutators)
            for name in sorted(os.listdir(directory))
            if name.endswith(".jsonl")
        ]
    return found


def _replay(path: str, mutators: frozenset[str]) -> ReplayReport:
    with open(path, "rb") as handle:
        return audit_replay(read_session(handle, path), mutators)


def _facts(report: ReplayReport, kind: str) -> list[tuple[int, str, int | None]]:
    return [(f.index, f.tool, f.related_index) for f in report.findings if f.kind == kind]


@unittest.skipUnless(os.path.isdir(REAL), "../shared corpus not present")
class RealCorpusTest(unittest.TestCase):
    def test_domain_detection(self) -> None:
        self.assertEqual(
            _mutators_file("tau1_gpt4o_airline"), os.path.join(REAL, "scopes", "airline-mutators.txt")
        )
        self.assertEqual(
            _mutators_file("tau2_gpt-4.1_retail_defautl_gpt-4.1_1trials"),
            os.path.join(REAL, "scopes", "retail-mutators.txt"),
        )
        self.assertIsNone(_mutators_file("tau2_adaptive_agent_medical_triage_opus46_cascata"))

    def test_replay_every_session(self) -> None:
        sessions = _sessions()
        self.assertGreaterEqual(len(sessions), 1000)
        domain_sets = {
            path: DEFAULT_MUTATORS | frozenset(read_mutators_file(path))
            for path in {mutators for _, mutators in sessions if mutators}
        }
        self.assertEqual(len(domain_sets), 3)
        for path, mutators in sessions:
            with self.subTest(os.path.relpath(path, REAL)):
                plain = _replay(path, DEFAULT_MUTATORS)
                with open(path, "rb") as handle:
                    self.assertEqual(plain.calls, sum(1 for line in handle if line.strip()))
                if mutators is None:
                    continue
                domain = _replay(path, domain_sets[mutators])
                # more mutators can only excuse repeats; what a call returned is unchanged
                self.assertEqual(_facts(domain, "non-determinism"), _facts(plain, "non-determinism"))
                self.assertEqual(domain.divergence, plain.divergence)
                self.assertLessEqual(
                    set(_facts(domain, "redundant-call")), set(_facts(plain, "redundant-call"))
                )

    def test_seal_verify_every_session(self) -> None:
        for path, _ in _sessions():
            with self.subTest(os.path.relpath(path, REAL)):
                with open(path, "rb") as handle:
                    sealed = b"".join(seal_records(read_session(handle, path)))
                # a conversation without tool calls seals to nothing, and verify says so
                self.assertEqual(
                    chain_text(verify_chain(read_links(io.BytesIO(sealed), "sealed"))),
                    "chain: intact\n" if sealed else "chain: empty (0 links)\n",
                )

    def test_commands_on_one_session_per_folder(self) -> None:
        seen: set[str] = set()
        for path, mutators in _sessions():
            folder = os.path.dirname(path)
            if folder in seen:
                continue
            seen.add(folder)
            with self.subTest(os.path.relpath(path, REAL)):
                for extra in ([], ["--mutators", mutators] if mutators else []):
                    code, out, err = run("replay", path, *extra, "--format", "json")
                    self.assertEqual(err, "")
                    self.assertEqual(code, 1 if json.loads(out)["findings"] else 0)
                code, sealed, err = run("seal", path)
                self.assertEqual((code, err), (0, ""))
                self.assertEqual(run("verify", "-", stdin=sealed.encode()),
                                 (0, "chain: intact\n" if sealed else "chain: empty (0 links)\n", ""))
                self.assertEqual(run("replay", "-", stdin=sealed.encode())[1], run("replay", path)[1])
        self.assertGreaterEqual(len(seen), 20)


if __name__ == "__main__":
    unittest.main()
