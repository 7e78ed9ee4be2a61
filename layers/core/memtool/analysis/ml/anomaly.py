"""ml_anomaly: robust seasonal z-scores and an isolation forest on the same series."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded, series_arguments
from memtool.analysis.ml.models import AnomalyResult, TableArguments
from memtool.tools.base import Tool, ToolContext


class AnomalyArguments(TableArguments):
    label_column: str = Field("period", description="The column of period labels (YYYY-MM or dates) when data comes as columns and rows.")
    value_column: str = Field("value", description="The numeric column to score when data comes as columns and rows.")
    series: list[float] | None = Field(None, description="The values, in time order, instead of columns and rows.")
    labels: list[str] | None = Field(None, description="One period label per value of series.")
    series_name: str = Field("value", description="What the series measures, for the result (e.g. 'refund_amount').")
    period: int | None = Field(12, ge=2, le=366, description="Season length in points (12 for monthly data); null for no seasonality.")
    threshold: float = Field(3.5, gt=0, description="A point is anomalous when its robust z reaches this in absolute value.")
    transform: Literal["auto", "log", "none"] = Field(
        "auto", description="Score log values (auto: when every value is positive), or the values as they are."
    )
    iforest_threshold: float = Field(
        0.7, gt=0.5, le=1.0,
        description="Isolation-forest score (0.5 is ordinary, near 1 is isolated) from which the forest flags a point.",
    )
    seed: int = Field(0, description="Random seed of the isolation forest, for repeatable results.")


def detect_anomalies(arguments: AnomalyArguments, context: ToolContext) -> AnomalyResult:
    labels, values = series_arguments(
        arguments.columns, arguments.rows, arguments.series, arguments.labels, arguments.label_column, arguments.value_column
    )
    report = guarded(
        lambda: kernels.anomaly_report(
            values, labels, series_name=arguments.series_name, period=arguments.period,
            threshold=arguments.threshold, transform=arguments.transform,
        )
    )
    _add_isolation_forest(report, arguments)
    return AnomalyResult.model_validate(report)


def _add_isolation_forest(report: dict, arguments: AnomalyArguments) -> None:
    """Score each point by how easily an isolation forest separates it, on the features the robust
    method already judged (value and residual, in the same transformed units) plus the month, so a
    value ordinary for its month is not isolated for being high."""
    import numpy as np
    from sklearn.ensemble import IsolationForest
    from sklearn.preprocessing import StandardScaler

    log = report["transform"] == "log"
    points = report["points"]
    value = [math.log(p["value"]) if log else p["value"] for p in points]
    expected = [math.log(p["expected"]) if log and p["expected"] > 0 else p["expected"] for p in points]
    season = arguments.period or 12
    month = [kernels.month_of_year(p["label"]) or (i % season) + 1 for i, p in enumerate(points)]
    features = np.column_stack([value, np.subtract(value, expected), month])
    # A score threshold, not a contamination share: a share makes the forest flag that many points
    # in every series, clean ones included.
    forest = IsolationForest(n_estimators=300, random_state=arguments.seed)
    scaled = StandardScaler().fit_transform(features)
    forest.fit(scaled)
    scores = -forest.score_samples(scaled)  # Liu et al.'s anomaly score s(x, n) in (0, 1]
    flagged = scores >= arguments.iforest_threshold
    for point, score, is_outlier in zip(points, scores, flagged, strict=True):
        point["iforest_score"] = float(score)
        point["iforest_anomaly"] = bool(is_outlier)
        if is_outlier:
            point["flagged_by"] = [*point["flagged_by"], "isolation_forest"]
    report["methods"] = ["robust_z", "isolation_forest"]
    report["anomalies"] = [p["label"] for p in points if p["flagged_by"]]


def anomaly_feedback(result: AnomalyResult) -> float:
    # Both methods agreeing on every flagged point is the strongest answer; a point only one
    # method sees is weaker evidence. Finding nothing is still an answer.
    if not result.anomalies:
        return 0.8
    agreed = sum(1 for p in result.points if len(p.flagged_by) == 2)
    return 0.5 + 0.5 * agreed / len(result.anomalies)


def anomaly_summary(result: AnomalyResult) -> str:
    flagged = [p for p in result.points if p.flagged_by]
    if not flagged:
        return f"{result.series_name}: no anomalies in {len(result.points)} points"
    parts = [f"{p.label} (z={p.z:.1f}; {'+'.join(p.flagged_by)})" for p in sorted(flagged, key=lambda p: -abs(p.z))]
    return f"{result.series_name}: anomalies " + ", ".join(parts)


ANOMALY_TOOL: Tool[AnomalyArguments, AnomalyResult] = Tool(
    name="ml_anomaly",
    description=(
        "Find anomalous periods in one time series (e.g. monthly refund amounts): a robust seasonal "
        "z-score against the same period last season and its neighbours, and an isolation forest on "
        "the same points. Returns every point with its expected value, z, forest score and which "
        "method flagged it."
    ),
    input_model=AnomalyArguments,
    output_model=AnomalyResult,
    handler=detect_anomalies,
    feedback=anomaly_feedback,
    summarize=anomaly_summary,
)
