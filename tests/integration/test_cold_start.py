"""A flow step's cold start builds only what that step needs.

Building the planner reads the warehouse's entity values (a SELECT DISTINCT per dimension) and,
with MEMTOOL_PLANNER=bedrock, makes a Bedrock client; recall makes the embedder's. Record and
Visualize need neither, so a cold container running them must not pay for them: the planner,
recall and the warehouse are built by the first step that uses them.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from memtool.flows.ask.state import AskInput, AskState, Caller
from memtool.runtime import container
from memtool.settings import Settings, use_settings
from memtool.sql.warehouse import QueryResult


class CountingWarehouse:
    """A warehouse double that answers every query with no rows and counts what it was asked."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def dialect(self) -> str:
        return "duckdb"

    def run(self, sql: str, *, max_rows: int, timeout_seconds: float, params: Any = None) -> QueryResult:
        self.queries.append(sql)
        return QueryResult(columns=["value"], rows=[], row_count=0, truncated=False, elapsed_ms=0.0)

    def describe(self, *, refresh: bool = False) -> Any:
        self.queries.append("<describe>")
        raise RuntimeError("no schema in this double")


@pytest.fixture
def cold(tmp_path, clock, monkeypatch) -> tuple[CountingWarehouse, list[str]]:
    """A fresh container configured as in AWS (Bedrock planner and embedder), with the warehouse
    and every AWS client replaced by doubles that record their use."""
    use_settings(
        Settings(
            runtime="local",
            home=tmp_path,
            store="sqlite",
            planner="bedrock",
            embedder="bedrock",
            diagnose_queue="none",
            today=date(2026, 11, 29),
        )
    )
    container.reset()
    warehouse = CountingWarehouse()
    clients: list[str] = []

    def client(service: str, settings: Any = None, **options: Any) -> object:
        clients.append(service)
        return object()

    monkeypatch.setattr("memtool.runtime.aws.client", client)
    monkeypatch.setattr(container, "warehouse", lambda tenant=None: warehouse)
    yield warehouse, clients
    container.reset()


def answered_state(episode_id: str) -> dict[str, Any]:
    return AskState(
        episode_id=episode_id,
        caller=Caller(tenant="acme-cold", user="li"),
        input=AskInput(question="上个月各渠道的净收入", session_id="s-cold"),
        started_at="2026-11-29T09:00:00+00:00",
        route="nl2sql_query",
        plan_status="ready",
        sql="SELECT channel, SUM(net) AS net_revenue FROM fact GROUP BY 1",
        guard_status="passed",
        result={"columns": ["channel", "net_revenue"], "rows": [["app", 10.0], ["store", 7.5]], "row_count": 2, "elapsed_ms": 3.0},
    ).model_dump(mode="json")


@pytest.mark.parametrize("step", ["Record", "Visualize"])
def test_record_and_visualize_on_a_cold_container_query_no_warehouse_and_make_no_bedrock_client(cold, step):
    warehouse, clients = cold

    after = container.ask_steps().run(step, answered_state(f"ep_cold_{step.lower()}"))

    assert after["status" if step == "Record" else "chart"] is not None  # the step did its work
    assert warehouse.queries == []
    assert not {"bedrock-runtime", "bedrock", "secretsmanager", "redshift", "redshift-data"} & set(clients), clients


def test_the_first_step_that_plans_builds_the_planner_with_its_entity_values(cold):
    # The same doubles see what a cold start used to pay for: the doubles are not blind.
    warehouse, clients = cold
    steps = container.ask_steps()
    assert warehouse.queries == [] and clients == []

    container.question_parser()  # what Plan, PlanAnalyses and the few-shot search build first

    assert any(sql.startswith("SELECT DISTINCT") for sql in warehouse.queries)
    assert "bedrock-runtime" in clients
    assert steps is not None
