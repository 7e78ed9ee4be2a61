"""A tool as a step: the Lambda event ``{tool, arguments, context}`` in, a ``ToolResult`` out.

AskFlow's Map state runs analyses through this face (the code interpreter's function and the ML
tools' function share it), and ``sam local invoke -e events/ml_tool_call.json`` takes the same
event. A malformed event is a ``bad_arguments`` result, never an exception: a Map iteration that
raised would hide which analysis failed and why.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memtool.tools.base import ToolContext
from memtool.tools.executor import ToolError, ToolExecutor, ToolResult, echo_arguments


class StepContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str | None = None
    user: str | None = None
    episode_id: str | None = None


class ToolEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(min_length=1, max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict)
    context: StepContext = Field(default_factory=StepContext)


def run_tool_event(executor: ToolExecutor, event: Any) -> dict[str, Any]:
    try:
        parsed = ToolEvent.model_validate(event)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "event"
        return ToolResult(
            success=False,
            error=ToolError(kind="bad_arguments", message=f"{where}: {first.get('msg')}", field=where),
            tool=str(event.get("tool")) if isinstance(event, dict) else "",
            arguments={},
        ).model_dump(mode="json")
    context = ToolContext(tenant=parsed.context.tenant, user=parsed.context.user, episode_id=parsed.context.episode_id)
    result = executor.call(parsed.tool, parsed.arguments, context)
    # The caller sent the arguments; echoing a whole table back would only grow the flow's state.
    return result.model_copy(update={"arguments": echo_arguments(result.arguments)}).model_dump(mode="json")
