"""The analysis kernels against known answers and against scipy/statsmodels/scikit-learn, and the
summaries against the results they read."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from memtool.analysis import kernels
from memtool.analysis.kernels import KernelInputError
from memtool.analysis.summary import format_amount, summarize_analysis

MONTHS = [f"{2024 + (m - 1) // 12}-{(m - 1) % 12 + 1:02d}" for m in range(1, 25)]


def _seasonal(n: int = 24, *, seed: int = 3) -> list[float]:
    rng = random.Random(seed)
    return [1000 + 300 * math.sin(2 * math.pi * i / 12) + 5 * i + rng.gauss(0, 20) for i in range(n)]


def _decimal(x: float) -> Decimal:
    return Decimal(repr(x))


# --- robust seasonal z --------------------------------------------------------------------------


def test_robust_z_flags_only_the_planted_spike_in_a_seasonal_series() -> None:
    values = _seasonal()
    values[18] *= 2.5  # 2025-07

    points = kernels.robust_seasonal_z(values, MONTHS)

    assert [p["label"] for p in points if p["anomaly"]] == ["2025-07"]
    spike = points[18]
    assert spike["z"] > 10
    assert spike["baseline"] == "season_and_neighbours"
    assert spike["expected"] == pytest.approx(values[18] / 2.5, rel=0.1)  # the seasonal level, not the spike


def test_robust_z_on_less_than_a_season_uses_neighbours_and_finds_a_drop() -> None:
    values = [100.0, 104, 98, 101, 103, 99, 30, 102, 100, 97, 101, 99]

    points = kernels.robust_seasonal_z(values, MONTHS[:12], transform="none")

    assert {p["baseline"] for p in points} == {"neighbour_median"}
    assert [p["label"] for p in points if p["anomaly"]] == ["2024-07"]
    assert points[6]["expected"] == pytest.approx(101.0)  # median of 103, 99, 102, 100
    assert points[6]["z"] < -3.5


def test_a_spike_last_season_does_not_make_this_season_an_anomaly() -> None:
    values = _seasonal()
    values[3] *= 3  # a spike in the first season

    points = kernels.robust_seasonal_z(values, MONTHS)

    assert [p["label"] for p in points if p["anomaly"]] == ["2024-04"]
    assert points[15]["baseline"] == "neighbour_median"  # its year-ago point is the spike
    assert points[3]["baseline"] == "season_and_neighbours"  # judged by the next year's April


@pytest.mark.parametrize(
    ("values", "field"),
    [([5.0] * 24, "values"), ([1.0, 2.0, 3.0], "values")],
    ids=["constant", "too-short"],
)
def test_robust_z_refuses_what_it_cannot_judge(values: list[float], field: str) -> None:
    with pytest.raises(KernelInputError) as error:
        kernels.robust_seasonal_z(values, MONTHS[: len(values)])
    assert error.value.field == field
    assert error.value.unanswerable


# --- forecast -----------------------------------------------------------------------------------


def test_seasonal_naive_drift_repeats_an_exact_season_with_its_trend() -> None:
    season = [10.0, 12, 15, 11, 9, 8, 14, 16, 13, 12, 11, 10]
    values = season + [v + 2 for v in season]  # the second year is 2 higher everywhere

    result = kernels.seasonal_forecast(values, MONTHS, horizon=3, period=12)

    assert result["method"] == "seasonal_naive_drift"
    assert [f["label"] for f in result["forecast"]] == ["2026-01", "2026-02", "2026-03"]
    assert [f["point"] for f in result["forecast"]] == pytest.approx([14.0, 16.0, 19.0])
    assert result["backtest_mape"] == pytest.approx(0.0, abs=1e-9)


def test_forecast_intervals_nest_around_the_point_and_the_backtest_is_finite() -> None:
    result = kernels.seasonal_forecast(_seasonal(), MONTHS, horizon=14, period=12)

    for f in result["forecast"]:
        assert f["lower_95"] < f["lower_80"] < f["point"] < f["upper_80"] < f["upper_95"]
    # a second season ahead is less certain than the first
    width = [f["upper_95"] - f["lower_95"] for f in result["forecast"]]
    assert width[13] > width[0]
    assert result["backtest_origins"] == 6
    assert 0 < result["backtest_mape"] < 10


def test_forecast_without_a_full_season_uses_naive_drift() -> None:
    result = kernels.seasonal_forecast([1.0, 2, 3, 4, 5, 6, 7, 8], MONTHS[:8], horizon=2, period=12)

    assert result["method"] == "naive_drift"
    assert [f["point"] for f in result["forecast"]] == pytest.approx([9.0, 10.0])


# --- attribution --------------------------------------------------------------------------------


def test_attribution_sums_exactly_to_the_change_even_when_cents_round_apart() -> None:
    # Three members each losing a third of a cent: rounded one by one they lose nothing.
    before = {"a": 1.0, "b": 1.0, "c": 1.0}
    after = {"a": 0.996667, "b": 0.996667, "c": 0.996666}

    parts = kernels.additive_attribution(before, after)

    assert sum(_decimal(p["delta"]) for p in parts) == Decimal("-0.01")


def test_attribution_of_many_random_members_is_exact_and_ordered_by_size() -> None:
    rng = random.Random(11)
    before = {f"m{i}": round(rng.uniform(0, 10_000), 3) for i in range(40)}
    after = {f"m{i}": round(rng.uniform(0, 10_000), 3) for i in range(5, 45)}  # members come and go

    parts = kernels.additive_attribution(before, after)

    total = (sum(_decimal(v) for v in after.values()) - sum(_decimal(v) for v in before.values())).quantize(Decimal("0.01"))
    assert sum(_decimal(p["delta"]) for p in parts) == total
    assert len(parts) == 45
    assert [abs(p["delta"]) for p in parts] == sorted((abs(p["delta"]) for p in parts), reverse=True)
    assert sum(p["share"] for p in parts) == pytest.approx(1.0)
    gone = next(p for p in parts if p["member"] == "m0")
    assert gone["after"] == 0 and gone["delta"] == -round(before["m0"], 2) or abs(gone["delta"] + before["m0"]) < 0.011


def test_attribution_by_several_dimensions_gives_each_the_same_exact_total() -> None:
    rng = random.Random(5)
    columns = ["period", "region", "channel", "value"]
    rows = [
        [period, region, channel, round(rng.uniform(0, 999.999), 3)]
        for period in ("2026-08", "2026-09")
        for region in ("武汉", "上海", "北京")
        for channel in ("医院", "电商")
    ]

    report = kernels.attribution_report(columns, rows, period_column="period", value_column="value", dimensions=["region", "channel"])

    assert (report["before_period"], report["after_period"]) == ("2026-08", "2026-09")
    total = _decimal(report["total_change"])
    assert total == _decimal(report["after_total"]) - _decimal(report["before_total"])
    for dimension in report["dimensions"]:
        assert sum(_decimal(c["delta"]) for c in dimension["contributions"]) == total


def test_attribution_names_the_missing_period() -> None:
    with pytest.raises(KernelInputError) as error:
        kernels.attribution_report(
            ["period", "r", "v"], [["2026-01", "a", 1], ["2026-02", "a", 2]],
            period_column="period", value_column="v", dimensions=["r"], before_period="2025-12", after_period="2026-02",
        )
    assert error.value.field == "before_period"


# --- rate/mix attribution of a ratio -------------------------------------------------------------


def _pairs(table: Mapping[str, tuple[Any, Any]]) -> dict[str, tuple[Fraction, Fraction]]:
    return {m: (Fraction(Decimal(str(n))), Fraction(Decimal(str(d)))) for m, (n, d) in table.items()}


def _whole(table: dict[str, tuple[Fraction, Fraction]]) -> tuple[Fraction, Fraction]:
    return sum((n for n, _ in table.values()), Fraction(0)), sum((d for _, d in table.values()), Fraction(0))


def test_rate_and_mix_parts_sum_exactly_to_the_change_of_the_ratio() -> None:
    # Refunds over sales in three channels: every channel's own rate and its share of sales move.
    before = _pairs({"hospital": ("1200.50", "40000.00"), "retail": ("300.25", "25000.00"), "online": ("99.99", "5000.00")})
    after = _pairs({"hospital": ("800.10", "38000.00"), "retail": ("610.00", "30500.00"), "online": ("250.00", "9000.00")})
    (n0, d0), (n1, d1) = _whole(before), _whole(after)

    parts = kernels.rate_mix_parts(before, after, (n0, d0), (n1, d1))

    change = n1 / d1 - n0 / d0
    assert sum((p["rate_effect"] + p["mix_effect"] for p in parts), Fraction(0)) == change  # exactly, in rationals
    hospital = next(p for p in parts if p["member"] == "hospital")
    w0, w1 = Fraction(40000, 70000), Fraction(38000, 77500)
    r0, r1 = Fraction(Decimal("1200.50")) / 40000, Fraction(Decimal("800.10")) / 38000
    assert hospital["rate_effect"] == (w0 + w1) / 2 * (r1 - r0)  # the symmetric (Shapley) form
    assert hospital["mix_effect"] == (r0 + r1) / 2 * (w1 - w0)


def test_many_random_segments_still_sum_exactly_and_the_report_floats_within_a_rounding() -> None:
    rng = random.Random(22)
    before = {f"m{i}": (f"{rng.uniform(0, 900):.2f}", f"{rng.uniform(1000, 90000):.2f}") for i in range(30)}
    after = {f"m{i}": (f"{rng.uniform(0, 900):.2f}", f"{rng.uniform(1000, 90000):.2f}") for i in range(4, 34)}  # members come and go
    b, a = _pairs(before), _pairs(after)

    parts = kernels.rate_mix_parts(b, a, _whole(b), _whole(a))

    change = _whole(a)[0] / _whole(a)[1] - _whole(b)[0] / _whole(b)[1]
    assert sum((p["delta"] for p in parts), Fraction(0)) == change
    entering = next(p for p in parts if p["member"] == "m33")
    assert entering["rate_effect"] == 0 and entering["mix_effect"] == entering["delta"] != 0  # a new segment is pure mix
    leaving = next(p for p in parts if p["member"] == "m0")
    assert leaving["rate_effect"] == 0 and leaving["mix_effect"] < 0


def test_a_pure_mix_shift_has_no_rate_effects() -> None:
    # Every segment keeps its own rate (2% and 5%); sales move from the low-rate one to the high-rate one.
    before = _pairs({"low": (200, 10000), "high": (500, 10000)})
    after = _pairs({"low": (100, 5000), "high": (750, 15000)})

    parts = kernels.rate_mix_parts(before, after, _whole(before), _whole(after))

    assert all(p["rate_effect"] == 0 for p in parts)
    assert sum((p["mix_effect"] for p in parts), Fraction(0)) == Fraction(850, 20000) - Fraction(700, 20000)


def test_a_pure_rate_change_has_no_mix_effects() -> None:
    # The same shares of sales (40/60, the total doubled); the segments' own rates move.
    before = _pairs({"a": (80, 4000), "b": (300, 6000)})
    after = _pairs({"a": (400, 8000), "b": (240, 12000)})

    parts = kernels.rate_mix_parts(before, after, _whole(before), _whole(after))

    assert all(p["mix_effect"] == 0 for p in parts)
    rates = {p["member"]: p["rate_effect"] for p in parts}
    assert rates == {"a": Fraction(4, 10) * Fraction(3, 100), "b": Fraction(6, 10) * Fraction(-3, 100)}


def test_segments_that_do_not_partition_the_numerator_are_refused() -> None:
    before = _pairs({"a": (10, 100), "b": (10, 100)})
    after = _pairs({"a": (10, 100), "b": (20, 100)})
    with pytest.raises(KernelInputError) as error:
        kernels.rate_mix_parts(before, after, (Fraction(25), Fraction(200)), _whole(after))
    assert error.value.unanswerable and "do not partition" in str(error.value)


RATE_ROWS = [
    # period, dimension, member, refunds, sales
    ["2026-06", "channel", "医院", 900.00, 30000.00],
    ["2026-06", "channel", "零售", 300.00, 20000.00],
    ["2026-07", "channel", "医院", 310.00, 31000.00],
    ["2026-07", "channel", "零售", 380.00, 19000.00],
    ["2026-06", "refund_reason", "质量问题", 1000.00, 50000.00],  # a reason over all sales: the reasons' rates add up
    ["2026-06", "refund_reason", "物流延误", 200.00, 50000.00],
    ["2026-07", "refund_reason", "质量问题", 400.00, 50000.00],
    ["2026-07", "refund_reason", "物流延误", 290.00, 50000.00],
]
RATE_COLUMNS = ["month", "dimension", "member", "refund_amount", "gross_revenue"]
RATE_TOTALS = {"2026-06": [1200.00, 50000.00], "2026-07": [690.00, 50000.00]}


def _rate_report(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "period_column": "month", "dimension_column": "dimension", "member_column": "member", "numerator_column": "refund_amount",
        "denominator_column": "gross_revenue", "totals": RATE_TOTALS, "before_period": "2026-06", "after_period": "2026-07",
        "shared_denominator": ["refund_reason"],
    }  # fmt: skip
    return kernels.rate_attribution_report(RATE_COLUMNS, RATE_ROWS, **{**arguments, **overrides})


def test_the_rate_report_splits_each_dimension_and_names_the_biggest_part() -> None:
    report = _rate_report()

    assert report["method"] == "rate_mix"
    assert report["before_total"] == pytest.approx(0.024, abs=1e-15) and report["after_total"] == pytest.approx(0.0138, abs=1e-15)
    assert report["total_change"] == pytest.approx(-0.0102, abs=1e-15)
    for dimension in report["dimensions"]:
        parts = math.fsum(c["rate_effect"] + c["mix_effect"] for c in dimension["contributions"])
        assert parts == pytest.approx(report["total_change"], abs=1e-15)
        assert dimension["rate_effect"] + dimension["mix_effect"] == pytest.approx(report["total_change"], abs=1e-15)
    channel, reason = report["dimensions"]
    assert (channel["dimension"], channel["denominators"], reason["denominators"]) == ("channel", "partition", "shared")
    assert reason["mix_effect"] == 0 and [c["member"] for c in reason["contributions"]] == ["质量问题", "物流延误"]
    hospital = channel["contributions"][0]
    assert hospital["member"] == "医院" and (hospital["before"], hospital["after"]) == (0.03, 0.01)
    # 医院's own rate fell from 3% to 1% at an average weight of 0.61: −0.0122, the biggest single part.
    assert hospital["rate_effect"] == pytest.approx(0.61 * -0.02, abs=1e-15)
    assert report["biggest_part"] == {"dimension": "channel", "member": "医院", "effect": "rate", "value": hospital["rate_effect"],
                                      "share": pytest.approx(hospital["rate_effect"] / -0.0102)}  # fmt: skip


def test_a_dimension_that_cannot_add_up_is_skipped_with_its_reason() -> None:
    rows = [*RATE_ROWS, ["2026-06", "product", "A", 1.00, 10.00], ["2026-07", "product", "A", 2.00, 10.00]]
    report = kernels.rate_attribution_report(
        RATE_COLUMNS, rows, period_column="month", dimension_column="dimension",
        member_column="member", numerator_column="refund_amount", denominator_column="gross_revenue", totals=RATE_TOTALS,
        before_period="2026-06", after_period="2026-07", shared_denominator=["refund_reason"],
    )  # fmt: skip
    assert [d["dimension"] for d in report["dimensions"]] == ["channel", "refund_reason"]
    [skipped] = report["skipped"]
    assert skipped["dimension"] == "product" and "do not partition" in skipped["reason"]


def test_a_numerator_off_by_its_queries_rounding_is_absorbed_not_refused() -> None:
    rows = [[*r[:3], float(str(r[3])) + (0.01 if r[2] == "零售" and r[0] == "2026-07" else 0), r[4]] for r in RATE_ROWS]
    with pytest.raises(KernelInputError):
        kernels.rate_attribution_report(
            RATE_COLUMNS, rows[:4], period_column="month", dimension_column="dimension",
            member_column="member", numerator_column="refund_amount", denominator_column="gross_revenue", totals=RATE_TOTALS,
            before_period="2026-06", after_period="2026-07",
        )  # fmt: skip
    report = _rate_report(rounding=0.005)
    assert report["skipped"] == []
    rounded = kernels.rate_attribution_report(
        RATE_COLUMNS, rows[:4], period_column="month", dimension_column="dimension",
        member_column="member", numerator_column="refund_amount", denominator_column="gross_revenue", totals=RATE_TOTALS,
        before_period="2026-06", after_period="2026-07", rounding=0.005,
    )  # fmt: skip
    [channel] = rounded["dimensions"]
    assert math.fsum(c["delta"] for c in channel["contributions"]) == pytest.approx(rounded["total_change"], abs=1e-15)


def test_the_rate_summary_names_the_biggest_part_and_keeps_a_ratios_digits() -> None:
    report = _rate_report()
    labels = {"channel": "渠道", "refund_reason": "退款原因", "gross_revenue": "销售额"}

    zh = summarize_analysis("attribution", report, lang="zh", metric_label="退款率", unit=None, dimension_labels=labels)
    en_labels = {"channel": "channel", "refund_reason": "refund reason", "gross_revenue": "gross revenue"}
    en = summarize_analysis("attribution", report, lang="en", metric_label="refund rate", unit=None, dimension_labels=en_labels)

    assert zh.startswith("退款率从 2026-06 的 0.024 降到 2026-07 的 0.0138（−0.0102）。")
    assert "最大的一项是渠道「医院」自身退款率的变化：−0.0122（占变化的 119.6%）。" in zh
    assert "按退款原因看（分母都是全部销售额，没有结构效应），质量问题 −0.012（0.02→0.008）" in zh
    assert "各渠道自身退款率的变化合计" in zh and "渠道结构（销售额占比）的变化合计" in zh
    assert en.startswith(
        "refund rate fell from 0.024 in 2026-06 to 0.0138 in 2026-07 (−0.0102). The biggest part is channel 医院's own refund rate, −0.0122"
    )


def test_a_ratio_keeps_enough_digits_to_be_read() -> None:
    assert format_amount(0.0312, lang="en", unit=None) == "0.0312"
    assert format_amount(-0.000344, lang="zh", unit=None) == "−0.000344"
    assert format_amount(0.5, lang="en", unit="元") == "0.5 yuan"  # money keeps cents
    point = {"label": "2026-05", "value": 0.0312, "expected": 0.0203, "z": 4.2, "flagged_by": ["robust_z"]}
    text = summarize_analysis("anomaly", {"points": [point], "threshold": 3.5}, lang="en", metric_label="refund rate", unit=None)
    assert text.startswith("In 2026-05, refund rate was 0.0312, 53.7% above the expected 0.0203 (robust z = 4.2)")


# --- distributions and correlation against scipy ------------------------------------------------


@pytest.mark.parametrize(("a", "b", "x"), [(0.5, 0.5, 0.3), (2.0, 3.0, 0.9), (10.0, 0.5, 0.95), (25.0, 40.0, 0.4), (1.5, 7.0, 1e-4)])
def test_regularized_beta_matches_scipy(a: float, b: float, x: float) -> None:
    from scipy.special import betainc

    assert kernels.regularized_beta(a, b, x) == pytest.approx(betainc(a, b, x), rel=1e-10, abs=1e-14)


@pytest.mark.parametrize(("t", "df"), [(0.0, 5), (1.3, 3), (-2.7, 10), (8.0, 22), (0.05, 1)])
def test_student_t_p_matches_scipy(t: float, df: int) -> None:
    from scipy import stats

    assert kernels.student_t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(("statistic", "df"), [(0.5, 2), (3.84, 1), (12.0, 4), (40.0, 3), (0.0, 2)])
def test_chi2_tail_matches_scipy(statistic: float, df: int) -> None:
    from scipy import stats

    assert kernels.chi2_sf(statistic, df) == pytest.approx(stats.chi2.sf(statistic, df), rel=1e-9, abs=1e-15)


def test_pearson_and_spearman_match_scipy_with_ties() -> None:
    from scipy import stats

    rng = np.random.default_rng(2)
    x = rng.normal(size=30)
    y = 0.4 * x + rng.normal(size=30)
    x_tied = np.round(x, 0).tolist()  # many ties

    r, p = kernels.pearson(x.tolist(), y.tolist())
    rho, p_rho = kernels.spearman(x_tied, y.tolist())

    expected = stats.pearsonr(x, y)
    expected_rank = stats.spearmanr(x_tied, y)
    assert (r, p) == pytest.approx((expected.statistic, expected.pvalue), rel=1e-9)
    assert (rho, p_rho) == pytest.approx((expected_rank.statistic, expected_rank.pvalue), rel=1e-9)
    assert p < 0.05  # the planted relation is there


def test_correlation_of_a_constant_column_names_it() -> None:
    with pytest.raises(KernelInputError) as error:
        kernels.correlation_report(["a", "b"], [[1, 5], [2, 5], [3, 5]])
    assert error.value.field == "numeric_columns" and "'b'" in str(error.value)


# --- clustering and regression against scikit-learn and statsmodels ----------------------------


def test_numpy_silhouette_matches_scikit_learn() -> None:
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(0)
    points = np.vstack([rng.normal(c, 0.5, size=(10, 2)) for c in (0, 4, 8)])
    labels, _ = kernels.kmeans(points, 3, seed=1)

    assert kernels.silhouette(points, labels) == pytest.approx(silhouette_score(points, labels), rel=1e-9)


def test_clustering_report_finds_three_blobs() -> None:
    rng = np.random.default_rng(4)
    rows = [[f"p{c}-{i}", *rng.normal((c * 10, -c * 5), 1.0).tolist()] for c in range(3) for i in range(8)]

    report = kernels.clustering_report(["id", "x", "y"], rows, id_column="id", feature_columns=None)

    assert report["k"] == 3
    assert report["silhouette"] == max(s["silhouette"] for s in report["silhouette_by_k"])
    assert sorted(c["size"] for c in report["clusters"]) == [8, 8, 8]
    for cluster in report["clusters"]:
        assert len({m.split("-")[0] for m in cluster["members"]}) == 1  # a blob is never split


def test_numpy_ols_matches_statsmodels() -> None:
    import statsmodels.api as sm
    from statsmodels.stats.diagnostic import het_breuschpagan
    from statsmodels.stats.stattools import durbin_watson, jarque_bera

    rng = np.random.default_rng(9)
    x1, x2 = rng.normal(size=60), rng.uniform(0, 10, size=60)
    y = 3 + 2 * x1 - 1.5 * x2 + rng.normal(0, 1 + 0.1 * x2)
    rows = [[a, b, c] for a, b, c in zip(y, x1, x2, strict=True)]

    report = kernels.regression_report(["y", "x1", "x2"], rows, target="y", features=None)

    design = sm.add_constant(np.column_stack([x1, x2]))
    fit = sm.OLS(y, design).fit()
    assert [c["estimate"] for c in report["coefficients"]] == pytest.approx(fit.params.tolist(), rel=1e-9)
    assert [c["p"] for c in report["coefficients"]] == pytest.approx(fit.pvalues.tolist(), rel=1e-6, abs=1e-300)
    assert report["r_squared"] == pytest.approx(fit.rsquared)
    checks = report["residual_checks"]
    assert checks["jarque_bera_p"] == pytest.approx(jarque_bera(fit.resid)[1], rel=1e-9)
    assert checks["durbin_watson"] == pytest.approx(durbin_watson(fit.resid), rel=1e-12)
    assert checks["breusch_pagan_p"] == pytest.approx(het_breuschpagan(fit.resid, design)[1], rel=1e-9)


# --- summaries ----------------------------------------------------------------------------------


def test_anomaly_summary_states_the_results_numbers_in_chinese() -> None:
    result = kernels.anomaly_report([41000.0] * 5 + [123000.0] + [41000.0, 40000, 42000, 41500, 40500, 41200], MONTHS[:12], series_name="refund_amount", period=None)
    spike = result["points"][5]

    text = summarize_analysis("anomaly", result, lang="zh", metric_label="退款额", unit="元")

    assert text.startswith("2024-06 的退款额为 12.3 万元，比预期（4.1 万元）高 200%")
    assert f"稳健 z = {spike['z']:.1f}" in text and "是异常点" in text


def test_attribution_summary_names_the_top_members_with_their_shares() -> None:
    result = kernels.attribution_report(
        ["period", "product", "v"],
        [["2026-08", "A", 100.0], ["2026-08", "B", 50.0], ["2026-09", "A", 40.0], ["2026-09", "B", 70.0]],
        period_column="period", value_column="v", dimensions=["product"],
    )

    zh = summarize_analysis("attribution", result, lang="zh", metric_label="净收入", unit="元", dimension_labels={"product": "产品"})
    en = summarize_analysis("attribution", result, lang="en", metric_label="net revenue", unit="元")

    assert zh == "净收入从 2026-08 的 150 元 降到 2026-09 的 110 元（−40 元）。按产品看，A 贡献了 −60 元（占 150%），B 贡献了 +20 元（占 −50%）。"
    assert en.startswith("net revenue fell from 150 yuan in 2026-08 to 110 yuan in 2026-09 (−40 yuan). By product, A contributed −60 yuan")


def test_forecast_summary_quotes_the_interval_and_mape() -> None:
    result = {"horizon": 1, "period": 12, "series": [{"group": None, "method": "m", "history_points": 24, "last_label": "2026-11", "last_value": 1.0,
               "forecast": [{"label": "2026-12", "point": 123456.0, "lower_80": 1.0, "upper_80": 2.0, "lower_95": 100000.0, "upper_95": 150000.0}],
               "backtest_mape": 7.84, "backtest_origins": 6}]}

    assert summarize_analysis("forecast", result, lang="zh", metric_label="净收入", unit="元") == (
        "预计净收入：2026-12 为 12.3 万元（95% 区间 10.0 万元–15.0 万元）；回测 MAPE 7.8%。"
    )


def test_amounts_read_naturally() -> None:
    assert format_amount(123456.0, lang="zh", unit="元") == "12.3 万元"
    assert format_amount(-2.5e8, lang="zh", unit="元") == "−2.50 亿元"
    assert format_amount(1234.5, lang="en", unit="元") == "1,234 yuan"  # banker's rounding of .5


# --- lazy imports -------------------------------------------------------------------------------


def test_analysis_modules_import_no_heavy_library() -> None:
    probe = (
        "import sys\n"
        "import memtool.analysis.ml.registry, memtool.analysis.kernels, memtool.analysis.scripts, memtool.analysis.summary\n"
        "memtool.analysis.ml.registry.ml_registry()\n"
        "print(','.join(m for m in ('sklearn', 'scipy', 'statsmodels', 'pandas') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""


def test_the_kernels_source_imports_only_the_standard_library_and_numpy() -> None:
    import ast

    from memtool.analysis.scripts import kernels_source

    tree = ast.parse(kernels_source())  # what ships into the sandbox: the kernel files, joined
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported <= {"__future__", "math", "statistics", "collections", "decimal", "fractions", "typing", "numpy"}


def test_the_month_after_a_drop_is_judged_without_the_drop() -> None:
    # A distributor switch: one month at a third, the next month back to normal.
    values = [200.0, 204, 198, 207, 201, 199, 205, 203, 196, 202, 206, 200, 203, 199, 208, 201, 204, 198, 206, 201, 65.0, 205.0]
    labels = [f"{2025 + i // 12}-{i % 12 + 1:02d}" for i in range(len(values))]
    points = kernels.robust_seasonal_z(values, labels, period=12)
    flagged = [p["label"] for p in points if p["anomaly"]]
    assert flagged == [labels[20]]  # the drop, not the recovery
    recovery = points[21]
    assert abs(recovery["z"]) < 3.5 and recovery["expected"] > 150  # the drop did not set its baseline


def test_a_quantity_never_negative_is_not_forecast_below_zero() -> None:
    values = [120.0, 5, 300, 2, 250, 8, 190, 1, 280, 4, 220, 6]  # wild, but never negative
    result = kernels.seasonal_forecast(values, MONTHS[:12], 3, None)
    assert all(p["lower_95"] >= 0 and p["lower_80"] >= 0 for p in result["forecast"])
    signed = kernels.seasonal_forecast([v - 150 for v in values], MONTHS[:12], 3, None)
    assert any(p["lower_95"] < 0 for p in signed["forecast"])  # a quantity that can be negative keeps its interval


def test_small_samples_and_rough_forecasts_carry_a_caution_and_measures_are_named_in_the_language() -> None:
    rows = [[f"c{i}", 100.0 * i, 10.0 * i + (i % 3)] for i in range(1, 11)]
    result = kernels.correlation_report(["city", "net_revenue", "order_count"], rows)
    text = summarize_analysis("correlation", result, lang="zh", metric_label="净收入", unit=None, dimension_labels={"net_revenue": "净收入", "order_count": "订单数"})
    assert text.startswith("共 10 行。净收入 与 订单数：") and text.endswith("（只有 10 个样本，结论仅供参考。）")
    forecast = {"horizon": 1, "period": 12, "series": [{"group": None, "method": "m", "history_points": 24, "last_label": "2026-10", "last_value": 1.0,
                "forecast": [{"label": "2026-11", "point": 10.0, "lower_80": 8.0, "upper_80": 12.0, "lower_95": 6.0, "upper_95": 14.0}],
                "backtest_mape": 65.6, "backtest_origins": 6}]}
    assert "回测误差大，预测仅供参考" in summarize_analysis("forecast", forecast, lang="zh", metric_label="销量", unit=None)


def test_the_shipped_kernels_define_every_name_the_kernels_module_exports() -> None:
    from memtool.analysis.scripts import kernels_source

    namespace: dict[str, Any] = {"__name__": "the_sandbox_script"}
    exec(compile(kernels_source(), "kernels", "exec"), namespace)  # no memtool import needed: one script
    assert set(kernels.__all__) <= set(namespace)
    for name in ("rate_attribution_report", "chi2_sf", "as_float", "robust_seasonal_z"):  # one of each file
        assert namespace[name].__module__ == "the_sandbox_script"  # defined in the text, not imported
