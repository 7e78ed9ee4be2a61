"""The chart of an analysis's result (ECharts options), for the deep-analysis route.

- anomaly: the series, its expected values dashed, the flagged points marked;
- forecast: the history, then the forecast with its 95 % interval;
- attribution: each member's contribution to the change (the first dimension), largest first;
- clustering: the size of each cluster; correlation: r per pair; regression: the coefficients.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memtool.analysis.kinds import AnalysisKind, is_analysis_kind

_TITLES: dict[AnalysisKind, tuple[str, str]] = {
    "anomaly": ("异常检测", "Anomalies"),
    "forecast": ("预测", "Forecast"),
    "attribution": ("变化归因", "What changed"),
    "clustering": ("分群", "Clusters"),
    "correlation": ("相关性", "Correlation"),
    "regression": ("回归系数", "Regression coefficients"),
}


def analysis_chart(
    kind: str, result: dict[str, Any], *, lang: str, history: list[tuple[str, float]] | None = None
) -> dict[str, Any] | None:
    """{type, option} for the result, or None when the result has nothing to draw."""
    if not is_analysis_kind(kind):  # segments, or a kind with no chart
        return None
    title = _TITLES[kind][0 if lang == "zh" else 1]
    built = _BUILDERS[kind](result, lang, history or [])
    if built is None:
        return None
    chart_type, option = built
    option = {"title": {"text": title}, "tooltip": {"trigger": "axis"}, **option}
    return {"type": chart_type, "option": option}


def _anomaly(result: dict[str, Any], lang: str, _history: list[tuple[str, float]]) -> tuple[str, dict[str, Any]] | None:
    points = result.get("points") or []
    if not points:
        return None
    labels = [p["label"] for p in points]
    actual, expected = ("实际", "预期") if lang == "zh" else ("actual", "expected")
    return "line", {
        "legend": {"data": [actual, expected]},
        "xAxis": {"type": "category", "data": labels},
        "yAxis": {"type": "value"},
        "series": [
            {
                "name": actual,
                "type": "line",
                "data": [p["value"] for p in points],
                "markPoint": {
                    "data": [{"coord": [p["label"], p["value"]], "name": f"z={p['z']:.1f}"} for p in points if p.get("flagged_by")]
                },
            },
            {"name": expected, "type": "line", "lineStyle": {"type": "dashed"}, "data": [p["expected"] for p in points]},
        ],
    }


def _forecast(result: dict[str, Any], lang: str, history: list[tuple[str, float]]) -> tuple[str, dict[str, Any]] | None:
    series = result.get("series") or []
    if not series:
        return None
    first = series[0]
    if len(series) > 1:  # several groups: one forecast line each
        labels = [p["label"] for p in first["forecast"]]
        return "line", {
            "legend": {"data": [s.get("group") or "" for s in series]},
            "xAxis": {"type": "category", "data": labels},
            "yAxis": {"type": "value"},
            "series": [{"name": s.get("group") or "", "type": "line", "data": [p["point"] for p in s["forecast"]]} for s in series],
        }
    past = [label for label, _ in history]
    future = [p["label"] for p in first["forecast"]]
    pad = [None] * len(past)
    names = ("历史", "预测", "95% 下限", "95% 上限") if lang == "zh" else ("history", "forecast", "95% lower", "95% upper")
    return "line", {
        "legend": {"data": list(names)},
        "xAxis": {"type": "category", "data": past + future},
        "yAxis": {"type": "value"},
        "series": [
            {"name": names[0], "type": "line", "data": [v for _, v in history] + [None] * len(future)},
            {"name": names[1], "type": "line", "data": pad + [p["point"] for p in first["forecast"]]},
            {"name": names[2], "type": "line", "lineStyle": {"type": "dashed"}, "data": pad + [p["lower_95"] for p in first["forecast"]]},
            {"name": names[3], "type": "line", "lineStyle": {"type": "dashed"}, "data": pad + [p["upper_95"] for p in first["forecast"]]},
        ],
    }


def _attribution(result: dict[str, Any], lang: str, _history: list[tuple[str, float]]) -> tuple[str, dict[str, Any]] | None:
    dimensions = result.get("dimensions") or []
    if not dimensions:
        return None
    # The dimension whose largest part explains most of the change is the one to draw.
    def weight(dimension: dict[str, Any]) -> float:
        return max((abs(c["delta"]) for c in dimension["contributions"]), default=0.0)

    chosen = max(dimensions, key=weight)
    parts = sorted(chosen["contributions"], key=lambda c: abs(c["delta"]), reverse=True)[:10]
    return "horizontal_bar", {
        "xAxis": {"type": "value"},
        "yAxis": {"type": "category", "data": [c["member"] for c in reversed(parts)]},
        "series": [{"name": chosen["dimension"], "type": "bar", "data": [c["delta"] for c in reversed(parts)]}],
    }


def _clustering(result: dict[str, Any], lang: str, _history: list[tuple[str, float]]) -> tuple[str, dict[str, Any]] | None:
    clusters = result.get("clusters") or []
    if not clusters:
        return None
    name = "成员数" if lang == "zh" else "members"
    return "bar", {
        "xAxis": {"type": "category", "data": [str(c["cluster"]) for c in clusters]},
        "yAxis": {"type": "value"},
        "series": [{"name": name, "type": "bar", "data": [c["size"] for c in clusters]}],
    }


def _correlation(result: dict[str, Any], lang: str, _history: list[tuple[str, float]]) -> tuple[str, dict[str, Any]] | None:
    pairs = result.get("pairs") or []
    if not pairs:
        return None
    return "bar", {
        "xAxis": {"type": "category", "data": [f"{p['x']}~{p['y']}" for p in pairs]},
        "yAxis": {"type": "value", "min": -1, "max": 1},
        "series": [{"name": "pearson r", "type": "bar", "data": [p["pearson_r"] for p in pairs]}],
    }


def _regression(result: dict[str, Any], lang: str, _history: list[tuple[str, float]]) -> tuple[str, dict[str, Any]] | None:
    coefficients = result.get("coefficients") or []
    if not coefficients or not isinstance(coefficients, list):
        return None
    named = [c for c in coefficients if isinstance(c, dict) and c.get("name") not in (None, "const", "intercept")]
    if not named:
        return None
    return "bar", {
        "xAxis": {"type": "category", "data": [c["name"] for c in named]},
        "yAxis": {"type": "value"},
        "series": [{"name": "coefficient", "type": "bar", "data": [c.get("estimate", c.get("coefficient")) for c in named]}],
    }


_BUILDERS: dict[AnalysisKind, Callable[[dict[str, Any], str, list[tuple[str, float]]], tuple[str, dict[str, Any]] | None]] = {
    "anomaly": _anomaly,
    "forecast": _forecast,
    "attribution": _attribution,
    "clustering": _clustering,
    "correlation": _correlation,
    "regression": _regression,
}
