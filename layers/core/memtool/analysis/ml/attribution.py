"""ml_attribution: each dimension member's contribution to a change between two periods, every
dimension's contributions summing exactly (to the cent) to the total change."""

from __future__ import annotations

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded
from memtool.analysis.ml.models import AttributionResult, TableArguments
from memtool.tools.base import BadArguments, Tool, ToolContext


class AttributionArguments(TableArguments):
    period_column: str = Field("period", description="The column of period labels (YYYY-MM or dates).")
    value_column: str = Field("value", description="The additive numeric column (an amount or a count, not a rate).")
    dimensions: list[str] = Field(description="Columns to attribute the change by, each on its own (e.g. ['product_name', 'reason']).")
    before_period: str | None = Field(None, description="The earlier period; default the second-to-last in the data.")
    after_period: str | None = Field(None, description="The later period; default the last in the data.")


def attribute(arguments: AttributionArguments, context: ToolContext) -> AttributionResult:
    if not arguments.columns:
        raise BadArguments("give the data as columns and rows", field="columns")
    report = guarded(
        lambda: kernels.attribution_report(
            arguments.columns, arguments.rows, period_column=arguments.period_column, value_column=arguments.value_column,
            dimensions=arguments.dimensions, before_period=arguments.before_period, after_period=arguments.after_period,
        )
    )
    return AttributionResult.model_validate(report)


def attribution_feedback(result: AttributionResult) -> float:
    # An unchanged total has nothing to attribute; otherwise the answer is as strong as its
    # concentration: one member carrying the change explains more than many small ones.
    if result.total_change == 0:
        return 0.2
    top = max((abs(c.share or 0.0) for d in result.dimensions for c in d.contributions[:1]), default=0.0)
    return 0.5 + 0.5 * min(1.0, top)


def attribution_summary(result: AttributionResult) -> str:
    parts = []
    for d in result.dimensions:
        if d.contributions:
            top = d.contributions[0]
            parts.append(f"{d.dimension}: {top.member} {top.delta:+.2f}")
    return f"{result.before_period}->{result.after_period} change {result.total_change:+.2f}; " + "; ".join(parts)


ATTRIBUTION_TOOL: Tool[AttributionArguments, AttributionResult] = Tool(
    name="ml_attribution",
    description=(
        "Explain the change of an additive metric between two periods: for each dimension column "
        "(region, channel, product, reason…), each member's before, after, change and share of the "
        "total change; each dimension's changes sum exactly to the total change."
    ),
    input_model=AttributionArguments,
    output_model=AttributionResult,
    handler=attribute,
    feedback=attribution_feedback,
    summarize=attribution_summary,
)
