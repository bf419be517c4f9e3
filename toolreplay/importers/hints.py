"""Mutators from what a log says about its tools: MCP `tools/list` annotations.

An MCP server lists its tools with optional `annotations`: `readOnlyHint` (default false: the tool
may change its environment) and `destructiveHint` (default true; meaningful only when not read-only).
A tool listed with `readOnlyHint: true` reads; any other listed tool is a candidate mutator. A tool
the log lists without annotations says nothing, so it is written as a comment for a person to decide.
tau2-bench logs carry no per-tool labels in the logs we have seen, so nothing is read from them.

The hints only feed replay's state model; they never grant anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from toolreplay.format.text import escape_text
from toolreplay.importers.conversations import JSONTextError, parse_json

__all__ = ["ToolHint", "read_tool_hints", "hints_mutators_text"]


@dataclass(frozen=True)
class ToolHint:
    """One tool of a `tools/list` result and its hints (None when the log gives none)."""

    name: str
    read_only: bool | None
    destructive: bool | None
    annotated: bool


def _values(handle: IO[bytes]) -> Iterator[Any]:
    """The JSON values of a log: one per line (JSON Lines), or the whole file as one document."""
    for number, line in enumerate(handle):
        text = line.decode("utf-8", errors="replace")
        if not text.strip():
            continue
        try:
            yield parse_json(text)
        except JSONTextError:
            if number == 0:  # not JSON Lines: one document over several lines
                handle.seek(0)
                try:
                    yield parse_json(handle.read().decode("utf-8", errors="replace"))
                except JSONTextError:
                    pass
                return
            continue  # the import itself reports a malformed line


def _tool_lists(value: Any) -> Iterator[list[Any]]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            tools = item.get("tools")
            if isinstance(tools, list) and any(isinstance(t, dict) and "inputSchema" in t for t in tools):
                yield tools
            stack.extend(member for member in item.values() if isinstance(member, (dict, list)))
        elif isinstance(item, list):
            stack.extend(member for member in reversed(item) if isinstance(member, (dict, list)))


def read_tool_hints(handle: IO[bytes]) -> list[ToolHint]:
    """Every tool an MCP `tools/list` result in the log describes, first description wins, sorted by name.
    Reads the log a line at a time (a JSON document of several lines is read whole)."""
    hints: dict[str, ToolHint] = {}
    for value in _values(handle):
        for tools in _tool_lists(value):
            for tool in tools:
                if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or tool["name"] in hints:
                    continue
                notes = tool.get("annotations")
                notes = notes if isinstance(notes, dict) else None
                read_only = notes.get("readOnlyHint") if notes else None
                destructive = notes.get("destructiveHint") if notes else None
                hints[tool["name"]] = ToolHint(tool["name"], read_only if isinstance(read_only, bool) else None,
                                               destructive if isinstance(destructive, bool) else None,
                                               notes is not None)
    return [hints[name] for name in sorted(hints)]


def hints_mutators_text(hints: list[ToolHint]) -> str:
    """A mutators file from the hints: mutators as lines, reads and unannotated tools as comments."""
    lines = ["# Mutators from the log's MCP tool annotations (readOnlyHint, destructiveHint), for review.\n",
             "# A hint only feeds replay's state model; it grants nothing.\n"]
    if not hints:
        lines.append("# The log lists no tools (no MCP tools/list result).\n")
    for hint in hints:
        name = escape_text(hint.name)
        usable = name == hint.name and "#" not in name and not any(ch.isspace() for ch in name)
        if not hint.annotated:
            lines.append(f"# {name}  # no annotations: decide by hand\n")
        elif hint.read_only:
            lines.append(f"# {name}  # readOnlyHint: true (reads)\n")
        else:
            destructive = "true" if hint.destructive is not False else "false"
            default = "" if hint.destructive is not None else " (by default)"
            line = f"{name}  # readOnlyHint: false, destructiveHint: {destructive}{default}\n"
            lines.append(line if usable else "# (not a valid name line) " + line)
    return "".join(lines)
