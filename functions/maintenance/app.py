"""MaintenanceFlow's steps: decay, consolidate, archive, reconcile index (filled by later issues)."""

from __future__ import annotations

from memtool.observability import instrumented
from memtool.flows.not_ready import not_implemented


@instrumented(emit_metrics=False)
def lambda_handler(event: dict, context) -> dict:
    return not_implemented("maintenance", event, "memory maintenance (decay, consolidation, archive, index reconciliation) arrives with a later release")
