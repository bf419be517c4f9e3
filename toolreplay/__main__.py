"""Allow `python -m toolreplay`."""

from toolreplay.cli import entry_point

entry_point()
