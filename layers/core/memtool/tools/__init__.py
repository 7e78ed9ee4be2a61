"""The unified tool abstraction: one definition, three faces (Converse toolSpec, AskFlow step,
MCP tool), run by one executor with validation, timeouts, failure classes and circuit breakers."""

from memtool.tools.base import (
    BadArguments,
    DependencyUnavailable,
    NeedsClarification,
    Tool,
    ToolContext,
    ToolFailure,
    ToolNotFound,
    ToolRegistry,
)

__all__ = [
    "BadArguments",
    "DependencyUnavailable",
    "NeedsClarification",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "ToolNotFound",
    "ToolRegistry",
]
