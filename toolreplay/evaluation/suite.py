"""The suite file: cases to run, and where their tools come from. Read strictly; errors name the field.

    {"tools": {"module": "toolreplay.demos.orders:TOOLS"},
     "args_match": {"search": "includes", "*": "exact"},
     "cases": [{"id": "order-status", "question": "What is the status of order 3001?",
                "expected_answer": "shipped",
                "expected_tools": [{"tool": "get_order", "args": {"order_id": 3001}, "args_match": "exact"}],
                "match": "strict"}]}

`tools` is `{"module": "MODULE:ATTRIBUTE"}` (a dict of tool name to function, shared by every run),
`{"factory": "MODULE:FUNCTION"}` (called once per run, returning such a dict) or `{"cassette": PATH}`
with an optional `"responses": "sequential" | "first"` (a recorded session, PATH relative to the suite
file). A case may have its own `tools`, of the same forms (a per-case cassette: a session imported
from one conversation); then the suite's `tools` may be left out when every case has its own.
`args_match` (suite: per tool, `"*"` for the others; case: for all its calls; expected call: for
that call) is one of `exact`, `ignore`, `subset` (= `within`), `superset` (= `includes`) or an array of
the field paths that must match (`"time.start"`, `\\.` a dot in a key, or `["time", "start"]`), each of
which the expected args must have; the most specific wins, `exact` by default. `subset` and `superset`
mean what agentevals means (the arguments made are a subset / superset of the expected ones), the
reverse of before: the suite's `warnings` say where they are used. `expected_answer` is a string or a
list of strings the answer must all contain; `scorer` (MODULE:FUNCTION, called as
`scorer(answer, calls, case)`, returning a bool or a number) checks the answer beside or instead of
it, a number passing at `min_score` (default 0.5) or more. `expected_tools` lists tool names or
`{"tool", "args", "args_match"}` objects; `match` (optional) is one of the modes of
`toolreplay.evaluation.metrics`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError, UsageError
from toolreplay.evaluation.agent import import_callable
from toolreplay.evaluation.metrics import (
           ARGUMENT_MODES,
           ARGUMENT_SYNONYMS,
           MATCH_MODES,
           ArgumentMode,
           ExpectedCall,
           FieldPath,
           field_path_text,
           has_field,
           parse_field_path,
)
from toolreplay.evaluation.tools import (
           CASSETTE_MODES,
           FactoryTools,
           ModuleTools,
           ToolSource,
           check_tool_table,
           load_cassette,
)
from toolreplay.format.strictjson import json_type_name, read_json_file

__all__ = ["DEFAULT_MIN_SCORE", "Case", "Scorer", "Suite", "load_suite", "parse_suite"]

_CASE_FIELDS = ("id", "question", "expected_answer", "expected_tools", "match", "args_match", "scorer",
                "min_score", "tools")
_REQUIRED_CASE_FIELDS = ("id", "question", "expected_tools")
_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
DEFAULT_MIN_SCORE = 0.5


@dataclass(frozen=True, slots=True)
class Scorer:
    """A case's own check: `function(answer, calls, case) -> bool | float`, loaded from `spec`."""

    spec: str
    function: Callable[..., Any]
    min_score: float = DEFAULT_MIN_SCORE


@dataclass(frozen=True, slots=True)
class Case:
    """One case: the question, the information the answer must hold, the calls expected, the mode."""

    id: str
    question: str
    expected_answer: tuple[str, ...]
    expected_tools: tuple[ExpectedCall, ...]
    match: str | None = None
    scorer: Scorer | None = None
    expected_turns: tuple[int, ...] = ()  # the turn of each expected call; () when each is its own turn
    tools: ToolSource | None = None  # the case's own tools (a field of the case), else the suite's


@dataclass(frozen=True, slots=True)
class Suite:
    """A validated suite: its path (for the report), its tools and its cases in file order."""

    path: str
    tools: ToolSource | None  # None when every case has its own
    cases: tuple[Case, ...]
    warnings: tuple[str, ...] = ()  # argument modes whose meaning changed, where they are used

    def tools_of(self, case: Case) -> ToolSource:
        """The tools a case runs with: its own, else the suite's."""
        source = case.tools or self.tools
        assert source is not None, "parse_suite gives every case tools"
        return source

    @property
    def tool_names(self) -> frozenset[str]:
        """Every tool name of the suite and of its cases' own tools."""
        names = frozenset(self.tools.names) if self.tools is not None else frozenset()
        return names.union(*(case.tools.names for case in self.cases if case.tools is not None))


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


def _field_path(item: Any, where: str) -> FieldPath:
    if isinstance(item, list) and item and all(isinstance(key, str) and key for key in item):
        return tuple(item)
    if isinstance(item, str):
        try:
            return parse_field_path(item)
        except ValueError as exc:
            raise _Invalid(where, str(exc)) from None
    raise _Invalid(where, "a field path is a dotted string or a non-empty array of keys, "
                          f"not {json.dumps(item)[:60]}")


def _argument_mode(value: Any, where: str) -> ArgumentMode:
    if isinstance(value, str) and value in ARGUMENT_MODES:
        return value
    if isinstance(value, list) and value and all(isinstance(item, (str, list)) for item in value):
        return tuple(_field_path(item, f"{where}[{position}]") for position, item in enumerate(value))
    raise _Invalid(where, f"must be one of {', '.join(ARGUMENT_MODES)} or a non-empty array of field paths, "
                          f"not {json.dumps(value)[:60]}")


def _expected_call(value: Any, where: str, tools: frozenset[str], default: ArgumentMode | None,
                   per_tool: dict[str, ArgumentMode]) -> ExpectedCall:
    mode: ArgumentMode | None = None
    if isinstance(value, str):
        tool, args = value, None
        tool_where = where
    elif isinstance(value, dict):
        _check_fields(value, where, ("tool", "args", "args_match"), ("tool",))
        tool, args = value["tool"], value.get("args")
        tool_where = f"{where}.tool"
        if not isinstance(tool, str):
            raise _Invalid(tool_where, f"must be a tool name (string), not {json_type_name(tool)}")
        if "args" in value and not isinstance(args, dict):
            raise _Invalid(f"{where}.args", f"must be an object, not {json_type_name(args)}")
        if "args_match" in value:
            mode = _argument_mode(value["args_match"], f"{where}.args_match")
    else:
        raise _Invalid(where, f"must be a tool name or an object with \"tool\" and optional \"args\", "
                              f"not {json_type_name(value)}")
    if tool not in tools:
        known = ", ".join(sorted(tools))
        raise _Invalid(tool_where, f"{json.dumps(tool)} is not a tool of this suite (tools: {known})")
    mode = mode or default or per_tool.get(tool) or per_tool.get("*") or "exact"
    if isinstance(mode, tuple) and args is not None:
        for path in mode:
            if not has_field(args, path):  # compared absent with absent, it could never fail
                raise _Invalid(f"{where}.args", f"has no field {json.dumps(field_path_text(path))}, which its "
                                                "args_match compares")
    return ExpectedCall.of(tool, args, mode)


def _scorer(fields: dict[str, Any], where: str) -> Scorer | None:
    if "min_score" in fields and "scorer" not in fields:
        raise _Invalid(f"{where}.min_score", "needs a \"scorer\"")
    if "scorer" not in fields:
        return None
    spec = fields["scorer"]
    if not isinstance(spec, str):
        raise _Invalid(f"{where}.scorer", f"must be \"MODULE:FUNCTION\", not {json_type_name(spec)}")
    minimum = fields.get("min_score", DEFAULT_MIN_SCORE)
    if isinstance(minimum, bool) or not isinstance(minimum, (int, float)):
        raise _Invalid(f"{where}.min_score", f"must be a number, not {json_type_name(minimum)}")
    try:
        return Scorer(spec, import_callable(spec, "scorer"), float(minimum))
    except UsageError as exc:
        raise _Invalid(f"{where}.scorer", str(exc)) from None


def _case(obj: Any, where: str, suite_tools: ToolSource | None, per_tool: dict[str, ArgumentMode],
          path: str) -> Case:
    fields = _check_fields(obj, where, _CASE_FIELDS, _REQUIRED_CASE_FIELDS)
    own_tools = _tool_source(fields["tools"], path, f"{where}.tools") if "tools" in fields else None
    source = own_tools or suite_tools
    if source is None:
        raise _Invalid(where, "missing field \"tools\" (the suite has no \"tools\" for all its cases)")
    tools = source.names
    case_id = fields["id"]
    if not isinstance(case_id, str) or not _CASE_ID.fullmatch(case_id):
        raise _Invalid(f"{where}.id", "must be a string of letters, digits, '.', '_' or '-' "
                                      "starting with a letter or digit")
    question = _text(fields["question"], f"{where}.question")
    if "expected_answer" not in fields and "scorer" not in fields:
        raise _Invalid(where, "missing field \"expected_answer\" (or a \"scorer\")")
    expected_answer = (_expected_answer(fields["expected_answer"], f"{where}.expected_answer")
                       if "expected_answer" in fields else ())
    expected_tools = fields["expected_tools"]
    if not isinstance(expected_tools, list):
        raise _Invalid(f"{where}.expected_tools", f"must be an array, not {json_type_name(expected_tools)}")
    match = fields.get("match")
    if "match" in fields and match not in MATCH_MODES:
        raise _Invalid(f"{where}.match", f"must be one of {', '.join(MATCH_MODES)}, not {json.dumps(match)}")
    default = _argument_mode(fields["args_match"], f"{where}.args_match") if "args_match" in fields else None
    calls: list[ExpectedCall] = []
    turns: list[int] = []
    for position, item in enumerate(expected_tools):
        item_where = f"{where}.expected_tools[{position}]"
        group = item if isinstance(item, list) else [item]
        if isinstance(item, list) and not item:
            raise _Invalid(item_where, "a group of calls made in one turn must not be empty")
        for member, value in enumerate(group):
            value_where = f"{item_where}[{member}]" if isinstance(item, list) else item_where
            if isinstance(item, list) and isinstance(value, list):
                raise _Invalid(value_where, "groups do not nest: list the calls of one turn in one array")
            calls.append(_expected_call(value, value_where, tools, default, per_tool))
            turns.append(position)
    return Case(
        id=case_id,
        question=question,
        expected_answer=expected_answer,
        expected_tools=tuple(calls),
        match=match,
        scorer=_scorer(fields, where),
        expected_turns=tuple(turns) if len(turns) != len(expected_tools) else (),
        tools=own_tools,
    )


def _import_table(spec: Any, where: str, kind: str) -> tuple[str, Any]:
    if not isinstance(spec, str) or spec.count(":") != 1 or "" in spec.split(":"):
        raise _Invalid(where, f"must be \"MODULE:{kind}\", not {json.dumps(spec)}")
    module_name, attribute = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a tool module can fail in any way while importing
        raise _Invalid(where, f"cannot import {module_name!r}: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, attribute):
        raise _Invalid(where, f"module {module_name!r} has no attribute {attribute!r}")
    return spec, getattr(module, attribute)


def _module_tools(value: Any, where: str) -> ModuleTools:
    spec, table = _import_table(value, where, "ATTRIBUTE")
    try:
        return ModuleTools(spec, check_tool_table(table, spec))
    except ValueError as exc:
        raise _Invalid(where, str(exc)) from None


def _factory_tools(value: Any, where: str) -> FactoryTools:
    spec, factory = _import_table(value, where, "FUNCTION")
    if not callable(factory):
        raise _Invalid(where, f"{spec!r} is not callable")
    try:
        table = factory()
    except Exception as exc:  # the factory is user code
        raise _Invalid(where, f"{spec!r} raised {type(exc).__name__}: {exc}") from None
    try:
        names = frozenset(check_tool_table(table, f"{spec}()"))
    except ValueError as exc:
        raise _Invalid(where, str(exc)) from None
    return FactoryTools(spec, factory, names)


_TOOL_SOURCES = ("module", "factory", "cassette")


def _tool_source(obj: Any, path: str, where: str = "tools") -> ToolSource:
    if not isinstance(obj, dict) or len([key for key in obj if key in _TOOL_SOURCES]) != 1:
        raise _Invalid(where, "must be an object with exactly one of \"module\", \"factory\" or \"cassette\"")
    if "module" in obj:
        _check_fields(obj, where, ("module",), ())
        return _module_tools(obj["module"], f"{where}.module")
    if "factory" in obj:
        _check_fields(obj, where, ("factory",), ())
        return _factory_tools(obj["factory"], f"{where}.factory")
    _check_fields(obj, where, ("cassette", "responses"), ())
    relative = obj["cassette"]
    if not isinstance(relative, str) or relative in ("", "-"):
        raise _Invalid(f"{where}.cassette", "must be a non-empty string (a session path relative to the suite)")
    mode = obj.get("responses", "sequential")
    if mode not in CASSETTE_MODES:
        raise _Invalid(f"{where}.responses", f"must be one of {', '.join(CASSETTE_MODES)}, not {json.dumps(mode)}")
    cassette_path = os.path.join(os.path.dirname(path), relative)
    try:
        return load_cassette(cassette_path, mode)
    except UsageError as exc:
        raise _Invalid(f"{where}.cassette", str(exc)) from None


def _per_tool_modes(value: Any, tools: frozenset[str] | None) -> dict[str, ArgumentMode]:
    if not isinstance(value, dict):
        raise _Invalid("args_match", f"must be an object of tool name to mode, not {json_type_name(value)}")
    modes = {}
    for tool, mode in value.items():
        modes[tool] = _argument_mode(mode, f"args_match.{tool}")
    if tools is not None:
        _check_tool_names(modes, tools)
    return modes


def _check_tool_names(modes: dict[str, ArgumentMode], tools: frozenset[str]) -> None:
    for tool in modes:
        if tool not in tools and tool != "*":  # "*": every tool not named
            raise _Invalid("args_match", f"{json.dumps(tool)} is not a tool of this suite "
                                         f"(tools: {', '.join(sorted(tools))})")


def parse_suite(obj: Any, path: str) -> Suite:
    """Validate a parsed suite; errors are InputErrors naming PATH and the field (`cases[1].id: ...`).

    `tools` may be left out when every case has its own."""
    try:
        fields = _check_fields(obj, "", ("tools", "cases", "args_match"), ("cases",))
        tools = _tool_source(fields["tools"], path) if "tools" in fields else None
        per_tool = (_per_tool_modes(fields["args_match"], tools.names if tools is not None else None)
                    if "args_match" in fields else {})
        cases_value = fields["cases"]
        if not isinstance(cases_value, list) or not cases_value:
            raise _Invalid("cases", "must be a non-empty array of cases")
        cases: list[Case] = []
        first_seen: dict[str, int] = {}
        for position, item in enumerate(cases_value):
            case = _case(item, f"cases[{position}]", tools, per_tool, path)
            if case.id in first_seen:
                raise _Invalid(f"cases[{position}].id", f"duplicate case id {json.dumps(case.id)} "
                                                        f"(first at cases[{first_seen[case.id]}])")
            first_seen[case.id] = position
            cases.append(case)
        suite = Suite(path, tools, tuple(cases), tuple(_flipped_names(fields)))
        if tools is None:
            _check_tool_names(per_tool, suite.tool_names)
    except _Invalid as exc:
        raise InputError(path, None, str(exc)) from None
    return suite


def _flipped_names(fields: dict[str, Any]) -> list[str]:
    """A warning per argument mode whose meaning changed (`subset`, `superset`), naming where it is used."""
    places: list[tuple[Any, str]] = [(mode, f"args_match.{tool}") for tool, mode in
                                     (fields.get("args_match") or {}).items()]
    for position, case in enumerate(fields["cases"]):
        places.append((case.get("args_match"), f"cases[{position}].args_match"))
        places += [(item.get("args_match") if isinstance(item, dict) else None,
                    f"cases[{position}].expected_tools[{number}].args_match")
                   for number, item in enumerate(case["expected_tools"])]
    warnings = []
    for name, meaning in (("subset", "every argument the call made is expected (it may leave some out)"),
                          ("superset", "every expected argument is in the call (it may add others)")):
        used = [where for mode, where in places if mode == name]
        if used:
            more = f" and {len(used) - 1} more" if len(used) > 1 else ""
            warnings.append(f'args_match "{name}" ({used[0]}{more}) now means what it means in agentevals: '
                            f'{meaning}, the reverse of before; write "{ARGUMENT_SYNONYMS[name]}" for this '
                            f'meaning or "{ARGUMENT_SYNONYMS[_OTHER[name]]}" for the old one, and this warning goes')
    return warnings


_OTHER = {"subset": "superset", "superset": "subset"}


def load_suite(path: str) -> Suite:
    """Read and validate a suite file (strict JSON); an unreadable file is a UsageError."""
    return parse_suite(read_json_file(path), path)
