"""Front end: the MCP proxy between a client and its servers (stdio; http/ for Streamable HTTP)."""
