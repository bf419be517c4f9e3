"""The permission file: the scope file, optionally with the guard's write tools, limits and rules.

    {"agent": "docs-reader", "allowed_tools": ["read_file", "list_dir", "search"],
     "write_tools": ["write_file"], "repeatable_tools": ["append_log"],
     "limits": {"max_steps": 20, "max_result_bytes": 100000, "max_seconds": 60}, "rules": [...]}

`agent` and `allowed_tools` are required; `write_tools`, `repeatable_tools`, `limits`, `rules`,
`root` (the folder the tools' relative paths are relative to, where `under` rules read absolute
paths) and `redact` are optional; anything else is an input error, and so is a `write_tools` or
`repeatable_tools` entry that is not in `allowed_tools`, or a tool name that looks like a pattern
(`book_*`: names match exactly). Integer limits
are JSON integers (not `2.0`, `1e2` or `true`). `scope` checks the names and the rules; the guard
enforces all of it. The rules' syntax is in `toolreplay.policy.ruleparse` and docs/policy.md.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from toolreplay.errors import InputError
from toolreplay.format.strictjson import read_json_file
from toolreplay.policy.redaction import Redaction, parse_redaction
from toolreplay.policy.ruleparse import integer_field, number_field, parse_rules
from toolreplay.policy.rules import Rule

__all__ = ["Limits", "Policy", "load_policy", "parse_policy"]

_LIMIT_FIELDS = ("max_steps", "max_result_bytes", "max_seconds")
_FIELDS = ("agent", "allowed_tools", "write_tools", "repeatable_tools", "limits", "rules", "root", "redact")
_PATTERN_CHARACTERS = frozenset("*?[")  # glob syntax: refused in a tool name rather than read literally


@dataclass(frozen=True, slots=True)
class Limits:
    """Budgets for one guarded session; None means no limit."""

    max_steps: int | None = None
    max_result_bytes: int | None = None
    max_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Policy:
    """Which tools an agent may call, which of them write, its budgets and its argument rules."""

    agent: str
    allowed_tools: frozenset[str]
    write_tools: frozenset[str] = frozenset()
    limits: Limits = field(default_factory=Limits)
    rules: tuple[Rule, ...] = ()
    # state-changing tools whose identical calls are each a new action (append, send, insert)
    repeatable_tools: frozenset[str] = frozenset()
    root: str | None = None  # absolute; where `under` rules read absolute paths
    redact: Redaction | None = None  # what the guard's record replaces by a keyed hash (`toolreplay.policy.redaction`)


def _string_list(value: Any, name: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise ValueError(f"field \"{name}\" must be an array of strings")
    for position, item in enumerate(value):
        if not isinstance(item, str):
            raise ValueError(f"field \"{name}\" item {position} must be a string, not {json.dumps(item)[:40]}")
        if _PATTERN_CHARACTERS.intersection(item):
            raise ValueError(f"field \"{name}\" item {position} {json.dumps(item)[:40]} is a pattern, not a tool "
                             "name: tool names match exactly, so list each tool")
    return frozenset(value)


def _root(value: Any, base: str | None) -> tuple[str, tuple[str, ...]]:
    """The root as an absolute path and its segments; a relative root is relative to `base`."""
    if not isinstance(value, str) or not value:
        raise ValueError("field \"root\" must be a folder (a non-empty string)")
    if value[0] == "~" or "\\" in value or "\x00" in value:
        raise ValueError("field \"root\" must be a folder path without ~, backslash or NUL")
    path = value if value.startswith("/") else os.path.join(os.path.abspath(base or os.curdir), value)
    segments = tuple(segment for segment in posixpath.normpath(path).split("/") if segment)
    return "/" + "/".join(segments), segments


def _limits(value: Any) -> Limits:
    if not isinstance(value, dict):
        raise ValueError("field \"limits\" must be an object")
    for key in value:
        if key not in _LIMIT_FIELDS:
            raise ValueError(f"unknown field {json.dumps(key)} in \"limits\" (known: {', '.join(_LIMIT_FIELDS)})")
    found: dict[str, Any] = {}
    for key in _LIMIT_FIELDS:
        if key not in value:
            continue
        what = f"limit \"{key}\""
        if key == "max_seconds":
            found[key] = float(number_field(value[key], what, positive=True))
        else:
            found[key] = integer_field(value[key], what, 1)
    return Limits(**found)


def parse_policy(obj: Any, base: str | None = None) -> Policy:
    """Validate a parsed permission object; a ValueError says what is wrong.

    `base` is the folder a relative `root` is relative to (the policy file's; default the current one).
    """
    if not isinstance(obj, dict):
        raise ValueError("permission file must hold one JSON object")
    for key in obj:
        if key not in _FIELDS:
            raise ValueError(f"unknown field {json.dumps(key)}")
    for key in ("agent", "allowed_tools"):
        if key not in obj:
            raise ValueError(f"missing field \"{key}\"")
    if not isinstance(obj["agent"], str):
        raise ValueError("field \"agent\" must be a string")
    allowed = _string_list(obj["allowed_tools"], "allowed_tools")
    write_tools = _string_list(obj.get("write_tools", []), "write_tools")
    for name in obj.get("write_tools", []):
        if name not in allowed:
            raise ValueError(f"write tool {json.dumps(name)[:60]} is not in allowed_tools "
                             "(a write tool must be allowed to be confirmed)")
    repeatable = _string_list(obj.get("repeatable_tools", []), "repeatable_tools")
    for name in sorted(repeatable - allowed):
        raise ValueError(f"repeatable tool {json.dumps(name)[:60]} is not in allowed_tools")
    root, segments = _root(obj["root"], base) if "root" in obj else (None, None)
    return Policy(
        agent=obj["agent"],
        allowed_tools=allowed,
        write_tools=write_tools,
        limits=_limits(obj.get("limits", {})),
        rules=parse_rules(obj["rules"], allowed, segments) if "rules" in obj else (),
        repeatable_tools=repeatable,
        root=root,
        redact=parse_redaction(obj["redact"]) if "redact" in obj else None,
    )


def load_policy(path: str) -> Policy:
    """Read and validate a permission file; errors name the file (and line, for invalid JSON)."""
    obj = read_json_file(path)
    try:
        return parse_policy(obj, os.path.dirname(os.path.abspath(path)))
    except ValueError as exc:
        raise InputError(path, None, str(exc)) from None
