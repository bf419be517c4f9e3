"""Front end: agent hooks (Claude Code, Gemini CLI, Codex). core.py decides and records over the guard (codex.py
holds what is Codex's own), reply.py turns an event into the agent's answer (exit code, stdout, stderr),
protocol.py is the socket protocol that the fast client (client.py) and the hook server (server.py) share;
http.py is the HTTP hook endpoint (`hook serve`). Nothing here is loaded by the fast client
but what it asks for."""
