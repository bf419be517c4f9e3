"""Where a suite's tools come from: a Python dict of functions, a factory, or a recorded session.

- `ModuleTools`: one dict of tool name to function, shared by every run (its state carries over);
- `FactoryTools`: a function called once per run that returns a fresh dict, so every run starts from
  the same state;
- `CassetteTools`: a recorded session. In `sequential` mode (the default) the k-th identical
  (canonical) call of a run gets the k-th response recorded for that call, so a read after a write
  replays what was recorded after the write; a call past the recording is a miss. In `first` mode every
  identical call gets the first recorded response. A call never recorded is a miss; a miss gets an
  error response and fails the case.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from toolreplay.errors import UsageError
from toolreplay.format.canonical import canonical_bytes
from toolreplay.format.records import open_input, read_session

__all__ = ["CASSETTE_MODES", "CassetteTools", "FactoryTools", "ModuleTools", "NO_RECORDING", "ToolSource",
           "check_tool_table", "load_cassette"]

NO_RECORDING = "no recording for this call"
CASSETTE_MODES = ("sequential", "first")

# on_miss(tool, args, recorded): `recorded` is how many responses the cassette holds for that call
MissHandler = Callable[[str, dict[str, Any], int], None]
ToolTable = Mapping[str, Callable[..., Any]]


class ToolSource(Protocol):
    """A suite's tools: their names, and the functions for one run."""

    @property
    def names(self) -> frozenset[str]:
        """The tool names the agent may call."""
        ...

    def bind(self, on_miss: MissHandler) -> ToolTable:
        """Tool functions for one run; a cassette reports each call it cannot answer to `on_miss`."""
        ...


def check_tool_table(table: Any, spec: str) -> dict[str, Callable[..., Any]]:
    """A non-empty dict of non-empty tool names to callables, or a ValueError saying what is wrong."""
    if not isinstance(table, dict) or not table:
        raise ValueError(f"{spec!r} must be a non-empty dict of tool name to function")
    for name in sorted(table, key=str):
        if not isinstance(name, str) or not name:
            raise ValueError(f"{spec!r} has a key that is not a non-empty string: {name!r}")
        if not callable(table[name]):
            raise ValueError(f"{spec!r} entry {name!r} is not callable")
    return dict(table)


@dataclass(frozen=True, slots=True)
class ModuleTools:
    """Tools from a Python module: name -> function, called as `function(**args)`, shared by all runs."""

    spec: str
    functions: ToolTable

    @property
    def names(self) -> frozenset[str]:
        """The tool names the agent may call."""
        return frozenset(self.functions)

    def bind(self, on_miss: MissHandler) -> ToolTable:
        """The module's functions; they never miss."""
        return self.functions


@dataclass(frozen=True, slots=True)
class FactoryTools:
    """Tools made fresh for every run by `factory()` (MODULE:FUNCTION returning name -> function)."""

    spec: str
    factory: Callable[[], Any]
    tool_names: frozenset[str]

    @property
    def names(self) -> frozenset[str]:
        """The tool names of the factory's first table."""
        return self.tool_names

    def bind(self, on_miss: MissHandler) -> ToolTable:
        """A new table from the factory; it must hold the same tool names every time."""
        try:
            table = check_tool_table(self.factory(), f"{self.spec}()")
        except ValueError as exc:
            raise UsageError(f"tools factory: {exc}") from None
        except Exception as exc:  # the factory is user code
            raise UsageError(f"tools factory {self.spec!r} raised {type(exc).__name__}: {exc}") from None
        if frozenset(table) != self.tool_names:
            raise UsageError(f"tools factory {self.spec!r} returned other tools than on its first call")
        return table


@dataclass(frozen=True, slots=True)
class CassetteTools:
    """Tools that answer from a recorded session: canonical call bytes -> the responses recorded, in order."""

    path: str
    responses: Mapping[bytes, tuple[dict[str, Any], ...]]
    recorded_tools: frozenset[str]
    mode: str = "sequential"

    @property
    def names(self) -> frozenset[str]:
        """The tool names the cassette recorded; any other tool is not allowed."""
        return self.recorded_tools

    def bind(self, on_miss: MissHandler) -> ToolTable:
        """One function per recorded tool, with its own count of each call for this run."""
        served: dict[bytes, int] = {}
        return {name: self._player(name, on_miss, served) for name in sorted(self.recorded_tools)}

    def _player(self, tool: str, on_miss: MissHandler, served: dict[bytes, int]) -> Callable[..., Any]:
        def play(**args: Any) -> dict[str, Any]:
            key = canonical_bytes({"tool": tool, "args": args})
            recorded = self.responses.get(key, ())
            turn = served.get(key, 0)
            served[key] = turn + 1
            if self.mode == "first":
                turn = 0
            if turn >= len(recorded):
                on_miss(tool, args, len(recorded))
                if not recorded:
                    return {"ok": False, "error": NO_RECORDING}
                return {"ok": False, "error": f"{NO_RECORDING}: call {turn + 1}, the cassette recorded "
                                             f"{len(recorded)}"}
            return copy.deepcopy(recorded[turn])
        return play


def load_cassette(path: str, mode: str = "sequential") -> CassetteTools:
    """Read a session (plain or sealed) as a cassette: every response of each call, in order."""
    if mode not in CASSETTE_MODES:
        raise ValueError(f"unknown cassette mode {mode!r}")
    responses: dict[bytes, list[dict[str, Any]]] = {}
    tools: set[str] = set()
    with open_input(path) as handle:
        for record in read_session(handle, path):
            kept = responses.setdefault(record.canonical_call, [])
            if mode == "sequential" or not kept:
                kept.append(record.response)
            tools.add(record.tool)
    return CassetteTools(path, {key: tuple(value) for key, value in responses.items()}, frozenset(tools), mode)
