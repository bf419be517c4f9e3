"""`replay --state-aware`: each call against its most recent identical call, in a model of state."""

from __future__ import annotations

import io
import os
import unittest
from typing import Any

from toolreplay.audit.render import replay_json, replay_text
from toolreplay.audit.replay import (
    DEFAULT_MUTATORS,
    ReplayReport,
    audit_replay,
    audit_state_facts,
    is_error_response,
    state_fact,
)
from toolreplay.cli import main
from toolreplay.cli._io import IO
from toolreplay.format.records import format_record, read_session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Call = tuple[str, dict[str, Any], dict[str, Any]]


def _session(*calls: Call) -> bytes:
    return "".join(format_record(i, tool, args, response) + "\n"
                   for i, (tool, args, response) in enumerate(calls)).encode()


def _state(*calls: Call, mutators: Any = DEFAULT_MUTATORS) -> ReplayReport:
    return audit_state_facts(map(state_fact, read_session(io.BytesIO(_session(*calls)), "s")), mutators)


def _facts(report: ReplayReport) -> list[tuple[int, str, int | None]]:
    return [(f.index, f.kind, f.related_index) for f in report.findings]


def read(text: str) -> Call:
    return ("search", {"q": "x"}, {"text": text})


WRITE: Call = ("write_file", {"path": "a"}, {"ok": True})
OTHER_WRITE: Call = ("write_file", {"path": "b"}, {"ok": True})


class StateAwareTest(unittest.TestCase):
    def test_a_write_between_two_reads(self) -> None:
        report = _state(read("A"), WRITE, read("B"))
        self.assertEqual(_facts(report), [(2, "changed-after-write", 1)])
        self.assertEqual((report.divergence, report.information), (None, 1))
        self.assertEqual(report.findings[0].message, "tool 'search' returned a different response than the "
                                                     "identical call at index 0 after the state-changing call at "
                                                     "index 1")

    def test_a_write_before_both_reads(self) -> None:
        report = _state(WRITE, read("A"), read("B"))
        self.assertEqual(_facts(report), [(2, "non-determinism", 1), (2, "redundant-call", 1)])
        self.assertEqual(report.divergence, 2)

    def test_a_retry_after_an_error_then_a_success_then_a_different_success(self) -> None:
        report = _state(read("Error: 503 Service Unavailable"), read("A"), read("B"))
        self.assertEqual(_facts(report), [(1, "retry-after-error", 0),
                                          (2, "non-determinism", 1), (2, "redundant-call", 1)])
        self.assertEqual(report.divergence, 2)
        self.assertEqual(report.findings[0].message, "tool 'search' returned a different response than the "
                                                     "identical call at index 0, which returned an error (a retry)")

    def test_repeating_a_failed_call_is_a_retry_not_a_redundant_call(self) -> None:
        # The same error twice: no finding at all (a retry that failed again), and no waste.
        self.assertEqual(_facts(_state(read("Error: 503"), read("Error: 503"))), [])
        # The default mode still reports it: it knows no errors.
        self.assertEqual(_facts(audit_replay(read_session(io.BytesIO(_session(read("Error: 503"),
                                                                              read("Error: 503"))), "s"))),
                         [(1, "redundant-call", 0)])

    def test_the_same_call_in_three_states(self) -> None:
        report = _state(read("A"), WRITE, read("B"), OTHER_WRITE, read("C"))
        self.assertEqual(_facts(report), [(2, "changed-after-write", 1), (4, "changed-after-write", 3)])
        self.assertEqual(report.findings[1].message.split("index ")[1:], ["2 after the state-changing call at ",
                                                                          "3"])
        report = _state(read("A"), read("B"), WRITE, read("C"), read("C"))
        self.assertEqual(_facts(report), [(1, "non-determinism", 0), (1, "redundant-call", 0),
                                          (3, "changed-after-write", 2), (4, "redundant-call", 3)])

    def test_compares_with_the_most_recent_call_not_the_first(self) -> None:
        report = _state(read("A"), read("B"), read("B"))
        self.assertEqual(_facts(report), [(1, "non-determinism", 0), (1, "redundant-call", 0),
                                          (2, "redundant-call", 1)])
        self.assertEqual(_facts(audit_replay(read_session(io.BytesIO(_session(read("A"), read("B"), read("B"))),
                                                          "s"))),
                         [(1, "non-determinism", 0), (1, "redundant-call", 0), (2, "non-determinism", 0),
                          (2, "redundant-call", 1)])

    def test_an_unchanged_read_after_a_write_is_no_finding(self) -> None:
        self.assertEqual(_facts(_state(read("A"), WRITE, read("A"))), [])

    def test_a_repeated_write_acts_on_the_state_the_first_left(self) -> None:
        toggle_on: Call = ("toggle_roaming", {}, {"roaming": True})
        toggle_off: Call = ("toggle_roaming", {}, {"roaming": False})
        report = _state(toggle_on, toggle_off, mutators={"toggle_roaming"})
        self.assertEqual(_facts(report), [(1, "changed-after-write", 0), (1, "redundant-call", 0)])

    def test_an_error_then_a_write_then_a_success_is_a_change(self) -> None:
        self.assertEqual(_facts(_state(read("Error: not found"), WRITE, read("A"))),
                         [(2, "changed-after-write", 1)])

    def test_error_conventions(self) -> None:
        for response, error in (({"error": True}, True), ({"error": "boom"}, True), ({"error": {"code": 1}}, True),
                                ({"error": False}, False), ({"error": None}, False), ({"ok": False}, True),
                                ({"ok": True}, False), ({"isError": True}, True), ({"text": "Error: x"}, True),
                                ({"text": "error: x"}, True), ({"text": "No error"}, False), ({"text": 5}, False),
                                ({}, False)):
            self.assertEqual(is_error_response(response), error, response)

    def test_renderings(self) -> None:
        report = _state(read("A"), WRITE, read("B"), read("C"))
        self.assertEqual(replay_text(report), (
            "calls: 4\ndivergence: index 3\nfindings: 2\ninformation: 1\n"
            "index 2: changed-after-write: tool 'search' returned a different response than the identical call "
            "at index 0 after the state-changing call at index 1\n"
            "index 3: non-determinism: tool 'search' returned a different response than the identical call at "
            "index 2\n"
            "index 3: redundant-call: tool 'search' repeats the identical call at index 2 with no state change "
            "between them\n"))
        self.assertIn('"divergence": 3,\n  "state_aware": true,\n  "counted_findings": 2,\n  "information": 1,\n',
                      replay_json(report))


class CommandTest(unittest.TestCase):
    def run_replay(self, *argv: str) -> tuple[int, str, str]:
        io_ = IO.memory()
        code = main(["replay", *argv], io_)
        return code, io_.out(), io_.err()

    def test_information_alone_exits_0_unless_counted(self) -> None:
        dirty = os.path.join(ROOT, "samples", "session-dirty.jsonl")
        code, out, _ = self.run_replay(dirty, "--state-aware")
        self.assertEqual((code, out.splitlines()[:4]), (1, ["calls: 6", "divergence: none", "findings: 1",
                                                            "information: 1"]))
        import tempfile

        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as handle:
            handle.write(_session(read("A"), WRITE, read("B")))
        self.addCleanup(os.unlink, handle.name)
        self.assertEqual(self.run_replay(handle.name, "--state-aware")[0], 0)
        self.assertEqual(self.run_replay(handle.name, "--state-aware", "--count-changes")[0], 1)
        self.assertEqual(self.run_replay(handle.name)[0], 1)

    def test_parallel_and_serial_agree(self) -> None:
        import tempfile

        from toolreplay.format.chunks import read_facts

        calls = [read(str(i % 3)) if i % 4 else WRITE for i in range(60)]
        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl", delete=False) as handle:
            handle.write(_session(*calls))
        self.addCleanup(os.unlink, handle.name)
        reports = [replay_text(audit_state_facts(read_facts(handle.name, state_fact, jobs=jobs, chunk_bytes=200,
                                                            min_parallel_bytes=0))) for jobs in (1, 2)]
        self.assertEqual(reports[0], reports[1])


if __name__ == "__main__":
    unittest.main()
