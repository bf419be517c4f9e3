"""The unit tier: every test but the integration tier's, in a few seconds.

    python -m unittest tests.unit           # the unit tier
    python -m unittest tests.integration    # the integration tier
    python -m unittest discover -s tests    # both (what CI and the README run)

The integration tier is every test class marked `@integration` and every module that sets
`INTEGRATION_TIER = True` (see tests/support.py): tests that start a real component (MCP servers,
a Dask cluster, Chromium, OpenSSH, the OpenTelemetry packages), start or kill other processes, read
the corpus, or run the documentation's examples.
"""

from __future__ import annotations

import os
import unittest
from collections.abc import Iterator

from tests.support import is_integration

HERE = os.path.dirname(os.path.abspath(__file__))


def _tests(suite: unittest.TestSuite) -> Iterator[unittest.TestCase]:
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _tests(item)
        else:
            yield item


def tier(loader: unittest.TestLoader, integration: bool) -> unittest.TestSuite:
    """The tests of one tier, found as `discover -s tests` finds them."""
    everything = loader.discover(HERE, top_level_dir=os.path.dirname(HERE))
    return unittest.TestSuite(test for test in _tests(everything) if is_integration(test) == integration)


def load_tests(loader: unittest.TestLoader, tests: unittest.TestSuite, pattern: str | None) -> unittest.TestSuite:
    """`python -m unittest tests.unit`: the unit tier."""
    return tier(loader, integration=False)
