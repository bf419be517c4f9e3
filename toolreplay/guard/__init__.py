"""The guard: the gate in front of the tools, the session recorder and the injection screen."""

from toolreplay.guard.gate import STOP_REASONS, CannotConfirmError, ConfirmationDeferred, ConsoleApprover, Gate
from toolreplay.guard.intents import Intent
from toolreplay.guard.recorder import RecordingError, SessionRecorder
from toolreplay.guard.screen import DEFAULT_PATTERNS, Screen, ScreenFlag, scan_value

__all__ = ["DEFAULT_PATTERNS", "STOP_REASONS", "CannotConfirmError", "ConfirmationDeferred", "ConsoleApprover", "Gate",
           "Intent", "RecordingError", "Screen", "ScreenFlag", "SessionRecorder", "scan_value"]
