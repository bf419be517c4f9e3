"""The two tiers of tests (tests/unit.py) split the suite: every test is in exactly one."""

from __future__ import annotations

import os
import unittest

from tests.unit import HERE, _tests, tier


class TiersTest(unittest.TestCase):
    def test_the_tiers_partition_the_suite(self) -> None:
        loader = unittest.TestLoader()
        everything = sorted(test.id() for test in _tests(loader.discover(HERE, top_level_dir=os.path.dirname(HERE))))
        unit = sorted(test.id() for test in _tests(tier(loader, integration=False)))
        integration = sorted(test.id() for test in _tests(tier(loader, integration=True)))
        self.assertEqual(sorted(unit + integration), everything)
        self.assertGreater(len(unit), 400)
        self.assertIn("tests.test_readme.ReadmeExamplesTest.test_every_example_of_the_docs", integration)
        self.assertIn("tests.test_tiers.TiersTest.test_the_tiers_partition_the_suite", unit)
