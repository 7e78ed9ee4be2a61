"""Logger, Tracer and Metrics: the one place they are made (Powertools), for every handler.

Every Lambda entry point wraps itself in :func:`instrumented`, which starts each invocation with a
clean logger: the keys an invocation adds (its step, episode, tool) never reach the log lines of
the next one, in the same Lambda container or, in the local runtime, in the same process on
another thread. Keys an invocation adds go through :func:`invocation_keys` (per thread).

Library code logs through ``logging.getLogger("memtool.<area>")``: those loggers propagate to the
Powertools logger named ``memtool``, so their lines are JSON with the invocation's keys too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = "memtool"
NAMESPACE = "memtool"

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

Handler = TypeVar("Handler", bound=Callable[..., Any])


def invocation_keys(**keys: object) -> None:
    """Keys for this invocation's log lines only (cleared when the next invocation starts)."""
    logger.thread_safe_append_keys(**{name: value for name, value in keys.items() if value is not None})


def instrumented(
    *, correlation_id_path: str | None = None, trace: bool = True, emit_metrics: bool = True
) -> Callable[[Handler], Handler]:
    """The decorators of a Lambda handler, in their order: a clean logger with the Lambda context
    (and the correlation id, when the event carries one), the X-Ray segment, the metrics flush."""

    def wrap(handler: Handler) -> Handler:
        inner: Callable[..., Any] = handler
        if emit_metrics:
            inner = metrics.log_metrics(inner)
        if trace:
            inner = tracer.capture_lambda_handler(inner)

        injected = logger.inject_lambda_context(inner, correlation_id_path=correlation_id_path, clear_state=True)

        @functools.wraps(handler)
        def entry(event: Any, context: Any, *args: Any, **kwargs: Any) -> Any:
            logger.thread_safe_clear_keys()  # clear_state clears the shared keys, not the per-thread ones
            logger.set_correlation_id(None)  # an event without one must not log the previous one's
            return injected(event, context, *args, **kwargs)

        return entry  # type: ignore[return-value]

    return wrap
