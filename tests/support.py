"""Test helpers shared by the integration tests: a real component is required in CI, optional locally."""

from __future__ import annotations

import os
import unittest

__all__ = ["IN_CI", "require"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(available: bool, reason: str) -> None:
    """Skip the calling test with a visible reason when a real component is missing; fail in CI (`CI=true`)."""
    if available:
        return
    if IN_CI:
        raise AssertionError(f"required in CI but missing: {reason}")
    raise unittest.SkipTest(reason)
