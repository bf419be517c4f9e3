"""The airline backtest in docs/policy.md matches the real corpus (skipped when the corpus is absent)."""

from __future__ import annotations

import os
import sys
import unittest

INTEGRATION_TIER = True  # the integration tier (tests/unit.py leaves this module out)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "..", "shared", "corpus", "real")
POLICY = os.path.join(ROOT, "samples", "airline-policy.json")


class AirlineBacktestTest(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir(CORPUS), "needs the real session corpus next to the checkout")
    def test_docs_table_matches_the_corpus(self) -> None:
        sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
        try:
            import backtest_policy
        finally:
            sys.path.pop(0)
        table = backtest_policy.format_table(backtest_policy.backtest(POLICY, "airline", CORPUS), POLICY)
        with open(os.path.join(ROOT, "docs", "policy.md"), encoding="utf-8") as handle:
            docs = handle.read()
        documented = docs.split("<!-- backtest:airline -->\n", 1)[1].split("<!-- /backtest:airline -->", 1)[0]
        self.assertEqual(documented, table)
        self.assertIn("| `cancel-after-lookup` | 6 | 7 |", table)


if __name__ == "__main__":
    unittest.main()
