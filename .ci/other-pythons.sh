#!/usr/bin/env bash
# The README promises Python 3.11 or newer: run the unit tests on every newer CPython this machine has
# (pyenv's 3.12 and 3.13 here). The integrations' real components are installed for python3 only, so
# their tests skip here (CI unset): they run in the main test run.
set -euo pipefail
for version in 3.12 3.13; do
  interpreter=""
  for candidate in "$HOME"/.pyenv/versions/"$version".*/bin/python /usr/bin/python"$version"; do
    if [ -x "$candidate" ]; then interpreter="$candidate"; fi
  done
  if [ -z "$interpreter" ] && command -v uv >/dev/null 2>&1; then
    uv python install --quiet "$version" >/dev/null 2>&1 && interpreter="$(uv python find "$version")" || true
  fi
  if [ -z "$interpreter" ]; then
    echo "python $version: not available here, not tested"
    continue
  fi
  echo "unit tests on $("$interpreter" --version)"
  log="$(mktemp)"
  if ! env -u CI "$interpreter" -m unittest discover -s tests >"$log" 2>&1; then
    cat "$log"; rm -f "$log"; exit 1
  fi
  tail -n 3 "$log"; rm -f "$log"
done
