"""Several MCP servers behind one proxy (toolreplay.mcp.servers): the servers file, and
`MultiServer` against in-memory servers (routing, ids, listings, a server that ends)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from collections.abc import Callable
from typing import Any

from tests.support import integration, require
from tests.test_cli import run
from toolreplay.errors import InputError
from toolreplay.guard.gate import Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.mcp.servers import MultiServer, ServerConfig, read_servers, split_name, start_servers
from toolreplay.mcp.transport import StdioServer
from toolreplay.policy.model import Policy

HAVE_HTTP = importlib.util.find_spec("httpx") is not None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "mcp_servers", "tiny_server.py")
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def line(message: Any) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


class FakeServer:
    """An in-memory ServerEnd: what the proxy sent it, and `emit` to speak as it."""

    def __init__(self, status: int = 0) -> None:
        self.sent: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.status = status
        self.closed = False
        self.on_line: Callable[[bytes], None] | None = None
        self.on_ended: Callable[[str], None] | None = None

    def start(self, on_line: Callable[[bytes], None], on_ended: Callable[[str], None]) -> None:
        self.on_line, self.on_ended = on_line, on_ended

    def send(self, data: bytes) -> None:
        for part in data.splitlines():
            self.sent.put(json.loads(part))

    def close(self) -> int:
        self.closed = True
        return self.status

    def emit(self, message: Any) -> None:
        assert self.on_line is not None
        self.on_line(line(message))

    def end(self, reason: str = "server exited") -> None:
        assert self.on_ended is not None
        self.on_ended(reason)

    def got(self) -> Any:
        return self.sent.get(timeout=5)

    def nothing(self) -> bool:
        return self.sent.empty()


class ConfigTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.path = os.path.join(self.directory, "servers.json")

    def write(self, text: str) -> None:
        with open(self.path, "w", encoding="utf-8") as out:
            out.write(text)

    def read(self, text: str) -> list[ServerConfig]:
        self.write(text)
        return read_servers(self.path)

    def error(self, text: str) -> str:
        with self.assertRaises(InputError) as caught:
            self.read(text)
        return str(caught.exception).replace(self.path, "PATH")

    def test_a_valid_file(self) -> None:
        configs = self.read('{"servers": {\n'
                            ' "github": {"command": "npx", "args": ["-y", "gh"], "env": {"T": "x"}},\n'
                            ' "my files": {"type": "stdio", "command": "python3", "prefix": "fs"},\n'
                            ' "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer s"}}\n'
                            '}}\n')
        self.assertEqual(configs, [
            ServerConfig("github", "github", 2, command=("npx", "-y", "gh"), env={"T": "x"}),
            ServerConfig("my files", "fs", 3, command=("python3",)),
            ServerConfig("remote", "remote", 4, url="https://example.com/mcp", headers={"Authorization": "Bearer s"})])

    def test_each_error_names_its_line(self) -> None:
        cases = [
            ('[]', 'PATH:1: expected an object with "servers"'),
            ('{"servers": {"a": {"command": "x"}},\n "mcpServers": {}}', 'PATH:2: unknown key "mcpServers" '
                                                                        '(expected "servers")'),
            ('{}', 'PATH:1: "servers" must be an object naming at least one server'),
            ('{\n"servers": {}}', 'PATH:2: "servers" must be an object naming at least one server'),
            ('{"servers": {\n"a": ["x"]}}', 'PATH:2: server "a" must be an object'),
            ('{"servers": {"a": {"command": "x",\n "cwd": "/"}}}', 'PATH:2: server "a": unknown key "cwd"'),
            ('{"servers": {\n"a": {"args": []}}}', 'PATH:2: server "a" needs "command" or "url"'),
            ('{"servers": {"a": {"command": "x",\n "url": "https://h/mcp"}}}',
             'PATH:2: server "a" has both "command" and "url"; give one'),
            ('{"servers": {"a": {"command": "x",\n "prefix": "a__b"}}}',
             'PATH:2: server "a": prefix "a__b" is not valid (letters, digits, "-" and "_", at most 32 characters, '
             'no "__", not ending in "_")'),
            ('{"servers": {"a": {"command": "x", "prefix": "b_"}}}',
             'PATH:1: server "a": prefix "b_" is not valid (letters, digits, "-" and "_", at most 32 characters, '
             'no "__", not ending in "_")'),
            ('{"servers": {"a": {"command": "x", "prefix": "' + "p" * 33 + '"}}}',
             'PATH:1: server "a": prefix "' + "p" * 33 + '" is not valid (letters, digits, "-" and "_", at most 32 '
             'characters, no "__", not ending in "_")'),
            ('{"servers": {\n"my files": {"command": "x"}}}',
             'PATH:2: server "my files": the name is not a valid prefix (letters, digits, "-" and "_", at most 32 '
             'characters, no "__", not ending in "_"); give a "prefix"'),
            ('{"servers": {"fs": {"command": "x"},\n"files": {"command": "y",\n "prefix": "fs"}}}',
             'PATH:3: server "files": prefix "fs" is already the prefix of server "fs"'),
            ('{"servers": {"a": {"command": "x"},\n"a": {"command": "y"}}}', 'PATH:2: duplicate key "a"'),
            ('{"servers": {"a": {"command": ""}}}', 'PATH:1: server "a": "command" must be a non-empty string'),
            ('{"servers": {"a": {"command": "x",\n "args": ["y", 1]}}}',
             'PATH:2: server "a": "args" must be an array of strings'),
            ('{"servers": {"a": {"command": "x", "env": {"K": 1}}}}',
             'PATH:1: server "a": "env" must be an object of strings'),
            ('{"servers": {"a": {"command": "x",\n "headers": {}}}}',
             'PATH:2: server "a": "headers" goes with "url", not "command"'),
            ('{"servers": {"a": {"url": "https://h/mcp",\n "args": []}}}',
             'PATH:2: server "a": "args" goes with "command", not "url"'),
            ('{"servers": {"a": {\n"url": "ftp://h/mcp"}}}', 'PATH:2: server "a": "url" must be an http:// or '
                                                             'https:// URL'),
            ('{"servers": {"a": {"url": "https://h/mcp", "headers": {"A": null}}}}',
             'PATH:1: server "a": "headers" must be an object of strings'),
            ('{"servers": {"a": {"command": "x",\n "type": "sse"}}}',
             'PATH:2: server "a": "type" must be "stdio" or "http" (as "command" or "url" says)'),
            ('{"servers": {"a": {"command": "x",\n "type": "http"}}}',
             'PATH:2: server "a": "type" "http" does not go with command'),
            ('{"servers": {"a": {"command": "x"}}', 'PATH:1: invalid JSON: Expecting \',\' delimiter (column 36)'),
        ]
        for text, message in cases:
            with self.subTest(text=text):
                self.assertEqual(self.error(text), message)

    def test_an_http_server_is_an_http_upstream_with_its_headers(self) -> None:
        require(HAVE_HTTP, "httpx (pip install '.[http]' in a ToolReplay checkout)")
        from toolreplay.mcp.http.upstream import HttpServer

        configs = self.read('{"servers": {"local": {"command": "x"},\n'
                            ' "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer s"}}}}')
        servers = start_servers(self.path, configs)  # nothing connects before start
        remote = servers["remote"]
        assert isinstance(remote, HttpServer)
        self.assertEqual(remote._headers, [("Authorization", "Bearer s")])
        configs = self.read('{"servers": {"remote": {"url": "https://example.com/mcp",\n'
                            ' "headers": {"Host": "x"}}}}')
        with self.assertRaises(InputError) as caught:
            start_servers(self.path, configs)
        self.assertEqual(str(caught.exception), f'{self.path}:1: server "remote": header Host: the proxy sets this '
                                                'header itself')

    def test_the_command_line(self) -> None:
        policy = os.path.join(self.directory, "policy.json")
        with open(policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": []}, out)
        self.assertEqual(run("mcp-proxy", "--policy", policy, "--servers", self.path, "--", "cat"), (
            2, "", "error: mcp-proxy takes --servers FILE or a server command after --, not both\n"))
        self.assertEqual(run("mcp-proxy", "--policy", policy), (
            2, "", "error: mcp-proxy needs the server command after --, or --servers FILE\n"))
        self.write('{"servers": {"ok": {"command": "cat"}, "a": {"command": "/no/such/server"}}}')
        self.assertEqual(run("mcp-proxy", "--policy", policy, "--servers", self.path), (
            2, "", 'error: server "a": cannot start the server /no/such/server: No such file or directory\n'))
        self.write('{"servers": {"a": {"command": "x",\n "prefix": "a__b"}}}')
        self.assertEqual(run("mcp-proxy", "--policy", policy, "--servers", self.path), (
            2, "", f'error: {self.path}:2: server "a": prefix "a__b" is not valid (letters, digits, "-" and "_", at '
                   'most 32 characters, no "__", not ending in "_")\n'))

    def test_split_name(self) -> None:
        self.assertEqual([split_name(name) for name in ("gh__list", "gh__a__b", "gh___x", "gh", "__x", "gh__")],
                         [("gh", "list"), ("gh", "a__b"), ("gh", "_x"), None, None, None])


def lost(name: str) -> dict[str, Any]:
    """The error of a call in flight when its server ended (the router records a write's outcome unknown)."""
    return {"code": -32000, "message": f"toolreplay: the server '{name}' ended before it answered",
            "data": {"toolreplay": "no answer"}}


class MultiServerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.a, self.b = FakeServer(), FakeServer(status=3)
        self.diagnostics = io.StringIO()
        self.multi = MultiServer({"a": self.a, "bee": self.b}, names={"bee": "b"}, diagnostics=self.diagnostics)
        self.up: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.ended: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.multi.start(lambda data: self.up.put(json.loads(data)), self.ended.put)
        self.addCleanup(self.multi.close)

    def client(self, message: Any) -> None:
        self.multi.send(line(message))

    def got(self) -> Any:
        return self.up.get(timeout=5)

    def initialize(self) -> None:
        self.client(INIT)
        self.assertEqual((self.a.got(), self.b.got()), (INIT, INIT))
        self.a.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {
            "tools": {}, "resources": {}}, "serverInfo": {"name": "a", "version": "1"}, "instructions": "Use a."}})
        self.assertTrue(self.up.empty())  # answered once both answered
        self.b.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {
            "tools": {"listChanged": True}}, "serverInfo": {"name": "b", "version": "2"}}})

    def test_initialize_is_answered_once_merged(self) -> None:
        self.initialize()
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True},
                                                              "resources": {"listChanged": True}},
            "serverInfo": {"name": "toolreplay-mcp-proxy", "version": "0.8.0"},
            "instructions": "Tools named a__*: Use a."}})
        self.client({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.assertEqual((self.a.got()["method"], self.b.got()["method"]), ("notifications/initialized",) * 2)

    def test_a_server_that_fails_initialize_is_left_out(self) -> None:
        self.client(INIT)
        self.assertEqual((self.a.got(), self.b.got()), (INIT, INIT))
        self.a.emit({"jsonrpc": "2.0", "id": 0, "error": {"code": -32602, "message": "unsupported"}})
        self.b.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18"}})
        self.assertEqual(self.got()["result"]["protocolVersion"], "2025-06-18")
        self.assertEqual(self.diagnostics.getvalue(), "toolreplay mcp-proxy: server 'a' failed to initialize: "
                                                      "unsupported; its tools are left out of this session\n")
        self.client({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        self.assertEqual(self.b.got()["id"], 1)
        self.b.emit({"jsonrpc": "2.0", "id": 1, "result": {"tools": [{"name": "x"}]}})
        self.assertEqual(self.got()["result"], {"tools": [{"name": "bee__x"}]})
        self.assertTrue(self.a.nothing())

    def test_tools_list_prefixes_names_follows_pages_and_leaves_out_a_failing_server(self) -> None:
        self.client({"jsonrpc": "2.0", "id": "l", "method": "tools/list"})
        self.assertEqual(self.a.got(), {"jsonrpc": "2.0", "id": "l", "method": "tools/list"})
        self.a.emit({"jsonrpc": "2.0", "id": "l", "result": {"tools": [{"name": "one", "inputSchema": {}}],
                                                              "nextCursor": "p2"}})
        page = self.a.got()
        self.assertEqual(page, {"jsonrpc": "2.0", "id": page["id"], "method": "tools/list",
                                "params": {"cursor": "p2"}})
        self.a.emit({"jsonrpc": "2.0", "id": page["id"], "result": {"tools": [{"name": "two"}]}})
        self.assertEqual(self.b.got()["id"], "l")
        self.b.emit({"jsonrpc": "2.0", "id": "l", "error": {"code": -1, "message": "broken\x1b[2J"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": "l", "result": {"tools": [
            {"name": "a__one", "inputSchema": {}}, {"name": "a__two"}]}})
        self.assertEqual(self.diagnostics.getvalue(), "toolreplay mcp-proxy: server 'b' failed to list its tools: "
                                                      "broken\\x1b[2J; they are left out\n")

    def test_a_cursor_from_the_client_is_refused(self) -> None:
        self.client({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": "x"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": (
            "Invalid params: unknown cursor (the proxy lists every server's tools in one page)")}})

    def test_tools_call_goes_to_its_server_without_the_prefix(self) -> None:
        self.client({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                     "params": {"name": "bee__echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": 1}}})
        self.assertEqual(self.b.got(), {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                        "params": {"name": "echo", "arguments": {"text": "hi"},
                                                   "_meta": {"progressToken": 1}}})
        self.assertTrue(self.a.nothing())
        self.b.emit({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1,
                                                                                     "progress": 1}})
        self.b.emit({"jsonrpc": "2.0", "id": 7, "result": {"content": [], "isError": False}})
        self.assertEqual(self.got()["method"], "notifications/progress")
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 7, "result": {"content": [], "isError": False}})

    def test_an_unknown_prefix_or_method_is_an_error(self) -> None:
        for name in ("zed__echo", "echo"):
            self.client({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": {}}})
            self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": (
                f'Invalid params: no server has the tool "{name}"')}})
        self.client({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "info"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": (
            "Method not found: logging/setLevel (no server offers logging)")}})
        for method, params, text in [
                ("resources/read", {"uri": "zed__file:///x"}, 'resource "zed__file:///x"'),
                ("prompts/get", {"name": "greet"}, 'prompt "greet"'),
                ("completion/complete", {"ref": {"type": "ref/resource", "uri": "file:///{x}"},
                                         "argument": {"name": "x", "value": ""}}, 'resource "file:///{x}"')]:
            self.client({"jsonrpc": "2.0", "id": 4, "method": method, "params": params})
            self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 4, "error": {"code": -32602, "message": (
                f"Invalid params: no server has the {text}")}})
        self.client({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 3, "result": {}})
        self.assertTrue(self.a.nothing() and self.b.nothing())

    def test_prompts_and_resources_are_listed_under_prefixes_and_go_to_their_server(self) -> None:
        self.client(INIT)
        self.a.got(), self.b.got()
        self.a.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {
            "resources": {"subscribe": True}, "prompts": {}, "completions": {}}}})
        self.b.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {
            "tools": {}, "resources": {}}}})
        self.assertEqual(self.got()["result"]["capabilities"], {
            "tools": {"listChanged": True}, "prompts": {"listChanged": True},
            "resources": {"listChanged": True, "subscribe": True}, "completions": {}})
        self.client({"jsonrpc": "2.0", "id": 1, "method": "resources/list"})
        self.assertEqual((self.a.got(), self.b.got()), ({"jsonrpc": "2.0", "id": 1, "method": "resources/list"},) * 2)
        self.a.emit({"jsonrpc": "2.0", "id": 1, "result": {"resources": [{"uri": "file:///x", "name": "x"}]}})
        self.b.emit({"jsonrpc": "2.0", "id": 1, "result": {"resources": [{"uri": "file:///x", "name": "bx"}]}})
        self.assertEqual(self.got()["result"], {"resources": [{"uri": "a__file:///x", "name": "x"},
                                                              {"uri": "bee__file:///x", "name": "bx"}]})
        self.client({"jsonrpc": "2.0", "id": 2, "method": "prompts/list"})  # only a offers prompts
        self.assertEqual(self.a.got()["method"], "prompts/list")
        self.a.emit({"jsonrpc": "2.0", "id": 2, "result": {"prompts": [{"name": "greet"}]}})
        self.assertEqual(self.got()["result"], {"prompts": [{"name": "a__greet"}]})
        self.client({"jsonrpc": "2.0", "id": 3, "method": "resources/templates/list"})
        self.a.got(), self.b.got()
        self.a.emit({"jsonrpc": "2.0", "id": 3, "result": {"resourceTemplates": [{"uriTemplate": "file:///{p}"}]}})
        self.b.emit({"jsonrpc": "2.0", "id": 3, "result": {"resourceTemplates": []}})
        self.assertEqual(self.got()["result"], {"resourceTemplates": [{"uriTemplate": "a__file:///{p}"}]})
        self.assertTrue(self.a.nothing() and self.b.nothing())

        self.client({"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "bee__file:///x"}})
        self.assertEqual(self.b.got(), {"jsonrpc": "2.0", "id": 4, "method": "resources/read",
                                        "params": {"uri": "file:///x"}})
        self.b.emit({"jsonrpc": "2.0", "id": 4, "result": {"contents": [{"uri": "file:///x", "text": "hi"}]}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 4, "result": {"contents": [
            {"uri": "bee__file:///x", "text": "hi"}]}})
        self.client({"jsonrpc": "2.0", "id": 5, "method": "prompts/get",
                     "params": {"name": "a__greet", "arguments": {"who": "me"}}})
        self.assertEqual(self.a.got()["params"], {"name": "greet", "arguments": {"who": "me"}})
        self.a.emit({"jsonrpc": "2.0", "id": 5, "result": {"messages": []}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 5, "result": {"messages": []}})
        self.client({"jsonrpc": "2.0", "id": 6, "method": "completion/complete", "params": {
            "ref": {"type": "ref/resource", "uri": "a__file:///{p}"}, "argument": {"name": "p", "value": "n"}}})
        self.assertEqual(self.a.got()["params"], {"ref": {"type": "ref/resource", "uri": "file:///{p}"},
                                                  "argument": {"name": "p", "value": "n"}})
        self.client({"jsonrpc": "2.0", "id": 7, "method": "resources/subscribe", "params": {"uri": "a__file:///x"}})
        self.assertEqual(self.a.got()["params"], {"uri": "file:///x"})
        self.a.emit({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///x"}})
        self.a.emit({"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                      "params": {"uri": "a__file:///x"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"})
        self.a.end()
        self.assertEqual([self.got() for _ in range(3)], [
            {"jsonrpc": "2.0", "id": 6, "error": lost("a")}, {"jsonrpc": "2.0", "id": 7, "error": lost("a")},
            {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}])
        self.assertEqual([self.got() for _ in range(2)], [
            {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"}])

    def test_a_logging_level_goes_to_every_server_that_offers_logging(self) -> None:
        self.client(INIT)
        self.a.got(), self.b.got()
        for server in (self.a, self.b):
            server.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {
                "tools": {}, "logging": {}}}})
        self.assertEqual(self.got()["result"]["capabilities"], {"tools": {"listChanged": True}, "logging": {}})
        level = {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "debug"}}
        self.client(level)
        self.assertEqual((self.a.got(), self.b.got()), (level, level))
        self.a.emit({"jsonrpc": "2.0", "id": 1, "result": {}})
        self.assertTrue(self.up.empty())  # answered once both answered
        self.b.emit({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "no\x1b[2J"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 1, "result": {}})  # a took it
        self.assertEqual(self.diagnostics.getvalue(),
                         "toolreplay mcp-proxy: server 'b' refused the logging level: no\\x1b[2J\n")
        self.client({**level, "id": 2})
        self.a.got(), self.b.got()
        self.a.emit({"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "not here"}})
        self.b.emit({"jsonrpc": "2.0", "id": 2, "error": {"code": -32000, "message": "nor here"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "not here"}})
        self.client({**level, "id": 3})
        self.a.got(), self.b.got()
        self.a.end()
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        self.b.end()  # neither answered: the level was not set
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 3, "error": {
            "code": -32603, "message": "Internal error: no server answered logging/setLevel"}})

    def test_servers_requests_get_ids_that_cannot_collide(self) -> None:
        self.a.emit({"jsonrpc": "2.0", "id": 0, "method": "roots/list"})
        self.b.emit({"jsonrpc": "2.0", "id": 0, "method": "elicitation/create", "params": {"message": "?"}})
        first, second = self.got(), self.got()
        self.assertEqual((first, second), (
            {"jsonrpc": "2.0", "id": "a__1", "method": "roots/list"},
            {"jsonrpc": "2.0", "id": "bee__2", "method": "elicitation/create", "params": {"message": "?"}}))
        self.client({"jsonrpc": "2.0", "id": "bee__2", "result": {"action": "decline"}})
        self.client({"jsonrpc": "2.0", "id": "a__1", "result": {"roots": []}})
        self.assertEqual(self.b.got(), {"jsonrpc": "2.0", "id": 0, "result": {"action": "decline"}})
        self.assertEqual(self.a.got(), {"jsonrpc": "2.0", "id": 0, "result": {"roots": []}})
        self.client({"jsonrpc": "2.0", "id": "a__1", "result": {"roots": []}})  # answered already
        self.assertEqual(self.diagnostics.getvalue(),
                         "toolreplay mcp-proxy: dropped a response from the client to no request of a server\n")

    def test_a_servers_cancellation_of_its_request_is_remapped(self) -> None:
        self.b.emit({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {}})
        self.assertEqual(self.got()["id"], "bee__1")
        self.b.emit({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "s1"}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "method": "notifications/cancelled",
                                      "params": {"requestId": "bee__1"}})

    def test_an_ended_servers_open_requests_are_withdrawn_from_the_client(self) -> None:
        """Only that server's requests the client has not answered: under the ids the client has them by,
        before the tools change; the other server's question stays open and its answer still reaches it."""
        self.b.emit({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage", "params": {}})
        self.a.emit({"jsonrpc": "2.0", "id": 0, "method": "roots/list"})
        self.b.emit({"jsonrpc": "2.0", "id": "s2", "method": "elicitation/create", "params": {}})
        self.assertEqual([self.got()["id"] for _ in range(3)], ["bee__1", "a__2", "bee__3"])
        self.b.end()
        self.assertEqual([self.got(), self.got(), self.got()], [
            {"jsonrpc": "2.0", "method": "notifications/cancelled",
             "params": {"requestId": own, "reason": "the server that asked ended"}} for own in ("bee__1", "bee__3")
        ] + [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}])
        self.client({"jsonrpc": "2.0", "id": "a__2", "result": {"roots": []}})
        self.assertEqual(self.a.got(), {"jsonrpc": "2.0", "id": 0, "result": {"roots": []}})

    def test_a_clients_cancellation_goes_to_the_server_running_the_call(self) -> None:
        self.client({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "a__hold", "arguments": {}}})
        self.a.got()
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
        self.client(cancel)
        self.assertEqual(self.a.got(), cancel)
        self.assertTrue(self.b.nothing())
        self.a.emit({"jsonrpc": "2.0", "id": 5, "result": {}})  # late: dropped without a word
        self.client({"jsonrpc": "2.0", "id": 6, "method": "ping"})
        self.assertEqual(self.got()["id"], 6)
        self.assertEqual(self.diagnostics.getvalue(), "")

    def test_a_server_cannot_answer_another_servers_call(self) -> None:
        self.client({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "a__x", "arguments": {}}})
        self.a.got()
        self.b.emit({"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "forged"}]}})
        self.a.emit({"jsonrpc": "2.0", "id": 5, "result": {"content": []}})
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 5, "result": {"content": []}})
        self.assertEqual(self.diagnostics.getvalue(),
                         "toolreplay mcp-proxy: dropped a response from server 'b' to no request sent to it\n")

    def test_a_server_that_ends_takes_only_its_tools(self) -> None:
        self.client({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "bee__x", "arguments": {}}})
        self.b.got()
        self.b.end()
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "id": 1, "error": lost("b")})  # it may have run
        self.assertEqual(self.got(), {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        self.client({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "bee__x", "arguments": {}}})
        self.assertEqual(self.got()["error"]["message"], "Internal error: the server 'b' has ended")
        self.client({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        self.a.got()
        self.a.emit({"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": "x"}]}})
        self.assertEqual(self.got()["result"], {"tools": [{"name": "a__x"}]})
        self.assertTrue(self.ended.empty())
        self.assertEqual(self.diagnostics.getvalue(), "toolreplay mcp-proxy: server 'b' ended (server exited): its "
                                                      "tools are gone for the rest of the session\n")
        self.a.end()
        self.assertEqual(self.ended.get(timeout=5), "server exited")
        self.assertEqual(self.multi.close(), 3)
        self.assertTrue(self.a.closed and self.b.closed)

    def test_a_server_that_ends_is_started_again_with_backoff_and_its_tools_come_back(self) -> None:
        made: list[FakeServer] = []

        def make() -> FakeServer:
            made.append(FakeServer())
            return made[-1]

        multi = MultiServer({"a": self.a}, diagnostics=self.diagnostics, restart={"a": make}, backoff=(0.05, 0.05))
        up: queue.SimpleQueue[Any] = queue.SimpleQueue()
        multi.start(lambda data: up.put(json.loads(data)), self.ended.put)
        self.addCleanup(multi.close)
        multi.send(line(INIT))
        self.a.got()
        self.a.emit({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25", "capabilities": {}}})
        up.get(timeout=5)
        multi.send(line({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a__x", "arguments": {}}}))
        self.a.got()
        self.a.end()
        self.assertEqual(up.get(timeout=5), {"jsonrpc": "2.0", "id": 1, "error": lost("a")})
        self.assertEqual(up.get(timeout=5), {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        first = self.wait_for(made, 1)
        self.assertEqual(first.got(), {**INIT, "id": "toolreplay-restart-1"})
        first.end()  # it died before it was back: the next attempt
        second = self.wait_for(made, 2)
        self.assertEqual(second.got(), {**INIT, "id": "toolreplay-restart-2"})
        second.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-2", "result": {"capabilities": {"prompts": {}}}})
        self.assertEqual(second.got(), {"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.assertEqual([up.get(timeout=5) for _ in range(2)], [
            {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}])
        multi.send(line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "a__x", "arguments": {}}}))
        self.assertEqual(second.got()["params"], {"name": "x", "arguments": {}})
        self.assertTrue(self.a.closed and first.closed and self.ended.empty())
        self.assertEqual(self.diagnostics.getvalue(), (
            "toolreplay mcp-proxy: server 'a' ended (server exited): it is started again\n"
            "toolreplay mcp-proxy: server 'a' is back (started again): its tools are listed again\n"))

    def test_a_server_started_again_is_sent_its_own_subscriptions_again(self) -> None:
        made: list[FakeServer] = []

        def make() -> FakeServer:
            made.append(FakeServer())
            return made[-1]

        multi = MultiServer({"a": self.a, "bee": self.b}, names={"bee": "b"}, diagnostics=self.diagnostics,
                            restart={"a": make}, backoff=(0.05, 0.05))
        up: queue.SimpleQueue[Any] = queue.SimpleQueue()
        multi.start(lambda data: up.put(json.loads(data)), self.ended.put)
        self.addCleanup(multi.close)
        multi.send(line(INIT))
        offered = {"protocolVersion": "2025-11-25", "capabilities": {"resources": {"subscribe": True}}}
        logs = {"protocolVersion": "2025-11-25", "capabilities": {"resources": {"subscribe": True}, "logging": {}}}
        self.a.got(), self.b.got()
        self.a.emit({"jsonrpc": "2.0", "id": 0, "result": logs})
        self.b.emit({"jsonrpc": "2.0", "id": 0, "result": offered})
        up.get(timeout=5)
        multi.send(line({"jsonrpc": "2.0", "id": 9, "method": "logging/setLevel", "params": {"level": "error"}}))
        self.assertEqual(self.a.got()["params"], {"level": "error"})  # b offers no logging
        self.a.emit({"jsonrpc": "2.0", "id": 9, "result": {}})
        self.assertEqual(up.get(timeout=5), {"jsonrpc": "2.0", "id": 9, "result": {}})

        def subscribe(message_id: int, uri: str, method: str = "resources/subscribe") -> None:
            multi.send(line({"jsonrpc": "2.0", "id": message_id, "method": method, "params": {"uri": uri}}))

        for number, uri in enumerate(("a__file:///x", "bee__file:///x", "a__file:///no", "a__file:///y"), 1):
            subscribe(number, uri)
        self.assertEqual([self.a.got()["params"]["uri"] for _ in range(3)], ["file:///x", "file:///no", "file:///y"])
        self.assertEqual(self.b.got()["params"], {"uri": "file:///x"})
        self.a.emit({"jsonrpc": "2.0", "id": 1, "result": {}})
        self.a.emit({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "no such resource"}})
        self.a.emit({"jsonrpc": "2.0", "id": 4, "result": {}})
        self.b.emit({"jsonrpc": "2.0", "id": 2, "result": {}})
        self.assertEqual(sorted(up.get(timeout=5)["id"] for _ in range(4)), [1, 2, 3, 4])
        self.a.end()
        self.assertEqual(up.get(timeout=5)["method"], "notifications/tools/list_changed")
        self.assertEqual(up.get(timeout=5)["method"], "notifications/resources/list_changed")
        subscribe(5, "a__file:///y", "resources/unsubscribe")  # while it is down: not subscribed again
        self.assertEqual(up.get(timeout=5)["error"]["message"], "Internal error: the server 'a' has ended")
        first = self.wait_for(made, 1)
        self.assertEqual(first.got()["id"], "toolreplay-restart-1")
        first.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1", "result": logs})
        self.assertEqual([first.got(), first.got(), first.got()], [
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "toolreplay-restart-1-1", "method": "logging/setLevel",
             "params": {"level": "error"}},
            {"jsonrpc": "2.0", "id": "toolreplay-restart-1-2", "method": "resources/subscribe",
             "params": {"uri": "file:///x"}}])
        self.assertTrue(first.nothing() and self.b.nothing())  # b's own subscription is b's
        first.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1-1", "result": {}})
        first.emit({"jsonrpc": "2.0", "id": "toolreplay-restart-1-2", "error": {"code": -1, "message": "gone"}})
        first.emit({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "file:///z"}})
        self.assertEqual([up.get(timeout=5) for _ in range(3)], [  # the proxy's own answer is not the client's
            {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/resources/list_changed"},
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "a__file:///z"}}])
        self.assertEqual(self.diagnostics.getvalue(), (
            "toolreplay mcp-proxy: server 'a' ended (server exited): it is started again\n"
            "toolreplay mcp-proxy: server 'a' is back (started again): its tools are listed again\n"
            "toolreplay mcp-proxy: server 'a' refused the subscription to 'file:///x' again (gone): its updates no "
            "longer reach the client\n"))

    @staticmethod
    def wait_for(made: list[FakeServer], count: int) -> FakeServer:
        deadline = time.monotonic() + 5
        while len(made) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return made[count - 1]

    def test_the_record_names_the_server(self) -> None:
        self.assertEqual([self.multi.record_meta(tool) for tool in ("bee__x", "a__y", "zed__x", "x")],
                         [{"x-server": "b"}, {"x-server": "a"}, None, None])


@integration
class ProcessTest(unittest.TestCase):
    def start(self, servers: dict[str, Any], allowed: list[str], *flags: str) -> tuple[subprocess.Popen[bytes],
                                                                                        Callable[[], str]]:
        """`mcp-proxy --servers` in a process of its own, over the servers file `servers` with a policy allowing
        `allowed`; and the function that stops it and gives what it said on stderr."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        servers_path, policy = os.path.join(directory, "servers.json"), os.path.join(directory, "policy.json")
        with open(servers_path, "w", encoding="utf-8") as out:
            json.dump({"servers": servers}, out)
        with open(policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": allowed}, out)
        stderr = open(os.path.join(directory, "stderr.txt"), "w+b")  # noqa: SIM115 - closed by stop
        proxy = subprocess.Popen([sys.executable, "-m", "toolreplay", "mcp-proxy", "--policy", policy, *flags,
                                  "--servers", servers_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=stderr, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
        assert proxy.stdin is not None and proxy.stdout is not None

        def stop() -> str:
            proxy.kill()
            proxy.wait()
            assert proxy.stdin is not None and proxy.stdout is not None
            proxy.stdin.close()
            proxy.stdout.close()
            with stderr:
                stderr.seek(0)
                return stderr.read().decode()

        return proxy, stop

    def test_the_session_ends_when_every_server_ended_and_a_failure_exits_1(self) -> None:
        proxy, stop = self.start({"a": {"command": sys.executable, "args": [TINY]}}, ["a__crash"])
        assert proxy.stdin is not None and proxy.stdout is not None
        try:
            proxy.stdin.write(line({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                    "params": {"name": "a__crash", "arguments": {}}}))
            proxy.stdin.flush()  # the input stays open: the session ends because the server did
            reply = json.loads(proxy.stdout.readline())
            code = proxy.wait(timeout=30)
        finally:
            said = stop()
        # never initialized, so not started again: the session ends with its only server
        self.assertEqual((code, reply["result"]["content"][0]["text"], said), (
            1, "toolreplay: ConnectionError: the server 'a' ended before it answered",
            "toolreplay mcp-proxy: server 'a' ended (server exited): its tools are gone for the rest of the session\n"))

    def test_with_no_restart_an_initialized_server_that_ends_ends_the_session(self) -> None:
        proxy, stop = self.start({"a": {"command": sys.executable, "args": [TINY]}}, ["a__crash"], "--no-restart")
        assert proxy.stdin is not None and proxy.stdout is not None
        try:
            proxy.stdin.write(line(INIT))
            proxy.stdin.flush()
            initialized = json.loads(proxy.stdout.readline())
            proxy.stdin.write(line({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                    "params": {"name": "a__crash", "arguments": {}}}))
            proxy.stdin.flush()
            reply = json.loads(proxy.stdout.readline())
            code = proxy.wait(timeout=30)
        finally:
            said = stop()
        self.assertEqual((code, initialized["id"], reply["result"]["content"][0]["text"], said), (
            1, 0, "toolreplay: ConnectionError: the server 'a' ended before it answered",
            "toolreplay mcp-proxy: server 'a' ended (server exited): its tools are gone for the rest of the session\n"))

    def test_a_server_started_again_is_subscribed_again_and_its_updates_reach_the_client(self) -> None:
        """Two tiny servers with `--resources`; `a` exits and is started again: its own subscription is sent
        again (without the prefix), so its updates reach the client under their prefixed URIs, and the
        client's logging level, which went to both, is sent to it again."""
        proxy, stop = self.start({name: {"command": sys.executable, "args": [TINY, "--resources"]}
                                  for name in ("a", "b")}, ["a__touch", "a__crash", "b__touch"])
        assert proxy.stdin is not None and proxy.stdout is not None
        stdin, stdout = proxy.stdin, proxy.stdout

        def ask(message: Any, replies: int = 1) -> list[Any]:
            stdin.write(line(message))
            stdin.flush()
            return [json.loads(stdout.readline()) for _ in range(replies)]

        def touch(message_id: int, prefix: str) -> dict[str, Any]:
            return {"jsonrpc": "2.0", "id": message_id, "method": "tools/call",
                    "params": {"name": f"{prefix}__touch", "arguments": {}}}

        try:
            ask(INIT)
            subscribed = [ask({"jsonrpc": "2.0", "id": number, "method": "resources/subscribe",
                               "params": {"uri": uri}})[0] for number, uri in ((1, "a__note://one"),
                                                                               (2, "b__note://two"))]
            subscribed += ask({"jsonrpc": "2.0", "id": 6, "method": "logging/setLevel", "params": {"level": "debug"}})
            crashed = ask({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                           "params": {"name": "a__crash", "arguments": {}}}, 3)
            back = [json.loads(stdout.readline()) for _ in range(2)]  # after 1 s
            touched = ask(touch(4, "a"), 2) + ask(touch(5, "b"), 2)
        finally:
            said = stop()
        changed = [{"jsonrpc": "2.0", "method": f"notifications/{what}/list_changed"} for what in ("tools", "resources")]
        self.assertEqual(subscribed, [{"jsonrpc": "2.0", "id": number, "result": {}} for number in (1, 2, 6)])
        self.assertEqual(sorted(str(reply.get("id", reply.get("method"))) for reply in crashed),
                         ["3", *sorted(item["method"] for item in changed)])  # the answer is the router's
        self.assertEqual(back, changed)
        self.assertEqual(touched, [
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "a__note://one"}},
            {"jsonrpc": "2.0", "id": 4, "result": {"content": [{"type": "text", "text": (
                'touch {"level": "debug", "subscribed": ["note://one"]}')}], "isError": False}},
            {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "b__note://two"}},
            {"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": (
                'touch {"level": "debug", "subscribed": ["note://two"]}')}], "isError": False}}])
        self.assertEqual(said, "toolreplay mcp-proxy: server 'a' ended (server exited): it is started again\n"
                               "toolreplay mcp-proxy: server 'a' is back (started again): its tools are listed again\n")

    def test_env_is_set_over_the_proxys_environment(self) -> None:
        lines: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        server = StdioServer([sys.executable, "-c", "import os; print(os.environ['TOOLREPLAY_T'], "
                                                    "'PATH' in os.environ)"], env={"TOOLREPLAY_T": "set"})
        server.start(lines.put, lambda reason: None)
        self.assertEqual((lines.get(timeout=10), server.close()), (b"set True\n", 0))


class GateRecordMetaTest(unittest.TestCase):
    def test_record_meta_adds_keys_to_each_record(self) -> None:
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        path = os.path.join(directory, "record.jsonl")
        recorder = SessionRecorder.open(path, sealed=True, meta_keys=("outcome", "x-server"))
        gate = Gate({"gh__read": lambda: "ok"}, Policy("a", frozenset({"gh__read"})), recorder=recorder,
                    record_meta=lambda tool: {"x-server": "github"} if tool.startswith("gh__") else None)
        gate.call("gh__read", {})
        gate.call("other", {})
        recorder.close()
        with open(path, encoding="utf-8") as record:
            self.assertEqual([json.loads(row)["meta"] for row in record],
                             [{"outcome": "ran", "x-server": "github"}, {"outcome": "refused"}])


if __name__ == "__main__":
    unittest.main()
