"""Unit tests for memtool.viz: data-shape analysis, chart rules, checkpoint status, ECharts options.

Result sets mirror what the pharma demo warehouse returns (DuckDB/Redshift give Decimal money).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

import pytest

from memtool.viz.charts import MAX_POINTS, ChartRecommendation, checkpoint_status, recommend_chart
from memtool.viz.shape import ColumnRole, ShapeHints, ShapeKind, analyze_shape

MONTHS_2024 = [f"2024-{m:02d}" for m in range(1, 13)]
CHANNELS = ["医院", "零售药店", "电商", "诊所"]
PRODUCTS = ["立普妥", "波立维", "格华止", "拜新同", "络活喜", "可定", "倍他乐克", "安博维", "科素亚", "代文"]


def money(x: float) -> Decimal:
    return Decimal(f"{x:.2f}")


def assert_consistent(rec: ChartRecommendation) -> None:
    """Invariants every recommendation keeps, whatever the shape."""
    assert 1 <= len(rec.candidates) <= 3
    confidences = [c.confidence for c in rec.candidates]
    assert confidences == sorted(confidences, reverse=True)
    assert all(0.0 <= c <= 1.0 for c in confidences)
    assert rec.chart_type == rec.candidates[0].chart_type
    assert rec.confidence == rec.candidates[0].confidence
    assert rec.checkpoint_status == checkpoint_status(rec.confidence)
    assert len({c.chart_type for c in rec.candidates}) == len(rec.candidates)
    json.dumps(rec.to_dict(), ensure_ascii=False)  # the Record step stores it as JSON


# --------------------------------------------------------------------------- time series


def test_monthly_net_revenue_is_a_line_that_auto_passes():
    # Given 12 months of net revenue, delivered out of order
    rows = [[m, money(1_000_000 + 25_000 * i)] for i, m in enumerate(MONTHS_2024)]
    shuffled = rows[6:] + rows[:6]

    # When
    rec = recommend_chart(["month", "net_revenue"], shuffled, hints=ShapeHints(metric="net_revenue", dimensions=("month",)))

    # Then
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.TIME_SERIES
    assert rec.shape.column("month").role is ColumnRole.TEMPORAL
    assert rec.shape.column("month").granularity == "month"
    assert (rec.chart_type, rec.checkpoint_status) == ("line", "auto_pass")
    opt = rec.option
    assert opt["xAxis"] == {"type": "category", "data": MONTHS_2024, "boundaryGap": False}
    assert opt["yAxis"]["type"] == "value"
    assert [s["type"] for s in opt["series"]] == ["line"]
    assert len(opt["series"][0]["data"]) == len(rows)
    assert opt["series"][0]["data"][0] == 1_000_000.0 and opt["series"][0]["data"][-1] == 1_275_000.0
    assert opt["tooltip"]["trigger"] == "axis"
    assert opt["title"]["text"] == "net_revenue by month"


def test_three_months_draw_as_bars():
    rows = [["2024-04", money(9.5e5)], ["2024-05", money(9.9e5)], ["2024-06", money(1.02e6)]]
    rec = recommend_chart(["month", "net_revenue"], rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.TIME_SERIES
    assert rec.chart_type == "bar"
    assert rec.option["series"][0]["type"] == "bar"
    assert rec.option["xAxis"]["data"] == ["2024-04", "2024-05", "2024-06"]


def test_two_period_comparison_is_a_bar():
    # 环比: this month against last month
    rows = [["2024-05", money(980_000)], ["2024-06", money(1_020_000)]]
    rec = recommend_chart(["month", "net_revenue"], rows, hints=ShapeHints(metric="net_revenue", is_comparison=True))
    assert_consistent(rec)
    assert rec.chart_type == "bar" and rec.confidence == 0.9
    assert "同比/环比" in rec.candidates[0].reason


def test_daily_dates_use_a_time_axis_with_pairs():
    start = date(2024, 3, 1)
    rows = [[start + timedelta(days=i), 100 + i] for i in range(31)]
    rec = recommend_chart(["order_date", "qty"], rows)
    assert_consistent(rec)
    assert rec.chart_type == "line"
    assert rec.option["xAxis"] == {"type": "time"}
    data = rec.option["series"][0]["data"]
    assert len(data) == 31
    assert data[0] == ["2024-03-01", 100] and data[-1] == ["2024-03-31", 130]


def test_long_format_month_by_channel_is_a_multi_series_line():
    # Given month × channel × revenue, one row per pair
    rows = [[m, c, money(100_000 * (4 - j) + 1_000 * i)] for i, m in enumerate(MONTHS_2024) for j, c in enumerate(CHANNELS)]

    rec = recommend_chart(["month", "channel_name", "net_revenue"], rows)

    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.TIME_SERIES
    assert (rec.shape.temporal, rec.shape.series) == ("month", "channel_name")
    assert rec.chart_type == "line" and rec.checkpoint_status == "auto_pass"
    series = rec.option["series"]
    assert [s["name"] for s in series] == CHANNELS  # largest total first
    assert all(s["type"] == "line" and len(s["data"]) == 12 for s in series)
    assert rec.option["legend"]["data"] == CHANNELS
    assert rec.option["xAxis"]["data"] == MONTHS_2024
    assert series[2]["data"][11] == 211_000.0  # 电商, December


def test_long_format_with_a_missing_pair_leaves_a_gap():
    rows = [[m, c, 10] for m in MONTHS_2024[:6] for c in CHANNELS[:2] if not (m == "2024-03" and c == "零售药店")]
    rec = recommend_chart(["month", "channel_name", "net_revenue"], rows)
    retail = next(s for s in rec.option["series"] if s["name"] == "零售药店")
    assert retail["data"] == [10, 10, None, 10, 10, 10]


def test_two_measures_over_time_on_different_scales_get_two_axes():
    rows = [[m, money(1_000_000 + i), 400 + i] for i, m in enumerate(MONTHS_2024)]
    rec = recommend_chart(["month", "net_revenue", "qty"], rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.TIME_SERIES
    assert rec.chart_type == "dual_axis_line"
    assert isinstance(rec.option["yAxis"], list) and len(rec.option["yAxis"]) == 2
    assert [s["type"] for s in rec.option["series"]] == ["line", "line"]
    assert rec.option["series"][1]["yAxisIndex"] == 1 and "yAxisIndex" not in rec.option["series"][0]


def test_large_series_is_capped_and_says_so():
    start = date(2021, 1, 1)
    rows = [[start + timedelta(days=i), i] for i in range(1200)]
    rec = recommend_chart(["order_date", "qty"], rows)
    data = rec.option["series"][0]["data"]
    assert len(data) == MAX_POINTS == 500
    assert data[0] == ["2021-01-01", 0] and data[-1][1] == 1199  # range kept end to end
    assert any("500 of 1200" in note for note in rec.notes)


# --------------------------------------------------------------------------- share, ranking


def test_channel_share_is_a_pie():
    rows = [["医院", money(5_200_000)], ["零售药店", money(2_100_000)], ["电商", money(1_300_000)], ["诊所", money(400_000)]]
    rec = recommend_chart(["channel_name", "net_revenue"], rows, hints=ShapeHints(metric="net_revenue", is_share=True))
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.CATEGORICAL_SHARE
    assert (rec.chart_type, rec.checkpoint_status) == ("pie", "auto_pass")
    pie = rec.option["series"][0]
    assert pie["type"] == "pie"
    assert pie["data"] == [
        {"name": "医院", "value": 5_200_000.0},
        {"name": "零售药店", "value": 2_100_000.0},
        {"name": "电商", "value": 1_300_000.0},
        {"name": "诊所", "value": 400_000.0},
    ]
    assert rec.option["tooltip"]["trigger"] == "item"
    assert "xAxis" not in rec.option


def test_share_hint_comes_from_the_question_and_intent():
    @dataclass
    class FakeIntent:  # the planner's Intent, reduced to the fields hints read
        metric: str = "net_revenue"
        dimensions: tuple[str, ...] = ("channel",)
        comparison: object | None = None
        order: str | None = None
        limit: int | None = None

    hints = ShapeHints.from_intent(FakeIntent(), "上个月各渠道净收入占比")
    assert hints == ShapeHints(metric="net_revenue", dimensions=("channel",), is_share=True, top_n=None, is_comparison=False)
    top = ShapeHints.from_intent(FakeIntent(order="desc", limit=10), "销售额前十的产品")
    assert top.top_n == 10 and not top.is_share


def test_share_named_measure_is_a_pie_without_a_hint():
    rows = [["心血管", 0.42], ["肿瘤", 0.31], ["呼吸", 0.17], ["糖尿病", 0.10]]
    rec = recommend_chart(["therapeutic_area", "revenue_share"], rows)
    assert rec.shape.kind is ShapeKind.CATEGORICAL_SHARE and rec.chart_type == "pie"


@pytest.mark.parametrize(
    "rows, why",
    [
        ([[f"城市{i}", 100 + i] for i in range(10)], "exceed 8 slices"),
        ([["医院", 500], ["零售药店", -20], ["电商", 300]], "negative"),
    ],
)
def test_share_that_a_pie_cannot_draw_falls_back_to_bars(rows, why):
    rec = recommend_chart(["city", "net_revenue"], rows, hints=ShapeHints(is_share=True))
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.RANKING
    assert rec.chart_type != "pie" and all(c.chart_type != "pie" for c in rec.candidates)
    assert any(why in r for r in rec.shape.reasons)


def test_top_ten_products_are_a_sorted_horizontal_bar():
    # Given ten products, not in rank order, and a top-10 question
    values = [820, 1500, 640, 990, 2300, 1200, 450, 1780, 300, 1100]
    rows = [[p, money(v * 1000)] for p, v in zip(PRODUCTS, values)]

    rec = recommend_chart(["product_name", "net_revenue"], rows, hints=ShapeHints(metric="net_revenue", top_n=10))

    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.RANKING
    assert (rec.chart_type, rec.checkpoint_status) == ("horizontal_bar", "auto_pass")
    opt = rec.option
    data = opt["series"][0]["data"]
    assert opt["series"][0]["type"] == "bar"
    assert data == sorted(data, reverse=True) and len(data) == 10
    assert opt["yAxis"]["type"] == "category" and opt["yAxis"]["inverse"] is True
    assert opt["xAxis"]["type"] == "value"
    by_name = dict(zip(opt["yAxis"]["data"], data))
    assert opt["yAxis"]["data"][0] == "络活喜" and by_name["科素亚"] == 300_000.0


def test_ranked_rows_with_ids_rank_by_name():
    # SQL often selects the id beside the name: the name labels, the id is not a measure
    rows = [[i + 1, p, money(5000 - 300 * i)] for i, p in enumerate(PRODUCTS)]
    rec = recommend_chart(["product_id", "product_name", "net_revenue"], rows)
    assert rec.shape.column("product_id").role is ColumnRole.CATEGORICAL
    assert rec.shape.kind is ShapeKind.RANKING
    assert rec.shape.dimension == "product_name" and rec.shape.ordered == "desc"
    assert rec.chart_type == "horizontal_bar"


def test_few_unsorted_categories_are_vertical_bars():
    rows = [["华东", 300], ["华北", 500], ["华南", 200], ["西南", 100]]
    rec = recommend_chart(["region_name", "net_revenue"], rows)
    assert rec.shape.kind is ShapeKind.RANKING and rec.shape.ordered is None
    assert rec.chart_type == "bar"
    assert rec.option["xAxis"] == {"type": "category", "data": ["华东", "华北", "华南", "西南"]}
    assert rec.option["series"][0]["data"] == [300, 500, 200, 100]


def test_constant_month_becomes_a_label_not_an_axis():
    # "上个月各渠道净收入" returns the month on every row
    rows = [["2024-05", c, money(v)] for c, v in zip(CHANNELS, [5.2e6, 2.1e6, 1.3e6, 4e5])]
    rec = recommend_chart(["month", "channel_name", "net_revenue"], rows)
    assert rec.shape.kind is ShapeKind.RANKING
    assert rec.shape.context == ("month",)
    assert rec.option["title"]["subtext"] == "2024-05"


# --------------------------------------------------------------------------- KPI


def test_one_number_is_a_kpi_card():
    rec = recommend_chart(["net_revenue"], [[Decimal("12345678.90")]], hints=ShapeHints(metric="net_revenue"))
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.SINGLE_KPI
    assert (rec.chart_type, rec.checkpoint_status) == ("kpi_card", "auto_pass")
    assert rec.option["kpi"] == {"measure": "net_revenue", "value": 12345678.9, "formatted": "12,345,678.90", "label": None}
    assert rec.option["graphic"][0]["type"] == "text"
    assert rec.option["graphic"][0]["style"]["text"] == "12,345,678.90"


def test_one_labelled_number_is_a_kpi_card_with_its_label():
    rec = recommend_chart(["city", "month", "net_revenue"], [["上海", "2024-05", 1_250_000]])
    assert rec.shape.kind is ShapeKind.SINGLE_KPI
    assert rec.option["kpi"]["label"] == "上海 · 2024-05"
    assert rec.option["kpi"]["formatted"] == "1,250,000"


# --------------------------------------------------------------------------- several measures


def test_gross_vs_net_by_channel_is_a_grouped_bar():
    rows = [[c, money(g), money(g * 0.9)] for c, g in zip(CHANNELS, [5.8e6, 2.4e6, 1.5e6, 4.6e5])]
    rec = recommend_chart(["channel_name", "gross_amount", "net_revenue"], rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.MULTI_MEASURE
    assert (rec.chart_type, rec.checkpoint_status) == ("grouped_bar", "auto_pass")
    opt = rec.option
    assert opt["xAxis"] == {"type": "category", "data": CHANNELS}
    assert opt["yAxis"] == {"type": "value"}
    assert [(s["name"], s["type"], len(s["data"])) for s in opt["series"]] == [
        ("gross_amount", "bar", 4),
        ("net_revenue", "bar", 4),
    ]


def test_revenue_and_quantity_by_channel_get_a_second_axis():
    rows = [["医院", money(5.2e6), 41_000], ["电商", money(1.3e6), 9_800], ["诊所", money(4e5), 3_100]]
    rec = recommend_chart(["channel_name", "net_revenue", "qty"], rows)
    assert rec.shape.kind is ShapeKind.MULTI_MEASURE
    assert rec.chart_type == "dual_axis_line"
    axes = rec.option["yAxis"]
    assert [a["name"] for a in axes] == ["net_revenue", "qty"]
    assert [(s["type"], s.get("yAxisIndex", 0)) for s in rec.option["series"]] == [("bar", 0), ("line", 1)]


def test_this_period_vs_last_period_by_channel_is_grouped_bars():
    rows = [[c, 100 + i, 90 + i] for i, c in enumerate(CHANNELS)]
    rec = recommend_chart(["channel_name", "net_revenue", "net_revenue_last_year"], rows, hints=ShapeHints(is_comparison=True))
    assert rec.chart_type == "grouped_bar" and rec.confidence == 0.9


# --------------------------------------------------------------------------- distribution, table, empty


def test_three_hundred_order_values_are_a_histogram():
    rng = random.Random(7)
    rows = [[money(rng.gauss(800, 150))] for _ in range(300)]
    rec = recommend_chart(["gross_amount"], rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.DISTRIBUTION
    assert (rec.chart_type, rec.checkpoint_status) == ("histogram", "auto_pass")
    series = rec.option["series"][0]
    assert series["type"] == "bar" and series["barCategoryGap"] == "0%"
    assert sum(series["data"]) == 300
    assert len(series["data"]) == len(rec.option["xAxis"]["data"]) == 10  # Sturges: ceil(log2(300) + 1)


def test_prebinned_counts_are_a_histogram_in_their_order():
    rows = [["0-500", 120], ["500-1000", 340], ["1000-2000", 95], ["2000+", 12]]
    rec = recommend_chart(["amount_range", "order_count"], rows)
    assert rec.shape.kind is ShapeKind.DISTRIBUTION and rec.shape.prebinned
    assert rec.chart_type == "histogram"
    assert rec.option["xAxis"]["data"] == ["0-500", "500-1000", "1000-2000", "2000+"]
    assert rec.option["series"][0]["data"] == [120, 340, 95, 12]


def test_text_only_result_is_a_low_confidence_table():
    rows = [["立普妥", "辉瑞", "心血管"], ["格华止", "默克", "糖尿病"], ["可定", "阿斯利康", "心血管"]]
    rec = recommend_chart(["product_name", "brand", "therapeutic_area"], rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.TABLE
    assert rec.chart_type == "table"
    assert rec.confidence < 0.7 and rec.checkpoint_status in ("needs_review", "blocked")
    assert rec.option["table"] == {"columns": ["product_name", "brand", "therapeutic_area"], "rows": rows}


@pytest.mark.parametrize(
    "columns, rows",
    [
        (["month", "net_revenue"], []),
        ([], []),
        (["month", "net_revenue"], [[None, None], [None, None]]),
    ],
)
def test_empty_result_is_blocked(columns, rows):
    rec = recommend_chart(columns, rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.EMPTY
    assert (rec.chart_type, rec.confidence, rec.checkpoint_status) == ("table", 0.0, "blocked")
    assert rec.option["title"]["subtext"] == "no data"


# --------------------------------------------------------------------------- checkpoint thresholds


@pytest.mark.parametrize(
    "confidence, status",
    [(1.0, "auto_pass"), (0.7, "auto_pass"), (0.69, "needs_review"), (0.3, "needs_review"), (0.29, "blocked"), (0.0, "blocked")],
)
def test_checkpoint_thresholds(confidence, status):
    assert checkpoint_status(confidence) == status


def test_null_penalty_lands_exactly_on_the_auto_pass_boundary():
    # 0.9 (line) - 0.5 × 40% nulls = 0.70: float arithmetic must not push it to 0.6999…
    rows = [[m, None if i % 5 in (1, 3) else 100 + i] for i, m in enumerate(MONTHS_2024[:10])]
    rec = recommend_chart(["month", "net_revenue"], rows)
    assert rec.chart_type == "line"
    assert rec.confidence == 0.7 and rec.checkpoint_status == "auto_pass"


def test_a_null_kpi_needs_review():
    # the KPI card's 0.95 drops by the 0.30 null cap to 0.65: shown for review, never auto_pass
    rec = recommend_chart(["city", "net_revenue"], [["上海", None]])
    assert rec.shape.kind is ShapeKind.SINGLE_KPI
    assert rec.confidence == 0.65 and rec.checkpoint_status == "needs_review"
    assert rec.option["kpi"]["formatted"] == "—" and rec.option["kpi"]["value"] is None


def test_status_uses_the_rounded_confidence():
    # 0.1 + 0.2 is 0.30000000000000004 in floats; 0.9 - 0.2 is 0.7000000000000001
    assert checkpoint_status(round(0.1 + 0.2, 2)) == "needs_review"
    assert checkpoint_status(round(0.9 - 0.2, 2)) == "auto_pass"
    assert checkpoint_status(0.7 - 1e-9) == "needs_review"
    assert checkpoint_status(0.3 - 1e-9) == "blocked"


def test_boundaries_reached_through_a_preference():
    # a text table is 0.40; preferring a table raises it by 0.15 and stays under auto_pass
    rows = [["立普妥", "辉瑞"], ["格华止", "默克"]]
    rec = recommend_chart(["product_name", "brand"], rows, preferred="table")
    assert rec.confidence == 0.55 and rec.checkpoint_status == "needs_review"


# --------------------------------------------------------------------------- preferences


def test_preferred_bar_wins_over_a_line_for_a_time_series():
    rows = [[m, 100 + i] for i, m in enumerate(MONTHS_2024)]
    rec = recommend_chart(["month", "net_revenue"], rows, preferred="bar")
    assert_consistent(rec)
    assert rec.chart_type == "bar"
    assert "preferred" in rec.candidates[0].reason
    assert rec.option["series"][0]["type"] == "bar" and len(rec.option["series"][0]["data"]) == 12
    assert rec.candidates[1].chart_type == "line"


def test_preferred_pie_never_draws_a_time_series():
    rows = [[m, 100 + i] for i, m in enumerate(MONTHS_2024)]
    rec = recommend_chart(["month", "net_revenue"], rows, preferred="pie")
    assert rec.chart_type == "line"
    assert all(c.chart_type != "pie" for c in rec.candidates)
    assert any("pie cannot show a time series" in n for n in rec.notes)
    assert "ignored" in rec.candidates[0].reason


def test_preferred_bar_for_a_ranking_is_vertical_and_still_sorted():
    rows = [[p, 100 * (i % 7) + i] for i, p in enumerate(PRODUCTS)]
    rec = recommend_chart(["product_name", "net_revenue"], rows, hints=ShapeHints(top_n=10), preferred="柱状图")
    assert rec.chart_type == "bar"
    assert rec.option["xAxis"]["type"] == "category"
    data = rec.option["series"][0]["data"]
    assert data == sorted(data, reverse=True)


def test_preferred_pie_for_a_plain_channel_comparison_is_honoured():
    rows = [["医院", 300], ["零售药店", 500], ["电商", 200], ["诊所", 100]]
    rec = recommend_chart(["channel_name", "net_revenue"], rows, preferred="饼图")
    assert rec.chart_type == "pie" and rec.checkpoint_status == "auto_pass"


@pytest.mark.parametrize(
    "columns, rows, preferred, expected",
    [
        (["product_name", "net_revenue"], [[f"P{i}", 100 - i] for i in range(12)], "pie", "horizontal_bar"),
        (["net_revenue"], [[42]], "bar", "kpi_card"),
        (["product_name", "brand"], [["a", "b"], ["c", "d"]], "line", "table"),
    ],
)
def test_incompatible_preference_is_ignored(columns, rows, preferred, expected):
    rec = recommend_chart(columns, rows, preferred=preferred)
    assert rec.chart_type == expected
    assert any(f"'{preferred}' ignored" in n for n in rec.notes)


def test_preferred_bar_means_a_histogram_for_a_distribution():
    rows = [[i % 37] for i in range(100)]
    rec = recommend_chart(["qty"], rows, preferred="bar")
    assert rec.chart_type == "histogram"
    assert "preferred" in rec.candidates[0].reason


# --------------------------------------------------------------------------- nulls, roles, determinism


def test_nulls_in_a_time_series_are_gaps():
    rows = [[m, None if m == "2024-07" else 100 + i] for i, m in enumerate(MONTHS_2024)]
    rows.append([None, 999])  # a row with no month cannot be placed
    rec = recommend_chart(["month", "net_revenue"], rows)
    assert rec.chart_type == "line" and rec.checkpoint_status == "auto_pass"
    data = rec.option["series"][0]["data"]
    assert len(data) == 12 and data[6] is None and 999 not in data
    assert rec.option["series"][0]["connectNulls"] is False
    assert any("null month" in n for n in rec.notes)


def test_nulls_in_a_pie_are_left_out_and_null_categories_labelled():
    rows = [["医院", 500], [None, 50], ["电商", None], ["诊所", 100]]
    rec = recommend_chart(["channel_name", "net_revenue"], rows, hints=ShapeHints(is_share=True))
    assert rec.chart_type == "pie"
    assert [d["name"] for d in rec.option["series"][0]["data"]] == ["医院", "诊所", "(null)"]
    assert any("null net_revenue left out" in n for n in rec.notes)
    assert rec.confidence < 0.9  # nulls cost confidence


def test_histogram_ignores_nulls():
    rows = [[float(i)] for i in range(60)] + [[None]] * 5
    rec = recommend_chart(["order_amount"], rows)
    assert rec.chart_type == "histogram"
    assert sum(rec.option["series"][0]["data"]) == 60


@pytest.mark.parametrize(
    "name, values, role, granularity",
    [
        ("月份", ["2024年1月", "2024年2月", "2024年10月"], ColumnRole.TEMPORAL, "month"),
        ("month", [1, 2, 3], ColumnRole.TEMPORAL, "ordinal"),
        ("paid_at", [datetime(2024, 5, 1, 9, 30), datetime(2024, 5, 2, 14, 0), None], ColumnRole.TEMPORAL, "timestamp"),
        ("week", ["2024-W01", "2024-W02", "2024-W03"], ColumnRole.TEMPORAL, "week"),
        ("quarter", ["2024Q1", "2024Q2", "2024Q3"], ColumnRole.TEMPORAL, "quarter"),
        ("channel_id", [1, 2, 3], ColumnRole.CATEGORICAL, None),
        ("monthly_revenue", [1, 2, 3], ColumnRole.MEASURE, None),
        ("net_revenue", ["1200.50", "980.00", "1500"], ColumnRole.MEASURE, None),
        ("reason", ["质量问题", "物流延误", "其他"], ColumnRole.CATEGORICAL, None),
        ("is_test", [True, False, True], ColumnRole.CATEGORICAL, None),
        ("discount_amount", [None, None, None], ColumnRole.MEASURE, None),
        ("remark", [None, None, None], ColumnRole.UNKNOWN, None),
    ],
)
def test_column_roles(name, values, role, granularity):
    shape = analyze_shape([name, "x"], [[v, i] for i, v in enumerate(values)])
    profile = shape.column(name)
    assert profile.role is role
    assert profile.granularity == granularity


def test_chinese_months_sort_by_time_not_by_text():
    rows = [["2024年10月", 3], ["2024年2月", 2], ["2024年1月", 1], ["2024年11月", 4]]
    rec = recommend_chart(["月份", "净收入"], rows)
    assert rec.chart_type == "line"
    assert rec.option["xAxis"]["data"] == ["2024年1月", "2024年2月", "2024年10月", "2024年11月"]
    assert rec.option["series"][0]["data"] == [1, 2, 3, 4]


def test_dimension_hint_makes_integer_codes_categorical():
    rows = [[11, 500], [12, 300], [13, 200]]
    plain = analyze_shape(["hospital", "rx_count"], rows)
    hinted = analyze_shape(["hospital", "rx_count"], rows, hints=ShapeHints(dimensions=("hospital",)))
    assert plain.kind is ShapeKind.TABLE  # two bare measures
    assert hinted.kind is ShapeKind.RANKING and hinted.dimension == "hospital"


def test_recommendation_is_deterministic():
    rng = random.Random(3)
    rows = [[m, c, money(rng.uniform(1e5, 9e5))] for m in MONTHS_2024 for c in CHANNELS]
    first = recommend_chart(["month", "channel_name", "net_revenue"], rows).to_dict()
    second = recommend_chart(["month", "channel_name", "net_revenue"], [list(r) for r in rows]).to_dict()
    assert first == second
    assert json.dumps(first, ensure_ascii=False, sort_keys=True) == json.dumps(second, ensure_ascii=False, sort_keys=True)


def test_an_all_null_measure_over_time_is_drawn_as_gaps_for_review():
    rows = [[m, None] for m in MONTHS_2024]
    rec = recommend_chart(["month", "net_revenue"], rows)
    assert_consistent(rec)
    assert rec.shape.kind is ShapeKind.TIME_SERIES
    assert rec.option["series"][0]["data"] == [None] * 12
    assert rec.checkpoint_status == "needs_review"


def test_short_rows_are_padded_with_nulls():
    rows = [["医院", 500], ["电商"], ["诊所", 100]]
    rec = recommend_chart(["channel_name", "net_revenue"], rows)
    assert_consistent(rec)
    assert rec.option["xAxis"]["data"] == ["医院", "诊所"]


# --------------------------------------------------------------------------- partial periods

MONTH_STARTS_2026 = [date(2026, m, 1) for m in range(1, 12)]  # what DuckDB returns for "今年每月" on 2026-11-29


def test_a_month_to_date_bucket_is_marked_on_the_line():
    # Given this year's monthly net revenue, November only to date
    rows = [[m, money(1_000_000 + 10_000 * i)] for i, m in enumerate(MONTH_STARTS_2026)]
    rows[-1][1] = money(880_000)

    # When the partial bucket is named
    rec = recommend_chart(["month", "net_revenue"], rows, hints=ShapeHints(metric="net_revenue", dimensions=("month",)), partial=["2026-11-01"])

    # Then November is hollow and dashed, the segment into it is shaded, and the output says so
    assert_consistent(rec)
    assert rec.chart_type == "line" and rec.option["xAxis"] == {"type": "time"}
    data = rec.option["series"][0]["data"]
    assert data[:-1] == [[m.isoformat(), 1_000_000.0 + 10_000 * i] for i, m in enumerate(MONTH_STARTS_2026[:-1])]
    assert data[-1]["value"] == ["2026-11-01", 880_000.0]
    assert data[-1]["partial"] is True and data[-1]["symbol"] == "emptyCircle"
    assert data[-1]["itemStyle"]["borderType"] == "dashed"
    area = rec.option["series"][0]["markArea"]
    assert area["data"] == [[{"name": "partial period", "xAxis": "2026-10-01"}, {"xAxis": "2026-11-01"}]]
    assert rec.partial_buckets == ["2026-11-01"]
    assert rec.to_dict()["partial_buckets"] == ["2026-11-01"]
    assert "partial periods marked: 2026-11-01" in rec.notes


def test_a_partial_first_bar_is_shaded_over_its_own_band():
    # "2026年6月15日以来每月": June starts mid-month; three points draw as bars on a category axis
    rows = [["2026-06", money(400_000)], ["2026-07", money(1_010_000)], ["2026-08", money(990_000)]]

    rec = recommend_chart(["month", "net_revenue"], rows, partial=["2026-06-01"])

    assert rec.chart_type == "bar"
    data = rec.option["series"][0]["data"]
    assert data[0] == {"value": 400_000.0, "itemStyle": {"opacity": 0.45, "borderType": "dashed", "borderWidth": 1, "borderColor": "#666"}, "partial": True}
    assert data[1:] == [1_010_000.0, 990_000.0]
    assert rec.option["series"][0]["markArea"]["data"] == [[{"name": "partial period", "xAxis": "2026-06"}, {"xAxis": "2026-06"}]]
    assert rec.partial_buckets == ["2026-06-01"]


def test_every_series_marks_the_partial_point_and_one_band_is_drawn():
    rows = [[m, c, money(100_000 * (4 - j) + i)] for i, m in enumerate(MONTHS_2024) for j, c in enumerate(CHANNELS)]

    rec = recommend_chart(["month", "channel_name", "net_revenue"], rows, partial=["2024-12-01"])

    series = rec.option["series"]
    assert all(isinstance(s["data"][-1], dict) and s["data"][-1]["partial"] for s in series)
    assert all(not isinstance(point, dict) for s in series for point in s["data"][:-1])
    assert [("markArea" in s) for s in series] == [True, False, False, False]


def test_labels_match_whatever_form_the_warehouse_returns():
    as_strings = recommend_chart(["month", "units"], [[f"2026-{m:02d}-01", 10 * m] for m in range(1, 12)], partial=["2026-11-01"])
    as_timestamps = recommend_chart(["month", "units"], [[datetime(2026, m, 1), 10 * m] for m in range(1, 12)], partial=["2026-11-01"])

    assert as_strings.partial_buckets == as_timestamps.partial_buckets == ["2026-11-01"]
    assert as_timestamps.option["series"][0]["data"][-1]["partial"] is True


def test_partial_labels_the_result_does_not_hold_change_nothing():
    rows = [[m, money(1_000 + i)] for i, m in enumerate(MONTH_STARTS_2026[:10])]  # January to October

    marked = recommend_chart(["month", "net_revenue"], rows, partial=["2026-11-01"])
    plain = recommend_chart(["month", "net_revenue"], rows)

    assert marked.partial_buckets == []
    assert marked.option == plain.option and marked.notes == plain.notes


def test_a_partial_single_bucket_says_so_on_the_kpi_card():
    rec = recommend_chart(["month", "net_revenue"], [[date(2026, 11, 1), money(880_000)]], partial=["2026-11-01"])

    assert rec.chart_type == "kpi_card"
    assert rec.option["kpi"]["partial"] is True
    assert rec.option["kpi"]["label"] == "2026-11-01 (partial period)"
    assert rec.partial_buckets == ["2026-11-01"]


def test_a_table_lists_its_partial_rows():
    rows = [[m, c, None if c == "诊所" else 1] for m in ("2026-10-01", "2026-11-01") for c in CHANNELS] + [["2026-09-01", "医院", "x"]]

    rec = recommend_chart(["month", "channel_name", "note"], rows, partial=["2026-11-01"])

    assert rec.chart_type == "table"
    assert rec.option["table"]["partial_rows"] == [4, 5, 6, 7]
