"""StrictLoader: strict parsing of one JSON text, and its canonical bytes on the fast and slow routes."""

from __future__ import annotations

import sys
import unittest

from toolreplay.format.strictjson import JSONLineError, StrictLoader

# (name, JSON text, exact message, line number the error carries)
BAD = [
    ("empty", "", "invalid JSON: Expecting value (column 1)", 1),
    ("unclosed object", "{", "invalid JSON: Expecting property name enclosed in double quotes (column 2)", 1),
    ("error on line 3", '{\n"a": 1,\n"b" 2}', "invalid JSON: Expecting ':' delimiter (column 5)", 3),
    (
        "single quotes",
        "{'a': 1}",
        "invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        1,
    ),
    # The wording of invalid JSON comes from Python's own decoder, which names trailing commas from 3.13 on.
    ("trailing comma", "[1,]", "invalid JSON: Illegal trailing comma before end of array (column 3)"
     if sys.version_info >= (3, 13) else "invalid JSON: Expecting value (column 4)", 1),
    ("raw control character", '"a\tb"', "invalid JSON: Invalid control character at (column 3)", 1),
    ("duplicate key", '{"a": 1, "a": 1}', 'duplicate key "a"', None),
    ("duplicate key deep", '[{"x": {"y": 1, "z": 2, "y": 3}}]', 'duplicate key "y"', None),
    (
        "long duplicate key",
        '{"' + "k" * 100 + '": 1, "' + "k" * 100 + '": 2}',
        'duplicate key "' + "k" * 56 + '..."',
        None,
    ),
    ("NaN", "[NaN]", "NaN is not allowed in JSON", None),
    ("Infinity", '{"x": Infinity}', "Infinity is not allowed in JSON", None),
    ("-Infinity", "-Infinity", "-Infinity is not allowed in JSON", None),
    ("1e400", "1e400", "number 1e400 overflows a double", None),
    ("-1.5e999", "[-1.5e999]", "number -1.5e999 overflows a double", None),
    ("long overflowing number", "1" * 400 + ".0", "number " + "1" * 40 + " overflows a double", None),
    ("100,000 nested arrays", "[" * 100000 + "]" * 100000, "nesting deeper than 512", 1),
    ("513 nested arrays", "[" * 513 + "]" * 513, "nesting deeper than 512", 1),
    ("too deep on line 2", "[\n" + "[" * 512 + "]" * 513, "nesting deeper than 512", 2),
    # Too deep but too short to parse (a text that parses nests at most half its length deep): the
    # brackets are counted once the parse fails, and too deep still comes before the parser's error.
    ("513 open brackets and nothing else", "[" * 513, "nesting deeper than 512", 1),
    ("513 open brackets, then a duplicate key", "[" * 513 + '{"a": 1, "a": 2}', "nesting deeper than 512", 1),
    ("513 open brackets, then NaN", "[" * 513 + "NaN", "nesting deeper than 512", 1),
    ("513 open brackets on line 2", "1\n" + "{" * 513, "nesting deeper than 512", 2),
    ("512 open brackets and nothing else", "[" * 512, "invalid JSON: Expecting value (column 513)", 1),
    ("ends early, at the end of the line", '{"a": 1\n', "invalid JSON: Expecting ',' delimiter (column 8)", 1),
    ("ends early after CRLF", '{"a":\r\n', "invalid JSON: Expecting value (column 6)", 1),
    ("ends early on line 2", '{\n"a": [1\n\n', "invalid JSON: Expecting ',' delimiter (column 8)", 2),
]


class LoadsTest(unittest.TestCase):
    def test_rejects(self) -> None:
        for name, text, message, lineno in BAD:
            with self.subTest(name):
                with self.assertRaises(JSONLineError) as caught:
                    StrictLoader().loads(text)
                self.assertEqual(str(caught.exception), message)
                self.assertEqual(caught.exception.lineno, lineno)

    def test_512_levels_parse(self) -> None:
        value = StrictLoader().loads("[" * 512 + "]" * 512 + "\n")
        for _ in range(511):
            value = value[0]
        self.assertEqual(value, [])
        self.assertEqual(StrictLoader().loads('["' + "[" * 600 + '"]'), ["[" * 600])

    def test_error_is_value_error(self) -> None:
        self.assertTrue(issubclass(JSONLineError, ValueError))

    def test_accepts(self) -> None:
        loader = StrictLoader()
        self.assertEqual(
            loader.loads('{"a": [1, 2.5, "x", null, true, false, {}]}'),
            {"a": [1, 2.5, "x", None, True, False, {}]},
        )
        self.assertEqual(loader.loads("1e-400"), 0)  # underflow is not overflow
        self.assertEqual(loader.loads("123456789012345678901234567890"), 123456789012345678901234567890)
        self.assertEqual(loader.loads('"\\ud83d\\ude00"'), "\U0001f600")
        self.assertEqual(loader.loads('{"a": 1, "b": {"a": 2}}'), {"a": 1, "b": {"a": 2}})

    def test_integral_float_is_not_an_int_type(self) -> None:
        value = StrictLoader().loads("1.0")
        self.assertEqual(value, 1)
        self.assertIsNot(type(value), int)
        self.assertIsNot(type(value), bool)

    def test_loader_is_reusable_after_an_error(self) -> None:
        loader = StrictLoader()
        with self.assertRaises(JSONLineError):
            loader.loads('{"a": 1, "a": 2}')
        self.assertEqual(loader.loads('{"a": 1}'), {"a": 1})


class CanonicalTest(unittest.TestCase):
    def canonical(self, text: str) -> bytes:
        loader = StrictLoader()
        return loader.canonical(loader.loads(text))

    def test_fast_route(self) -> None:
        self.assertEqual(
            self.canonical('{"b": [1, 2.5, "é"], "a": {"d": null, "c": true}}'),
            '{"a":{"c":true,"d":null},"b":[1,2.5,"é"]}'.encode(),
        )

    def test_exotic_numbers(self) -> None:
        self.assertEqual(
            self.canonical('{"x": 1e21, "y": 1e-7, "z": 1.5e300, "w": 2.0}'),
            b'{"w":2,"x":1e+21,"y":1e-7,"z":1.5e+300}',
        )

    def test_astral_keys_sort_by_utf16(self) -> None:
        self.assertEqual(
            self.canonical('{"\\ue000": 1, "\\ud83d\\ude00": 2, "a": 3}'),
            '{"a":3,"\U0001f600":2,"\ue000":1}'.encode(),
        )

    def test_astral_value_only(self) -> None:
        self.assertEqual(self.canonical('{"b": "\U0001f600", "a": 1}'), '{"a":1,"b":"\U0001f600"}'.encode())

    def test_escapes(self) -> None:
        self.assertEqual(
            self.canonical('"\\u0000\\b\\t\\n\\f\\r\\u001f\\"\\\\/\\u007f\\u2028"'),
            '"\\u0000\\b\\t\\n\\f\\r\\u001f\\"\\\\/\x7f\u2028"'.encode(),
        )

    def test_exotic_flag_resets_per_line(self) -> None:
        loader = StrictLoader()
        loader.loads("[1e30]")
        value = loader.loads('{"b": 0.5, "a": 100}')
        self.assertEqual(loader.canonical(value), b'{"a":100,"b":0.5}')
        value = loader.loads('{"b": 1e-9, "a": 1}')
        self.assertEqual(loader.canonical(value), b'{"a":1,"b":1e-9}')

    def test_lone_surrogate(self) -> None:
        for text in (
            '"\\ud800"',
            '{"\\udfff": 1}',
            '["\\ud800", 1e30]',
            '{"\\ud800": 1, "\\ud83d\\ude00": 2}',
        ):
            with self.subTest(text):
                with self.assertRaises(JSONLineError) as caught:
                    self.canonical(text)
                self.assertEqual(
                    str(caught.exception), "string holds a lone surrogate (invalid Unicode escape)"
                )


if __name__ == "__main__":
    unittest.main()
