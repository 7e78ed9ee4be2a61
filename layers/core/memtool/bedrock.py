"""One Bedrock call, retried: the policy the planner, the embedder and the diagnoser share.

A call that fails with a retryable error code (``RETRYABLE_ERRORS``: throttling, service
unavailable, model not ready, internal error, model timeout) is tried again, up to
``max_attempts`` calls in all, after an exponential backoff with jitter through the injectable
``sleep`` and ``jitter``: the wait before retry *n* (1-based) is ``cap/2 + jitter()*cap/2`` with
``cap = min(max_delay, base_delay * 2**(n-1))``, so waits grow until they reach ``max_delay``
while concurrent callers still spread out. Any other Bedrock error (ValidationException,
AccessDeniedException, ...) and a botocore error with no answer at all (a read or connect
timeout, an endpoint error) are not retried.

When the call gives up, the caller decides what the failure becomes: ``unavailable`` turns a
``BedrockFailure`` into the caller's own exception (raised ``from`` the botocore error); without
it the botocore error itself is raised. Build the boto3 client with ``max_attempts=1`` so the
retries are these only. botocore is imported when a call is made, off the cold path.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from memtool.constants import BEDROCK_RETRYABLE_ERRORS

# Error codes Bedrock returns for conditions that pass on their own (defined in memtool.constants).
RETRYABLE_ERRORS: frozenset[str] = BEDROCK_RETRYABLE_ERRORS

T = TypeVar("T")


@dataclass(frozen=True)
class BedrockFailure:
    """Why a Bedrock call gave up."""

    code: str  # Bedrock's error code ("ClientError" when it names none), or the botocore error's class name
    message: str  # Bedrock's message (may be empty), or the botocore error's text
    attempts: int  # calls made, the last one included
    retryable: bool  # the code is one that passes on its own: the attempts ran out
    connection: bool  # no answer at all (a botocore error, e.g. a read timeout): never retried
    error: Exception  # the botocore error

    def reason(self, *, limit: int | None = None) -> str:
        """``<code>[ after <n> attempts]: <message>``, the message cut at ``limit`` characters;
        no trailing ``": "`` when the message is empty."""
        message = self.message if limit is None else self.message[:limit]
        tried = f" after {self.attempts} attempts" if self.retryable else ""
        return f"{self.code}{tried}: {message}".rstrip(": ")


@dataclass(frozen=True)
class BedrockRetry:
    """The retry policy of one Bedrock caller; ``call`` runs one request under it."""

    max_attempts: int
    base_delay: float
    max_delay: float
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = random.random  # a float in [0, 1)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")

    def delay(self, attempt: int) -> float:
        """The wait before retry ``attempt`` (1-based)."""
        cap = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return cap / 2 + self.jitter() * cap / 2

    def call(
        self,
        request: Callable[[], T],
        *,
        on_retry: Callable[[str, int, float], None] | None = None,
        unavailable: Callable[[BedrockFailure], Exception] | None = None,
    ) -> T:
        """``request()``'s answer. Before each retry ``on_retry(code, attempt, delay)`` is told
        (for a note or a log line), then the policy sleeps. When the call gives up, the exception
        ``unavailable(failure)`` returns is raised from the botocore error, or without
        ``unavailable`` the botocore error itself. Any other exception passes through untouched."""
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(1, self.max_attempts + 1):
            try:
                return request()
            except ClientError as error:
                details = error.response.get("Error", {})
                code = str(details.get("Code") or "ClientError")
                retryable = code in RETRYABLE_ERRORS
                if retryable and attempt < self.max_attempts:
                    delay = self.delay(attempt)
                    if on_retry is not None:
                        on_retry(code, attempt, delay)
                    self.sleep(delay)
                    continue
                if unavailable is None:
                    raise
                failure = BedrockFailure(code, str(details.get("Message") or ""), attempt, retryable, False, error)
                raise unavailable(failure) from error
            except BotoCoreError as error:  # read/connect timeouts, endpoint errors
                if unavailable is None:
                    raise
                raise unavailable(BedrockFailure(type(error).__name__, str(error), attempt, False, True, error)) from error
        raise AssertionError("unreachable: the loop returns or raises")


__all__ = ["BedrockFailure", "BedrockRetry", "RETRYABLE_ERRORS"]
