"""MaintenanceFlow's work: the memory lifecycle per tenant, re-indexing, and the run's report.

MaintenanceFlow (statemachines/maintenance.asl.json) lists the tenants, runs the lifecycle steps
over each one in a Map (``MaintenanceService.run_step``, called again while a step returns a
cursor), reconciles the index, and writes the report (``MaintenanceService.write_report``). The
steps themselves live in ``memtool.lifecycle``; docs/maintenance.md says what each one does.

ReconcileIndex: the DynamoDB stream indexes every new version within seconds; a batch it gave up on (the dead-letter
queue) or a record written while OpenSearch was down stays ``pending``. ReconcileIndex finds heads
that are still not indexed after a grace period and indexes them, the same way the stream does. A
record it cannot index fails the step, so the flow fails and its alarm fires: maintenance never
reports success over work it did not do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from memtool.clock import Clock
from memtool.errors import Forbidden, MemtoolError, ValidationFailed
from memtool.flows.indexing import MemoryIndexer
from memtool.lifecycle.walk import StepResult
from memtool.memory.records import IndexState, MemoryDraft, MemoryKind, MemoryRecord, MemoryScope, MemoryStatus, Provenance, Trigger
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition

logger = logging.getLogger("memtool.maintenance")

LIFECYCLE_STEPS = ("decay", "consolidate", "conflicts", "capacity", "pii_rescan")
STEPS = (*LIFECYCLE_STEPS, "reconcile")
REPORT_KEY = "maintenance.report"
STATE_KEY = "maintenance.state"
MAX_CALLS_PER_STEP = 1000  # a step that keeps returning a cursor this often is stuck, not busy


class UnindexedHeads(Protocol):
    """What ReconcileIndex reads of the record store (memory.store.MemoryStore)."""

    def unindexed(self, before: datetime, now: datetime, limit: int = 500) -> list[MemoryRecord]: ...

    def partitions(self, tenant: str | None = None, after: Partition | None = None, limit: int = 500) -> list[Partition]: ...

    def heads(self, where: Partition, kinds: Any = None, limit: int = 2000, skipped: list[str] | None = None) -> list[MemoryRecord]: ...


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
    verified: int = 0  # heads marked indexed whose document was looked up in the index
    missing: int = 0  # ... and found missing (or older), so indexed again

    def as_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "checked": self.checked,
            "indexed": self.indexed,
            "stale": self.stale,
            "failed": self.failed,
            "verified": self.verified,
            "missing": self.missing,
        }


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
        verify_limit: int = 2000,
    ) -> None:
        self._verify_limit = verify_limit
        self._verify_from: Partition | None = None  # where the next run's verification goes on (per container)
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
        self._verify(report, now, started)
        if report.failed:
            raise MaintenanceStepFailed(
                f"ReconcileIndex could not index {len(report.failed)} of {report.checked} memories; first: {report.failed[0]['error']}"
            )
        return report

    def _verify(self, report: ReconcileReport, now: datetime, started: float) -> None:
        """Heads the store says are indexed, looked up in the index (at most ``verify_limit`` a run,
        the partitions in turn from where the last run stopped): one whose document is missing or
        older (an index restored from a backup, a document deleted by hand) is indexed again."""
        store = self._store
        if self._verify_limit <= 0:
            return
        after = self._verify_from
        while report.verified < self._verify_limit and time.monotonic() - started < self._time_budget:
            page = store.partitions(None, after, 100)
            if not page:
                self._verify_from = None  # every partition was looked at: the next run starts over
                return
            for where in page:
                after = where
                for record in store.heads(where, None, self._verify_limit):
                    if record.index_state is not IndexState.INDEXED or record.is_expired(now):
                        continue
                    report.verified += 1
                    if self._indexer.is_indexed(record):
                        continue
                    report.missing += 1
                    report.checked += 1
                    try:
                        self._indexer.index(record)
                        report.indexed += 1
                    except Exception as exc:  # noqa: BLE001 - the step fails below, after the others
                        report.failed.append({"id": record.id, "tenant": record.tenant, "error": f"{type(exc).__name__}: {exc}"[:300]})
                if report.verified >= self._verify_limit:
                    break
        self._verify_from = after


class LifecycleStep(Protocol):
    name: str

    def run(self, tenant: str, cursor: str | None, now: datetime) -> StepResult: ...


def selected_steps(only: object) -> list[str]:
    """The steps a run is asked for (``--step``, the flow input's ``steps``); all when none is named."""
    if only in (None, "", []):
        return list(STEPS)
    names = [only] if isinstance(only, str) else list(only) if isinstance(only, list) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise ValidationFailed("steps is a step name or a list of them", field="steps")
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        raise ValidationFailed(f"no maintenance step named {unknown[0]!r}; the steps are: {', '.join(STEPS)}", field="steps")
    return names


class MaintenanceService:
    """One run of MaintenanceFlow, a state at a time: the Lambda handler and the CLI call these."""

    def __init__(
        self,
        store: MemoryStore,
        steps: dict[str, LifecycleStep],
        clock: Clock,
        reconciler: Callable[[], IndexReconciler | None],
    ) -> None:
        self._store = store
        self._steps = steps
        self._clock = clock
        self._reconciler = reconciler

    def add_steps(self, steps: list[LifecycleStep]) -> None:
        """The lifecycle steps (pii_rescan needs the service's state record, so it comes after)."""
        self._steps.update({step.name: step for step in steps})

    # ---- ListTenants ---------------------------------------------------------------------------

    def plan(self, tenant: object = None, steps: object = None) -> dict[str, Any]:
        """The run's input for the Map: the tenants (one, or every tenant with memories) and the steps."""
        chosen = selected_steps(steps)
        if tenant not in (None, ""):
            if not isinstance(tenant, str):
                raise ValidationFailed("tenant is a tenant id", field="tenant")
            tenants = [tenant]
        else:
            tenants = self.tenants()
        return {"tenants": tenants, "steps": chosen, "started_at": self._clock.now().isoformat()}

    def tenants(self) -> list[str]:
        found: list[str] = []
        after: Partition | None = None
        while True:
            page = self._store.partitions(None, after, 500)
            for where in page:
                if not found or found[-1] != where.tenant:
                    found.append(where.tenant)
            if len(page) < 500:
                return found
            # skip the rest of this tenant's users: the next page starts after its last owner
            after = Partition(page[-1].tenant, "\U0010ffff")

    # ---- one lifecycle step over one tenant ----------------------------------------------------

    def run_step(self, state: dict[str, Any]) -> dict[str, Any]:
        """One call of a step: ``state`` is the Map item's state ({tenant, steps, step, cursor,
        reports}); the answer is the same state with this call's counts added and the next cursor."""
        name = state.get("step")
        tenant = state.get("tenant")
        if name not in self._steps:
            raise MaintenanceStepFailed(f"no lifecycle step named {name!r}; the steps are: {', '.join(LIFECYCLE_STEPS)}")
        if not isinstance(tenant, str) or not tenant:
            raise ValidationFailed("a step runs over one tenant", field="tenant")
        reports: dict[str, Any] = dict(state.get("reports") or {})
        report = dict(reports.get(name) or {"counts": {}, "calls": 0})
        if name not in selected_steps(state.get("steps")):
            reports[name] = {**report, "skipped": True}
            return {**state, "reports": reports, "cursor": None}
        cursor = state.get("cursor")
        if report["calls"] >= MAX_CALLS_PER_STEP:
            raise MaintenanceStepFailed(f"{name} over tenant {tenant} returned a cursor {MAX_CALLS_PER_STEP} times; it is not progressing")
        result = self._steps[name].run(tenant, cursor if isinstance(cursor, str) else None, self._clock.now())
        counts = dict(report["counts"])
        for key, n in result.counts.items():
            counts[key] = n if key == "rules_version" else counts.get(key, 0) + n
        reports[name] = {"counts": counts, "calls": report["calls"] + 1}
        if result.notes:
            reports[name]["notes"] = result.notes[:5]
        return {**state, "reports": reports, "cursor": result.cursor}

    def run_tenant(self, tenant: str, steps: object = None) -> dict[str, Any]:
        """Every lifecycle step over one tenant, each called until it returns no cursor (the Map's
        iteration, in process: ``memtool maintain`` without a flow)."""
        state: dict[str, Any] = {"tenant": tenant, "steps": selected_steps(steps), "reports": {}}
        for name in LIFECYCLE_STEPS:
            state = {**state, "step": name, "cursor": None}
            while True:
                state = self.run_step(state)
                if state["cursor"] is None:
                    break
        return {"tenant": tenant, "reports": state["reports"]}

    # ---- reconcile -----------------------------------------------------------------------------

    def reconcile(self, steps: object = None) -> dict[str, Any]:
        if "reconcile" not in selected_steps(steps):
            return {"skipped": True}
        reconciler = self._reconciler()
        if reconciler is None:
            return {"checked": 0, "indexed": 0, "stale": 0, "failed": [], "note": "no vector index is configured: nothing to reconcile"}
        report = reconciler.run().as_dict()
        report.pop("step", None)
        return report

    # ---- WriteReport ---------------------------------------------------------------------------

    def write_report(self, run: dict[str, Any]) -> dict[str, Any]:
        """The run's report, kept per tenant as ``maintenance.report`` (kind knowledge, in the
        tenant's shared partition; admins read it) and answered whole."""
        finished = self._clock.now().isoformat()
        tenants = {}
        totals: dict[str, dict[str, int]] = {}
        for item in run.get("results") or []:
            tenant = item.get("tenant")
            if not isinstance(tenant, str):
                continue
            steps = {name: report.get("counts", {}) for name, report in (item.get("reports") or {}).items() if not report.get("skipped")}
            tenants[tenant] = steps
            for name, counts in steps.items():
                into = totals.setdefault(name, {})
                for key, n in counts.items():
                    if isinstance(n, int):
                        into[key] = max(into.get(key, 0), n) if key == "rules_version" else into.get(key, 0) + n
        reconcile = run.get("reconcile")
        if isinstance(reconcile, dict) and not reconcile.get("skipped"):
            totals["reconcile"] = {k: (len(v) if isinstance(v, list) else v) for k, v in reconcile.items() if k != "note"}
        report = {"steps": totals, "tenants": tenants, "started_at": run.get("started_at"), "finished_at": finished}
        for tenant, steps in tenants.items():
            self._keep(tenant, REPORT_KEY, {**report, "tenants": {tenant: steps}, "steps": steps}, "the last maintenance run's report")
        return report

    # ---- the tenant's maintenance state (pii_rescan's rules version) ---------------------------

    def scanned_pii_version(self, tenant: str) -> int:
        record = self._store.get_slot(Partition(tenant, TENANT_OWNER), MemoryKind.KNOWLEDGE, STATE_KEY, self._clock.now())
        value = record.value if record is not None and isinstance(record.value, dict) else {}
        version = value.get("pii_rules_version")
        return version if isinstance(version, int) else 0

    def record_pii_version(self, tenant: str, version: int) -> None:
        self._keep(tenant, STATE_KEY, {"pii_rules_version": version}, f"memories scanned with PII rules v{version}")

    def _keep(self, tenant: str, key: str, value: dict[str, Any], content: str) -> MemoryRecord:
        draft = MemoryDraft(
            kind=MemoryKind.KNOWLEDGE,
            key=key,
            content=content,
            value=value,
            scope=MemoryScope.TENANT,
            status=MemoryStatus.ACTIVE,
            provenance=Provenance(trigger=Trigger.EXPLICIT, author="maintenance"),
            tags=["maintenance"],
        )
        return self._store.create(Partition(tenant, TENANT_OWNER), draft, self._clock.now()).record


def run_reconcile_step(step: object, reconciler: IndexReconciler) -> dict[str, Any]:
    """The former single-step flow's Task (``{"step": "ReconcileIndex"}``), kept for its callers."""
    if step == "ReconcileIndex":
        return reconciler.run().as_dict()
    raise MaintenanceStepFailed(f"no maintenance step named {step!r}; the steps are: {', '.join(STEPS)}")


# ---- a run asked for through the API (POST /maintenance/run) -------------------------------------


@dataclass(frozen=True)
class Launched:
    """What the launcher got: a finished run (locally) or a started one (a Standard execution in AWS)."""

    status: str  # SUCCEEDED | FAILED | TIMED_OUT | RUNNING
    output: dict[str, Any] | None = None
    execution_arn: str | None = None
    error: str | None = None
    cause: str | None = None


class MaintenanceLauncher(Protocol):
    def launch(self, execution_input: dict[str, Any]) -> Launched: ...


class MaintenanceFailed(MemtoolError):
    """The run the caller asked for failed; the message names its step and error."""

    code = "maintenance_failed"


class MaintenanceRuns:
    """POST /maintenance/run: an admin runs MaintenanceFlow over their own tenant."""

    def __init__(self, launcher: MaintenanceLauncher, store: MemoryStore, clock: Clock) -> None:
        self._launcher = launcher
        self._store = store
        self._clock = clock

    def run(self, who: Any, steps: list[str] | None = None) -> dict[str, Any]:
        if not who.is_admin:
            raise Forbidden("maintenance is run by admins (role admin)", field="roles")
        chosen = selected_steps(steps)
        launched = self._launcher.launch({"trigger": "api", "tenant": who.tenant, "steps": chosen, "requested_by": who.user})
        if launched.status == "RUNNING":
            return {"status": "running", "execution_arn": launched.execution_arn, "report": self.last_report(who.tenant)}
        if launched.status != "SUCCEEDED" or launched.output is None:
            step = (launched.output or {}).get("failed_step") if isinstance(launched.output, dict) else None
            raise MaintenanceFailed(
                f"maintenance {launched.status.lower()}{f' in {step}' if step else ''}: {launched.error or 'no error'}: "
                f"{(launched.cause or '')[:300]}"
            )
        report = (launched.output.get("maintenance") or {}).get("report")
        return {"status": "succeeded", "report": report}

    def last_report(self, tenant: str) -> dict[str, Any] | None:
        record = self._store.get_slot(Partition(tenant, TENANT_OWNER), MemoryKind.KNOWLEDGE, REPORT_KEY, self._clock.now())
        return record.value if record is not None and isinstance(record.value, dict) else None
