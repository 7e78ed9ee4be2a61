"""Analysis kernels: robust seasonal z-scores, a seasonal forecast, exact additive attribution,
the rate/mix attribution of a ratio's change, correlation with p-values, k-means with silhouette
and OLS, on plain lists and floats.

The kernels' SOURCE is shipped into the code-interpreter sandbox as the head of a templated script
(``memtool.analysis.scripts.kernels_source``): this file after its two siblings, ``kernels_tables``
(the table and series helpers, the input error) and ``kernels_attribution`` (additive and rate/mix
attribution), with their imports of each other taken out. So the three import the standard
library and numpy only, never pandas, scipy, scikit-learn or statsmodels, and no other memtool
module; what they import of each other is a sibling kernel, by name. The ``*_report`` functions
build results in the same JSON shape as the ML tools' output models (``memtool.analysis.ml``), so
one summariser reads both.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from memtool.analysis.kernels_attribution import (
    additive_attribution,
    attribution_report,
    rate_attribution_report,
    rate_mix_parts,
)
from memtool.analysis.kernels_distributions import (
    chi2_sf,
    regularized_beta,
    regularized_gamma_q,
    student_t_two_sided_p,
)
from memtool.analysis.kernels_tables import (
    MAD_TO_SIGMA,
    Z_80,
    Z_95,
    KernelInputError,
    _check_series,
    as_float,
    is_numeric_column,
    month_of_year,
    next_labels,
    numeric_column,
    period_label,
    series_from_table,
    table_column,
)

# Every kernel by name, its siblings' included: callers read them all as ``kernels.X``.
__all__ = [
    "Forecaster",
    "KernelInputError",
    "MAD_TO_SIGMA",
    "Z_80",
    "Z_95",
    "additive_attribution",
    "anomaly_report",
    "as_float",
    "attribution_report",
    "average_ranks",
    "chi2_sf",
    "cluster_profiles",
    "clustering_inputs",
    "clustering_report",
    "correlation_report",
    "durbin_watson",
    "floor_at_zero",
    "forecast_report",
    "grouped_series",
    "interval_points",
    "is_numeric_column",
    "jarque_bera_p",
    "kmeans",
    "month_of_year",
    "next_labels",
    "numeric_column",
    "numeric_columns",
    "pearson",
    "period_label",
    "rate_attribution_report",
    "rate_mix_parts",
    "regression_inputs",
    "regression_report",
    "regularized_beta",
    "regularized_gamma_q",
    "robust_seasonal_z",
    "rolling_origin_mape",
    "seasonal_forecast",
    "seasonal_naive_drift",
    "segment_report",
    "series_from_table",
    "silhouette",
    "spearman",
    "standardise",
    "student_t_two_sided_p",
    "table_column",
]


# ---------------------------------------------------------------------------------------------
# Robust seasonal z-scores
# ---------------------------------------------------------------------------------------------


def _neighbour_median(values: Sequence[float], i: int, reach: int, skip: frozenset[int] = frozenset()) -> float:
    """The median of the ``reach`` points on each side, leaving out ``skip`` (anomalies already
    found) unless nothing else is left: a drop must not make the next month's recovery look high."""
    near = [j for j in range(max(0, i - reach), min(len(values), i + 1 + reach)) if j != i]
    kept = [j for j in near if j not in skip] or near
    return statistics.median(values[j] for j in kept)


def _robust_scale(residuals: Sequence[float]) -> float:
    """1.4826·MAD; when more than half the residuals tie (MAD 0), the mean absolute deviation
    scaled to sigma (1.2533·MeanAD), so a mostly flat series with one jump still has a scale."""
    centre = statistics.median(residuals)
    mad = statistics.median(abs(r - centre) for r in residuals)
    if mad > 0:
        return MAD_TO_SIGMA * mad
    mean_ad = statistics.fmean(abs(r - centre) for r in residuals)
    return 1.2533141373155 * mean_ad


def _scored_values(values: Sequence[float], transform: str) -> tuple[bool, list[float]]:
    """Whether to score log values (``transform``: auto, log or none), and the values to score."""
    if transform not in ("auto", "log", "none"):
        raise KernelInputError(f"transform must be auto, log or none, not {transform!r}", field="transform")
    positive = min(values) > 0
    if transform == "log" and not positive:
        raise KernelInputError("a log transform needs every value to be positive", field="transform")
    use_log = transform == "log" or (transform == "auto" and positive)
    return use_log, [math.log(v) for v in values] if use_log else [float(v) for v in values]


def _local_outliers(scored: Sequence[float], local: Sequence[float], threshold: float) -> list[bool]:
    """Which points are outliers among their neighbours (``local``: the neighbours' medians)."""
    n = len(scored)
    local_residuals = [scored[i] - local[i] for i in range(n)]
    local_scale = _robust_scale(local_residuals) or 1.0
    return [abs(r) / local_scale >= threshold for r in local_residuals]


def _season_partner(i: int, n: int, lag: int) -> int | None:
    """The same period in the other season: a season back, or for the first season a season ahead
    (``lag`` 0: no season to compare with)."""
    if lag > 0 and i >= lag:
        return i - lag
    if lag > 0 and i + lag < n:
        return i + lag
    return None


def _seasonal_baseline(
    scored: Sequence[float], local: Sequence[float], lag: int, drift: float, outlier_locally: Sequence[bool]
) -> tuple[list[float], list[str]]:
    """Each point's expected value and the baseline that set it."""
    n = len(scored)
    expected: list[float] = []
    baselines: list[str] = []
    for i in range(n):
        # The same period in the other season: a year back, or for the first season a year ahead
        # (less the drift), so a seasonal first year is not judged by its unseasonal neighbours.
        partner = _season_partner(i, n, lag)
        if partner is not None and not outlier_locally[partner]:
            season_ago = scored[partner] + (drift if partner < i else -drift)
            expected.append((season_ago + local[i]) / 2.0)
            baselines.append("season_and_neighbours")
        else:
            expected.append(local[i])
            baselines.append("neighbour_median")
    return expected, baselines


def robust_seasonal_z(
    values: Sequence[float],
    labels: Sequence[str],
    period: int | None = 12,
    threshold: float = 3.5,
    reach: int = 2,
    transform: str = "auto",
) -> list[dict[str, Any]]:
    """Each point's expected value, robust z and anomaly flag.

    Where the same period one season earlier exists (for the first season: one season later) and
    is not itself an outlier among its neighbours (a spike last June must not make this June look
    like a drop), the expected value is the mean of that point shifted by the median
    season-over-season change and the median of the ``reach`` neighbours on each side; with only
    two seasons a single year-ago point is as noisy as the point it judges, and the neighbours halve
    that noise. Without another season, the expected value is the neighbours' median alone. The residual is scaled by 1.4826·MAD of all
    residuals, so one spike cannot inflate the scale that judges it.

    ``transform="log"`` scores log values (a drop to 25% is as unusual at any level; amounts are
    multiplicative); ``"auto"`` uses it when every value is positive, ``"none"`` never.
    """
    _check_series(values, labels, minimum=max(2 * reach + 1, 6))
    use_log, scored = _scored_values(values, transform)
    n = len(scored)
    local = [_neighbour_median(scored, i, reach) for i in range(n)]
    outlier_locally = _local_outliers(scored, local, threshold)

    lag = period if period is not None and period >= 2 and n > period else 0  # 0: no season to compare with
    drift = statistics.median(scored[j] - scored[j - lag] for j in range(lag, n)) if lag > 0 else 0.0

    expected, baselines = _seasonal_baseline(scored, local, lag, drift, outlier_locally)
    residuals = [scored[i] - expected[i] for i in range(n)]
    scale = _robust_scale(residuals) or 1.0
    found = frozenset(i for i in range(n) if abs(residuals[i]) / scale >= threshold)
    if found:
        # Second pass: neighbours that are anomalies themselves do not set anyone's baseline.
        # The scale is never tightened by it: a flatter baseline must not turn noise into anomalies.
        local = [_neighbour_median(scored, i, reach, found - {i}) for i in range(n)]
        expected, baselines = _seasonal_baseline(scored, local, lag, drift, outlier_locally)
        residuals = [scored[i] - expected[i] for i in range(n)]
        scale = max(scale, _robust_scale(residuals) or 1.0)
    return [
        {
            "label": str(labels[i]),
            "value": float(values[i]),
            "expected": math.exp(expected[i]) if use_log else expected[i],
            "z": residuals[i] / scale,
            "anomaly": abs(residuals[i] / scale) >= threshold,
            "baseline": baselines[i],
            "scale": scale,
            "transform": "log" if use_log else "none",
        }
        for i in range(n)
    ]


def anomaly_report(
    values: Sequence[float],
    labels: Sequence[str],
    *,
    series_name: str,
    period: int | None = 12,
    threshold: float = 3.5,
    transform: str = "auto",
) -> dict[str, Any]:
    """The ``AnomalyResult`` shape with the robust z method only (no isolation forest here)."""
    scored = robust_seasonal_z(values, labels, period=period, threshold=threshold, transform=transform)
    points = [
        {
            "label": p["label"],
            "value": p["value"],
            "expected": p["expected"],
            "z": p["z"],
            "baseline": p["baseline"],
            "robust_anomaly": p["anomaly"],
            "iforest_score": None,
            "iforest_anomaly": None,
            "flagged_by": ["robust_z"] if p["anomaly"] else [],
        }
        for p in scored
    ]
    return {
        "series_name": series_name,
        "period": period,
        "threshold": threshold,
        "transform": scored[0]["transform"],
        "scale": scored[0]["scale"],
        "methods": ["robust_z"],
        "points": points,
        "anomalies": [p["label"] for p in points if p["flagged_by"]],
    }


def segment_report(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    dimension_column: str,
    member_column: str,
    label_column: str,
    value_column: str,
    focus: str | None = None,
    period: int | None = 12,
    threshold: float = 3.5,
) -> dict[str, Any]:
    """The ``SegmentResult`` shape: each member's own series scored like a total (robust z), so a
    spike of one product or reason that a noisy total hides still shows. ``focus`` is the period
    asked about; ``hits`` lists the members flagged there, strongest first."""
    dimensions = table_column(columns, rows, dimension_column, field="dimension_column")
    members = table_column(columns, rows, member_column, field="member_column")
    labels = [period_label(v) for v in table_column(columns, rows, label_column, field="label_column")]
    values = numeric_column(columns, rows, value_column, field="value_column")
    series: dict[tuple[str, str], dict[str, float]] = {}
    for dimension, member, label, value in zip(dimensions, members, labels, values, strict=True):
        key = (str(dimension), str(member))
        series.setdefault(key, {})[label] = series.get(key, {}).get(label, 0.0) + value
    scanned, hits = [], []
    for (dimension, member), by_label in sorted(series.items()):
        ordered = sorted(by_label)
        try:
            report = anomaly_report([by_label[x] for x in ordered], ordered, series_name=member, period=period, threshold=threshold)
        except KernelInputError:
            continue  # too short or constant: nothing to say about this member
        scanned.append({"dimension": dimension, "member": member, "anomalies": report["anomalies"], "points": report["points"]})
        for point in report["points"]:
            if focus is not None and point["label"] == focus and point["flagged_by"]:
                hits.append(
                    {
                        "dimension": dimension,
                        "member": member,
                        "label": point["label"],
                        "value": point["value"],
                        "expected": point["expected"],
                        "z": point["z"],
                    }
                )
    if not scanned:
        raise KernelInputError("no member has a series long enough to score", unanswerable=True, field="rows")
    hits.sort(key=lambda h: abs(h["z"]), reverse=True)
    return {"focus": focus, "threshold": threshold, "members": scanned, "hits": hits}


# ---------------------------------------------------------------------------------------------
# Seasonal forecast
# ---------------------------------------------------------------------------------------------


def seasonal_naive_drift(values: Sequence[float], horizon: int, period: int | None) -> tuple[list[float], list[float], str]:
    """Point forecasts, their standard errors and the method's name.

    With more than one season: the same period last season plus the mean season-over-season
    change (per season ahead), errors growing with the number of seasons ahead. Otherwise: the last
    value plus the mean step (naive with drift), errors as in Hyndman & Athanasopoulos, 5.5.
    """
    n = len(values)
    if period is not None and period >= 2 and n >= period + 2:
        diffs = [values[j] - values[j - period] for j in range(period, n)]
        drift = statistics.fmean(diffs)
        sd = statistics.stdev(diffs) if len(diffs) > 1 else abs(drift)
        points, errors = [], []
        for h in range(1, horizon + 1):
            seasons_ahead = (h - 1) // period + 1
            points.append(values[n - period + (h - 1) % period] + seasons_ahead * drift)
            errors.append(sd * math.sqrt(seasons_ahead))
        return points, errors, "seasonal_naive_drift"
    if n < 2:
        raise KernelInputError("a forecast needs at least 2 points", field="values")
    steps = [values[j] - values[j - 1] for j in range(1, n)]
    drift = statistics.fmean(steps)
    sd = statistics.stdev(steps) if len(steps) > 1 else abs(drift)
    points = [values[-1] + h * drift for h in range(1, horizon + 1)]
    errors = [sd * math.sqrt(h * (1 + h / (n - 1))) for h in range(1, horizon + 1)]
    return points, errors, "naive_drift"


Forecaster = Callable[[Sequence[float], int], Sequence[float]]


def rolling_origin_mape(values: Sequence[float], forecaster: Forecaster, *, origins: int, minimum_train: int) -> tuple[float | None, int]:
    """Mean absolute percentage error (in %) of one-step-ahead forecasts from the last ``origins``
    origins, each fitted on the history before it; None when no origin has a non-zero actual."""
    n = len(values)
    errors: list[float] = []
    for origin in range(max(minimum_train, n - origins), n):
        actual = values[origin]
        if actual == 0:
            continue  # a percentage of zero is undefined
        predicted = forecaster(values[:origin], 1)[0]
        errors.append(abs(actual - predicted) / abs(actual))
    if not errors:
        return None, 0
    return 100.0 * statistics.fmean(errors), len(errors)


def floor_at_zero(points: list[dict[str, Any]], history: Sequence[float]) -> list[dict[str, Any]]:
    """A quantity that has never been negative (units, orders, amounts) is not forecast below 0:
    the interval is cut at 0 rather than promising negative sales."""
    if not history or min(history) < 0:
        return points
    keys = ("point", "lower_80", "upper_80", "lower_95", "upper_95")
    return [{**p, **{k: max(0.0, float(p[k])) for k in keys}} for p in points]


def interval_points(labels: Sequence[str], points: Sequence[float], errors: Sequence[float]) -> list[dict[str, Any]]:
    return [
        {
            "label": label,
            "point": float(point),
            "lower_80": float(point - Z_80 * error),
            "upper_80": float(point + Z_80 * error),
            "lower_95": float(point - Z_95 * error),
            "upper_95": float(point + Z_95 * error),
        }
        for label, point, error in zip(labels, points, errors, strict=True)
    ]


def seasonal_forecast(
    values: Sequence[float], labels: Sequence[str], horizon: int, period: int | None = 12, *, backtest_origins: int = 6
) -> dict[str, Any]:
    """A forecast with 80% and 95% prediction intervals and a rolling-origin backtest MAPE
    (one ``ForecastSeries`` of the ``ForecastResult`` shape, without its group)."""
    _check_series(values, labels, minimum=4)
    if horizon < 1:
        raise KernelInputError("horizon must be at least 1", field="horizon")
    points, errors, method = seasonal_naive_drift(values, horizon, period)

    def refit(history: Sequence[float], steps: int) -> Sequence[float]:
        return seasonal_naive_drift(history, steps, period)[0]

    # Backtest origins keep the method of the full fit: a seasonal method is only judged on
    # histories long enough to be seasonal.
    minimum_train = (period + 2) if method == "seasonal_naive_drift" and period else 3
    mape, used = rolling_origin_mape(values, refit, origins=backtest_origins, minimum_train=minimum_train)
    return {
        "method": method,
        "history_points": len(values),
        "last_label": str(labels[-1]),
        "last_value": float(values[-1]),
        "forecast": floor_at_zero(interval_points(next_labels(labels, horizon), points, errors), values),
        "backtest_mape": mape,
        "backtest_origins": used,
    }


def forecast_report(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    period_column: str,
    value_column: str,
    group_column: str | None,
    horizon: int,
    period: int | None,
    backtest_origins: int = 6,
) -> dict[str, Any]:
    """The ``ForecastResult`` shape from the kernel forecast, one series per group."""
    series = []
    for group, (labels, values) in grouped_series(columns, rows, period_column, value_column, group_column).items():
        one = seasonal_forecast(values, labels, horizon, period, backtest_origins=backtest_origins)
        series.append({"group": group, **one})
    return {"horizon": horizon, "period": period, "series": series}


def grouped_series(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], period_column: str, value_column: str, group_column: str | None
) -> dict[str | None, tuple[list[str], list[float]]]:
    """(labels, values) per group (one ``None`` group without a group column), groups sorted."""
    if group_column is None:
        return {None: series_from_table(columns, rows, period_column, value_column)}
    groups = [str(g) for g in table_column(columns, rows, group_column, field="group_column")]
    out: dict[str | None, tuple[list[str], list[float]]] = {}
    for group in sorted(set(groups)):
        subset = [row for row, g in zip(rows, groups, strict=True) if g == group]
        out[group] = series_from_table(columns, subset, period_column, value_column)
    return out


# ---------------------------------------------------------------------------------------------
# Correlation
# ---------------------------------------------------------------------------------------------


def _check_pair(x: Sequence[float], y: Sequence[float]) -> None:
    if len(x) != len(y):
        raise KernelInputError(f"{len(x)} x values for {len(y)} y values", field="y")
    if len(x) < 3:
        raise KernelInputError(f"{len(x)} pairs; a correlation with a p-value needs at least 3", unanswerable=True, field="rows")
    for name, seq in (("x", x), ("y", y)):
        if max(seq) == min(seq):
            raise KernelInputError(f"{name} is constant; its correlation is undefined", unanswerable=True, field=name)


def _correlation_p(r: float, n: int) -> float:
    if abs(r) >= 1.0:
        return 0.0
    df = n - 2
    t = r * math.sqrt(df / (1.0 - r * r))
    return student_t_two_sided_p(t, df)


def pearson(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Pearson's r and its two-sided p-value (t-distribution with n-2 degrees of freedom)."""
    _check_pair(x, y)
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = math.fsum((a - mx) ** 2 for a in x)
    syy = math.fsum((b - my) ** 2 for b in y)
    r = max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))
    return r, _correlation_p(r, len(x))


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Spearman's rho (Pearson on average ranks) and its t-approximation p-value, as scipy."""
    _check_pair(x, y)
    return pearson(average_ranks(x), average_ranks(y))


def numeric_columns(columns: Sequence[str], rows: Sequence[Sequence[Any]], chosen: Sequence[str] | None) -> list[str]:
    if chosen:
        for name in chosen:
            numeric_column(columns, rows, name, field="numeric_columns")
        return list(chosen)
    return [c for c in columns if is_numeric_column(columns, rows, c)]


def correlation_report(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, numeric: Sequence[str] | None = None) -> dict[str, Any]:
    """The ``CorrelationResult`` shape: Pearson and Spearman with p-values for every pair."""
    names = numeric_columns(columns, rows, numeric)
    if len(names) < 2:
        raise KernelInputError(f"correlation needs two numeric columns; found {names}", field="numeric_columns")
    data = {name: numeric_column(columns, rows, name, field="numeric_columns") for name in names}
    pairs: list[dict[str, Any]] = []
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            try:
                r, p_r = pearson(data[x], data[y])
                rho, p_rho = spearman(data[x], data[y])
            except KernelInputError as error:
                constant = x if error.field == "x" else y
                raise KernelInputError(
                    f"column {constant!r} is constant; its correlation is undefined", unanswerable=True, field="numeric_columns"
                ) from None
            pairs.append({"x": x, "y": y, "n": len(rows), "pearson_r": r, "pearson_p": p_r, "spearman_rho": rho, "spearman_p": p_rho})
    pairs.sort(key=lambda p: -abs(p["pearson_r"]))
    return {"columns": names, "n_rows": len(rows), "pairs": pairs}


# ---------------------------------------------------------------------------------------------
# Clustering (numpy): k-means on standardised features, k by silhouette
# ---------------------------------------------------------------------------------------------


def standardise(matrix: Any) -> Any:
    import numpy as np

    m = np.asarray(matrix, dtype=float)
    sd = m.std(axis=0)
    if (sd == 0).any():
        raise KernelInputError("a feature is constant; it cannot separate clusters", unanswerable=True, field="feature_columns")
    return (m - m.mean(axis=0)) / sd


def kmeans(points: Any, k: int, *, seed: int = 0, restarts: int = 10, iterations: int = 100) -> tuple[Any, float]:
    """Lloyd's k-means with k-means++ starts; (labels, inertia) of the best restart."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.asarray(points, dtype=float)
    best_labels, best_inertia = None, math.inf
    for _ in range(restarts):
        centres = [x[rng.integers(len(x))]]
        for _ in range(1, k):
            d2 = np.min([((x - c) ** 2).sum(axis=1) for c in centres], axis=0)
            total = d2.sum()
            centres.append(x[rng.choice(len(x), p=d2 / total)] if total > 0 else x[rng.integers(len(x))])
        c = np.array(centres)
        labels = np.zeros(len(x), dtype=int)
        for _ in range(iterations):
            labels = ((x[:, None, :] - c[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
            moved = np.array([x[labels == j].mean(axis=0) if (labels == j).any() else c[j] for j in range(k)])
            if np.allclose(moved, c):
                break
            c = moved
        inertia = float(((x - c[labels]) ** 2).sum())
        if inertia < best_inertia:
            best_labels, best_inertia = labels, inertia
    return best_labels, best_inertia


def silhouette(points: Any, labels: Any) -> float:
    """Mean silhouette (Euclidean), 0 for points alone in their cluster, as scikit-learn."""
    import numpy as np

    x = np.asarray(points, dtype=float)
    lab = np.asarray(labels)
    distances = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=2))
    scores = []
    for i in range(len(x)):
        own = lab == lab[i]
        if own.sum() <= 1:
            scores.append(0.0)
            continue
        a = distances[i, own].sum() / (own.sum() - 1)
        b = min(distances[i, lab == other].mean() for other in set(lab.tolist()) if other != lab[i])
        scores.append((b - a) / max(a, b) if max(a, b) > 0 else 0.0)
    return float(np.mean(scores))


def cluster_profiles(members: Sequence[str], features: Sequence[str], raw: Any, labels: Sequence[int]) -> list[dict[str, Any]]:
    """Clusters numbered by size (0 the largest), each with its size, feature means and members."""
    import numpy as np

    raw = np.asarray(raw, dtype=float)
    ids = sorted({int(v) for v in labels}, key=lambda j: (-sum(1 for v in labels if v == j), j))
    profiles = []
    for number, j in enumerate(ids):
        mask = np.array([int(v) == j for v in labels])
        profiles.append(
            {
                "cluster": number,
                "size": int(mask.sum()),
                "means": {f: float(raw[mask, i].mean()) for i, f in enumerate(features)},
                "members": [m for m, keep in zip(members, mask, strict=True) if keep],
            }
        )
    return profiles


def clustering_inputs(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], id_column: str | None, feature_columns: Sequence[str] | None
) -> tuple[list[str], list[str], list[list[float]]]:
    """(member labels, feature names, raw feature rows) checked for clustering."""
    if id_column:
        members = [str(v) for v in table_column(columns, rows, id_column, field="id_column")]
    else:
        members = [str(i) for i in range(len(rows))]
    features = [f for f in numeric_columns(columns, rows, feature_columns) if f != id_column]
    if not features:
        raise KernelInputError("no numeric feature columns to cluster on", field="feature_columns")
    if len(rows) < 3:
        raise KernelInputError(f"{len(rows)} rows; clustering needs at least 3", unanswerable=True, field="rows")
    data = [numeric_column(columns, rows, f, field="feature_columns") for f in features]
    return members, features, [list(r) for r in zip(*data, strict=True)]


def clustering_report(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    id_column: str | None,
    feature_columns: Sequence[str] | None,
    max_k: int = 8,
    seed: int = 0,
) -> dict[str, Any]:
    """The ``ClusteringResult`` shape with the numpy k-means."""
    members, features, raw = clustering_inputs(columns, rows, id_column, feature_columns)
    scaled = standardise(raw)
    scores = []
    best: tuple[float, int, Any] | None = None
    for k in range(2, min(max_k, len(rows) - 1) + 1):
        labels, _ = kmeans(scaled, k, seed=seed)
        if len(set(labels.tolist())) < 2:
            continue
        score = silhouette(scaled, labels)
        scores.append({"k": k, "silhouette": score})
        if best is None or score > best[0]:
            best = (score, k, labels)
    if best is None:
        raise KernelInputError("the rows do not separate into two or more clusters", unanswerable=True, field="rows")
    return {
        "features": features,
        "k": best[1],
        "silhouette": best[0],
        "silhouette_by_k": scores,
        "clusters": cluster_profiles(members, features, raw, best[2].tolist()),
    }


# ---------------------------------------------------------------------------------------------
# Regression (numpy): OLS with coefficient tests and residual checks
# ---------------------------------------------------------------------------------------------


def durbin_watson(residuals: Sequence[float]) -> float:
    return math.fsum((residuals[i] - residuals[i - 1]) ** 2 for i in range(1, len(residuals))) / math.fsum(r * r for r in residuals)


def jarque_bera_p(residuals: Sequence[float]) -> float:
    n = len(residuals)
    mean = statistics.fmean(residuals)
    m2 = math.fsum((r - mean) ** 2 for r in residuals) / n
    m3 = math.fsum((r - mean) ** 3 for r in residuals) / n
    m4 = math.fsum((r - mean) ** 4 for r in residuals) / n
    skew, kurt = m3 / m2**1.5, m4 / m2**2
    jb = n / 6.0 * (skew**2 + (kurt - 3.0) ** 2 / 4.0)
    return chi2_sf(jb, 2)


def regression_inputs(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], target: str, features: Sequence[str] | None
) -> tuple[list[str], list[float], list[list[float]]]:
    """(feature names, y, X rows without the intercept) checked for OLS."""
    y = numeric_column(columns, rows, target, field="target")
    names = [f for f in numeric_columns(columns, rows, features) if f != target]
    if not names:
        raise KernelInputError("no numeric feature columns to regress on", field="features")
    if len(rows) < len(names) + 3:
        raise KernelInputError(
            f"{len(rows)} rows for {len(names)} features; OLS needs at least {len(names) + 3}", unanswerable=True, field="rows"
        )
    if max(y) == min(y):
        raise KernelInputError(f"target {target!r} is constant", unanswerable=True, field="target")
    data = [numeric_column(columns, rows, f, field="features") for f in names]
    for name, column in zip(names, data, strict=True):
        if max(column) == min(column):
            raise KernelInputError(f"feature {name!r} is constant; it is collinear with the intercept", unanswerable=True, field="features")
    return names, y, [list(r) for r in zip(*data, strict=True)]


def regression_report(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, target: str, features: Sequence[str] | None
) -> dict[str, Any]:
    """The ``RegressionResult`` shape with numpy OLS (no Shapiro-Wilk: it needs scipy)."""
    import numpy as np

    names, y_list, x_rows = regression_inputs(columns, rows, target, features)
    y = np.asarray(y_list, dtype=float)
    x = np.column_stack([np.ones(len(y)), np.asarray(x_rows, dtype=float)])
    n, p = x.shape
    if np.linalg.matrix_rank(x) < p:
        raise KernelInputError("the features are collinear", field="features")
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residuals = y - x @ beta
    rss = float(residuals @ residuals)
    tss = float(((y - y.mean()) ** 2).sum())
    df = n - p
    sigma2 = rss / df
    cov = sigma2 * np.linalg.inv(x.T @ x)
    coefficients = []
    for i, name in enumerate(["const", *names]):
        se = float(math.sqrt(cov[i, i]))
        t = float(beta[i]) / se if se > 0 else math.inf
        coefficients.append({"name": name, "estimate": float(beta[i]), "std_error": se, "t": t, "p": student_t_two_sided_p(t, df)})
    # Breusch-Pagan (Koenker's studentised form, statsmodels' default): n·R² of e² on X.
    e2 = residuals**2
    gamma, *_ = np.linalg.lstsq(x, e2, rcond=None)
    aux_rss = float(((e2 - x @ gamma) ** 2).sum())
    aux_tss = float(((e2 - e2.mean()) ** 2).sum())
    lm = n * (1 - aux_rss / aux_tss) if aux_tss > 0 else 0.0
    r2 = 1 - rss / tss
    return {
        "target": target,
        "features": names,
        "n": n,
        "coefficients": coefficients,
        "r_squared": r2,
        "adj_r_squared": 1 - (1 - r2) * (n - 1) / df,
        "residual_checks": {
            "shapiro_p": None,
            "jarque_bera_p": jarque_bera_p(residuals.tolist()),
            "durbin_watson": durbin_watson(residuals.tolist()),
            "breusch_pagan_p": chi2_sf(lm, p - 1),
        },
    }
