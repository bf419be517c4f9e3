"""The MCP proxy's JSON-RPC helpers: line reading, id keys, strict parsing."""

from __future__ import annotations

import io
import os
import threading
import unittest

from toolreplay.mcp.wire import dump_message, id_key, parse_message, read_lines, recordable


class ReadLinesTest(unittest.TestCase):
    def test_a_pipe_and_a_memory_stream_give_the_same_lines(self) -> None:
        data = b"a" * 200_000 + b"\nb\n\nc" + b"d" * 70_000 + b"\ne"
        reader, writer = os.pipe()
        feeder = threading.Thread(target=lambda: (os.write(writer, data), os.close(writer)))
        feeder.start()
        with open(reader, "rb") as pipe:
            from_pipe = list(read_lines(pipe))
        feeder.join()
        self.assertEqual(from_pipe, list(read_lines(io.BytesIO(data))))
        self.assertEqual([len(line) for line in from_pipe], [200_001, 2, 1, 70_002, 1])


class MessageTest(unittest.TestCase):
    def test_ids_of_different_types_stay_distinct(self) -> None:
        keys = {id_key(value) for value in (1, 1.0, "1", True, None, [1], {"1": 1})}
        self.assertEqual(len(keys), 7)

    def test_valid_json_python_cannot_write_goes_out_as_it_came(self) -> None:
        for line in (b'{"n":1e400,"m":[-2E+999,1.5,12345678901234567890]}\n', b'{"s":"x\\ud800y\\udfff"}\n',
                     b'{"t":"\\ud83d\\ude00 caf\xc3\xa9","n":1e400}\n'):
            with self.subTest(line=line):
                again = dump_message(parse_message(line))
                self.assertEqual(parse_message(again).keys(), parse_message(line).keys())
                self.assertEqual(dump_message(parse_message(again)), again)
        self.assertEqual(dump_message(parse_message(b'{"n":1e400,"s":"\\ud800"}')), b'{"n":1e400,"s":"\\ud800"}\n')
        self.assertEqual(dump_message({"s": "caf\u00e9"}), '{"s":"caf\u00e9"}\n'.encode())  # UTF-8 as usual

    def test_recordable(self) -> None:
        value = parse_message(b'{"a":[1e400,"x\\ud800"],"\\udc00":2.5}')
        self.assertEqual(recordable(value), {"a": ["1e400", "x\ufffd"], "\ufffd": 2.5})

    def test_nan_is_not_json(self) -> None:
        with self.assertRaisesRegex(ValueError, "^NaN is not JSON$"):
            parse_message(b'{"id": NaN}')


if __name__ == "__main__":
    unittest.main()
