"""Client configuration snippets: each printed (`mcp-proxy --print-config`) and each documented one
(docs/mcp-proxy.md) has its client's documented shape, and the command line in a printed one starts
the proxy in front of the tiny test server, which answers `initialize`."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from typing import Any

from tests.support import integration
from tests.test_cli import run
from tests.test_mcp_proxy import POLICY, ROOT, TINY, initialize
from toolreplay.mcp.config import CLIENTS

# Each client's stdio server entry, as its documentation describes it: required fields, allowed fields.
#   Claude Desktop (modelcontextprotocol.io quickstart): mcpServers.NAME = {command, args, env}
#   Claude Code (code.claude.com/docs/en/mcp, .mcp.json and `claude mcp add-json`): {type: "stdio", command, args, env}
#   Cursor (cursor.com/docs/mcp, .cursor/mcp.json): mcpServers.NAME = {type?, command, args, env, envFile}
#   VS Code (code.visualstudio.com/docs/copilot/reference/mcp-configuration): servers.NAME = {type: "stdio" (required),
#   command (required), args, env, envFile}; top level: servers, inputs
SCHEMAS = {
    "claude-desktop": ("mcpServers", {"command"}, {"command", "args", "env"}),
    "claude-code": ("mcpServers", {"command"}, {"type", "command", "args", "env"}),
    "cursor": ("mcpServers", {"command"}, {"type", "command", "args", "env", "envFile"}),
    "vscode": ("servers", {"type", "command"}, {"type", "command", "args", "env", "envFile"}),
}


def check_server(test: unittest.TestCase, client: str, server: Any) -> None:
    """One server entry against the client's documented stdio shape."""
    _, required, allowed = SCHEMAS["claude-code" if client == "claude-code-cli" else client]
    test.assertIsInstance(server, dict)
    test.assertLessEqual(required, set(server))
    test.assertLessEqual(set(server), allowed)
    test.assertIsInstance(server["command"], str)
    test.assertIsInstance(server.get("args", []), list)
    test.assertTrue(all(isinstance(arg, str) for arg in server.get("args", [])))
    if "type" in server:
        test.assertEqual(server["type"], "stdio")


def check_file(test: unittest.TestCase, client: str, snippet: Any) -> dict[str, Any]:
    """A whole configuration file's snippet; its one server entry."""
    root = SCHEMAS[client][0]
    test.assertIsInstance(snippet, dict)
    test.assertLessEqual(set(snippet), {root, "inputs"} if client == "vscode" else {root})
    (server,) = snippet[root].values()
    check_server(test, client, server)
    result: dict[str, Any] = server
    return result


@integration
class PrintConfigTest(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.directory)
        self.policy = os.path.join(self.directory, "policy.json")
        with open(self.policy, "w", encoding="utf-8") as out:
            json.dump(POLICY, out)

    def printed(self, client: str, *extra: str) -> str:
        code, out, err = run("mcp-proxy", "--print-config", client, "--policy", self.policy, *extra,
                             "--", sys.executable, TINY)
        self.assertEqual((code, err), (0, ""))
        return out

    def test_each_client_gets_its_documented_shape_and_its_command_starts_the_proxy(self) -> None:
        record = os.path.join(self.directory, "record.jsonl")
        approvals = os.path.join(self.directory, "approvals.jsonl")
        for client in CLIENTS:
            with self.subTest(client=client):
                out = self.printed(client, "--record", record, "--approvals", approvals, "--name", "notes")
                if client == "claude-code-cli":
                    words = shlex.split(out)
                    self.assertEqual(words[:4], ["claude", "mcp", "add-json", "notes"])
                    self.assertEqual(len(words), 5)
                    server = json.loads(words[4])
                    check_server(self, client, server)
                else:
                    snippet = json.loads(out)
                    self.assertEqual(list(snippet[SCHEMAS[client][0]]), ["notes"])
                    server = check_file(self, client, snippet)
                self.assertEqual(server["command"], sys.executable)
                self.assertEqual(server["args"], ["-m", "toolreplay", "mcp-proxy", "--policy", self.policy,
                                                  "--record", record, "--approvals", approvals, "--",
                                                  sys.executable, TINY])
                self.assertEqual(self.printed(client, "--record", record, "--approvals", approvals, "--name",
                                              "notes"), out)  # deterministic
                self.assert_starts(server)

    def assert_starts(self, server: dict[str, Any]) -> None:
        """Run the snippet's command line as a client would (another folder), and initialize."""
        elsewhere = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, elsewhere)
        process = subprocess.Popen([server["command"], *server["args"]], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=elsewhere,
                                   env={**os.environ, "PYTHONPATH": ROOT})  # as if toolreplay were installed
        try:
            out, err = process.communicate(json.dumps(initialize()).encode() + b"\n", timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        self.assertEqual((process.returncode, err), (0, b""))
        reply = json.loads(out)
        self.assertEqual((reply["id"], reply["result"]["serverInfo"]), (0, {"name": "tiny", "version": "1.0"}))

    def test_relative_paths_become_absolute_and_options_are_kept(self) -> None:
        here = os.getcwd()
        os.chdir(self.directory)
        self.addCleanup(os.chdir, here)
        out = self.printed("vscode", "--record", "r.jsonl", "--pins", "pins.json", "--mutator", "commit",
                           "--repeatable", "append", "--read-cache", "--no-restart")
        server = json.loads(out)["servers"]["tiny"]  # the policy's agent names it
        self.assertEqual(server["args"], ["-m", "toolreplay", "mcp-proxy", "--policy", self.policy,
                                          "--record", os.path.join(self.directory, "r.jsonl"), "--pins",
                                          os.path.join(self.directory, "pins.json"), "--mutator", "commit",
                                          "--repeatable", "append", "--read-cache", "--no-restart", "--",
                                          sys.executable, TINY])
        self.assertFalse(os.path.exists("r.jsonl"))  # nothing started, nothing written

    def test_several_servers_are_named_by_their_config_file(self) -> None:
        servers = os.path.join(self.directory, "servers.json")
        with open(servers, "w", encoding="utf-8") as out:
            json.dump({"servers": {"one": {"command": sys.executable, "args": [TINY]}}}, out)
        code, out, err = run("mcp-proxy", "--print-config", "cursor", "--policy", self.policy, "--servers", servers)
        self.assertEqual((code, err), (0, ""))
        self.assertEqual(json.loads(out)["mcpServers"]["tiny"]["args"],
                         ["-m", "toolreplay", "mcp-proxy", "--policy", self.policy, "--servers", servers])
        with open(servers, "w", encoding="utf-8") as out_file:
            out_file.write('{"servers": {"one": {}}}\n')  # checked before anything is printed
        code, out, err = run("mcp-proxy", "--print-config", "cursor", "--policy", self.policy, "--servers", servers)
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith(f"error: {servers}:1: "), err)

    def test_what_would_not_start_is_not_printed(self) -> None:
        approvals = os.path.join(self.directory, "approvals.jsonl")
        with open(approvals, "w", encoding="utf-8") as out:
            out.write("[]\n")
        self.assertEqual(run("mcp-proxy", "--print-config", "cursor", "--policy", self.policy, "--approvals",
                             approvals, "--", "server"),
                         (2, "", f"error: {approvals}:1: an approval must be a JSON object\n"))
        self.assertEqual(run("mcp-proxy", "--print-config", "cursor", "--policy", self.policy),
                         (2, "", "error: mcp-proxy needs the server command after --, or --servers FILE\n"))
        code, out, err = run("mcp-proxy", "--print-config", "zed", "--policy", self.policy, "--", "server")
        self.assertEqual((code, out), (2, ""))
        self.assertTrue(err.startswith("error: argument --print-config: invalid choice: 'zed' (choose from "), err)
        self.assertEqual(run("mcp-proxy", "--name", "x", "--policy", self.policy, "--", "server"),
                         (2, "", "error: --name is used with --print-config\n"))


class DocumentedSnippetsTest(unittest.TestCase):
    def test_each_documented_snippet_has_its_clients_shape(self) -> None:
        with open(os.path.join(ROOT, "docs", "mcp-proxy.md"), encoding="utf-8") as handle:
            text = handle.read()
        section = text.split("## Configuring a client", 1)[1].split("\n## ", 1)[0]
        # each snippet follows a line naming its client: <!-- client: NAME -->
        found = re.findall(r"<!-- client: ([a-z-]+) -->\n+```(?:json|text)\n(.*?)\n```", section, re.DOTALL)
        self.assertEqual(sorted({client for client, _ in found}), sorted(CLIENTS))
        for client, body in found:
            with self.subTest(client=client):
                if client == "claude-code-cli":
                    words = shlex.split(body)
                    self.assertEqual(words[:3], ["claude", "mcp", "add-json"])
                    server = json.loads(words[4])
                    check_server(self, client, server)
                else:
                    server = check_file(self, client, json.loads(body))
                self.assertEqual(server["args"][server["args"].index("mcp-proxy") - 2:][:3],
                                 ["-m", "toolreplay", "mcp-proxy"])
                self.assertIn("--", server["args"])


if __name__ == "__main__":
    unittest.main()
