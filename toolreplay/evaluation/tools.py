"""Where a suite's tools come from: a Python module's functions, or a recorded session as a cassette.

A cassette answers a call with the response recorded for the identical (canonical) call; a call it
never saw gets an error response and is reported as a miss, which fails the case.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from toolreplay.format.canonical import canonical_bytes
from toolreplay.format.records import open_input, read_session

__all__ = ["CassetteTools", "ModuleTools", "ToolSource", "load_cassette", "NO_RECORDING"]

NO_RECORDING = "no recording for this call"

MissHandler = Callable[[str, dict[str, Any]], None]


class ToolSource(Protocol):
    """A suite's tools: their names, and fresh functions for one run."""

    @property
    def names(self) -> frozenset[str]:
        """The tool names the agent may call."""
        ...

    def bind(self, on_miss: MissHandler) -> Mapping[str, Callable[..., Any]]:
        """Tool functions for one run; a cassette reports each call it cannot answer to `on_miss`."""
        ...


@dataclass(frozen=True, slots=True)
class ModuleTools:
    """Tools from a Python module: name -> function, called as `function(**args)`."""

    spec: str
    functions: Mapping[str, Callable[..., Any]]

    @property
    def names(self) -> frozenset[str]:
        """The tool names the agent may call."""
        return frozenset(self.functions)

    def bind(self, on_miss: MissHandler) -> Mapping[str, Callable[..., Any]]:
        """The module's functions; they never miss."""
        return self.functions


@dataclass(frozen=True, slots=True)
class CassetteTools:
    """Tools that answer from a recorded session: canonical call bytes -> first recorded response."""

    path: str
    responses: Mapping[bytes, dict[str, Any]]
    recorded_tools: frozenset[str]

    @property
    def names(self) -> frozenset[str]:
        """The tool names the cassette recorded; any other tool is not allowed."""
        return self.recorded_tools

    def bind(self, on_miss: MissHandler) -> Mapping[str, Callable[..., Any]]:
        """One function per recorded tool, replaying the recorded response for an identical call."""
        return {name: self._player(name, on_miss) for name in sorted(self.recorded_tools)}

    def _player(self, tool: str, on_miss: MissHandler) -> Callable[..., Any]:
        def play(**args: Any) -> dict[str, Any]:
            response = self.responses.get(canonical_bytes({"tool": tool, "args": args}))
            if response is None:
                on_miss(tool, args)
                return {"ok": False, "error": NO_RECORDING}
            return copy.deepcopy(response)
        return play


def load_cassette(path: str) -> CassetteTools:
    """Read a session (plain or sealed) as a cassette; the first response of a call wins."""
    responses: dict[bytes, dict[str, Any]] = {}
    tools: set[str] = set()
    with open_input(path) as handle:
        for record in read_session(handle, path):
            responses.setdefault(record.canonical_call, record.response)
            tools.add(record.tool)
    return CassetteTools(path, responses, frozenset(tools))
