"""Kept for one release: this adapter moved to `toolreplay.adapters.langgraph`; import it from there."""

from toolreplay.adapters.langgraph import *  # noqa: F403 - the old import path names the same objects
from toolreplay.adapters.langgraph import __all__  # noqa: F401
