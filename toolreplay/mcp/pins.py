"""Pinned MCP tool definitions: a defence against a server changing a tool after it was approved.

A pin is the SHA-256 of the canonical JSON of a tool's `name`, `description`, `inputSchema` and
`annotations` (absent fields as null). The pins file keeps the pinned fields beside the digest, so a
change can be named field by field:

    {"version": 1, "tools": {"read_file": {"sha256": "...", "description": "...", "inputSchema": {...},
                                           "annotations": null}}}

When the pins file does not exist yet, the first definitions seen are pinned (trust on first use).
After that, a tool whose definition differs from its pin, or that has no pin, is held back: it is
written to the pending file beside the pins (`PINS.pending`) for a person to review and accept with
`toolreplay mcp-pins accept`. Nothing leaves the machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

from toolreplay.errors import InputError, UsageError
from toolreplay.format.canonical import CanonicalError, canonical_bytes
from toolreplay.format.strictjson import read_json_file
from toolreplay.guard.outcomes import Refusal

__all__ = ["PINNED_FIELDS", "PinCheck", "ToolPins", "accept_pending", "pending_path", "pin_of", "read_pins"]

PINNED_FIELDS = ("description", "inputSchema", "annotations")


def pending_path(path: str) -> str:
    """Where the definitions waiting for a person's review are kept."""
    return path + ".pending"


def pin_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The pin of one tool definition: its digest and the pinned fields (absent ones as null)."""
    fields = {name: tool.get(name) for name in PINNED_FIELDS}
    digest = hashlib.sha256(canonical_bytes({"name": tool.get("name"), **fields})).hexdigest()
    return {"sha256": digest, **fields}


@dataclass(frozen=True, slots=True)
class PinCheck:
    """What the pins say of one listed tool: `status` is "pinned", "new" or "changed"."""

    name: str
    status: str
    changed: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for a person: the tool and what about it is not pinned (escape it before printing)."""
        if self.status == "new":
            return f"tool '{self.name}' is new (not in the pins)"
        return f"tool '{self.name}' changed since it was pinned: {', '.join(self.changed)}"


def read_pins(path: str) -> dict[str, dict[str, Any]]:
    """The pins of a pins (or pending) file, by tool name; input errors name the file."""
    obj = read_json_file(path)
    tools = obj.get("tools") if isinstance(obj, dict) else None
    if not isinstance(obj, dict) or obj.get("version") != 1 or not isinstance(tools, dict):
        raise InputError(path, None, 'not a pins file (expected {"version": 1, "tools": {...}})')
    for name, pin in tools.items():
        if not isinstance(pin, dict) or not isinstance(pin.get("sha256"), str):
            raise InputError(path, None, f"pin of tool {json.dumps(name)} has no \"sha256\" string")
    return tools


def write_pins(path: str, tools: dict[str, dict[str, Any]]) -> None:
    """Write a pins file whole (temporary file, then rename)."""
    data = json.dumps({"version": 1, "tools": tools}, indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    directory = os.path.dirname(os.path.abspath(path))
    try:
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".toolreplay-pins-", suffix=".tmp")
        with os.fdopen(handle, "w", encoding="ascii") as out:
            out.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


class ToolPins:
    """The pins of one proxy run: checks listed tools, pins them on first use, keeps the pending file."""

    def __init__(self, path: str) -> None:
        """Read the pins file; when it does not exist, this run pins what it sees first."""
        self.path = path
        self._first_use = not os.path.exists(path)
        self._pins: dict[str, dict[str, Any]] = {} if self._first_use else read_pins(path)
        self._verified: dict[str, str] = {}  # tool name -> digest verified in a listing of this run
        self._lock = threading.Lock()

    def check(self, tools: list[dict[str, Any]]) -> list[PinCheck]:
        """Check the tools of one listing; pinned ones become callable, the others go to the pending file."""
        checks: list[PinCheck] = []
        pending: dict[str, dict[str, Any] | None] = {}  # None: newly pinned, the pins file is rewritten
        with self._lock:
            for tool in tools:
                name = tool.get("name")
                if not isinstance(name, str):
                    continue
                try:
                    pin = pin_of(tool)
                except (CanonicalError, RecursionError):
                    checks.append(PinCheck(name, "changed", ("no JSON form",)))
                    self._verified.pop(name, None)
                    continue
                known = self._pins.get(name)
                if known is None and self._first_use:
                    self._pins[name] = known = pin
                    pending[name] = None
                if known is not None and known["sha256"] == pin["sha256"]:
                    self._verified[name] = pin["sha256"]
                    checks.append(PinCheck(name, "pinned"))
                    continue
                self._verified.pop(name, None)
                changed = tuple(field for field in PINNED_FIELDS
                                if known is None or known.get(field) != pin[field]) or ("name",)
                checks.append(PinCheck(name, "new" if known is None else "changed", changed if known else ()))
                pending[name] = pin
            if any(pin is None for pin in pending.values()):
                write_pins(self.path, self._pins)
            held = {name: pin for name, pin in pending.items() if pin is not None}
            if held:
                self._add_pending(held)
        return checks

    def forget(self, prefix: str = "") -> None:
        """The server of the tools named `prefix...` (by default every tool) ended and is started again: none
        of them is verified until a listing of the new one shows it."""
        with self._lock:
            for name in [name for name in self._verified if name.startswith(prefix)]:
                del self._verified[name]

    def refusal(self, name: str) -> str | None:
        """Why a call to `name` is refused by the pins (the text), or None when its definition was verified."""
        refusal = self.refusal_of(name)
        return None if refusal is None else refusal.message

    def refusal_of(self, name: str) -> Refusal | None:
        """Why a call to `name` is refused by the pins, or None when its definition was verified."""
        with self._lock:
            if name in self._verified:
                return None
            if name in self._pins:
                return Refusal("unverified", f"tool definition not verified against its pin: {name}")
            return Refusal("unpinned", f"tool not pinned: {name}")

    def _add_pending(self, held: dict[str, dict[str, Any]]) -> None:
        path = pending_path(self.path)
        pending = read_pins(path) if os.path.exists(path) else {}
        if all(pending.get(name) == pin for name, pin in held.items()):
            return
        pending.update(held)
        write_pins(path, pending)


def accept_pending(path: str, names: list[str] | None = None) -> list[PinCheck]:
    """Move pending definitions (all, or only `names`) into the pins file; return what was accepted."""
    pending_file = pending_path(path)
    if not os.path.exists(pending_file):
        return []
    pending = read_pins(pending_file)
    pins = read_pins(path) if os.path.exists(path) else {}
    if names:
        unknown = [name for name in names if name not in pending]
        if unknown:
            raise UsageError(f"no pending definition for tool {json.dumps(unknown[0])} in {pending_file}")
    accepted = []
    for name in sorted(names or pending):
        pin, known = pending.pop(name), pins.get(name)
        changed = tuple(field for field in PINNED_FIELDS if known is None or known.get(field) != pin.get(field))
        accepted.append(PinCheck(name, "new" if known is None else "changed", changed if known else ()))
        pins[name] = pin
    write_pins(path, pins)
    if pending:
        write_pins(pending_file, pending)
    else:
        os.unlink(pending_file)
    return accepted
