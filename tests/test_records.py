"""The session parser of SPEC.md §2: every rule, each invalid input with its exact message."""

from __future__ import annotations

import io
import os
import tempfile
import unittest

from toolreplay.errors import InputError, UsageError
from toolreplay.format.records import (
    LINK_FIELDS,
    READ_BUFFER,
    RECORD_FIELDS,
    Record,
    TornLineError,
    format_record,
    open_input,
    read_links,
    read_session,
)

GOOD = b'{"index": 0, "tool": "ok", "args": {}, "response": {}}\n'
ZEROS = "0" * 64
HEX = "ab" * 32


def _line(body: str) -> bytes:
    return body.encode("utf-8") + b"\n"


def _link(index: int, prev: str = ZEROS, digest: str = HEX, tool: str = "t") -> bytes:
    return _line(
        f'{{"index": {index}, "tool": "{tool}", "args": {{}}, "response": {{}}, '
        f'"prev": "{prev}", "digest": "{digest}"}}'
    )


def _read(data: bytes, path: str = "s.jsonl") -> list[Record]:
    return list(read_session(io.BytesIO(data), path))


# Each bad record is line 2, after a good one: (name, bytes of line 2, exact message).
BAD_SECOND_LINE = [
    (
        "not json",
        b'{"index": 1, "tool": "t", "args": {}, "response": {}\n',
        "invalid JSON: Expecting ',' delimiter (column 53)",
    ),
    (
        "trailing garbage",
        b'{"index": 1, "tool": "t", "args": {}, "response": {}} x\n',
        "invalid JSON: Extra data (column 55)",
    ),
    ("two records on one line", GOOD.rstrip(b"\n") + b" " + GOOD, "invalid JSON: Extra data (column 56)"),
    ("array", b"[1, 2]\n", "record must be a JSON object, not array"),
    ("string", b'"x"\n', "record must be a JSON object, not string"),
    ("number", b"1\n", "record must be a JSON object, not number"),
    ("null", b"null\n", "record must be a JSON object, not null"),
    ("boolean", b"true\n", "record must be a JSON object, not boolean"),
    (
        "unknown field",
        b'{"index": 1, "tool": "t", "args": {}, "response": {}, "extra": 1}\n',
        'unknown field "extra"',
    ),
    ("missing response", b'{"index": 1, "tool": "t", "args": {}}\n', 'missing field "response"'),
    ("missing index", b'{"tool": "t", "args": {}, "response": {}}\n', 'missing field "index"'),
    ("empty object", b"{}\n", 'missing field "index"'),
    (
        "bool index",
        b'{"index": true, "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must be an integer, not boolean',
    ),
    (
        "float index 1.0",
        b'{"index": 1.0, "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must be an integer, not a number with a fraction or exponent',
    ),
    (
        "float index 1e0",
        b'{"index": 1e0, "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must be an integer, not a number with a fraction or exponent',
    ),
    (
        "float index 1.5",
        b'{"index": 1.5, "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must be an integer, not a number with a fraction or exponent',
    ),
    (
        "string index",
        b'{"index": "1", "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must be an integer, not string',
    ),
    (
        "null index",
        b'{"index": null, "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must be an integer, not null',
    ),
    (
        "negative index",
        b'{"index": -1, "tool": "t", "args": {}, "response": {}}\n',
        'field "index" must not be negative, got -1',
    ),
    (
        "index gap",
        b'{"index": 2, "tool": "t", "args": {}, "response": {}}\n',
        "index 2 out of order: expected 1",
    ),
    (
        "index repeated",
        b'{"index": 0, "tool": "t", "args": {}, "response": {}}\n',
        "index 0 out of order: expected 1",
    ),
    (
        "tool number",
        b'{"index": 1, "tool": 5, "args": {}, "response": {}}\n',
        'field "tool" must be a string, not number',
    ),
    (
        "tool null",
        b'{"index": 1, "tool": null, "args": {}, "response": {}}\n',
        'field "tool" must be a string, not null',
    ),
    (
        "tool array",
        b'{"index": 1, "tool": ["t"], "args": {}, "response": {}}\n',
        'field "tool" must be a string, not array',
    ),
    (
        "empty tool",
        b'{"index": 1, "tool": "", "args": {}, "response": {}}\n',
        'field "tool" must not be empty',
    ),
    (
        "args array",
        b'{"index": 1, "tool": "t", "args": [], "response": {}}\n',
        'field "args" must be an object, not array',
    ),
    (
        "args null",
        b'{"index": 1, "tool": "t", "args": null, "response": {}}\n',
        'field "args" must be an object, not null',
    ),
    (
        "response string",
        b'{"index": 1, "tool": "t", "args": {}, "response": "ok"}\n',
        'field "response" must be an object, not string',
    ),
    (
        "response number",
        b'{"index": 1, "tool": "t", "args": {}, "response": 1}\n',
        'field "response" must be an object, not number',
    ),
    (
        "duplicate key deep",
        b'{"index": 1, "tool": "t", "args": {"a": {"b": 1, "b": 2}}, "response": {}}\n',
        'duplicate key "b"',
    ),
    (
        "duplicate key in array",
        b'{"index": 1, "tool": "t", "args": {}, "response": {"a": [{"k": 1, "k": 1}]}}\n',
        'duplicate key "k"',
    ),
    (
        "duplicate key by escape",
        b'{"index": 1, "tool": "t", "args": {"a": 1, "\\u0061": 2}, "response": {}}\n',
        'duplicate key "a"',
    ),
    (
        "duplicate field",
        b'{"index": 1, "index": 1, "tool": "t", "args": {}, "response": {}}\n',
        'duplicate key "index"',
    ),
    ("NaN", b'{"index": 1, "tool": "t", "args": {"x": NaN}, "response": {}}\n', "NaN is not allowed in JSON"),
    (
        "Infinity",
        b'{"index": 1, "tool": "t", "args": {}, "response": {"x": Infinity}}\n',
        "Infinity is not allowed in JSON",
    ),
    (
        "-Infinity",
        b'{"index": 1, "tool": "t", "args": {}, "response": {"x": -Infinity}}\n',
        "-Infinity is not allowed in JSON",
    ),
    (
        "1e400",
        b'{"index": 1, "tool": "t", "args": {"x": 1e400}, "response": {}}\n',
        "number 1e400 overflows a double",
    ),
    (
        "-1e400",
        b'{"index": 1, "tool": "t", "args": {"x": -1e400}, "response": {}}\n',
        "number -1e400 overflows a double",
    ),
    (
        "lone surrogate in value",
        b'{"index": 1, "tool": "t", "args": {"x": "\\ud800"}, "response": {}}\n',
        "string holds a lone surrogate (invalid Unicode escape)",
    ),
    (
        "lone low surrogate in key",
        b'{"index": 1, "tool": "t", "args": {}, "response": {"\\udc00": 1}}\n',
        "string holds a lone surrogate (invalid Unicode escape)",
    ),
    (
        "lone surrogate in tool",
        b'{"index": 1, "tool": "\\ud800", "args": {}, "response": {}}\n',
        "string holds a lone surrogate (invalid Unicode escape)",
    ),
    (
        "lone surrogate with exotic number",
        b'{"index": 1, "tool": "t", "args": {"x": "\\ud800", "n": 1e30}, "response": {}}\n',
        "string holds a lone surrogate (invalid Unicode escape)",
    ),
    (
        "invalid UTF-8",
        b'{"index": 1, "tool": "t", "args": {"x": "\xff"}, "response": {}}\n',
        "invalid UTF-8 (byte 0xff at byte offset 41)",
    ),
    (
        "truncated UTF-8",
        b'{"index": 1, "tool": "t", "args": {"x": "\xc3"}, "response": {}}\n',
        "invalid UTF-8 (byte 0xc3 at byte offset 41)",
    ),
    (
        "BOM after line 1",
        b'\xef\xbb\xbf{"index": 1, "tool": "t", "args": {}, "response": {}}\n',
        "invalid JSON: Expecting value (column 1)",
    ),
    (
        "100,000 nested arrays",
        b'{"index": 1, "tool": "t", "args": {"x": ' + b"[" * 100000 + b"]" * 100000 + b'}, "response": {}}\n',
        "nesting deeper than 512",
    ),
    (
        "100,000 nested objects",
        b'{"index": 1, "tool": "t", "args": '
        + b'{"a":' * 100000
        + b"1"
        + b"}" * 100000
        + b', "response": {}}\n',
        "nesting deeper than 512",
    ),
    (
        "sealed link after a plain record",
        _link(1),
        "sealed link in a file of plain records (prev and digest are not record fields)",
    ),
    (
        "prev after a plain record",
        _line(f'{{"index": 1, "tool": "t", "args": {{}}, "response": {{}}, "prev": "{ZEROS}"}}'),
        'unknown field "prev"',
    ),
]

# Whole files whose error is on line 1: (name, file bytes, exact message).
BAD_FIRST_LINE = [
    (
        "index from 1",
        b'{"index": 1, "tool": "t", "args": {}, "response": {}}\n',
        "index must start at 0, got 1",
    ),
    (
        "BOM",
        b'\xef\xbb\xbf{"index": 0, "tool": "t", "args": {}, "response": {}}\n',
        "byte-order mark at start of file (UTF-8 without BOM expected)",
    ),
    (
        "BOM before a blank line",
        b"\xef\xbb\xbf\n" + GOOD,
        "byte-order mark at start of file (UTF-8 without BOM expected)",
    ),
    (
        "lone prev",
        _line(f'{{"index": 0, "tool": "t", "args": {{}}, "response": {{}}, "prev": "{ZEROS}"}}'),
        'missing field "digest"',
    ),
    ("prev not hex", _link(0, prev="x" * 64), 'field "prev" must be 64 lower-case hex characters'),
    ("prev upper-case", _link(0, prev="AB" * 32), 'field "prev" must be 64 lower-case hex characters'),
    ("prev too short", _link(0, prev="0" * 63), 'field "prev" must be 64 lower-case hex characters'),
    ("digest too long", _link(0, digest="0" * 65), 'field "digest" must be 64 lower-case hex characters'),
    (
        "digest number",
        _line(f'{{"index": 0, "tool": "t", "args": {{}}, "response": {{}}, "prev": "{ZEROS}", "digest": 1}}'),
        'field "digest" must be 64 lower-case hex characters',
    ),
]


class ParserErrorTest(unittest.TestCase):
    def assert_error(self, data: bytes, line: int, message: str) -> None:
        with self.assertRaises(InputError) as caught:
            _read(data)
        self.assertEqual(str(caught.exception), f"s.jsonl:{line}: {message}")
        self.assertEqual(
            (caught.exception.path, caught.exception.line, caught.exception.message),
            ("s.jsonl", line, message),
        )

    def test_bad_second_line(self) -> None:
        for name, data, message in BAD_SECOND_LINE:
            with self.subTest(name):
                self.assert_error(GOOD + data, 2, message)

    def test_bad_first_line(self) -> None:
        for name, data, message in BAD_FIRST_LINE:
            with self.subTest(name):
                self.assert_error(data, 1, message)

    def test_line_number_counts_blank_lines(self) -> None:
        bad = b'{"index": 3, "tool": "t", "args": {}, "response": {}}\n'
        self.assert_error(GOOD + b"\n   \n\t\r\n" + bad, 5, "index 3 out of order: expected 1")

    def test_line_number_counts_crlf_lines(self) -> None:
        crlf = GOOD.replace(b"\n", b"\r\n")
        self.assert_error(crlf + b"\r\n" + b"[]\r\n", 3, "record must be a JSON object, not array")

    def test_error_on_last_line_without_newline(self) -> None:
        self.assert_error(
            GOOD + b"{", 2, "invalid JSON: Expecting property name enclosed in double quotes (column 2)"
        )

    def test_integer_beyond_the_interpreter_limit_is_an_input_error(self) -> None:
        # Python refuses to convert integers of more than 4300 digits: a documented limit, a plain message.
        data = GOOD + b'{"index": 1, "tool": "t", "args": {"x": ' + b"9" * 5000 + b'}, "response": {}}\n'
        self.assert_error(data, 2, "invalid number: an integer of more than 4300 digits is not supported "
                                   "(column 41)")
        # A string of digits before it is not the number: the column is the integer's.
        data = GOOD + (b'{"index": 1, "tool": "t", "args": {"s": "' + b"1" * 5000 + b'\\"", "x": -' + b"9" * 5000
                       + b'}, "response": {}}\n')
        self.assert_error(data, 2, "invalid number: an integer of more than 4300 digits is not supported "
                                   "(column 5052)")

    def test_integer_of_4300_digits_is_kept_exactly(self) -> None:
        digits = "7" * 4300
        (record,) = _read(
            b'{"index": 0, "tool": "t", "args": {"x": -' + digits.encode() + b'}, "response": {}}\n'
        )
        self.assertEqual(record.canonical_args, b'{"x":-' + digits.encode() + b"}")

    def test_plain_record_after_a_link(self) -> None:
        data = _link(0) + b'{"index": 1, "tool": "t", "args": {}, "response": {}}\n'
        self.assert_error(
            data, 2, "plain record in a sealed file (every line must be a link with prev and digest)"
        )

    def test_link_missing_digest_in_sealed_file(self) -> None:
        data = _link(0) + _line(
            f'{{"index": 1, "tool": "t", "args": {{}}, "response": {{}}, "prev": "{HEX}"}}'
        )
        self.assert_error(data, 2, 'missing field "digest"')

    def test_link_with_unknown_field(self) -> None:
        data = _link(0) + _line(
            f'{{"index": 1, "tool": "t", "args": {{}}, "response": {{}}, "prev": "{HEX}", '
            f'"digest": "{HEX}", "sig": ""}}'
        )
        self.assert_error(data, 2, 'unknown field "sig"')

    def test_sealed_file_index_sequence_checked_by_read_session(self) -> None:
        self.assert_error(_link(0) + _link(2), 2, "index 2 out of order: expected 1")


class ParserAcceptsTest(unittest.TestCase):
    def test_good_records(self) -> None:
        data = (
            b'{"index": 0, "tool": "read_file", "args": {"path": "a"}, "response": {"text": "x"}}\n'
            b'{"response": {}, "args": {"n": 1.0}, "tool": "search", "index": 1}\n'
        )
        records = _read(data)
        self.assertEqual(
            [(r.index, r.tool, r.args, r.response, r.line) for r in records],
            [(0, "read_file", {"path": "a"}, {"text": "x"}, 1), (1, "search", {"n": 1}, {}, 2)],
        )
        self.assertEqual([(r.prev, r.digest) for r in records], [(None, None), (None, None)])

    def test_empty_file(self) -> None:
        self.assertEqual(_read(b""), [])
        self.assertEqual(_read(b"\n \n\r\n"), [])

    def test_last_line_without_newline(self) -> None:
        self.assertEqual([r.index for r in _read(GOOD + GOOD.replace(b"0", b"1").rstrip(b"\n"))], [0, 1])

    def test_crlf_u2028_u0085_and_lone_cr_are_not_line_breaks(self) -> None:
        text = (
            '{"index": 0, "tool": "t", "args": {"s": "a\u2028b\u0085c\u2029d"}, "response": {}}\r\n\r\n'
            '{"index": 1,\r"tool": "t",\r"args": {"s": "a\u2028b\u0085c\u2029d"}, "response": {}}\r\n'
        )
        records = _read(text.encode("utf-8"))
        self.assertEqual(
            [(r.index, r.line, r.args["s"]) for r in records],
            [(0, 1, "a\u2028b\u0085c\u2029d"), (1, 3, "a\u2028b\u0085c\u2029d")],
        )
        self.assertEqual(records[0].canonical_args, '{"s":"a\u2028b\u0085c\u2029d"}'.encode())

    def test_canonical_parts(self) -> None:
        data = _line(
            '{"index": 0, "tool": "read_file", "args": {"path": "docs/intro.md"}, '
            '"response": {"text": "héllo", "n": 1.0}}'
        )
        (record,) = _read(data)
        self.assertEqual(record.canonical_tool, b'"read_file"')
        self.assertEqual(record.canonical_args, b'{"path":"docs/intro.md"}')
        self.assertEqual(record.canonical_response, '{"n":1,"text":"héllo"}'.encode())
        self.assertEqual(record.canonical_call, b'{"args":{"path":"docs/intro.md"},"tool":"read_file"}')
        self.assertEqual(
            record.canonical_record,
            '{"args":{"path":"docs/intro.md"},"index":0,'
            '"response":{"n":1,"text":"héllo"},"tool":"read_file"}'.encode(),
        )

    def test_identical_calls_have_identical_canonical_call(self) -> None:
        data = (
            b'{"index": 0, "tool": "t", "args": {"b": 1, "a": 2}, "response": {}}\n'
            b'{"index": 1, "tool": "t", "args": {"a": 2.0, "b": 1e0}, "response": {"x": 1}}\n'
        )
        first, second = _read(data)
        self.assertEqual(first.canonical_call, second.canonical_call)
        self.assertNotEqual(first.canonical_response, second.canonical_response)

    def test_sealed_file_read_as_session(self) -> None:
        records = _read(_link(0, tool="a") + b"\n" + _link(1, prev=HEX, digest=ZEROS, tool="b"))
        self.assertEqual(
            [(r.index, r.tool, r.line, r.prev, r.digest) for r in records],
            [(0, "a", 1, ZEROS, HEX), (1, "b", 3, HEX, ZEROS)],
        )

    def test_read_links_keeps_any_index_order(self) -> None:
        links = list(read_links(io.BytesIO(_link(5) + _link(5) + _link(0)), "x"))
        self.assertEqual([r.index for r in links], [5, 5, 0])

    def test_read_links_of_a_plain_session_says_not_sealed(self) -> None:
        with self.assertRaises(InputError) as caught:
            list(read_links(io.BytesIO(GOOD), "x"))
        self.assertEqual(
            str(caught.exception),
            "x:1: not sealed: a plain session (no prev and digest); seal it with 'toolreplay seal'",
        )

    def test_read_links_rejects_a_plain_record_after_a_link(self) -> None:
        with self.assertRaises(InputError) as caught:
            list(read_links(io.BytesIO(_link(0) + GOOD), "x"))
        self.assertEqual(
            str(caught.exception),
            "x:2: plain record in a sealed file (every line must be a link with prev and digest)",
        )

    def test_streams_records_before_reading_the_rest(self) -> None:
        records = read_session(io.BytesIO(GOOD + b"not json\n"), "s")
        self.assertEqual(next(records).index, 0)
        with self.assertRaises(InputError):
            next(records)

    def test_field_constants(self) -> None:
        self.assertEqual(RECORD_FIELDS, ("index", "tool", "args", "response"))
        self.assertEqual(LINK_FIELDS, ("index", "tool", "args", "response", "prev", "digest"))


class OpenInputTest(unittest.TestCase):
    def test_dash_is_stdin(self) -> None:
        stdin = io.BytesIO(GOOD)
        with open_input("-", stdin) as handle:
            self.assertIs(handle, stdin)
            self.assertEqual([r.index for r in read_session(handle, "<stdin>")], [0])

    def test_missing_file_is_usage_error(self) -> None:
        with self.assertRaises(UsageError) as caught:
            with open_input("no/such/file.jsonl"):
                pass
        self.assertEqual(str(caught.exception), "cannot read no/such/file.jsonl: No such file or directory")

    def test_a_file_is_read_a_mebibyte_at_a_time(self) -> None:
        # Not the file system's block size (4 KiB): a read call per few records of a large session.
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "s.jsonl")
            lines = [b'{"index": %d, "tool": "ok", "args": {}, "response": {}}\n' % index for index in range(60000)]
            with open(path, "wb") as out:
                out.write(b"".join(lines))
            self.assertGreater(os.path.getsize(path), 3 * READ_BUFFER)
            with open_input(path) as handle:
                self.assertEqual(len(handle.peek(1)), READ_BUFFER)  # type: ignore[attr-defined]
                self.assertEqual([record.index for record in read_session(handle, path)], list(range(60000)))
        self.assertEqual(READ_BUFFER, 1 << 20)


class FormatRecordTest(unittest.TestCase):
    def test_byte_format(self) -> None:
        self.assertEqual(
            format_record(3, "search", {"q": "é", "n": 1.5}, {"ok": True}),
            '{"index": 3, "tool": "search", "args": {"q": "\\u00e9", "n": 1.5}, "response": {"ok": true}}',
        )

    def test_round_trip(self) -> None:
        line = format_record(0, "t", {"b": [1, None]}, {"a": "x\ny"})
        (record,) = _read(line.encode() + b"\n")
        self.assertEqual(
            (record.index, record.tool, record.args, record.response),
            (0, "t", {"b": [1, None]}, {"a": "x\ny"}),
        )


class _Counting(io.BytesIO):
    """A stream that remembers the largest read it was asked for and the bytes it handed out."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.largest = 0

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self.largest = max(self.largest, len(line))
        return line

    def __iter__(self) -> _Counting:
        raise AssertionError("the reader must read lines with a bound, not iterate")


class LineLimitTest(unittest.TestCase):
    def test_a_line_longer_than_the_limit_is_an_input_error_read_no_further(self) -> None:
        long = b'{"index": 1, "tool": "t", "args": {"x": "' + b"y" * 500 + b'"}, "response": {}}\n'
        stream = _Counting(GOOD + long + GOOD)
        with self.assertRaises(InputError) as caught:
            list(read_session(stream, "s", max_line=100))
        self.assertEqual(str(caught.exception), "s:2: line longer than 100 bytes")
        self.assertEqual(stream.largest, 101)

    def test_a_line_of_exactly_the_limit_is_read(self) -> None:
        for data in (GOOD, GOOD.rstrip(b"\n")):  # with its line break, and as a last line without one
            limit = len(GOOD.rstrip(b"\n"))
            self.assertEqual([r.index for r in read_session(io.BytesIO(data), "s", max_line=limit)], [0])
            with self.assertRaises(InputError):
                list(read_session(io.BytesIO(data), "s", max_line=limit - 1))

    def test_an_endless_line_without_a_break(self) -> None:
        class Zeros(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
                buffer[:] = bytes(len(buffer))
                return len(buffer)

        with self.assertRaises(InputError) as caught:
            list(read_session(io.BufferedReader(Zeros()), "/dev/zero", max_line=1 << 16))  # type: ignore[arg-type]
        self.assertEqual(str(caught.exception), "/dev/zero:1: line longer than 65536 bytes")


class TornLastLineTest(unittest.TestCase):
    def test_an_unparsable_last_line_without_a_break_is_torn(self) -> None:
        torn = GOOD[:30]
        with self.assertRaises(TornLineError) as caught:
            list(read_session(io.BytesIO(GOOD + torn), "s"))
        self.assertEqual((caught.exception.line, caught.exception.size), (2, 30))
        self.assertTrue(str(caught.exception).startswith("s:2: invalid JSON"))

    def test_a_cut_multibyte_character_is_torn(self) -> None:
        with self.assertRaises(TornLineError):
            list(read_session(io.BytesIO(GOOD + '{"index": 1, "tool": "é'.encode()[:-1]), "s"))

    def test_not_torn_a_bad_line_in_the_middle_or_a_whole_last_value(self) -> None:
        for data in (GOOD + GOOD[:30] + b"\n" + GOOD, GOOD + b'{"index": 1}'):
            with self.assertRaises(InputError) as caught:
                list(read_session(io.BytesIO(data), "s"))
            self.assertNotIsInstance(caught.exception, TornLineError)


if __name__ == "__main__":
    unittest.main()
