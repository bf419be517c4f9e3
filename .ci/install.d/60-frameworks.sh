#!/usr/bin/env bash
# The framework adapters' tests (tests/test_adapter_*.py) run the real frameworks offline with their own
# test models: the OpenAI Agents SDK, LangChain core + LangGraph, pydantic-ai (slim). Pinned versions.
set -euo pipefail
PINS=("openai-agents==0.24.0" "langchain-core==1.8.1" "langgraph==1.2.22" "pydantic-ai-slim==2.68.0")
if python3 - "${PINS[@]}" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
sys.exit(any(version(name) != wanted for name, wanted in (pin.split("==") for pin in sys.argv[1:])))
PY
then
  exit 0
fi
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check "${PINS[@]}" >/dev/null 2>&1
python3 -c "import agents, langchain_core, langgraph, pydantic_ai"
