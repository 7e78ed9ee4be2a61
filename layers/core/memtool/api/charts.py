"""Body and answer of POST /charts/choice: the chart a user picked among an answer's candidates."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from memtool.api.memories import Identifier
from memtool.memory.records import MemoryRecord
from memtool.viz.chart_options import ChartType


class ChartChoiceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episode_id: Identifier = Field(description="the answer whose chart candidates the choice is among (episode_id of POST /ask)")
    chart_type: ChartType = Field(description="the chart to draw that shape of data with from now on")


class ChartChoiceAnswer(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    memory: MemoryRecord = Field(description="the preference: a profile memory, key display.chart_for.<shape>")
    shape: str = Field(description="the answer's shape of data (ranking, time_series, …)")
    chart_type: str
    replaced: bool = Field(description="an earlier choice for this shape was superseded (kept in its history)")
