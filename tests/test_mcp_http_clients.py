"""The HTTP upstream's clients (toolreplay/mcp/http/auto.py, client.py, httpx_client.py, http11.py's
LeanClient): which one serves a URL, what a session sends through each (headers, cookies), proxies from
the environment, and their failures as one `HttpFailure`; against servers in this process."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import importlib.util
import json
import os
import threading
import time
import unittest
from collections.abc import Iterator
from typing import Any
from unittest import mock

from tests.support import require
from toolreplay.mcp.http import http11
from toolreplay.mcp.http.auto import lean_serves, open_client
from toolreplay.mcp.http.client import HttpFailure
from toolreplay.mcp.wire import no_answer_reason

HAVE_HTTPX = importlib.util.find_spec("httpx") is not None
INITIALIZE = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}\n'
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
CALL = b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"lookup","arguments":{}}}\n'


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """os.environ without proxy settings but `values`."""
    with mock.patch.dict(os.environ, values):
        for name in list(os.environ):
            if name.lower().endswith("_proxy") and name not in values:
                del os.environ[name]
        yield


class ChoiceTest(unittest.TestCase):
    def test_which_urls_the_lean_client_serves(self) -> None:
        proxy = {"http": "http://proxy:3128"}
        cases: list[tuple[str, dict[str, str], bool]] = [
            ("http://127.0.0.1:8000/mcp", {}, True),
            ("http://example.com/mcp?x=1", {"https": "http://proxy:3128"}, True),
            ("https://example.com/mcp", {}, False),
            ("http://user:pw@example.com/mcp", {}, False),
            ("http://user@example.com/mcp", {}, False),
            ("http://example.com:99999/mcp", {}, False),
            ("http://example.com/mcp", proxy, False),
            ("http://example.com/mcp", {"all": "socks5://proxy:1080"}, False),
            ("http://example.com/mcp", {**proxy, "no": "other.org, example.com"}, True),
            ("http://EXAMPLE.com/mcp", {**proxy, "no": "Example.COM"}, True),
            ("http://example.com/mcp", {**proxy, "no": "*"}, True),
            ("http://[::1]:8000/mcp", {**proxy, "no": "::1"}, True),
            # curl's other rules (suffixes, ports, schemes) are left to httpx
            ("http://www.example.com/mcp", {**proxy, "no": "example.com"}, False),
            ("http://example.com:8000/mcp", {**proxy, "no": "example.com:8000"}, False),
            ("http://10.0.0.1/mcp", {**proxy, "no": "10.0.0.0/8"}, False),
        ]
        for url, proxies, expected in cases:
            self.assertEqual(lean_serves(url, proxies), expected, (url, proxies))

    def test_the_environment_is_read_as_httpx_reads_it(self) -> None:
        with environment(http_proxy="http://proxy:3128"):
            self.assertFalse(lean_serves("http://example.com/mcp"))
        with environment(ALL_PROXY="http://proxy:3128", NO_PROXY="example.com"):
            self.assertTrue(lean_serves("http://example.com/mcp"))
            self.assertFalse(lean_serves("http://example.org/mcp"))

    def test_open_client(self) -> None:
        require(HAVE_HTTPX, "httpx (pip install '.[http]' in a ToolReplay checkout)")
        from toolreplay.mcp.http.httpx_client import HttpxClient

        with environment():
            self.assertIsInstance(open_client("http://127.0.0.1:9/mcp"), http11.LeanClient)
            self.assertIsInstance(open_client("https://127.0.0.1:9/mcp"), HttpxClient)
            self.assertIsInstance(open_client("http://u:p@127.0.0.1:9/mcp"), HttpxClient)


class _Server(http.server.BaseHTTPRequestHandler):
    """A Streamable HTTP MCP server that sets a cookie at initialize, and keeps every request it was sent
    (the method, the target, the headers), as a forward proxy would see them too."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, dict[str, str]]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, body: bytes = b"", *extra: str) -> None:
        head = [f"HTTP/1.1 {status} {self.responses[status][0]}", "content-type: application/json",
                f"content-length: {len(body)}", *extra]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        self.wfile.flush()

    def keep(self) -> None:
        self.seen.append((self.command, self.path, {name.lower(): value for name, value in self.headers.items()}))

    def do_POST(self) -> None:  # noqa: N802
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.keep()
        if "id" not in message:
            self.answer(202)
        elif message["method"] == "initialize":
            self.answer(200, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-06-18"}}).encode(), "mcp-session-id: s1", "set-cookie: route=a7; Path=/")
        else:
            self.answer(200, json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}).encode())

    def do_GET(self) -> None:  # noqa: N802
        self.keep()
        self.answer(405)

    def do_DELETE(self) -> None:  # noqa: N802
        self.keep()
        self.answer(200)

    def do_CONNECT(self) -> None:  # noqa: N802
        self.keep()
        self.answer(502)


class SessionTest(unittest.TestCase):
    """A whole session of the HTTP upstream, through whichever client serves its URL."""

    def setUp(self) -> None:
        require(HAVE_HTTPX, "httpx (pip install '.[http]' in a ToolReplay checkout)")
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        handler = type("Handler", (_Server,), {"seen": self.seen})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        self.port = server.server_address[1]

    def session(self, url: str, environ: dict[str, str], answers: int = 2) -> tuple[list[Any], list[str]]:
        """Initialize and one call to `url` with `environ`: the answers the client got, what the end said."""
        from toolreplay.mcp.http.upstream import HttpServer

        lines: list[Any] = []
        said: list[str] = []
        arrived = threading.Condition()

        def on_line(line: bytes) -> None:
            with arrived:
                lines.append(json.loads(line))
                arrived.notify_all()

        with environment(**environ):
            upstream = HttpServer(url, say=said.append, connect_timeout=5)
            upstream.start(on_line, lambda reason: None)
            upstream.send(INITIALIZE)
            with arrived:
                self.assertTrue(arrived.wait_for(lambda: len(lines) >= 1, timeout=10))
            if answers > 1:
                upstream.send(INITIALIZED + CALL)
                with arrived:
                    self.assertTrue(arrived.wait_for(lambda: len(lines) >= answers, timeout=10))
                deadline = time.monotonic() + 10  # the server's own stream (GET) is opened after initialized
                while not any(method == "GET" for method, _, _ in self.seen) and time.monotonic() < deadline:
                    time.sleep(0.01)
            upstream.close()
        return lines, said

    def test_direct_the_headers_httpx_sends_and_the_cookie_sent_back(self) -> None:
        import httpx

        lines, said = self.session(f"http://127.0.0.1:{self.port}/mcp", {})
        self.assertEqual(([line["id"] for line in lines], said), ([1, 2], []))
        self.assertEqual(sorted((method, path) for method, path, _ in self.seen),
                         [("DELETE", "/mcp"), ("GET", "/mcp"), ("POST", "/mcp"), ("POST", "/mcp"), ("POST", "/mcp")])
        first, *later = [headers for _, _, headers in self.seen]
        self.assertEqual(first, {"host": f"127.0.0.1:{self.port}", "accept": "application/json, text/event-stream",
                                 "accept-encoding": "gzip, deflate", "connection": "keep-alive",
                                 "user-agent": f"python-httpx/{httpx.__version__}",
                                 "content-type": "application/json", "content-length": str(len(INITIALIZE) - 1)})
        self.assertEqual([(headers["cookie"], headers["mcp-session-id"], headers["mcp-protocol-version"])
                          for headers in later], [("route=a7", "s1", "2025-06-18")] * 4)

    def test_a_proxy_from_the_environment_is_used(self) -> None:
        lines, said = self.session("http://mcp.invalid:8123/mcp", {"HTTP_PROXY": f"http://127.0.0.1:{self.port}"})
        self.assertEqual(([line["id"] for line in lines], said), ([1, 2], []))
        self.assertEqual({(method, path) for method, path, _ in self.seen},
                         {("POST", "http://mcp.invalid:8123/mcp"), ("GET", "http://mcp.invalid:8123/mcp"),
                          ("DELETE", "http://mcp.invalid:8123/mcp")})
        self.assertEqual([headers.get("cookie") for _, _, headers in self.seen][1:], ["route=a7"] * 4)

    def test_an_https_proxy_from_the_environment_is_used(self) -> None:
        lines, said = self.session("https://mcp.invalid/mcp", {"HTTPS_PROXY": f"http://127.0.0.1:{self.port}"},
                                   answers=1)
        reason = "the connection to the server failed: ProxyError: 502 Bad Gateway"
        self.assertEqual(([line["id"] for line in lines], no_answer_reason(lines[0]), said), ([1], reason, [reason]))
        self.assertEqual([(method, path) for method, path, _ in self.seen], [("CONNECT", "mcp.invalid:443")])

    def test_no_proxy_names_the_host(self) -> None:
        lines, said = self.session(f"http://127.0.0.1:{self.port}/mcp",
                                   {"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "localhost,127.0.0.1"})
        self.assertEqual(([line["id"] for line in lines], said), ([1, 2], []))
        self.assertEqual(self.seen[0][1], "/mcp")


class FailureTest(unittest.TestCase):
    def test_each_client_fails_with_an_http_failure_named_as_httpx_names_it(self) -> None:
        require(HAVE_HTTPX, "httpx (pip install '.[http]' in a ToolReplay checkout)")
        import socket

        with socket.socket() as unused:
            unused.bind(("127.0.0.1", 0))
            port = unused.getsockname()[1]

        async def failure(url: str) -> str:
            client = open_client(url, connect_timeout=5)
            try:
                await client.send("POST", {"content-type": "application/json"}, b"{}")
            except HttpFailure as exc:
                return exc.describe()
            finally:
                await client.aclose()
            return "answered"

        with environment():
            self.assertEqual(asyncio.run(failure(f"http://127.0.0.1:{port}/mcp")), "ConnectError: Connection refused")
            self.assertEqual(asyncio.run(failure(f"https://127.0.0.1:{port}/mcp")),
                             "ConnectError: All connection attempts failed")

    def test_the_lean_clients_deadline(self) -> None:
        async def late() -> str:
            accepted: list[asyncio.StreamWriter] = []
            server = await asyncio.start_server(lambda reader, writer: accepted.append(writer), "127.0.0.1", 0)
            client = http11.LeanClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp")
            try:
                await client.send("DELETE", {}, timeout=0.2)
            except HttpFailure as exc:
                return exc.describe()
            finally:
                await client.aclose()
                for writer in accepted:
                    writer.close()
                server.close()
                await server.wait_closed()
            return "answered"

        self.assertEqual(asyncio.run(late()), "ReadTimeout: no answer within 0.2 s")


if __name__ == "__main__":
    unittest.main()
