"""Pre-fill over HTTP on the local runtime (docs/knowledge.md, Pre-fill): suggestions from a DDL
file and an ETL SQL file, with lineage and quotes found in the sources; a human override wins;
a late suggestion whose target moved on is superseded."""

from __future__ import annotations

from typing import Any

CURATOR = "curator"

DDL = """-- the order lines and refunds of the pharma warehouse
CREATE TABLE fact_order_line (
  order_id BIGINT NOT NULL,
  line_id INT NOT NULL,
  paid_at TIMESTAMP, -- when the line was paid; NULL: never paid
  region_id INT,
  gross_amount DECIMAL(12,2), -- 含税销售额 (元)
  discount_amount DECIMAL(12,2) COMMENT '渠道折扣',
  is_test BOOLEAN, -- test orders, never revenue
  PRIMARY KEY (order_id, line_id)
);
CREATE TABLE fact_refund (
  refund_id BIGINT PRIMARY KEY,
  order_id BIGINT,
  line_id INT,
  refund_amount DECIMAL(12,2) -- 退款金额
);
CREATE TABLE dim_region (region_id INT PRIMARY KEY, region_name VARCHAR);
CREATE TABLE mart.daily_revenue (
  day DATE,
  region VARCHAR,
  net_revenue DECIMAL(14,2) -- 净收入
);
COMMENT ON COLUMN dim_region.region_name IS '大区名称';
"""

ETL = """-- loads mart.daily_revenue every night
INSERT INTO mart.daily_revenue (day, region, net_revenue)
WITH refunds AS (
  SELECT order_id, line_id, SUM(refund_amount) AS refunded FROM fact_refund GROUP BY order_id, line_id
)
SELECT CAST(ol.paid_at AS DATE) AS day,
       r.region_name AS region,
       SUM(ol.gross_amount - ol.discount_amount) - SUM(COALESCE(rf.refunded, 0)) AS net_revenue
FROM fact_order_line ol
JOIN dim_region r ON r.region_id = ol.region_id
LEFT JOIN refunds rf ON rf.order_id = ol.order_id AND rf.line_id = ol.line_id
WHERE ol.is_test = FALSE
  AND ol.paid_at IS NOT NULL
GROUP BY 1, 2;
"""


def curator(api, method: str, path: str, body: Any = None, **kwargs: Any):
    return api.call(method, path, body, roles=CURATOR, **kwargs)


def source(api, name: str, kind: str, text: str) -> dict[str, Any]:
    reply = curator(api, "POST", "/sources", {"name": name, "kind": kind, "text": text})
    assert reply.status in (200, 201), reply.body
    return reply.json()["source"]


def whole_text(api, source_id: str, version: int) -> str:
    parts, offset = [], 0
    while offset is not None:
        page = api.call("GET", f"/sources/{source_id}/read", query={"version": str(version), "offset": str(offset)}).json()
        parts.append(page["text"])
        offset = page["next_offset"]
    return "".join(parts)


def suggestions(api, **query: str) -> dict[str, dict[str, Any]]:
    reply = api.call("GET", "/suggestions", query={"limit": "100", **query})
    assert reply.status == 200, reply.body
    return {item["target"]: item for item in reply.json()["items"]}


def test_a_prefill_over_ddl_and_etl_suggests_lineage_definitions_quoted_from_the_sources(api):
    ddl, etl = source(api, "ddl/warehouse.sql", "ddl", DDL), source(api, "etl/daily_revenue.sql", "etl_sql", ETL)
    made = curator(api, "POST", "/prefill", {"source_ids": [ddl["id"], etl["id"]]})
    assert made.status == 201, made.body
    task = made.json()
    assert task["state"] == "done" and [(s["id"], s["version"]) for s in task["sources"]] == [(ddl["id"], 1), (etl["id"], 1)]
    assert len(task["input_fingerprint"]) == 64
    assert {t["outcome"] for t in task["targets"]} == {"written"} and all(t["expected_version"] == 0 for t in task["targets"])

    found = suggestions(api)
    net = found["mart.daily_revenue.net_revenue"]
    lineage = net["suggestion"]["lineage"]
    assert lineage["inputs"] == ["fact_order_line.discount_amount", "fact_order_line.gross_amount", "fact_refund.refund_amount"]
    assert lineage["filters"] == ["ol.is_test = FALSE", "ol.paid_at IS NOT NULL"]
    assert net["effective_value"] == net["suggestion"]["text"] and net["human_override"] is None
    assert net["review_state"] == "unverified" and net["version"] == 1
    assert "净收入" in net["effective_value"]  # the target column's DDL comment
    quotes = {f["quote"] for f in net["source_facts"]}
    assert "SUM(ol.gross_amount - ol.discount_amount) - SUM(COALESCE(rf.refunded, 0)) AS net_revenue" in quotes
    assert {"WHERE ol.is_test = FALSE", "AND ol.paid_at IS NOT NULL", "net_revenue DECIMAL(14,2) -- 净收入"} <= quotes
    texts = {ddl["id"]: whole_text(api, ddl["id"], 1), etl["id"]: whole_text(api, etl["id"], 1)}
    for item in found.values():  # every fact of every suggestion is found, verbatim, in the version it cites
        assert item["source_facts"], item["target"]
        for fact in item["source_facts"]:
            assert fact["version"] == 1 and fact["quote"] in texts[fact["source_id"]], (item["target"], fact)
    assert found["mart.daily_revenue.region"]["suggestion"]["lineage"]["inputs"] == ["dim_region.region_name"]
    assert found["fact_order_line.discount_amount"]["effective_value"] == "fact_order_line.discount_amount (DECIMAL(12,2)): 渠道折扣"
    assert found["dim_region.region_name"]["effective_value"].endswith("大区名称")  # from COMMENT ON COLUMN
    assert "fact_order_line.region_id: no comment in its DDL and no ETL among the sources feeds it" in task["gaps"]


def test_a_human_override_made_before_a_late_suggestion_survives_and_the_late_one_is_superseded(api):
    ddl, etl = source(api, "ddl/warehouse.sql", "ddl", DDL), source(api, "etl/daily_revenue.sql", "etl_sql", ETL)
    curator(api, "POST", "/prefill", {"source_ids": [ddl["id"], etl["id"]]})
    net = suggestions(api)["mart.daily_revenue.net_revenue"]

    late = curator(api, "POST", "/prefill", {"source_ids": [ddl["id"], etl["id"]], "run": False}).json()
    assert late["state"] == "planned"
    [expected] = [t for t in late["targets"] if t["target"] == "mart.daily_revenue.net_revenue"]
    assert expected["expected_version"] == 1 and expected["outcome"] is None

    human = "净收入 = 含税销售额 − 渠道折扣 − 退款（财务口径，退款按原订单支付日归属）"
    plain = api.call("POST", f"/suggestions/{net['id']}/override", {"text": human, "expected_version": 1})
    assert plain.status == 403 and plain.json()["field"] == "roles"
    overridden = curator(api, "POST", f"/suggestions/{net['id']}/override", {"text": human, "expected_version": 1, "reason": "finance"})
    assert overridden.status == 200, overridden.body
    assert overridden.json()["version"] == 2 and overridden.json()["effective_value"] == human
    assert overridden.json()["review_state"] == "reviewed" and overridden.json()["human_override"]["by"] == "li"

    ran = curator(api, "POST", f"/prefill/{late['id']}/run")
    assert ran.status == 200, ran.body
    outcomes = {t["target"]: t["outcome"] for t in ran.json()["targets"]}
    assert outcomes["mart.daily_revenue.net_revenue"] == "superseded"
    assert {o for t, o in outcomes.items() if t != "mart.daily_revenue.net_revenue"} == {"unchanged"}
    after = api.call("GET", f"/suggestions/{net['id']}").json()
    assert (after["version"], after["effective_value"], after["human_override"]["text"]) == (2, human, human)
    assert curator(api, "POST", f"/prefill/{late['id']}/run").status == 409  # a task runs once

    # A task planned after the override (a changed ETL) refreshes the suggestion beside it; the override stays.
    changed = ETL.replace("WHERE ol.is_test = FALSE", "WHERE ol.is_test = FALSE AND ol.qty > 0")
    etl2 = source(api, "etl/daily_revenue.sql", "etl_sql", changed)
    assert etl2["version"] == 2
    newer = curator(api, "POST", "/prefill", {"source_ids": [ddl["id"], etl["id"]]}).json()
    assert {(s["id"], s["version"]) for s in newer["sources"]} == {(ddl["id"], 1), (etl["id"], 2)}
    assert {t["target"]: t["outcome"] for t in newer["targets"]}["mart.daily_revenue.net_revenue"] == "kept_override"
    kept = api.call("GET", f"/suggestions/{net['id']}").json()
    assert kept["effective_value"] == human and kept["review_state"] == "needs_review"
    assert "ol.qty > 0" in kept["suggestion"]["text"] and kept["suggestion"]["task_id"] == newer["id"]
    assert [t["id"] for t in suggestions(api, review_state="needs_review").values()] == [net["id"]]
    reviewed = curator(api, "POST", f"/suggestions/{net['id']}/review", {"expected_version": kept["version"]})
    assert reviewed.status == 200 and reviewed.json()["review_state"] == "reviewed" and reviewed.json()["effective_value"] == human


def test_prefill_is_for_curators_inside_their_tenant_and_bad_input_names_its_field(api):
    ddl = source(api, "ddl/warehouse.sql", "ddl", DDL)
    refused = api.call("POST", "/prefill", {"source_ids": [ddl["id"]]})
    assert refused.status == 403 and refused.json()["field"] == "roles"
    for body, field, status in (
        ({"source_ids": []}, "source_ids", 400),
        ({"source_ids": ["mem_nothing"]}, "source_ids.0", 404),
        ({"source_ids": [ddl["id"]], "extra": 1}, "extra", 400),
    ):
        reply = curator(api, "POST", "/prefill", body)
        assert reply.status == status and reply.json()["field"] == field, (body, reply.body)
    other = api.call("POST", "/prefill", {"source_ids": [ddl["id"]]}, as_user=("globex", "li"), roles=CURATOR)
    assert other.status == 404 and other.json()["field"] == "source_ids.0"
    assert suggestions(api) == {}  # nothing was written

    task = curator(api, "POST", "/prefill", {"source_ids": [ddl["id"]]}).json()
    item = next(iter(suggestions(api).values()))
    assert api.call("GET", f"/prefill/{task['id']}", as_user=("globex", "li"), roles=CURATOR).status == 404
    assert api.call("GET", f"/suggestions/{item['id']}", as_user=("globex", "li")).status == 404
    stale = curator(api, "POST", f"/suggestions/{item['id']}/override", {"text": "x", "expected_version": 7})
    assert stale.status == 409, stale.body
    forged = curator(api, "PATCH", f"/memories/{item['id']}", {"expected_version": 1, "content": "forged"})
    assert forged.status == 403 and forged.json()["field"] == "key", forged.body


def test_an_override_is_redacted_and_suggestions_and_tasks_cannot_be_deleted_through_memories(api):
    ddl = source(api, "ddl/warehouse.sql", "ddl", DDL)
    task = curator(api, "POST", "/prefill", {"source_ids": [ddl["id"]]}).json()
    item = next(iter(suggestions(api).values()))
    overridden = curator(api, "POST", f"/suggestions/{item['id']}/override", {"text": "ask 13812345678", "expected_version": 1})
    assert overridden.status == 200 and "13812345678" not in overridden.body
    for record in (item["id"], task["id"]):
        refused = curator(api, "DELETE", f"/memories/{record}")
        assert refused.status == 403 and refused.json()["field"] == "id", refused.body
    assert api.call("GET", f"/suggestions/{item['id']}").json()["human_override"]["text"] == "ask [PHONE]"
    for body, field in (({"source_ids": [ddl["id"]], "run": "yes"}, "run"),):
        reply = curator(api, "POST", "/prefill", body)
        assert reply.status == 400 and reply.json()["field"] == field
