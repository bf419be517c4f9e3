#!/usr/bin/env bash
# The checkpoint tests sign and verify with the real ssh-keygen (OpenSSH client tools).
set -euo pipefail
if command -v ssh-keygen >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq openssh-client >/dev/null
command -v ssh-keygen >/dev/null
