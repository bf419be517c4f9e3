"""The one error family of ToolReplay: library code raises these, only the CLI turns them into exit codes."""

from __future__ import annotations

__all__ = ["ToolReplayError", "InputError", "UsageError"]


class ToolReplayError(Exception):
    """Base class of every error ToolReplay raises on purpose."""


class InputError(ToolReplayError):
    """Malformed input: renders as `PATH:LINE: message` (or `PATH: message` when no line applies)."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}: {self.message}"


class UsageError(ToolReplayError):
    """Bad arguments or an unreadable file: exit 2, like malformed input."""
