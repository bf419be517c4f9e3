"""The MCP proxy over Streamable HTTP: the listener that clients reach and the upstream client to servers."""
