"""The permission file, read by both the audit (`scope`) and the guard, and its argument rules."""

from toolreplay.policy.model import Limits, Policy, load_policy, parse_policy
from toolreplay.policy.rules import Rule, RuleSet, RuleState, Ruling

__all__ = ["Limits", "Policy", "Rule", "RuleSet", "RuleState", "Ruling", "load_policy", "parse_policy"]
