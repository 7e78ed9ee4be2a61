"""Idempotent API writes keyed by the client's Idempotency-Key header (Powertools idempotency).

The key is scoped to the caller (tenant, user) and the operation; replaying a key returns the
first response, and reusing a key for a different request is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from memtool.api.identity import Identity, single_header
from memtool.errors import (
    IdempotencyInProgress,
    IdempotencyMismatch,
    InsufficientStorage,
    MemtoolError,
    StoreCorrupt,
    StoreReadOnly,
    ValidationFailed,
)

IDEMPOTENCY_HEADER = "idempotency-key"
IDEMPOTENCY_HEADER_NAME = "Idempotency-Key"
KEY_PATTERN = r"^[A-Za-z0-9_.:\-]{8,128}$"
_KEY = re.compile(KEY_PATTERN)

Outcome = dict[str, Any]  # {"status_code": int, "body": JSON or None}


def idempotency_key(event: Mapping[str, Any]) -> str | None:
    """The request's Idempotency-Key header (sent at most once), or None."""
    value = single_header(event, IDEMPOTENCY_HEADER, IDEMPOTENCY_HEADER_NAME)
    if value is not None and not _KEY.fullmatch(value):
        raise ValidationFailed(
            "must be 8-128 characters of letters, digits, '_', '.', ':' or '-'", field=IDEMPOTENCY_HEADER_NAME
        )
    return value


def _config(ttl_seconds: int):  # -> IdempotencyConfig
    """A config per request: it carries the request's Lambda context (its deadline bounds the
    in-progress record), and the local server runs requests on threads side by side."""
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig

    return IdempotencyConfig(
        event_key_jmespath="[tenant, user, key]",
        payload_validation_jmespath="request",
        expires_after_seconds=ttl_seconds,
        raise_on_no_idempotency_key=True,
    )


def run_once(
    key: str | None,
    who: Identity,
    operation: str,
    request: Any,
    perform: Callable[[], Outcome],
    *,
    persistence: Any,
    ttl_seconds: int,
    lambda_context: Any = None,
) -> Outcome:
    """Run ``perform`` once per (tenant, user, key); without a key, just run it."""
    if key is None:
        return perform()
    from aws_lambda_powertools.utilities.idempotency import idempotent_function
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyPersistenceLayerError,
        IdempotencyValidationError,
    )

    config = _config(ttl_seconds)
    if lambda_context is not None:
        config.register_lambda_context(lambda_context)
    performed = False  # set once ``perform`` returned: a persistence failure after it is save_success's

    def memtool_api_write(payload: dict[str, Any]) -> Outcome:
        nonlocal performed
        outcome = perform()
        performed = True
        return outcome

    guarded = idempotent_function(
        data_keyword_argument="payload", persistence_store=persistence, config=config, key_prefix="memtool-api"
    )(memtool_api_write)
    payload = {"tenant": who.tenant, "user": who.user, "key": key, "request": {"op": operation, "input": request}}
    try:
        return guarded(payload=payload)
    except IdempotencyValidationError as exc:
        raise IdempotencyMismatch(
            "this Idempotency-Key was already used for a different request", field="Idempotency-Key"
        ) from exc
    except IdempotencyAlreadyInProgressError as exc:
        raise IdempotencyInProgress("a request with this Idempotency-Key is still in progress; retry it for its answer") from exc
    except IdempotencyPersistenceLayerError as exc:
        failure = _persistence_failure(exc, performed=performed)
        if failure is None:
            raise
        if failure is exc.__cause__:
            raise failure from None  # the store's own error, its traceback kept
        raise failure from exc


# What a caller is told when the request was carried out but the idempotency record of its answer
# could not be stored: the store's own message ("nothing of this request was stored") would be untrue.
_DONE_UNRECORDED = (
    "the request was carried out, but its answer could not be recorded under its Idempotency-Key, so a retry "
    "with that key may carry it out again"
)
_UNRECORDED: dict[type[MemtoolError], str] = {
    InsufficientStorage: f"the disk holding memtool's state is full: {_DONE_UNRECORDED}. Free some space, and check "
    "the result before retrying",
    StoreReadOnly: f"memtool's state cannot be written: {_DONE_UNRECORDED}. Check the result before retrying; the "
    "operator should make the state folder and its files writable",
    StoreCorrupt: f"memtool's state database is damaged: {_DONE_UNRECORDED}. The operator should restore the file from "
    "a copy, or move it away to start with an empty store",
}


def _persistence_failure(exc: BaseException, *, performed: bool) -> MemtoolError | None:
    """The domain error behind Powertools' IdempotencyPersistenceLayerError (which wraps whatever the
    idempotency store raised as a 500): a domain error itself (the SQLite layer's full disk is already
    ``InsufficientStorage``), or a storage failure (``memory.sqlite_tx.storage_failure``: a raw
    sqlite3 or ENOSPC error); None for anything else, which stays an internal error."""
    cause = exc.__cause__
    if cause is None:
        return None
    if isinstance(cause, MemtoolError):
        failure: MemtoolError | None = cause
    else:
        from memtool.memory.sqlite_tx import storage_failure  # only on this rare path: sqlite3 stays unloaded

        failure = storage_failure(cause)
    if failure is not None and performed and type(failure) in _UNRECORDED:
        return type(failure)(_UNRECORDED[type(failure)])
    return failure
