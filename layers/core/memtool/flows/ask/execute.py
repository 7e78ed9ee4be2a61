"""AskFlow's Guard, Execute and Diagnose: the plan's SQL checked, run on the warehouse, and repaired in the flow when it fails."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import date
from typing import Any

from memtool.flows.ask.base import StepsBase, intent_json
from memtool.flows.ask.state import STATE_ROW_CAP, AskState, GuardVerdict, MemoryUse, QueryRows
from memtool.memory.records import MemoryKind
from memtool.sql.errors import WarehouseUnavailable
from memtool.sql.errors import typed as typed_warehouse_error
from memtool.sql.warehouse import Warehouse, WarehouseError

# The data's first and last day per (tenant, model version, metric), for telling a period outside the
# data from an empty answer inside it; read once and kept like the live schema.
DATA_SPAN_CACHE = 256
DATA_SPAN_SECONDS = 600.0

logger = logging.getLogger("memtool.flows")


class GuardAndExecuteSteps(StepsBase):
    """Guard, Execute and Diagnose: what runs on the warehouse, and its repair."""

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
        scenario = {"question": state.input.question, "asked": subject.question, "intent": intent_json(plan), "route": state.route}
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


def _as_span(row: Sequence[Any] | None) -> tuple[date, date] | None:
    """(first, last) days from a MIN/MAX row of dates, timestamps or their ISO strings; None when empty."""
    if not row or row[0] is None or row[1] is None:
        return None
    try:
        first, last = (date.fromisoformat(str(v)[:10]) for v in row[:2])
    except ValueError:
        return None
    return first, last
