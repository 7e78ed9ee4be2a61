"""What every AskFlow step shares: the dependencies it is built with, the flow's time budget,
the caller, the tenant's model, parser and guard policy, and reading a memory slot.

``AskSteps`` (memtool.flows.ask.steps) is one class made of a mixin per group of states, each in
its own module and each built on this base.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from datetime import date, datetime
from typing import TYPE_CHECKING, Any

from memtool.clock import Clock
from memtool.errors import ValidationFailed
from memtool.flows.ask.state import AskState
from memtool.flows.memory_write import MemoryService
from memtool.identity import Identity
from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.memory.slots import SESSION_TURNS
from memtool.memory.store import MemoryStore, Partition, UndecodableRecord
from memtool.planning.plan import Plan
from memtool.planning.port import Planner
from memtool.retrieval.recall import Recall
from memtool.settings import Settings
from memtool.sql.warehouse import Warehouse

if TYPE_CHECKING:
    from memtool.cache.sql_cache import SqlCache
    from memtool.flows.diagnose import DiagnosisService
    from memtool.knowledge.sources import SourceLibrary
    from memtool.semantic.catalog import TenantModel
    from memtool.semantic.compiler import IntentCompiler


logger = logging.getLogger("memtool.flows")

# What a step keeps back of the flow's time for Visualize, CacheStore and Record, and the least a
# warehouse query or a diagnosis is given (it then fails fast and the failure is recorded).
FLOW_RESERVE_SECONDS = 4.0
MIN_STEP_SECONDS = 1.0


class StepsBase:
    """The dependencies of AskFlow's steps and the helpers more than one group of states uses."""

    def __init__(
        self,
        *,
        settings: Settings,
        clock: Clock,
        memories: MemoryService,
        store: MemoryStore,
        recall: Callable[[], Recall],
        planner: Callable[[str], Planner],  # (tenant) -> the planner over the tenant's model
        warehouse_factory: Callable[[str], Warehouse],  # (tenant) -> the tenant's warehouse
        fewshot_search: Callable[[str, str], list[Any]] | None = None,  # (tenant, question) -> approved examples
        today: Callable[[], date] | None = None,  # the data's today (MEMTOOL_TODAY), as the planner reads it
        sleep: Callable[[float], None] = time.sleep,
        diagnosis: Callable[[], DiagnosisService] | None = None,  # lessons, in-flow repair, the queue
        compiler: Callable[[str], IntentCompiler] | None = None,  # (tenant) -> lessons recompile intents with it
        cache: Callable[[], SqlCache] | None = None,
        model: Callable[[str], TenantModel] | None = None,  # (tenant) -> the semantic model in force and its label
        foreign_tables: Callable[[str], frozenset[str]] | None = None,  # (tenant) -> other tenants' tables, never allowed
        granted_tables: Callable[[str], tuple[str, ...] | None] | None = None,  # (tenant) -> what the operator granted
        sources: Callable[[], SourceLibrary] | None = None,  # business_knowledge_qa quotes the sources definitions rest on
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._memories = memories
        self._store = store
        self._recall = recall
        self._planner = planner
        self._warehouse_factory = warehouse_factory
        self._fewshot_search = fewshot_search
        self._today = today or (lambda: clock.now().date())
        self._sleep = sleep
        self._diagnosis = diagnosis
        self._compiler = compiler
        self._cache = cache
        self._model = model
        self._foreign_tables = foreign_tables
        self._granted_tables = granted_tables
        self._sources = sources
        self._data_spans: dict[tuple[str, str, str, str | None], tuple[float, tuple[date, date] | None]] = {}

    def _time_left(self, state: AskState, wanted: float) -> float:
        """``wanted`` seconds, or less: what is left of the flow's own time (AskFlow's TimeoutSeconds,
        scaled like the ASL in the local runtime) after a reserve for the steps that record the
        answer. A slow warehouse or diagnosis then ends in a failure the flow records, never in the
        execution's timeout, which records nothing."""
        budget = self._settings.ask_flow_timeout_seconds * (self._settings.local_flow_timeout_scale if self._settings.is_local else 1)
        try:
            elapsed = (self._clock.now() - datetime.fromisoformat(state.started_at)).total_seconds()
        except ValueError:
            return wanted
        left = budget - FLOW_RESERVE_SECONDS - max(0.0, elapsed)
        return max(MIN_STEP_SECONDS, min(wanted, left))

    def _who(self, state: AskState) -> Identity:
        return Identity(state.caller.tenant, state.caller.user, frozenset(state.caller.roles))

    def _today_for(self, tenant: str) -> date:
        """The day periods are read as of: a historical data set's end (its model's as_of), else today."""
        if self._model is not None:
            try:
                as_of = self._model(tenant).catalog.as_of
            except Exception:  # noqa: BLE001 - no model: Plan has already said so; today stands
                as_of = None
            if as_of is not None:
                return as_of
        return self._today()

    def _parser_for(self, tenant: str) -> Any:
        """The tenant's question parser, when the planner has rules (a scripted planner has none)."""
        try:
            rules = getattr(self._planner(tenant), "rules", None)
        except Exception:  # noqa: BLE001 - Plan reports a planner that cannot be built (a missing model)
            return None
        return getattr(rules, "parser", None)

    def _catalog(self, tenant: str) -> Any:
        compiler = self._compiler(tenant) if self._compiler is not None else None
        if compiler is not None:
            return compiler.catalog
        from memtool.semantic.catalog import load_catalog

        return load_catalog()

    def _guard_policy(self, policy_type: Any, tenant: str) -> Any:
        """The allow-list is the tenant's model's tables as the warehouse has them now (drift
        included; never another tenant's tables, never a table the operator did not grant), checked
        in the warehouse's own dialect too; when the schema cannot be read, the model's own columns
        (Execute then reports why the warehouse failed). Without a model, the live schema."""
        settings = self._settings
        limits = {"max_rows": settings.max_rows, "timeout_seconds": settings.statement_timeout_seconds}
        model = self._model(tenant).catalog if self._model is not None else None
        granted = self._granted_tables(tenant) if self._granted_tables is not None else None
        try:
            warehouse = self._warehouse_factory(tenant)
            engine = getattr(warehouse, "dialect", "redshift")
            schema = warehouse.describe()
        except Exception as exc:
            if model is None:
                raise
            logger.warning("the live schema could not be read (%s); guarding with the model's columns", type(exc).__name__)
            return policy_type.from_model(model, granted=granted, **limits)
        if model is None:
            return policy_type.from_live_schema(schema, granted=granted, **limits).on_engine(engine)
        foreign = self._foreign_tables(tenant) if self._foreign_tables is not None else frozenset()
        return policy_type.for_model(schema, model, foreign_tables=foreign, granted=granted, **limits).on_engine(engine)

    def _read_slot(self, state: AskState, where: Partition, kind: MemoryKind, key: str, now: datetime) -> MemoryRecord | None:
        """The record holding a slot, or None; one the store cannot read is skipped with a note."""
        try:
            return self._store.get_slot(where, kind, key, now)
        except ValidationFailed as exc:  # the port's word for a record it cannot decode
            memory_id = exc.memory_id if isinstance(exc, UndecodableRecord) else None
            logger.warning(
                "episode %s skipped the %s slot %s of %s/%s (%s): %s",
                state.episode_id, kind.value, key, where.tenant, where.owner, memory_id, getattr(exc, "reason", exc.message),
            )  # fmt: skip
            state.note(f"skipped 1 memory that could not be read: {memory_id or key} (the {kind.value} slot {key})")
            return None

    @staticmethod
    def _ignore(state: AskState, record: MemoryRecord, note: str) -> None:
        logger.warning("episode %s ignored memory %s (%s %s): %s", state.episode_id, record.id, record.kind.value, record.key, note)
        state.note(note)


def turns_key(session_id: str) -> str:
    return SESSION_TURNS.key_for(session_id)


def intent_json(plan: Plan | None) -> dict[str, Any] | None:
    """The plan's intent as JSON (how episodes, turns and diagnoses keep it)."""
    return plan.intent.model_dump(mode="json") if plan is not None and plan.intent is not None else None


def is_zh(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None


def crash_reason(raw: Any) -> str:
    if isinstance(raw, dict):
        from memtool.flows.ask.state import step_error_parts

        kind, message = step_error_parts(str(raw.get("Error") or ""), str(raw.get("Cause") or ""))
        return f"{kind}: {message}"[:300] if message else kind or "an internal error"
    return "an internal error"
