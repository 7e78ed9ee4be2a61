"""MaintenanceFlow's steps: {"step": "ReconcileIndex", "input": {...}} in, the step's report out.

A step that leaves work undone raises, so the Task, the execution and its alarm fail visibly.
"""

from __future__ import annotations

from memtool.flows.maintenance import run_step
from memtool.observability import instrumented, invocation_keys
from memtool.runtime import container


@instrumented(emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    step = event.get("step") if isinstance(event, dict) else None
    invocation_keys(step=step)
    return run_step(step, container.index_reconciler())
