"""The state AskFlow carries from step to step (JSON in Step Functions, this model in Python).

Fields the ASL's Choice states read: ``route`` (Prepare), ``plan_status`` (Plan),
``guard_status`` (Guard), ``repair_status`` and ``repair_attempts`` (Diagnose). A Catch puts the
failure under ``error`` ({"Error", "Cause"}, the Cause being the Lambda's error JSON with its
stack trace) and the XFailed Pass states name the step under ``failed_step``.

That raw error is for operators and Diagnose. What a caller sees is an ``AskError``: a stable
code, a message they can act on and the step that failed, never a trace.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memtool.diagnosis.model import DiagnosisReport
from memtool.planning.context import PlanContext, plan_context
from memtool.planning.plan import Plan
from memtool.sql.errors import CODE_OF_ERROR_TYPE

# Step Functions caps a state at 256 KB: rows travel capped.
STATE_ROW_CAP = 500


class Caller(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str
    user: str
    roles: list[str] = Field(default_factory=list)


class AskInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str
    session_id: str | None = None
    route: str | None = None  # forced route
    conditions: dict[str, Any] = Field(default_factory=dict)


class MemoryUse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: int
    kind: str
    score: float
    content: str = ""


class QueryRows(BaseModel):
    """What Execute ran: the rows travel capped at STATE_ROW_CAP (``row_count`` is the full count)."""

    model_config = ConfigDict(extra="forbid")

    columns: list[str] = Field(default_factory=list)
    rows: list[list[Any]] = Field(default_factory=list)
    row_count: int = 0
    truncated: bool = False
    elapsed_ms: float | None = None

    def has_data(self) -> bool:
        """Rows, and not only NULLs."""
        return any(cell is not None for row in self.rows for cell in row)


class GuardVerdict(BaseModel):
    """The guardrails' verdict on the SQL (Guard); ``code`` names why a blocked one was blocked."""

    model_config = ConfigDict(extra="forbid")

    allowed: bool
    reason: str | None = None
    code: str | None = None
    tables: list[str] = Field(default_factory=list)


class CacheReport(BaseModel):
    """The SQL cache's answer for this question, as the caller sees it under ``cache``."""

    model_config = ConfigDict(extra="allow")  # "stored": the entry CacheStore kept, only when it kept one

    hit: bool
    key: str | None = None
    similarity: float | None = None
    bound_slots: list[Any] = Field(default_factory=list)
    reason: str | None = None
    entry: str | None = None  # "memory:<id>@v<n>" of the entry a hit used


class AnalysisReport(BaseModel):
    """The deep-analysis route's analyses: PlanAnalyses leaves a ``planned`` one (what it skipped,
    the drill-down queries it ran), Summarize the result the caller sees."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["planned", "complete", "partial", "failed"]
    tool: str | None = None  # the first analysis that ran
    result: Any = None  # its result
    summary: str | None = None  # every analysis's sentence, in the question's language
    analyses: list[dict[str, Any]] = Field(default_factory=list)  # {kind, tool, runner, success, result, summary, error, ...}
    skipped: list[dict[str, Any]] = Field(default_factory=list)  # {kind, reason}: analyses that could not be prepared
    queries: list[str] = Field(default_factory=list)  # the drill-down SQL the tables came from
    chart_png: dict[str, Any] | None = None  # the sandbox's chart, when one ran

    def first_success(self) -> dict[str, Any] | None:
        return next((a for a in self.analyses if a.get("success")), None)


class AskState(BaseModel):
    model_config = ConfigDict(extra="allow")  # keeps what the ASL adds (error, failed_step)

    episode_id: str
    caller: Caller
    input: AskInput
    started_at: str
    route: str | None = None
    working: list[dict[str, Any]] = Field(default_factory=list)
    profile: dict[str, Any] = Field(default_factory=dict)  # unit, chart, usual_metrics
    session_summary: dict[str, Any] | None = None  # the session's turns folded out of its window (memory.sessions)
    profile_sources: dict[str, str] = Field(default_factory=dict)  # unit/chart -> "memory:<id>@v<n>"
    memories_used: list[MemoryUse] = Field(default_factory=list)  # applied: the memories that shaped the plan
    memories_recalled: list[MemoryUse] = Field(default_factory=list)  # everything recall returned
    recalled: list[dict[str, Any]] = Field(default_factory=list)  # the records, for the planner
    fewshots: list[dict[str, Any]] = Field(default_factory=list)  # approved examples found for the question
    recall_coverage: dict[str, Any] | None = None
    plan_status: str | None = None
    plan: Plan | None = None
    sql: str | None = None
    guard_status: str | None = None
    guard: GuardVerdict | None = None
    result: QueryRows | None = None
    repair_status: str | None = None
    repair_attempts: int = 0
    lessons: list[dict[str, Any]] = Field(default_factory=list)  # verified lessons applied: {id, version, repairs}
    failure: dict[str, Any] | None = None  # the classified failure Diagnose saw: {class, origin, message, code}
    diagnosis: DiagnosisReport | None = None  # the in-flow diagnosis (hypotheses and their tests), without its schema facts
    repaired: dict[str, Any] | None = None  # {root_cause, cause, memory_id}: the verified repair this answer ran
    cache: CacheReport | None = None
    cache_status: str | None = None  # "hit" sends CacheChoice past Recall and Plan
    cache_entry: dict[str, Any] | None = None  # {id, owner} of the entry a hit used
    planned_intent: dict[str, Any] | None = None  # the planner's intent before lessons (the cache key's)
    planned_sql: str | None = None  # the SQL before the guard rewrote it (what the cache keeps)
    analysis_tasks: list[dict[str, Any]] = Field(default_factory=list)  # PlanAnalyses: {kind, runner, tool, arguments, rows, why}
    analysis_count: int = 0  # how many tasks the Map runs (AnalysesChoice reads it)
    analysis_runs: list[dict[str, Any]] | None = None  # the Map's tool results, in the tasks' order
    analysis: AnalysisReport | None = None
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)  # the trajectory's tool calls: inputs and a summary
    chart: dict[str, Any] | None = None
    status: str | None = None
    data_status: str | None = None  # "no_data": nothing came back because the period lies outside the data
    notes: list[str] = Field(default_factory=list)  # what the steps want the caller to know
    timings: dict[str, float] = Field(default_factory=dict)

    @field_validator("started_at")
    @classmethod
    def _started_in_utc(cls, value: str) -> str:
        """An ISO 8601 time with its offset. AskFlow's Defaults state fills a missing one from
        ``$$.Execution.StartTime``: AWS writes it with a ``Z``, moto's engine as a naive UTC time;
        both are read as UTC. A value that is no time is kept as given (the steps that read it
        then use their whole budget)."""
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return value
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).isoformat()

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def plan_context(self) -> PlanContext:
        """What the planner knows besides the question, from what the steps before Plan gathered."""
        return plan_context(
            tenant=self.caller.tenant,
            user=self.caller.user,
            recalled=self.recalled,
            profile=self.profile,
            profile_sources=self.profile_sources,
            session_turns=self.working,
            session_summary=self.session_summary,
            examples=self.fewshots,
            conditions=self.input.conditions,
        )


class AskError(BaseModel):
    """Why an ask failed, as the caller sees it."""

    model_config = ConfigDict(extra="forbid")

    error: str  # stable code: warehouse_unavailable, warehouse_error, guardrail_blocked, ...
    message: str
    step: str | None = None  # the AskFlow state that failed

    @classmethod
    def from_public(cls, value: Any) -> AskError | None:
        """An error that already has the public shape (RecordFailure leaves one behind)."""
        if isinstance(value, dict) and set(value) == {"error", "message", "step"}:
            try:
                return cls.model_validate(value)
            except ValueError:
                return None
        return None


# The step the Execute Catch reports from: it goes straight to Diagnose, with no XFailed state.
_EXECUTE = "Execute"

# The public error of a warehouse failure, by its Lambda errorType (memtool.sql.errors names every
# case in the type, for diagnosis): unavailable and timeout are their own, the rest warehouse_error.
_PUBLIC_WAREHOUSE_CODES = {"unavailable": "warehouse_unavailable", "timeout": "warehouse_timeout"}
_WAREHOUSE_CODES = {error_type: _PUBLIC_WAREHOUSE_CODES.get(code, "warehouse_error") for error_type, code in CODE_OF_ERROR_TYPE.items()}
_TIMEOUTS = {"States.Timeout", "memtool.Timeout"}
# Failures of the machinery rather than of a step's work: a caller can only retry later.
_INTERNAL_PREFIXES = ("States.", "Lambda.")
_INTERNAL = {"UnknownRoute", "UnknownStep", "PermissionError", "KeyError", "AttributeError", "TypeError", "AssertionError"}
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.\-~@]+){2,}[\\/]?")
# The state store failing under a step (memory.sqlite_tx: a full disk, a file that cannot be
# written, a damaged file), by its error's name; a bare sqlite3 or OS error by its words. The
# caller is told what is wrong with the store and who can fix it, never "step failed".
_STORAGE = {
    "InsufficientStorage": (
        "insufficient_storage",
        "the disk holding memtool's state is full, so {where} could not store what it needed; free some space and ask again",
    ),
    "StoreReadOnly": (
        "store_read_only",
        "memtool's state cannot be written, so {where} could not store what it needed; the operator should make the "
        "state folder and its files writable",
    ),
    "StoreCorrupt": (
        "store_corrupt",
        "memtool's state database is damaged, so {where} could not complete; the operator should restore it from a copy, "
        "or move it away to start with an empty store",
    ),
}
_RAW_STORAGE_ERRORS = {"OperationalError", "DatabaseError", "OSError"}  # sqlite3's and the OS's, by name
_STORAGE_WORDS = (
    (re.compile(r"database or disk is full|no space left on device|disk quota exceeded", re.IGNORECASE), "InsufficientStorage"),
    (re.compile(r"attempt to write a readonly database|read-only file system", re.IGNORECASE), "StoreReadOnly"),
    (re.compile(r"database disk image is malformed|file is not a database", re.IGNORECASE), "StoreCorrupt"),
)


def step_error_parts(raw_error: str | None, raw_cause: str | None) -> tuple[str, str]:
    """(errorType, errorMessage) from a Step Functions Error and Cause (the Lambda error JSON)."""
    error_type, message = raw_error or "", ""
    if raw_cause:
        try:
            cause = json.loads(raw_cause)
        except ValueError:
            cause = None
        if isinstance(cause, dict):
            error_type = str(cause.get("errorType") or error_type)
            message = str(cause.get("errorMessage") or "")
    return error_type, message


def classify_failure(raw_error: str | None, raw_cause: str | None, *, step: str | None, status: str | None = None) -> AskError:
    """The public error for a raw Step Functions failure: a stable code, no trace, no paths."""
    public = AskError.from_public(_loads(raw_cause))
    if public is not None:
        return public
    error_type, detail = step_error_parts(raw_error, raw_cause)
    where = f"the {step} step" if step else "the flow"
    if status == "TIMED_OUT" or error_type in _TIMEOUTS or (raw_error or "") in _TIMEOUTS:
        message = "the question took too long to answer; try again, or ask for less data (a shorter period, fewer groups)"
        return AskError(error="flow_timeout", message=message, step=step)
    code = _WAREHOUSE_CODES.get(error_type)
    if code == "warehouse_unavailable":
        return AskError(error=code, message="the warehouse could not be reached; try again in a few minutes", step=step or _EXECUTE)
    if code == "warehouse_timeout":
        return AskError(
            error=code,
            message="the query ran longer than the statement timeout; narrow the question (a shorter period, fewer groups) and ask again",
            step=step or _EXECUTE,
        )
    if code == "warehouse_error":
        said = _clean(detail)
        message = (
            "the warehouse could not run the SQL written for this question"
            + (f" ({said})" if said else "")
            + "; rephrase the question, or report it with the episode id"
        )
        return AskError(error=code, message=message, step=step or _EXECUTE)
    storage = _storage_failure(error_type, detail)
    if storage is not None:
        code, message = _STORAGE[storage]
        return AskError(error=code, message=message.format(where=where), step=step)
    if error_type == "ValidationFailed" and _clean(detail):
        return AskError(error="validation_error", message=_clean(detail), step=step)
    if error_type == "ModelMissing" and _clean(detail, limit=600):
        # the tenant has no semantic model: the message says how to draft, curate and store one
        return AskError(error="model_missing", message=_clean(detail, limit=600), step=step)
    if error_type == "WarehouseMissing" and _clean(detail, limit=600):
        # a model without a warehouse of its own: the message names what to configure
        return AskError(error="warehouse_missing", message=_clean(detail, limit=600), step=step)
    if error_type in _INTERNAL or error_type.startswith(_INTERNAL_PREFIXES) or not error_type:
        return AskError(
            error="internal_error",
            message=f"{where} could not run because of an internal problem; try again later, or report it with the episode id",
            step=step,
        )
    return AskError(error="step_failed", message=f"{where} failed; try again, or rephrase the question", step=step)


def _storage_failure(error_type: str, detail: str) -> str | None:
    """The name of the store failure a step's error stands for (``_STORAGE``'s keys), or None."""
    if error_type in _STORAGE:
        return error_type
    if error_type in _RAW_STORAGE_ERRORS:
        for words, name in _STORAGE_WORDS:
            if words.search(detail):
                return name
    return None


def answer_error(state: AskState) -> AskError | None:
    """The public error of a finished state: the caught failure, or the guardrails' refusal."""
    raw = getattr(state, "error", None)
    step = getattr(state, "failed_step", None)
    step = step if isinstance(step, str) else None
    if raw is not None:
        public = AskError.from_public(raw)
        if public is not None:
            return public
        if isinstance(raw, dict):
            return classify_failure(_text(raw.get("Error")), _text(raw.get("Cause")), step=step or _EXECUTE)
        return AskError(error="step_failed", message="the flow failed; try again, or rephrase the question", step=step)
    if state.guard_status == "blocked":
        reason = _clean(state.guard.reason or "") if state.guard is not None else ""
        message = (
            "the SQL written for this question was blocked by the guardrails"
            + (f": {reason}" if reason else "")
            + "; rephrase the question"
        )
        return AskError(error="guardrail_blocked", message=message, step="Guard")
    return None


def _clean(text: str, limit: int = 300) -> str:
    """One line of an error message, without file paths, short enough to show."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if line.startswith(("Traceback", 'File "')):
        return ""
    line = _PATH.sub("<path>", line)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _text(value: Any) -> str | None:
    return None if value is None else value if isinstance(value, str) else json.dumps(value, default=str)


def _loads(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
