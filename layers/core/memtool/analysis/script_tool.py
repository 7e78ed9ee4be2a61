"""The tool the Bedrock planner answers with when it writes a code-interpreter script.

One definition: its Converse toolSpec is what the model is offered, and its strict input model
checks what the model sent. The prompt quotes the question and a sample of the table as data and
names the result shape the script must write (the analysis's result model), so the code
interpreter can check the result before anything reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memtool.tools.base import Tool

SAMPLE_ROWS = 8


class AnalysisScript(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(
        description="the whole Python script: reads data.json, writes result.json in the shape asked for, may save chart.png",
        min_length=20,
        max_length=20_000,
    )


class Submitted(BaseModel):
    accepted: bool


SUBMIT_SCRIPT: Tool[AnalysisScript, Submitted] = Tool(
    name="submit_analysis_script",
    description="Submit the analysis script to run in the sandbox.",
    input_model=AnalysisScript,
    output_model=Submitted,
    handler=lambda script, context: Submitted(accepted=True),
)


def result_shape(analysis: str) -> dict[str, Any]:
    """The JSON Schema result.json must follow (the ML tool's output model for the analysis)."""
    from memtool.analysis.ml.models import RESULT_MODELS

    return RESULT_MODELS[analysis].model_json_schema()


def script_prompt(question: str, analysis: str, columns: Sequence[str], sample: Sequence[Sequence[Any]], params: Mapping[str, Any]) -> str:
    table = json.dumps({"columns": list(columns), "rows": [list(r) for r in sample[:SAMPLE_ROWS]]}, ensure_ascii=False, default=str)
    return (
        f"<question>{question}</question>\n"
        f"<table>{table}</table>\n"
        f"Analysis: {analysis}. Parameters (also in data.json's params): {json.dumps(dict(params), ensure_ascii=False, default=str)}\n"
        f"result.json must validate against this JSON Schema:\n{json.dumps(result_shape(analysis), ensure_ascii=False)}"
    )
