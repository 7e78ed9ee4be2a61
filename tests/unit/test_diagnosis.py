"""The diagnosis pieces on their own: SQL references and renames, failure classes, rule
hypotheses, repairs on an intent, lessons, the engine's budget and verdicts, the memory's size."""

from __future__ import annotations

import json
from datetime import date

import pytest

from memtool.diagnosis.apply import NotApplicable, Subject, apply_repairs
from memtool.diagnosis.causal import fit
from memtool.diagnosis.engine import Budget, Diagnoser
from memtool.diagnosis.failures import execution_failure, from_step_error, guard_failure, logical_failure
from memtool.diagnosis.lessons import Lesson, apply_lessons, lesson_of
from memtool.diagnosis.model import Failure, Repair
from memtool.diagnosis.requests import Expected
from memtool.diagnosis.rules import hypotheses_for, name_similarity
from memtool.diagnosis.sql_rewrite import ColumnRef, references, rename_column, rename_table, unknown_references
from memtool.retrieval.index import IndexHit
from memtool.retrieval.recall import fold_facets
from memtool.semantic.compiler import IntentCompiler
from memtool.semantic.intent import Filter, Intent, TimeWindow
from memtool.sql.demo_warehouse import WAREHOUSE_SCHEMA
from memtool.sql.live_schema import LiveSchema
from memtool.sql.warehouse import QueryResult, WarehouseError

OCTOBER = TimeWindow(start=date(2026, 10, 1), end=date(2026, 11, 1))
COMPILER = IntentCompiler()


def schema(renames: dict[tuple[str, str | None], str] | None = None) -> LiveSchema:
    """The demo contract as a live schema, with (table, column|None) -> new name applied."""
    renames = renames or {}
    rows = []
    for table, columns in WAREHOUSE_SCHEMA.items():
        live_table = renames.get((table, None), table)
        rows += [(live_table, renames.get((table, c), c), kind) for c, kind in columns.items()]
    return LiveSchema.from_rows(rows)


DRIFTED = schema({("fact_order_line", "gross_amount"): "gross_amt", ("dim_channel", None): "dim_sales_channel"})


# ---- SQL references and renames ---------------------------------------------------------------


def test_references_resolve_aliases_ctes_and_one_table_selects():
    sql = COMPILER.compile(Intent(metric="net_revenue", dimensions=("channel",), time_window=OCTOBER)).sql
    found = references(sql)
    assert set(found.tables) == {"fact_order_line", "fact_refund", "dim_channel"}  # refund_by_line is a CTE, not a table
    assert ColumnRef("fact_order_line", "gross_amount") in found.columns  # ol.gross_amount
    assert ColumnRef("fact_refund", "refund_amount") in found.columns  # unqualified, in the CTE over fact_refund
    assert ColumnRef("dim_channel", "channel_name") in found.columns


def test_a_rename_touches_only_the_table_it_names():
    sql = "SELECT ol.order_id, r.order_id FROM fact_order_line AS ol JOIN fact_refund AS r ON r.order_id = ol.order_id"
    renamed = rename_column(sql, "fact_refund", "order_id", "refund_order_id")
    refs = references(renamed)
    assert ColumnRef("fact_refund", "refund_order_id") in refs.columns
    assert ColumnRef("fact_order_line", "order_id") in refs.columns
    assert ColumnRef("fact_refund", "order_id") not in refs.columns


def test_a_table_rename_keeps_qualified_references_working():
    renamed = rename_table("SELECT dim_channel.channel_name FROM dim_channel", "dim_channel", "dim_sales_channel")
    assert references(renamed).tables == ("dim_sales_channel",)
    assert ColumnRef("dim_sales_channel", "channel_name") in references(renamed).columns


def test_unknown_references_name_what_the_live_schema_lacks():
    sql = COMPILER.compile(Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)).sql
    unknown = unknown_references(sql, DRIFTED)
    assert unknown.tables == ("dim_channel",)
    assert unknown.columns == (ColumnRef("fact_order_line", "gross_amount"),)
    assert not unknown_references(sql, schema())


# ---- failure classes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message", "kind"),
    [
        ("undefined_column", "x", "undefined_column"),
        ("read_only", "x", "permission"),
        ("database_error", "Conversion Error: Could not convert string 'a' to INT32", "type_mismatch"),
        ("database_error", "division by zero [SQLSTATE 22012]", "division_by_zero"),
        ("database_error", "something else", "database_error"),
        (None, "", "database_error"),
    ],
)
def test_execution_failures_come_from_the_warehouse_code(code, message, kind):
    assert execution_failure(code, message).kind == kind


def test_guard_refusals_of_missing_names_are_classified_as_what_they_are():
    assert guard_failure("forbidden_table", "no").kind == "undefined_table"
    assert guard_failure("forbidden_column", "no").kind == "undefined_column"
    refusal = guard_failure("not_select", "Only a read-only SELECT may run")
    assert (refusal.kind, refusal.origin) == ("guard_rejection", "guard")


def test_logical_failures():
    assert logical_failure(expected=True, row_count=1).kind == "expected_value"
    assert logical_failure(expected=False, row_count=0).kind == "empty_result"
    assert logical_failure(expected=False, row_count=3).kind == "reported_wrong"


def test_a_catch_error_is_read_from_its_lambda_cause():
    cause = json.dumps({"errorMessage": "Referenced column gross_amount not found", "errorType": "WarehouseUndefinedColumn"})
    failure = from_step_error({"Error": "WarehouseUndefinedColumn", "Cause": cause})
    assert failure is not None and failure.kind == "undefined_column" and "gross_amount" in failure.message
    assert from_step_error({"Error": "KeyError", "Cause": "{}"}) is None


# ---- rule hypotheses --------------------------------------------------------------------------


def test_names_are_near_by_words_and_abbreviations():
    assert name_similarity("gross_amount", "gross_amt") > name_similarity("gross_amount", "discount_amount")
    assert name_similarity("dim_channel", "dim_sales_channel") > name_similarity("dim_channel", "dim_region")


def test_a_drifted_query_gets_one_hypothesis_mapping_every_missing_name_first():
    intent = Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)
    subject = Subject(question="q", intent=intent, sql=COMPILER.compile(intent).sql)
    failure = Failure(kind="undefined_table", origin="execution", message="dim_channel")
    [first, *rest] = hypotheses_for(failure, subject, DRIFTED, COMPILER)
    assert first.cost == 1 and first.cause == "schema_drift"
    assert set(first.repairs) == {
        Repair(kind="rename_table", table="dim_channel", to="dim_sales_channel"),
        Repair(kind="rename_column", table="fact_order_line", column="gross_amount", to="gross_amt"),
    }
    assert all(h.cost > 1 for h in rest)


def test_a_summed_column_is_only_replaced_by_a_number():
    live = schema({("fact_order_line", "gross_amount"): "gross_note"})  # a VARCHAR-looking name only
    rows = [(t, c, "VARCHAR" if c == "gross_note" else k) for t in live.tables for c in live.columns_of(t) for k in [live.type_of(t, c)]]
    intent = Intent(metric="gross_revenue", time_window=OCTOBER)
    subject = Subject(question="q", intent=intent, sql=COMPILER.compile(intent).sql)
    failure = Failure(kind="undefined_column", origin="execution")
    found = hypotheses_for(failure, subject, LiveSchema.from_rows(rows), COMPILER)
    targets = {r.to for h in found for r in h.repairs}
    assert "gross_note" not in targets and targets <= {"discount_amount", "qty", "order_id", "line_id", "product_id", "region_id", "channel_id"}


def test_value_causes_come_from_the_live_time_columns_and_the_definition():
    intent = Intent(metric="gross_revenue", filters=(Filter(dimension="city", values=("上海",)),), time_window=OCTOBER)
    subject = Subject(question="上个月上海的销售额", intent=intent, sql=COMPILER.compile(intent).sql)
    found = hypotheses_for(logical_failure(expected=True, row_count=1), subject, schema(), COMPILER)
    causes = [h.cause for h in found]
    assert causes[0] == "time_column" and found[0].repairs == (Repair(kind="time_column", metric="gross_revenue", to="order_date"),)
    assert {"test_lines", "metric_definition", "window_edges"} <= set(causes)
    assert "unpaid_lines" not in causes  # a window on paid_at leaves unpaid lines out whatever the filter says
    assert "join_type" not in causes  # the only dimension table is filtered: a LEFT JOIN changes nothing
    grouped = Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)
    by_channel = hypotheses_for(logical_failure(expected=True, row_count=1), Subject("q", grouped, COMPILER.compile(grouped).sql), schema(), COMPILER)
    assert "join_type" in [h.cause for h in by_channel]
    assert [h.id for h in found] == [f"h{i}" for i in range(1, len(found) + 1)]
    assert [h.cost for h in found] == sorted(h.cost for h in found)


# ---- repairs on an intent ---------------------------------------------------------------------


def test_intent_repairs_need_an_intent_and_the_same_metric():
    sql_only = Subject(question="q", intent=None, sql="SELECT 1 AS n")
    with pytest.raises(NotApplicable):
        apply_repairs(sql_only, [Repair(kind="time_column", metric="gross_revenue", to="order_date")], COMPILER)
    rx = Intent(metric="rx_volume", time_window=OCTOBER)
    with pytest.raises(NotApplicable):
        apply_repairs(Subject("q", rx, COMPILER.compile(rx).sql), [Repair(kind="time_column", metric="gross_revenue", to="order_date")], COMPILER)


def test_a_recompiled_repair_keeps_the_lessons_already_applied():
    intent = Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)
    renames = (Repair(kind="rename_table", table="dim_channel", to="dim_sales_channel"),)
    subject = Subject("q", intent, apply_repairs(Subject("q", intent, COMPILER.compile(intent).sql), renames, COMPILER).sql, sql_repairs=renames)
    applied = apply_repairs(subject, [Repair(kind="window_edges", metric="gross_revenue", edge="end_inclusive")], COMPILER)
    assert "dim_sales_channel" in applied.sql and "'2026-11-02'" in applied.sql


def test_a_filter_value_repair_replaces_only_that_value():
    intent = Intent(metric="gross_revenue", filters=(Filter(dimension="city", values=("shanghai ", "北京")),), time_window=OCTOBER)
    applied = apply_repairs(Subject("q", intent, COMPILER.compile(intent).sql), [Repair(kind="filter_value", dimension="city", value="shanghai ", to="上海")], COMPILER)
    assert applied.intent is not None and applied.intent.filters[0].values == ("上海", "北京")


# ---- lessons ----------------------------------------------------------------------------------


def _lesson(*repairs: Repair, memory_id: str = "mem_1") -> Lesson:
    return Lesson(memory_id=memory_id, version=1, owner="li", cause="c", root_cause="r", repairs=repairs, text="t")


def test_lessons_apply_only_where_their_cause_would_be_met():
    time_lesson = _lesson(Repair(kind="time_column", metric="gross_revenue", to="order_date"), memory_id="mem_t")
    rename_lesson = _lesson(Repair(kind="rename_table", table="dim_channel", to="dim_sales_channel"), memory_id="mem_r")
    net = Intent(metric="net_revenue", dimensions=("city",), time_window=OCTOBER)
    outcome = apply_lessons(net, COMPILER.compile(net).sql, [time_lesson, rename_lesson], COMPILER)
    assert outcome.applied == [] and outcome.sql == COMPILER.compile(net).sql  # another metric, no channel
    gross = Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)
    outcome = apply_lessons(gross, COMPILER.compile(gross).sql, [time_lesson, rename_lesson], COMPILER)
    assert [lesson.memory_id for lesson, _ in outcome.applied] == ["mem_t", "mem_r"]
    assert "order_date" in outcome.sql and "dim_sales_channel" in outcome.sql and "paid_at >=" not in outcome.sql
    assert outcome.lessons_value()[0]["repairs"] == [{"kind": "time_column", "metric": "gross_revenue", "to": "order_date"}]


def test_only_an_active_verified_diagnosis_is_a_lesson():
    from datetime import UTC, datetime

    from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus

    now = datetime(2026, 11, 29, tzinfo=UTC)

    def record(status: MemoryStatus, verified: bool, rules: list[dict]) -> MemoryRecord:
        return MemoryRecord(
            id="mem_1", tenant="t", owner="li", kind=MemoryKind.CAUSAL, content="c", value={"verified": verified, "repair": {"rules": rules}},
            scope=MemoryScope.USER, status=status, version=1, created_at=now, updated_at=now,
        )  # fmt: skip

    rename = [{"kind": "rename_table", "table": "a", "to": "b"}]
    assert lesson_of(record(MemoryStatus.ACTIVE, True, rename)) is not None
    assert lesson_of(record(MemoryStatus.PENDING_REVIEW, True, rename)) is None
    assert lesson_of(record(MemoryStatus.ACTIVE, False, rename)) is None
    assert lesson_of(record(MemoryStatus.ARCHIVED, True, rename)) is None
    assert lesson_of(record(MemoryStatus.ACTIVE, True, [{"kind": "replace_sql", "sql": "SELECT 1"}])) is None
    assert lesson_of(record(MemoryStatus.ACTIVE, True, [{"kind": "bogus"}])) is None


# ---- the engine -------------------------------------------------------------------------------


class FakeWarehouse:
    """Answers each query with one value (``value``, then ``step`` more for each later run);
    records what it was asked to run."""

    def __init__(self, live: LiveSchema, value: float = 100.0, fail: str | None = None, step: float = 0.0) -> None:
        self.live, self.value, self.fail, self.step, self.ran = live, value, fail, step, []

    def describe(self, *, refresh: bool = False) -> LiveSchema:
        return self.live

    def run(self, sql, *, max_rows, timeout_seconds, params=None):
        self.ran.append((sql, max_rows, timeout_seconds))
        if self.fail and self.fail in sql:
            raise WarehouseError("boom", code="database_error")
        value = self.value + self.step * (len(self.ran) - 1)
        return QueryResult(columns=["gross_revenue"], rows=[[value]], row_count=1, truncated=False, elapsed_ms=1.0)


def _subject() -> Subject:
    intent = Intent(metric="gross_revenue", filters=(Filter(dimension="city", values=("上海",)),), time_window=OCTOBER)
    return Subject(question="上个月上海的销售额", intent=intent, sql=COMPILER.compile(intent).sql)


def test_the_engine_never_runs_more_than_its_budget_and_caps_every_run():
    warehouse = FakeWarehouse(schema(), step=1.0)
    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=Budget(3, 7, 2.5, 0.001)).diagnose(
        logical_failure(expected=True, row_count=1), _subject(), episode_id="ep", expected=Expected(value=1.0)
    )
    assert report.executions == len(warehouse.ran) == 3 and not report.verified
    assert all(max_rows == 7 and timeout == 2.5 for _, max_rows, timeout in warehouse.ran)
    assert all("LIMIT 7" in sql for sql, _, _ in warehouse.ran)  # guarded with the test's row cap
    assert [t.result for t in report.hypotheses].count("refuted") == 2
    assert {t.result for t in report.hypotheses[2:]} <= {"not_tested", "no_change", "not_applicable"}


def test_an_expected_value_in_another_unit_is_compared_in_the_answers_unit():
    warehouse = FakeWarehouse(schema(), value=15000.0)
    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=Budget(5, 10, 5, 0.001)).diagnose(
        logical_failure(expected=True, row_count=1), _subject(), episode_id="ep", expected=Expected(value=1.5, unit="万元")
    )
    assert report.verified is False and any("already gives the expected value" in n for n in report.notes)
    assert report.executions == 1 and report.hypotheses == []


def test_a_repair_the_guard_refuses_is_never_run():
    warehouse = FakeWarehouse(schema())
    sql_only = Subject(question="q", intent=None, sql="SELECT x FROM nowhere")

    class Proposes:
        def propose(self, failure, subject, facts, lessons):
            from memtool.diagnosis.model import Hypothesis

            return [Hypothesis(id="", cause="other", root_cause="r", repairs=(Repair(kind="replace_sql", sql="DELETE FROM dim_region"),))]

    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=Budget(5, 10, 5, 0.001), llm=Proposes()).diagnose(
        Failure(kind="syntax_error", origin="execution"), sql_only, episode_id="ep"
    )
    assert [t.result for t in report.hypotheses] == ["blocked"] and warehouse.ran == []


def test_a_repair_reading_another_tenants_table_is_never_run_even_when_the_warehouse_has_it():
    # One warehouse holds this tenant's tables and another tenant's ``lineitem``.
    shared = LiveSchema.from_rows([*((t, c, k) for t, cols in WAREHOUSE_SCHEMA.items() for c, k in cols.items()), ("lineitem", "l_quantity", "DECIMAL")])
    sql_only = Subject(question="q", intent=None, sql="SELECT x FROM nowhere")

    class Proposes:
        def propose(self, failure, subject, facts, lessons):
            from memtool.diagnosis.model import Hypothesis

            return [
                Hypothesis(id="", cause="other", root_cause="r", repairs=(Repair(kind="replace_sql", sql="SELECT SUM(l_quantity) FROM lineitem"),)),
                Hypothesis(id="", cause="other", root_cause="r", repairs=(Repair(kind="replace_sql", sql="SELECT COUNT(*) FROM dim_region"),)),
            ]

    def diagnose(foreign: frozenset[str]) -> tuple[list[str], list[str]]:
        warehouse = FakeWarehouse(shared)
        report = Diagnoser(
            warehouse=warehouse, compiler=COMPILER, budget=Budget(5, 10, 5, 0.001), llm=Proposes(), foreign_tables=foreign
        ).diagnose(Failure(kind="syntax_error", origin="execution"), sql_only, episode_id="ep", stop_at_verified=False)
        return [t.result for t in report.hypotheses], [sql for sql, _, _ in warehouse.ran]

    results, ran = diagnose(frozenset({"lineitem"}))
    assert results[0] == "blocked" and not any("lineitem" in sql for sql in ran)
    assert any("dim_region" in sql for sql in ran)  # its own tables are still probed
    # and not only because the table is foreign: a table no model names is refused too while nothing drifted
    results, ran = diagnose(frozenset())
    assert results[0] == "blocked" and not any("lineitem" in sql for sql in ran)


def test_a_failing_repair_is_reported_failed_and_the_next_one_tried():
    warehouse = FakeWarehouse(DRIFTED, fail="dim_sales_channel")
    intent = Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)
    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=Budget(5, 10, 5, 0.001)).diagnose(
        Failure(kind="undefined_table", origin="execution"), Subject("q", intent, COMPILER.compile(intent).sql), episode_id="ep"
    )
    assert report.hypotheses[0].result == "failed" and report.hypotheses[0].executed


# ---- the memory's size, and recall's facets ---------------------------------------------------


def test_an_oversize_causal_value_is_trimmed_to_fit():
    value = {
        "scenario": {"question": "q"},
        "initial_state": {"sql": "SELECT " + "x, " * 3000, "schema_facts": {"t": {f"c{i}": "INT" for i in range(300)}}},
        "trajectory": [{"step": "test", "output": {"detail": "d" * 500}} for _ in range(30)],
        "repaired_output": {"row_count": 5, "sample": [["v" * 400] * 3] * 5},
        "repair": {"rules": [], "sql": "SELECT 1"},
        "verified": True,
    }
    trimmed = fit(value, 8192)
    assert len(json.dumps(trimmed, ensure_ascii=False).encode()) <= 8192
    assert trimmed["verified"] is True and trimmed["scenario"] == {"question": "q"}


def test_a_memorys_two_keys_fold_into_one_candidate_with_their_ranks_fused():
    hits = [
        IndexHit(memory_id="mem_b", version=1, owner="li", kind="causal", cosine=0.4, fused=0.016),
        IndexHit(memory_id="mem_a#cause", version=2, owner="li", kind="causal", cosine=0.9, fused=0.015),
        IndexHit(memory_id="mem_a", version=2, owner="li", kind="causal", cosine=0.3, fused=0.014),
    ]
    folded = fold_facets(hits)
    assert [h.memory_id for h in folded] == ["mem_a", "mem_b"]
    assert folded[0].fused == pytest.approx(0.029) and folded[0].cosine == 0.9


def test_only_verified_active_causal_memories_reach_the_planner_as_lessons():
    from memtool.flows.ask.state import AskInput, AskState, Caller

    def recalled(memory_id: str, status: str, verified: bool) -> dict:
        return {"id": memory_id, "version": 1, "kind": "causal", "status": status, "content": "c", "value": {"verified": verified, "lesson": f"lesson {memory_id}"}}

    state = AskState(
        episode_id="ep_1",
        caller=Caller(tenant="t", user="li", roles=[]),
        input=AskInput(question="上个月的销售额"),
        started_at="2026-11-29T09:00:00+00:00",
        recalled=[recalled("mem_ok", "active", True), recalled("mem_pending", "pending_review", False), recalled("mem_odd", "active", False)],
    )
    assert [(lesson.memory_id, lesson.text) for lesson in state.plan_context().lessons] == [("mem_ok", "lesson mem_ok")]


def test_a_diagnosis_out_of_time_runs_nothing_more_and_says_why():
    warehouse = FakeWarehouse(DRIFTED)
    intent = Intent(metric="gross_revenue", dimensions=("channel",), time_window=OCTOBER)
    budget = Budget(8, 10, 5, 0.001, deadline_seconds=0.1)  # less than one test's minimum slot
    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=budget).diagnose(
        Failure(kind="undefined_table", origin="execution"), Subject("q", intent, COMPILER.compile(intent).sql), episode_id="ep"
    )
    assert warehouse.ran == [] and report.executions == 0 and not report.verified
    assert report.hypotheses and all(t.result == "not_tested" and "time budget" in (t.detail or "") for t in report.hypotheses)


def test_a_repair_that_gives_the_original_value_is_no_change_not_refuted():
    warehouse = FakeWarehouse(schema())  # every query gives 100
    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=Budget(3, 10, 5, 0.001)).diagnose(
        logical_failure(expected=True, row_count=1), _subject(), episode_id="ep", expected=Expected(value=1.0)
    )
    tested = [t for t in report.hypotheses if t.executed]
    assert tested and all(t.result == "no_change" and "not the cause" in (t.detail or "") for t in tested)


def test_an_expected_value_that_is_the_answer_in_another_unit_says_so():
    warehouse = FakeWarehouse(schema(), value=79.78, step=1.0)  # the answer in 万元: 79.78
    intent = Intent(metric="gross_revenue", time_window=OCTOBER, unit="万元")
    report = Diagnoser(warehouse=warehouse, compiler=COMPILER, budget=Budget(2, 10, 5, 0.001)).diagnose(
        logical_failure(expected=True, row_count=1), Subject("q", intent, COMPILER.compile(intent).sql), episode_id="ep", expected=Expected(value=797800)
    )
    assert any("equals the answer in 元" in note for note in report.notes), report.notes


def test_a_replacement_keeps_the_missing_names_distinctive_words():
    from memtool.diagnosis.rules import _shares_meaning

    assert _shares_meaning("gross_amount", "gross_amt") and not _shares_meaning("gross_amount", "discount_amount")
    assert _shares_meaning("dim_channel", "dim_sales_channel") and not _shares_meaning("dim_channel", "dim_region")
    assert _shares_meaning("amount", "amt_total")  # only common words: similarity decides


def test_refunds_by_refund_date_is_a_hypothesis_only_where_the_compiler_can_say_it():
    net = Intent(metric="net_revenue", filters=(Filter(dimension="city", values=("上海",)),), time_window=OCTOBER)
    found = hypotheses_for(logical_failure(expected=True, row_count=1), Subject("q", net, COMPILER.compile(net).sql), schema(), COMPILER)
    [refund] = [h for h in found if h.cause == "refund_period"]
    applied = apply_repairs(Subject("q", net, COMPILER.compile(net).sql), refund.repairs, COMPILER)
    assert "refunded_at >=" in applied.sql and "rf.order_id IS NOT NULL" in applied.sql
    monthly = Intent(metric="net_revenue", dimensions=("month",), time_window=OCTOBER)
    found = hypotheses_for(logical_failure(expected=True, row_count=1), Subject("q", monthly, COMPILER.compile(monthly).sql), schema(), COMPILER)
    assert "refund_period" not in [h.cause for h in found]  # a refund's month is not its line's: not expressed
    gross = Intent(metric="gross_revenue", time_window=OCTOBER)
    found = hypotheses_for(logical_failure(expected=True, row_count=1), Subject("q", gross, COMPILER.compile(gross).sql), schema(), COMPILER)
    assert "refund_period" not in [h.cause for h in found]


def test_the_cache_key_holds_the_comparison_window_and_the_dimension_order():
    from memtool.semantic.intent import Comparison

    last_year = Comparison(kind="yoy", window=TimeWindow(start=date(2025, 10, 1), end=date(2025, 11, 1)))
    two_years = Comparison(kind="yoy", window=TimeWindow(start=date(2024, 10, 1), end=date(2024, 11, 1)))
    a = Intent(metric="net_revenue", time_window=OCTOBER, comparison=last_year)
    b = Intent(metric="net_revenue", time_window=OCTOBER, comparison=two_years)
    assert a.signature(tenant="t", model_version="1") != b.signature(tenant="t", model_version="1")
    by_city_channel = Intent(metric="order_count", dimensions=("city", "channel"), time_window=OCTOBER)
    by_channel_city = Intent(metric="order_count", dimensions=("channel", "city"), time_window=OCTOBER)
    assert by_city_channel.signature(tenant="t", model_version="1") != by_channel_city.signature(tenant="t", model_version="1")


@pytest.mark.parametrize("question", ["上月除电商以外的净收入", "上个月除电商外的净收入", "上个月除了电商以外的净收入"])
def test_except_without_le_is_still_an_exclusion(question):
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    catalog = COMPILER.catalog
    plan = RulePlanner(catalog, EntityIndex.static(catalog), today=lambda: date(2026, 11, 29)).plan(question, route="nl2sql_query")
    assert plan.intent is not None and [(f.dimension, f.op, f.values) for f in plan.intent.filters] == [("channel", "not_in", ("电商",))]
