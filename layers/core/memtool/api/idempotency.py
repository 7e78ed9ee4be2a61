"""Idempotent API writes keyed by the client's Idempotency-Key header (Powertools idempotency).

The key is scoped to the caller (tenant, user) and the operation; replaying a key returns the
first response, and reusing a key for a different request is refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from memtool.api.identity import Identity, single_header
from memtool.errors import IdempotencyInProgress, IdempotencyMismatch, ValidationFailed

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
        IdempotencyValidationError,
    )

    config = _config(ttl_seconds)
    if lambda_context is not None:
        config.register_lambda_context(lambda_context)

    def memtool_api_write(payload: dict[str, Any]) -> Outcome:
        return perform()

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
