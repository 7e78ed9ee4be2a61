"""Bodies and answers of the semantic model API (GET /model, PUT /model, GET /model/history).

The model travels as JSON (a Lambda has no YAML parser; `memtool model push` converts a YAML
file). Its format is ``memtool.semantic.catalog.Catalog`` (docs/semantic-model.md); the API
checks it with the model's own validation and answers every problem at its place, not here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler.openapi.params import Query
from pydantic import BaseModel, ConfigDict, Field

from memtool.api.http import ErrorBody
from memtool.semantic.model_store import ActiveModel, ModelVersionInfo
from memtool.semantic.validation import ModelRejected

MAX_VERSION = 2**31 - 1

ModelVersionParam = Annotated[
    int | None, Query(ge=1, le=MAX_VERSION, description="that stored version instead of the one in force")
]


class PutModelBody(BaseModel):
    """PUT /model: the whole model, and the stored version it was based on."""

    model_config = ConfigDict(extra="forbid")

    model: dict[str, Any] = Field(
        description="the semantic model as JSON (format memtool.semantic-model/1; its JSON Schema is "
        "docs/semantic-model.schema.json)"
    )
    expected_version: int | None = Field(
        None,
        ge=0,
        le=MAX_VERSION,
        strict=True,
        description="the stored version this model replaces; null (or 0) when the tenant has none yet. "
        "A stale one is a 409 with current_version.",
    )


class _Answer(BaseModel):
    # Every field is in every answer, defaults included: the document says so.
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class ModelVersionView(_Answer):
    version: int = Field(description="the stored version: 1, 2, ... (expected_version of the next PUT)")
    model_version: str = Field(description="the model's own label (model_version in the document)")
    updated_by: str
    updated_at: datetime


class ModelWritten(ModelVersionView):
    """PUT /model: the version now in force."""

    memory_id: str
    warehouse_checked: bool = Field(
        description="every metric was compiled and run (LIMIT 0) on the tenant's warehouse, alone and by each dimension; "
        "false when the deployment has no warehouse to check against"
    )


class ModelRead(ModelVersionView):
    """GET /model: the model in force (or ?version=N), as it was stored."""

    memory_id: str
    model: dict[str, Any]


class ModelHistoryItem(ModelVersionView):
    summary: str


class ModelHistory(_Answer):
    """GET /model/history: every stored version, oldest first."""

    items: list[ModelHistoryItem]


class ModelProblemView(BaseModel):
    path: str = Field(description="where in the model, e.g. metrics[2].expression ('' for the whole model)")
    message: str


class ModelInvalidBody(ErrorBody):
    """422 model_invalid: the model was not stored; the version in force stays."""

    problems: list[ModelProblemView]


def model_written(put: Any) -> ModelWritten:
    active: ActiveModel = put.model
    return ModelWritten(
        version=active.version,
        model_version=active.model_version,
        updated_by=active.updated_by,
        updated_at=active.updated_at,
        memory_id=active.memory_id,
        warehouse_checked=put.warehouse_checked,
    )


def model_read(active: ActiveModel) -> ModelRead:
    return ModelRead(
        version=active.version,
        model_version=active.model_version,
        updated_by=active.updated_by,
        updated_at=active.updated_at,
        memory_id=active.memory_id,
        model=dict(active.document) if active.document is not None else active.model.model_dump(mode="json"),
    )


def model_history(items: list[ModelVersionInfo]) -> ModelHistory:
    return ModelHistory(
        items=[
            ModelHistoryItem(
                version=i.version,
                model_version=i.model_version,
                updated_by=i.updated_by,
                updated_at=i.updated_at,
                summary=i.summary,
            )
            for i in items
        ]
    )


def model_invalid(error: ModelRejected) -> ModelInvalidBody:
    return ModelInvalidBody.model_validate(error.to_body())
