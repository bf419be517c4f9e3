"""The MCP commands in-process through `main`: usage errors, a refusal, and mcp-pins."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import unittest

from tests.test_cli import run
from tests.test_mcp_proxy import TINY
from toolreplay.mcp.pins import ToolPins

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"rm","arguments":{"path":"/"}}}\n'


class McpProxyCliTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["echo"]}, out)

    def test_usage_errors(self) -> None:
        self.assertEqual(run("mcp-proxy", "--policy", self.policy),
                         (2, "", "error: mcp-proxy needs the server command after --, or --servers FILE\n"))
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--", "/no/such/server"),
                         (2, "", "error: cannot start the server /no/such/server: No such file or directory\n"))
        missing = os.path.join(self.directory, "missing.json")
        self.assertEqual(run("mcp-proxy", "--policy", missing, "--", "cat"),
                         (2, "", f"error: cannot read {missing}: No such file or directory\n"))

    def test_listener_limits_are_validated(self) -> None:
        base = ("mcp-proxy", "--policy", self.policy, "--records", self.directory, "--listen", "0")
        for flags, message in [
            (("--listen-head-timeout", "0"), "--listen-head-timeout 0.0: expected seconds, more than 0 and at most 3600"),
            (("--listen-head-timeout", "nan"), "--listen-head-timeout nan: expected seconds, more than 0 and at most "
                                               "3600"),
            (("--listen-head-timeout", "4000"), "--listen-head-timeout 4000.0: expected seconds, more than 0 and at "
                                                "most 3600"),
            (("--listen-max-connections", "0"), "--listen-max-connections 0: expected at least 1"),
        ]:
            with self.subTest(flags=flags):
                self.assertEqual(run(*base, *flags, "--", "cat"), (2, "", f"error: {message}\n"))
        for flag, value in (("--listen-head-timeout", "5"), ("--listen-max-connections", "5")):
            self.assertEqual(run("mcp-proxy", "--policy", self.policy, flag, value, "--", "cat"),
                             (2, "", f"error: {flag} needs --listen\n"))
        code, out, err = run(*base, "--listen-max-connections", "many", "--", "cat")
        self.assertEqual((code, out, err.splitlines()[0]), (2, "", "error: argument --listen-max-connections: "
                                                                   "invalid int value: 'many'"))

    def test_a_refused_call_in_process(self) -> None:
        record = os.path.join(self.directory, "record.jsonl")
        code, out, err = run("mcp-proxy", "--policy", self.policy, "--record", record, "--", sys.executable, TINY,
                             stdin=CALL)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(out, '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text",'
                              '"text":"toolreplay: tool not allowed: rm"}],"isError":true}}\n')
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))


    def test_redaction_before_sealing(self) -> None:
        token = "ghp_" + "Z8x" * 12
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump({"agent": "a", "allowed_tools": ["echo"], "redact": {}}, out)
        record, key = os.path.join(self.directory, "record.jsonl"), os.path.join(self.directory, "key")
        with open(key, "wb") as out:
            out.write(b"a key kept off the record\n")
        call = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":'
                f'{{"text":"{token}"}}}}}}\n').encode()
        server = ["--", sys.executable, TINY]
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--record", record, *server, stdin=call),
                         (2, "", 'error: the policy\'s "redact" section needs --redact-key FILE (a key of at least '
                                 '16 bytes, kept off the record)\n'))
        self.assertFalse(os.path.exists(record))
        code, out, err = run("mcp-proxy", "--policy", self.policy, "--record", record, "--redact-key", key, *server,
                             stdin=call)
        self.assertEqual((code, err), (0, ""))
        self.assertIn(token, out)  # the client gets the real answer
        with open(record, encoding="utf-8") as handle:
            text = handle.read()
        self.assertNotIn(token, text)
        self.assertRegex(text, r'"args":\{"text":"\[redacted:github-token:[0-9a-f]{24}\]"\}')
        self.assertEqual(run("verify", record), (0, "chain: intact\n", ""))
        with open(key, "wb") as out:
            out.write(b"short")
        self.assertEqual(run("mcp-proxy", "--policy", self.policy, "--record", record, "--redact-key", key, *server),
                         (2, "", f"error: --redact-key {key}: a redaction key must be at least 16 bytes\n"))


class McpPinsCliTest(unittest.TestCase):
    def test_show_and_accept(self) -> None:
        path = os.path.join(tempfile.mkdtemp(), "pins.json")
        self.assertEqual(run("mcp-pins", "show", path), (0, "", ""))
        tool = {"name": "echo\x1b[2J", "description": "Echo.", "inputSchema": {"type": "object"}}
        ToolPins(path).check([tool])
        ToolPins(path).check([{**tool, "description": "Echo!"}])
        code, out, err = run("mcp-pins", "show", path)
        self.assertEqual((code, err), (1, ""))
        self.assertRegex(out, r"^pinned echo\\x1b\[2J [0-9a-f]{16}\npending echo\\x1b\[2J [0-9a-f]{16} \(changed\)\n$")
        self.assertEqual(run("mcp-pins", "accept", path, "--tool", "echo\x1b[2J"), (
            0, "accepted tool 'echo\\x1b[2J' changed since it was pinned: description\n", ""))
        self.assertEqual(run("mcp-pins", "accept", path), (0, f"nothing pending for {path}\n", ""))


if __name__ == "__main__":
    unittest.main()
