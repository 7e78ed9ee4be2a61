"""What a tool is: one definition that is a Converse toolSpec, an AskFlow step and an MCP tool.

A tool has a name, a description, a strict pydantic input model (no extra fields; enums,
defaults and a description on every field), an output model, a handler, and a feedback parser
that turns its result into an environment reward in [-1, 1]. The executor
(``memtool.tools.executor``) validates, times, classifies and records every call; nothing calls a
handler directly.

The Converse shapes are rendered here only: ``converse_tool_spec`` for one tool (a ``Tool``'s, or
a tool the model answers through whose schema is written by hand, such as the planner's and the
diagnoser's) and ``converse_tool_config`` for the list with its ``toolChoice``.

A handler raises ``ToolFailure`` subclasses for the failures a caller can act on (bad
arguments, not found, business errors that need a clarification); anything else is internal
and its details stay in the logs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

FailureKind = Literal["bad_arguments", "not_found", "timeout", "business", "internal", "unavailable"]
# Which failures are worth retrying as they are (the same arguments may succeed later).
RETRYABLE: frozenset[str] = frozenset({"timeout", "unavailable"})

_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]{0,63}$")  # Converse and MCP both accept this shape


def converse_tool_spec(name: str, description: str, input_schema: Mapping[str, Any]) -> dict[str, Any]:
    """One Bedrock Converse ``toolSpec``, wrapped as Converse's ``tools`` list expects."""
    if not _NAME.match(name):
        raise ValueError(f"tool name {name!r} must match {_NAME.pattern}")
    return {"toolSpec": {"name": name, "description": description, "inputSchema": {"json": input_schema}}}


def converse_tool_config(
    specs: Iterable[Mapping[str, Any]], *, choice: Literal["auto", "any"] | None = None, force: str | None = None
) -> dict[str, Any]:
    """Converse's ``toolConfig`` offering ``specs`` (from ``converse_tool_spec``): with no
    ``toolChoice``, ``choice="any"`` (the model must call one of them) or ``"auto"``, or ``force``
    (the model must call the tool of that name, which must be offered)."""
    tools = list(specs)
    config: dict[str, Any] = {"tools": tools}
    if choice is not None and force is not None:
        raise ValueError("give a choice or a tool to force, not both")
    if choice is not None:
        config["toolChoice"] = {choice: {}}
    elif force is not None:
        if force not in {spec["toolSpec"]["name"] for spec in tools}:
            raise ValueError(f"the forced tool {force!r} is not offered")
        config["toolChoice"] = {"tool": {"name": force}}
    return config


In = TypeVar("In", bound=BaseModel)
Out = TypeVar("Out", bound=BaseModel)


class ToolFailure(Exception):
    """A failure the caller can act on; ``kind`` says which."""

    kind: FailureKind = "business"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class BadArguments(ToolFailure):
    kind: FailureKind = "bad_arguments"


class ToolNotFound(ToolFailure):
    """The thing the arguments name does not exist (a tool, a column, a memory)."""

    kind: FailureKind = "not_found"


class NeedsClarification(ToolFailure):
    """The arguments are well formed but the question cannot be answered as asked."""

    kind: FailureKind = "business"


class DependencyUnavailable(ToolFailure):
    """An outside dependency failed or its circuit is open; retry later."""

    kind: FailureKind = "unavailable"


@dataclass(frozen=True)
class ToolContext:
    """What a handler may know about the call besides its arguments (never the caller's identity
    as an argument: identity comes from the server or the flow, not from the model)."""

    tenant: str | None = None
    user: str | None = None
    episode_id: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Tool(Generic[In, Out]):
    name: str
    description: str
    input_model: type[In]
    output_model: type[Out]
    handler: Callable[[In, ToolContext], Out]
    # The environment reward of a result: 1 for a result that answers, lower for a weak one.
    feedback: Callable[[Out], float] | None = None
    timeout_seconds: float = 20.0
    # The outside system a call depends on ("bedrock", "opensearch", "redshift", "e2b"): its
    # circuit breaker decides whether the call is tried at all.
    dependency: str | None = None
    # A one-line summary of a result for the episode's trajectory (default: the output's keys).
    summarize: Callable[[Out], str] | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"tool name {self.name!r} must match {_NAME.pattern}")
        if self.input_model.model_config.get("extra") != "forbid":
            raise ValueError(f"tool {self.name}: the input model must forbid extra fields")
        undocumented = [n for n, f in self.input_model.model_fields.items() if not f.description]
        if undocumented:
            raise ValueError(f"tool {self.name}: input fields without a description: {', '.join(undocumented)}")

    def input_schema(self) -> dict[str, Any]:
        """The input's JSON Schema, self-contained (definitions inlined under $defs)."""
        schema = self.input_model.model_json_schema()
        schema.pop("title", None)
        return schema

    def tool_spec(self) -> dict[str, Any]:
        """The Bedrock Converse ``toolSpec`` (wrapped as Converse's ``tools`` list expects)."""
        return converse_tool_spec(self.name, self.description, self.input_schema())

    def reward(self, output: Out) -> float:
        if self.feedback is None:
            return 1.0
        return max(-1.0, min(1.0, float(self.feedback(output))))

    def summary_of(self, output: Out) -> str:
        if self.summarize is not None:
            return self.summarize(output)
        return "fields: " + ", ".join(output.model_dump().keys())


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool[Any, Any]] = ()) -> None:
        self._tools: dict[str, Tool[Any, Any]] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool[Any, Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool[Any, Any]:
        try:
            return self._tools[name]
        except KeyError:
            known = ", ".join(self._tools) or "none"
            raise ToolNotFound(f"no tool named {name!r}; the tools are: {known}", field="tool") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self):
        return iter(self._tools.values())

    def names(self) -> list[str]:
        return list(self._tools)

    def tool_config(self) -> dict[str, Any]:
        """Converse's ``toolConfig`` offering every tool."""
        return converse_tool_config(tool.tool_spec() for tool in self._tools.values())
