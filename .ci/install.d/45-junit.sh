#!/bin/sh
# junitparser, a real JUnit XML consumer: tests/test_cli_evaluate.py reads `eval --format junit` output
# with it (U+FFFF in an argument and in an answer, the errors attribute). Test-only: eval never imports it.
set -e
python3 -c "import junitparser" 2>/dev/null && exit 0
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "junitparser==5.0.3" >/dev/null
