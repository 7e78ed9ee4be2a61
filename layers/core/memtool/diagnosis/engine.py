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
from dataclasses import dataclass
from typing import Any, Protocol

from memtool.diagnosis.apply import NotApplicable, Subject, apply_repairs
from memtool.diagnosis.model import DiagnosisReport, Failure, Hypothesis, HypothesisTest, RepairedOutput, TestResult
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
        from memtool.sql.guardrails import GuardPolicy, check_sql

        report = DiagnosisReport(
            episode_id=episode_id, failure=failure.public(), verified=False, expected=expected, budget=self._budget.executions
        )
        schema = self._describe(refresh=failure.kind in ("undefined_column", "undefined_table"))
        # The tenant's model's tables as the warehouse has them now; when one is gone (drift), the
        # tables no other tenant's model names, so a renamed table can be tried.
        policy = GuardPolicy.for_model(
            schema,
            self._compiler.catalog,
            foreign_tables=self._foreign_tables,
            granted=self._granted_tables,
            max_rows=self._budget.row_cap,
            timeout_seconds=self._budget.timeout_seconds,
        ).on_engine(getattr(self._warehouse, "dialect", "redshift"))
        spent = [0]
        deadline = time.monotonic() + self._budget.deadline_seconds

        def run(sql: str) -> QueryResult:
            left = deadline - time.monotonic()
            if spent[0] >= self._budget.executions:
                raise _Spent(f"the execution budget ({self._budget.executions}) was spent")
            if left < 0.5:
                raise _Spent(f"the diagnosis's time budget ({self._budget.deadline_seconds:g} s) was spent")
            spent[0] += 1
            return self._warehouse.run(sql, max_rows=self._budget.row_cap, timeout_seconds=min(self._budget.timeout_seconds, left))

        def probe(table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
            if not schema.has_table(table) or not all(schema.has_column(table, c) for c in columns):
                return []
            sql = f"SELECT DISTINCT {', '.join(columns)} FROM {table} LIMIT {PROBE_ROWS}"
            verdict = check_sql(sql, policy)
            if not verdict.allowed or verdict.sql is None:
                return []
            try:
                result = run(verdict.sql)
            except _Spent:
                return []
            return [tuple(row) for row in result.rows]

        unit = _unit_of(subject, self._compiler)
        baseline_value: float | None = None
        if failure.origin == "logical":
            baseline_value = self._baseline(report, subject, policy, run, unit, expected)
            if expected is not None and baseline_value is not None and _matches(baseline_value, expected, unit[1], self._budget.tolerance):
                report.notes.append("the original query already gives the expected value: there is no difference to explain")
                report.nothing_to_explain = True
                report.executions = spent[0]
                return report
            hint = _unit_hint(baseline_value, expected, unit[1], self._budget.tolerance)
            if hint:
                report.notes.append(hint)
        hypotheses = hypotheses_for(failure, subject, schema, self._compiler, probe)
        if self._llm is not None:
            try:
                proposed = self._llm.propose(failure, subject, _facts(schema, subject), lessons)
            except Exception as exc:  # noqa: BLE001 - the rules' hypotheses still stand
                logger.warning("episode %s: the Bedrock diagnoser failed: %s", episode_id, exc)
                report.notes.append(f"the Bedrock diagnoser could not propose hypotheses ({type(exc).__name__})")
                proposed = []
            start = len(hypotheses)
            hypotheses += [h.model_copy(update={"id": f"h{start + i}", "source": "bedrock"}) for i, h in enumerate(proposed, start=1)]
            hypotheses.sort(key=lambda h: (h.cost, -h.confidence))
        report.schema_facts = _facts(schema, subject)
        original = _normal(subject.sql)
        seen: set[str] = set()
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
            try:
                applied = apply_repairs(subject, hypothesis.repairs, self._compiler)
            except NotApplicable as exc:
                test.result, test.detail = "not_applicable", str(exc)
                continue
            if _normal(applied.sql) == original or _normal(applied.sql) in seen:
                test.result = "no_change"
                if _normal(applied.sql) == original:
                    test.detail = "the repair leaves the query as it was"
                else:
                    test.detail = "the same query as another hypothesis"
                continue
            seen.add(_normal(applied.sql))
            verdict = check_sql(applied.sql, policy)
            if not verdict.allowed or verdict.sql is None:
                test.result, test.detail = "blocked", f"the guardrails refused the repaired SQL: {verdict.reason}"
                continue
            try:
                result = run(verdict.sql)
            except _Spent as spent_why:
                test.detail = str(spent_why)
                continue
            except WarehouseError as exc:
                test.result, test.executed, test.detail = "failed", True, f"the repaired SQL failed: {_short(str(exc))}"
                continue
            test.executed = True
            test.row_count = result.row_count
            value_unit = applied.unit if applied.unit is not None else unit[1]
            test.value = _single_value(result, applied.value_column or unit[0])
            if (
                failure.origin == "logical"
                and baseline_value is not None
                and test.value is not None
                and value_unit == unit[1]
                and abs(test.value - baseline_value) <= 1e-9 * max(abs(baseline_value), 1.0)
            ):
                test.result = "no_change"
                test.detail = f"the repaired query gives the original value ({test.value:,.4f}): this is not the cause"
                continue
            test.result, test.detail = self._judge(failure, result, test.value, expected, value_unit)
            if test.result == "verified" and not report.verified:
                report.verified = True
                report.cause = hypothesis.cause
                report.root_cause = hypothesis.root_cause
                report.repairs = test.repairs
                report.repaired_sql = applied.sql  # unguarded: the flow guards it with its own row cap
                report.repaired_output = RepairedOutput(
                    columns=result.columns, row_count=result.row_count, sample=result.rows[:SAMPLE_ROWS]
                )
                report.evidence = f"{hypothesis.id}: {test.detail}"
        report.executions = spent[0]
        if not report.verified:
            ran = [t for t in report.hypotheses if t.result == "ran"]
            if ran:
                report.notes.append(f"{len(ran)} repair(s) ran, but without an expected value none can be verified")
            elif not report.hypotheses:
                report.notes.append(f"no rule proposes a repair for this failure ({failure.kind})")
        return report

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
