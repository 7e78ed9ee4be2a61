"""The maintenance wiring: MaintenanceFlow's steps, POST /maintenance/run and the conflicts API,
built over the container's adapters (``memtool.runtime.container``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtool.runtime import container
from memtool.settings import get_settings

if TYPE_CHECKING:
    from memtool.flows.conflicts import ConflictService
    from memtool.flows.maintenance import IndexReconciler, MaintenanceLauncher, MaintenanceRuns, MaintenanceService
    from memtool.memory.records import MemoryRecord


def maintenance_service() -> MaintenanceService:
    """MaintenanceFlow's steps over the store (and the index, when one is configured)."""
    from memtool.flows.maintenance import LifecycleStep, MaintenanceService
    from memtool.lifecycle.capacity import Capacity
    from memtool.lifecycle.conflicts import Conflicts
    from memtool.lifecycle.consolidate import Consolidate
    from memtool.lifecycle.decay import Decay, DecayPolicy
    from memtool.lifecycle.pii_rescan import PiiRescan
    from memtool.memory.records import MemoryKind

    settings = get_settings()
    store = container.memory_store()
    batch = settings.maintenance_batch
    policy = DecayPolicy(
        floor=settings.decay_floor,
        min_step=settings.decay_min_step,
        unused_days=settings.archive_unused_days,
        low_confidence=settings.archive_low_confidence,
        low_score=settings.retire_below_score,
        low_after_uses=settings.retire_after_uses,
    )
    limits = {
        MemoryKind.EPISODIC: settings.capacity_episodic,
        MemoryKind.CAUSAL: settings.capacity_causal,
        MemoryKind.CACHE: settings.capacity_cache,
        MemoryKind.CORRECTION: settings.capacity_correction,
    }

    def reconciler() -> IndexReconciler | None:
        return container.index_reconciler() if container.vector_index() is not None else None

    service = MaintenanceService(store, {}, container.clock(), reconciler)
    writer = None
    if settings.planner == "bedrock":  # the planner's model also writes the summaries' sentences
        from memtool.lifecycle.bedrock_summary import BedrockSummaryWriter
        from memtool.runtime.aws import client

        bedrock = container.guarded_aws_client("bedrock", client("bedrock-runtime", settings, max_attempts=1))
        writer = BedrockSummaryWriter(bedrock, model_id=settings.bedrock_planner_model_id)
    consolidate = Consolidate(
        store,
        container.embedder(),
        min_cluster=settings.consolidate_min_cluster,
        similarity=settings.consolidate_similarity,
        batch=batch,
        writer=writer,
    )
    steps: list[LifecycleStep] = [
        Decay(store, policy, batch),
        consolidate,
        Conflicts(store, batch),
        Capacity(store, limits, batch),
        PiiRescan(store, service.scanned_pii_version, service.record_pii_version, batch),
    ]
    service.add_steps(steps)
    return service


def maintenance_runs() -> MaintenanceRuns:
    """POST /maintenance/run: the flow to the end locally, a started Standard execution in AWS."""
    from memtool.flows.maintenance import MaintenanceRuns
    from memtool.runtime.maintenance_launchers import LocalMaintenanceLauncher, StepFunctionsMaintenanceLauncher

    settings = get_settings()
    launcher: MaintenanceLauncher
    if settings.is_local:
        launcher = LocalMaintenanceLauncher(container.flow_runner())
    else:
        from memtool.runtime.aws import client

        if not settings.maintenance_state_machine_arn:
            from memtool.errors import NotConfigured

            raise NotConfigured("MEMTOOL_MAINTENANCE_STATE_MACHINE_ARN is not set: the template sets it to MaintenanceFlow")
        launcher = StepFunctionsMaintenanceLauncher(client("stepfunctions", settings), settings.maintenance_state_machine_arn)
    return MaintenanceRuns(launcher, container.memory_store(), container.clock())


def conflict_service() -> ConflictService:
    from memtool.flows.conflicts import ConflictService

    return ConflictService(container.memory_store(), container.clock())


def distil_expired_session(record: MemoryRecord) -> object:
    """A session whose working memory the TTL removed, distilled into its user's profile (the indexer's hook)."""
    from memtool.identity import Identity

    return container.memory_service().distil_session(Identity(tenant=record.tenant, user=record.owner, roles=frozenset()), record)
