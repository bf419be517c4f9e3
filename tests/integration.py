"""The integration tier: real components, other processes, the corpus, the docs' examples (see tests/unit.py).

    python -m unittest tests.integration
"""

from __future__ import annotations

import unittest

from tests.unit import tier


def load_tests(loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None) -> unittest.TestSuite:
    """`python -m unittest tests.integration`: the integration tier."""
    return tier(loader, integration=True)
