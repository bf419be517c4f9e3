"""MCP client configuration snippets that start a server behind `toolreplay mcp-proxy` (docs/mcp-proxy.md).

Each client names its stdio servers in its own JSON shape, as its documentation describes it:

- Claude Desktop (`claude_desktop_config.json`) and Cursor (`.cursor/mcp.json`, `~/.cursor/mcp.json`):
  `{"mcpServers": {NAME: {"command": ..., "args": [...]}}}`;
- Claude Code (`.mcp.json`): the same with `"type": "stdio"`; `claude mcp add-json NAME JSON` takes the
  server's object alone;
- VS Code (`.vscode/mcp.json`): `{"servers": {NAME: {"type": "stdio", "command": ..., "args": [...]}}}`.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

__all__ = ["CLIENTS", "client_config"]

CLIENTS = ("claude-desktop", "claude-code", "claude-code-cli", "cursor", "vscode")


def _server(client: str, command: str, args: list[str]) -> dict[str, Any]:
    """The one server's object in the client's shape."""
    if client in ("claude-code", "claude-code-cli", "vscode"):
        return {"type": "stdio", "command": command, "args": args}
    return {"command": command, "args": args}


def client_config(client: str, name: str, command: str, args: list[str]) -> str:
    """The snippet (newline-terminated) that makes `client` start `command args` as its stdio server `name`:
    JSON for a configuration file, or for `claude-code-cli` the `claude mcp add-json` command line."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r} (known: {', '.join(CLIENTS)})")
    server = _server(client, command, args)
    if client == "claude-code-cli":
        text = json.dumps(server, ensure_ascii=True, separators=(",", ":"))
        return f"claude mcp add-json {shlex.quote(name)} {shlex.quote(text)}\n"
    root = "servers" if client == "vscode" else "mcpServers"
    return json.dumps({root: {name: server}}, indent=2, ensure_ascii=True) + "\n"
