"""Canonical JSON (SPEC.md §3): RFC 8785 vectors, number forms, key order, and both encoding routes."""

from __future__ import annotations

import io
import json
import os
import random
import struct
import unittest
from typing import Any

from toolreplay.audit.chain import GENESIS, link_digest, seal_records
from toolreplay.errors import InputError
from toolreplay.format.canonical import CanonicalError, canonical_bytes, canonical_json, format_number
from toolreplay.format.records import read_session
from toolreplay.format.strictjson import StrictLoader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared")
JCS = os.path.join(SHARED, "corpus", "jcs")
SUITE = os.path.join(SHARED, "corpus", "jsontestsuite")
WRAPPED = os.path.join(SHARED, "acceptance", "wrapped.tsv")


def _strict_canonical(text: str) -> bytes:
    loader = StrictLoader()
    return loader.canonical(loader.loads(text))


# (float, ECMAScript shortest form)
NUMBERS = [
    (1.0, "1"),
    (-1.0, "-1"),
    (0.0, "0"),
    (-0.0, "0"),
    (1e21, "1e+21"),
    (-1e21, "-1e+21"),
    (1e20, "100000000000000000000"),
    (1e-7, "1e-7"),
    (0.000001, "0.000001"),
    (2e-7, "2e-7"),
    (1.5e-7, "1.5e-7"),
    (0.1, "0.1"),
    (0.5, "0.5"),
    (123.456, "123.456"),
    (1e16, "10000000000000000"),
    (1e17, "100000000000000000"),
    (float(2**60), "1152921504606847000"),
    (float(2**53), "9007199254740992"),
    (2.0**53 + 2, "9007199254740994"),
    (5e-324, "5e-324"),
    (-5e-324, "-5e-324"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (2.2250738585072014e-308, "2.2250738585072014e-308"),
    (333333333.3333333, "333333333.3333333"),
    (1e30, "1e+30"),
    (4.5, "4.5"),
    (0.002, "0.002"),
    (1e-27, "1e-27"),
    (123456789012.5, "123456789012.5"),
    (1.2345e21, "1.2345e+21"),
    (1.2345e20, "123450000000000000000"),
    (1e23, "1e+23"),
    (9.999999999999997e22, "9.999999999999997e+22"),
    (0.0001, "0.0001"),
    (1e-5, "0.00001"),
    (12.5e-7, "0.00000125"),
    (1 / 3, "0.3333333333333333"),
    # the edges of Python's own plain form (1e-4 <= |x| < 1e16), which format_number takes as it is
    (0.00012, "0.00012"),
    (-0.5, "-0.5"),
    (0.123, "0.123"),
    (1e15 + 0.5, "1000000000000000.5"),
    (9999999999999998.0, "9999999999999998"),
    (1e16, "10000000000000000"),
    (1.5e16, "15000000000000000"),
    (0.1 + 0.2, "0.30000000000000004"),
]
INTEGERS = [
    (0, "0"),
    (-7, "-7"),
    (2**53, "9007199254740992"),
    (2**53 + 1, "9007199254740993"),
    (12345678901234567890, "12345678901234567890"),
    (-(10**40) - 1, "-10000000000000000000000000000000000000001"),
]


class NumberTest(unittest.TestCase):
    def test_format_number(self) -> None:
        for value, text in NUMBERS + INTEGERS:
            with self.subTest(value=value):
                self.assertEqual(format_number(value), text)

    def test_parsed_numbers_both_routes(self) -> None:
        for value, text in NUMBERS + INTEGERS:
            with self.subTest(value=value):
                source = repr(value)
                self.assertEqual(_strict_canonical(source), text.encode())
                self.assertEqual(canonical_bytes(json.loads(source)), text.encode())

    def test_number_spellings(self) -> None:
        for source, text in [
            ("1E+2", "100"),
            ("1.0e0", "1"),
            ("-0", "0"),
            ("-0.0e5", "0"),
            ("0.1e-6", "1e-7"),
            ("100e-2", "1"),
            ("2e0", "2"),
            ("12345678901234567890.0", "12345678901234567000"),
        ]:
            with self.subTest(source):
                self.assertEqual(_strict_canonical(f"[{source}]"), f"[{text}]".encode())

    def test_not_finite(self) -> None:
        for value in (float("nan"), float("inf"), float("-inf")):
            with self.subTest(value=value), self.assertRaises(CanonicalError):
                canonical_json([value])


class EncodingTest(unittest.TestCase):
    def test_utf16_key_order_with_astral_keys(self) -> None:
        value = {
            "\uffff": 1,
            "\U0001f600": 2,
            "\ue000": 3,
            "a": 4,
            "\u00e9": 5,
            "\U00010000": 6,
            "": 7,
            "aa": 8,
        }
        want = '{"":7,"a":4,"aa":8,"\u00e9":5,"\U00010000":6,"\U0001f600":2,"\ue000":3,"\uffff":1}'
        self.assertEqual(canonical_json(value), want)
        self.assertEqual(_strict_canonical(json.dumps(value)), want.encode())
        self.assertEqual(_strict_canonical(json.dumps(value, ensure_ascii=False)), want.encode())

    def test_ascii_keys_and_subclasses(self) -> None:
        class Text(str):
            pass

        class Number(int):
            pass

        for value, want in [
            ({"b": 1, "B": 2, "_": 3, "a": 4, "": 5}, '{"":5,"B":2,"_":3,"a":4,"b":1}'),
            ({Text("b"): Number(2), "a": Text("x"), "c": True, "d": [Number(1), Text("y"), 1.5]},
             '{"a":"x","b":2,"c":true,"d":[1,"y",1.5]}'),
        ]:
            with self.subTest(want):
                self.assertEqual(canonical_json(value), want)

    def test_string_escapes(self) -> None:
        value = '\x00\x01\x08\t\n\x0b\x0c\r\x1f "\\/\x7f\u2028\u00e9\U0001f600'
        want = '"\\u0000\\u0001\\b\\t\\n\\u000b\\f\\r\\u001f \\"\\\\/\x7f\u2028\u00e9\U0001f600"'
        self.assertEqual(canonical_json(value), want)
        self.assertEqual(_strict_canonical(json.dumps(value)), want.encode())

    def test_structures(self) -> None:
        self.assertEqual(
            canonical_json({"b": [1, {"d": None, "c": False}], "a": (True, "x")}),
            '{"a":[true,"x"],"b":[1,{"c":false,"d":null}]}',
        )
        self.assertEqual(canonical_json({}), "{}")
        self.assertEqual(canonical_json([]), "[]")

    def test_errors(self) -> None:
        for value, message in [
            ({1: 2}, "object key 1 is not a string"),
            ({"a": 1, None: 2, 3: 4}, "object key None is not a string"),
            ({1.5}, "set is not a JSON value"),
            (b"x", "bytes is not a JSON value"),
        ]:
            with self.subTest(message), self.assertRaises(CanonicalError) as caught:
                canonical_json(value)
            self.assertEqual(str(caught.exception), message)
        with self.assertRaises(CanonicalError) as caught:
            canonical_bytes({"a": "\ud800"})
        self.assertEqual(str(caught.exception), "string holds a lone surrogate")


SPEC_RECORDS = (
    '{"index":0,"tool":"read_file","args":{"path":"docs/intro.md"},"response":{"text":"héllo","n":1.0}}\n'
    '{"index":1,"tool":"search","args":{"q":"install","limit":10},"response":{"count":2e-7,"big":12345678901234567890}}\n'
)
SPEC_CANONICAL = [
    '{"args":{"path":"docs/intro.md"},"index":0,"response":{"n":1,"text":"héllo"},"tool":"read_file"}',
    '{"args":{"limit":10,"q":"install"},"index":1,"response":{"big":12345678901234567890,"count":2e-7},"tool":"search"}',
]
SPEC_DIGESTS = [
    "b22851d4b1f3512b57943baca026cc7ae7f400a408066c9008e0a074d994660c",
    "5a907aa582be564d20ed2dd38b8c5d69bccec06721b50da1ba89901ac7db05f5",
]


class SpecVectorTest(unittest.TestCase):
    def test_canonical_forms(self) -> None:
        for line, want in zip(SPEC_RECORDS.splitlines(), SPEC_CANONICAL, strict=True):
            self.assertEqual(canonical_json(json.loads(line)), want)
            self.assertEqual(_strict_canonical(line), want.encode())

    def test_digests(self) -> None:
        first = link_digest(GENESIS, SPEC_CANONICAL[0].encode())
        self.assertEqual([first, link_digest(first, SPEC_CANONICAL[1].encode())], SPEC_DIGESTS)

    def test_digests_through_parser_and_seal(self) -> None:
        records = list(read_session(io.BytesIO(SPEC_RECORDS.encode()), "v"))
        self.assertEqual([r.canonical_record.decode() for r in records], SPEC_CANONICAL)
        links = [json.loads(line) for line in seal_records(records)]
        self.assertEqual([link["digest"] for link in links], SPEC_DIGESTS)


@unittest.skipUnless(os.path.isdir(JCS), "../shared corpus not present")
class JcsVectorTest(unittest.TestCase):
    def test_every_vector_both_routes(self) -> None:
        names = sorted(os.listdir(os.path.join(JCS, "input")))
        self.assertGreaterEqual(len(names), 6)
        for name in names:
            with self.subTest(name):
                with open(os.path.join(JCS, "input", name), encoding="utf-8") as handle:
                    source = handle.read()
                with open(os.path.join(JCS, "output", name), "rb") as handle:
                    want = handle.read()
                self.assertEqual(canonical_bytes(json.loads(source)), want)
                self.assertEqual(_strict_canonical(source), want)


def _wrap(raw: bytes) -> bytes:
    return b'{"index":0,"tool":"t","args":{"v":' + raw + b'},"response":{}}\n'


def _seal_first_digest(data: bytes) -> str:
    (line,) = seal_records(read_session(io.BytesIO(data), "wrapped.jsonl"))
    return str(json.loads(line)["digest"])


# y_ cases that SPEC.md §2 rejects on purpose: duplicate keys.
STRICTER_THAN_JSON = {
    "y_object_duplicated_key.json": 'duplicate key "a"',
    "y_object_duplicated_key_and_value.json": 'duplicate key "a"',
}


@unittest.skipUnless(os.path.isdir(SUITE), "../shared corpus not present")
class JsonTestSuiteTest(unittest.TestCase):
    def read(self, name: str) -> bytes:
        with open(os.path.join(SUITE, name), "rb") as handle:
            return handle.read()

    def test_y_accepted_as_record_value(self) -> None:
        names = sorted(n for n in os.listdir(SUITE) if n.startswith("y_"))
        self.assertEqual(len(names), 95)
        for name in names:
            raw = self.read(name).replace(b"\n", b" ").replace(b"\r", b" ")
            with self.subTest(name):
                if name in STRICTER_THAN_JSON:
                    with self.assertRaises(InputError) as caught:
                        list(read_session(io.BytesIO(_wrap(raw)), "w"))
                    self.assertEqual(str(caught.exception), f"w:1: {STRICTER_THAN_JSON[name]}")
                    continue
                (record,) = read_session(io.BytesIO(_wrap(raw)), "w")
                self.assertEqual(record.canonical_args, b'{"v":' + canonical_bytes(json.loads(raw)) + b"}")

    def test_n_rejected_as_record_value(self) -> None:
        names = sorted(n for n in os.listdir(SUITE) if n.startswith("n_"))
        self.assertEqual(len(names), 188)
        for name in names:
            with self.subTest(name):
                with self.assertRaises(InputError) as caught:
                    list(read_session(io.BytesIO(_wrap(self.read(name))), "w"))
                self.assertEqual(caught.exception.line, 1)

    @unittest.skipUnless(os.path.isfile(WRAPPED), "acceptance table not present")
    def test_acceptance_table_verdicts_and_digests(self) -> None:
        with open(WRAPPED, encoding="utf-8") as handle:
            rows = [line.rstrip("\n").split("\t") for line in handle if not line.startswith("#")]
        self.assertGreater(len(rows), 300)
        for name, verdict, digest in rows:
            with self.subTest(name):
                with open(os.path.join(SHARED, "corpus", name), "rb") as handle:
                    raw = handle.read()
                if name.startswith("jcs/"):
                    raw = raw.replace(b"\n", b" ").replace(b"\r", b" ")
                if verdict == "accept":
                    self.assertEqual(_seal_first_digest(_wrap(raw)), digest)
                else:
                    with self.assertRaises(InputError):
                        _seal_first_digest(_wrap(raw))


def _random_string(rng: random.Random) -> str:
    pools = [
        "abcxyz",
        '\x00\x1f"\\/\x7f\t\n',
        "éüß\u2028\u0085\ue000\uffff",
        "\U0001f600\U00010000\U0010ffff",
    ]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.randrange(6)))


def _random_float(rng: random.Random) -> float:
    roll = rng.random()
    if roll < 0.4:
        while True:  # any finite double, exponent included
            value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if value == value and abs(value) != float("inf"):
                return float(value)
    if roll < 0.7:
        return round(rng.uniform(-1e6, 1e6), rng.randrange(8))
    if roll < 0.85:
        return float(rng.randrange(-(2**60), 2**60))
    return rng.choice([0.0, -0.0, 1e21, 1e-7, 1e-6, 5e-324, 1e16, 1e15, 0.1])


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.randrange(9 if depth < 4 else 6)
    if roll == 0:
        return rng.choice([None, True, False])
    if roll == 1:
        return rng.choice([rng.randrange(-1000, 1000), rng.getrandbits(100) - 2**99])
    if roll in (2, 3):
        return _random_float(rng)
    if roll in (4, 5):
        return _random_string(rng)
    if roll in (6, 7):
        return {_random_string(rng): _random_value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]


class RoutesAgreeTest(unittest.TestCase):
    def test_fast_route_equals_canonical_json(self) -> None:
        rng = random.Random(8785)
        for case in range(1500):
            value = {"v": _random_value(rng)}
            text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
            with self.subTest(case=case, text=text[:200]):
                self.assertEqual(_strict_canonical(text), canonical_bytes(value))


if __name__ == "__main__":
    unittest.main()
