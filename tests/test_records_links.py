"""The fast path for link lines (`records._read_canonical_link`, `iter_link_facts`) against the careful path.

A line that the fast path takes must give the careful path's record and canonical bytes exactly; any
line the careful path rejects, or that the fast path cannot prove equal, must go to the careful path.
"""

from __future__ import annotations

import dataclasses
import decimal
import io
import json
import math
import random
import unittest
from typing import Any

from toolreplay.audit.chain import GENESIS, seal_records, verify_chain
from toolreplay.errors import InputError
from toolreplay.format.canonical import canonical_bytes, canonical_json
from toolreplay.format.records import (
    Record,
    TornLineError,
    _read_canonical_link,
    iter_link_facts,
    iter_records,
    link_fact,
    read_links,
)

# Values with every hard case of canonical form: escapes, non-ASCII and astral text and keys, numbers.
VALUES: list[Any] = [
    {},
    {"s": 'quote " backslash \\ slash / tab \t newline \n cr \r bell \x07 nul \x00 del \x7f'},
    {"s": "é ü 東京 \u2028 \u2029 \ufeff \uffff", "ü": 1, "é": 2, "e": 3},
    {"emoji": "😀 \U0010ffff", "list": ["😀", {"a": "😀"}]},
    {"\U0001f600": 1, "\uffff": 2, "a": 3},  # an astral key: UTF-16 order puts it before U+FFFF
    {"nested": {"\U0001f600": {"z": 1}, "\ue000": 0}},
    {"big": 123456789012345678901234567890, "neg": -98765432109876543210, "zero": 0, "max": 2**53 + 1},
    {"f": [0.5, -0.25, 0.3579, 1234.5, 0.0001, 9999999999999998.0, 1e-4, 123456789.123]},
    {"f": [1e-5, 1e-7, 1e16, 1e21, 1e300, 5e-324, 1.7976931348623157e308, 2.5e-10]},
    {"integral": [1.0, -0.0, 100.0, 1e15]},
    {"b": [True, False, None], "deep": [[[[{"x": [[]]}]]]]},
]


def _record(index: int, args: Any, response: Any, meta: dict[str, Any] | None = None) -> Record:
    return Record(index, "tool ✓", args, response, index + 1, meta=meta)


def _careful(line: bytes) -> Record | str:
    """The careful path's record for one link line (the general reader), or its error message."""
    try:
        return next(iter_records(io.BytesIO(line), "s", check_sequence=False, require_sealed=False))
    except InputError as exc:
        return exc.message


def _same(test: unittest.TestCase, fast: Record, careful: Record | str) -> None:
    test.assertIsInstance(careful, Record)
    assert isinstance(careful, Record)
    for field in ("index", "tool", "args", "response", "line", "prev", "digest", "fast_canonical", "meta"):
        test.assertEqual(getattr(fast, field), getattr(careful, field), field)
        test.assertEqual(repr(getattr(fast, field)), repr(getattr(careful, field)), field)
    test.assertEqual(fast.canonical_record, careful.canonical_record)
    test.assertEqual(fast.canonical_args, careful.canonical_args)
    test.assertEqual(fast.canonical_response, careful.canonical_response)
    test.assertEqual(fast.canonical_meta, careful.canonical_meta)


class FastLinkTest(unittest.TestCase):
    """Sealed lines of tricky values: the fast path takes the canonical ones and gives the careful path's bytes."""

    def _sealed(self) -> list[bytes]:
        records = [_record(i, value, {"echo": value, "n": i}) for i, value in enumerate(VALUES)]
        records.append(_record(len(records), {"a": 1}, {"b": 2},
                               {"ts": "2026-12-01T16:00:00.123Z", "duration_ms": 12.5, "outcome": "ran", "x-n": 0.5}))
        records.append(_record(len(records), {"a": 1}, {"b": 2}, {"ts": "2026-02-29T00:00:00Z"}))  # not a leap year
        return list(seal_records(records))

    def test_every_sealed_line_reads_as_the_careful_path_reads_it(self) -> None:
        taken = []
        for line in self._sealed():
            careful = _careful(line)
            fast = _read_canonical_link(line, 1)
            if fast is None:
                taken.append(False)
                continue
            taken.append(True)
            _same(self, fast, careful)
            self.assertEqual(fast.canonical_record, canonical_bytes(
                {"index": fast.index, "tool": fast.tool, "args": fast.args, "response": fast.response}
                | ({} if fast.meta is None else {"meta": fast.meta})))
        # Canonical lines are taken; the astral keys, the exotic floats and the bad date are not.
        self.assertEqual(taken, [True, True, True, True, False, False, True, True, False, True, True, True, False])

    def test_the_reader_gives_the_careful_records_for_a_whole_file(self) -> None:
        lines = self._sealed()[:-1]  # the bad date is an input error on both paths
        fast = list(read_links(io.BytesIO(b"".join(lines)), "s"))
        careful = [_careful(line) for line in lines]
        for line_number, (record, expected) in enumerate(zip(fast, careful, strict=True), 1):
            assert isinstance(expected, Record)
            _same(self, record, dataclasses.replace(expected, line=line_number))
        self.assertTrue(verify_chain(fast).intact)

    def test_the_bad_date_is_the_careful_error(self) -> None:
        line = self._sealed()[-1]
        with self.assertRaises(InputError) as caught:
            list(read_links(io.BytesIO(line), "s"))
        self.assertEqual(str(caught.exception), 's:1: meta field "ts" is not a valid date and time: '
                                                '"2026-02-29T00:00:00Z"')


def _link(body: str, prev: str = GENESIS, digest: str = "a" * 64) -> bytes:
    """A link line from the text of its first fields (index, tool, args, response), prev and digest."""
    return ('{' + body + f',"prev":"{prev}","digest":"{digest}"' + '}\n').encode()


# Lines the fast path must leave to the careful path (each would hash otherwise, or is an error).
NOT_FAST = {
    "duplicate key": '"index":0,"tool":"t","args":{"a":1,"a":1},"response":{}',
    "duplicate key with a short float": '"index":0,"tool":"t","args":{"a":1,"a":1,"f":0.00001},"response":{}',
    # 1e-4 is two characters shorter than its canonical 0.0001: three of them hide the six of "a":1,
    "duplicate key offset by exponents": '"index":0,"tool":"t","args":{"a":1,"a":1,"f":[1e-4,1e-4,1e-4]},"response":{}',
    "duplicate top-level field": '"index":0,"tool":"t","tool":"t","args":{},"response":{}',
    "white space": '"index":0,"tool":"t","args":{"a": 1},"response":{}',
    "escaped é": '"index":0,"tool":"t","args":{"a":"\\u00e9"},"response":{}',
    "escaped slash": '"index":0,"tool":"t","args":{"a":"\\/"},"response":{}',
    "integral float": '"index":0,"tool":"t","args":{"a":1.0},"response":{}',
    "float with an exponent": '"index":0,"tool":"t","args":{"a":1.5e3},"response":{}',
    "float with a trailing zero": '"index":0,"tool":"t","args":{"a":1.50},"response":{}',
    "minus zero": '"index":0,"tool":"t","args":{"a":-0},"response":{}',
    "NaN": '"index":0,"tool":"t","args":{"a":NaN},"response":{}',
    "overflow": '"index":0,"tool":"t","args":{"a":1e400},"response":{}',
    "lone surrogate": '"index":0,"tool":"t","args":{"a":"\\ud800"},"response":{}',
    "astral key escaped": '"index":0,"tool":"t","args":{"\\ud83d\\ude00":1,"\\uffff":2},"response":{}',
    "negative index": '"index":-1,"tool":"t","args":{},"response":{}',
    "boolean index": '"index":true,"tool":"t","args":{},"response":{}',
    "empty tool": '"index":0,"tool":"","args":{},"response":{}',
    "args not an object": '"index":0,"tool":"t","args":[],"response":{}',
    "unknown field": '"index":0,"tool":"t","args":{},"response":{},"extra":1',
    "unknown meta field": '"index":0,"tool":"t","args":{},"response":{},"meta":{"colour":1}',
    "deep nesting": '"index":0,"tool":"t","args":{"a":' + "[" * 600 + "]" * 600 + '},"response":{}',
}


class NotFastTest(unittest.TestCase):
    """Every line that is not canonical, or not valid, goes to the careful path."""

    def test_each_goes_to_the_careful_path(self) -> None:
        for name, body in NOT_FAST.items():
            with self.subTest(name):
                self.assertIsNone(_read_canonical_link(_link(body), 1))

    def test_a_prev_or_digest_not_of_64_lower_case_hex_digits(self) -> None:
        body = '"index":0,"tool":"t","args":{},"response":{}'
        for bad in ("A" * 64, "a" * 63, "a" * 65, "g" * 64, "é" * 64, "\\ud800" + "a" * 63, "a" * 63 + " ", 64 * "-",
                    "0x" + "a" * 62):
            for line in (_link(body, prev=bad), _link(body, digest=bad)):
                with self.subTest(line=line):
                    self.assertIsNone(_read_canonical_link(line, 1))
                    with self.assertRaises(InputError) as caught:
                        list(read_links(io.BytesIO(line), "s"))
                    self.assertEqual(caught.exception.message, _careful(line))
                    self.assertIn("must be 64 lower-case hex characters", caught.exception.message)

    def test_a_prev_is_looked_at_unless_it_is_the_digest_the_link_before_states(self) -> None:
        first = _link('"index":0,"tool":"t","args":{},"response":{}', digest="b" * 64)
        second = '"index":1,"tool":"t","args":{},"response":{}'
        for bad in ("B" * 64, "g" * 64, "b" * 63, "é" * 64):
            with self.subTest(bad=bad), self.assertRaises(InputError) as caught:
                list(iter_link_facts(io.BytesIO(first + _link(second, prev=bad)), "s"))
            self.assertEqual(str(caught.exception), 's:2: field "prev" must be 64 lower-case hex characters')
        facts = list(iter_link_facts(io.BytesIO(first + _link(second, prev="b" * 64)), "s"))
        self.assertEqual([fact[1:] for fact in facts], [(GENESIS, "b" * 64), ("b" * 64, "a" * 64)])
        # A chunk from the middle of a file knows no digest before its first link.
        with self.assertRaises(InputError) as caught:
            list(iter_link_facts(io.BytesIO(_link(second, prev="B" * 64)), "s", first_chunk=False))
        self.assertEqual(caught.exception.message, 'field "prev" must be 64 lower-case hex characters')

    def test_duplicates_are_the_careful_error_through_the_reader(self) -> None:
        for name in ("duplicate key", "duplicate key with a short float", "duplicate key offset by exponents"):
            with self.subTest(name), self.assertRaises(InputError) as caught:
                list(read_links(io.BytesIO(_link(NOT_FAST[name])), "s"))
            self.assertIn("duplicate key", caught.exception.message)

    def test_unsorted_keys_and_upper_case_escapes_read_as_the_careful_path_reads_them(self) -> None:
        # Canonical in length but not in bytes: the canonical record is the careful path's all the same.
        for body in ('"index":0,"tool":"t","args":{"b":1,"a":{"d":2,"c":3}},"response":{}',
                     '"index":0,"tool":"t","args":{"a":"\\u001F"},"response":{}',
                     '"tool":"t","index":3,"response":{"z":[1,"x"]},"args":{}'):
            with self.subTest(body):
                line = _link(body)
                fast = _read_canonical_link(line, 1)
                assert fast is not None
                _same(self, fast, _careful(line))

    def test_a_float_with_other_digits_of_the_same_double_reads_as_the_careful_path_reads_it(self) -> None:
        # 0.0013436424411240123 is the double whose repr ends in ...122: as long as its canonical text, so the
        # fast path takes it, and the canonical record (of the value) is the careful path's.
        self.assertEqual(float("0.0013436424411240123"), 0.0013436424411240122)
        for body in ('"index":0,"tool":"t","args":{"f":0.0013436424411240123},"response":{}',
                     '"index":0,"tool":"t","args":{"f":[-721.5400323407826,0.5]},"response":{}'):
            with self.subTest(body):
                line = _link(body)
                fast = _read_canonical_link(line, 1)
                assert fast is not None
                _same(self, fast, _careful(line))
                self.assertNotIn(body.split('"f":')[1].split("}")[0].encode(), fast.canonical_record)

    def test_a_float_without_an_exponent_is_never_shorter_than_its_repr(self) -> None:
        # What the fast path's proof of no duplicate key rests on (`scan_canonical_numbers`): of the texts
        # without an exponent that give a non-integral double in [1e-4, 1e16), none is shorter than its repr.
        rng = random.Random(37)
        doubles = [rng.random() * 10.0 ** rng.randint(-4, 15) for _ in range(3000)]
        doubles += [math.nextafter(10.0 ** k, direction) for k in range(-4, 16) for direction in (0, math.inf)]
        doubles += [1e-4, 0.1, 0.3 + 0.6, 2.0 ** -13, 9007199254740993 / 1e3]
        tried = 0
        for double in doubles:
            if not (1e-4 <= double < 1e16) or double.is_integer():
                continue
            shortest = len(repr(double))
            exact = decimal.Decimal(double)
            for digits in range(1, 26):
                for rounding in (decimal.ROUND_HALF_EVEN, decimal.ROUND_FLOOR, decimal.ROUND_CEILING):
                    context = decimal.Context(prec=digits, rounding=rounding)
                    text = format(context.plus(exact), "f")
                    if "." not in text:
                        continue
                    for written in (text, text + "0", "-" + text):
                        if abs(float(written)) == double:
                            tried += 1
                            self.assertGreaterEqual(len(written.lstrip("-")), shortest, (written, double))
        self.assertGreater(tried, 20000)

    def test_a_tampered_file_reports_as_the_careful_path_does(self) -> None:
        records = [_record(i, value, {"n": i}) for i, value in enumerate(VALUES)]
        lines = list(seal_records(records))
        link = json.loads(lines[3])
        link["args"]["emoji"] = "changed"
        lines[3] = (json.dumps(link, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        fast = verify_chain(read_links(io.BytesIO(b"".join(lines)), "s"))
        careful = verify_chain([record for record in map(_careful, lines) if isinstance(record, Record)])
        self.assertEqual(fast, careful)
        self.assertEqual((fast.broken_at, fast.field), (3, "digest"))



def _facts_or_error(read: Any, data: bytes) -> tuple[list[Any], str | None, type | None]:
    """The facts read before the first error, the error's text and its class (None, None at the end)."""
    facts: list[Any] = []
    try:
        for fact in read(io.BytesIO(data), "s"):
            facts.append(fact)
    except InputError as exc:
        return facts, str(exc), type(exc)
    return facts, None, None


def _careful_facts(handle: Any, path: str) -> Any:
    """What `verify` read before `iter_link_facts`: a Record a line, then its fact."""
    return map(link_fact, iter_records(handle, path, check_sequence=False, require_sealed=True))


class LinkFactsTest(unittest.TestCase):
    """`iter_link_facts` gives `map(link_fact, read_links(...))`'s facts and errors, byte for byte."""

    def assert_same(self, data: bytes) -> tuple[list[Any], str | None, type | None]:
        fast = _facts_or_error(lambda handle, path: iter_link_facts(handle, path), data)
        self.assertEqual(fast, _facts_or_error(_careful_facts, data))
        return fast

    def _sealed(self) -> list[bytes]:
        records = [_record(i, value, {"echo": value, "n": i}) for i, value in enumerate(VALUES)]
        return list(seal_records(records))

    def test_a_sealed_file_of_every_hard_value(self) -> None:
        facts, error, _ = self.assert_same(b"".join(self._sealed()))
        self.assertIsNone(error)
        self.assertEqual(len(facts), len(VALUES))
        self.assertTrue(verify_chain(read_links(io.BytesIO(b"".join(self._sealed())), "s")).intact)

    def test_errors_and_the_lines_around_them(self) -> None:
        lines = self._sealed()
        plain = b'{"index":0,"tool":"t","args":{},"response":{}}\n'
        cases = {
            "a plain first record": [plain] + lines[1:],
            "a plain first record after blank lines": [b"\n", b"  \n", plain] + lines[1:],
            "a plain record later": lines[:3] + [plain] + lines[4:],
            "a byte-order mark": [b"\xef\xbb\xbf" + lines[0]] + lines[1:],
            "a byte-order mark on line 2": lines[:1] + [b"\xef\xbb\xbf" + lines[1]] + lines[2:],
            "a torn last line": lines[:-1] + [lines[-1][:-9]],
            "a last line without its line break": lines[:-1] + [lines[-1][:-1]],
            "a duplicate key": lines[:2] + [_link(NOT_FAST["duplicate key"])] + lines[2:],
            "CRLF line breaks": [line[:-1] + b"\r\n" for line in lines],
            "invalid UTF-8": lines[:5] + [lines[5].replace(b"n", b"\xff", 1)] + lines[6:],
        }
        for name, case in cases.items():
            with self.subTest(name):
                facts, error, kind = self.assert_same(b"".join(case))
                if name in ("CRLF line breaks", "a last line without its line break"):
                    self.assertEqual((len(facts), error), (len(lines), None))
                    continue
                self.assertIsNotNone(error)
                if name.startswith("a plain first record"):
                    self.assertIn("not sealed", str(error))
                if name == "a torn last line":
                    self.assertIs(kind, TornLineError)
                    self.assertEqual(len(facts), len(lines) - 1)

    def test_random_damage_gives_the_careful_outcome(self) -> None:
        import random

        rng = random.Random(37)
        pristine = b"".join(self._sealed())
        for _ in range(200):
            data = bytearray(pristine)
            for _ in range(rng.randint(1, 3)):
                position = rng.randrange(len(data))
                action = rng.randrange(3)
                if action == 0:
                    data[position] = rng.choice(b'{}[]",:\n 0e.\\x\xff')
                elif action == 1:
                    del data[position]
                else:
                    data[position:position] = rng.choice([b"\n", b'"a":1,', b"\r", b"\\u0022", b".0"])
            self.assert_same(bytes(data))


class OneLookALineTest(unittest.TestCase):
    """The careful path decides once a line whether the C encoder's key order is canonical (no astral key)."""

    LINES = {
        "astral value only": ('{"index":0,"tool":"t","args":{"b":"😀","a":1},"response":{"z":"😀"}}', True),
        "astral key in the response": ('{"index":0,"tool":"t","args":{"b":1,"a":1},"response":{"\\uffff":1,"😀":2}}',
                                       False),
        "escaped astral key in the args": ('{"index":0,"tool":"t","args":{"\\ud83d\\ude00":1,"\\uffff":2},'
                                           '"response":{}}', False),
        "escaped astral value": ('{"index":0,"tool":"t","args":{"a":"\\ud83d\\ude00"},"response":{}}', True),
    }

    def test_each_part_is_canonical(self) -> None:
        for name, (line, fast) in self.LINES.items():
            with self.subTest(name):
                record = next(iter_records(io.BytesIO(line.encode()), "s", check_sequence=True, require_sealed=False))
                self.assertEqual(record.fast_canonical, fast)
                self.assertEqual(record.canonical_args, canonical_bytes(record.args))
                self.assertEqual(record.canonical_response, canonical_bytes(record.response))
                self.assertEqual(record.canonical_record, canonical_bytes(
                    {"index": 0, "tool": "t", "args": record.args, "response": record.response}))
                self.assertEqual(record.canonical_call, canonical_bytes({"args": record.args, "tool": "t"}))
                self.assertEqual(record.canonical_response_text, canonical_json(record.response))

    def test_the_call_and_the_response_text_of_every_value(self) -> None:
        # A fast record's call is one encoding of the pair, its response text not encoded to bytes:
        # both as canonical as the careful route's, on every hard value.
        for value in VALUES:
            with self.subTest(value=value):
                line = json.dumps({"index": 0, "tool": "tool ✓", "args": value, "response": {"r": value}}) + "\n"
                record = next(iter_records(io.BytesIO(line.encode()), "s", check_sequence=True,
                                           require_sealed=False))
                self.assertEqual(record.canonical_call, canonical_bytes({"args": value, "tool": "tool ✓"}))
                self.assertEqual(record.canonical_response_text, canonical_json({"r": value}))


if __name__ == "__main__":
    unittest.main()
