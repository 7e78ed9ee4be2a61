"""MaintenanceFlow's steps: decay, consolidate, archive, reconcile index (filled by later issues)."""

from __future__ import annotations

from aws_lambda_powertools import Logger

from memtool.flows.not_ready import not_implemented

logger = Logger(service="memtool")


@logger.inject_lambda_context
def lambda_handler(event: dict, context) -> dict:
    return not_implemented("maintenance", event, "memory maintenance (decay, consolidation, archive, index reconciliation) arrives with a later release")
