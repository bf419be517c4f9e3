"""What is Codex's own in its hooks (docs/hooks-codex.md): the answers it reads, the files an `apply_patch`
touches, and the PermissionRequest event.

Codex CLI runs a hook command per event with one JSON object on stdin (openai/codex, codex-rs/hooks/): its
PreToolUse, PermissionRequest and PostToolUse carry `session_id`, `turn_id`, `cwd`, `hook_event_name`,
`tool_name` and `tool_input`; PreToolUse and PostToolUse also `tool_use_id`. The shell is `Bash` with
`tool_input.command`, a file edit is `apply_patch` with the patch text in `tool_input.command`, an MCP tool
is `mcp__SERVER__TOOL` with its arguments. Codex has no session end event.

How Codex reads an answer (codex-rs/hooks/src/events/pre_tool_use.rs, permission_request.rs,
engine/output_parser.rs): exit 0 with nothing on stdout lets the call go on; exit 0 with
`hookSpecificOutput.permissionDecision` `deny` and a reason blocks it, as does exit 2 with a reason on
stderr. Any other exit status, a timeout, `ask`, or `allow` without `updatedInput` count as a failed hook,
and the call runs: the hook never answers that way.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from toolreplay.format.canonical import canonical_json

if TYPE_CHECKING:
    from toolreplay.policy.model import Policy
    from toolreplay.policy.redaction import Redactor

__all__ = ["CODEX_WRITES", "PERMISSION_EVENT", "PatchError", "gate_args", "output", "patch_paths",
           "permission_matches"]

# Codex's built-in tools that change state: the shell and the patch tool (repeatable writes, as Claude
# Code's Bash and Edit).
CODEX_WRITES = ("Bash", "apply_patch")
PERMISSION_EVENT = "PermissionRequest"
_FILE_LINES = ("*** Add File: ", "*** Update File: ", "*** Delete File: ", "*** Move to: ")


class PatchError(ValueError):
    """An apply_patch input that names no file the hook can check."""


def patch_paths(patch: str, cwd: str) -> list[str]:
    """Every file the patch envelope touches (its Add, Update, Delete File and Move to lines), in patch order,
    once each; a relative path is read against `cwd`, where Codex applies the patch."""
    paths: list[str] = []
    for line in patch.splitlines():
        line = line.rstrip("\r")
        for prefix in _FILE_LINES:
            if line.startswith(prefix):
                path = line[len(prefix):].strip()
                if not path:
                    raise PatchError(f"apply_patch input has an empty {prefix.strip()!r} line")
                if not path.startswith("/"):
                    path = cwd.rstrip("/") + "/" + path
                if path not in paths:
                    paths.append(path)
    if not paths:
        raise PatchError("apply_patch input names no file (no *** Add File, Update File, Delete File or Move to "
                         "line)")
    return paths


def gate_args(payload: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The arguments the gate decides on and records: Codex's tool_input, and for apply_patch the `path` of the
    file that weighs most with the policy's rules (each file the patch touches is tried as `path`: the first
    one a rule denies, else one a rule asks about, else one no allow rule covers, else the first), so that a
    `path` rule holds for every file of the patch."""
    args: dict[str, Any] = payload["tool_input"]
    if payload["tool_name"] != "apply_patch":
        return args
    patch = args.get("command")
    if not isinstance(patch, str):
        raise PatchError("apply_patch input has no command string (the patch)")
    paths = patch_paths(patch, payload["cwd"])
    if not policy.rules:
        return {**args, "path": paths[0]}
    from toolreplay.policy.rules import RuleSet, RuleState  # only with rules: the plain hook spares the import

    rules = RuleSet(policy.rules)
    worst, chosen = -1, paths[0]
    for path in paths:
        view = {**args, "path": path}
        ruling = RuleState(rules).check("apply_patch", rules.prepare("apply_patch", view), None)
        weight = 3 if ruling.denials else 2 if ruling.asks else 0 if ruling.allowed else 1
        if weight > worst:
            worst, chosen = weight, path
    return {**args, "path": chosen}


def permission_matches(payload: dict[str, Any], pending: dict[str, Any], redactor: Redactor | None) -> bool:
    """Whether a PermissionRequest asks about a call a PreToolUse allowed that has not completed: same tool and,
    for the shell and apply_patch, the same command (Codex adds a description), else the same arguments."""
    tool, wanted = payload["tool_name"], payload["tool_input"]
    if redactor is not None:
        wanted = redactor.args(wanted)
    for entry in pending.values():
        if not isinstance(entry, dict) or entry.get("tool") != tool or not isinstance(entry.get("args"), dict):
            continue
        args = entry["args"]
        if tool in CODEX_WRITES:  # the shell's and apply_patch's request adds a description to the command
            if isinstance(wanted.get("command"), str) and args.get("command") == wanted["command"]:
                return True
        elif canonical_json(args) == canonical_json(wanted):
            return True
    return False


def output(event: str, decision: str | None, reason: str) -> dict[str, Any] | None:
    """The JSON Codex reads on stdout: for PreToolUse a deny (an allow is no output: Codex counts an `allow`
    without `updatedInput` as a failed hook); for PermissionRequest a deny, or nothing (the person decides)."""
    if decision != "deny":
        return None
    if event == PERMISSION_EVENT:
        return {"hookSpecificOutput": {"hookEventName": event, "decision": {"behavior": "deny", "message": reason}}}
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


def shown(value: Any) -> str:
    """A model-given value in a message: JSON, ASCII, short."""
    return json.dumps(value, ensure_ascii=True)[:80]
