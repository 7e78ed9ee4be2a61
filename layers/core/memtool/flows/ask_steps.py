"""AskFlow's steps, one method each; functions/flow_steps dispatches to them by name.

Each step takes the flow state and returns the next one. A step that cannot go on raises, and
the state machine's Catch decides what follows (Execute's failures go to Diagnose).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from memtool.api.identity import Identity
from memtool.api.memories import CreateMemoryBody, ProvenanceIn
from memtool.flows.ask_state import STATE_ROW_CAP, AskState, MemoryUse
from memtool.flows.memory_write import MemoryService
from memtool.memory.records import MemoryKind, SourceRef, Trigger
from memtool.memory.store import MemoryStore, Partition
from memtool.retrieval.recall import Recall, RecallRequest
from memtool.runtime.clock import Clock
from memtool.runtime.settings import Settings

WORKING_TURNS_KEPT = 10


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
        recall: Recall,
        planner: Any,  # planning port: plan(question, route=, context=) -> Plan
        warehouse_factory: Callable[[], Any],
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._memories = memories
        self._store = store
        self._recall = recall
        self._planner = planner
        self._warehouse_factory = warehouse_factory

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

        state.route = state.input.route or classify_route(state.input.question)
        where = Partition(state.caller.tenant, state.caller.user)
        now = self._clock.now()
        if state.input.session_id:
            turns = self._store.get_slot(where, MemoryKind.WORKING, _turns_key(state.input.session_id), now)
            state.working = list((turns.value or {}).get("turns", [])) if turns else []
        for key, name in (("display.currency_unit", "unit"), ("display.chart", "chart")):
            slot = self._store.get_slot(where, MemoryKind.PROFILE, key, now)
            if slot is not None:
                value = slot.value.get(name) if isinstance(slot.value, dict) else None
                state.profile[name] = value or slot.content
        return state

    def step_recall(self, state: AskState) -> AskState:
        result = self._recall.recall(
            RecallRequest(tenant=state.caller.tenant, user=state.caller.user, text=state.input.question, route=state.route or "nl2sql_query")
        )
        state.memories_used = [
            MemoryUse(id=m.record.id, version=m.record.version, kind=m.record.kind.value, score=round(m.score, 6), content=m.record.content)
            for m in result.memories
        ]
        state.recall_coverage = result.coverage.as_dict()
        state.recalled = [m.record.model_dump(mode="json") for m in result.memories]
        return state

    def step_plan(self, state: AskState) -> AskState:
        from memtool.planning.context import plan_context

        context = plan_context(state)
        plan = self._planner.plan(state.input.question, route=state.route, context=context)
        state.plan = plan.model_dump(mode="json")
        state.plan_status = "needs_clarification" if plan.status == "needs_clarification" else "ready"
        state.sql = plan.sql
        return state

    def step_guard(self, state: AskState) -> AskState:
        from memtool.sql.guardrails import GuardPolicy, check_sql

        policy = GuardPolicy.for_demo_warehouse(
            max_rows=self._settings.max_rows, timeout_seconds=self._settings.statement_timeout_seconds
        )
        verdict = check_sql(state.sql or "", policy)
        state.guard = {"allowed": verdict.allowed, "reason": verdict.reason, "code": verdict.code, "tables": verdict.tables}
        state.guard_status = "passed" if verdict.allowed else "blocked"
        if verdict.allowed:
            state.sql = verdict.sql
        return state

    def step_execute(self, state: AskState) -> AskState:
        if state.guard_status != "passed":  # defence in depth: never run unguarded SQL
            raise PermissionError("SQL reached Execute without passing the guardrails")
        result = self._warehouse_factory().run(
            state.sql or "", max_rows=self._settings.max_rows, timeout_seconds=self._settings.statement_timeout_seconds
        )
        state.result = {
            "columns": result.columns,
            "rows": result.rows[:STATE_ROW_CAP],
            "row_count": result.row_count,
            "truncated": result.truncated or result.row_count > STATE_ROW_CAP,
            "elapsed_ms": result.elapsed_ms,
        }
        return state

    def step_diagnose(self, state: AskState) -> AskState:
        # The learning issue fills this in: classify the error, test a repair, keep the lesson.
        state.repair_attempts += 1
        state.repair_status = "not_repaired"
        return state

    def step_analyze(self, state: AskState) -> AskState:
        # The analysis issue fills this in (sandbox for small results, ML registry for large ones).
        rows = (state.result or {}).get("row_count", 0)
        state.analysis = {"status": "not_analyzed", "reason": "analysis arrives with the analysis issue", "rows": rows}
        return state

    def step_visualize(self, state: AskState) -> AskState:
        from memtool.viz.charts import recommend_chart

        result = state.result or {"columns": [], "rows": []}
        chart = recommend_chart(
            result["columns"],
            result["rows"],
            hints=_shape_hints(state.plan, state.input.question),
            preferred=state.input.conditions.get("chart") or state.profile.get("chart"),
        )
        state.chart = {
            "type": chart.chart_type,
            "confidence": chart.confidence,
            "checkpoint_status": chart.checkpoint_status,
            "candidates": [{"type": c.chart_type, "confidence": c.confidence, "reason": c.reason} for c in chart.candidates],
            "option": chart.option,
        }
        return state

    def step_record(self, state: AskState) -> AskState:
        state.status = _outcome(state)
        self._remember_episode(state)
        self._remember_turn(state)
        return state

    def step_recordfailure(self, state: AskState) -> AskState:
        state.status = "failed"
        self._remember_episode(state)
        self._remember_turn(state)
        return state

    # ---- memory formation -----------------------------------------------------------------

    def _who(self, state: AskState) -> Identity:
        return Identity(state.caller.tenant, state.caller.user, frozenset(state.caller.roles))

    def _remember_episode(self, state: AskState) -> None:
        error = getattr(state, "error", None)
        value = {
            "route": state.route,
            "sql": state.sql,
            "outcome": state.status,
            "row_count": (state.result or {}).get("row_count"),
            "error": error,
            "plan_status": state.plan_status,
            "guard": state.guard,
            "chart": (state.chart or {}).get("type"),
            "memories_used": [{"id": m.id, "version": m.version, "kind": m.kind} for m in state.memories_used],
            "trajectory": [{"step": step, "ms": ms} for step, ms in state.timings.items()],
        }
        self._memories.remember(
            self._who(state),
            CreateMemoryBody(
                kind=MemoryKind.EPISODIC,
                content=state.input.question,
                source_text=state.input.question,
                value=value,
                session_id=state.input.session_id,
                provenance=ProvenanceIn(
                    trigger=Trigger.INTERACTION,
                    episode_id=state.episode_id,
                    sources=[SourceRef(id=m.id, version=m.version) for m in state.memories_used],
                ),
            ),
        )

    def _remember_turn(self, state: AskState) -> None:
        if not state.input.session_id:
            return
        turn = {"episode_id": state.episode_id, "question": state.input.question, "route": state.route, "status": state.status, "sql": state.sql}
        turns = [*state.working, turn][-WORKING_TURNS_KEPT:]
        self._memories.remember(
            self._who(state),
            CreateMemoryBody(
                kind=MemoryKind.WORKING,
                key=_turns_key(state.input.session_id),
                content=f"{len(turns)} recent turns of session {state.input.session_id}",
                value={"turns": turns},
                session_id=state.input.session_id,
                provenance=ProvenanceIn(trigger=Trigger.INTERACTION, episode_id=state.episode_id),
            ),
        )


def _turns_key(session_id: str) -> str:
    return f"session.{session_id}.turns"


def _outcome(state: AskState) -> str:
    if getattr(state, "error", None) or state.guard_status == "blocked":
        return "failed"
    if state.plan_status == "needs_clarification":
        return "needs_clarification"
    return "answered"


def _shape_hints(plan: dict[str, Any] | None, question: str):
    from memtool.semantic.intent import Intent
    from memtool.viz.shape import ShapeHints

    intent = (plan or {}).get("intent")
    return ShapeHints.from_intent(Intent.model_validate(intent) if intent else None, question)
