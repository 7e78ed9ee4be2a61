"""Domain errors and pydantic failures as HTTP responses, in one place."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from memtool.errors import (
    Forbidden,
    IdempotencyMismatch,
    MemtoolError,
    NotFound,
    NotImplementedYet,
    Unauthenticated,
    ValidationFailed,
    VersionConflict,
)

STATUS_BY_ERROR: dict[type[MemtoolError], int] = {
    ValidationFailed: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    VersionConflict: 409,
    IdempotencyMismatch: 422,
    NotImplementedYet: 501,
}

Model = TypeVar("Model", bound=BaseModel)


def status_for(error: MemtoolError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 500


def parse_json_body(raw: str | None, *, max_bytes: int = 64 * 1024) -> Any:
    if raw is None or raw.strip() == "":
        raise ValidationFailed("request body is required", field="body")
    if len(raw.encode("utf-8")) > max_bytes:
        raise ValidationFailed(f"request body is larger than {max_bytes} bytes", field="body")
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValidationFailed(f"request body is not valid JSON: {exc.msg} at position {exc.pos}", field="body") from exc


def parse_model(model: type[Model], data: Any, *, prefix: str | None = None) -> Model:
    """Validate ``data`` as ``model``; the first error names the field that is wrong."""
    if not isinstance(data, dict):
        raise ValidationFailed("must be a JSON object", field=prefix or "body")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_failed(exc, prefix=prefix) from exc


def validation_failed(exc: ValidationError, *, prefix: str | None = None) -> ValidationFailed:
    first = exc.errors(include_url=False)[0]
    loc = ".".join(str(part) for part in first["loc"] if part != "__root__")
    field = ".".join(p for p in (prefix, loc) if p) or (prefix or "body")
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    elif first["type"] == "missing":
        message = "field required"
    return ValidationFailed(message, field=field)
