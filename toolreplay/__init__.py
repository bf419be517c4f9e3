"""ToolReplay: audit, guard and evaluate the tool calls of AI agents."""

__version__ = "0.8.0"

__all__ = ["__version__"]
