"""The diagnosis vocabulary: failures, repairs, hypotheses, test results and the report."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.diagnosis.requests import Expected

FailureClass = Literal[
    # execution errors, from the warehouse's error code
    "undefined_column",
    "undefined_table",
    "syntax_error",
    "type_mismatch",
    "division_by_zero",
    "timeout",
    "permission",
    "undefined_function",
    "unavailable",
    "database_error",
    # the guardrails refused the SQL
    "guard_rejection",
    # logical failures: the SQL ran
    "empty_result",
    "reported_wrong",
    "expected_value",
]
FailureOrigin = Literal["execution", "guard", "logical"]

RepairKind = Literal[
    "rename_table",  # table -> to
    "rename_column",  # table.column -> to
    "time_column",  # metric's period taken from column
    "filter_value",  # dimension's value -> to
    "include_rows",  # rows: test | unpaid lines count too
    "metric_definition",  # metric -> to (another metric's definition)
    "window_edges",  # edge: end_inclusive | start_exclusive
    "refund_period",  # metric's refunds counted by refund date (to: refund_date)
    "join_type",  # join: left (dimension tables)
    "replace_sql",  # a whole repaired statement (the Bedrock diagnoser)
]
# Repairs applied to the SQL text (parsed); the others change the intent or how it compiles.
SQL_LEVEL: frozenset[str] = frozenset({"rename_table", "rename_column", "replace_sql"})

TestResult = Literal[
    "verified",  # ran, and matched what verification asks (ran / rows / the expected value)
    "refuted",  # ran, and did not match
    "failed",  # the repaired SQL failed on the warehouse
    "blocked",  # the guardrails refused the repaired SQL: never executed
    "ran",  # ran; nothing to verify against (the user said wrong without a value)
    "no_change",  # the repair leaves the SQL as it was: nothing to test
    "not_applicable",  # the repair needs what the episode lacks (an intent, a filter)
    "not_tested",  # the execution budget ran out, or a cheaper hypothesis was verified first
]


class Failure(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: FailureClass
    origin: FailureOrigin
    message: str = ""
    code: str | None = None  # the warehouse's or the guard's own code

    def public(self) -> dict[str, Any]:
        return {"class": self.kind, "origin": self.origin, "message": self.message[:500], "code": self.code}


class Repair(BaseModel):
    """One change to an episode's query; a hypothesis applies one or more."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: RepairKind
    table: str | None = None
    column: str | None = None
    metric: str | None = None
    dimension: str | None = None
    value: str | None = None
    to: str | None = None
    rows: Literal["test", "unpaid"] | None = None
    edge: Literal["end_inclusive", "start_exclusive"] | None = None
    join: Literal["left"] | None = None
    sql: str | None = None

    @property
    def sql_level(self) -> bool:
        return self.kind in SQL_LEVEL

    def describe(self) -> str:
        k = self.kind
        if k == "rename_table":
            return f"read table {self.to} instead of {self.table}"
        if k == "rename_column":
            return f"read {self.table}.{self.to} instead of {self.table}.{self.column}"
        if k == "time_column":
            return f"take the period of {self.metric} from {self.to}"
        if k == "filter_value":
            return f"filter {self.dimension} on {self.to!r} instead of {self.value!r}"
        if k == "include_rows":
            return f"count {'test' if self.rows == 'test' else 'unpaid'} order lines too"
        if k == "metric_definition":
            return f"compute {self.metric} as {self.to}"
        if k == "window_edges":
            return "count the window's last day too" if self.edge == "end_inclusive" else "leave out the window's first day"
        if k == "join_type":
            return "keep fact rows without a matching dimension row (LEFT JOIN)"
        if k == "refund_period":
            return f"count the refunds of {self.metric} in the period they were refunded"
        return "run the repaired statement"

    def target(self) -> tuple[str | None, ...]:
        """What the repair decides: a newer lesson with the same target replaces an older one."""
        k = self.kind
        if k == "rename_table":
            return (k, self.table)
        if k == "rename_column":
            return (k, self.table, self.column)
        if k in ("time_column", "metric_definition", "join_type", "refund_period"):
            return (k, self.metric)
        if k == "filter_value":
            return (k, self.dimension, self.value)
        if k == "include_rows":
            return (k, self.metric, self.rows)
        if k == "window_edges":
            return (k, self.metric, self.edge)
        return (k, self.sql)

    def signature(self) -> str:
        payload = json.dumps(self.model_dump(exclude_none=True), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


class Hypothesis(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    source: Literal["rules", "bedrock"] = "rules"
    cause: str  # schema_drift, time_column, test_lines, unpaid_lines, metric_definition, filter_value, window_edges, join_type, ...
    root_cause: str  # a sentence a user can read
    repairs: tuple[Repair, ...]
    cost: int = 1  # cheaper first
    confidence: float = Field(0.5, ge=0, le=1)


class HypothesisTest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    source: str
    cause: str
    root_cause: str
    repairs: list[dict[str, Any]]
    cost: int
    confidence: float
    result: TestResult
    detail: str | None = None
    executed: bool = False
    value: float | None = None  # the repaired answer's single value, when it has one
    row_count: int | None = None


class RepairedOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    columns: list[str]
    row_count: int
    sample: list[list[Any]]


class DiagnosisReport(BaseModel):
    """A diagnosis: every hypothesis with its test result, and the verified repair if any."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str
    failure: dict[str, Any]
    verified: bool
    cause: str | None = None
    root_cause: str | None = None
    repairs: list[dict[str, Any]] = Field(default_factory=list)
    repaired_sql: str | None = None
    repaired_output: RepairedOutput | None = None
    evidence: str | None = None
    expected: Expected | None = None
    baseline: dict[str, Any] | None = None  # the original query re-run: value, row_count (or its error)
    hypotheses: list[HypothesisTest] = Field(default_factory=list)
    executions: int = 0
    budget: int = 0
    memory_id: str | None = None
    memory_version: int | None = None
    status: Literal["active", "pending_review"] | None = None
    nothing_to_explain: bool = False  # the original already gives the expected value
    schema_facts: dict[str, dict[str, str]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
