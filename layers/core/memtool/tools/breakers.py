"""Circuit breakers for outside dependencies (Bedrock, OpenSearch, Redshift, E2B).

A dependency that fails ``failure_threshold`` times in a row is skipped for ``cooldown_seconds``
(the circuit is *open*): calls fail at once with a message that says so, and the caller takes the
embedded fallback where one exists (the rule planner for Bedrock, lexical recall for OpenSearch,
the local process sandbox for E2B). After the cool-down one trial call is let through
(*half-open*): a success closes the circuit, a failure opens it again.

Only failures of the dependency count: a throttle, a timeout, a refused connection, a 5xx. A
request the dependency rightly refused (a bad SQL, a validation error) is the caller's problem
and leaves the circuit alone; each wrapper passes a ``counts`` predicate that says which is which.

The state of every breaker is in the health output (``CircuitBreakers.health()``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"


class CircuitOpen(Exception):
    """The dependency is being skipped; the message says for how long."""

    def __init__(self, dependency: str, seconds_left: float) -> None:
        super().__init__(f"{dependency} is skipped for {seconds_left:.0f} s after repeated failures")
        self.dependency = dependency
        self.seconds_left = seconds_left


class CircuitBreaker:
    def __init__(
        self,
        name: str,
        *,
        failure_threshold: int = 3,
        cooldown_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.failure_threshold = max(1, failure_threshold)
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0  # consecutive
        self._opened_at: float | None = None
        self._trial_running = False
        self._opened_count = 0
        self._skipped = 0
        self._last_error: str | None = None

    @property
    def state(self) -> str:
        with self._lock:
            return self._state()

    def _state(self) -> str:
        if self._opened_at is None:
            return CLOSED
        return HALF_OPEN if self._clock() - self._opened_at >= self.cooldown_seconds else OPEN

    def allow(self) -> bool:
        """Whether a call may go to the dependency now (one trial at a time when half-open)."""
        with self._lock:
            state = self._state()
            if state == CLOSED:
                return True
            if state == HALF_OPEN and not self._trial_running:
                self._trial_running = True
                return True
            self._skipped += 1
            return False

    def cooldown_left(self) -> float:
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_seconds - (self._clock() - self._opened_at))

    def record_success(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_running = False

    def record_failure(self, error: BaseException | str | None = None) -> None:
        with self._lock:
            if error is not None:
                self._last_error = error if isinstance(error, str) else f"{type(error).__name__}: {str(error)[:200]}"
            self._failures += 1
            if self._trial_running or self._failures >= self.failure_threshold:
                if self._opened_at is None or self._trial_running:
                    self._opened_count += 1
                self._opened_at = self._clock()
                self._trial_running = False

    def open_error(self) -> CircuitOpen:
        return CircuitOpen(self.name, self.cooldown_left())

    def health(self) -> dict[str, Any]:
        with self._lock:
            state = self._state()
            left = 0.0 if self._opened_at is None else max(0.0, self.cooldown_seconds - (self._clock() - self._opened_at))
            return {
                "state": state,
                "consecutive_failures": self._failures,
                "cooldown_left_s": round(left, 1),
                "times_opened": self._opened_count,
                "calls_skipped": self._skipped,
                "last_error": self._last_error,
            }


class CircuitBreakers:
    """One breaker per dependency name, made on first use with the same settings."""

    def __init__(self, *, failure_threshold: int = 3, cooldown_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._failure_threshold = failure_threshold
        self._cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> CircuitBreaker:
        with self._lock:
            breaker = self._breakers.get(name)
            if breaker is None:
                breaker = self._breakers[name] = CircuitBreaker(
                    name, failure_threshold=self._failure_threshold, cooldown_seconds=self._cooldown_seconds, clock=self._clock
                )
            return breaker

    def health(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            breakers = dict(self._breakers)
        return {name: breaker.health() for name, breaker in sorted(breakers.items())}


def guarded_call(breaker: CircuitBreaker, call: Callable[[], Any], *, counts: Callable[[BaseException], bool]) -> Any:
    """Run ``call`` through the breaker: CircuitOpen when it is open; a counted failure trips it."""
    if not breaker.allow():
        raise breaker.open_error()
    try:
        result = call()
    except BaseException as exc:
        if counts(exc):
            breaker.record_failure(exc)
        else:
            breaker.record_success()  # the dependency answered; the request was the problem
        raise
    breaker.record_success()
    return result


class GuardedClient:
    """A client (boto3, opensearch-py, a warehouse, a sandbox) whose every method call goes
    through a breaker; attributes that are not callables pass through unchanged.

    ``open_error`` turns the open circuit into the exception the client's callers already handle
    (a botocore ClientError for a boto3 client, a WarehouseError for a warehouse), so their
    existing fallbacks and messages apply.
    """

    def __init__(
        self,
        client: Any,
        breaker: CircuitBreaker,
        *,
        counts: Callable[[BaseException], bool],
        open_error: Callable[[CircuitOpen, str], BaseException] | None = None,
        unguarded: frozenset[str] = frozenset(),
    ) -> None:
        self._client = client
        self._breaker = breaker
        self._counts = counts
        self._open_error = open_error
        self._unguarded = unguarded

    @property
    def wrapped(self) -> Any:
        return self._client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute) or name.startswith("_") or name in self._unguarded:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return guarded_call(self._breaker, lambda: attribute(*args, **kwargs), counts=self._counts)
            except CircuitOpen as exc:
                if self._open_error is None:
                    raise
                raise self._open_error(exc, name) from exc

        return call
