"""The ML tools' Lambda (a container image): {tool, arguments, context} in, a tool result out.

AskFlow's Map state sends the analyses of large tables here: scikit-learn, scipy and statsmodels
run in this function (imported on the first call of a tool that needs them).
"""

from __future__ import annotations

from memtool.observability import instrumented, invocation_keys
from memtool.runtime import container
from memtool.tools.step import run_tool_event


@instrumented(emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    invocation_keys(tool=event.get("tool"), episode_id=(event.get("context") or {}).get("episode_id"))
    return run_tool_event(container.tool_executor(), event)
