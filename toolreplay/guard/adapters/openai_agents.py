"""Kept for one release: this adapter moved to `toolreplay.adapters.openai_agents`; import it from there."""

from toolreplay.adapters.openai_agents import *  # noqa: F403 - the old import path names the same objects
from toolreplay.adapters.openai_agents import __all__  # noqa: F401
