"""The suite file: cases to run, and where their tools come from. Read strictly; errors name the field.

    {"tools": {"module": "toolreplay.demos.orders:TOOLS"},
     "cases": [{"id": "order-status", "question": "What is the status of order 3001?",
                "expected_answer": "shipped",
                "expected_tools": [{"tool": "get_order", "args": {"order_id": 3001}}],
                "match": "strict"}]}

`tools` is `{"module": "MODULE:ATTRIBUTE"}` (a dict of tool name to function) or `{"cassette": PATH}`
(a recorded session, PATH relative to the suite file). `expected_answer` is a string or a list of
strings the answer must all contain; `expected_tools` lists tool names or `{"tool", "args"}` objects;
`match` (optional) is one of the modes of `toolreplay.evaluation.metrics`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError, UsageError
from toolreplay.evaluation.metrics import MATCH_MODES, ExpectedCall
from toolreplay.evaluation.tools import ModuleTools, ToolSource, load_cassette
from toolreplay.format.strictjson import json_type_name, read_json_file

__all__ = ["Case", "Suite", "load_suite", "parse_suite"]

_CASE_FIELDS = ("id", "question", "expected_answer", "expected_tools", "match")
_REQUIRED_CASE_FIELDS = _CASE_FIELDS[:4]
_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True, slots=True)
class Case:
    """One case: the question, the information the answer must hold, the calls expected, the mode."""

    id: str
    question: str
    expected_answer: tuple[str, ...]
    expected_tools: tuple[ExpectedCall, ...]
    match: str | None = None


@dataclass(frozen=True, slots=True)
class Suite:
    """A validated suite: its path (for the report), its tools and its cases in file order."""

    path: str
    tools: ToolSource
    cases: tuple[Case, ...]


class _Invalid(ValueError):
    """A validation failure at one place in the suite (`where`, like `cases[2].id`)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}" if where else message)


def _check_fields(obj: Any, where: str, known: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _Invalid(where, f"{'must be' if where else 'a suite must be'} an object, not {json_type_name(obj)}")
    for key in obj:
        if key not in known:
            raise _Invalid(where, f"unknown field {json.dumps(key)} (known: {', '.join(known)})")
    for key in required:
        if key not in obj:
            raise _Invalid(where, f"missing field {json.dumps(key)}")
    return obj


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(where, "must be a non-empty string")
    return value


def _expected_answer(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (_text(value, where),)
    if not isinstance(value, list) or not value:
        raise _Invalid(where, "must be a non-empty string or a non-empty array of non-empty strings")
    return tuple(_text(item, f"{where}[{position}]") for position, item in enumerate(value))


def _expected_call(value: Any, where: str, tools: frozenset[str]) -> ExpectedCall:
    if isinstance(value, str):
        tool, args = value, None
        tool_where = where
    elif isinstance(value, dict):
        _check_fields(value, where, ("tool", "args"), ("tool",))
        tool, args = value["tool"], value.get("args")
        tool_where = f"{where}.tool"
        if not isinstance(tool, str):
            raise _Invalid(tool_where, f"must be a tool name (string), not {json_type_name(tool)}")
        if "args" in value and not isinstance(args, dict):
            raise _Invalid(f"{where}.args", f"must be an object, not {json_type_name(args)}")
    else:
        raise _Invalid(where, f"must be a tool name or an object with \"tool\" and optional \"args\", "
                              f"not {json_type_name(value)}")
    if tool not in tools:
        known = ", ".join(sorted(tools))
        raise _Invalid(tool_where, f"{json.dumps(tool)} is not a tool of this suite (tools: {known})")
    return ExpectedCall.of(tool, args)


def _case(obj: Any, where: str, tools: frozenset[str]) -> Case:
    fields = _check_fields(obj, where, _CASE_FIELDS, _REQUIRED_CASE_FIELDS)
    case_id = fields["id"]
    if not isinstance(case_id, str) or not _CASE_ID.fullmatch(case_id):
        raise _Invalid(f"{where}.id", "must be a string of letters, digits, '.', '_' or '-' "
                                      "starting with a letter or digit")
    expected_tools = fields["expected_tools"]
    if not isinstance(expected_tools, list):
        raise _Invalid(f"{where}.expected_tools", f"must be an array, not {json_type_name(expected_tools)}")
    match = fields.get("match")
    if "match" in fields and match not in MATCH_MODES:
        raise _Invalid(f"{where}.match", f"must be one of {', '.join(MATCH_MODES)}, not {json.dumps(match)}")
    return Case(
        id=case_id,
        question=_text(fields["question"], f"{where}.question"),
        expected_answer=_expected_answer(fields["expected_answer"], f"{where}.expected_answer"),
        expected_tools=tuple(_expected_call(item, f"{where}.expected_tools[{position}]", tools)
                             for position, item in enumerate(expected_tools)),
        match=match,
    )


def _module_tools(spec: Any) -> ModuleTools:
    where = "tools.module"
    if not isinstance(spec, str) or spec.count(":") != 1 or "" in spec.split(":"):
        raise _Invalid(where, f"must be \"MODULE:ATTRIBUTE\", not {json.dumps(spec)}")
    module_name, attribute = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a tool module can fail in any way while importing
        raise _Invalid(where, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, attribute):
        raise _Invalid(where, f"module {module_name!r} has no attribute {attribute!r}")
    table = getattr(module, attribute)
    if not isinstance(table, dict) or not table:
        raise _Invalid(where, f"{spec!r} must be a non-empty dict of tool name to function")
    for name in sorted(table, key=str):
        if not isinstance(name, str) or not name:
            raise _Invalid(where, f"{spec!r} has a key that is not a non-empty string: {name!r}")
        if not callable(table[name]):
            raise _Invalid(where, f"{spec!r} entry {name!r} is not callable")
    return ModuleTools(spec, dict(table))


def _tool_source(obj: Any, path: str) -> ToolSource:
    if not isinstance(obj, dict) or len(obj) != 1 or next(iter(obj)) not in ("module", "cassette"):
        raise _Invalid("tools", "must be an object with exactly one field, \"module\" or \"cassette\"")
    if "module" in obj:
        return _module_tools(obj["module"])
    relative = obj["cassette"]
    if not isinstance(relative, str) or relative in ("", "-"):
        raise _Invalid("tools.cassette", "must be a non-empty string (a session path relative to the suite)")
    cassette_path = os.path.join(os.path.dirname(path), relative)
    try:
        return load_cassette(cassette_path)
    except UsageError as exc:
        raise _Invalid("tools.cassette", str(exc)) from None


def parse_suite(obj: Any, path: str) -> Suite:
    """Validate a parsed suite; errors are InputErrors naming PATH and the field (`cases[1].id: ...`)."""
    try:
        fields = _check_fields(obj, "", ("tools", "cases"), ("tools", "cases"))
        tools = _tool_source(fields["tools"], path)
        cases_value = fields["cases"]
        if not isinstance(cases_value, list) or not cases_value:
            raise _Invalid("cases", "must be a non-empty array of cases")
        cases: list[Case] = []
        first_seen: dict[str, int] = {}
        for position, item in enumerate(cases_value):
            case = _case(item, f"cases[{position}]", tools.names)
            if case.id in first_seen:
                raise _Invalid(f"cases[{position}].id", f"duplicate case id {json.dumps(case.id)} "
                                                        f"(first at cases[{first_seen[case.id]}])")
            first_seen[case.id] = position
            cases.append(case)
    except _Invalid as exc:
        raise InputError(path, None, str(exc)) from None
    return Suite(path, tools, tuple(cases))


def load_suite(path: str) -> Suite:
    """Read and validate a suite file (strict JSON); an unreadable file is a UsageError."""
    return parse_suite(read_json_file(path), path)
