"""Which date a period reads, when a table's rows have several (issue 22, items 1 and 7).

A poll has a start date and an end date; "polls in October 2016" counted by the first when the
questions meant the second was the evaluation's one wrong answer on an unedited draft. A source
that lists ``other_time_columns`` (``memtool model init`` drafts them) makes a question that names
a period or a grain ask which date, unless it names one ("by enddate", "end date"); the reply
picks one, follow-ups keep it, and a stored intent or option naming any other column is refused.

Every answer is run on DuckDB and compared with hand-written SQL over a copy of the warehouse.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from memtool.planning.context import PlanContext, PreviousTurn
from memtool.planning.plan import Plan
from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import Catalog, model_problems
from memtool.semantic.compiler import CompileError, compile_intent
from memtool.semantic.entities import EntityIndex
from memtool.semantic.intent import Intent, TimeWindow
from memtool.semantic.introspect import draft_model, read_catalog_facts
from memtool.semantic.parser import date_words
from memtool.sql.duckdb_warehouse import DuckDBWarehouse

TODAY = date(2017, 3, 1)


def polls_model(*, other_dates: bool = True) -> Catalog:
    source: dict[str, Any] = {"name": "poll", "table": "polls", "time_column": "startdate"}
    if other_dates:
        source["other_time_columns"] = ["enddate"]
    return Catalog.model_validate(
        {
            "name": "polls",
            "model_version": "1",
            "currency": "USD",
            "tables": [{"name": "polls", "alias": "p", "columns": {"startdate": "DATE", "enddate": "DATE", "pollster": "VARCHAR"}}],
            "sources": [source],
            "metrics": [
                {
                    "name": "poll_count",
                    "zh": "民调数",
                    "en": "number of polls",
                    "kind": "count",
                    "source": "poll",
                    "synonyms_en": ["polls", "number of polls"],
                    "synonyms_zh": ["民调数", "民调"],
                    "expression": "COUNT(*)",
                    "dimensions": ["pollster", "month"],
                }
            ],
            "dimensions": [
                {"name": "pollster", "kind": "attribute", "zh": "机构", "en": "pollster", "table": "polls", "column": "pollster",
                 "nouns_en": ["pollster", "pollsters"]},  # fmt: skip
                {"name": "month", "kind": "time", "zh": "月", "en": "month", "grain": "month", "nouns_en": ["month"],
                 "group_terms_en": ["by month", "monthly"]},  # fmt: skip
            ],
            "default_window": "all",
            "as_of": "2016-11-08",
        }
    )


def build_polls(path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TABLE polls (startdate DATE, enddate DATE, pollster VARCHAR)")
        rows = []
        for n in range(240):
            start = date(2016, 8, 1) + timedelta(days=n % 90)
            rows.append((start, start + timedelta(days=3 + n % 11), ("Ipsos", "YouGov", "Gallup")[n % 3]))
        con.executemany("INSERT INTO polls VALUES (?, ?, ?)", rows)
    finally:
        con.close()


@dataclass
class Polls:
    path: Path
    warehouse: DuckDBWarehouse
    reference: Any
    planner: RulePlanner


@pytest.fixture(scope="module")
def polls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Polls]:
    import duckdb

    root = tmp_path_factory.mktemp("polls")
    path = root / "polls.duckdb"
    build_polls(path)
    shutil.copyfile(path, root / "reference.duckdb")
    warehouse = DuckDBWarehouse(path)
    reference = duckdb.connect(str(root / "reference.duckdb"), read_only=True)
    model = polls_model()
    try:
        yield Polls(path, warehouse, reference, RulePlanner(model, EntityIndex.from_warehouse(warehouse, model), today=TODAY))
    finally:
        reference.close()
        warehouse.close()


def rows(polls: Polls, plan: Plan) -> list[tuple[Any, ...]]:
    assert plan.status == "planned" and plan.sql is not None, (plan.clarification, plan.notes)
    return [tuple(row) for row in polls.warehouse.run(plan.sql, max_rows=1000, timeout_seconds=30).rows]


def expected(polls: Polls, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in polls.reference.execute(sql).fetchall()]


OCTOBER_BY_END = "SELECT COUNT(*) FROM polls WHERE enddate >= DATE '2016-10-01' AND enddate < DATE '2016-11-01'"
OCTOBER_BY_START = "SELECT COUNT(*) FROM polls WHERE startdate >= DATE '2016-10-01' AND startdate < DATE '2016-11-01'"


def test_the_two_dates_give_different_answers(polls: Polls) -> None:
    # the premise: reading the period on the wrong date is a wrong number, not a rounding
    assert expected(polls, OCTOBER_BY_END) != expected(polls, OCTOBER_BY_START)


@pytest.mark.parametrize(
    "question",
    ["How many polls were there in October 2016?", "2016年10月有多少个民调？", "Number of polls by month"],
)
def test_a_period_on_rows_with_two_dates_asks_which(polls: Polls, question: str) -> None:
    plan = polls.planner.plan(question)
    assert plan.status == "needs_clarification" and plan.clarification is not None, plan.notes
    assert plan.clarification.reason == "which_date"
    assert plan.clarification.options == ["startdate", "enddate"]
    assert plan.clarification.targets == [{"time_column": "startdate"}, {"time_column": "enddate"}]
    assert plan.sql is None


def test_without_a_period_nothing_is_asked(polls: Polls) -> None:
    plan = polls.planner.plan("How many polls were there?")
    assert rows(polls, plan) == expected(polls, "SELECT COUNT(*) FROM polls")


@pytest.mark.parametrize("question", ["How many polls by enddate in October 2016?", "Number of polls by end date in October 2016"])
def test_a_date_the_question_names_is_the_one_read(polls: Polls, question: str) -> None:
    plan = polls.planner.plan(question)
    assert plan.intent is not None and plan.intent.time_column == "enddate"
    assert rows(polls, plan) == expected(polls, OCTOBER_BY_END)
    assert "dated by enddate, as the question says" in plan.notes


def test_naming_the_default_date_reads_it_without_asking(polls: Polls) -> None:
    plan = polls.planner.plan("How many polls by startdate in October 2016?")
    assert plan.intent is not None and plan.intent.time_column is None  # the default: the cache key stays as it was
    assert rows(polls, plan) == expected(polls, OCTOBER_BY_START)


def turn_of(question: str, plan: Plan) -> PreviousTurn:
    return PreviousTurn(
        question=question,
        status=plan.status if plan.status != "planned" else "answered",
        intent=plan.intent.model_dump(mode="json") if plan.intent is not None else None,
        clarification=plan.clarification.model_dump(mode="json") if plan.clarification is not None else None,
    )


@pytest.mark.parametrize("reply", ["enddate", "2", "the end date"])
def test_the_reply_picks_the_date_and_a_follow_up_keeps_it(polls: Polls, reply: str) -> None:
    question = "How many polls were there in October 2016?"
    asked = polls.planner.plan(question)
    answered = polls.planner.plan(reply, context=PlanContext(turns=[turn_of(question, asked)]))
    assert answered.intent is not None and answered.intent.time_column == "enddate", (answered.clarification, answered.notes)
    assert rows(polls, answered) == expected(polls, OCTOBER_BY_END)
    follow_up = polls.planner.plan("what about by pollster?", context=PlanContext(turns=[turn_of(question, asked), turn_of(reply, answered)]))
    assert follow_up.intent is not None and follow_up.intent.time_column == "enddate", (follow_up.clarification, follow_up.notes)
    assert sorted(rows(polls, follow_up)) == sorted(
        expected(polls, OCTOBER_BY_END.replace("COUNT(*)", "pollster, COUNT(*)") + " GROUP BY pollster")
    )


def test_a_stored_intent_or_option_naming_another_column_is_refused(polls: Polls) -> None:
    forged = Intent(metric="poll_count", time_window=TimeWindow(start=date(2016, 10, 1), end=date(2016, 11, 1)), time_column="pollster")
    assert polls.planner.stored_intent_problem(forged) == "'pollster' is not a date poll_count is read by"
    with pytest.raises(CompileError, match="not a date poll_count may be read by"):
        compile_intent(forged, polls.planner.catalog)
    hostile = forged.model_copy(update={"time_column": "enddate) UNION SELECT 1 --"})
    with pytest.raises(CompileError):
        compile_intent(hostile, polls.planner.catalog)
    question = "How many polls were there in October 2016?"
    asked = polls.planner.plan(question)
    assert asked.clarification is not None
    tampered = asked.clarification.model_copy(update={"targets": [{"time_column": "startdate"}, {"time_column": "pollster"}]})
    turn = PreviousTurn(question=question, status="needs_clarification", clarification=tampered.model_dump(mode="json"))
    plan = polls.planner.plan("enddate", context=PlanContext(turns=[turn]))
    assert not (plan.intent is not None and plan.intent.time_column == "pollster")
    assert plan.sql is None or "pollster >=" not in plan.sql.lower()


def test_a_model_without_other_dates_never_asks() -> None:
    model = polls_model(other_dates=False)
    plan = RulePlanner(model, EntityIndex.static(model), today=TODAY).plan("How many polls were there in October 2016?")
    assert plan.status == "planned" and plan.intent is not None and plan.intent.time_column is None


def test_the_model_checks_its_other_dates() -> None:
    document = polls_model().model_dump(mode="json")
    assert model_problems(Catalog.model_validate(document)) == []
    document["sources"][0]["other_time_columns"] = ["startdate"]
    with pytest.raises(ValueError, match=r"sources\[0\]\.other_time_columns: a date is named twice"):
        Catalog.model_validate(document)


def test_the_draft_lists_the_other_dates(polls: Polls) -> None:
    source = draft_model(read_catalog_facts(polls.warehouse), name="polls", today=TODAY)["sources"][0]
    assert source["time_column"] in ("startdate", "enddate")
    assert source["other_time_columns"] == [c for c in ("startdate", "enddate") if c != source["time_column"]]


@pytest.mark.parametrize(
    ("column", "words"),
    [
        ("enddate", ("end date", "enddate")),
        ("end_date", ("end date", "end_date")),
        ("l_receiptdate", ("l receiptdate", "l_receiptdate", "receipt date", "receiptdate")),  # TPC-H's table prefix
        ("polls.created_at", ("created at", "created_at")),
    ],
)
def test_the_words_a_date_is_named_by(column: str, words: tuple[str, ...]) -> None:
    assert date_words(column) == words
