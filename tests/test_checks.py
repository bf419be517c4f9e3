"""The one shape of a check (toolreplay.audit.checks): facts per record, then a pass over them in order."""

from __future__ import annotations

import io
import json
import os
import pickle
import tempfile
import unittest
from dataclasses import replace
from typing import Any

from tests.support import integration
from toolreplay.audit.api import check_session
from toolreplay.audit.chain import seal_check, seal_records, verify_chain, verify_check
from toolreplay.audit.checks import Check
from toolreplay.audit.mutators import MutatorEvidence, evidence_check
from toolreplay.audit.replay import audit_call_facts, audit_replay, call_fact, replay_check
from toolreplay.audit.scope import audit_scope, scope_check
from toolreplay.format.chunks import _fork_context, read_facts
from toolreplay.format.records import read_links, read_session
from toolreplay.policy.model import load_policy

SESSION = b"".join(
    json.dumps({"index": i, "tool": tool, "args": {"path": f"p{i % 3}", "amount": i},
                "response": {"text": f"r{i % 4}"} if tool != "refund" else {"ok": True}}).encode() + b"\n"
    for i, tool in enumerate(["read_file", "read_file", "refund", "read_file", "delete_file", "read_file",
                              "refund", "refund", "search", "read_file"] * 4))
POLICY = {"agent": "a", "allowed_tools": ["read_file", "refund", "delete_file"],
          "rules": [{"id": "big", "tools": ["refund"], "effect": "deny", "reason": "too much",
                     "when": [{"arg": "amount", "gt": 30}]},
                    {"id": "twice", "tools": ["refund"], "effect": "deny", "reason": "at most 3",
                     "unless": [{"count": "refund", "max": 3}]}]}


def _outcome(report: Any) -> Any:
    """A report as comparable values: its fields, its findings as a list."""
    if hasattr(report, "findings"):
        return replace(report, findings=()), list(report.findings)
    return report


class CheckShapeTest(unittest.TestCase):
    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = folder.name
        self.session = self.write("s.jsonl", SESSION)
        self.sealed = self.write("sealed.jsonl", b"".join(seal_records(read_session(io.BytesIO(SESSION), "s"))))
        with open(os.path.join(self.folder, "p.json"), "w") as handle:
            json.dump(POLICY, handle)
        self.policy = load_policy(os.path.join(self.folder, "p.json"))
        names = dict(POLICY)
        del names["rules"]
        with open(os.path.join(self.folder, "names.json"), "w") as handle:
            json.dump(names, handle)
        self.names = load_policy(os.path.join(self.folder, "names.json"))

    def write(self, name: str, data: bytes) -> str:
        path = os.path.join(self.folder, name)
        with open(path, "wb") as handle:
            handle.write(data)
        return path

    def checks(self) -> list[tuple[str, Check[Any, Any]]]:
        return [("replay", replay_check()), ("replay state-aware", replay_check(state_aware=True)),
                ("scope names", scope_check(self.names)), ("scope rules", scope_check(self.policy)),
                ("seal", seal_check()), ("verify", verify_check()), ("evidence", evidence_check(MutatorEvidence()))]

    def test_every_check_keeps_facts_that_pickle_by_reference(self) -> None:
        # the parallel reader's workers receive `facts` pickled; only a record goes in, only a fact comes out
        records = list(read_session(io.BytesIO(SESSION), "s"))
        for name, check in self.checks():
            with self.subTest(name):
                facts = pickle.loads(pickle.dumps(check.facts))
                self.assertEqual(facts(records[2]), check.facts(records[2]))

    def test_the_checks_give_what_the_functions_of_each_command_give(self) -> None:
        records = list(read_session(io.BytesIO(SESSION), "s"))
        self.assertEqual(_outcome(replay_check().over(records)), _outcome(audit_replay(records)))
        self.assertEqual(_outcome(replay_check(["refund"]).over(records)),
                         _outcome(audit_call_facts(map(call_fact, records), ["refund"])))
        self.assertEqual(_outcome(scope_check(self.policy).over(records)), _outcome(audit_scope(records, self.policy)))
        scope = scope_check(self.policy).over(records)
        self.assertEqual([(f.index, f.rule) for f in scope.findings if f.rule],
                         [(12, "twice"), (16, "twice"), (17, "twice"), (22, "twice"), (26, "twice"), (27, "twice"),
                          (32, "big"), (32, "twice"), (36, "big"), (36, "twice"), (37, "big"), (37, "twice")])
        self.assertEqual(list(seal_check().over(records)), list(seal_records(records)))
        links = list(read_links(io.BytesIO(b"".join(seal_records(records))), "l"))
        self.assertEqual(verify_check().over(links), verify_chain(links))
        self.assertTrue(verify_check().over(links).intact)

    def test_check_session_reads_a_file_and_runs_the_check(self) -> None:
        records = list(read_session(io.BytesIO(SESSION), "s"))
        for name, check in self.checks():
            with self.subTest(name):
                path = self.sealed if check.links else self.session
                read = check_session(path, check, jobs=1)
                with open(path, "rb") as handle:
                    expected = check.over(read_links(io.BytesIO(handle.read()), path) if check.links else records)
                if name == "seal":
                    read, expected = list(read), list(expected)
                self.assertEqual(_outcome(read), _outcome(expected))


@unittest.skipIf(_fork_context() is None, "the parallel reader needs fork (Linux)")
@integration
class CheckInBothReadersTest(unittest.TestCase):
    def test_every_check_gives_the_same_report_from_the_serial_and_the_parallel_reader(self) -> None:
        shape = CheckShapeTest("test_every_check_keeps_facts_that_pickle_by_reference")
        shape.setUp()
        self.addCleanup(shape.doCleanups)
        for name, check in shape.checks():
            with self.subTest(name):
                path = shape.sealed if check.links else shape.session
                outcomes = []
                for jobs in (1, 2):
                    report = check.run(read_facts(path, check.facts, links=check.links, jobs=jobs, chunk_bytes=300,
                                                  min_parallel_bytes=0))
                    outcomes.append(list(report) if name == "seal" else _outcome(report))
                self.assertEqual(outcomes[0], outcomes[1])


class CallFactTest(unittest.TestCase):
    """`call_fact`'s keys are those of the canonical bytes, whichever route made them (the C encoder, or the
    Python one for a line with an exotic float): identical calls and responses match across both."""

    LINES = (b'{"index":0,"tool":"read","args":{"p":1,"q":"\\u00e9\\ud83d\\ude00"},"response":{"t":"a","n":2.5}}\n'
             b'{"index":1,"tool":"read","args":{"q":"\\u00e9\\ud83d\\ude00","p":1},"response":{"n":2.5,"t":"a"},'
             b'"meta":{"x-big":1e300}}\n'
             b'{"index":2,"tool":"read","args":{"p":1.0,"q":"\\u00e9\\ud83d\\ude00"},"response":{"t":"a","n":2.50},'
             b'"meta":{"x-small":1e-7}}\n'
             b'{"index":3,"tool":"read","args":{"p":1,"q":"\\u00e9\\ud83d\\ude00"},"response":{"t":"b","n":2.5}}\n')

    def test_keys_are_those_of_the_canonical_bytes_on_both_routes(self) -> None:
        records = list(read_session(io.BytesIO(self.LINES), "s"))
        self.assertEqual([r.fast_canonical for r in records], [True, False, False, True])
        from hashlib import sha256
        for record in records:
            index, tool, key, response, outcome, mutates = call_fact(record)
            self.assertEqual(key, sha256(record.canonical_call).digest()[:15] + b"\x01")
            self.assertEqual(response, hash(record.canonical_response.decode()) & ((1 << 64) - 1))
        self.assertEqual(len({call_fact(r)[2] for r in records}), 1)
        self.assertEqual(len({call_fact(r)[3] for r in records}), 2)
        report = audit_replay(records)
        self.assertEqual([(f.index, f.kind, f.related_index) for f in report.findings],
                         [(1, "redundant-call", 0), (2, "redundant-call", 1), (3, "non-determinism", 0),
                          (3, "redundant-call", 2)])
