"""Front end: agent hooks (Claude Code, Gemini CLI), the decide-and-record core over the guard, the fast
client and the hook server. Nothing here is loaded by the fast client but what it asks for."""
