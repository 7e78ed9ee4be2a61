"""AskFlow's steps, one method each; functions/flow_steps dispatches to them by name.

Each step takes the flow state and returns the next one. A step that cannot go on raises, and
the state machine's Catch decides what follows (Execute's failures go to Diagnose).

A memory the ask reads but cannot use (undecodable, or a typed slot holding the wrong shape) is
ignored with a note in the answer; it never fails the ask. Record appends the turn to the
session's working memory with optimistic locking, retrying on a conflict, and never loses the
answer over it.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from memtool.clock import Clock
from memtool.errors import MemtoolError, NotFound, ValidationFailed, VersionConflict
from memtool.feedback.reward import environment_reward
from memtool.flows.ask_state import STATE_ROW_CAP, AnalysisReport, AskState, CacheReport, GuardVerdict, MemoryUse, QueryRows, answer_error
from memtool.flows.memory_write import MemoryService
from memtool.identity import Identity
from memtool.memory.commands import MemoryEdit, NewMemory
from memtool.memory.records import MemoryKind, MemoryRecord, SourceRef, Trigger
from memtool.memory.slots import CHART, CURRENCY_UNIT, SESSION_TURNS, correction_key, episode_key
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition, UndecodableRecord
from memtool.planning.plan import Citation, Plan
from memtool.planning.port import Planner
from memtool.retrieval.recall import Recall, RecallRequest
from memtool.settings import Settings
from memtool.sql.errors import WarehouseUnavailable
from memtool.sql.errors import typed as typed_warehouse_error
from memtool.sql.warehouse import Warehouse, WarehouseError
from memtool.tools.executor import echo_arguments

if TYPE_CHECKING:
    from memtool.cache.sql_cache import SqlCache
    from memtool.flows.diagnose import DiagnosisService
    from memtool.semantic.catalog import TenantModel
    from memtool.semantic.compiler import IntentCompiler

WORKING_TURNS_KEPT = 10
# An analysis's drill-down table must be complete: above this many rows the analysis refuses.
ANALYSIS_ROW_CAP = 5000
# Two asks in one session race on the working-memory slot: re-read and retry this many times,
# with a short jittered backoff, before giving up on keeping the turn (never on the answer).
TURN_WRITE_ATTEMPTS = 5
TURN_WRITE_BACKOFF_SECONDS = 0.02

logger = logging.getLogger("memtool.flows")

# What a step keeps back of the flow's time for Visualize, CacheStore and Record, and the least a
# warehouse query or a diagnosis is given (it then fails fast and the failure is recorded).
FLOW_RESERVE_SECONDS = 4.0
MIN_STEP_SECONDS = 1.0


# The data's first and last day per (tenant, model version, metric), for telling a period outside the
# data from an empty answer inside it; read once and kept like the live schema.
DATA_SPAN_CACHE = 256
DATA_SPAN_SECONDS = 600.0


class UnknownStep(ValueError):
    pass


class AskSteps:
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
        self._data_spans: dict[tuple[str, str, str, str | None], tuple[float, tuple[date, date] | None]] = {}

    def run(self, step: str, raw_state: dict[str, Any]) -> dict[str, Any]:
        method = getattr(self, f"step_{step.lower()}", None)
        if method is None:
            raise UnknownStep(f"AskFlow has no step {step!r}")
        state = AskState.model_validate(raw_state)
        started = time.perf_counter()
        state = method(state)
        state.timings[step] = round((time.perf_counter() - started) * 1000 + state.timings.get(step, 0.0), 3)
        return state.model_dump(mode="json", exclude_none=False)

    # ---- steps --------------------------------------------------------------------------

    def step_prepare(self, state: AskState) -> AskState:
        from memtool.planning.routes import classify_route

        if state.input.route:
            state.route = state.input.route
        else:
            parser = self._parser_for(state.caller.tenant)
            state.route = classify_route(state.input.question, parser=parser)
        where = Partition(state.caller.tenant, state.caller.user)
        now = self._clock.now()
        if state.input.session_id:
            turns = self._read_slot(state, where, MemoryKind.WORKING, _turns_key(state.input.session_id), now)
            if turns is not None:
                problem = SESSION_TURNS.problem(turns.value)
                if problem is not None:
                    self._ignore(state, turns, f"the session's working memory {turns.id} was ignored: {problem}")
                state.working = SESSION_TURNS.read(turns.value)
        for slot, name in ((CURRENCY_UNIT, "unit"), (CHART, "chart")):
            record = self._read_slot(state, where, MemoryKind.PROFILE, slot.key, now)
            if record is None:
                continue
            problem = slot.problem(record.value)
            if problem is not None:
                self._ignore(state, record, f"the profile preference {record.id} was ignored: {problem}")
                continue
            state.profile[name] = slot.read(record.value) or record.content
            state.profile_sources[name] = f"memory:{record.id}@v{record.version}"
        return state

    def step_recall(self, state: AskState) -> AskState:
        text = state.input.question
        last = state.working[-1] if state.working else None
        if isinstance(last, dict) and last.get("status") == "needs_clarification":
            # A reply to a clarification answers the question left waiting: recall for both.
            waiting = (last.get("clarification") or {}).get("pending_question") or last.get("question")
            if isinstance(waiting, str) and waiting:
                text = f"{waiting} {text}"
        result = self._recall().recall(
            RecallRequest(tenant=state.caller.tenant, user=state.caller.user, text=text, route=state.route or "nl2sql_query")
        )
        state.memories_recalled = [
            MemoryUse(id=m.record.id, version=m.record.version, kind=m.record.kind.value, score=round(m.score, 6), content=m.record.content)
            for m in result.memories
        ]
        state.recall_coverage = result.coverage.as_dict()
        state.recalled = [m.record.model_dump(mode="json") for m in result.memories]
        skipped = result.coverage.skipped_ids
        if skipped:
            state.note(f"skipped {_memories(len(skipped))} that could not be read: {', '.join(skipped)}")
        if self._fewshot_search is not None and state.route != "business_knowledge_qa":
            try:
                found = self._fewshot_search(state.caller.tenant, state.input.question)
            except Exception:  # examples help; their absence never fails an ask
                logger.warning("episode %s: few-shot search failed", state.episode_id, exc_info=True)
                state.note("approved examples could not be searched for this question")
                found = []
            state.fewshots = [example.model_dump(mode="json") for example in found]
        return state

    def step_plan(self, state: AskState) -> AskState:
        self._require_a_warehouse(state.caller.tenant)
        plan = self._planner(state.caller.tenant).plan(state.input.question, route=state.route, context=state.plan_context())
        if self._model is not None and plan.status in ("planned", "answered", "needs_clarification"):
            model = self._model(state.caller.tenant)
            plan.notes.append(f"semantic model: {model.label}")
            window = plan.intent.time_window if plan.intent is not None else None
            if model.catalog.as_of is not None and window is not None and window.start >= model.catalog.as_of:
                last = model.catalog.as_of - timedelta(days=1)
                plan.notes.append(f"the data set ends on {last.isoformat()}: {window.label} has no data")
        state.plan = plan
        state.plan_status = plan.status if plan.status in ("needs_clarification", "remembered") else "ready"
        state.sql = plan.sql
        if plan.route != state.route and state.input.route is None:
            state.route = plan.route  # a clarification reply answers the pending question, on its route
        recalled = {m.id: m for m in state.memories_recalled}
        state.memories_used = [
            MemoryUse(
                id=a.id,
                version=a.version,
                kind=a.kind,
                score=recalled[a.id].score if a.id in recalled else 0.0,
                content=recalled[a.id].content if a.id in recalled else a.why,
            )
            for a in plan.applied
        ]
        if plan.remember is not None:
            self._remember_preference(state, plan.remember.model_dump(exclude_none=True))
        state.planned_intent = plan.intent.model_dump(mode="json") if plan.intent is not None else None
        if state.sql and state.plan_status == "ready":
            self._apply_lessons(state)
        state.planned_sql = state.sql
        return state

    def step_cachelookup(self, state: AskState) -> AskState:
        """A question asked before: its cached SQL (run again by Execute), skipping Recall and Plan."""
        state.cache_status = "miss"
        if self._cache is None:
            state.cache = CacheReport(hit=False, reason="disabled")
            return state
        previous = state.working[-1] if state.working else None
        try:
            outcome = self._cache().lookup(
                state.caller.tenant,
                state.caller.user,
                state.input.question,
                state.route or "",
                profile_unit=state.profile.get("unit"),
                conditions=dict(state.input.conditions),
                previous_turn=previous if isinstance(previous, dict) else None,
            )
        except Exception:  # a cache that fails is a miss; the question is planned
            logger.warning("episode %s: the SQL cache lookup failed", state.episode_id, exc_info=True)
            state.cache = CacheReport(hit=False, reason="error")
            return state
        state.cache = CacheReport.model_validate(outcome.public())
        if not outcome.hit:
            return state
        state.cache_status = "hit"
        state.cache_entry = {"id": outcome.entry_id, "owner": outcome.entry_owner}
        state.sql = outcome.sql
        state.planned_sql = outcome.sql
        state.lessons = list(outcome.lessons)
        state.plan_status = "ready"
        how = "the same question" if outcome.reason == "exact" else "a question of the same shape, with this question's values bound in"
        state.plan = Plan.model_validate(
            {
                "status": "planned",
                "route": state.route,
                "intent": outcome.intent,
                "sql": outcome.sql,
                "planner": "cache",
                "notes": [*outcome.notes, f"SQL from the cache ({how}; {state.cache.entry}); it ran again on the warehouse"],
            }
        )
        state.memories_used = [
            MemoryUse(id=memory_id, version=version, kind=kind, score=1.0, content="shaped the cached SQL")
            for memory_id, version, kind in outcome.memories
        ]
        return state

    def step_cachestore(self, state: AskState) -> AskState:
        """Keep the SQL of an answered question for the next time it is asked (never a failure's)."""
        if self._cache is None or state.cache_status == "hit" or getattr(state, "error", None) or state.guard_status != "passed":
            return state
        plan = state.plan
        if plan is None or plan.carried_over or plan.resolved_question or state.repaired is not None or not state.planned_sql:
            return state  # a follow-up, a reply or a repair means more than its own words: not cached
        if plan.remember is not None or state.result is None or not state.result.has_data() or state.data_status == "no_data":
            return state  # a stated preference is not replayed; an empty answer (or a period without data) is not kept
        from memtool.semantic.intent import Intent

        try:
            record = self._cache().store(
                state.caller.tenant,
                state.caller.user,
                state.input.question,
                state.route or "",
                planned_intent=Intent.model_validate(state.planned_intent) if state.planned_intent else None,
                sql=state.planned_sql,
                lessons=state.lessons,
                used=[(m.id, m.version, m.kind) for m in state.memories_used],
                notes=list(plan.notes),
                profile_unit=state.profile.get("unit"),
                conditions=dict(state.input.conditions),
                planner=plan.planner,
                episode_id=state.episode_id,
            )
        except Exception:  # the answer stands without its cache entry
            logger.warning("episode %s: the SQL could not be cached", state.episode_id, exc_info=True)
            return state
        if record is not None and state.cache is not None:
            # "stored" is an extra of the report: only a kept entry has it
            state.cache = state.cache.model_copy(update={"stored": f"memory:{record.id}@v{record.version}"})
        return state

    def _apply_lessons(self, state: AskState) -> None:
        """Verified lessons from earlier diagnoses, applied before the SQL is guarded and run."""
        if self._diagnosis is None or self._compiler is None:
            return
        from memtool.diagnosis.lessons import apply_lessons

        try:
            lessons = self._diagnosis().lessons.active(state.caller.tenant, state.caller.user, self._clock.now())
            if not lessons:
                return
            compiler = self._compiler(state.caller.tenant)
            outcome = apply_lessons(state.plan.intent if state.plan is not None else None, state.sql, lessons, compiler)
        except Exception:  # a lesson helps; failing to apply one never fails the ask
            logger.warning("episode %s: lessons could not be applied", state.episode_id, exc_info=True)
            state.note("earlier lessons could not be applied to this question")
            return
        if not outcome.applied:
            return
        state.sql = outcome.sql
        if outcome.intent is not None and state.plan is not None:
            state.plan.intent = outcome.intent
        state.lessons = outcome.lessons_value()
        for lesson, repairs in outcome.applied:
            state.note(f"applied lesson {lesson.cite}: {'; '.join(r.describe() for r in repairs)} (learned: {lesson.root_cause})")
            # The catalog's definition is cited too; the lesson that overrides it for this user is.
            if state.plan is not None:
                state.plan.citations.append(Citation(source=lesson.cite, text=lesson.text))
            state.memories_used.append(
                MemoryUse(id=lesson.memory_id, version=lesson.version, kind=MemoryKind.CAUSAL.value, score=1.0, content=lesson.text)
            )

    def step_guard(self, state: AskState) -> AskState:
        from memtool.sql.guardrails import GuardPolicy, check_sql

        policy = self._guard_policy(GuardPolicy, state.caller.tenant)
        verdict = check_sql(state.sql or "", policy)
        state.guard = GuardVerdict(allowed=verdict.allowed, reason=verdict.reason, code=verdict.code, tables=list(verdict.tables))
        state.guard_status = "passed" if verdict.allowed else "blocked"
        if verdict.allowed:
            state.sql = verdict.sql
        return state

    def step_execute(self, state: AskState) -> AskState:
        if state.guard_status != "passed":  # defence in depth: never run unguarded SQL
            raise PermissionError("SQL reached Execute without passing the guardrails")
        try:
            warehouse = self._warehouse_factory(state.caller.tenant)
        except WarehouseError as exc:
            raise typed_warehouse_error(exc) from exc
        except Exception as exc:  # a warehouse that cannot be built (secret, driver) is unavailable
            raise WarehouseUnavailable(f"the warehouse could not be opened ({type(exc).__name__})", code="unavailable") from exc
        try:
            timeout = self._time_left(state, self._settings.statement_timeout_seconds)
            result = warehouse.run(state.sql or "", max_rows=self._settings.max_rows, timeout_seconds=timeout)
        except WarehouseError as exc:
            raise typed_warehouse_error(exc) from exc
        state.result = QueryRows(
            columns=result.columns,
            rows=result.rows[:STATE_ROW_CAP],
            row_count=result.row_count,
            truncated=result.truncated or result.row_count > STATE_ROW_CAP,
            elapsed_ms=result.elapsed_ms,
        )
        self._judge_empty(state, warehouse)
        return state

    def _require_a_warehouse(self, tenant: str) -> None:
        """A tenant whose model has no warehouse here is told what to configure before anything is
        planned (WarehouseMissing), never planned and run on another warehouse; a warehouse that is
        merely down is Execute's to report."""
        from memtool.errors import WarehouseMissing

        try:
            self._warehouse_factory(tenant)
        except WarehouseMissing:
            raise
        except Exception:  # noqa: BLE001 - unavailable, a bad secret: Execute says which
            return

    def _judge_empty(self, state: AskState, warehouse: Warehouse) -> None:
        """An answer with no rows, or only NULL measures, over a period that lies outside the data is
        ``no_data`` (with the data's first and last day), never an ``answered`` NULL or 0; inside the
        data's range it stays an honest empty answer, with a note."""
        plan, result = state.plan, state.result
        intent = plan.intent if plan is not None else None
        if intent is None or result is None or intent.time_window is None or self._compiler is None:
            return
        measures = [i for i, c in enumerate(result.columns) if c not in intent.dimensions]
        if result.rows and any(row[i] is not None for row in result.rows for i in measures if i < len(row)):
            return
        span = self._data_span(state.caller.tenant, intent.metric, warehouse, intent.time_column)
        window = intent.time_window
        label = window.label or f"[{window.start}, {window.end})"
        if span is None:
            state.note(f"no rows for {label}")
            return
        first, last = span
        if window.end <= first or window.start > last:
            state.data_status = "no_data"
            state.note(f"no data for {label}: the data for {intent.metric} runs from {first} to {last}")
        else:
            state.note(f"no rows for {label} matched, inside the data's range ({first} to {last})")

    def _data_span(self, tenant: str, metric: str, warehouse: Warehouse, time_column: str | None = None) -> tuple[date, date] | None:
        """The first and last day of the metric's period column, read once per model version and kept
        (at most DATA_SPAN_CACHE entries, for DATA_SPAN_SECONDS, like the live schema)."""
        assert self._compiler is not None
        compiler = self._compiler(tenant)
        key = (tenant, compiler.catalog.model_version, metric, time_column)
        now = time.monotonic()
        cached = self._data_spans.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            rows = warehouse.run(compiler.time_range_sql(metric, time_column), max_rows=1, timeout_seconds=5).rows
        except Exception:  # without the range, the empty answer is only noted
            logger.warning("the data's range for %s could not be read", metric, exc_info=True)
            return None
        span = _as_span(rows[0] if rows else None)
        if len(self._data_spans) >= DATA_SPAN_CACHE:
            self._data_spans.pop(next(iter(self._data_spans)))
        self._data_spans[key] = (now + DATA_SPAN_SECONDS, span)
        return span

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

    def step_diagnose(self, state: AskState) -> AskState:
        """Classify the failure, test hypotheses by running their repairs, and take a verified one.

        A verified repair is kept as the user's lesson at once and its SQL goes back through Guard
        and Execute (once: a second failure is recorded). Anything else leaves the failure as it
        was, with the diagnosis in the answer; the failed episode is queued for a diagnosis off
        the request path.
        """
        from memtool.diagnosis.apply import Subject, options_from
        from memtool.diagnosis.failures import from_step_error, guard_failure
        from memtool.diagnosis.model import Repair

        state.repair_attempts += 1
        state.repair_status = "not_repaired"
        raw = getattr(state, "error", None)
        if raw is not None:
            failure = from_step_error(raw)
        elif state.guard_status == "blocked":
            failure = guard_failure(state.guard.code if state.guard else None, state.guard.reason if state.guard else None)
        else:
            failure = None
        if failure is not None:
            state.failure = failure.public()
        if state.repair_attempts > 1:
            # The repair passed its test but not the full run: the answer is the failure, and the
            # lesson it used takes the failure's credit (it is in memories_used).
            state.repaired = None
            state.note("the repaired query failed too; the failure is recorded for review")
            return state
        if failure is None or not state.sql or self._diagnosis is None or failure.kind in ("unavailable", "timeout", "permission"):
            return state
        plan = state.plan
        repairs = [Repair.model_validate(r) for lesson in state.lessons for r in lesson.get("repairs") or []]
        subject = Subject(
            question=(plan.resolved_question if plan else None) or state.input.question,
            intent=plan.intent if plan else None,
            sql=state.sql,
            options=options_from([r for r in repairs if not r.sql_level]),
            sql_repairs=tuple(r for r in repairs if r.sql_level),
        )
        scenario = {"question": state.input.question, "asked": subject.question, "intent": _intent_json(plan), "route": state.route}
        try:
            report, record = self._diagnosis().repair(
                self._who(state),
                episode_id=state.episode_id,
                failure=failure,
                subject=subject,
                scenario=scenario,
                lessons=state.lessons,
                deadline_seconds=self._time_left(state, self._settings.diagnosis_deadline_seconds),
            )
        except Exception:  # the original failure is what the answer reports
            logger.warning("episode %s: diagnosis failed", state.episode_id, exc_info=True)
            state.note("the failure could not be diagnosed now; it is queued for a diagnosis")
            return state
        state.diagnosis = report.model_copy(update={"schema_facts": {}})  # the live schema stays out of the state
        if record is None or not report.repaired_sql:
            return state
        state.sql = report.repaired_sql
        state.lessons = [*state.lessons, {"id": record.id, "version": record.version, "repairs": report.repairs}]
        state.error = None  # type: ignore[attr-defined]  # the failure is repaired: Guard and Execute run the repair
        state.guard_status, state.guard = None, None
        state.repair_status = "repaired"
        state.repaired = {"root_cause": report.root_cause, "cause": report.cause, "memory_id": record.id, "version": record.version}
        state.memories_used.append(
            MemoryUse(id=record.id, version=record.version, kind=MemoryKind.CAUSAL.value, score=1.0, content=record.content)
        )
        state.note(f"repaired: {report.root_cause} Verified by running the repaired query; kept as memory:{record.id}@v{record.version}")
        return state

    # ---- the deep-analysis route -----------------------------------------------------------

    def step_plananalyses(self, state: AskState) -> AskState:
        """The analyses the question asks for, each with its table and the runner its size chooses.

        Drill-down tables (attribution's breakdown, clustering's profiles) are compiled from the
        intent by the semantic layer, guarded and run here; the Map state then runs each task.
        An analysis that cannot be prepared is listed under ``analysis.skipped`` with the reason.
        """
        from memtool.analysis.inputs import analysis_windows
        from memtool.analysis.selection import AnalysisTask, choose_analyses, runner_for, tool_for

        state.analysis_tasks = []
        kinds, words = choose_analyses(state.input.question)
        if not kinds:
            kinds, words = ["anomaly"], [""]
            state.note("no analysis was named: the series was scanned for anomalies")
        intent = state.plan.intent if state.plan is not None else None
        today = self._today_for(state.caller.tenant)
        recognised = self._planner(state.caller.tenant).rules.parser.recognise(state.input.question, today=today)
        windows = analysis_windows(recognised.times if recognised is not None else [], today)
        named = list(recognised.metrics) if recognised is not None else []
        skipped: list[dict[str, Any]] = []
        queries: list[str] = []
        charts_kept = 0
        for kind, why in zip(kinds, words, strict=True):
            try:
                tables = self._analysis_tables(state, kind, intent, windows, today, asks_why="attribution" in kinds, named=named)
            except (ValueError, MemtoolError, WarehouseError) as exc:
                reason = getattr(exc, "message", None) or str(exc)
                skipped.append({"kind": kind, "reason": reason})
                state.note(f"the {kind} analysis could not run: {reason}")
                continue
            for table, context in tables:
                task_kind = context.pop("kind", kind)
                queries.extend(table.queries)
                for note in table.notes:
                    state.note(note)
                runner = runner_for(len(table.rows), code_rows=self._settings.analysis_code_rows)
                params = dict(table.params)
                if runner == "sandbox":
                    arguments: dict[str, Any] = {"analysis": task_kind, "columns": table.columns, "rows": table.rows, "params": params}
                    code = self._generated_script(state, task_kind, table, params)
                    if code:
                        arguments["code"] = code
                    if task_kind == "segments" or charts_kept >= 1:
                        arguments["return_files"] = False  # one chart travels with the answer; the rest stay in the sandbox
                    else:
                        charts_kept += 1
                else:
                    arguments = {"columns": table.columns, "rows": table.rows, **params}
                tool = tool_for(task_kind, runner)
                task = AnalysisTask(kind=task_kind, runner=runner, tool=tool, arguments=arguments, rows=len(table.rows), why=why)
                state.analysis_tasks.append({**task.model_dump(mode="json"), "context": context})
        state.analysis_count = len(state.analysis_tasks)
        state.analysis = AnalysisReport(status="planned", skipped=skipped, queries=queries)
        return state

    def _analysis_tables(
        self, state: AskState, kind: str, intent: Any, windows: Any, today: date, *, asks_why: bool = False, named: list[str] | None = None
    ) -> list[tuple[Any, dict[str, Any]]]:
        """The tables one analysis runs on, each with what Summarize needs to word its result."""
        from memtool.analysis import inputs

        columns, rows = self._complete_series(state, intent, today, note=kind in ("anomaly", "forecast"))
        metric = intent.metric if intent is not None else (columns[-1] if columns else "value")
        base = {
            "metric": metric,
            "unit": intent.unit if intent is not None else None,
            "focus": inputs.month_labels(windows.focus) if windows.focus else [],
        }
        if kind in ("anomaly", "forecast", "attribution") and not any(c in inputs.GRAINS for c in columns):
            raise ValueError("the answer has no time series to analyse")
        if kind in ("anomaly", "forecast", "attribution") and not rows:
            raise ValueError("there is no data for the period asked about")
        if kind == "forecast" and windows.horizon is None and windows.focus is not None and windows.focus.end <= today:
            raise ValueError(
                f"{windows.focus.label or windows.focus.start} is already over: "
                "its actual value is in the answer, there is nothing to forecast"
            )
        periods = (
            {str(r[columns.index(next(c for c in columns if c in inputs.GRAINS))])[:7] for r in rows}
            if kind in ("anomaly", "forecast")
            else set()
        )
        if kind in ("anomaly", "forecast") and len(periods) < 6:
            raise ValueError(
                f"{len(periods)} periods of data are too few to judge what is "
                f"{'unusual' if kind == 'anomaly' else 'coming'} (6 or more are needed)"
            )
        if kind == "anomaly":
            table = inputs.series_table(columns, rows, intent, windows)
            groups = table.params["group_columns"]
            period, value = table.params["period_column"], table.params["value_column"]
            if not groups:
                total = inputs.Table(
                    [period, value],
                    [[r[columns.index(period)], r[columns.index(value)]] for r in table.rows],
                    inputs.anomaly_params(table, metric),
                )
                focus = base["focus"]
                if intent is None or not focus or not (asks_why or len(focus) == 1):
                    return [(total, base)]
                # "为什么6月…异常高": where the anomaly sits, member by member, besides the total.
                catalog = self._catalog(state.caller.tenant)
                try:
                    segments = inputs.segment_table(
                        intent, focus[-1], lambda drill: self._run_drilldown(state, drill), catalog
                    )
                except (ValueError, MemtoolError, WarehouseError) as exc:  # the total's scan still runs
                    state.note(f"the segment scan could not run: {getattr(exc, 'message', None) or exc}")
                    segments = None
                if segments is None:
                    return [(total, base)]
                return [(total, base), (segments, {**base, "kind": "segments", "focus": [focus[-1]]})]
            by_group: dict[str, list[list[Any]]] = {}
            for row in table.rows:
                name = " / ".join(str(row[columns.index(g)]) for g in groups)
                by_group.setdefault(name, []).append([row[columns.index(period)], row[columns.index(value)]])
            if len(by_group) > inputs.MAX_SERIES:
                raise ValueError(f"{len(by_group)} series are more than the {inputs.MAX_SERIES} one question can scan; narrow the question")
            return [
                (inputs.Table([period, value], series, inputs.anomaly_params(table, f"{metric} ({name})")), {**base, "group": name})
                for name, series in sorted(by_group.items())
            ]
        if kind == "forecast":
            table = inputs.forecast_table(columns, rows, intent, windows, today)
            return [
                (
                    inputs.Table(table.columns, table.rows, inputs.forecast_params(table), notes=table.notes),
                    {**base, "report_periods": table.params["report_periods"], "horizon_label": table.params["horizon_label"]},
                )
            ]
        if intent is None:
            raise ValueError("the question's intent is not known")
        catalog = self._catalog(state.caller.tenant)
        if kind == "attribution":
            period = next(c for c in columns if c in inputs.GRAINS)
            labels = sorted({str(r[columns.index(period)])[:7] for r in rows})
            table = inputs.attribution_table(
                intent, windows, lambda drill: self._run_drilldown(state, drill), catalog, labels, today
            )
            # The drill-down is in the base unit (元), whatever unit the answer shows.
            return [(table, {**base, "unit": None, "before": table.params["before_period"], "after": table.params["after_period"]})]
        table = inputs.profile_table(
            intent,
            lambda drill: self._run_drilldown(state, drill),
            catalog,
            windows.focus,
            named=named or (),
        )
        if len(table.rows) < 3:
            raise ValueError(f"{kind} needs at least 3 members with every measure; the data has {len(table.rows)}")
        return [
            (inputs.Table(table.columns, table.rows, inputs.profile_params(kind, table), queries=table.queries), {**base, "unit": None})
        ]

    def _generated_script(self, state: AskState, kind: str, table: Any, params: dict[str, Any]) -> str | None:
        """The Bedrock planner's script for this analysis, when the Bedrock planner is configured
        (the rule planner writes none: the templated script runs)."""
        if kind == "segments":
            return None
        planner = self._planner(state.caller.tenant)
        script = planner.write_analysis_script(state.input.question, kind, table.columns, table.rows, params)
        if script:
            state.note(f"the {kind} script was written by {planner.name}; it runs only in the sandbox")
        return script

    def _complete_series(self, state: AskState, intent: Any, today: date, *, note: bool = True) -> tuple[list[str], list[list[Any]]]:
        """The answered table without its partial periods (the month so far is not a month: it
        would read as a drop), with a note naming what was left out."""
        from memtool.semantic.periods import partial_buckets

        result = state.result or QueryRows()
        columns, rows = list(result.columns), list(result.rows)
        partial = {b.label[:10] for b in partial_buckets(intent, today)} if intent is not None else set()
        if not partial or not columns:
            return columns, rows
        kept = [row for row in rows if str(row[0])[:10] not in partial]
        if len(kept) < len(rows) and note:
            state.note(f"the partial period {', '.join(sorted(p[:7] for p in partial))} is left out of the analysis (it is not over yet)")
        return columns, kept

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

    def _run_drilldown(self, state: AskState, drill: Any) -> tuple[list[str], list[list[Any]], str]:
        """Compile, guard and run one drill-down; the rows must be complete (a sum over a
        truncated table would be wrong)."""
        from memtool.sql.guardrails import GuardPolicy, check_sql

        if self._compiler is None:
            raise ValueError("no semantic layer is configured to build the analysis's tables")
        compiled = self._compiler(state.caller.tenant).compile(drill)
        verdict = check_sql(compiled.sql, self._guard_policy(GuardPolicy, state.caller.tenant))
        if not verdict.allowed or verdict.sql is None:
            raise ValueError(f"the guardrails refused the analysis's query: {verdict.reason}")
        try:
            warehouse = self._warehouse_factory(state.caller.tenant)
            result = warehouse.run(
                verdict.sql, max_rows=ANALYSIS_ROW_CAP, timeout_seconds=self._time_left(state, self._settings.statement_timeout_seconds)
            )
        except WarehouseError as exc:
            raise ValueError(f"the analysis's query failed on the warehouse ({exc.code})") from exc
        if result.truncated or result.row_count > ANALYSIS_ROW_CAP:
            raise ValueError(f"the analysis's table has more than {ANALYSIS_ROW_CAP} rows; narrow the question")
        return list(result.columns), [list(r) for r in result.rows], verdict.sql

    def step_summarize(self, state: AskState) -> AskState:
        """The tools' results as ``analysis`` {status, tool, result, summary, analyses}; a
        summary in the question's language built from the numbers, and each failure named."""
        from memtool.analysis.summary import (
            catalog_labels,
            focus_sentence,
            premise_sentence,
            reported_part,
            scope_prefix,
            segment_sentence,
            summarize_analysis,
        )
        from memtool.tools.executor import ToolResult

        planned = state.analysis or AnalysisReport(status="planned")
        skipped = list(planned.skipped)
        runs = state.analysis_runs or []
        crashed = getattr(state, "analysis_error", None)
        lang: Literal["zh", "en"] = "zh" if _is_zh(state.input.question) else "en"
        labels = catalog_labels(self._catalog(state.caller.tenant), lang)  # measures and dimensions in the question's language
        analyses: list[dict[str, Any]] = []
        png: dict[str, Any] | None = None
        segments_scanned: list[dict[str, Any]] = []
        segment_hits: list[dict[str, Any]] = []
        for position, task in enumerate(state.analysis_tasks):
            raw = runs[position] if position < len(runs) and isinstance(runs[position], dict) else None
            context = task.get("context") or {}
            entry: dict[str, Any] = {
                "kind": task["kind"],
                "tool": task["tool"],
                "runner": task["runner"],
                "rows": task.get("rows"),
                "group": context.get("group"),
            }
            if raw is None:
                entry.update(success=False, error={"kind": "internal", "message": "the analysis did not return a result"})
                analyses.append(entry)
                continue
            try:
                outcome = ToolResult.model_validate(raw)
            except ValueError:
                entry.update(success=False, error={"kind": "internal", "message": "the analysis returned a result of the wrong shape"})
                analyses.append(entry)
                continue
            state.tool_calls.append(outcome.trajectory_entry())
            if not outcome.success or outcome.data is None:
                entry.update(success=False, error=outcome.error.model_dump() if outcome.error else None)
                analyses.append(entry)
                continue
            data = outcome.data
            result = data.get("result") if task["tool"] == "code_interpreter" else data
            for note in data.get("notes") or []:
                state.note(f"{task['kind']}: {note}")
            if task["tool"] == "code_interpreter" and png is None:
                png = next((f for f in data.get("files") or [] if f.get("content_type") == "image/png" and f.get("data_base64")), None)
            if task["kind"] == "segments":
                segment_hits.extend((result or {}).get("hits") or [])
                segments_scanned.extend((result or {}).get("members") or [])
                # Each member's whole series stays in the sandbox's answer; the state keeps the month asked about.
                focus = (result or {}).get("focus")
                brief = {
                    **(result or {}),
                    "members": [
                        {
                            **{k: m[k] for k in ("dimension", "member", "anomalies")},
                            "points": [p for p in m.get("points") or [] if p.get("label") == focus],
                        }
                        for m in (result or {}).get("members") or []
                    ],
                }
                entry.update(success=True, result=brief, summary="", duration_ms=outcome.duration_ms, isolation=data.get("isolation"))
                analyses.append(entry)
                continue
            try:
                shown = reported_part(task["kind"], result or {}, context)
                summary = summarize_analysis(
                    task["kind"], shown, lang=lang, metric_label=labels.get(context.get("metric") or "", context.get("metric") or ""),
                    unit=context.get("unit"), dimension_labels=labels,
                )  # fmt: skip
                if task["kind"] == "attribution":
                    metric_label = labels.get(context.get("metric") or "", context.get("metric") or "")
                    summary = premise_sentence(state.input.question, shown, lang, metric_label) + summary
                if task["kind"] == "anomaly" and context.get("focus"):
                    with_segments = any(t["kind"] == "segments" for t in state.analysis_tasks)
                    summary = focus_sentence(result or {}, context["focus"], lang, context.get("group"), total=with_segments) + summary
            except Exception:  # the numbers stand without their sentence
                logger.warning("episode %s: the %s result could not be summarised", state.episode_id, task["kind"], exc_info=True)
                summary = ""
            entry.update(success=True, result=result, summary=summary, duration_ms=outcome.duration_ms, isolation=data.get("isolation"))
            analyses.append(entry)
        failed = [a for a in analyses if not a.get("success")]
        for item in failed:
            message = (item.get("error") or {}).get("message") or "it failed"
            state.note(f"the {item['kind']} analysis{' of ' + item['group'] if item.get('group') else ''} could not run: {message}")
        if crashed is not None:
            state.note("the analyses could not be run: " + _crash_reason(crashed))
        done = [a for a in analyses if a.get("success")]
        if done:  # the tools ran in the Map (in parallel): its wall time is at least the longest
            state.timings["Analyze"] = round(max(a.get("duration_ms") or 0.0 for a in done), 3)
        status: Literal["complete", "partial", "failed"] = (
            "complete" if done and not failed and not skipped and crashed is None else "partial" if done else "failed"
        )
        summaries = [a["summary"] for a in done if a.get("summary")]
        if segments_scanned:
            summaries.insert(1 if summaries else 0, segment_sentence(segment_hits, segments_scanned, lang, labels))
        scope = scope_prefix(_intent_json(state.plan), lang)
        if scope and summaries:
            summaries[0] = scope + summaries[0]
        state.analysis = AnalysisReport(
            status=status,
            tool=done[0]["tool"] if done else None,
            result=done[0]["result"] if done else None,
            summary="\n".join(summaries) if summaries else None,
            analyses=analyses,
            skipped=skipped,
            queries=list(planned.queries),
            chart_png=png,
        )
        if status != "complete" and not done:
            state.note("no analysis ran: the answer has the data only")
        # The runs and the tasks' tables now live in ``analysis``: carrying them on would double
        # the state (Step Functions caps a state, and a Lambda's answer, at 256 KB).
        state.analysis_runs = None
        for task in state.analysis_tasks:
            task["arguments"] = echo_arguments(task.get("arguments") or {})
        return state

    def step_visualizekpi(self, state: AskState) -> AskState:
        """kpi_lookup: one number is a KPI card at once, without the chart candidate search;
        anything else (or another chart asked for) gets the full recommendation."""
        from memtool.semantic.periods import partial_buckets
        from memtool.viz.charts import kpi_card

        result = state.result or QueryRows()
        if state.input.conditions.get("chart") not in (None, "kpi_card"):
            return self._visualize_result(state)
        intent = state.plan.intent if state.plan is not None else None
        buckets = partial_buckets(intent, self._today_for(state.caller.tenant)) if intent else []
        card = kpi_card(
            result.columns, result.rows, hints=_shape_hints(state.plan, state.input.question), partial=[b.label for b in buckets]
        )
        if card is None:
            return self._visualize_result(state)
        state.chart = _chart_state(card)
        return state

    def step_visualize(self, state: AskState) -> AskState:
        crashed = getattr(state, "analysis_error", None)
        if (
            state.route == "deep_analysis_workflow"
            and crashed is not None
            and (state.analysis is None or state.analysis.status == "planned")
        ):
            # Summarize itself failed: the answer still says that no analysis result is there.
            state.note("the analyses could not be summarised: " + _crash_reason(crashed))
            state.analysis = AnalysisReport(status="failed")
        if state.route == "deep_analysis_workflow" and state.analysis is not None and state.analysis.result is not None:
            return self._visualize_analysis(state)
        return self._visualize_result(state)

    def _visualize_analysis(self, state: AskState) -> AskState:
        """The chart of the first analysis that ran (its PNG from the sandbox rides along)."""
        from memtool.viz.analysis_charts import analysis_chart

        first = state.analysis.first_success() if state.analysis is not None else None
        result = state.result or QueryRows()
        columns = list(result.columns)
        history: list[tuple[str, float]] = []
        if columns and columns[0] in ("day", "week", "month", "quarter", "year") and len(columns) == 2:
            history = [(str(r[0])[:7], r[-1]) for r in result.rows if isinstance(r[-1], (int, float))]
        built = (
            analysis_chart(first["kind"], first.get("result") or {}, lang="zh" if _is_zh(state.input.question) else "en", history=history)
            if first
            else None
        )
        if built is None or first is None:
            return self._visualize_result(state)
        if state.input.conditions.get("chart"):
            state.note(
                f"the chart is the {first['kind']} analysis's; "
                f"the chart condition ({state.input.conditions['chart']}) applies to data answers"
            )
        state.chart = {
            "type": built["type"],
            "confidence": 1.0,
            "checkpoint_status": "auto_pass",
            "candidates": [],
            "option": built["option"],
            "partial_buckets": [],
            "of": f"analysis:{first['kind']}",
        }
        return state

    def _visualize_result(self, state: AskState) -> AskState:
        from memtool.semantic.periods import partial_buckets, partial_note
        from memtool.viz.charts import recommend_chart

        result = state.result or QueryRows()
        intent = state.plan.intent if state.plan is not None else None
        buckets = partial_buckets(intent, self._today_for(state.caller.tenant)) if intent else []
        chart = recommend_chart(
            result.columns,
            result.rows,
            hints=_shape_hints(state.plan, state.input.question),
            preferred=state.input.conditions.get("chart") or state.profile.get("chart"),
            partial=[b.label for b in buckets],
        )
        note = partial_note(buckets)
        if note:
            state.note(note)
        state.chart = _chart_state(chart)
        return state

    def _forget_failed_entry(self, state: AskState) -> None:
        """A cached SQL that failed is never served again."""
        if state.status == "failed" and state.cache_status == "hit" and state.cache_entry and self._cache is not None:
            self._cache().forget(state.caller.tenant, str(state.cache_entry.get("owner")), str(state.cache_entry.get("id")))

    def step_record(self, state: AskState) -> AskState:
        """Keep what happened: the episode, the session's turn, the failure's credit and its diagnosis.

        Idempotent by execution: Step Functions retries a Record task with the same state, and a
        retry finds the episode it wrote (unchanged: no second version), the turn already in the
        session, the credit already counted for this episode, and the diagnosis already queued.
        """
        state.status = _outcome(state)
        return self._record(state)

    def step_recordfailure(self, state: AskState) -> AskState:
        state.status = "failed"
        raw = getattr(state, "error", None)
        public = answer_error(state)
        if public is not None:
            # AskFailed fails the execution with $.error.Error and $.error.Cause: hand it the public
            # error, so no stack trace travels on. Operators find the original in this log line.
            logger.warning(
                "AskFlow episode %s failed at %s: %s", state.episode_id, public.step, json.dumps(raw, ensure_ascii=False, default=str)
            )
            state.error = {"Error": public.error, "Cause": public.model_dump_json()}  # type: ignore[attr-defined]
        return self._record(state)

    def _record(self, state: AskState) -> AskState:
        """Record's writes, each one idempotent for a retried task (see ``step_record``)."""
        self._forget_failed_entry(state)  # forgetting twice forgets nothing more
        self._remember_learned(state)  # the same correction again is unchanged
        episode, first_record = self._remember_episode(state)
        self._remember_turn(state)  # a turn already in the session is not appended again
        self._credit_failure(state, episode)  # credit counts an episode once (credit_after)
        self._queue_diagnosis(state, episode, send=first_record)  # a retry found its episode: the first attempt queued it
        return state

    def _queue_diagnosis(self, state: AskState, episode: MemoryRecord | None, *, send: bool = True) -> None:
        """A failed SQL answer the flow could not repair is diagnosed off the request path
        (``send=False``: a retried Record, whose first attempt sent the event, only says so)."""
        if state.status != "failed" or state.failure is None or state.repaired is not None or episode is None or self._diagnosis is None:
            return
        from memtool.diagnosis.requests import DiagnoseRequest

        queued = not send or self._diagnosis().enqueue(
            DiagnoseRequest(
                tenant=state.caller.tenant,
                user=state.caller.user,
                episode_id=state.episode_id,
                reason="failed_episode",
                request_id=f"{state.episode_id}:failed",
            )
        )
        if queued:
            state.note("the failure is queued for a diagnosis; see GET /episodes/" + state.episode_id)

    # ---- memory formation -----------------------------------------------------------------

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

    def _remember_episode(self, state: AskState) -> tuple[MemoryRecord, bool]:
        """The episode, and whether this call recorded it (False: a retry found it as it is)."""
        public = answer_error(state)
        error = public.model_dump() if public is not None else None
        plan = state.plan
        value = {
            "route": state.route,
            "sql": state.sql,
            "intent": _intent_json(plan),
            "asked": (plan.resolved_question if plan else None) or state.input.question,  # a reply answers the pending question
            "clarified": list(plan.clarified) if plan else [],  # the kinds of clarification choices it took
            "outcome": state.status,
            "row_count": state.result.row_count if state.result is not None else None,
            # rows that hold nothing but NULLs (a total over no data) answer nothing either
            "empty": state.result is not None
            and bool(state.result.rows)
            and all(cell is None for row in state.result.rows for cell in row[-1:]),
            "error": error,
            "plan_status": state.plan_status,
            "planner": plan.planner if plan else None,
            "carried_over": list(plan.carried_over) if plan else [],
            "guard": state.guard.model_dump(mode="json") if state.guard is not None else None,
            "chart": (state.chart or {}).get("type"),
            # Recalled and applied kept apart: feedback credits only what shaped the plan.
            "memories_recalled": [{"id": m.id, "version": m.version, "kind": m.kind} for m in state.memories_recalled],
            "memories_used": [{"id": m.id, "version": m.version, "kind": m.kind} for m in state.memories_used],
            "trajectory": [{"step": step, "ms": ms} for step, ms in state.timings.items()]
            + [{"step": "tool", **call} for call in state.tool_calls],
            "lessons": state.lessons,  # verified lessons applied: a later diagnosis starts from the query as it ran
            "cache": state.cache.model_dump(mode="json") if state.cache is not None else None,
            "failure": state.failure,
            "repaired": state.repaired,
            "diagnosis": None
            if state.diagnosis is None
            else {
                "verified": state.diagnosis.verified,
                "cause": state.diagnosis.cause,
                "hypotheses": len(state.diagnosis.hypotheses),
                "executions": state.diagnosis.executions,
            },
        }
        sources = [SourceRef(id=m.id, version=m.version) for m in state.memories_used]

        asked = str(value["asked"])  # a reply to a clarification is an episode of the question it answered

        def episode(value: dict[str, Any], sources: list[SourceRef]) -> NewMemory:
            return NewMemory(
                kind=MemoryKind.EPISODIC,
                key=episode_key(state.episode_id),
                content=asked,
                source_text=state.input.question,
                value=value,
                session_id=state.input.session_id,
                trigger=Trigger.INTERACTION,
                episode_id=state.episode_id,
                sources=sources,
            )

        try:
            result = self._memories.remember(self._who(state), episode(value, sources), system=True)
        except ValidationFailed as exc:  # e.g. an oversize SQL: keep the episode without it
            logger.warning("episode %s could not be kept in full: %s", state.episode_id, exc.message)
            result = self._memories.remember(self._who(state), episode({**value, "sql": None, "trajectory": []}, []), system=True)
        return result.record, not result.unchanged

    def _remember_learned(self, state: AskState) -> None:
        """A clarification reply that chose a meaning for a term: the user's correction from now on."""
        learned = state.plan.learned if state.plan is not None else None
        if learned is None:
            return
        term, maps_to = learned.term, learned.maps_to
        target = maps_to.get("metric") or f"{maps_to.get('dimension')} = {maps_to.get('value')}"
        try:
            result = self._memories.remember(
                self._who(state),
                NewMemory(
                    kind=MemoryKind.CORRECTION,
                    key=correction_key(term),
                    content=f"「{term}」指 {target}" if _is_zh(term) else f"'{term}' means {target}",
                    source_text=state.input.question,
                    value={"term": term, "maps_to": maps_to},
                    confidence=self._settings.clarification_confidence,
                    trigger=Trigger.CLARIFICATION,
                    episode_id=state.episode_id,
                    sources=[SourceRef(id=learned.episode_id)] if learned.episode_id else [],
                ),
            )
        except MemtoolError as exc:
            logger.warning("episode %s could not keep what %r means: %s", state.episode_id, term, exc.message)
            state.note(f"the meaning of {term!r} was used for this question but could not be remembered: {exc.message}")
            return
        state.note(f"remembered: {term} -> {target} (memory:{result.record.id}@v{result.record.version})")
        # The choice shaped this answer: feedback on it credits (or blames) the correction it made.
        state.memories_used.append(
            MemoryUse(
                id=result.record.id,
                version=result.record.version,
                kind=MemoryKind.CORRECTION.value,
                score=1.0,
                content=result.record.content,
            )
        )

    def _remember_preference(self, state: AskState, preference: dict[str, Any]) -> None:
        """A standing preference stated in chat supersedes the profile slot (its history stays)."""
        slot, field_name = (CURRENCY_UNIT, "unit") if "unit" in preference else (CHART, "chart")
        try:
            result = self._memories.remember(
                self._who(state),
                NewMemory(
                    kind=MemoryKind.PROFILE,
                    key=slot.key,
                    content=preference["text"],
                    source_text=preference["text"],
                    value={field_name: preference[field_name]},
                    trigger=Trigger.INTERACTION,
                    episode_id=state.episode_id,
                ),
            )
        except MemtoolError as exc:
            state.note(f"the preference could not be remembered: {exc.message}")
            return
        state.profile[field_name] = preference[field_name]
        state.profile_sources[field_name] = f"memory:{result.record.id}@v{result.record.version}"
        if not result.unchanged:
            replaced = f"; it replaces version {result.superseded.version}" if result.superseded is not None else ""
            state.note(f"remembered your default {field_name}: {preference[field_name]}{replaced}")

    def _credit_failure(self, state: AskState, episode: MemoryRecord | None) -> None:
        """A failed episode carries negative credit, and so do the memories it applied (a few-shot's
        fail_count is its failures); feedback on the episode later replaces this reward."""
        if state.status != "failed":
            return
        from memtool.memory.credit import credit_after

        reward = environment_reward("failed")
        now = self._clock.now()
        targets: list[tuple[Partition, str]] = []
        if episode is not None:
            targets.append((Partition(episode.tenant, episode.owner), episode.id))
        for used in state.memories_used:
            for owner in (state.caller.user, TENANT_OWNER):
                targets.append((Partition(state.caller.tenant, owner), used.id))
        for where, memory_id in targets:
            try:
                self._store.update_credit(
                    where,
                    memory_id,
                    lambda record: credit_after(
                        record.credit, episode_id=state.episode_id, reward=reward, alpha=self._settings.credit_ema_alpha, now=now
                    ),
                    now,
                    now,
                )
            except NotFound:
                continue  # the memory lives in the other partition (or was forgotten since)
            except Exception:  # credit is learning; the answer stands regardless
                logger.warning("episode %s could not credit memory %s", state.episode_id, memory_id, exc_info=True)

    def _remember_turn(self, state: AskState) -> None:
        """Append this turn to the session's working memory, on top of whatever is there now.

        The slot is re-read here, not taken from Prepare: another ask of the same session may
        have written since. A conflicting write is retried on the latest version; when every
        attempt conflicts, the turn is not kept and the answer says so, but the ask still answers.
        """
        if not state.input.session_id:
            return
        key = _turns_key(state.input.session_id)
        where = Partition(state.caller.tenant, state.caller.user)
        plan = state.plan
        turn = {
            "episode_id": state.episode_id,
            "question": state.input.question,
            "route": state.route,
            "status": state.status,
            "sql": state.sql,
            "intent": _intent_json(plan) if state.status == "answered" else None,
            "clarification": plan.clarification.model_dump(mode="json")
            if plan and plan.clarification and state.status == "needs_clarification"
            else None,
        }
        displaced: list[dict[str, Any]] = []  # turns a racing first write replaced: put them back
        for attempt in range(TURN_WRITE_ATTEMPTS):
            if attempt:
                self._sleep(random.uniform(0, TURN_WRITE_BACKOFF_SECONDS * 2**attempt))
            try:
                current = self._store.get_slot(where, MemoryKind.WORKING, key, self._clock.now())
            except ValidationFailed as exc:  # undecodable: it cannot be appended to
                logger.warning("episode %s could not read working memory %s: %s", state.episode_id, key, exc.message)
                state.note(f"this turn was not kept in the session's working memory: {exc.message}")
                return
            latest = SESSION_TURNS.read(current.value) if current is not None else []
            if not displaced and any(_turn_id(kept) == _turn_id(turn) for kept in latest):
                return  # a retried Record: this turn is in the session already
            turns = self._fit(_merge_turns(latest, displaced, turn))
            value = {"turns": turns}
            content = f"{len(turns)} recent turns of session {state.input.session_id}"
            try:
                if current is None:
                    result = self._memories.remember(
                        self._who(state),
                        NewMemory(
                            kind=MemoryKind.WORKING,
                            key=key,
                            content=content,
                            value=value,
                            session_id=state.input.session_id,
                            trigger=Trigger.INTERACTION,
                            episode_id=state.episode_id,
                        ),
                        system=True,  # a session's turns are the ask flow's: /memories refuses them to callers
                    )
                    if result.superseded is not None and not result.superseded.is_expired(self._clock.now()):
                        # Another ask created the slot between our read and our write, and ours
                        # replaced it: carry its turns into the next attempt.
                        kept = {_turn_id(t) for t in [*turns, *displaced]}
                        lost = [t for t in SESSION_TURNS.read(result.superseded.value) if _turn_id(t) not in kept]
                        if lost:
                            displaced.extend(lost)
                            continue
                else:
                    self._memories.revise(
                        self._who(state),
                        current.id,
                        MemoryEdit(expected_version=current.version, content=content, value=value),
                        system=True,
                    )
                return
            except VersionConflict as exc:
                logger.info("episode %s: working memory %s moved on (attempt %d): %s", state.episode_id, key, attempt + 1, exc.message)
                continue
            except NotFound:  # forgotten between our read and our write: start the slot afresh
                continue
            except MemtoolError as exc:  # refused (or unreadable on write): the answer stands regardless
                logger.warning("episode %s could not keep its turn in %s: %s", state.episode_id, key, exc.message)
                state.note(f"this turn was not kept in the session's working memory: {exc.message}")
                return
            except Exception as exc:  # e.g. a transaction cancelled by a concurrent one
                # The turn is a convenience for the next question; the answer is what was asked for.
                logger.warning(
                    "episode %s: writing working memory %s failed (attempt %d)", state.episode_id, key, attempt + 1, exc_info=True
                )
                if attempt + 1 == TURN_WRITE_ATTEMPTS:
                    state.note(f"this turn was not kept in the session's working memory: the store failed ({type(exc).__name__})")
                    return
                continue
        logger.warning(
            "episode %s gave up keeping its turn in %s after %d conflicting attempts", state.episode_id, key, TURN_WRITE_ATTEMPTS
        )
        state.note("this turn was not kept in the session's working memory: other asks in this session kept writing it at the same time")

    def _fit(self, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The newest turns that fit the size limit of one memory value (the oldest go first)."""
        limit = self._settings.max_content_bytes
        kept = list(turns)
        while len(kept) > 1 and _size({"turns": kept}) > limit:
            kept.pop(0)
        if kept and _size({"turns": kept}) > limit:  # one turn alone is too big: drop its SQL
            kept = [{**kept[0], "sql": None}]
        return kept


def _merge_turns(latest: list[dict[str, Any]], displaced: list[dict[str, Any]], turn: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored turns, the ones a racing write displaced, then this one; each once, newest kept."""
    seen = {_turn_id(turn)}
    merged: list[dict[str, Any]] = []
    for item in [*latest, *displaced]:
        if _turn_id(item) in seen:
            continue
        seen.add(_turn_id(item))
        merged.append(item)
    return [*merged, turn][-WORKING_TURNS_KEPT:]


def _turn_id(turn: dict[str, Any]) -> str:
    """A turn is its episode; a turn without one (written by hand) is its own content."""
    episode = turn.get("episode_id")
    return str(episode) if episode else json.dumps(turn, sort_keys=True, ensure_ascii=False, default=str)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _memories(n: int) -> str:
    return f"{n} memory" if n == 1 else f"{n} memories"


def _turns_key(session_id: str) -> str:
    return SESSION_TURNS.key_for(session_id)


def _as_span(row: Sequence[Any] | None) -> tuple[date, date] | None:
    """(first, last) days from a MIN/MAX row of dates, timestamps or their ISO strings; None when empty."""
    if not row or row[0] is None or row[1] is None:
        return None
    try:
        first, last = (date.fromisoformat(str(v)[:10]) for v in row[:2])
    except ValueError:
        return None
    return first, last


def _outcome(state: AskState) -> str:
    if getattr(state, "error", None) or state.guard_status == "blocked":
        return "failed"
    if state.data_status == "no_data":
        return "no_data"
    if (
        state.route == "deep_analysis_workflow"
        and state.result is not None
        and (state.analysis is None or state.analysis.status != "complete")
    ):
        return "partial"  # the data is there; an analysis it asked for did not run (the notes say which)
    if state.plan_status == "needs_clarification":
        return "needs_clarification"
    if state.plan_status == "remembered":
        return "remembered"
    return "answered"


def _chart_state(chart: Any) -> dict[str, Any]:
    return {
        "type": chart.chart_type,
        "confidence": chart.confidence,
        "checkpoint_status": chart.checkpoint_status,
        "candidates": [{"type": c.chart_type, "confidence": c.confidence, "reason": c.reason} for c in chart.candidates],
        "option": chart.option,
        "partial_buckets": list(chart.partial_buckets),
    }


def _crash_reason(raw: Any) -> str:
    if isinstance(raw, dict):
        from memtool.flows.ask_state import step_error_parts

        kind, message = step_error_parts(str(raw.get("Error") or ""), str(raw.get("Cause") or ""))
        return f"{kind}: {message}"[:300] if message else kind or "an internal error"
    return "an internal error"


def _is_zh(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None


def _shape_hints(plan: Plan | None, question: str) -> Any:
    from memtool.viz.shape import ShapeHints

    return ShapeHints.from_intent(plan.intent if plan is not None else None, question)


def _intent_json(plan: Plan | None) -> dict[str, Any] | None:
    """The plan's intent as JSON (how episodes, turns and diagnoses keep it)."""
    return plan.intent.model_dump(mode="json") if plan is not None and plan.intent is not None else None
