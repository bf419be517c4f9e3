"""The permission file, read by both the audit (`scope`) and the guard."""

from toolreplay.policy.model import Limits, Policy, load_policy, parse_policy

__all__ = ["Limits", "Policy", "load_policy", "parse_policy"]
