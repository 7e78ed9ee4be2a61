"""ml_correlation: Pearson and Spearman coefficients with p-values for each pair of numeric columns."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded
from memtool.analysis.ml.models import CorrelationResult, TableArguments
from memtool.tools.base import BadArguments, NeedsClarification, Tool, ToolContext


class CorrelationArguments(TableArguments):
    numeric_columns: list[str] | None = Field(None, description="The numeric columns to correlate; default every numeric column.")


def correlate(arguments: CorrelationArguments, context: ToolContext) -> CorrelationResult:
    from scipy import stats

    if not arguments.columns:
        raise BadArguments("give the data as columns and rows", field="columns")
    names = guarded(lambda: kernels.numeric_columns(arguments.columns, arguments.rows, arguments.numeric_columns))
    if len(names) < 2:
        raise NeedsClarification(f"correlation needs two numeric columns; found {names}", field="numeric_columns")
    if len(arguments.rows) < 3:
        raise NeedsClarification(f"{len(arguments.rows)} rows; a correlation with a p-value needs at least 3", field="rows")

    def column(name: str) -> list[float]:
        return guarded(lambda: kernels.numeric_column(arguments.columns, arguments.rows, name, field="numeric_columns"))

    data = {n: column(n) for n in names}
    constant = [n for n, values in data.items() if max(values) == min(values)]
    if constant:
        raise NeedsClarification(f"constant columns have no correlation: {constant}", field="numeric_columns")
    pairs: list[dict[str, Any]] = []
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            pearson = stats.pearsonr(data[x], data[y])
            spearman = stats.spearmanr(data[x], data[y])
            pairs.append(
                {
                    "x": x, "y": y, "n": len(arguments.rows),
                    "pearson_r": float(pearson.statistic), "pearson_p": float(pearson.pvalue),
                    "spearman_rho": float(spearman.statistic), "spearman_p": float(spearman.pvalue),
                }
            )
    pairs.sort(key=lambda p: -abs(p["pearson_r"]))
    return CorrelationResult.model_validate({"columns": names, "n_rows": len(arguments.rows), "pairs": pairs})


def correlation_feedback(result: CorrelationResult) -> float:
    # Every pair computed is an answer; a result with at least one significant pair says more.
    return 1.0 if any(p.pearson_p < 0.05 or p.spearman_p < 0.05 for p in result.pairs) else 0.6


def correlation_summary(result: CorrelationResult) -> str:
    top = result.pairs[0]
    return f"{len(result.pairs)} pairs; strongest {top.x}~{top.y} r={top.pearson_r:.2f} (p={top.pearson_p:.2g})"


CORRELATION_TOOL: Tool[CorrelationArguments, CorrelationResult] = Tool(
    name="ml_correlation",
    description="Pearson and Spearman correlation with two-sided p-values for every pair of numeric columns, strongest first.",
    input_model=CorrelationArguments,
    output_model=CorrelationResult,
    handler=correlate,
    feedback=correlation_feedback,
    summarize=correlation_summary,
)
