"""Format 1.1 (docs/format.md): the optional `meta` field, read strictly, sealed, never compared, and
read by replay and scope (outcomes, times)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import unittest
from typing import Any

from tests.test_cli import run
from toolreplay.audit.chain import GENESIS, seal_records, verify_chain
from toolreplay.audit.replay import call_fact
from toolreplay.errors import InputError
from toolreplay.format.chunks import read_facts
from toolreplay.format.records import Record, format_record, read_links, read_session, ts_seconds

TS = "2026-12-01T16:00:00.123Z"


def _line(index: int, meta: Any = None, tool: str = "t", args: Any = None, response: Any = None) -> str:
    record: dict[str, Any] = {"index": index, "tool": tool, "args": args or {}, "response": response or {}}
    if meta is not None:
        record["meta"] = meta
    return json.dumps(record) + "\n"


def _read(text: str) -> list[Record]:
    return list(read_session(io.BytesIO(text.encode()), "s.jsonl"))


# (name, meta as JSON text, exact message after "s.jsonl:2: ")
BAD_META = [
    ("not an object", "[]", 'field "meta" must be an object, not array'),
    ("null", "null", 'field "meta" must be an object, not null'),
    ("unknown key", '{"when": 1}', 'unknown meta field "when" (own keys start with x-)'),
    ("month 13", '{"ts": "2026-13-01T00:00:00Z"}', 'meta field "ts" is not a valid date and time: "2026-13-01T00:00:00Z"'),
    ("30 February", '{"ts": "2026-02-30T00:00:00Z"}', 'meta field "ts" is not a valid date and time: "2026-02-30T00:00:00Z"'),
    ("29 February, no leap year", '{"ts": "2025-02-29T00:00:00Z"}',
     'meta field "ts" is not a valid date and time: "2025-02-29T00:00:00Z"'),
    ("hour 24", '{"ts": "2026-12-01T24:00:00Z"}', 'meta field "ts" is not a valid date and time: "2026-12-01T24:00:00Z"'),
    ("missing Z", '{"ts": "2026-12-01T16:00:00"}',
     'meta field "ts" must be an RFC 3339 time in UTC ending in Z (2026-12-01T16:00:00.123Z), got "2026-12-01T16:00:00"'),
    ("local offset", '{"ts": "2026-12-01T16:00:00+01:00"}',
     'meta field "ts" must be an RFC 3339 time in UTC ending in Z (2026-12-01T16:00:00.123Z), '
     'got "2026-12-01T16:00:00+01:00"'),
    ("ten fraction digits", '{"ts": "2026-12-01T16:00:00.1234567890Z"}',
     'meta field "ts" must be an RFC 3339 time in UTC ending in Z (2026-12-01T16:00:00.123Z), '
     'got "2026-12-01T16:00:00.1234567890Z"'),
    ("lower-case z", '{"ts": "2026-12-01t16:00:00z"}',
     'meta field "ts" must be an RFC 3339 time in UTC ending in Z (2026-12-01T16:00:00.123Z), '
     'got "2026-12-01t16:00:00z"'),
    ("ts a number", '{"ts": 1764604800}', 'meta field "ts" must be a string, not number'),
    ("negative duration", '{"duration_ms": -0.5}', 'meta field "duration_ms" must not be negative, got -0.5'),
    ("duration a string", '{"duration_ms": "5"}', 'meta field "duration_ms" must be a number, not string'),
    ("duration a boolean", '{"duration_ms": true}', 'meta field "duration_ms" must be a number, not boolean'),
    ("turn a fraction", '{"turn": 1.5}', 'meta field "turn" must be an integer, not a number with a fraction or exponent'),
    ("turn 1.0", '{"turn": 1.0}', 'meta field "turn" must be an integer, not a number with a fraction or exponent'),
    ("turn a boolean", '{"turn": false}', 'meta field "turn" must be an integer, not boolean'),
    ("negative turn", '{"turn": -1}', 'meta field "turn" must not be negative, got -1'),
    ("empty call id", '{"call_id": ""}', 'meta field "call_id" must not be empty'),
    ("numeric call id", '{"call_id": 7}', 'meta field "call_id" must be a string, not number'),
    ("unknown outcome", '{"outcome": "skipped"}',
     'meta field "outcome" must be one of ran, cached, refused, cancelled, unknown, got "skipped"'),
    ("outcome not a string", '{"outcome": 1}',
     'meta field "outcome" must be one of ran, cached, refused, cancelled, unknown, got number'),
    ("mutates a string", '{"mutates": "true"}', 'meta field "mutates" must be true or false, not string'),
    ("mutates a number", '{"mutates": 1}', 'meta field "mutates" must be true or false, not number'),
    ("mutates null", '{"mutates": null}', 'meta field "mutates" must be true or false, not null'),
    ("duplicate key inside meta", '{"turn": 1, "turn": 2}', 'duplicate key "turn"'),
    ("lone surrogate in an own key", '{"x-a": "\\ud800"}', "string holds a lone surrogate (invalid Unicode escape)"),
]


class ParseMetaTest(unittest.TestCase):
    def test_every_bad_meta_is_one_input_error_naming_the_line(self) -> None:
        for name, meta, message in BAD_META:
            with self.subTest(name):
                text = _line(0) + '{"index": 1, "tool": "t", "args": {}, "response": {}, "meta": ' + meta + "}\n"
                with self.assertRaises(InputError) as caught:
                    _read(text)
                self.assertEqual(str(caught.exception), f"s.jsonl:2: {message}")

    def test_bad_meta_in_a_sealed_link(self) -> None:
        link = ('{"index": 0, "tool": "t", "args": {}, "response": {}, "meta": {"turn": "1"}, '
                f'"prev": "{GENESIS}", "digest": "{GENESIS}"}}\n')
        with self.assertRaises(InputError) as caught:
            list(read_links(io.BytesIO(link.encode()), "s.sealed"))
        self.assertEqual(str(caught.exception), 's.sealed:1: meta field "turn" must be an integer, not string')

    def test_cli_error_line_and_exit_code_in_serial_and_parallel_readers(self) -> None:
        good = "".join(_line(i, {"turn": i}) for i in range(3000))
        bad = good + '{"index": 3000, "tool": "t", "args": {}, "response": {}, "meta": {"ts": "2026-12-01"}}\n'
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "s.jsonl")
            with open(path, "w") as handle:
                handle.write(bad)
            for jobs in ("1", "2"):
                with self.subTest(jobs=jobs):
                    code, out, err = run("replay", "--jobs", jobs, path)
                    self.assertEqual((code, out), (2, ""))
                    self.assertEqual(err, f'error: {path}:3001: meta field "ts" must be an RFC 3339 time in UTC '
                                          'ending in Z (2026-12-01T16:00:00.123Z), got "2026-12-01"\n')
            # The parallel reader, chunked small, gives the serial reader's facts.
            with open(path, "w") as handle:
                handle.write(good)
            serial = list(read_facts(path, call_fact, jobs=1))
            parallel = list(read_facts(path, call_fact, jobs=2, chunk_bytes=4096, min_parallel_bytes=0))
            self.assertEqual(serial, parallel)

    def test_good_meta_is_kept(self) -> None:
        meta = {"ts": TS, "duration_ms": 12.5, "call_id": "toolu_01", "turn": 3, "outcome": "cached",
                "mutates": True, "x-agent": {"name": "a"}}
        (record,) = _read(_line(0, meta))
        self.assertEqual(record.meta, meta)
        self.assertEqual(record.outcome, "cached")
        self.assertEqual(_read(_line(0))[0].outcome, "ran")
        self.assertIsNone(_read(_line(0))[0].meta)
        self.assertEqual(_read(_line(0, {"mutates": False}))[0].meta, {"mutates": False})

    def test_every_valid_timestamp_form(self) -> None:
        for ts, seconds in (("1970-01-01T00:00:00Z", 0.0), ("1970-01-01T00:00:01.5Z", 1.5),
                            ("2024-02-29T23:59:59.123456789Z", 1709251199.123456789),
                            ("2026-12-01T16:00:00.123Z", 1796140800.123)):
            with self.subTest(ts):
                (record,) = _read(_line(0, {"ts": ts}))
                self.assertAlmostEqual(ts_seconds(record.meta["ts"]), seconds, places=6)  # type: ignore[index]

    def test_format_record_writes_meta_last(self) -> None:
        self.assertEqual(format_record(0, "t", {"a": 1}, {}, {"turn": 0}),
                         '{"index": 0, "tool": "t", "args": {"a": 1}, "response": {}, "meta": {"turn": 0}}')
        self.assertEqual(format_record(0, "t", {}, {}), '{"index": 0, "tool": "t", "args": {}, "response": {}}')


class SealMetaTest(unittest.TestCase):
    def test_meta_is_sealed_in_canonical_form(self) -> None:
        records = _read(_line(0, {"x-b": 1.0, "ts": TS}) + _line(1))
        first, second = list(seal_records(records))
        canonical = b'{"args":{},"index":0,"meta":{"ts":"' + TS.encode() + b'","x-b":1},"response":{},"tool":"t"}'
        digest = hashlib.sha256(GENESIS.encode() + canonical).hexdigest()
        self.assertEqual(first, b'{"index":0,"tool":"t","args":{},"response":{},"meta":{"ts":"' + TS.encode()
                         + b'","x-b":1},"prev":"' + GENESIS.encode() + b'","digest":"' + digest.encode() + b'"}\n')
        # A record without meta links exactly as in format 1.0.
        canonical_1_0 = b'{"args":{},"index":1,"response":{},"tool":"t"}'
        self.assertTrue(second.endswith(
            b'"digest":"' + hashlib.sha256(digest.encode() + canonical_1_0).hexdigest().encode() + b'"}\n'))

    def test_editing_a_timestamp_breaks_the_chain(self) -> None:
        sealed = b"".join(seal_records(_read(_line(0, {"ts": TS}) + _line(1, {"ts": TS}))))
        self.assertTrue(verify_chain(read_links(io.BytesIO(sealed), "s")).intact)
        edited = sealed.replace(b"16:00:00.123Z", b"16:00:01.123Z", 1)
        report = verify_chain(read_links(io.BytesIO(edited), "s"))
        self.assertEqual((report.intact, report.broken_at, report.field), (False, 0, "digest"))

    def test_seal_and_verify_through_the_cli(self) -> None:
        text = _line(0, {"ts": TS, "outcome": "ran"}) + _line(1)
        with tempfile.TemporaryDirectory() as folder:
            session, sealed = os.path.join(folder, "s.jsonl"), os.path.join(folder, "s.sealed")
            with open(session, "w") as handle:
                handle.write(text)
            code, out, err = run("seal", "-o", sealed, session)
            self.assertEqual((code, out, err), (0, "", ""))
            self.assertEqual(run("verify", sealed), (0, "chain: intact\n", ""))
            # The sealed file is a session too.
            code, out, _ = run("replay", sealed)
            self.assertEqual(code, 1)
            self.assertIn("index 1: redundant-call", out)


class CompareWithoutMetaTest(unittest.TestCase):
    def test_meta_is_never_part_of_a_comparison(self) -> None:
        text = (_line(0, {"ts": TS, "call_id": "a"}, args={"q": 1}, response={"r": 1})
                + _line(1, {"ts": "2026-12-01T16:00:05Z", "call_id": "b"}, args={"q": 1}, response={"r": 1}))
        records = _read(text)
        self.assertEqual(records[0].canonical_call, records[1].canonical_call)
        self.assertEqual(records[0].canonical_response, records[1].canonical_response)
        code, out, _ = run("replay", "-", stdin=text.encode())
        self.assertEqual((code, out), (1, "calls: 2\ndivergence: none\nfindings: 1\nindex 1: redundant-call: tool 't' "
                                          "repeats the identical call at index 0 with no state change between them\n"))


def _replay(*lines: str, state_aware: bool = False) -> tuple[int, str]:
    code, out, err = run("replay", *(["--state-aware"] if state_aware else []), "-", stdin="".join(lines).encode())
    assert err == "", err
    return code, out


class ReplayOutcomeTest(unittest.TestCase):
    def test_a_call_that_produced_no_answer_is_no_evidence_of_non_determinism(self) -> None:
        for outcome in ("refused", "cancelled", "unknown"):
            for state_aware in (False, True):
                with self.subTest(outcome, state_aware=state_aware):
                    self.assertEqual(_replay(_line(0, response={"r": 1}),
                                             _line(1, {"outcome": outcome}, response={"error": "x"}),
                                             _line(2, {"outcome": outcome}, response={"error": "y"}),
                                             state_aware=state_aware),
                                     (0, "calls: 3\ndivergence: none\nfindings: 0\n"
                                      + ("information: 0\n" if state_aware else "")))

    def test_the_same_records_without_meta_are_findings(self) -> None:
        code, out = _replay(_line(0, response={"r": 1}), _line(1, response={"error": "x"}))
        self.assertEqual(code, 1)
        self.assertIn("index 1: non-determinism", out)

    def test_a_cached_answer_is_not_a_new_answer_but_can_be_redundant(self) -> None:
        code, out = _replay(_line(0, response={"r": 1}), _line(1, {"outcome": "cached"}, response={"r": 2}))
        self.assertEqual((code, out), (1, "calls: 2\ndivergence: none\nfindings: 1\nindex 1: redundant-call: tool 't' "
                                          "repeats the identical call at index 0 with no state change between them\n"))

    def test_a_refused_write_is_no_state_change_an_unknown_one_may_be(self) -> None:
        read = _line(0, tool="read", response={"r": 1})
        for outcome, redundant in (("refused", True), ("cancelled", True), ("unknown", False), ("ran", False)):
            with self.subTest(outcome):
                code, out = _replay(read, _line(1, {"outcome": outcome}, tool="write_file"),
                                    _line(2, tool="read", response={"r": 1}))
                self.assertEqual("index 2: redundant-call" in out, redundant, out)

    def test_a_declared_mutator_is_one_when_it_ran_or_may_have(self) -> None:
        # `meta.mutates` makes a call a mutator's without --mutator: `edit` is no default mutator
        read = _line(0, tool="read", response={"r": 1})
        again = _line(2, tool="read", response={"r": 2})
        changed = ("calls: 3\ndivergence: none\nfindings: 0\ninformation: 1\nindex 2: changed-after-write: tool "
                   "'read' returned a different response than the identical call at index 0 after the state-changing "
                   "call at index 1\n")
        unchanged = ("calls: 3\ndivergence: index 2\nfindings: 2\ninformation: 0\nindex 2: non-determinism: tool "
                     "'read' returned a different response than the identical call at index 0\nindex 2: redundant-call: "
                     "tool 'read' repeats the identical call at index 0 with no state change between them\n")
        for meta, expected in (({"outcome": "ran", "mutates": True}, changed), ({"mutates": True}, changed),
                               ({"outcome": "unknown", "mutates": True}, changed),
                               ({"outcome": "refused", "mutates": True}, unchanged),
                               ({"outcome": "cancelled", "mutates": True}, unchanged),
                               ({"outcome": "cached", "mutates": True}, unchanged),
                               ({"outcome": "ran", "mutates": False}, unchanged), ({"outcome": "ran"}, unchanged)):
            with self.subTest(meta):
                self.assertEqual(_replay(read, _line(1, meta, tool="edit"), again, state_aware=True), (
                    1 if expected is unchanged else 0, expected))
        # the default mode: a redundant re-read after it is no longer redundant
        self.assertEqual(_replay(read, _line(1, {"mutates": True}, tool="edit"), _line(2, tool="read",
                                                                                       response={"r": 1})),
                         (0, "calls: 3\ndivergence: none\nfindings: 0\n"))
        self.assertEqual(_replay(read, _line(1, {}, tool="edit"), _line(2, tool="read", response={"r": 1})),
                         (1, "calls: 3\ndivergence: none\nfindings: 1\nindex 2: redundant-call: tool 'read' "
                             "repeats the identical call at index 0 with no state change between them\n"))


POLICY_RATE = {"agent": "a", "allowed_tools": ["send", "read"],
               "rules": [{"id": "pace", "tools": ["send"], "effect": "deny", "reason": "too fast",
                          "unless": [{"rate": "send", "max": 2, "seconds": 60}]}]}
POLICY_COUNT = {"agent": "a", "allowed_tools": ["send", "read"],
                "rules": [{"id": "once", "tools": ["send"], "effect": "deny", "reason": "once only",
                           "unless": [{"count": "send", "max": 1}]}]}


def _scope(policy: dict[str, Any], *lines: str) -> tuple[int, str]:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "policy.json")
        with open(path, "w") as handle:
            json.dump(policy, handle)
        code, out, err = run("scope", "-", path, stdin="".join(lines).encode())
    assert err == "", err
    return code, out


class ScopeOutcomeTest(unittest.TestCase):
    def test_rate_rules_are_checked_where_records_carry_ts(self) -> None:
        sends = [_line(i, {"ts": f"2026-12-01T16:00:{10 * i:02d}Z"}, tool="send", args={"n": i}) for i in range(3)]
        code, out = _scope(POLICY_RATE, *sends)
        self.assertEqual((code, out), (1, "calls: 3\nfindings: 1\nindex 2: policy-violation: tool 'send' denied by "
                                          "rule pace: too fast\n"))
        # A minute later the window has room again.
        late = _line(3, {"ts": "2026-12-01T16:01:15Z"}, tool="send", args={"n": 3})
        self.assertEqual(_scope(POLICY_RATE, *sends, late)[1].count("policy-violation"), 1)

    def test_rate_rules_not_checked_where_a_call_has_no_ts(self) -> None:
        code, out = _scope(POLICY_RATE, *[_line(i, tool="send", args={"n": i}) for i in range(3)])
        self.assertEqual((code, out), (0, "calls: 3\nfindings: 0\nnot checked: rule pace: a rate needs the time of "
                                          "each call (meta.ts), which this record does not carry\n"))

    def test_a_call_the_guard_refused_is_checked_but_does_not_count(self) -> None:
        refused = _line(1, {"outcome": "refused"}, tool="send", args={"n": 1},
                        response={"ok": False, "error": "denied by rule once: once only"})
        code, out = _scope(POLICY_COUNT, _line(0, tool="send", args={"n": 0}), refused,
                           _line(2, tool="send", args={"n": 2}), _line(3, {"outcome": "refused"}, tool="forbidden"))
        # The refused calls are blocked (information, with the rule the refusal names); they did not run, so
        # the next call is judged as the second send, not the third, and is the one violation.
        self.assertEqual((code, out), (1, "calls: 4\nfindings: 1\ninformation: 2\n"
                                          "index 1: blocked: tool 'send' was refused by the guard: denied by rule "
                                          "once: once only\n"
                                          "index 2: policy-violation: tool 'send' denied by rule once: once only\n"
                                          "index 3: blocked: tool 'forbidden' was refused by the guard\n"))

    def test_cached_and_cancelled_calls_do_not_count_unknown_ones_do(self) -> None:
        for outcome, findings in (("cached", 0), ("cancelled", 0), ("unknown", 1), ("ran", 1)):
            with self.subTest(outcome):
                code, out = _scope(POLICY_COUNT, _line(0, {"outcome": outcome}, tool="send", args={"n": 0}),
                                   _line(1, tool="send", args={"n": 1}))
                self.assertEqual(out.count("policy-violation"), findings, out)


if __name__ == "__main__":
    unittest.main()


class GuardedSessionTest(unittest.TestCase):
    """The guard's record carries meta: its backtest checks rate rules and agrees with the live guard, and
    its OpenTelemetry export is dated when the calls ran, with the protocol's ids."""

    POLICY = {"agent": "a", "allowed_tools": ["send", "read"],
              "rules": [{"id": "pace", "tools": ["send"], "effect": "deny", "reason": "two a minute",
                         "unless": [{"rate": "send", "max": 2, "seconds": 60}]}]}

    def setUp(self) -> None:
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = folder.name

    def test_the_backtest_of_a_guarded_session_checks_rates_and_agrees_with_the_guard(self) -> None:
        from toolreplay.guard.gate import Gate
        from toolreplay.guard.recorder import SessionRecorder
        from toolreplay.policy.model import parse_policy

        record = os.path.join(self.folder, "record.jsonl")
        seconds = iter([0, 10, 20, 30, 95])  # the gate's clock and the record's, one call each
        now = [0.0]

        def clock() -> float:
            return now[0]

        def wall() -> int:
            now[0] = float(next(seconds))
            return 1_796_140_800 * 10**9 + int(now[0]) * 10**9

        with SessionRecorder.open(record) as recorder:
            gate = Gate({"send": lambda n: {"sent": n}, "read": lambda: {}}, parse_policy(self.POLICY),
                        recorder=recorder, clock=clock, wall_clock=wall)
            answers = [gate.handle("send", {"n": n}, call_id=f"call_{n}") for n in range(4)]
            answers.append(gate.handle("send", {"n": 4}, call_id="call_4"))
        self.assertEqual([answer.outcome for answer in answers], ["ran", "ran", "refused", "refused", "ran"])
        with open(record, encoding="utf-8") as handle:
            metas = [json.loads(line)["meta"] for line in handle]
        self.assertEqual([(meta["ts"], meta["call_id"], meta["outcome"]) for meta in metas], [
            ("2026-12-01T16:00:00.000Z", "call_0", "ran"), ("2026-12-01T16:00:10.000Z", "call_1", "ran"),
            ("2026-12-01T16:00:20.000Z", "call_2", "refused"), ("2026-12-01T16:00:30.000Z", "call_3", "refused"),
            ("2026-12-01T16:01:35.000Z", "call_4", "ran")])
        self.assertTrue(all(meta["duration_ms"] >= 0 for meta in metas))
        with open(record, encoding="utf-8") as handle:
            code, out = _scope(self.POLICY, *handle)
        # Exactly the two calls the guard refused, blocked, and the rate rule checked (no "not checked" line):
        # everything forbidden was blocked, so the exit code is 0.
        self.assertEqual((code, out), (0, "calls: 5\nfindings: 0\ninformation: 2\n"
                                          "index 2: blocked: tool 'send' was refused by the guard: denied by rule "
                                          "pace: two a minute\n"
                                          "index 3: blocked: tool 'send' was refused by the guard: denied by rule "
                                          "pace: two a minute\n"))

    def test_a_resumed_record_counts_for_a_rate_when_its_calls_were_made(self) -> None:
        # A hook is a process per call: each resumes the record. The calls it holds count for a rate
        # window at their meta.ts, not all at once at the resume (which refused every call past `max`).
        from toolreplay.guard.gate import Gate
        from toolreplay.guard.recorder import SessionRecorder
        from toolreplay.policy.model import parse_policy

        record = os.path.join(self.folder, "record.jsonl")
        base = 1_796_140_800 * 10**9

        def session(at: int, sends: range) -> list[str]:
            def wall() -> int:
                return base + at * 10**9

            with SessionRecorder.open(record) as recorder:
                gate = Gate({"send": lambda n: {"sent": n}, "read": lambda: {}}, parse_policy(self.POLICY),
                            recorder=recorder, clock=lambda: 0.0, wall_clock=wall)
                return [gate.handle("send", {"n": n}).outcome for n in sends]

        self.assertEqual(session(0, range(2)), ["ran", "ran"])
        self.assertEqual(session(30, range(2, 3)), ["refused"])  # both still in the last 60 s
        self.assertEqual(session(100, range(3, 6)), ["ran", "ran", "refused"])  # none in the window now

    def test_a_time_is_counted_in_days_as_calendar_counts_them(self) -> None:
        import calendar

        from toolreplay.format.records import ts_nanoseconds

        for year in (1, 4, 100, 1600, 1900, 1969, 1970, 2000, 2024, 2026, 2100, 9999):
            for month, day in ((1, 1), (2, 28), (3, 1), (12, 31)) + (((2, 29),) if calendar.isleap(year) else ()):
                with self.subTest(year=year, month=month, day=day):
                    ts = f"{year:04d}-{month:02d}-{day:02d}T23:59:60.5Z"
                    self.assertEqual(ts_nanoseconds(ts), calendar.timegm((year, month, day, 23, 59, 60, 0, 0, 0))
                                     * 10**9 + 500_000_000)

    def test_the_export_of_a_guarded_session_opens_when_it_ran(self) -> None:
        import time

        from toolreplay.guard.gate import Gate
        from toolreplay.guard.recorder import SessionRecorder
        from toolreplay.policy.model import parse_policy

        record = os.path.join(self.folder, "record.jsonl")
        before = time.time_ns()
        with SessionRecorder.open(record, sealed=True) as recorder:
            gate = Gate({"send": lambda n: {"sent": n}, "read": lambda: {}},
                        parse_policy({"agent": "a", "allowed_tools": ["send", "read"]}), recorder=recorder)
            gate.handle("read", {}, call_id="toolu_01")
            gate.handle("send", {"n": 1}, call_id="toolu_02")
        after = time.time_ns()
        code, out, err = run("export", "otel", record)
        self.assertEqual((code, err), (0, ""))
        spans = json.loads(out)["resourceSpans"][0]["scopeSpans"][0]["spans"]
        for span in spans:
            self.assertLessEqual(abs(int(span["startTimeUnixNano"]) - before), 10**9)
            self.assertLessEqual(int(span["endTimeUnixNano"]), after + 10**6)
        ids = [next(a["value"]["stringValue"] for a in span["attributes"] if a["key"] == "gen_ai.tool.call.id")
               for span in spans[1:]]
        self.assertEqual(ids, ["toolu_01", "toolu_02"])
