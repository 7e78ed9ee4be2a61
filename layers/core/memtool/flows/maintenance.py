"""MaintenanceFlow's work: re-index what the stream indexer missed.

The DynamoDB stream indexes every new version within seconds; a batch it gave up on (the dead-letter
queue) or a record written while OpenSearch was down stays ``pending``. ReconcileIndex finds heads
that are still not indexed after a grace period and indexes them, the same way the stream does. A
record it cannot index fails the step, so the flow fails and its alarm fires: maintenance never
reports success over work it did not do.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from memtool.clock import Clock
from memtool.errors import MemtoolError
from memtool.flows.indexing import MemoryIndexer
from memtool.memory.records import MemoryRecord

logger = logging.getLogger("memtool.maintenance")

STEPS = ("ReconcileIndex",)


class UnindexedHeads(Protocol):
    def unindexed(self, before: datetime, now: datetime, limit: int = 500) -> list[MemoryRecord]: ...


class MaintenanceStepFailed(MemtoolError):
    """A maintenance step left work undone; the Task fails with this error type."""

    code = "maintenance_step_failed"


@dataclass
class ReconcileReport:
    step: str
    checked: int = 0
    indexed: int = 0
    stale: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"step": self.step, "checked": self.checked, "indexed": self.indexed, "stale": self.stale, "failed": self.failed}


class IndexReconciler:
    def __init__(
        self,
        store: UnindexedHeads,
        indexer: MemoryIndexer,
        clock: Clock,
        *,
        grace: timedelta = timedelta(minutes=15),
        limit: int = 500,
        time_budget_seconds: float = 600.0,  # the maintenance Lambda has 900 s
    ) -> None:
        self._store = store
        self._indexer = indexer
        self._clock = clock
        self._grace = grace
        self._limit = limit
        self._time_budget = time_budget_seconds

    def run(self) -> ReconcileReport:
        """Index every head the stream left pending for longer than the grace period.

        Raises ``MaintenanceStepFailed`` (after trying them all) when any could not be indexed.
        """
        now = self._clock.now()
        report = ReconcileReport(step="ReconcileIndex")
        started = time.monotonic()
        tried: set[tuple[str, str, int]] = set()
        while True:  # batch after batch, until none is left (or only ones that failed here)
            fetched = self._store.unindexed(now - self._grace, now, self._limit)
            batch = [r for r in fetched if (r.tenant, r.id, r.version) not in tried]
            if not batch:
                break
            if time.monotonic() - started > self._time_budget:
                raise MaintenanceStepFailed(
                    f"ReconcileIndex ran out of its {self._time_budget:.0f} s with memories still not indexed "
                    f"({report.indexed} indexed this run); the next run goes on"
                )
            for record in batch:
                tried.add((record.tenant, record.id, record.version))
                report.checked += 1
                try:
                    outcome = self._indexer.index(record)
                except Exception as exc:  # each record is tried; the step fails below
                    logger.warning("could not re-index memory %s v%d: %s", record.id, record.version, exc, exc_info=True)
                    report.failed.append({"id": record.id, "tenant": record.tenant, "error": f"{type(exc).__name__}: {exc}"[:300]})
                    continue
                if outcome == "stale":
                    report.stale += 1
                else:
                    report.indexed += 1
        if report.failed:
            raise MaintenanceStepFailed(
                f"ReconcileIndex could not index {len(report.failed)} of {report.checked} memories; first: {report.failed[0]['error']}"
            )
        return report


def run_step(step: object, reconciler: IndexReconciler) -> dict[str, Any]:
    """One maintenance step by name (the MaintenanceFlow Task's ``step``)."""
    if step == "ReconcileIndex":
        return reconciler.run().as_dict()
    raise MaintenanceStepFailed(f"no maintenance step named {step!r}; the steps are: {', '.join(STEPS)}")
