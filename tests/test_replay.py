"""`replay` (SPEC.md §4): redundant calls, non-determinism, divergence, mutators."""

from __future__ import annotations

import io
import os
import tempfile
import unittest
from typing import Any

from toolreplay.audit.findings import Finding
from toolreplay.audit.render import replay_text
from toolreplay.audit.replay import DEFAULT_MUTATORS, ReplayReport, audit_replay
from toolreplay.cli.audit import read_mutators_file
from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import format_record, read_session

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Call = tuple[str, dict[str, Any], dict[str, Any]]


def _session(*calls: Call) -> bytes:
    return "".join(
        format_record(i, tool, args, response) + "\n" for i, (tool, args, response) in enumerate(calls)
    ).encode()


def _replay(*calls: Call, mutators: Any = DEFAULT_MUTATORS) -> ReplayReport:
    return audit_replay(read_session(io.BytesIO(_session(*calls)), "s"), mutators)


def _facts(report: ReplayReport) -> list[tuple[int, str, str, int | None]]:
    return [(f.index, f.kind, f.tool, f.related_index) for f in report.findings]


READ_A: Call = ("read_file", {"path": "a"}, {"text": "A"})
READ_B: Call = ("read_file", {"path": "b"}, {"text": "B"})
WRITE: Call = ("write_file", {"path": "a", "text": "new"}, {"ok": True})


class RedundantCallTest(unittest.TestCase):
    def test_identical_call_in_a_row(self) -> None:
        report = _replay(READ_A, READ_A)
        self.assertEqual(_facts(report), [(1, "redundant-call", "read_file", 0)])
        self.assertEqual((report.calls, report.divergence), (2, None))

    def test_other_reads_between_do_not_excuse(self) -> None:
        self.assertEqual(
            _facts(_replay(READ_A, READ_B, ("list_dir", {}, {}), READ_A)),
            [(3, "redundant-call", "read_file", 0)],
        )

    def test_mutator_between_excuses(self) -> None:
        self.assertEqual(_facts(_replay(READ_A, WRITE, READ_A)), [])

    def test_mutator_on_another_target_still_counts(self) -> None:
        other = ("delete_file", {"path": "unrelated"}, {"ok": True})
        self.assertEqual(_facts(_replay(READ_A, other, READ_A)), [])

    def test_every_default_mutator(self) -> None:
        self.assertEqual(
            DEFAULT_MUTATORS,
            frozenset({"write_file", "delete_file", "create_file", "move_file", "run_command"}),
        )
        for tool in sorted(DEFAULT_MUTATORS):
            with self.subTest(tool):
                self.assertEqual(_facts(_replay(READ_A, (tool, {}, {}), READ_A)), [])

    def test_names_the_most_recent_identical_call(self) -> None:
        self.assertEqual(
            _facts(_replay(READ_A, READ_A, READ_B, READ_A)),
            [(1, "redundant-call", "read_file", 0), (3, "redundant-call", "read_file", 1)],
        )

    def test_after_a_mutator_only_later_repeats(self) -> None:
        self.assertEqual(
            _facts(_replay(READ_A, WRITE, READ_A, READ_A)), [(3, "redundant-call", "read_file", 2)]
        )

    def test_repeated_mutator_call_is_redundant(self) -> None:
        # the earlier identical call is an end point, not strictly between the two
        self.assertEqual(_facts(_replay(WRITE, WRITE)), [(1, "redundant-call", "write_file", 0)])

    def test_mutator_between_two_identical_mutator_calls(self) -> None:
        self.assertEqual(_facts(_replay(WRITE, ("run_command", {"cmd": "make"}, {}), WRITE)), [])

    def test_identical_means_canonical(self) -> None:
        first = ("search", {"q": "x", "limit": 10}, {"n": 1})
        second = ("search", {"limit": 10.0, "q": "x"}, {"n": 1.0})
        self.assertEqual(_facts(_replay(first, second)), [(1, "redundant-call", "search", 0)])

    def test_different_tool_or_args_are_different_calls(self) -> None:
        self.assertEqual(
            _facts(
                _replay(
                    ("a", {"x": 1}, {}),
                    ("b", {"x": 1}, {}),
                    ("a", {"x": 2}, {}),
                    ("a", {"x": "1"}, {}),
                    ("A", {"x": 1}, {}),
                )
            ),
            [],
        )


class NonDeterminismTest(unittest.TestCase):
    def test_names_the_first_call_across_a_state_change(self) -> None:
        report = _replay(("search", {"q": "x"}, {"n": 1}), WRITE, ("search", {"q": "x"}, {"n": 2}))
        self.assertEqual(_facts(report), [(2, "non-determinism", "search", 0)])
        self.assertEqual(report.divergence, 2)

    def test_compares_with_the_first_response_only(self) -> None:
        writes: list[Call] = [("write_file", {"text": str(n)}, {}) for n in range(3)]
        calls: list[Call] = [
            ("s", {}, {"n": 1}),
            writes[0],
            ("s", {}, {"n": 2}),
            writes[1],
            ("s", {}, {"n": 2}),
            writes[2],
            ("s", {}, {"n": 1}),
        ]
        report = _replay(*calls)
        self.assertEqual(_facts(report), [(2, "non-determinism", "s", 0), (4, "non-determinism", "s", 0)])
        self.assertEqual(report.divergence, 2)

    def test_both_kinds_at_one_index_sorted_by_kind(self) -> None:
        report = _replay(READ_A, ("read_file", {"path": "a"}, {"text": "changed"}))
        self.assertEqual(
            _facts(report), [(1, "non-determinism", "read_file", 0), (1, "redundant-call", "read_file", 0)]
        )
        self.assertEqual(
            replay_text(report),
            (
                "calls: 2\ndivergence: index 1\nfindings: 2\n"
                "index 1: non-determinism: tool 'read_file' returned a different response "
                "than the identical call at index 0\n"
                "index 1: redundant-call: tool 'read_file' repeats the identical call at index 0 "
                "with no state change between them\n"
            ),
        )

    def test_both_kinds_name_different_calls(self) -> None:
        calls: list[Call] = [("s", {}, {"n": 1}), ("s", {}, {"n": 2}), ("s", {}, {"n": 3})]
        self.assertEqual(
            _facts(_replay(*calls)),
            [
                (1, "non-determinism", "s", 0),
                (1, "redundant-call", "s", 0),
                (2, "non-determinism", "s", 0),
                (2, "redundant-call", "s", 1),
            ],
        )

    def test_divergence_is_the_first_non_determinism(self) -> None:
        calls: list[Call] = [
            READ_A,
            READ_A,
            ("s", {}, {"n": 1}),
            ("s", {}, {"n": 2}),
            ("t", {}, {}),
            ("t", {}, {"x": 1}),
        ]
        report = _replay(*calls)
        self.assertEqual(report.divergence, 3)
        self.assertEqual([f.index for f in report.findings], [1, 3, 3, 5, 5])

    def test_response_compared_canonically(self) -> None:
        self.assertEqual(
            _facts(_replay(("s", {}, {"a": 1, "b": [1.0]}), WRITE, ("s", {}, {"b": [1], "a": 1.0}))), []
        )


class MutatorsTest(unittest.TestCase):
    def test_custom_mutators_replace_the_set_in_the_library(self) -> None:
        calls: tuple[Call, ...] = (READ_A, ("cancel_order", {"id": 1}, {}), READ_A, WRITE, READ_A)
        self.assertEqual(
            _facts(_replay(*calls, mutators={"cancel_order"})), [(4, "redundant-call", "read_file", 2)]
        )
        self.assertEqual(_facts(_replay(*calls)), [(2, "redundant-call", "read_file", 0)])

    def test_mutator_names_are_case_sensitive(self) -> None:
        self.assertEqual(
            _facts(_replay(READ_A, ("Write_File", {}, {}), READ_A)), [(2, "redundant-call", "read_file", 0)]
        )

    def test_mutators_file(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.txt")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(
                    "# write tools\n\ncancel_order\n  book_flight  # inline comment\r\n"
                    "\t\n#refund\nuser:toggle\n"
                )
            self.assertEqual(read_mutators_file(path), ["cancel_order", "book_flight", "user:toggle"])

    def test_mutators_file_errors(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.txt")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("ok\nbad name\n")
            with self.assertRaises(InputError) as caught:
                read_mutators_file(path)
            self.assertEqual(str(caught.exception), f"{path}:2: a tool name has no white space: 'bad name'")
            with open(path, "wb") as handle:
                handle.write(b"caf\xe9\n")
            with self.assertRaises(InputError) as caught:
                read_mutators_file(path)
            self.assertEqual(str(caught.exception), f"{path}: not valid UTF-8")
            missing = os.path.join(tmp, "none.txt")
            with self.assertRaises(UsageError) as usage:
                read_mutators_file(missing)
            self.assertEqual(str(usage.exception), f"cannot read {missing}: No such file or directory")


class ReportTest(unittest.TestCase):
    def test_empty_session(self) -> None:
        report = _replay()
        self.assertEqual((report.calls, report.divergence, len(report.findings)), (0, None, 0))

    def test_sample_dirty(self) -> None:
        with open(os.path.join(ROOT, "samples", "session-dirty.jsonl"), "rb") as handle:
            report = audit_replay(read_session(handle, "x"))
        self.assertEqual((report.calls, report.divergence), (6, 5))
        self.assertEqual(
            list(report.findings),
            [
                Finding(
                    2,
                    "redundant-call",
                    "read_file",
                    1,
                    "tool 'read_file' repeats the identical call at index 1 "
                    "with no state change between them",
                ),
                Finding(
                    5,
                    "non-determinism",
                    "search",
                    3,
                    "tool 'search' returned a different response than the identical call at index 3",
                ),
            ],
        )

    def test_sample_clean(self) -> None:
        with open(os.path.join(ROOT, "samples", "session-clean.jsonl"), "rb") as handle:
            report = audit_replay(read_session(handle, "x"))
        self.assertEqual(replay_text(report), "calls: 4\ndivergence: none\nfindings: 0\n")

    def test_finding_list_sequence(self) -> None:
        report = _replay(READ_A, READ_A, READ_A)
        findings = report.findings
        self.assertEqual(len(findings), 2)
        self.assertEqual(findings[-1].related_index, 1)
        self.assertEqual([f.index for f in findings[0:2]], [1, 2])
        with self.assertRaises(IndexError):
            findings[2]


if __name__ == "__main__":
    unittest.main()


class CallTableTest(unittest.TestCase):
    """The 32-byte-a-call table must answer exactly like a dict, through many resizes."""

    def test_matches_a_dict_through_growth(self) -> None:
        self.check_against_a_dict()

    def test_matches_a_dict_when_growing_by_half(self) -> None:
        from unittest import mock

        with mock.patch("toolreplay.audit.replay._DOUBLING_LIMIT", 128):
            self.check_against_a_dict()

    def test_matches_a_dict_through_each_kind_of_growth(self) -> None:
        from unittest import mock

        from toolreplay.audit.replay import _grown

        with mock.patch("toolreplay.audit.replay._EIGHTFOLD_LIMIT", 32), \
                mock.patch("toolreplay.audit.replay._DOUBLING_LIMIT", 64):
            self.assertEqual([_grown(4), _grown(32), _grown(64)], [32, 64, 96])
            self.check_against_a_dict()

    def check_against_a_dict(self) -> None:
        import random
        from hashlib import blake2b

        from toolreplay.audit.replay import _CallTable

        table, reference = _CallTable(), {}
        rng = random.Random(7)
        for index in range(60000):
            key = blake2b(str(rng.randrange(30000)).encode(), digest_size=15).digest() + b"\x01"
            response = rng.randrange(3)
            expected = reference.get(key)
            self.assertEqual(table.visit(key, response, index), None if expected is None else tuple(expected))
            if expected is None:
                reference[key] = [response, index, index]
            else:
                expected[2] = index
        zero = bytes(15) + b"\x01"  # the all-zero digest is a key like any other
        self.assertEqual(table.visit(zero, 5, 60000), None)
        self.assertEqual(table.visit(zero, 6, 60001), (5, 60000, 60000))
