"""The ML tools on the demo warehouse's planted anomalies, and the templated scripts in the same
JSON shape as the tools.

The warehouse (seed 7, scale 0.05) plants a 2026-06 refund spike of 盐酸氨溴索口服溶液 (reason
质量问题) and a 2026-09 Wuhan order drop to about 25%. At this scale the spike is about 14k yuan in
a month, while total monthly refunds swing by 20k on a few oncology refunds, so the spike is
judged in the product's own refund series, where it is the planted event.
"""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memtool.analysis.ml.models import RESULT_MODELS
from memtool.analysis.ml.registry import ml_registry, ml_tools
from memtool.analysis.scripts import templated_script
from memtool.tools.base import BadArguments, NeedsClarification, ToolContext

REGISTRY = ml_registry()
CONTEXT = ToolContext(tenant="t-ml")
SPIKE_PRODUCT = "盐酸氨溴索口服溶液"

_REFUND_BY_LINE = "(SELECT order_id, line_id, SUM(refund_amount) AS refund FROM fact_refund GROUP BY 1, 2)"
_NET_LINES = f"""
    fact_order_line ol
    JOIN dim_region dr USING (region_id)
    JOIN dim_channel dc USING (channel_id)
    JOIN dim_product dp USING (product_id)
    LEFT JOIN {_REFUND_BY_LINE} rf USING (order_id, line_id)
    WHERE NOT ol.is_test AND ol.paid_at IS NOT NULL
"""
_NET = "SUM(ol.gross_amount - ol.discount_amount - COALESCE(rf.refund, 0))"


def _query(path: Path, sql: str) -> tuple[list[str], list[list[Any]]]:
    import duckdb

    with duckdb.connect(str(path), read_only=True) as connection:
        cursor = connection.execute(sql)
        columns = [d[0] for d in cursor.description]
        return columns, [list(row) for row in cursor.fetchall()]


def _run(name: str, **arguments: Any) -> Any:
    tool = REGISTRY.get(name)
    return tool.handler(tool.input_model.model_validate(arguments), CONTEXT)


def _months(path: Path) -> list[str]:
    meta = json.loads(Path(f"{path}.meta.json").read_text(encoding="utf-8"))
    return meta["months"]


def _monthly(path: Path, sql: str) -> tuple[list[str], list[float]]:
    """A monthly series over the warehouse's 24 months, months without rows as 0."""
    _, rows = _query(path, sql)
    by_month = {month: float(value) for month, value in rows}
    months = _months(path)
    return months, [by_month.get(m, 0.0) for m in months]


def _city_net_revenue(path: Path, city: str) -> tuple[list[str], list[float]]:
    return _monthly(path, f"SELECT strftime(ol.paid_at, '%Y-%m'), {_NET} FROM {_NET_LINES} AND dr.city = '{city}' GROUP BY 1")


def _product_refunds(path: Path, product: str) -> tuple[list[str], list[float]]:
    return _monthly(
        path,
        f"""SELECT strftime(f.refunded_at, '%Y-%m'), SUM(f.refund_amount) FROM fact_refund f
            JOIN fact_order_line ol USING (order_id, line_id) JOIN dim_product dp USING (product_id)
            WHERE dp.product_name = '{product}' GROUP BY 1""",
    )


def _decimal(value: float) -> Decimal:
    return Decimal(repr(value))


def _keys(value: Any) -> Any:
    """The nested key structure of a JSON value (list items merged), to compare shapes."""
    if isinstance(value, dict):
        return {k: _keys(v) for k, v in value.items() if k != "means"}  # means are keyed by feature
    if isinstance(value, list):
        merged: dict[str, Any] = {}
        for item in value:
            shape = _keys(item)
            if isinstance(shape, dict):
                merged.update(shape)
        return [merged] if merged else []
    return None


# --- anomaly ------------------------------------------------------------------------------------


def test_both_methods_flag_the_2026_06_refund_spike(demo_warehouse: Path) -> None:
    labels, values = _product_refunds(demo_warehouse, SPIKE_PRODUCT)

    result = _run("ml_anomaly", series=values, labels=labels, series_name="refund_amount")

    june = next(p for p in result.points if p.label == "2026-06")
    assert june.flagged_by == ["robust_z", "isolation_forest"]
    assert june.z > 10
    assert june.value > 10 * june.expected
    assert max(result.points, key=lambda p: abs(p.z)).label == "2026-06"
    assert max(result.points, key=lambda p: p.iforest_score).label == "2026-06"
    # Nothing else reaches the forest's threshold; the robust z may see a second, smaller high.
    assert [p.label for p in result.points if p.iforest_anomaly] == ["2026-06"]


def test_both_methods_flag_only_the_2026_09_wuhan_drop(demo_warehouse: Path) -> None:
    columns = ["period", "net_revenue"]
    labels, values = _city_net_revenue(demo_warehouse, "武汉")

    result = _run("ml_anomaly", columns=columns, rows=[list(r) for r in zip(labels, values)], value_column="net_revenue", series_name="net_revenue")

    assert result.anomalies == ["2026-09"]
    september = next(p for p in result.points if p.label == "2026-09")
    assert september.flagged_by == ["robust_z", "isolation_forest"]
    assert september.z < -5
    assert september.value < 0.3 * september.expected  # the planted drop to about 25%
    assert result.transform == "log"


@pytest.mark.parametrize("series", ["上海 net revenue", "武汉 prescriptions"])
def test_control_series_have_no_anomalies(demo_warehouse: Path, series: str) -> None:
    if series == "上海 net revenue":
        labels, values = _city_net_revenue(demo_warehouse, "上海")
    else:  # the distributor switch left prescriptions untouched
        labels, values = _monthly(
            demo_warehouse,
            "SELECT strftime(rx_date, '%Y-%m'), SUM(qty) FROM fact_prescription JOIN dim_region USING (region_id) WHERE city = '武汉' GROUP BY 1",
        )

    result = _run("ml_anomaly", series=values, labels=labels)

    assert result.anomalies == []
    assert max(abs(p.z) for p in result.points) < 3.5


@pytest.mark.parametrize(
    ("arguments", "failure", "field"),
    [
        ({"series": [1.0, 2.0, 3.0], "labels": ["a", "b", "c"]}, NeedsClarification, "values"),
        ({"series": [7.0] * 24, "labels": [f"m{i}" for i in range(24)]}, NeedsClarification, "values"),
        ({"columns": ["period", "value"], "rows": [["2026-01", "many"]] * 8}, BadArguments, "value_column"),
        ({"columns": ["period", "amount"], "rows": [["2026-01", 1]] * 8}, BadArguments, "value_column"),
        ({"series": [1.0, 2.0], "labels": ["a"]}, BadArguments, "labels"),
    ],
    ids=["too-short", "constant", "non-numeric", "missing-column", "unlabelled"],
)
def test_bad_anomaly_inputs_name_their_field(arguments: dict[str, Any], failure: type[Exception], field: str) -> None:
    with pytest.raises(failure) as error:
        _run("ml_anomaly", **arguments)
    assert error.value.field == field  # type: ignore[attr-defined]


# --- attribution --------------------------------------------------------------------------------


def test_wuhan_drop_attribution_sums_exactly_to_the_change(demo_warehouse: Path) -> None:
    columns, rows = _query(
        demo_warehouse,
        f"""SELECT strftime(ol.paid_at, '%Y-%m') AS period, dc.channel_name, dp.product_name, CAST({_NET} AS DOUBLE) AS net_revenue
            FROM {_NET_LINES} AND dr.city = '武汉' AND strftime(ol.paid_at, '%Y-%m') IN ('2026-08', '2026-09')
            GROUP BY ALL ORDER BY ALL""",
    )
    _, totals = _query(
        demo_warehouse,
        f"SELECT strftime(ol.paid_at, '%Y-%m'), {_NET} FROM {_NET_LINES} AND dr.city = '武汉' GROUP BY 1 HAVING strftime(ol.paid_at, '%Y-%m') IN ('2026-08', '2026-09') ORDER BY 1",
    )
    change_in_sql = totals[1][1] - totals[0][1]  # DECIMAL arithmetic in the warehouse

    result = _run("ml_attribution", columns=columns, rows=rows, value_column="net_revenue", dimensions=["channel_name", "product_name"])

    assert (result.before_period, result.after_period) == ("2026-08", "2026-09")
    assert _decimal(result.total_change) == change_in_sql
    for dimension in result.dimensions:
        assert sum(_decimal(c.delta) for c in dimension.contributions) == change_in_sql
    channels = result.dimensions[0]
    assert channels.largest_increase is None or channels.contributions[0].delta < 0  # a drop across the channels
    assert channels.contributions[0].member == "医院"


def test_refund_spike_attribution_puts_the_planted_product_and_reason_first_among_increases(demo_warehouse: Path) -> None:
    columns, rows = _query(
        demo_warehouse,
        """SELECT strftime(f.refunded_at, '%Y-%m') AS period, dp.product_name, f.reason, CAST(SUM(f.refund_amount) AS DOUBLE) AS refund_amount
           FROM fact_refund f JOIN fact_order_line ol USING (order_id, line_id) JOIN dim_product dp USING (product_id)
           WHERE strftime(f.refunded_at, '%Y-%m') IN ('2026-05', '2026-06') GROUP BY ALL ORDER BY ALL""",
    )

    result = _run("ml_attribution", columns=columns, rows=rows, value_column="refund_amount", dimensions=["product_name", "reason"],
                  before_period="2026-05", after_period="2026-06")

    by_product, by_reason = result.dimensions
    assert by_product.largest_increase == SPIKE_PRODUCT
    assert by_reason.largest_increase == "质量问题"
    spike = next(c for c in by_product.contributions if c.member == SPIKE_PRODUCT)
    assert spike.delta > 10_000 and spike.before < 1_000
    for dimension in result.dimensions:
        assert sum(_decimal(c.delta) for c in dimension.contributions) == _decimal(result.total_change)


# --- forecast, clustering, correlation, regression ----------------------------------------------


def test_forecast_per_city_has_nested_intervals_and_a_finite_backtest(demo_warehouse: Path) -> None:
    columns, rows = _query(
        demo_warehouse,
        f"""SELECT strftime(ol.paid_at, '%Y-%m') AS period, dr.city, CAST({_NET} AS DOUBLE) AS value
            FROM {_NET_LINES} AND dr.city IN ('上海', '北京', '广州') GROUP BY ALL ORDER BY ALL""",
    )

    result = _run("ml_forecast", columns=columns, rows=rows, group_column="city", horizon=3)

    assert [s.group for s in result.series] == ["上海", "北京", "广州"] or sorted(s.group for s in result.series) == ["上海", "北京", "广州"]
    for series in result.series:
        assert series.method == "ets_additive_seasonal"  # 24 months: two seasons
        assert [f.label for f in series.forecast] == ["2026-12", "2027-01", "2027-02"]
        for f in series.forecast:
            assert f.lower_95 < f.lower_80 < f.point < f.upper_80 < f.upper_95
        assert series.backtest_mape is not None and 0 < series.backtest_mape < 100
        assert series.backtest_origins == 6


def test_forecast_of_a_single_season_falls_back_to_the_kernel(demo_warehouse: Path) -> None:
    labels, values = _city_net_revenue(demo_warehouse, "上海")

    result = _run("ml_forecast", series=values[-18:], labels=labels[-18:], horizon=2)

    (series,) = result.series
    assert series.method == "seasonal_naive_drift"
    assert all(f.lower_95 < f.point < f.upper_95 for f in series.forecast)
    assert series.backtest_mape is not None and np.isfinite(series.backtest_mape)
    assert series.backtest_origins == 4  # origins need a season and two points of history


def _city_profile(path: Path) -> tuple[list[str], list[list[Any]]]:
    return _query(
        path,
        f"""SELECT dr.city,
                   CAST({_NET} AS DOUBLE) / 24 AS monthly_net_revenue,
                   AVG(CASE WHEN dc.channel_name = '电商' THEN 1.0 ELSE 0.0 END) AS ecommerce_share,
                   CAST(SUM(COALESCE(rf.refund, 0)) AS DOUBLE) / CAST(SUM(ol.gross_amount) AS DOUBLE) AS refund_rate
            FROM {_NET_LINES} GROUP BY 1 ORDER BY 1""",
    )


def test_clustering_chooses_k_by_silhouette_and_profiles_each_cluster(demo_warehouse: Path) -> None:
    columns, rows = _city_profile(demo_warehouse)

    result = _run("ml_clustering", columns=columns, rows=rows, id_column="city")

    assert [s.k for s in result.silhouette_by_k] == list(range(2, 9))  # min(8, 10 cities - 1)
    assert result.silhouette == max(s.silhouette for s in result.silhouette_by_k)
    assert result.k == next(s.k for s in result.silhouette_by_k if s.silhouette == result.silhouette)
    assert sorted(m for c in result.clusters for m in c.members) == sorted(r[0] for r in rows)
    for cluster in result.clusters:
        mine = [r for r in rows if r[0] in cluster.members]
        assert cluster.size == len(mine)
        assert cluster.means["monthly_net_revenue"] == pytest.approx(np.mean([r[1] for r in mine]))


def test_clustering_separates_planted_groups() -> None:
    rng = np.random.default_rng(1)
    rows = [[f"g{g}-{i}", *rng.normal((g * 6.0, 20 - g * 6.0, g), 0.7).tolist()] for g in range(4) for i in range(6)]

    result = _run("ml_clustering", columns=["id", "a", "b", "c"], rows=rows, id_column="id")

    assert result.k == 4
    assert all(len({m.split("-")[0] for m in c.members}) == 1 for c in result.clusters)


def test_correlation_p_values_match_scipy_and_the_kernel(demo_warehouse: Path) -> None:
    from scipy import stats

    from memtool.analysis import kernels

    columns, rows = _query(
        demo_warehouse,
        f"""SELECT strftime(ol.paid_at, '%Y-%m') AS period, CAST({_NET} AS DOUBLE) AS net_revenue,
                   COUNT(DISTINCT ol.order_id) AS orders, CAST(SUM(COALESCE(rf.refund, 0)) AS DOUBLE) AS refunds
            FROM {_NET_LINES} GROUP BY 1 ORDER BY 1""",
    )

    result = _run("ml_correlation", columns=columns, rows=rows)

    assert result.columns == ["net_revenue", "orders", "refunds"]  # the period labels are not numbers
    kernel = kernels.correlation_report(columns, rows)
    for pair, mine in zip(result.pairs, kernel["pairs"], strict=True):
        x = [r[columns.index(pair.x)] for r in rows]
        y = [r[columns.index(pair.y)] for r in rows]
        assert pair.pearson_p == pytest.approx(stats.pearsonr(x, y).pvalue, rel=1e-12)
        assert pair.spearman_p == pytest.approx(stats.spearmanr(x, y).pvalue, rel=1e-12)
        assert (mine["x"], mine["y"]) == (pair.x, pair.y)
        assert mine["pearson_p"] == pytest.approx(pair.pearson_p, rel=1e-8)
        assert mine["spearman_p"] == pytest.approx(pair.spearman_p, rel=1e-8)
    orders_revenue = next(p for p in result.pairs if {p.x, p.y} == {"net_revenue", "orders"})
    assert orders_revenue.pearson_r > 0.5 and orders_revenue.pearson_p < 0.01  # more orders, more revenue


def test_regression_recovers_known_coefficients() -> None:
    rng = np.random.default_rng(3)
    x1, x2 = rng.uniform(0, 10, 80), rng.normal(0, 2, 80)
    y = 4.0 + 2.5 * x1 - 1.2 * x2 + rng.normal(0, 0.5, 80)
    rows = [[float(a), float(b), float(c)] for a, b, c in zip(y, x1, x2, strict=True)]

    result = _run("ml_regression", columns=["sales", "price", "promo"], rows=rows, target="sales")

    estimates = {c.name: c for c in result.coefficients}
    assert estimates["const"].estimate == pytest.approx(4.0, abs=0.3)
    assert estimates["price"].estimate == pytest.approx(2.5, abs=0.05)
    assert estimates["promo"].estimate == pytest.approx(-1.2, abs=0.1)
    assert estimates["price"].p < 1e-10
    assert result.r_squared > 0.98
    checks = result.residual_checks
    assert checks.shapiro_p is not None and checks.shapiro_p > 0.01  # the noise is normal
    assert 1.5 < checks.durbin_watson < 2.5 and checks.breusch_pagan_p is not None and checks.breusch_pagan_p > 0.01


def test_regression_with_too_few_rows_asks_for_more() -> None:
    with pytest.raises(NeedsClarification) as error:
        _run("ml_regression", columns=["y", "x"], rows=[[1, 2], [2, 3], [3, 5]], target="y")
    assert error.value.field == "rows"


def test_every_tool_has_a_reward_and_a_one_line_summary() -> None:
    result = _run("ml_anomaly", series=[10.0, 11, 10, 12, 11, 60, 10, 11, 12, 10], labels=[str(i) for i in range(10)], period=None)
    tool = REGISTRY.get("ml_anomaly")

    assert -1 <= tool.reward(result) <= 1
    assert "\n" not in tool.summary_of(result) and "5 (z=" in tool.summary_of(result)
    assert [t.name for t in ml_tools()] == REGISTRY.names()
    assert all(t.tool_spec()["toolSpec"]["inputSchema"]["json"]["additionalProperties"] is False for t in ml_tools())


# --- templated scripts: same shape as the tools, and a chart ------------------------------------


def _script_cases(path: Path) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    labels, values = _city_net_revenue(path, "武汉")
    monthly = {"columns": ["period", "value"], "rows": [list(r) for r in zip(labels, values)]}
    attribution_columns, attribution_rows = _query(
        path,
        f"""SELECT strftime(ol.paid_at, '%Y-%m') AS period, dc.channel_name, CAST({_NET} AS DOUBLE) AS value
            FROM {_NET_LINES} AND dr.city = '武汉' AND strftime(ol.paid_at, '%Y-%m') IN ('2026-08', '2026-09') GROUP BY ALL ORDER BY ALL""",
    )
    profile_columns, profile_rows = _city_profile(path)
    rng = np.random.default_rng(3)
    x1, x2 = rng.uniform(0, 10, 40), rng.normal(0, 2, 40)
    regression_rows = [[float(4 + 2.5 * a - 1.2 * b + e), float(a), float(b)] for a, b, e in zip(x1, x2, rng.normal(0, 0.5, 40), strict=True)]
    return {
        "anomaly": ({**monthly, "params": {"series_name": "net_revenue"}}, {}),
        "forecast": ({**monthly, "params": {"horizon": 3}}, {}),
        "attribution": ({"columns": attribution_columns, "rows": attribution_rows, "params": {}}, {"dimensions": ["channel_name"]}),
        "clustering": ({"columns": profile_columns, "rows": profile_rows, "params": {"id_column": "city"}}, {}),
        "correlation": ({"columns": profile_columns, "rows": profile_rows, "params": {}}, {}),
        "regression": ({"columns": ["y", "x1", "x2"], "rows": regression_rows, "params": {}}, {"target": "y"}),
    }


def test_templated_scripts_write_the_tools_result_shape_and_a_png(demo_warehouse: Path, tmp_path: Path) -> None:
    cases = _script_cases(demo_warehouse)
    running = {}
    for kind, (data, template_params) in cases.items():  # in parallel: each pays matplotlib's import
        workdir = tmp_path / kind
        workdir.mkdir()
        (workdir / "data.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        running[kind] = subprocess.Popen(
            [sys.executable, "-c", templated_script(kind, template_params)], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for kind, process in running.items():
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, f"{kind}: {stderr[-2000:]}"

    for kind, (data, template_params) in cases.items():
        workdir = tmp_path / kind
        script_result = json.loads((workdir / "result.json").read_text(encoding="utf-8"))
        RESULT_MODELS[kind].model_validate(script_result)  # extra="forbid", no defaults: the exact keys
        tool_result = _run(f"ml_{kind}", columns=data["columns"], rows=data["rows"], **data["params"], **template_params)
        assert _keys(script_result) == _keys(tool_result.model_dump(mode="json")), kind
        assert (workdir / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", kind
        if kind == "anomaly":  # the same kernel on both sides: the same z-scores and the planted drop
            assert script_result["anomalies"] == ["2026-09"]
            assert [p["z"] for p in script_result["points"]] == pytest.approx([p.z for p in tool_result.points])
        if kind == "attribution":
            assert script_result == tool_result.model_dump(mode="json")
