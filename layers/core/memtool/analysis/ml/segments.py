"""ml_segments: where an anomaly sits, member by member (each member's own series, robust z)."""

from __future__ import annotations

from pydantic import Field

from memtool.analysis import kernels
from memtool.analysis.ml.common import guarded
from memtool.analysis.ml.models import SegmentResult, TableArguments
from memtool.tools.base import Tool, ToolContext


class SegmentArguments(TableArguments):
    dimension_column: str = Field("dimension", description="The column naming each row's dimension (e.g. 'product').")
    member_column: str = Field("member", description="The column naming each row's member of that dimension.")
    label_column: str = Field("period", description="The column of period labels (YYYY-MM or dates).")
    value_column: str = Field("value", description="The numeric column to score.")
    focus: str | None = Field(None, description="The period asked about (YYYY-MM); members flagged there are listed as hits.")
    period: int | None = Field(12, ge=2, le=366, description="Season length in points (12 for monthly data); null for no seasonality.")
    threshold: float = Field(3.5, gt=0, description="A point is anomalous when its robust z reaches this in absolute value.")


def scan_segments(arguments: SegmentArguments, context: ToolContext) -> SegmentResult:
    report = guarded(
        lambda: kernels.segment_report(
            arguments.columns, arguments.rows, dimension_column=arguments.dimension_column, member_column=arguments.member_column,
            label_column=arguments.label_column, value_column=arguments.value_column, focus=arguments.focus,
            period=arguments.period, threshold=arguments.threshold,
        )
    )  # fmt: skip
    return SegmentResult.model_validate(report)


SEGMENTS_TOOL: Tool[SegmentArguments, SegmentResult] = Tool(
    name="ml_segments",
    description=(
        "Score each member's own monthly series (products, reasons, channels...) for anomalies with a robust seasonal "
        "z-score, and list the members anomalous in the period asked about. Finds a spike a noisy total hides."
    ),
    input_model=SegmentArguments,
    output_model=SegmentResult,
    handler=scan_segments,
    feedback=lambda result: 1.0 if result.members else 0.0,
    summarize=lambda result: f"{len(result.members)} members scanned; hits: {', '.join(h.member for h in result.hits) or 'none'}",
)
