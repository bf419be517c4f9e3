#!/usr/bin/env bash
# The MCP proxy's real-component tests (tests/test_mcp_real.py, tests/test_mcp_http.py): the MCP Python SDK client, the
# mcp-server-git reference server (PyPI), @modelcontextprotocol/server-filesystem and
# @modelcontextprotocol/server-everything (npm, run with node; everything honours cancellation and has
# tasks), installed into $TOOLREPLAY_MCP_TOOLS (default ~/.cache/toolreplay-mcp), where the tests look.
set -euo pipefail
MCP_SDK="mcp==2.3.0"
GIT_SERVER="mcp-server-git==2026.10.19"
# the http extra (mcp-proxy over Streamable HTTP: tests/test_mcp_http*.py); httptools is uvicorn's C parser
HTTP_STACK=("httpx==0.28.1" "uvicorn==0.54.0" "httptools==0.9.0" "starlette==1.10.0")
FILESYSTEM="@modelcontextprotocol/server-filesystem@2026.8.31"
EVERYTHING="@modelcontextprotocol/server-everything@2026.8.31"
TOOLS="${TOOLREPLAY_MCP_TOOLS:-$HOME/.cache/toolreplay-mcp}"

PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "$MCP_SDK" "$GIT_SERVER" \
  "${HTTP_STACK[@]}" >/dev/null

if ! command -v node >/dev/null || ! command -v npm >/dev/null || ! command -v git >/dev/null; then
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm git >/dev/null
fi

for package in "$FILESYSTEM" "$EVERYTHING"; do
  name="${package%@*}"
  installed="$TOOLS/node_modules/$name/package.json"
  if ! grep -q "\"version\": \"${package##*@}\"" "$installed" 2>/dev/null; then
    mkdir -p "$TOOLS"
    npm install --silent --no-audit --no-fund --prefix "$TOOLS" "$package" >/dev/null
  fi
  test -f "$TOOLS/node_modules/$name/dist/index.js"
done
