"""Asking a question: the application service behind POST /ask.

It builds AskFlow's first state from the caller and the request, runs the flow (Step Functions in
AWS, the same ASL on moto locally) and turns the final state into the answer. A failure reaches
the caller as ``{"error": <stable code>, "message": ..., "step": ...}``; the Step Functions cause
(with the Lambda's stack trace) goes to the log, never into the answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.clock import Clock
from memtool.flows.ask.state import AnalysisReport, AskInput, AskState, Caller, QueryRows, answer_error, classify_failure
from memtool.flows.runner import FlowRunner
from memtool.identity import Identity
from memtool.memory.records import new_memory_id

ASK_FLOW = "AskFlow"

logger = logging.getLogger("memtool.flows")


@dataclass(frozen=True)
class AskCommand:
    """A question to answer: the API's POST /ask body and the MCP ask tool both become one."""

    question: str
    session_id: str | None = None
    route: str | None = None  # a forced route instead of the classifier's
    conditions: dict[str, str] = field(default_factory=dict)  # this-time unit/chart, only the ones given


class AskError(BaseModel):
    """Why an ask failed, in words a caller can act on; never a stack trace."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    error: str = Field(description="a stable code")
    message: str = Field(description="what went wrong, for a person")
    step: str | None = Field(None, description="the AskFlow step that failed, when one did")


class AskAnswer(BaseModel):
    # Every field is in every answer, defaults included: the OpenAPI document says so.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    episode_id: str
    route: str | None
    status: Literal["answered", "partial", "needs_clarification", "remembered", "no_data", "failed"] = Field(
        description="partial: the data was answered but an analysis the question asked for could not run (notes say which and why); "
        "no_data: the period asked about lies outside the data (the notes give the data's first and last day)"
    )
    question: str
    sql: str | None = None
    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    chart: dict[str, Any] | None = None
    answer: str | None = None
    citations: list[dict[str, Any]] = Field(default_factory=list)
    memories_used: list[dict[str, Any]] = Field(
        default_factory=list, description="the memories that shaped this answer (feedback credits these)"
    )
    memories_recalled: list[dict[str, Any]] = Field(
        default_factory=list, description="every memory recall returned for the question, used or not"
    )
    carried_over: list[str] = Field(default_factory=list, description="what a follow-up took from the previous question")
    recall_coverage: dict[str, Any] | None = None
    clarification: dict[str, Any] | None = None
    notes: list[str] = Field(default_factory=list)
    error: AskError | None = None
    repaired: dict[str, Any] | None = Field(
        None,
        description="{root_cause, cause, memory_id}: the SQL failed, a diagnosis verified a repair by running it, and this answer ran it",
    )
    diagnosis: dict[str, Any] | None = Field(
        None, description="the failed answer's diagnosis: the failure, every hypothesis with its test result"
    )
    cache: dict[str, Any] | None = Field(
        None,
        description="the SQL cache: {hit, key, similarity, bound_slots, reason, entry}; "
        "a hit skipped recall and planning, and its SQL ran again",
    )
    analysis: dict[str, Any] | None = Field(
        None,
        description="deep analyses: {status, tool, result, summary, "
        "analyses: [{kind, tool, runner, success, result, summary, error}], skipped, queries, chart_png}",
    )
    timings: dict[str, float] = Field(default_factory=dict)


class AskService:
    def __init__(self, runner: FlowRunner, clock: Clock, *, response_rows: int) -> None:
        self._runner = runner
        self._clock = clock
        self._response_rows = response_rows

    def first_state(self, who: Identity, command: AskCommand) -> dict[str, Any]:
        state = AskState(
            episode_id=new_memory_id("ep"),
            caller=Caller(tenant=who.tenant, user=who.user, roles=sorted(who.roles)),
            input=AskInput(
                question=command.question,
                session_id=command.session_id,
                route=command.route,
                conditions=dict(command.conditions),
            ),
            started_at=self._clock.now().isoformat(),
        )
        return state.model_dump(mode="json")

    def ask(self, who: Identity, command: AskCommand) -> AskAnswer:
        first = self.first_state(who, command)
        execution = self._runner.run(ASK_FLOW, first)
        if execution.status != "SUCCEEDED" or execution.output is None:
            error = classify_failure(execution.error, execution.cause, step=None, status=execution.status)
            logger.warning(
                "AskFlow episode %s ended %s at %s: error=%s cause=%s",
                first["episode_id"],
                execution.status,
                error.step,
                execution.error,
                _short(execution.cause),
            )
            return AskAnswer(
                episode_id=first["episode_id"],
                route=None,
                status="failed",
                question=command.question,
                error=AskError.model_validate(error.model_dump()),
                timings={"total": round(execution.elapsed_ms, 3)},
            )
        return self.answer(AskState.model_validate(execution.output), execution.elapsed_ms)

    def answer(self, state: AskState, elapsed_ms: float) -> AskAnswer:
        plan = state.plan
        result = state.result or QueryRows()
        rows = list(result.rows)
        steps = sum(state.timings.values())
        timings = {**state.timings, "flow_overhead": round(max(0.0, elapsed_ms - steps), 3), "total": round(elapsed_ms, 3)}
        error = answer_error(state)
        raw = getattr(state, "error", None)
        if error is not None and raw is not None:
            logger.warning("AskFlow episode %s failed at %s: %s", state.episode_id, error.step, _short(str(raw)))
        guard_note = [f"guardrails: {state.guard.reason}"] if state.guard_status == "blocked" and state.guard else []
        return AskAnswer(
            episode_id=state.episode_id,
            route=state.route,
            status=state.status or "failed",  # type: ignore[arg-type]
            question=state.input.question,
            sql=state.sql,
            columns=list(result.columns),
            rows=rows[: self._response_rows],
            row_count=result.row_count,
            truncated=result.truncated or len(rows) > self._response_rows,
            chart=state.chart,
            answer=(plan.answer if plan else None) or (state.analysis.summary if state.analysis else None),
            citations=[c.model_dump(mode="json") for c in plan.citations] if plan else [],
            memories_used=[m.model_dump() for m in state.memories_used],
            memories_recalled=[m.model_dump(exclude={"content"}) for m in state.memories_recalled],
            carried_over=list(plan.carried_over) if plan else [],
            recall_coverage=state.recall_coverage,
            clarification=plan.clarification.model_dump(mode="json") if plan and plan.clarification else None,
            notes=list(dict.fromkeys([*state.notes, *(plan.notes if plan else []), *guard_note])),  # once each
            error=AskError.model_validate(error.model_dump()) if error is not None else None,
            repaired=state.repaired,
            diagnosis=state.diagnosis.model_dump(mode="json", exclude={"schema_facts"})
            if state.diagnosis is not None and state.status == "failed"
            else None,
            cache=state.cache.model_dump(mode="json") if state.cache is not None else None,
            analysis=_public_analysis(state.analysis),
            timings=timings,
        )


def _public_analysis(analysis: AnalysisReport | None) -> dict[str, Any] | None:
    """The analysis as the caller sees it (PlanAnalyses' interim record is not one)."""
    if analysis is None or analysis.status == "planned":
        return None
    return analysis.model_dump(mode="json")


def _short(text: str | None, limit: int = 2000) -> str | None:
    return None if text is None else text[:limit]
