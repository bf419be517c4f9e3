"""What an evaluation writes: each run's session, each agent's scope file, a cassette of a whole run.

Every file is written to a temporary file beside its path and renamed into place when complete, so
a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from toolreplay.errors import UsageError
from toolreplay.format.output import write_atomically
from toolreplay.format.records import format_record
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import Policy

__all__ = ["RunRecording", "agent_directory", "write_scope", "write_session"]


def _temporary(path: str) -> str:
    return os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")


class RunRecording:
    """One run's session, recorded by the guard into a temporary file beside PATH (None: not recorded)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.temporary = None if path is None else _temporary(path)
        self.recorder: SessionRecorder | None = None
        if self.temporary is not None:
            if os.path.exists(self.temporary):
                os.unlink(self.temporary)
            # each call's turn and outcome, no times: the same run gives the same bytes
            self.recorder = SessionRecorder.open(self.temporary, meta_keys=("turn", "outcome"))

    def finish(self, complete: bool) -> None:
        """Close the record; move it into place when the run completed, else remove it."""
        if self.recorder is None or self.temporary is None or self.path is None:
            return
        self.recorder.close()
        if complete:
            os.replace(self.temporary, self.path)
        elif os.path.exists(self.temporary):
            os.unlink(self.temporary)


def agent_directory(root: str, name: str) -> str:
    """The folder of one agent's sessions: its name, with path separators and colons made safe."""
    return os.path.join(root, name.replace(os.sep, "_").replace(":", "_"))


def _write_whole(path: str, lines: Iterable[str]) -> None:
    with write_atomically(path) as output:
        for line in lines:
            output.write(line.encode("utf-8"))


def write_scope(directory: str, policy: Policy) -> None:
    """Create DIRECTORY if needed and write its scope.json: the permission file allowing the suite's tools."""
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot write {directory}: {exc.strerror or exc}") from None
    document = {"agent": policy.agent, "allowed_tools": sorted(policy.allowed_tools)}
    _write_whole(os.path.join(directory, "scope.json"), [json.dumps(document, indent=2) + "\n"])


def write_session(path: str, calls: Iterable[tuple[str, dict[str, Any], dict[str, Any]]]) -> None:
    """Write (tool, args, response) calls as one session, indexed from 0."""
    _write_whole(path, (format_record(index, tool, args, response) + "\n"
                        for index, (tool, args, response) in enumerate(calls)))
