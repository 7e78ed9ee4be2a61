"""Domain errors: values a caller can act on. The API layer maps each to one HTTP status."""

from __future__ import annotations


class MemtoolError(Exception):
    code = "error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_body(self) -> dict[str, object]:
        body: dict[str, object] = {"error": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return body


class ValidationFailed(MemtoolError):
    code = "validation_error"


class NotFound(MemtoolError):
    code = "not_found"


class VersionConflict(MemtoolError):
    code = "version_conflict"

    def __init__(self, message: str, *, current_version: int | None = None) -> None:
        super().__init__(message, field="expected_version")
        self.current_version = current_version

    def to_body(self) -> dict[str, object]:
        body = super().to_body()
        if self.current_version is not None:
            body["current_version"] = self.current_version
        return body


class Unauthenticated(MemtoolError):
    code = "unauthenticated"


class Forbidden(MemtoolError):
    code = "forbidden"


class IdempotencyMismatch(MemtoolError):
    code = "idempotency_key_reused"


class IdempotencyInProgress(MemtoolError):
    """A request with this Idempotency-Key is still running: retry it later for its answer."""

    code = "idempotency_in_progress"

    def __init__(self, message: str) -> None:
        super().__init__(message, field="Idempotency-Key")


class ModelMissing(MemtoolError):
    """The tenant has no semantic model yet: the message says how to draft, curate and store one."""

    code = "model_missing"


class WarehouseMissing(MemtoolError):
    """The tenant has a semantic model but no warehouse of its own to read it on: the message names
    what to configure. It is never served another warehouse (the demo's) instead."""

    code = "warehouse_missing"


class NotConfigured(MemtoolError):
    """The deployment lacks a setting this request needs (e.g. no warehouse): the operator, not the
    caller, fixes it; ``field`` names the stack parameter to set."""

    code = "not_configured"


class InsufficientStorage(MemtoolError):
    """The disk under a state database is full (SQLite's "database or disk is full", ENOSPC): the
    write was rolled back whole, so the caller may retry it unchanged once space is freed."""

    code = "insufficient_storage"


class StoreReadOnly(MemtoolError):
    """A state database or its folder cannot be written (permissions, an immutable or read-only
    file system): nothing was stored; the operator, not the caller, fixes it."""

    code = "store_read_only"


class StoreCorrupt(MemtoolError):
    """A state database is damaged (a bad page, a bad header): the message says what to do (restore
    it from a copy, or move it away to start empty). A retry does not help."""

    code = "store_corrupt"


class RateLimited(MemtoolError):
    """The tenant's request budget is spent (fair use): a 429 whose Retry-After header says when the
    next request will be accepted; ``budget`` names the budget and its size."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_seconds: int, budget: dict[str, object]) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds
        self.budget = budget

    def to_body(self) -> dict[str, object]:
        return {**super().to_body(), "retry_after_seconds": self.retry_after_seconds, "budget": self.budget}
