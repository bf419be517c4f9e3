#!/usr/bin/env bash
# Fleet audit tests: a real Dask LocalCluster (the dask extra) and headless Chromium for the HTML reports.
set -euo pipefail
if ! python3 -c "import distributed" >/dev/null 2>&1; then
  python3 -m pip install --quiet --disable-pip-version-check "dask[distributed]" >/dev/null
fi
python3 -c "import distributed"
if ! command -v chromium >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
fi
command -v chromium >/dev/null
