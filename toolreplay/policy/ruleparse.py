"""Reading the `rules` array of a policy file: every field, operator and operand checked at load time.

    {"id": "docs-only", "tools": ["write_file"], "effect": "deny", "reason": "writes stay in docs/",
     "unless": [{"arg": "path", "under": ["docs"]}]}
    {"id": "no-loop", "tools": ["*"], "effect": "deny", "reason": "the same call at most 3 times", "shadow": true,
     "unless": [{"identical": "*", "max": 3}]}

A mistake is a ValueError whose message names the rule (`rule "docs-only": ...`, or `rule 3: ...`
before its id is known); the loader adds the file name.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from toolreplay.format.canonical import canonical_bytes
from toolreplay.policy.matchers import MatchError, compile_glob, normalise_host_pattern, path_segments
from toolreplay.policy.regexbound import compile_bounded
from toolreplay.policy.rules import (
    ARG_OPERATORS,
    EFFECTS,
    LENGTH_OPERATORS,
    NUMBER_OPERATORS,
    AfterCondition,
    ArgCondition,
    Condition,
    CountCondition,
    IdenticalCondition,
    RateCondition,
    Rule,
)

__all__ = ["parse_rules", "parse_arg_conditions", "integer_field", "number_field"]

_RULE_FIELDS = ("id", "tools", "effect", "reason", "when", "unless", "shadow")
_ID = re.compile(r"[A-Za-z0-9_.-]+")
_SHOWN = 40


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def integer_field(value: Any, what: str, minimum: int) -> int:
    """An integer of at least `minimum`; `true`, `2.0` and `1e2` are not integers."""
    if type(value) is not int or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
        raise ValueError(f"{what} must be {kind}")
    return value


def number_field(value: Any, what: str, positive: bool = False) -> Any:
    """A number (not `true`) a double can hold: an int stays an int, anything else is a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a {'positive ' if positive else ''}number")
    if isinstance(value, int):
        value = int(value)  # a parsed 2.0 is an int subclass; keep a plain int
        try:
            float(value)
        except OverflowError:
            raise ValueError(f"{what} is too large: {_show(value)}") from None
    elif not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number")
    if positive and value <= 0:
        raise ValueError(f"{what} must be a positive number")
    return value


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{what} must be a non-empty array of strings")
    return value


def _tool_name(value: Any, what: str, allowed: frozenset[str]) -> str | None:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a tool name or \"*\"")
    if value == "*":
        return None
    if value not in allowed:
        raise ValueError(f"{what} names tool {_show(value)}, which is not in allowed_tools")
    return value


def _arg_path(value: Any) -> tuple[str | int, ...]:
    if isinstance(value, str) and value:
        return (value,)
    if (isinstance(value, list) and value and isinstance(value[0], str)
            and all(isinstance(step, str) or (type(step) is int and step >= 0) for step in value)):
        return tuple(value)
    raise ValueError("\"arg\" must be an argument name, or an array of keys and indexes starting with a name")


def _operand(operator: str, value: Any, root: tuple[str, ...] | None) -> Any:
    what = f"operator \"{operator}\""
    if operator == "under":
        folders = []
        for folder in _strings(value, what):
            try:
                segments = path_segments(folder)
            except MatchError:
                segments = ()
            if not segments:
                raise ValueError(f"{what}: folder {_show(folder)} must be a relative path inside the working folder")
            folders.append(segments)
        return tuple(folders), root
    if operator == "glob":
        return compile_glob(_strings(value, what))
    if operator == "regex":
        if not isinstance(value, str):
            raise ValueError(f"{what} must be a string")
        try:
            return compile_bounded(value)
        except re.error as exc:
            raise ValueError(f"{what}: bad regular expression {_show(value)}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{what}: {_show(value)} {exc}") from None
    if operator == "host":
        hosts = []
        for host in _strings(value, what):
            normal = normalise_host_pattern(host)
            if normal is None:
                raise ValueError(f"{what}: {_show(host)} is not a host name, an IP address, "
                                 "or \"*.\" followed by a host name")
            hosts.append(normal)
        return tuple(hosts)
    if operator == "eq":
        return canonical_bytes(value)
    if operator == "in":
        if not isinstance(value, list) or not value:
            raise ValueError(f"{what} must be a non-empty array")
        return frozenset(canonical_bytes(item) for item in value)
    if operator in NUMBER_OPERATORS:
        return number_field(value, what)
    assert operator in LENGTH_OPERATORS
    return integer_field(value, what, 0)


def _only(obj: dict[str, Any], known: tuple[str, ...], what: str) -> None:
    for key in obj:
        if key not in known:
            raise ValueError(f"unknown field {_show(key)} in {what} (known: {', '.join(known)})")


def _condition(obj: Any, allowed: frozenset[str], slots: dict[tuple[str, tuple[str, ...]], int],
               rates: list[int], root: tuple[str, ...] | None, tools: frozenset[str] | None) -> Condition:
    if not isinstance(obj, dict):
        raise ValueError(f"a condition must be an object, not {_show(obj)}")
    if "arg" in obj:
        operators = [key for key in obj if key != "arg"]
        for key in operators:
            if key not in ARG_OPERATORS:
                raise ValueError(f"unknown operator {_show(key)} (known: {', '.join(ARG_OPERATORS)})")
        if len(operators) != 1:
            raise ValueError("an argument condition has \"arg\" and exactly one operator")
        operator = operators[0]
        return ArgCondition(_arg_path(obj["arg"]), operator, _operand(operator, obj[operator], root))
    if "after" in obj:
        _only(obj, ("after", "same"), "an \"after\" condition")
        tool = _tool_name(obj["after"], "\"after\"", allowed)
        if tool is None:
            raise ValueError("\"after\" must name one tool, not \"*\"")
        same = tuple(_strings(obj["same"], "\"same\"")) if "same" in obj else ()
        if len(set(same)) != len(same):
            raise ValueError("\"same\" names an argument twice")
        slot = slots.setdefault((tool, same), len(slots))
        return AfterCondition(tool, same, slot)
    if "count" in obj:
        _only(obj, ("count", "max"), "a \"count\" condition")
        if "max" not in obj:
            raise ValueError("a \"count\" condition needs \"max\"")
        return CountCondition(_tool_name(obj["count"], "\"count\"", allowed), integer_field(obj["max"], "\"max\"", 0))
    if "rate" in obj:
        _only(obj, ("rate", "max", "seconds"), "a \"rate\" condition")
        for key in ("max", "seconds"):
            if key not in obj:
                raise ValueError(f"a \"rate\" condition needs \"{key}\"")
        rates.append(len(rates))
        return RateCondition(_tool_name(obj["rate"], "\"rate\"", allowed), integer_field(obj["max"], "\"max\"", 1),
                             float(number_field(obj["seconds"], "\"seconds\"", positive=True)), rates[-1])
    if "identical" in obj:
        return _identical(obj, allowed, tools)
    raise ValueError(f"a condition needs one of \"arg\", \"after\", \"count\", \"rate\", \"identical\", "
                     f"not {_show(obj)}")


def _identical(obj: dict[str, Any], allowed: frozenset[str], tools: frozenset[str] | None) -> IdenticalCondition:
    """`{"identical": TOOL_OR_STAR, "max": N}`, optionally with `"seconds": S`; its tool is one of the rule's."""
    _only(obj, ("identical", "max", "seconds"), "an \"identical\" condition")
    if "max" not in obj:
        raise ValueError("an \"identical\" condition needs \"max\"")
    tool = _tool_name(obj["identical"], "\"identical\"", allowed)
    if tool is not None and tools is not None and tool not in tools:
        raise ValueError(f"\"identical\" names tool {_show(tool)}, which is not one of the rule's tools")
    seconds = float(number_field(obj["seconds"], "\"seconds\"", positive=True)) if "seconds" in obj else None
    return IdenticalCondition(tool, integer_field(obj["max"], "\"max\"", 1), seconds)


def _conditions(value: Any, name: str, allowed: frozenset[str], slots: dict[tuple[str, tuple[str, ...]], int],
                rates: list[int], root: tuple[str, ...] | None,
                tools: frozenset[str] | None = None) -> tuple[Condition, ...]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"\"{name}\" must be a non-empty array of conditions")
    found = []
    for position, item in enumerate(value, 1):
        try:
            found.append(_condition(item, allowed, slots, rates, root, tools))
        except ValueError as exc:
            raise ValueError(f"\"{name}\" condition {position}: {exc}") from None
    return tuple(found)


def _rule(obj: Any, allowed: frozenset[str], slots: dict[tuple[str, tuple[str, ...]], int],
          rates: list[int], root: tuple[str, ...] | None) -> Rule:
    if not isinstance(obj, dict):
        raise ValueError(f"must be an object, not {_show(obj)}")
    _only(obj, _RULE_FIELDS, "a rule")
    for key in ("tools", "effect", "reason"):
        if key not in obj:
            raise ValueError(f"missing field \"{key}\"")
    tools = _strings(obj["tools"], "field \"tools\"")
    if "*" in tools and tools != ["*"]:
        raise ValueError("field \"tools\" is either [\"*\"] or a list of tool names")
    names = [_tool_name(tool, "field \"tools\"", allowed) for tool in tools]
    if obj["effect"] not in EFFECTS:
        raise ValueError(f"field \"effect\" must be one of {', '.join(EFFECTS)}, not {_show(obj['effect'])}")
    if not isinstance(obj["reason"], str) or not obj["reason"]:
        raise ValueError("field \"reason\" must be a non-empty string")
    shadow = obj.get("shadow", False)
    if type(shadow) is not bool:
        raise ValueError(f"field \"shadow\" must be true or false, not {_show(shadow)}")
    tool_set = None if names == [None] else frozenset(name for name in names if name is not None)
    when = _conditions(obj["when"], "when", allowed, slots, rates, root, tool_set) if "when" in obj else ()
    unless = _conditions(obj["unless"], "unless", allowed, slots, rates, root, tool_set) if "unless" in obj else None
    return Rule(obj["id"], tool_set, obj["effect"], obj["reason"], when, unless, shadow)


def parse_rules(value: Any, allowed: frozenset[str], root: tuple[str, ...] | None = None) -> tuple[Rule, ...]:
    """The rules of a policy file, in file order; a ValueError names the rule that is wrong.

    `root` (the segments of the policy's absolute root folder) is where `under` reads absolute paths.
    """
    if not isinstance(value, list):
        raise ValueError("field \"rules\" must be an array of rules")
    rules: list[Rule] = []
    seen: set[str] = set()
    slots: dict[tuple[str, tuple[str, ...]], int] = {}
    rates: list[int] = []
    for position, obj in enumerate(value, 1):
        rule_id = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(rule_id, str) or not _ID.fullmatch(rule_id):
            label = f"rule {position}"
            if isinstance(obj, dict) and "id" not in obj:
                raise ValueError(f"{label}: missing field \"id\"")
            if isinstance(obj, dict):
                raise ValueError(f"{label}: field \"id\" must be letters, digits, \"_\", \".\" or \"-\", "
                                 f"not {_show(rule_id)}")
            raise ValueError(f"{label}: must be an object, not {_show(obj)}")
        if rule_id in seen:
            raise ValueError(f"rule {json.dumps(rule_id)}: the id is used by an earlier rule")
        seen.add(rule_id)
        try:
            rules.append(_rule(obj, allowed, slots, rates, root))
        except ValueError as exc:
            raise ValueError(f"rule {json.dumps(rule_id)}: {exc}") from None
    return tuple(rules)


def parse_arg_conditions(value: Any, name: str, root: tuple[str, ...] | None = None) -> tuple[ArgCondition, ...]:
    """A non-empty array of argument conditions (`{"arg": ..., OPERATOR: ...}`, as a rule's `when` writes
    them), for files that match calls by their arguments alone (no `after`, `count`, `rate` or `identical`)."""
    if isinstance(value, list):
        for position, item in enumerate(value, 1):
            if isinstance(item, dict) and "arg" not in item:
                raise ValueError(f"\"{name}\" condition {position}: only argument conditions (\"arg\") are allowed "
                                 "here, not a session's history")
    conditions = _conditions(value, name, frozenset(), {}, [], root)
    return tuple(condition for condition in conditions if isinstance(condition, ArgCondition))
