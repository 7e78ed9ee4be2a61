"""ml_forecast: a seasonal exponential-smoothing forecast per series, with prediction intervals and
a rolling-origin backtest; the kernel's seasonal naive forecast where history is too short."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded, kernel_failures
from memtool.analysis.ml.models import ForecastResult, TableArguments
from memtool.tools.base import BadArguments, Tool, ToolContext

ETS_METHOD = "ets_additive_seasonal"


class ForecastArguments(TableArguments):
    period_column: str = Field("period", description="The column of period labels (YYYY-MM or dates).")
    value_column: str = Field("value", description="The numeric column to forecast.")
    group_column: str | None = Field(None, description="A column splitting the data into one series per value (e.g. 'city').")
    series: list[float] | None = Field(None, description="One series of values, in time order, instead of columns and rows.")
    labels: list[str] | None = Field(None, description="One period label per value of series.")
    horizon: int = Field(3, ge=1, le=24, description="How many periods ahead to forecast.")
    period: int | None = Field(12, ge=2, le=366, description="Season length in points (12 for monthly data); null for none.")
    backtest_origins: int = Field(6, ge=1, le=24, description="How many of the last periods the backtest forecasts one step ahead.")


def _ets_fit(history: Sequence[float], period: int) -> Any:  # a statsmodels ETSResults (untyped)
    import warnings

    import pandas as pd
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    model = ETSModel(pd.Series(list(history), dtype=float), error="add", trend=None, seasonal="add", seasonal_periods=period)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence chatter on short series; the backtest judges the fit
        return model.fit(disp=False)


def _ets_one_step(period: int) -> Callable[[Sequence[float], int], Sequence[float]]:
    def forecaster(history: Sequence[float], steps: int) -> Sequence[float]:
        if len(history) < 2 * period:  # too short for seasonal ETS: judge the fallback instead
            return kernels.seasonal_naive_drift(history, steps, period)[0]
        return list(_ets_fit(history, period).forecast(steps))

    return forecaster


def forecast_series(labels: list[str], values: list[float], arguments: ForecastArguments) -> dict:
    period = arguments.period
    if period is None or len(values) < 2 * period:
        return guarded(
            lambda: kernels.seasonal_forecast(values, labels, arguments.horizon, period, backtest_origins=arguments.backtest_origins)
        )
    with kernel_failures():
        kernels.seasonal_forecast(values, labels, 1, period)  # the same input checks as the fallback
    fit = _ets_fit(values, period)
    n = len(values)
    frame_95 = fit.get_prediction(start=n, end=n + arguments.horizon - 1).summary_frame(alpha=0.05)
    frame_80 = fit.get_prediction(start=n, end=n + arguments.horizon - 1).summary_frame(alpha=0.20)
    future = kernels.next_labels(labels, arguments.horizon)
    forecast = [
        {
            "label": label,
            "point": float(frame_95["mean"].iloc[h]),
            "lower_80": float(frame_80["pi_lower"].iloc[h]),
            "upper_80": float(frame_80["pi_upper"].iloc[h]),
            "lower_95": float(frame_95["pi_lower"].iloc[h]),
            "upper_95": float(frame_95["pi_upper"].iloc[h]),
        }
        for h, label in enumerate(future)
    ]
    mape, used = kernels.rolling_origin_mape(values, _ets_one_step(period), origins=arguments.backtest_origins, minimum_train=period + 2)
    return {
        "method": ETS_METHOD,
        "history_points": n,
        "last_label": labels[-1],
        "last_value": values[-1],
        "forecast": kernels.floor_at_zero(forecast, values),
        "backtest_mape": mape,
        "backtest_origins": used,
    }


def forecast(arguments: ForecastArguments, context: ToolContext) -> ForecastResult:
    if arguments.series is not None:
        if arguments.columns or arguments.rows:
            raise BadArguments("give either series and labels, or columns and rows, not both", field="series")
        if arguments.labels is None or len(arguments.labels) != len(arguments.series):
            raise BadArguments("series needs exactly one label per value", field="labels")
        groups: dict[str | None, tuple[list[str], list[float]]] = {None: (list(arguments.labels), list(arguments.series))}
    elif not arguments.columns:
        raise BadArguments("give the data as columns and rows, or as series and labels", field="columns")
    else:
        groups = guarded(
            lambda: kernels.grouped_series(
                arguments.columns, arguments.rows, arguments.period_column, arguments.value_column, arguments.group_column
            )
        )
    series = []
    for group, (labels, values) in groups.items():
        series.append({"group": group, **forecast_series(labels, values, arguments)})
    return ForecastResult.model_validate({"horizon": arguments.horizon, "period": arguments.period, "series": series})


def forecast_feedback(result: ForecastResult) -> float:
    # A forecast is as good as its backtest: 1 under 10% MAPE, falling to -1 at 60% and beyond.
    mapes = [s.backtest_mape for s in result.series if s.backtest_mape is not None and math.isfinite(s.backtest_mape)]
    if not mapes:
        return 0.3
    worst = max(mapes)
    return max(-1.0, min(1.0, 1.0 - (worst - 10.0) / 25.0))


def forecast_summary(result: ForecastResult) -> str:
    parts = []
    for s in result.series:
        last = s.forecast[-1]
        mape = f"{s.backtest_mape:.1f}%" if s.backtest_mape is not None else "n/a"
        interval = f"[{last.lower_95:.4g}, {last.upper_95:.4g}]"
        parts.append(f"{s.group or 'series'} {last.label}={last.point:.4g} {interval} ({s.method}, MAPE {mape})")
    return "forecast: " + "; ".join(parts)


FORECAST_TOOL: Tool[ForecastArguments, ForecastResult] = Tool(
    name="ml_forecast",
    description=(
        "Forecast one or several time series (columns period, value and optionally a group such as "
        "city) a few periods ahead, with 80% and 95% prediction intervals and a rolling-origin "
        "backtest MAPE. Seasonal exponential smoothing with two seasons of history, else a seasonal "
        "naive forecast with drift."
    ),
    input_model=ForecastArguments,
    output_model=ForecastResult,
    handler=forecast,
    feedback=forecast_feedback,
    summarize=forecast_summary,
)
