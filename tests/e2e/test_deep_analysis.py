"""The deep-analysis route end to end: POST /ask through the real AskFlow on moto's Step Functions
engine (PlanAnalyses, the Map over the analysis functions, Summarize), the real code interpreter
in the local process sandbox, the real ML tools, over the demo warehouse with its planted anomalies
(a 2026-06 质量问题 refund spike of 盐酸氨溴索口服溶液, a 2026-09 drop in 武汉)."""

from __future__ import annotations

import base64
import json
import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from memtool.runtime import container
from memtool.settings import get_settings, use_settings

from tests.support import Api


def ask(api: Api, question: str, **body) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **body})
    assert reply.status == 200, reply.body
    return reply.json()


def warehouse_value(path: Path, sql: str) -> Decimal:
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    warehouse = DuckDBWarehouse(path)  # the adapter's own connection settings (DuckDB refuses mixed ones)
    try:
        return Decimal(str(warehouse.run(sql, max_rows=1, timeout_seconds=10).rows[0][0]))
    finally:
        warehouse.close()


def months(answer: dict) -> list[str]:
    return [str(row[0])[:7] for row in answer["rows"]]


def test_an_anomaly_question_scans_its_series_in_the_sandbox_and_says_what_it_found(api, aws):
    answer = ask(api, "上海医院渠道最近三个月的净收入有没有异常？")

    assert (answer["status"], answer["route"]) == ("answered", "deep_analysis_workflow"), answer
    analysis = answer["analysis"]
    assert analysis["status"] == "complete"
    [run] = analysis["analyses"]
    assert (run["kind"], run["tool"], run["runner"]) == ("anomaly", "code_interpreter", "sandbox")  # 14 rows <= 200
    assert run["isolation"].startswith("local-process")
    result = analysis["result"]
    assert [p["label"] for p in result["points"]] == months(answer)
    # The months asked about (2026-08..10) hold no planted anomaly, and the answer says so.
    assert not set(result["anomalies"]) & {"2026-08", "2026-09", "2026-10"}
    assert answer["answer"] == analysis["summary"]
    assert analysis["summary"].startswith("上海 · 医院：在所问期间（2026-08 至 2026-10）没有异常点")
    # The chart is the analysis's, and the sandbox's PNG rides along.
    assert answer["chart"]["of"] == "analysis:anomaly"
    png = analysis["chart_png"]
    assert png["content_type"] == "image/png" and base64.b64decode(png["data_base64"]).startswith(b"\x89PNG\r\n\x1a\n")


def test_why_were_refunds_high_in_june_finds_the_planted_spike_and_names_it(api, aws, demo_warehouse):
    answer = ask(api, "2026年6月退款为什么异常高")

    assert answer["status"] == "answered", answer
    analysis = answer["analysis"]
    kinds = [a["kind"] for a in analysis["analyses"]]
    assert kinds == ["anomaly", "segments", "attribution"]  # 异常 and 为什么: each ran in the Map
    summary = analysis["summary"]
    assert "2026-06" in summary and "盐酸氨溴索口服溶液" in summary and "质量问题" in summary
    # The product's own series flags June far above its expected value.
    [segments] = [a["result"] for a in analysis["analyses"] if a["kind"] == "segments"]  # one scan of the movers
    assert segments["focus"] == "2026-06" and segments["hits"][0]["member"] == "盐酸氨溴索口服溶液"
    [spike] = [m for m in segments["members"] if (m["dimension"], m["member"]) == ("product", "盐酸氨溴索口服溶液")]
    june = next(p for p in spike["points"] if p["label"] == "2026-06")
    assert june["flagged_by"] and june["z"] > 5 and june["value"] > 5 * june["expected"]
    # The attribution's parts sum exactly to the change, which is the warehouse's own.
    [attribution] = [a["result"] for a in analysis["analyses"] if a["kind"] == "attribution"]
    assert (attribution["before_period"], attribution["after_period"]) == ("2026-05", "2026-06")
    truth = {
        month: warehouse_value(
            demo_warehouse,
            "SELECT COALESCE(SUM(r.refund_amount), 0) FROM fact_refund r JOIN fact_order_line ol USING (order_id, line_id) "
            f"WHERE NOT ol.is_test AND ol.paid_at IS NOT NULL AND strftime(ol.paid_at, '%Y-%m') = '{month}'",
        )
        for month in ("2026-05", "2026-06")
    }
    change = Decimal(str(attribution["total_change"]))
    assert change == truth["2026-06"] - truth["2026-05"]
    for dimension in attribution["dimensions"]:
        assert sum(Decimal(str(c["delta"])) for c in dimension["contributions"]) == change, dimension["dimension"]
    by_reason = next(d for d in attribution["dimensions"] if d["dimension"] == "refund_reason")
    assert by_reason["largest_increase"] == "质量问题"
    # The flow's state stays well inside Step Functions' 256 KB: runs are dropped once summarised,
    # a segment scan keeps only the month asked about.
    assert len(json.dumps(answer, ensure_ascii=False).encode()) < 150_000
    assert all(len(m["points"]) <= 1 for m in segments["members"])


def test_a_forecast_question_returns_intervals_and_a_backtest_error(api, aws):
    answer = ask(api, "预测下季度各区域的销量")

    assert answer["status"] == "answered", answer
    analysis = answer["analysis"]
    [run] = analysis["analyses"]
    assert run["kind"] == "forecast"
    series = analysis["result"]["series"]
    assert {s["group"] for s in series} == {row[1] for row in answer["rows"]}  # one forecast per region
    for one in series:
        quarter = [p for p in one["forecast"] if p["label"] in ("2027-01", "2027-02", "2027-03")]
        assert [p["label"] for p in quarter] == ["2027-01", "2027-02", "2027-03"]
        for point in quarter:
            assert point["lower_95"] <= point["lower_80"] <= point["point"] <= point["upper_80"] <= point["upper_95"]
        assert one["backtest_mape"] is not None and 0 <= one["backtest_mape"] < 1000
    assert "2027-01" in analysis["summary"] and "MAPE" in analysis["summary"] and "2026-11" not in analysis["summary"]


def test_why_did_wuhan_drop_in_september_returns_an_attribution_that_sums_to_the_change(api, aws, demo_warehouse):
    answer = ask(api, "为什么9月武汉的净收入下降了")

    assert answer["status"] == "answered", answer
    analysis = answer["analysis"]
    result = analysis["result"]
    assert analysis["tool"] == "code_interpreter" and (result["before_period"], result["after_period"]) == ("2026-08", "2026-09")
    change = Decimal(str(result["total_change"]))
    assert change < 0
    for dimension in result["dimensions"]:
        assert sum(Decimal(str(c["delta"])) for c in dimension["contributions"]) == change
    assert {d["dimension"] for d in result["dimensions"]} == {"channel", "product"}  # the city is the filter
    assert Decimal(str(result["after_total"])) - Decimal(str(result["before_total"])) == change
    summary = analysis["summary"]
    assert summary.startswith("武汉：") and "2026-09" in summary and "2026-08" in summary
    assert answer["chart"]["type"] == "horizontal_bar"


def test_a_large_table_goes_to_the_ml_tools_and_both_anomaly_methods_run(api, aws):
    use_settings(get_settings().model_copy(update={"analysis_code_rows": 10}))
    try:
        answer = ask(api, "上海医院渠道最近三个月的净收入有没有异常？")
    finally:
        use_settings(aws)
    assert answer["status"] == "answered", answer
    [run] = answer["analysis"]["analyses"]
    assert (run["tool"], run["runner"]) == ("ml_anomaly", "ml")  # 14 rows > 10
    result = run["result"]
    assert result["methods"] == ["robust_z", "isolation_forest"]
    assert all(p["iforest_score"] is not None for p in result["points"])


def test_an_analysis_that_cannot_run_is_reported_never_answered_with_nothing(api, aws, monkeypatch):
    class BrokenSandbox:
        name = "broken"

        def run(self, code, *, files, timeout_seconds, charts=True):
            raise RuntimeError("the sandbox host is on fire")

    monkeypatch.setattr(container, "sandbox", lambda: BrokenSandbox())
    container.tool_registry.cache_clear()
    container.tool_executor.cache_clear()
    try:
        answer = ask(api, "为什么9月武汉的净收入下降了")
    finally:
        container.tool_registry.cache_clear()
        container.tool_executor.cache_clear()

    assert answer["status"] == "partial", answer
    assert answer["rows"], "the data still comes back"
    analysis = answer["analysis"]
    assert analysis["status"] == "failed" and analysis["summary"] is None
    [run] = analysis["analyses"]
    assert run["success"] is False and run["error"]["kind"] == "internal"
    assert "fire" not in json.dumps(answer, ensure_ascii=False)  # internal details stay in the logs
    assert any(n.startswith("the attribution analysis could not run") for n in answer["notes"])
    assert any("no analysis ran" in n for n in answer["notes"])


def test_every_tool_call_is_in_the_episodes_trajectory(api, aws):
    answer = ask(api, "为什么9月武汉的净收入下降了")
    [episode] = api.call("GET", "/memories", query={"kind": "episodic"}).json()["items"]
    calls = [t for t in episode["value"]["trajectory"] if t.get("step") == "tool"]
    assert [c["tool"] for c in calls] == ["code_interpreter"]
    assert calls[0]["success"] and calls[0]["arguments"]["analysis"] == "attribution"
    assert calls[0]["arguments"]["rows"].startswith("<")  # the table is counted, not copied
    assert answer["episode_id"] == episode["provenance"]["episode_id"]


@pytest.mark.parametrize("question", ["净收入怎么算？"])
def test_a_knowledge_question_never_reaches_the_sql_states(api, aws, question):
    answer = ask(api, question)
    assert answer["route"] == "business_knowledge_qa" and answer["answer"]
    assert not {"Guard", "Execute", "PlanAnalyses", "Visualize", "CacheLookup"} & set(answer["timings"])


def test_a_kpi_gets_its_card_without_the_candidate_search(api, aws):
    answer = ask(api, "上个月净收入是多少")
    assert answer["route"] == "kpi_lookup" and answer["chart"]["type"] == "kpi_card"
    assert "VisualizeKpi" in answer["timings"] and "Visualize" not in answer["timings"]
    assert answer["chart"]["candidates"] == [{"type": "kpi_card", "confidence": 0.95, "reason": "kpi_lookup: one number"}]


def test_a_failing_e2b_falls_back_to_the_local_sandbox_and_its_circuit_opens(api, aws, monkeypatch):
    from memtool.analysis.code_interpreter import ResilientSandbox
    from memtool.analysis.sandbox.port import SandboxUnavailable

    class DownE2B:
        name = "e2b"
        calls = 0

        def run(self, code, *, files, timeout_seconds, charts=True):
            DownE2B.calls += 1
            raise SandboxUnavailable("connection refused by api.e2b.app")

    use_settings(aws.model_copy(update={"breaker_failure_threshold": 1, "breaker_cooldown_seconds": 600}))
    resilient = ResilientSandbox(DownE2B(), fallback=container.local_sandbox, breaker=container.breakers().get("e2b"))
    monkeypatch.setattr(container, "sandbox", lambda: resilient)
    container.tool_registry.cache_clear()
    container.tool_executor.cache_clear()
    try:
        first = ask(api, "为什么9月武汉的净收入下降了")
        second = ask(api, "为什么9月武汉的净收入下降了")
        health = container.breakers().health()
    finally:
        container.tool_registry.cache_clear()
        container.tool_executor.cache_clear()
        use_settings(aws)

    for answer in (first, second):
        assert answer["status"] == "answered" and answer["analysis"]["analyses"][0]["isolation"].startswith("local-process")
    assert "attribution: e2b unavailable (connection refused by api.e2b.app); ran in the local process sandbox instead" in first["notes"]
    assert any(n.startswith("attribution: e2b skipped: e2b is skipped for") for n in second["notes"])
    assert DownE2B.calls == 1  # the open circuit kept the second ask away from E2B
    assert health["e2b"]["state"] == "open" and health["e2b"]["calls_skipped"] == 1


def test_a_correlation_question_naming_two_measures_correlates_them_across_cities(api, aws):
    answer = ask(api, "各城市净收入和订单数相关吗")

    assert (answer["status"], answer["route"]) == ("answered", "deep_analysis_workflow"), answer
    [run] = answer["analysis"]["analyses"]
    assert run["kind"] == "correlation"
    [pair] = run["result"]["pairs"]
    assert (pair["x"], pair["y"]) == ("net_revenue", "order_count") and pair["n"] == 10
    assert 0.5 < pair["pearson_r"] <= 1 and 0 <= pair["pearson_p"] < 0.05
    assert "Pearson r" in answer["answer"]


def test_a_month_not_over_is_compared_as_month_to_date(api, aws, demo_warehouse):
    answer = ask(api, "为什么本月的净收入下降了")

    assert answer["status"] == "answered", answer
    result = answer["analysis"]["result"]
    assert (result["before_period"], result["after_period"]) == ("2026-10", "2026-11")
    assert "2026-11 is not over: it is compared as month to date (11-01..11-28) with the same days of 2026-10" in answer["notes"]

    def net(start: str, end: str) -> Decimal:  # the catalog's net revenue, by hand
        return warehouse_value(
            demo_warehouse,
            "WITH r AS (SELECT order_id, line_id, SUM(refund_amount) AS refund FROM fact_refund GROUP BY 1, 2) "
            "SELECT SUM(ol.gross_amount - ol.discount_amount) - SUM(COALESCE(r.refund, 0)) FROM fact_order_line ol "
            "LEFT JOIN r USING (order_id, line_id) WHERE NOT ol.is_test AND ol.paid_at IS NOT NULL "
            f"AND ol.paid_at >= DATE '{start}' AND ol.paid_at < DATE '{end}'",
        )

    assert Decimal(str(result["total_change"])) == net("2026-11-01", "2026-11-29") - net("2026-10-01", "2026-10-29")


def test_an_attribution_in_wan_yuan_still_adds_up_in_yuan(api, aws):
    answer = ask(api, "为什么9月武汉的净收入下降了", conditions={"unit": "万元"})

    assert answer["status"] == "answered", answer
    result = answer["analysis"]["result"]
    change = Decimal(str(result["total_change"]))
    for dimension in result["dimensions"]:
        assert sum(Decimal(str(c["delta"])) for c in dimension["contributions"]) == change
    rows = {str(r[0])[:7]: Decimal(str(r[1])) for r in answer["rows"]}  # the answer's own rows, in 万元
    assert abs(change / 10_000 - (rows["2026-09"] - rows["2026-08"])) <= Decimal("0.01")  # the same change, in 元


def test_a_period_with_no_data_says_so(api, aws):
    answer = ask(api, "2020年上海的净收入有没有异常")
    # the period lies outside the data: no_data (with the data's range), and the analysis says why it did not run
    assert answer["status"] == "no_data" and answer["analysis"]["status"] == "failed", answer["status"]
    assert any(n.startswith("no data for 2020年: the data for net_revenue runs from ") for n in answer["notes"]), answer["notes"]
    assert "the anomaly analysis could not run: there is no data for the period asked about" in answer["notes"]


def test_a_segment_scan_that_cannot_run_leaves_the_totals_analyses_standing(api, aws, monkeypatch):
    from memtool.analysis import inputs

    def refused(*args, **kwargs):
        raise ValueError("the analysis's table has more than 5000 rows; narrow the question")

    monkeypatch.setattr(inputs, "segment_table", refused)
    answer = ask(api, "2026年6月退款为什么异常高")

    assert answer["status"] == "answered", answer  # both analyses asked for ran; the drill-down is a note
    assert [a["kind"] for a in answer["analysis"]["analyses"]] == ["anomaly", "attribution"]
    assert all(a["success"] for a in answer["analysis"]["analyses"])
    assert "the segment scan could not run: the analysis's table has more than 5000 rows; narrow the question" in answer["notes"]


# ---- why, for a ratio: the rate/mix decomposition (issue 22, item 4) ----------------------------

_PAID = "NOT ol.is_test AND ol.paid_at IS NOT NULL AND strftime(ol.paid_at, '%Y-%m') = '{month}'"
_LINE_REFUNDS = "WITH r AS (SELECT order_id, line_id, SUM(refund_amount) AS refund FROM fact_refund GROUP BY 1, 2) "
_BY = {"product": ("dim_product", "product_id", "product_name"), "channel": ("dim_channel", "channel_id", "channel_name"),
       "region": ("dim_region", "region_id", "region_name")}  # fmt: skip


def warehouse_rows(path: Path, sql: str) -> list[list[Decimal]]:
    """Rows of the demo warehouse, numbers as the decimals they are (the adapter hands out floats
    of DECIMAL(12,2) sums, whose shortest repr is the decimal itself)."""
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    warehouse = DuckDBWarehouse(path)
    try:
        rows = warehouse.run(sql, max_rows=1000, timeout_seconds=10).rows
    finally:
        warehouse.close()
    return [[Decimal(repr(c)) if isinstance(c, float) else Decimal(c) if isinstance(c, int) else c for c in row] for row in rows]


def refund_rate_by_hand(path: Path, month: str) -> dict[str, dict[str, tuple[Fraction, Fraction]]]:
    """Refunds (of the month's paid, non-test lines) and gross revenue, for the whole ("") and per
    product, channel and refund reason, in hand-written SQL; a reason's denominator is all sales."""
    where = _PAID.format(month=month)
    [[refunds, gross]] = warehouse_rows(
        path, _LINE_REFUNDS + f"SELECT SUM(COALESCE(r.refund, 0)), SUM(ol.gross_amount) FROM fact_order_line ol "
        f"LEFT JOIN r USING (order_id, line_id) WHERE {where}",
    )  # fmt: skip
    out = {"": {"": (Fraction(refunds), Fraction(gross))}}
    for dimension in ("product", "channel"):
        table, key, column = _BY[dimension]
        rows = warehouse_rows(
            path, _LINE_REFUNDS + f"SELECT d.{column}, SUM(COALESCE(r.refund, 0)), SUM(ol.gross_amount) FROM fact_order_line ol "
            f"LEFT JOIN r USING (order_id, line_id) JOIN {table} d USING ({key}) WHERE {where} GROUP BY 1",
        )  # fmt: skip
        out[dimension] = {str(m): (Fraction(n), Fraction(d)) for m, n, d in rows}
    rows = warehouse_rows(
        path, "SELECT f.reason, SUM(f.refund_amount) FROM fact_refund f JOIN fact_order_line ol USING (order_id, line_id) "
        f"WHERE {where} GROUP BY 1",
    )  # fmt: skip
    out["refund_reason"] = {str(m): (Fraction(n), Fraction(gross)) for m, n in rows}
    return out


Pairs = dict[str, tuple[Fraction, Fraction]]


def parts_by_hand(before: Pairs, after: Pairs, whole_before: tuple[Fraction, Fraction], whole_after: tuple[Fraction, Fraction]) -> Pairs:
    """Each segment's (rate effect, mix effect): w̄·Δr and r̄·Δw, with w = d / D and r = n / d."""
    parts = {}
    for member in {*before, *after}:
        (n0, d0), (n1, d1) = before.get(member, (0, 0)), after.get(member, (0, 0))
        r0 = Fraction(n0) / d0 if d0 else Fraction(n1) / d1
        r1 = Fraction(n1) / d1 if d1 else r0
        w0, w1 = Fraction(d0) / whole_before[1], Fraction(d1) / whole_after[1]
        parts[member] = ((w0 + w1) / 2 * (r1 - r0), (r0 + r1) / 2 * (w1 - w0))
    return parts


@pytest.mark.parametrize(("question", "lang"), [("为什么7月退款率升高", "zh"), ("why did the refund rate rise in July", "en")])
def test_why_a_refund_rate_moved_is_a_rate_and_mix_attribution_that_sums_to_the_change(api, aws, demo_warehouse, question, lang):
    from memtool.analysis.summary import catalog_labels
    from memtool.semantic.catalog import load_catalog

    answer = ask(api, question)

    assert (answer["status"], answer["route"]) == ("answered", "deep_analysis_workflow"), answer
    analysis = answer["analysis"]
    assert analysis["status"] == "complete" and analysis["skipped"] == []
    [run] = analysis["analyses"]
    assert (run["kind"], run["tool"]) == ("attribution", "code_interpreter")
    result = analysis["result"]
    assert result["method"] == "rate_mix" and (result["before_period"], result["after_period"]) == ("2026-06", "2026-07")
    june, july = refund_rate_by_hand(demo_warehouse, "2026-06"), refund_rate_by_hand(demo_warehouse, "2026-07")
    (n0, d0), (n1, d1) = june[""][""], july[""][""]
    change = n1 / d1 - n0 / d0
    assert result["before_total"] == pytest.approx(float(n0 / d0), abs=1e-9)
    assert result["after_total"] == pytest.approx(float(n1 / d1), abs=1e-9)
    assert result["total_change"] == pytest.approx(float(change), abs=1e-9)
    assert round(result["after_total"], 4) == answer["rows"][-1][1]  # the answer's own July
    assert (Decimal(repr(result["numerator"]["after"])), Decimal(repr(result["denominator"]["after"]))) == (n1, d1)  # to the cent
    assert {d["dimension"]: d["denominators"] for d in result["dimensions"]} == {
        "product": "partition", "channel": "partition", "refund_reason": "shared",  # a reason's rate is over all sales
    }  # fmt: skip
    biggest = (Fraction(0), "", "", "")
    for dimension in result["dimensions"]:
        name = dimension["dimension"]
        contributions = {c["member"]: c for c in dimension["contributions"]}
        hand = parts_by_hand(june[name], july[name], june[""][""], july[""][""])
        assert set(contributions) == set(hand), name
        assert sum(rate + mix for rate, mix in hand.values()) == change  # exactly, by hand too
        assert math.fsum(c["rate_effect"] + c["mix_effect"] for c in contributions.values()) == pytest.approx(float(change), abs=1e-9)
        assert dimension["rate_effect"] + dimension["mix_effect"] == pytest.approx(float(change), abs=1e-9)
        for member, (rate, mix) in hand.items():
            c = contributions[member]
            assert c["rate_effect"] == pytest.approx(float(rate), abs=1e-9) and c["mix_effect"] == pytest.approx(float(mix), abs=1e-9)
            before, after = june[name].get(member, (0, 0)), july[name].get(member, (0, 0))
            assert (Decimal(repr(c["numerator_before"])), Decimal(repr(c["numerator_after"]))) == (before[0], after[0])  # to the cent
            assert (Decimal(repr(c["denominator_before"])), Decimal(repr(c["denominator_after"]))) == (before[1], after[1])
            for effect, value in (("rate", rate), ("mix", mix)):
                if abs(value) > abs(biggest[0]):
                    biggest = (value, name, member, effect)
        if name == "refund_reason":
            assert all(c["mix_effect"] == 0 for c in contributions.values())
    value, dimension_name, member, effect = biggest
    assert result["biggest_part"]["dimension"] == dimension_name and result["biggest_part"]["member"] == member
    assert (result["biggest_part"]["effect"], result["biggest_part"]["value"]) == (effect, pytest.approx(float(value), abs=1e-9))
    # The summary names the biggest part, and the rates keep their digits.
    labels = catalog_labels(load_catalog(), lang)
    summary = analysis["summary"]
    assert answer["answer"] == summary
    if lang == "zh":
        # it fell while the question says it rose: the summary says so first, then the numbers
        assert summary.startswith("注意：问题说退款率升高了，但数据里它是下降的。退款率从 2026-06 的 0.0293 降到 2026-07 的 0.0131（−0.0162）。")
        assert f"最大的一项是{labels[dimension_name]}「{member}」" in summary
    else:
        assert summary.startswith(
            "Note: the question says refund rate rose, but in the data it fell. "
            "refund rate fell from 0.0293 in 2026-06 to 0.0131 in 2026-07 (−0.0162)."
        )
        assert f"The biggest part is {labels[dimension_name]} {member}'s own refund rate" in summary
    assert not any("could not run" in n or "no analysis ran" in n for n in answer["notes"])


def test_why_average_order_value_moved_splits_it_to_the_cent(api, aws, demo_warehouse):
    answer = ask(api, "为什么7月客单价下降")

    assert answer["status"] == "answered", answer
    result = answer["analysis"]["result"]
    assert result["method"] == "rate_mix"
    assert (result["numerator"]["column"], result["denominator"]["column"]) == ("gross_revenue", "order_count")

    def by_region(month: str) -> tuple[tuple[Fraction, Fraction], dict[str, tuple[Fraction, Fraction]]]:
        where = _PAID.format(month=month)
        [[gross, orders]] = warehouse_rows(
            demo_warehouse, f"SELECT SUM(gross_amount), COUNT(DISTINCT order_id) FROM fact_order_line ol WHERE {where}"
        )
        rows = warehouse_rows(
            demo_warehouse, "SELECT d.region_name, SUM(ol.gross_amount), COUNT(DISTINCT ol.order_id) FROM fact_order_line ol "
            f"JOIN dim_region d USING (region_id) WHERE {where} GROUP BY 1",
        )  # fmt: skip
        return (Fraction(gross), Fraction(orders)), {str(m): (Fraction(n), Fraction(d)) for m, n, d in rows}

    (whole0, june), (whole1, july) = by_region("2026-06"), by_region("2026-07")
    change = whole1[0] / whole1[1] - whole0[0] / whole0[1]
    assert abs(Fraction(repr(result["total_change"])) - change) < Fraction(1, 200)  # to the cent (元)
    region = next(d for d in result["dimensions"] if d["dimension"] == "region")
    hand = parts_by_hand(june, july, whole0, whole1)
    cent = Fraction(1, 200)
    for c in region["contributions"]:
        rate, mix = hand[c["member"]]
        assert abs(Fraction(repr(c["rate_effect"])) - rate) < cent and abs(Fraction(repr(c["mix_effect"])) - mix) < cent
    for dimension in result["dimensions"]:
        assert abs(Fraction(math.fsum(c["delta"] for c in dimension["contributions"])) - change) < cent
    # An order holding two products counts in both: the product split still sums, and says its weights overlap.
    assert next(d for d in result["dimensions"] if d["dimension"] == "product")["denominators"] == "overlapping"
    # asked why it fell; it rose: said first
    assert answer["analysis"]["summary"].startswith("注意：问题说客单价下降了，但数据里它是上升的。客单价从 2026-06 的 2,982 升到 2026-07 的 3,012（+29.66）。最大的一项是")


def test_why_an_order_count_moved_splits_it_only_by_dimensions_whose_parts_add_up(api, aws, demo_warehouse):
    """A distinct count (orders) by product counts an order of two products twice: that split is
    left out, with a note, and every split kept adds up to the orders counted by hand."""
    answer = ask(api, "为什么7月订单数下降")

    assert answer["status"] == "answered", answer
    result = answer["analysis"]["result"]
    by_hand = {}
    for month in ("2026-06", "2026-07"):
        where = _PAID.format(month=month)
        [[orders]] = warehouse_rows(demo_warehouse, f"SELECT COUNT(DISTINCT ol.order_id) FROM fact_order_line ol WHERE {where}")
        by_product = warehouse_rows(
            demo_warehouse, f"SELECT ol.product_id, COUNT(DISTINCT ol.order_id) FROM fact_order_line ol WHERE {where} GROUP BY 1"
        )
        by_hand[month] = (orders, sum(n for _, n in by_product))
    assert any(total < product_sum for total, product_sum in by_hand.values())  # the premise: orders span products
    assert (result["before_total"], result["after_total"]) == (float(by_hand["2026-06"][0]), float(by_hand["2026-07"][0]))
    kept = [d["dimension"] for d in result["dimensions"]]
    assert "product" not in kept and kept  # region and channel hold an order once
    for dimension in result["dimensions"]:
        assert sum(c["delta"] for c in dimension["contributions"]) == pytest.approx(result["total_change"], abs=1e-9)
    assert any(n.startswith("not split by product: one item of order_count can count in several product members") for n in answer["notes"])
