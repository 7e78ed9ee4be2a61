"""The tools' input base and output models: the JSON shapes that the ML tools and the templated
sandbox scripts (``memtool.analysis.scripts``) both produce, so one summariser reads either.

Output models forbid extra fields and give no defaults, so a result that lacks or adds a key
fails validation instead of silently changing shape.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Cell = str | int | float | bool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TableArguments(_Strict):
    """Tabular data as a query returns it: column names and rows of cells."""

    columns: list[str] = Field(
        default_factory=list, max_length=64, description="Column names, in the order of each row's cells (at most 64)."
    )
    rows: list[list[Cell]] = Field(
        default_factory=list, max_length=100_000, description="Rows of cells, one per result row (at most 100,000)."
    )


# --- anomaly --------------------------------------------------------------------------------

AnomalyMethod = Literal["robust_z", "isolation_forest"]


class AnomalyPoint(_Strict):
    label: str
    value: float
    expected: float
    z: float
    baseline: Literal["season_and_neighbours", "neighbour_median"]
    robust_anomaly: bool
    iforest_score: float | None  # in (0, 1]; higher is more isolated; None where not run
    iforest_anomaly: bool | None
    flagged_by: list[AnomalyMethod]


class AnomalyResult(_Strict):
    series_name: str
    period: int | None
    threshold: float
    transform: Literal["log", "none"]
    scale: float  # 1.4826·MAD of the residuals, in the transformed units
    methods: list[AnomalyMethod]
    points: list[AnomalyPoint]
    anomalies: list[str]  # labels flagged by any method


# --- forecast -------------------------------------------------------------------------------


class ForecastPoint(_Strict):
    label: str
    point: float
    lower_80: float
    upper_80: float
    lower_95: float
    upper_95: float


class ForecastSeries(_Strict):
    group: str | None
    method: str
    history_points: int
    last_label: str
    last_value: float
    forecast: list[ForecastPoint]
    backtest_mape: float | None  # percent, one step ahead, rolling origin
    backtest_origins: int


class ForecastResult(_Strict):
    horizon: int
    period: int | None
    series: list[ForecastSeries]


# --- attribution ----------------------------------------------------------------------------


class Contribution(_Strict):
    member: str
    before: float
    after: float
    delta: float  # in cents exactly; a dimension's deltas sum to total_change
    share: float | None  # delta / total_change; None when the total did not change


class DimensionAttribution(_Strict):
    dimension: str
    contributions: list[Contribution]  # by size of change, largest first
    largest_increase: str | None
    largest_decrease: str | None


class AttributionResult(_Strict):
    before_period: str
    after_period: str
    before_total: float
    after_total: float
    total_change: float
    dimensions: list[DimensionAttribution]


# --- clustering -----------------------------------------------------------------------------


class SilhouetteScore(_Strict):
    k: int
    silhouette: float


class ClusterProfile(_Strict):
    cluster: int  # 0 is the largest cluster
    size: int
    means: dict[str, float]  # feature means in the data's own units
    members: list[str]


class ClusteringResult(_Strict):
    features: list[str]
    k: int
    silhouette: float
    silhouette_by_k: list[SilhouetteScore]
    clusters: list[ClusterProfile]


# --- correlation ----------------------------------------------------------------------------


class CorrelationPair(_Strict):
    x: str
    y: str
    n: int
    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float


class CorrelationResult(_Strict):
    columns: list[str]
    n_rows: int
    pairs: list[CorrelationPair]  # by |pearson_r|, strongest first


# --- regression -----------------------------------------------------------------------------


class Coefficient(_Strict):
    name: str
    estimate: float
    std_error: float
    t: float
    p: float


class ResidualChecks(_Strict):
    shapiro_p: float | None  # None where scipy is not available (the sandbox script)
    jarque_bera_p: float
    durbin_watson: float
    breusch_pagan_p: float | None


class RegressionResult(_Strict):
    target: str
    features: list[str]
    n: int
    coefficients: list[Coefficient]
    r_squared: float
    adj_r_squared: float
    residual_checks: ResidualChecks


# --- segments (each member's own series, for "where is the anomaly") -------------------------


class SegmentSeries(_Strict):
    dimension: str
    member: str
    anomalies: list[str]
    points: list[AnomalyPoint]


class SegmentHit(_Strict):
    dimension: str
    member: str
    label: str
    value: float
    expected: float
    z: float


class SegmentResult(_Strict):
    focus: str | None
    threshold: float
    members: list[SegmentSeries]
    hits: list[SegmentHit]  # members flagged in the focus period, strongest first


# Every TaskKind (memtool.analysis.kinds) has its result model here.
RESULT_MODELS: dict[str, type[BaseModel]] = {
    "segments": SegmentResult,
    "anomaly": AnomalyResult,
    "forecast": ForecastResult,
    "attribution": AttributionResult,
    "clustering": ClusteringResult,
    "correlation": CorrelationResult,
    "regression": RegressionResult,
}
