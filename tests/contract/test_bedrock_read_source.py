"""The Bedrock planner's ``read_source`` tool, against the requests botocore really sends to
Converse (tests/contract/bedrock_double.py: a scripted double of the Converse API, not the
service). The sources are real: a SourceLibrary over the SQLite store and file bodies, read for
the request's tenant through the runtime's shelf (memtool.runtime.knowledge.TenantShelf)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from memtool.clock import FrozenClock
from memtool.identity import Identity
from memtool.knowledge.bodies import FileSourceBodies
from memtool.knowledge.sources import SourceKind, SourceLibrary
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.planning.bedrock_planner import BedrockPlanner
from memtool.planning.context import PlanContext
from memtool.planning.rule_planner import RulePlanner
from memtool.planning.sources import MAX_SOURCE_READS
from memtool.runtime.knowledge import TenantShelf
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from tests.contract.bedrock_double import Scripted, ScriptedBedrock, bedrock_runtime_client, scripted_in_turn

TODAY = date(2026, 11, 29)
MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
LAST_MONTH = {"start": "2026-10-01", "end": "2026-11-01", "label": "上个月"}
# An ETL file longer than two pages: the model reads it in pieces.
ETL = "-- 净收入口径 (net revenue): paid, non-test lines minus their refunds\n" + "".join(
    f"INSERT INTO mart.step_{i:03d} SELECT order_id, SUM(gross_amount - discount_amount) FROM fact_order_line WHERE is_test = FALSE;\n"
    for i in range(330)
)


def answer(*blocks: dict[str, Any]) -> Scripted:
    return Scripted(
        200,
        {
            "output": {"message": {"role": "assistant", "content": list(blocks)}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 1800, "outputTokens": 60, "totalTokens": 1860},
            "metrics": {"latencyMs": 1},
        },
    )


def use(name: str, payload: dict[str, Any], use_id: str) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": use_id, "name": name, "input": payload}}


@pytest.fixture
def library(tmp_path: Path) -> SourceLibrary:
    store = SQLiteMemoryStore(tmp_path / "memtool.sqlite3")
    return SourceLibrary(store, FileSourceBodies(tmp_path / "sources"), FrozenClock(datetime(2026, 11, 29, 9, 0, tzinfo=UTC)))


def planner_over(library: SourceLibrary, *responses: Scripted) -> tuple[BedrockPlanner, ScriptedBedrock]:
    catalog = load_catalog()
    entities = EntityIndex.static(catalog)
    double = ScriptedBedrock(scripted_in_turn(*responses, caller="the planner"))
    planner = BedrockPlanner(
        bedrock_runtime_client(double, "Converse"),
        model_id=MODEL_ID,
        catalog=catalog,
        entities=entities,
        today=TODAY,
        fallback=RulePlanner(catalog, entities, TODAY),
        sleep=lambda _: None,
        sources=lambda tenant: TenantShelf(library, tenant),
    )
    return planner, double


def test_the_planner_reads_a_long_etl_file_in_pages_and_cites_what_it_read(library: SourceLibrary) -> None:
    curator = Identity(tenant="acme", user="mei", roles=frozenset({"curator"}))
    etl = library.put(curator, "etl/net_revenue.sql", SourceKind.ETL_SQL, ETL).source
    assert etl.chars > 32_000
    intent = {"metric": "net_revenue", "time_window": LAST_MONTH}
    planner, double = planner_over(
        library,
        answer(use("read_source", {"source_id": etl.id}, "r1")),
        answer(use("read_source", {"source_id": etl.id, "offset": 16_000}, "r2")),
        answer(use("propose_intent", intent, "p1")),
    )

    plan = planner.plan("上个月净收入", route="nl2sql_query", context=PlanContext(tenant="acme", user="li"))

    assert plan.status == "planned" and plan.intent is not None and plan.intent.metric == "net_revenue"
    first, second, third = (r.json for r in double.requests)
    offered = [t["toolSpec"]["name"] for t in first["toolConfig"]["tools"]]
    assert offered == ["propose_intent", "propose_sql", "ask_clarification", "read_source"]
    assert f'"source_id": "{etl.id}"' in double.requests[0].user_text and "etl/net_revenue.sql" in double.requests[0].user_text
    # Each page goes back as the tool's JSON result, as GET /sources/{id}/read answers it
    [page_one] = second["messages"][-1]["content"]
    assert page_one["toolResult"]["toolUseId"] == "r1" and page_one["toolResult"]["status"] == "success"
    body = page_one["toolResult"]["content"][0]["json"]
    assert body["text"] == ETL[:16_000] and body["next_offset"] == 16_000 and body["complete"] is False
    [page_two] = third["messages"][-1]["content"]
    assert page_two["toolResult"]["content"][0]["json"]["text"] == ETL[16_000:32_000]
    # And the plan cites both pages of the version it read
    cited = [c for c in plan.citations if c.source.startswith("source:")]
    assert [c.source for c in cited] == [f"source:{etl.id}@v1", f"source:{etl.id}@v1"]
    assert cited[0].text == "etl/net_revenue.sql v1, characters 0-16,000"


def test_another_tenants_sources_are_neither_listed_nor_readable(library: SourceLibrary) -> None:
    curator = Identity(tenant="acme", user="mei", roles=frozenset({"curator"}))
    etl = library.put(curator, "etl/net_revenue.sql", SourceKind.ETL_SQL, ETL).source
    other = Identity(tenant="globex", user="ann", roles=frozenset({"curator"}))
    mine = library.put(other, "glossary.md", SourceKind.DOCUMENT, "GMV = 含税销售额").source
    planner, double = planner_over(
        library,
        answer(use("read_source", {"source_id": etl.id}, "r1")),  # acme's id, asked for by globex's request
        answer(use("propose_intent", {"metric": "gross_revenue", "time_window": LAST_MONTH}, "p1")),
    )

    plan = planner.plan("上个月销售额", route="nl2sql_query", context=PlanContext(tenant="globex", user="ann"))

    assert plan.status == "planned"
    listed = double.requests[0].user_text
    assert mine.id in listed and etl.id not in listed and "net_revenue.sql" not in listed
    [refused] = double.requests[1].json["messages"][-1]["content"]
    assert refused["toolResult"]["status"] == "error"
    assert refused["toolResult"]["content"][0]["text"] == f"read_source: source {etl.id} not found"
    assert not [c for c in plan.citations if c.source.startswith("source:")]


def test_without_sources_the_tool_is_not_offered(library: SourceLibrary) -> None:
    planner, double = planner_over(library, answer(use("propose_intent", {"metric": "net_revenue", "time_window": LAST_MONTH}, "p1")))
    planner.plan("上个月净收入", route="nl2sql_query", context=PlanContext(tenant="acme", user="li"))
    offered = [t["toolSpec"]["name"] for t in double.requests[0].json["toolConfig"]["tools"]]
    assert "read_source" not in offered and "<sources>" not in double.requests[0].user_text


def test_reading_is_bounded_and_bad_reads_are_told_to_the_model(library: SourceLibrary) -> None:
    curator = Identity(tenant="acme", user="mei", roles=frozenset({"curator"}))
    etl = library.put(curator, "etl/net_revenue.sql", SourceKind.ETL_SQL, ETL).source
    bad = answer(use("read_source", {"source_id": etl.id, "offset": 10_000_000}, "r0"))
    endless = [answer(use("read_source", {"source_id": etl.id, "limit": 10}, f"r{i}")) for i in range(1, MAX_SOURCE_READS + 3)]
    planner, double = planner_over(library, bad, *endless)

    plan = planner.plan("上个月净收入", route="nl2sql_query", context=PlanContext(tenant="acme", user="li"))

    [told] = double.requests[1].json["messages"][-1]["content"]
    assert told["toolResult"]["status"] == "error" and "offset" in told["toolResult"]["content"][0]["text"]
    # The reading turns stop at the budget; read_source is then no longer offered, and a model that
    # keeps reading is answered by the rule planner: the conversation always ends.
    tools_by_request = [[t["toolSpec"]["name"] for t in r.json["toolConfig"]["tools"]] for r in double.requests]
    assert tools_by_request[: MAX_SOURCE_READS] == [tools_by_request[0]] * MAX_SOURCE_READS
    assert "read_source" in tools_by_request[0] and "read_source" not in tools_by_request[MAX_SOURCE_READS]
    assert len(double.requests) == MAX_SOURCE_READS + 2  # 8 reading turns, then two rejected answers
    assert any("proposed an invalid plan twice" in note and "planned by the rule planner" in note for note in plan.notes), plan.notes
    assert len([c for c in plan.citations if c.source.startswith("source:")]) == 0  # the rules' plan cites no page
