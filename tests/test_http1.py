"""format/http1.py: HTTP/1.1 heads read strictly, each bad head with its exact message and status."""

from __future__ import annotations

import io
import unittest

from toolreplay.format.http1 import HeadError, Request, keeps_alive, parse_fields, read_request


class ReadRequestTest(unittest.TestCase):
    def test_valid_heads(self) -> None:
        for data, expected in (
                (b"POST /hook/codex HTTP/1.1\r\nContent-Length: 2\r\nX-A:  b \t\r\n\r\n{}",
                 Request("POST", "/hook/codex", True, {"content-length": "2", "x-a": "b"})),
                (b"\r\n\nGET / HTTP/1.1\nConnection: Close\n\n", Request("GET", "/", False, {"connection": "Close"})),
                (b"POST / HTTP/1.0\r\n\r\n", Request("POST", "/", False, {})),
                (b"POST / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                 Request("POST", "/", True, {"connection": "keep-alive"})),
                (b"POST / HTTP/1.1\r\nA: 1\r\na: 2\r\n\r\n", Request("POST", "/", True, {"a": "1, 2"}))):
            with self.subTest(data=data):
                self.assertEqual(read_request(io.BytesIO(data)), expected)

    def test_the_next_request_starts_after_the_head(self) -> None:
        stream = io.BytesIO(b"POST /a HTTP/1.1\r\n\r\nbodyPOST /b HTTP/1.1\r\n\r\n")
        self.assertEqual(read_request(stream), Request("POST", "/a", True, {}))
        self.assertEqual(stream.read(4), b"body")
        self.assertEqual(read_request(stream), Request("POST", "/b", True, {}))
        self.assertIsNone(read_request(stream))  # the peer closed between requests

    def test_invalid_heads(self) -> None:
        for data, message, status in (
                (b"GARBAGE\r\n\r\n", "a malformed request line", 400),
                (b"POST / HTTP/2\r\n\r\n", "a malformed request line", 400),
                (b"POST  / HTTP/1.1\r\n\r\n", "a malformed request line", 400),
                (b"POST / HTTP/1.1\r\nX: 1\r\n folded\r\n\r\n", "a malformed header line", 400),
                (b"POST / HTTP/1.1\r\nX : 1\r\n\r\n", "a malformed header line", 400),
                (b"POST / HTTP/1.1\r\nno colon\r\n\r\n", "a malformed header line", 400),
                (b"POST / HTTP/1.1\r\nX: 1\r\n", "the connection closed mid-head", 400),
                (b"POST / HTTP/1.1\r\nX: 1", "the connection closed mid-head", 400),
                (b"\r\n", "the connection closed mid-head", 400),
                (b"POST / HTTP/1.1\r\nX: " + b"a" * 100 + b"\r\n\r\n", "the request head exceeds 64 bytes", 431),
                (b"POST / HTTP/1.1\r\n" + b"X: 1\r\n" * 10 + b"\r\n", "the request head exceeds 64 bytes", 431)):
            with self.subTest(data=data[:40]):
                with self.assertRaises(HeadError) as caught:
                    read_request(io.BytesIO(data), 64)
                self.assertEqual((str(caught.exception), caught.exception.status), (message, status))


class FieldsTest(unittest.TestCase):
    def test_fields_and_keep_alive(self) -> None:
        fields = parse_fields(["Content-Type: text/plain", "Connection: Upgrade, CLOSE"])
        self.assertEqual(fields, [("content-type", "text/plain"), ("connection", "Upgrade, CLOSE")])
        self.assertFalse(keeps_alive("1", fields))
        self.assertTrue(keeps_alive("1", fields[:1]))
        self.assertFalse(keeps_alive("0", fields[:1]))
        self.assertTrue(keeps_alive("0", [("connection", "keep-alive")]))
        with self.assertRaises(HeadError):
            parse_fields([" folded"])


if __name__ == "__main__":
    unittest.main()
