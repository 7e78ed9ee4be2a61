"""The diagnoser: form hypotheses for a failure and test each by running its repair.

A hypothesis is only ever *verified by intervention*: its repair is applied to the episode's
intent or SQL, the result passes the same guardrails as any generated SQL (the allow-list is the
warehouse's live schema), and runs with a small row cap and a timeout. Verified means:

- an execution error or a guard refusal: the repaired query runs;
- an empty result: the repaired query returns rows;
- an expected value: the repaired query's single value is within the relative tolerance of what
  the user expected (converted to the answer's money unit), where the original was not;
- a bare "this is wrong": nothing can verify it; repairs that run are reported as ``ran``.

Hypotheses are tested cheapest first; every execution (a baseline re-run, a value probe, a test)
counts against the budget, and the report lists every hypothesis with what happened to it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from memtool.diagnosis.apply import Applied, NotApplicable, Subject, apply_repairs
from memtool.diagnosis.model import DiagnosisReport, Failure, Hypothesis, HypothesisTest, Repair, RepairedOutput, TestResult
from memtool.diagnosis.requests import UNIT_IN_YUAN, Expected
from memtool.diagnosis.rules import hypotheses_for
from memtool.semantic.compiler import IntentCompiler
from memtool.sql.warehouse import QueryResult, WarehouseError

logger = logging.getLogger("memtool.diagnosis")

SAMPLE_ROWS = 5
PROBE_ROWS = 500


class HypothesisSource(Protocol):
    """Another source of hypotheses (the Bedrock diagnoser): data in, hypotheses out."""

    def propose(
        self, failure: Failure, subject: Subject, schema_facts: dict[str, dict[str, str]], lessons: Sequence[str]
    ) -> list[Hypothesis]: ...


@dataclass(frozen=True)
class Budget:
    executions: int
    row_cap: int
    timeout_seconds: float  # one intervention test's statement timeout
    tolerance: float
    deadline_seconds: float = 20.0  # the whole diagnosis: a Lambda (and API Gateway's 29 s) must not wait longer


class _Spent(Exception):
    pass


class _Runs:
    """One diagnosis's executions on the warehouse: each counts against the budget, and none
    starts once the budget or the diagnosis's deadline is spent."""

    def __init__(self, warehouse: Any, budget: Budget, schema: Any, policy: Any) -> None:
        self._warehouse = warehouse
        self._budget = budget
        self._schema = schema
        self._policy = policy
        self.spent = 0
        self._deadline = time.monotonic() + budget.deadline_seconds

    def run(self, sql: str) -> QueryResult:
        left = self._deadline - time.monotonic()
        if self.spent >= self._budget.executions:
            raise _Spent(f"the execution budget ({self._budget.executions}) was spent")
        if left < 0.5:
            raise _Spent(f"the diagnosis's time budget ({self._budget.deadline_seconds:g} s) was spent")
        self.spent += 1
        return self._warehouse.run(sql, max_rows=self._budget.row_cap, timeout_seconds=min(self._budget.timeout_seconds, left))

    def probe(self, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
        """A dimension's distinct values (for the rules), within the guardrails; none once spent."""
        from memtool.sql.guardrails import check_sql

        schema = self._schema
        if not schema.has_table(table) or not all(schema.has_column(table, c) for c in columns):
            return []
        sql = f"SELECT DISTINCT {', '.join(columns)} FROM {table} LIMIT {PROBE_ROWS}"
        verdict = check_sql(sql, self._policy)
        if not verdict.allowed or verdict.sql is None:
            return []
        try:
            result = self.run(verdict.sql)
        except _Spent:
            return []
        return [tuple(row) for row in result.rows]


@dataclass
class _Trial:
    """What every hypothesis test of one diagnosis shares: the failure and its subject, the guard
    policy, the runs, the original query (normalised) and its value, and the repaired queries seen."""

    failure: Failure
    subject: Subject
    expected: Expected | None
    policy: Any
    runs: _Runs
    unit: tuple[str | None, str | None]  # (value column, money unit) of the original query
    baseline_value: float | None
    original: str
    seen: set[str] = field(default_factory=set)

    def gives_the_baseline(self, value: float | None, value_unit: str | None) -> bool:
        """A logical failure's repaired query that gives the original value (in the same unit)."""
        return (
            self.failure.origin == "logical"
            and self.baseline_value is not None
            and value is not None
            and value_unit == self.unit[1]
            and abs(value - self.baseline_value) <= 1e-9 * max(abs(self.baseline_value), 1.0)
        )


class Diagnoser:
    def __init__(
        self,
        *,
        warehouse: Any,  # the Warehouse port (run, describe)
        compiler: IntentCompiler,
        budget: Budget,
        llm: HypothesisSource | None = None,
        foreign_tables: frozenset[str] = frozenset(),  # other tenants' tables: never read, not even by a probe
        granted_tables: tuple[str, ...] | None = None,  # what the operator granted the tenant: nothing else is read
    ) -> None:
        self._warehouse = warehouse
        self._compiler = compiler
        self._budget = budget
        self._llm = llm
        self._foreign_tables = foreign_tables
        self._granted_tables = granted_tables

    def diagnose(
        self,
        failure: Failure,
        subject: Subject,
        *,
        episode_id: str,
        expected: Expected | None = None,
        lessons: Sequence[str] = (),
        stop_at_verified: bool = True,
    ) -> DiagnosisReport:
        report = DiagnosisReport(
            episode_id=episode_id, failure=failure.public(), verified=False, expected=expected, budget=self._budget.executions
        )
        schema = self._describe(refresh=failure.kind in ("undefined_column", "undefined_table"))
        # The tenant's model's tables as the warehouse has them now; when one is gone (drift), the
        # tables no other tenant's model names, so a renamed table can be tried.
        policy = self._policy(schema)
        runs = _Runs(self._warehouse, self._budget, schema, policy)
        unit = _unit_of(subject, self._compiler)
        baseline_value: float | None = None
        if failure.origin == "logical":
            baseline_value = self._baseline(report, subject, policy, runs.run, unit, expected)
            if expected is not None and baseline_value is not None and _matches(baseline_value, expected, unit[1], self._budget.tolerance):
                report.notes.append("the original query already gives the expected value: there is no difference to explain")
                report.nothing_to_explain = True
                report.executions = runs.spent
                return report
            hint = _unit_hint(baseline_value, expected, unit[1], self._budget.tolerance)
            if hint:
                report.notes.append(hint)
        hypotheses = self._hypotheses(report, episode_id, failure, subject, schema, lessons, runs.probe)
        report.schema_facts = _facts(schema, subject)
        trial = _Trial(failure, subject, expected, policy, runs, unit, baseline_value, original=_normal(subject.sql))
        for hypothesis in hypotheses:
            test = HypothesisTest(
                id=hypothesis.id,
                source=hypothesis.source,
                cause=hypothesis.cause,
                root_cause=hypothesis.root_cause,
                repairs=[r.model_dump(exclude_none=True) for r in hypothesis.repairs],
                cost=hypothesis.cost,
                confidence=hypothesis.confidence,
                result="not_tested",
            )
            report.hypotheses.append(test)
            if report.verified and stop_at_verified:
                test.detail = "a cheaper hypothesis was verified first"
                continue
            tested = self._test(trial, hypothesis, test)
            if tested is not None and test.result == "verified" and not report.verified:
                applied, result = tested
                report.verified = True
                report.cause = hypothesis.cause
                report.root_cause = hypothesis.root_cause
                report.repairs = test.repairs
                report.repaired_sql = applied.sql  # unguarded: the flow guards it with its own row cap
                report.repaired_output = RepairedOutput(
                    columns=result.columns, row_count=result.row_count, sample=result.rows[:SAMPLE_ROWS]
                )
                report.evidence = f"{hypothesis.id}: {test.detail}"
        report.executions = runs.spent
        if not report.verified:
            ran = [t for t in report.hypotheses if t.result == "ran"]
            if ran:
                report.notes.append(f"{len(ran)} repair(s) ran, but without an expected value none can be verified")
            elif not report.hypotheses:
                report.notes.append(f"no rule proposes a repair for this failure ({failure.kind})")
        return report

    def rerun(self, subject: Subject, repairs: Sequence[Repair]) -> tuple[str, QueryResult]:
        """Run one repair once, as a person confirms it: applied to the episode's query, guarded
        like every repaired query, within one execution. The repaired SQL and its result;
        ``NotApplicable`` or ``WarehouseError`` (or ``ValueError`` for refused SQL) when it does not run."""
        from memtool.sql.guardrails import check_sql

        schema = self._describe(refresh=False)
        policy = self._policy(schema)
        applied = apply_repairs(subject, list(repairs), self._compiler)
        verdict = check_sql(applied.sql, policy)
        if not verdict.allowed or verdict.sql is None:
            raise ValueError(f"the guardrails refused the repaired SQL: {verdict.reason}")
        runs = _Runs(self._warehouse, replace(self._budget, executions=1), schema, policy)
        return applied.sql, runs.run(verdict.sql)

    def _policy(self, schema: Any) -> Any:
        """The guardrails every query of a diagnosis passes: the tenant's model's tables as the
        warehouse has them now, within the budget's row cap and timeout, on the warehouse's dialect."""
        from memtool.sql.guardrails import GuardPolicy

        return GuardPolicy.for_model(
            schema,
            self._compiler.catalog,
            foreign_tables=self._foreign_tables,
            granted=self._granted_tables,
            max_rows=self._budget.row_cap,
            timeout_seconds=self._budget.timeout_seconds,
        ).on_engine(getattr(self._warehouse, "dialect", "redshift"))

    def _hypotheses(
        self,
        report: DiagnosisReport,
        episode_id: str,
        failure: Failure,
        subject: Subject,
        schema: Any,
        lessons: Sequence[str],
        probe: Callable[[str, Sequence[str]], list[tuple[Any, ...]]],
    ) -> list[Hypothesis]:
        """The rules' hypotheses and the other source's (if any), cheapest first."""
        hypotheses = hypotheses_for(failure, subject, schema, self._compiler, probe)
        if self._llm is None:
            return hypotheses
        try:
            proposed = self._llm.propose(failure, subject, _facts(schema, subject), lessons)
        except Exception as exc:  # noqa: BLE001 - the rules' hypotheses still stand
            logger.warning("episode %s: the Bedrock diagnoser failed: %s", episode_id, exc)
            report.notes.append(f"the Bedrock diagnoser could not propose hypotheses ({type(exc).__name__})")
            proposed = []
        start = len(hypotheses)
        hypotheses += [h.model_copy(update={"id": f"h{start + i}", "source": "bedrock"}) for i, h in enumerate(proposed, start=1)]
        hypotheses.sort(key=lambda h: (h.cost, -h.confidence))
        return hypotheses

    def _test(self, trial: _Trial, hypothesis: Hypothesis, test: HypothesisTest) -> tuple[Applied, QueryResult] | None:
        """Test one hypothesis by running its repair; ``test`` says what happened. The repaired query
        and its result when it ran and was judged, None when the test stopped before."""
        from memtool.sql.guardrails import check_sql

        try:
            applied = apply_repairs(trial.subject, hypothesis.repairs, self._compiler)
        except NotApplicable as exc:
            test.result, test.detail = "not_applicable", str(exc)
            return None
        if _normal(applied.sql) == trial.original or _normal(applied.sql) in trial.seen:
            test.result = "no_change"
            if _normal(applied.sql) == trial.original:
                test.detail = "the repair leaves the query as it was"
            else:
                test.detail = "the same query as another hypothesis"
            return None
        trial.seen.add(_normal(applied.sql))
        verdict = check_sql(applied.sql, trial.policy)
        if not verdict.allowed or verdict.sql is None:
            test.result, test.detail = "blocked", f"the guardrails refused the repaired SQL: {verdict.reason}"
            return None
        try:
            result = trial.runs.run(verdict.sql)
        except _Spent as spent_why:
            test.detail = str(spent_why)
            return None
        except WarehouseError as exc:
            test.result, test.executed, test.detail = "failed", True, f"the repaired SQL failed: {_short(str(exc))}"
            return None
        test.executed = True
        test.row_count = result.row_count
        value_unit = applied.unit if applied.unit is not None else trial.unit[1]
        test.value = _single_value(result, applied.value_column or trial.unit[0])
        if trial.gives_the_baseline(test.value, value_unit):
            test.result = "no_change"
            test.detail = f"the repaired query gives the original value ({test.value:,.4f}): this is not the cause"
            return None
        test.result, test.detail = self._judge(trial.failure, result, test.value, trial.expected, value_unit)
        return applied, result

    # ---- pieces ---------------------------------------------------------------------------

    def _describe(self, *, refresh: bool) -> Any:
        try:
            return self._warehouse.describe(refresh=refresh)
        except TypeError:  # an adapter without a cache takes no argument
            return self._warehouse.describe()

    def _baseline(
        self,
        report: DiagnosisReport,
        subject: Subject,
        policy: Any,
        run: Callable[[str], QueryResult],
        unit: tuple[str | None, str | None],
        expected: Expected | None,
    ) -> float | None:
        from memtool.sql.guardrails import check_sql

        verdict = check_sql(subject.sql, policy)
        if not verdict.allowed or verdict.sql is None:
            report.baseline = {"error": f"the original SQL is refused now: {verdict.reason}"}
            return None
        try:
            result = run(verdict.sql)
        except _Spent:
            return None
        except WarehouseError as exc:
            report.baseline = {"error": _short(str(exc))}
            return None
        value = _single_value(result, unit[0])
        report.baseline = {"row_count": result.row_count, "value": value, "unit": unit[1]}
        return value

    def _judge(
        self, failure: Failure, result: QueryResult, value: float | None, expected: Expected | None, unit: str | None
    ) -> tuple[TestResult, str]:
        rows = f"{result.row_count} row{'s' if result.row_count != 1 else ''}"
        if failure.origin in ("execution", "guard"):
            return "verified", f"the repaired query ran ({rows}) where the original failed with {failure.kind}"
        if failure.kind == "empty_result":
            if result.row_count > 0 and any(cell is not None for row in result.rows for cell in row):
                return "verified", f"the repaired query returns {rows} where the original returned none"
            return "refuted", "the repaired query is still empty"
        if expected is not None:
            if value is None:
                return "refuted", f"the repaired query has no single value to compare ({rows})"
            wanted = _in_unit(expected, unit)
            if _matches(value, expected, unit, self._budget.tolerance):
                return "verified", f"the repaired value {value:,.4f} matches the expected {wanted:,.4f} within {self._budget.tolerance:.2%}"
            return "refuted", f"the repaired value {value:,.4f} differs from the expected {wanted:,.4f}"
        return "ran", f"the repaired query ran ({rows}{'' if value is None else f', value {value:,.4f}'}); nothing to compare it with"


def _unit_hint(baseline: float | None, expected: Expected | None, unit: str | None, tolerance: float) -> str | None:
    """When the expected value is the answer in another money unit, say so: it is not a cause."""
    if baseline is None or expected is None or unit not in UNIT_IN_YUAN:
        return None
    for other, factor in UNIT_IN_YUAN.items():
        if other == unit or (expected.unit is not None and expected.unit != unit):
            continue
        in_other = baseline * UNIT_IN_YUAN[unit] / factor
        if abs(in_other - expected.value) <= tolerance * max(abs(expected.value), 1e-9):
            return f"the expected value equals the answer in {other} (the answer is in {unit}): send expected.unit = {other}"
    return None


def _unit_of(subject: Subject, compiler: IntentCompiler) -> tuple[str | None, str | None]:
    """(value column, money unit) of the subject's query when it came from an intent."""
    if subject.intent is None:
        return None, None
    try:
        compiled = compiler.with_options(subject.options).compile(subject.intent)
    except Exception:  # noqa: BLE001 - unknown: compare the last numeric cell, unit as given
        return None, None
    return compiled.value_column, compiled.unit


def _single_value(result: QueryResult, column: str | None) -> float | None:
    if result.row_count != 1 or not result.rows:
        return None
    row = result.rows[0]
    if column is not None and column in result.columns:
        cell = row[result.columns.index(column)]
        return float(cell) if isinstance(cell, (int, float)) and not isinstance(cell, bool) else None
    numbers = [cell for cell in row if isinstance(cell, (int, float)) and not isinstance(cell, bool)]
    return float(numbers[-1]) if numbers else None


def _in_unit(expected: Expected, unit: str | None) -> float:
    if expected.unit is None or unit is None or unit not in UNIT_IN_YUAN:
        return expected.value
    return expected.value * UNIT_IN_YUAN[expected.unit] / UNIT_IN_YUAN[unit]


def _matches(value: float, expected: Expected, unit: str | None, tolerance: float) -> bool:
    wanted = _in_unit(expected, unit)
    return abs(value - wanted) <= tolerance * max(abs(wanted), 1e-9)


def _facts(schema: Any, subject: Subject) -> dict[str, dict[str, str]]:
    from memtool.diagnosis.sql_rewrite import references

    try:
        tables = list(references(subject.sql).tables)
    except Exception:  # noqa: BLE001
        tables = []
    tables += [r.to for r in subject.sql_repairs if r.kind == "rename_table" and r.to]
    live = [t for t in dict.fromkeys(tables) if schema.has_table(t)]
    return schema.facts(live)


def _normal(sql: str) -> str:
    return re.sub(r"\s+", " ", sql).strip().lower()


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
