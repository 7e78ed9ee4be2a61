"""Domain errors and validation failures as HTTP statuses and bodies, in one place."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memtool.api.json_body import BodyTooLarge
from memtool.errors import (
    Forbidden,
    IdempotencyInProgress,
    IdempotencyMismatch,
    InsufficientStorage,
    MemtoolError,
    ModelMissing,
    NotConfigured,
    NotFound,
    RateLimited,
    StoreCorrupt,
    StoreReadOnly,
    Unauthenticated,
    ValidationFailed,
    VersionConflict,
    WarehouseMissing,
)

STATUS_BY_ERROR: dict[type[MemtoolError], int] = {
    ValidationFailed: 400,
    BodyTooLarge: 413,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    VersionConflict: 409,
    IdempotencyMismatch: 422,
    IdempotencyInProgress: 409,
    ModelMissing: 409,
    WarehouseMissing: 409,
    NotConfigured: 503,
    RateLimited: 429,  # a tenant's request budget (memory.budget); api.budget adds Retry-After
    # The local runtime's SQLite state (memory.sqlite_tx): a write the disk had no room for, or a
    # file that cannot be written, is WebDAV's "cannot store" (the write was rolled back whole);
    # a damaged file is a server fault a retry does not cure, named so the operator can act.
    InsufficientStorage: 507,
    StoreReadOnly: 507,
    StoreCorrupt: 500,
}

# Where a validation error happened, as Powertools reports it; the field name follows.
_LOCATIONS = ("body", "query", "path", "header", "cookie")


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: a stable code, a message a person can act on, and the field at fault."""

    model_config = ConfigDict(extra="forbid")

    error: str = Field(description="stable code: validation_error, unauthenticated, forbidden, not_found, …")
    message: str
    field: str | None = Field(None, description="the field, parameter or header that is wrong")
    current_version: int | None = Field(None, description="version_conflict only: the version to retry with")


def status_for(error: MemtoolError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS_BY_ERROR:
            return STATUS_BY_ERROR[cls]
    return 500


def validation_failed(errors: Sequence[Mapping[str, Any]], *, prefix: str | None = None) -> ValidationFailed:
    """The first pydantic (or Powertools request validation) error as a ValidationFailed on its field."""
    if not errors:
        return ValidationFailed("request is not valid", field=prefix or "body")
    # A union (``str | Model``) reports one error per branch, each under the branch's label: name
    # the field, and of the first field's errors prefer the deepest (the branch that got furthest).
    first = errors[0]
    top = _clean_loc(first)[:2]
    same_field = [e for e in errors if _clean_loc(e)[: len(top)] == top]
    first = max(same_field, key=lambda e: len(_clean_loc(e)))
    loc = _clean_loc(first)
    where = loc.pop(0) if loc and loc[0] in _LOCATIONS else None
    field = ".".join(p for p in (prefix, *loc) if p) or (prefix or where or "body")
    return ValidationFailed(_message(first, where, loc), field=field)


_BRANCH_LABEL = re.compile(
    r"[\[\](),]|^(?:str|int|float|bool|list|dict|none|json-or-python|function-(?:after|before|wrap|plain))$|^[A-Z][A-Za-z0-9]*$"
)


def _clean_loc(error: Mapping[str, Any]) -> list[str]:
    """The error's location without pydantic's union-branch labels ("str", "function-after[...]", "Model")."""
    parts = []
    for part in error.get("loc", ()):
        text = str(part)
        if text == "__root__" or (isinstance(part, str) and _BRANCH_LABEL.search(text)):
            continue
        parts.append(text)
    return parts


def _message(error: Mapping[str, Any], where: str | None, loc: Iterable[str]) -> str:
    kind = error.get("type")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "request body is required" if where == "body" and not list(loc) else "field required"
    if kind in ("too_long", "too_short") and isinstance(error.get("input"), str):
        # A length limit on text counts characters (pydantic says "items" when the limit wraps a validator).
        ctx = error.get("ctx") or {}
        limit = ctx.get("max_length") if kind == "too_long" else ctx.get("min_length")
        if limit is not None:
            return f"should have {'at most' if kind == 'too_long' else 'at least'} {limit} characters"
    if kind == "value_error":
        # Our own validators raise ValueError("…"); pydantic prefixes "Value error, ".
        return str((error.get("ctx") or {}).get("error") or error.get("msg"))
    return str(error.get("msg") or "is not valid")
