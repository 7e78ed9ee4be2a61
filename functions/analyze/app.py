"""The code interpreter's Lambda (a container image): {tool, arguments, context} in, a tool result out.

AskFlow's Map state sends the analyses of small tables here; the script runs in E2B (or, when E2B
is not configured or its circuit is open, in the local process sandbox inside this function).
"""

from __future__ import annotations

from memtool.observability import instrumented, invocation_keys
from memtool.runtime import container
from memtool.tools.step import run_tool_event


@instrumented(emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    invocation_keys(tool=event.get("tool"), episode_id=(event.get("context") or {}).get("episode_id"))
    return run_tool_event(container.tool_executor(), event)
