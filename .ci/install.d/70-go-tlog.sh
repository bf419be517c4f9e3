#!/usr/bin/env bash
# The proof tests check ToolReplay's tlog-checkpoints and Merkle proofs with an independent verifier: Go's
# golang.org/x/mod/sumdb/note and tlog, from Debian (built at test time with GO111MODULE=off, GOPATH=/usr/share/gocode).
set -euo pipefail
if command -v go >/dev/null 2>&1 && [ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq golang-go golang-golang-x-mod-dev >/dev/null
command -v go >/dev/null
[ -d /usr/share/gocode/src/golang.org/x/mod/sumdb/tlog ]
