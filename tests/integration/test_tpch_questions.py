"""memtool on a second domain, TPC-H: a fresh warehouse, the model `memtool model init` drafts
from it, the model curated from that draft (examples/tpch/model.yaml), and the repository's TPC-H
questions (tests/tpch_questions.py, English and Chinese) answered correctly by value.

Every answer is planned by the rule planner from the question alone, compiled from the curated
model, run on DuckDB and compared with the question's hand-written SQL run on a copy of the file.
Grouping columns may come in another order than the hand-written SQL's (the compiler puts a time
grain first); their values, and the measures' values, must match.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import Catalog, load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.sql.duckdb_warehouse import DuckDBWarehouse
from tests.integration.test_questions_by_value import same_rows
from tests.tpch_questions import QUESTIONS, TpchQuestion

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "tpch" / "model.yaml"
DRAFT = ROOT / "examples" / "tpch" / "model.draft.yaml"
TODAY = date(1998, 8, 3)  # the day after the last order: the data set is history
DRAFTED_ON = date(2026, 12, 2)  # the day examples/tpch/model.draft.yaml was drafted: its description names it
REQUIRED_ACCURACY = 0.9


@dataclass
class Tpch:
    path: Path
    warehouse: DuckDBWarehouse
    planner: RulePlanner
    reference: Any


@pytest.fixture(scope="module")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tpch]:
    import duckdb

    from memtool.datasets.tpch import build_tpch_warehouse

    root = tmp_path_factory.mktemp("tpch")
    path = root / "tpch.duckdb"
    build_tpch_warehouse(path, scale=0.01)
    copy = root / "reference.duckdb"
    shutil.copyfile(path, copy)
    warehouse = DuckDBWarehouse(path)
    model = load_catalog(MODEL)
    planner = RulePlanner(model, EntityIndex.from_warehouse(warehouse, model), today=TODAY)
    reference = duckdb.connect(str(copy), read_only=True)
    try:
        yield Tpch(path, warehouse, planner, reference)
    finally:
        reference.close()
        warehouse.close()


@pytest.fixture(scope="module")
def answers(tpch: Tpch) -> dict[str, tuple[bool, str]]:
    """Every question answered once: the per-question tests and the overall count read the same answers."""
    return {q.id: answer(tpch, q) for q in QUESTIONS}


def answer(tpch: Tpch, question: TpchQuestion) -> tuple[bool, str]:
    """Whether the planned answer equals the hand-written SQL's, and what was planned."""
    plan = tpch.planner.plan(question.question)
    if plan.status != "planned" or plan.sql is None:
        why = plan.clarification.question if plan.clarification else plan.status
        return False, f"{question.question!r} was not planned: {why}"
    result = tpch.warehouse.run(plan.sql, max_rows=5000, timeout_seconds=30)
    expected = tpch.reference.execute(question.expected_sql).fetchall()
    good = not result.truncated and bool(result.rows) and same_in_any_group_order(result.rows, expected, ordered=question.ordered)
    intent = plan.intent.model_dump(mode="json", exclude_none=True) if plan.intent else None
    return good, f"{question.question!r}\nintent {intent}\nSQL:\n{plan.sql}\ngot      {result.rows[:6]}\nexpected {expected[:6]}"


def same_in_any_group_order(actual: list[list[Any]], expected: list[tuple[Any, ...]], *, ordered: bool) -> bool:
    """Rows equal by value, the leading grouping columns in some order, the measures in theirs."""
    if not actual or not expected or len(actual[0]) != len(expected[0]):
        return False
    width = len(expected[0])
    groups = [i for i in range(width) if not _numeric(expected[0][i])]
    measures = [i for i in range(width) if i not in groups]
    for order in itertools.permutations(groups):
        columns = [*order, *measures]
        if same_rows([[row[i] for i in columns] for row in actual], [tuple(row[i] for i in [*groups, *measures]) for row in expected],
                     ordered=ordered):  # fmt: skip
            return True
    return False


def _numeric(value: Any) -> bool:
    from decimal import Decimal

    return isinstance(value, (int, float, Decimal)) and not isinstance(value, bool)


@pytest.mark.parametrize("question", QUESTIONS, ids=str)
def test_the_tpch_question_is_answered_by_value(answers: dict[str, tuple[bool, str]], question: TpchQuestion) -> None:
    good, detail = answers[question.id]
    assert good, detail


def test_at_least_ninety_percent_of_the_tpch_questions_are_answered_by_value(answers: dict[str, tuple[bool, str]]) -> None:
    results = {qid: good for qid, (good, _) in answers.items()}
    shapes = {q.shape for q in QUESTIONS}
    assert len(shapes) >= 15 and all({q.lang for q in QUESTIONS if q.shape == s} == {"en", "zh"} for s in shapes)
    accuracy = sum(results.values()) / len(results)
    assert accuracy >= REQUIRED_ACCURACY, sorted(k for k, v in results.items() if not v)


def test_the_comparison_would_catch_a_wrong_answer(tpch: Tpch) -> None:
    # the same question with another year must not match: the by-value check is not vacuous
    question = next(q for q in QUESTIONS if q.id == "by_segment-en")
    wrong = TpchQuestion(question.id, question.shape, question.lang, question.question.replace("1996", "1995"), question.expected_sql)
    assert answer(tpch, wrong)[0] is False
    assert not same_in_any_group_order([["AUTOMOBILE", 1.0]], [("AUTOMOBILE", 1.01)], ordered=False)


def test_the_curated_model_is_built_on_what_model_init_drafts_from_a_fresh_warehouse(tpch: Tpch) -> None:
    """examples/tpch/model.draft.yaml is what `memtool model init` writes for this warehouse, and the
    curated model keeps its tables and every join it found (nation and region in two roles each)."""
    from memtool.semantic.introspect import draft_model, read_catalog_facts

    drafted = draft_model(read_catalog_facts(tpch.warehouse), name="tpch", today=DRAFTED_ON)
    committed = yaml.safe_load(DRAFT.read_text(encoding="utf-8"))
    assert Catalog.model_validate(drafted) == Catalog.model_validate(committed)

    curated = load_catalog(MODEL)
    draft = Catalog.model_validate(drafted)
    assert set(curated.physical_tables) <= set(draft.physical_tables)

    def physical_joins(model: Catalog) -> set[tuple[str, str, tuple[tuple[str, str], ...]]]:
        return {(model.table(j.left).physical, model.table(j.right).physical, tuple(j.pairs())) for j in model.joins}

    wanted = {j for j in physical_joins(draft) if "partsupp" not in j[:2]}  # partsupp is not curated: no question reads it
    assert wanted <= physical_joins(curated)
