"""The reading of plain records for a caller that encodes them (`records._encoded_parts`, replay and seal)
against the careful path: the same records, canonical bytes and errors, line by line.

Duplicate keys are found there by counting colons instead of a hook per object: every way to hide one
(nested, in arrays, in meta, behind white space, escaped keys, escaped colons and quotes, colons in keys
and values) must reach the careful path and its message.
"""

from __future__ import annotations

import io
import json
import random
import unittest
from typing import Any

from tests.test_records import BAD_SECOND_LINE, GOOD
from tests.test_records_links import VALUES
from toolreplay.audit.chain import seal_fact
from toolreplay.audit.replay import call_fact
from toolreplay.errors import InputError
from toolreplay.format.canonical import canonical_bytes, canonical_json
from toolreplay.format.records import PLAIN_FACTS, Record, _encoded_parts, iter_facts, iter_records
from toolreplay.format.strictjson import StrictLoader

FIELDS = ("index", "tool", "args", "response", "line", "prev", "digest", "fast_canonical", "meta")


def _read(data: bytes, encodes: bool) -> tuple[list[Record], str | None]:
    records: list[Record] = []
    try:
        for record in iter_records(io.BytesIO(data), "s.jsonl", check_sequence=True, require_sealed=False,
                                   encodes=encodes):
            records.append(record)
    except InputError as exc:
        return records, str(exc)
    return records, None


def _parts(record: Record) -> tuple[Any, ...]:
    return (tuple(repr(getattr(record, field)) for field in FIELDS), record.canonical_args,
            record.canonical_response, record.canonical_response_text, record.canonical_call, record.canonical_meta,
            record.canonical_record, record.canonical_tool)


def _taken(line: str) -> bool:
    """Whether the line is read without the careful path."""
    return _encoded_parts(line.encode() + b"\n", StrictLoader()) is not None


# Lines with a duplicate key hidden somewhere: each is the careful path's "duplicate key" error.
DUPLICATES = {
    "top level": '{"index":0,"tool":"t","tool":"t","args":{},"response":{}}',
    "top level, the same value": '{"index":0,"tool":"t","args":{},"response":{},"response":{}}',
    "in args": '{"index":0,"tool":"t","args":{"a":1,"a":1},"response":{}}',
    "deep in an array": '{"index":0,"tool":"t","args":{"x":[1,[{"k":[{"a":1,"b":2,"a":3}]}]]},"response":{}}',
    "in the response": '{"index":0,"tool":"t","args":{},"response":{"r":{"z":null,"z":null}}}',
    "in meta": '{"index":0,"tool":"t","args":{},"response":{},"meta":{"turn":1,"turn":1}}',
    "white space around colons": '{"index" : 0 , "tool" : "t" , "args" : { "a" : 1 , "a" : 2 } , "response" : {}}',
    "an escaped key": '{"index":0,"tool":"t","args":{"a":1,"\\u0061":1},"response":{}}',
    "an escaped quote in the key": '{"index":0,"tool":"t","args":{"a\\"":1,"a\\u0022":1},"response":{}}',
    "an escaped colon in a value": '{"index":0,"tool":"t","args":{"a":1,"a":1,"s":"\\u003a"},"response":{}}',
    "an escaped colon in a key": '{"index":0,"tool":"t","args":{"\\u003A":1,"a":1,"a":1},"response":{}}',
    "colons in keys and values": '{"index":0,"tool":"t:t","args":{"a:b":"c:d","a:b":"c:d"},"response":{}}',
    "an empty key twice": '{"index":0,"tool":"t","args":{"":0,"":0},"response":{}}',
    "escaped slash key": '{"index":0,"tool":"t","args":{"/":1,"\\/":1},"response":{}}',
    "offset by exponents": '{"index":0,"tool":"t","args":{"a":1,"a":1,"f":[1e-4,1e-4,1e-4]},"response":{}}',
}

# Lines without a duplicate that the fast reading must take (and read as the careful path does).
TAKEN = {
    "plain": '{"index": 0, "tool": "t", "args": {"q": "x"}, "response": {"ok": true}}',
    "colons everywhere": '{"index":0,"tool":"ns:tool","args":{"a:b":"c::d","url":"http://x:80/"},"response":{":":":"}}',
    "escapes other than a colon": '{"index":0,"tool":"t","args":{"\\u0061":"\\u00e9\\n\\"\\\\\\/"},"response":{}}',
    "meta": '{"index":0,"tool":"t","args":{},"response":{},"meta":{"ts":"2026-12-01T16:00:00.123Z","x-k":"a:b"}}',
    "floats": '{"index":0,"tool":"t","args":{"f":[0.5,1.0,-0.0,1E2]},"response":{"n":123456789012345678901234}}',
    "a surrogate pair in a value": '{"index":0,"tool":"t","args":{"s":"\\ud83d\\ude00 \\uD83D\\uDE00"},"response":{}}',
    "a pair in a value before a colon": '{"index":0,"tool":"t","args":{"s":"\\ud83d\\ude00 : x"},"response":{}}',
    "an astral value written as itself": '{"index":0,"tool":"t","args":{"s":"😀","\\uffff":"😀"},"response":{}}',
    "a pair in the tool and meta": '{"index":0,"tool":"t\\ud83d\\ude00","args":{},"response":{},'
                                   '"meta":{"x-k":"\\ud83d\\ude00"}}',
}

# Lines the careful path must read (unusual, or an error it names).
NOT_TAKEN = {
    "a lone surrogate": '{"index":0,"tool":"t","args":{"a":"\\ud800"},"response":{}}',
    "a lone low surrogate": '{"index":0,"tool":"t","args":{},"response":{"a":"x\\uDC00"}}',
    "half a pair after an escaped backslash": '{"index":0,"tool":"t","args":{"a":"\\\\ud83d\\ude00"},"response":{}}',
    "two highs": '{"index":0,"tool":"t","args":{"a":"\\ud83d\\ud83d"},"response":{}}',
    "a lone surrogate in the tool": '{"index":0,"tool":"t\\udfff","args":{},"response":{}}',
    "a lone surrogate in meta": '{"index":0,"tool":"t","args":{},"response":{},"meta":{"x-k":"\\ud800"}}',
    "an escaped astral key after a colon": '{"index":0,"tool":"t","args":{"a:\\ud83d\\ude00\\"":1,"\\uffff":2},'
                                           '"response":{}}',
    "an escaped astral key": '{"index":0,"tool":"t","args":{"\\ud83d\\ude00":1,"\\uffff":2},"response":{}}',
    "an astral key": '{"index":0,"tool":"t","args":{"😀":1,"\\uffff":2},"response":{}}',
    "an escaped colon": '{"index":0,"tool":"t","args":{"s":"\\u003a"},"response":{}}',
    "an escaped backslash before u003a": '{"index":0,"tool":"t","args":{"s":"\\\\u003a"},"response":{}}',
    "an exotic float": '{"index":0,"tool":"t","args":{"f":1e-7},"response":{}}',
    "overflow": '{"index":0,"tool":"t","args":{"f":1e400},"response":{}}',
    "NaN": '{"index":0,"tool":"t","args":{"f":NaN},"response":{}}',
    "leading white space": ' {"index":0,"tool":"t","args":{},"response":{}}',
    "a bad date": '{"index":0,"tool":"t","args":{},"response":{},"meta":{"ts":"2026-02-29T00:00:00Z"}}',
    "a link": '{"index":0,"tool":"t","args":{},"response":{},"prev":"' + "0" * 64 + '","digest":"' + "a" * 64 + '"}',
    "deep nesting": '{"index":0,"tool":"t","args":{"a":' + "[" * 600 + "]" * 600 + '},"response":{}}',
}


VALID_NOT_TAKEN = ("an escaped astral key", "an astral key", "an escaped colon", "an escaped backslash before u003a",
                   "an exotic float", "an escaped astral key after a colon")


class EncodedReadingTest(unittest.TestCase):
    def assert_same(self, data: bytes) -> tuple[list[Record], str | None]:
        fast, fast_error = _read(data, True)
        careful, careful_error = _read(data, False)
        self.assertEqual(fast_error, careful_error)
        self.assertEqual([_parts(record) for record in fast], [_parts(record) for record in careful])
        return fast, fast_error

    def test_every_duplicate_is_the_careful_error(self) -> None:
        for name, line in DUPLICATES.items():
            with self.subTest(name):
                self.assertFalse(_taken(line))
                _, error = self.assert_same(GOOD + line.replace('"index":0', '"index":1', 1).encode() + b"\n")
                assert error is not None
                self.assertRegex(error, r"^s\.jsonl:2: duplicate key ")

    def test_lines_without_duplicates_are_taken_and_read_alike(self) -> None:
        for name, line in TAKEN.items():
            with self.subTest(name):
                self.assertTrue(_taken(line))
                records, error = self.assert_same(line.encode() + b"\n")
                self.assertIsNone(error)
                record = records[0]
                self.assertIsNotNone(record.texts)
                self.assertEqual(record.canonical_record, canonical_bytes(json.loads(line)))
                self.assertEqual(record.canonical_call, canonical_bytes({"args": record.args, "tool": record.tool}))

    def test_unusual_lines_go_to_the_careful_path(self) -> None:
        for name, line in NOT_TAKEN.items():
            with self.subTest(name):
                self.assertFalse(_taken(line))
                self.assert_same(line.encode() + b"\n")

    def test_every_hard_value(self) -> None:
        for value in VALUES:
            with self.subTest(value=value):
                line = json.dumps({"index": 0, "tool": "tool ✓", "args": value, "response": {"r": value}}) + "\n"
                records, error = self.assert_same(line.encode())
                self.assertIsNone(error)
                self.assertEqual(records[0].canonical_response_text, canonical_json({"r": value}))

    def test_every_error_of_the_parser_table(self) -> None:
        for name, data, message in BAD_SECOND_LINE:
            with self.subTest(name):
                _, error = self.assert_same(GOOD + data)
                self.assertEqual(error, f"s.jsonl:2: {message}")

    def test_index_order_and_a_torn_last_line(self) -> None:
        lines = [f'{{"index":{i},"tool":"t","args":{{"i":{i}}},"response":{{}}}}\n'.encode() for i in range(5)]
        self.assertEqual(self.assert_same(b"".join(lines[:2] + lines[3:]))[1],
                         "s.jsonl:3: index 3 out of order: expected 2")
        self.assertEqual(self.assert_same(b"".join(lines[:4]) + lines[4][:-5])[1][:10], "s.jsonl:5:")
        self.assertEqual(len(self.assert_same(b"".join(lines[:4]) + lines[4][:-1])[0]), 5)

    def test_facts_made_without_a_record_are_the_records_facts(self) -> None:
        lines = [line.replace('"index":0', f'"index":{i}', 1).replace('"index": 0', f'"index": {i}', 1)
                 for i, line in enumerate([*TAKEN.values(), *(NOT_TAKEN[name] for name in VALID_NOT_TAKEN)])]
        lines += [json.dumps({"index": len(lines) + i, "tool": "t", "args": {"v": value}, "response": {"r": value},
                              **({"meta": {"outcome": "refused", "mutates": True}} if i % 2 else {})})
                  for i, value in enumerate(VALUES)]
        data = "\n".join(lines).encode() + b"\n"
        for extract in (seal_fact, call_fact):
            with self.subTest(extract.__name__):
                self.assertIn(extract, PLAIN_FACTS)
                expected = [extract(record) for record in _read(data, True)[0]]
                self.assertEqual(len(expected), len(lines))
                self.assertEqual(list(iter_facts(io.BytesIO(data), "s.jsonl", extract, check_sequence=True)),
                                 expected)
                for name, line in DUPLICATES.items():  # and the same error, after the same facts
                    bad = data + line.replace('"index":0', f'"index":{len(lines)}', 1).encode() + b"\n"
                    facts = iter_facts(io.BytesIO(bad), "s.jsonl", extract, check_sequence=True)
                    with self.subTest(name), self.assertRaises(InputError) as caught:
                        self.assertEqual([next(facts) for _ in expected], expected)
                        next(facts)
                    self.assertEqual(str(caught.exception), _read(bad, False)[1])

    def test_random_damage_gives_the_careful_outcome(self) -> None:
        rng = random.Random(37)
        lines = [json.dumps({"index": i, "tool": "t:x", "args": {"a": i, "s": "a:b", "l": [{"k": 1.5}]},
                             "response": {"v": VALUES[i % len(VALUES)]}}) + "\n" for i in range(12)]
        pristine = "".join(lines).encode()
        for _ in range(300):
            data = bytearray(pristine)
            for _ in range(rng.randint(1, 3)):
                position = rng.randrange(len(data))
                action = rng.randrange(3)
                if action == 0:
                    data[position] = rng.choice(b'{}[]",:\n 0e.\\x')
                elif action == 1:
                    del data[position]
                else:
                    data[position:position] = rng.choice([b'"a":1,', b'"k":2,', b"\\u003a", b"\\u0061", b" : "])
            self.assert_same(bytes(data))


if __name__ == "__main__":
    unittest.main()
