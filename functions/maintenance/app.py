"""MaintenanceFlow's Tasks: {"step": <state>, ...} in, that state's output out.

- ``Plan``: ``{"input": {"tenant"?, "steps"?}}`` -> ``{tenants, steps, started_at}``
- ``Lifecycle``: ``{"state": {tenant, steps, step, cursor, reports}}`` -> the state after one call
- ``Reconcile``: ``{"steps"}`` -> ReconcileIndex's report (nothing to do without a vector index)
- ``WriteReport``: ``{"run": {started_at, results, reconcile}}`` -> the run's report, kept per tenant
- ``ReconcileIndex``: the former single-step flow's Task

A step that leaves work undone raises, so the Task, the execution and its alarm fail visibly.
WriteReport publishes the run's main counts as Powertools metrics (the namespace of every function).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from memtool.flows.maintenance import MaintenanceStepFailed, run_reconcile_step
from memtool.observability import instrumented, invocation_keys, metrics
from memtool.runtime import container, maintenance

# The counts each step's report publishes as Powertools metrics (Maintenance_<step>_<count>).
PUBLISHED = {
    "decay": ("decayed", "archived"),
    "consolidate": ("summaries", "consolidated"),
    "conflicts": ("conflicts",),
    "capacity": ("evicted",),
    "pii_rescan": ("redacted",),
    "reconcile": ("indexed", "failed"),
}


@instrumented()
def lambda_handler(event: dict, context) -> dict:
    event = event if isinstance(event, dict) else {}
    step = event.get("step")
    invocation_keys(step=step)
    if step == "ReconcileIndex":
        return run_reconcile_step(step, container.index_reconciler())
    service = maintenance.maintenance_service()
    if step == "Plan":
        given: Any = event.get("input") if isinstance(event.get("input"), dict) else {}
        return service.plan(given.get("tenant"), given.get("steps"))
    if step == "Lifecycle":
        state = event.get("state")
        if not isinstance(state, dict):
            raise MaintenanceStepFailed("a Lifecycle call takes the Map item's state")
        invocation_keys(tenant=state.get("tenant"), lifecycle_step=state.get("step"))
        return service.run_step(state)
    if step == "Reconcile":
        return service.reconcile(event.get("steps"))
    if step == "WriteReport":
        run = event.get("run")
        report = service.write_report(run if isinstance(run, dict) else {})
        for step, names in PUBLISHED.items():
            counts = report["steps"].get(step) or {}
            for name in names:
                if isinstance(counts.get(name), int):
                    metrics.add_metric(name=f"Maintenance_{step}_{name}", unit=MetricUnit.Count, value=counts[name])
        return report
    raise MaintenanceStepFailed(f"no MaintenanceFlow Task named {step!r}: Plan, Lifecycle, Reconcile, WriteReport or ReconcileIndex")
