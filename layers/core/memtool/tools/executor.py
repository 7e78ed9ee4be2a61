"""Runs tool calls: validates and coerces arguments, times out, classifies failures, records.

Every call, from a Converse turn, an AskFlow step or an MCP client, goes through ``ToolExecutor``
and comes back as a ``ToolResult`` (``success, data, error, tool, arguments, duration_ms``), never
as an exception:

- arguments are validated by the tool's strict input model with pydantic's lax coercion ("123"
  becomes 123 where the schema says integer); a refusal names each field and says what it needs;
- the handler runs under the tool's timeout (a worker thread; a call that overruns is abandoned
  and reported ``timeout``, which is retryable);
- failures are classified: ``bad_arguments``, ``not_found``, ``timeout``, ``business`` (needs a
  clarification), ``unavailable`` (a dependency failed or its circuit is open) and ``internal``
  (a generic message; the details go only to the log);
- independent calls of one turn run in parallel, at most ``max_parallel`` at a time;
- every result is handed to ``on_result`` (the episode's trajectory) with a summary of its output.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memtool.tools.base import RETRYABLE, DependencyUnavailable, Tool, ToolContext, ToolFailure, ToolRegistry
from memtool.tools.breakers import CircuitBreakers

logger = logging.getLogger("memtool.tools")

MAX_ARGUMENT_ECHO_BYTES = 4_000  # a result repeats its arguments; a huge table is summarised


class ToolError(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str
    message: str
    field: str | None = None
    retryable: bool = False


class ToolResult(BaseModel):
    """The standard result of one call, whatever the tool and however it failed."""

    model_config = ConfigDict(extra="forbid")

    success: bool
    data: dict[str, Any] | None = None
    error: ToolError | None = None
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    duration_ms: float = 0.0
    reward: float | None = None  # the tool's feedback parser on a success; -1 on a failure
    summary: str = ""

    def trajectory_entry(self) -> dict[str, Any]:
        """What the episode keeps of a call: its inputs in brief and a summary, not the output."""
        summary = self.summary if self.success else f"{self.error.kind}: {self.error.message}" if self.error else ""
        return {
            "tool": self.tool,
            "arguments": brief_arguments(self.arguments),
            "success": self.success,
            "summary": summary[:300],
            "duration_ms": self.duration_ms,
        }


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ToolExecutor:
    def __init__(
        self,
        registry: ToolRegistry,
        *,
        breakers: CircuitBreakers | None = None,
        max_parallel: int = 4,
        on_result: Callable[[ToolResult], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.registry = registry
        self.breakers = breakers
        self.max_parallel = max(1, max_parallel)
        # Handlers running at once, counted until they really finish: a call that timed out is
        # abandoned but still computing, and new calls wait for its slot rather than pile up.
        self._slots = threading.BoundedSemaphore(self.max_parallel)
        self._on_result = on_result
        self._clock = clock

    def call(self, name: str, arguments: dict[str, Any] | None, context: ToolContext | None = None) -> ToolResult:
        started = self._clock()
        raw = dict(arguments or {}) if isinstance(arguments, dict) else {}
        result = self._call(name, arguments, raw, context or ToolContext(), started)
        if self._on_result is not None:
            try:
                self._on_result(result)
            except Exception:  # the trajectory is a record; the call's result stands
                logger.warning("the trajectory could not record a call of %s", name, exc_info=True)
        return result

    def call_many(self, calls: Sequence[ToolCall], context: ToolContext | None = None) -> list[ToolResult]:
        """Independent calls of one turn, in parallel (at most ``max_parallel``), results in order."""
        if len(calls) <= 1:
            return [self.call(c.tool, c.arguments, context) for c in calls]
        with ThreadPoolExecutor(max_workers=min(self.max_parallel, len(calls)), thread_name_prefix="tool") as pool:
            return list(pool.map(lambda c: self.call(c.tool, c.arguments, context), calls))

    # ---- one call -------------------------------------------------------------------------

    def _call(self, name: str, arguments: Any, raw: dict[str, Any], context: ToolContext, started: float) -> ToolResult:
        def failed(kind: str, message: str, field: str | None = None) -> ToolResult:
            return ToolResult(
                success=False,
                error=ToolError(kind=kind, message=message, field=field, retryable=kind in RETRYABLE),
                tool=name,
                arguments=raw,
                duration_ms=self._elapsed(started),
                reward=-1.0,
            )

        try:
            tool = self.registry.get(name)
        except ToolFailure as exc:
            return failed(exc.kind, exc.message, exc.field)
        if not isinstance(arguments, dict) and arguments is not None:
            return failed("bad_arguments", f"arguments must be an object, got {type(arguments).__name__}", "arguments")
        try:
            parsed = tool.input_model.model_validate(raw)
        except ValidationError as exc:
            field, message = _validation_message(exc)
            return failed("bad_arguments", message, field)
        breaker = self.breakers.get(tool.dependency) if self.breakers is not None and tool.dependency else None
        if breaker is not None and not breaker.allow():
            return failed(
                "unavailable", f"{tool.dependency} is skipped for {breaker.cooldown_left():.0f} s after repeated failures; try again later"
            )
        try:
            output = _run_with_timeout(tool, parsed, context, self._slots)
        except _Busy:
            return failed(
                "unavailable", f"all {self.max_parallel} tool slots are busy with earlier calls that are still running; try again shortly"
            )
        except TimeoutError:
            if breaker is not None:
                breaker.record_failure()
            return failed("timeout", f"{name} did not finish within {tool.timeout_seconds:g} s; try again, or ask for less data")
        except DependencyUnavailable as exc:
            if breaker is not None:
                breaker.record_failure()
            return failed(exc.kind, exc.message, exc.field)
        except ToolFailure as exc:
            return failed(exc.kind, exc.message, exc.field)
        except Exception:  # the caller gets a generic message; the details are logged
            logger.exception("tool %s failed", name)
            if breaker is not None:
                breaker.record_failure()
            return failed("internal", f"{name} failed because of an internal problem; the details are in the logs")
        if breaker is not None:
            breaker.record_success()
        if not isinstance(output, tool.output_model):
            output = tool.output_model.model_validate(output)
        return ToolResult(
            success=True,
            data=output.model_dump(mode="json"),
            tool=name,
            arguments=parsed.model_dump(mode="json"),
            duration_ms=self._elapsed(started),
            reward=tool.reward(output),
            summary=tool.summary_of(output),
        )

    def _elapsed(self, started: float) -> float:
        return round((self._clock() - started) * 1000, 3)


class _Busy(Exception):
    """Every slot is held by a running handler (some perhaps abandoned after their timeout)."""


def _run_with_timeout(tool: Tool[Any, Any], parsed: BaseModel, context: ToolContext, slots: threading.BoundedSemaphore) -> Any:
    """The handler's output, or TimeoutError after the tool's timeout (the worker is abandoned:
    a daemon thread, so an overrunning handler never holds the process open, but it keeps its
    slot until it really ends)."""
    if not slots.acquire(timeout=tool.timeout_seconds):
        raise _Busy(tool.name)
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["output"] = tool.handler(parsed, context)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc
        finally:
            slots.release()
            done.set()

    worker = threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    if not done.wait(tool.timeout_seconds):
        raise TimeoutError(tool.name)
    if "error" in box:
        raise box["error"]
    return box["output"]


def _validation_message(exc: ValidationError) -> tuple[str | None, str]:
    """(the first field, one message naming every field and what it needs)."""
    parts: list[str] = []
    first: str | None = None
    for error in exc.errors():
        where = ".".join(str(p) for p in error.get("loc", ())) or "arguments"
        first = first or where
        kind = error.get("type", "")
        if kind == "extra_forbidden":
            parts.append(f"{where}: unknown field; remove it")
        elif kind == "missing":
            parts.append(f"{where}: required")
        else:
            parts.append(f"{where}: {error.get('msg', 'invalid')} (got {_short(error.get('input'))})")
    return first, "; ".join(parts)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def brief_arguments(arguments: dict[str, Any], limit: int = 120) -> dict[str, Any]:
    """Each argument in a few words: a table is its size, a long text its start."""
    brief: dict[str, Any] = {}
    for key, value in arguments.items():
        if isinstance(value, list):
            brief[key] = value if len(value) <= 6 and len(repr(value)) <= limit else f"<{len(value)} items>"
        elif isinstance(value, dict):
            brief[key] = brief_arguments(value, limit) if len(repr(value)) > limit else value
        elif isinstance(value, str) and len(value) > limit:
            brief[key] = value[: limit - 1] + "…"
        else:
            brief[key] = value
    return brief


def echo_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as the trajectory keeps them: long lists (a table's rows) are counted."""
    import json

    if len(json.dumps(arguments, ensure_ascii=False, default=str).encode()) <= MAX_ARGUMENT_ECHO_BYTES:
        return arguments
    kept: dict[str, Any] = {}
    for key, value in arguments.items():
        if isinstance(value, list) and len(value) > 10:
            kept[key] = f"<{len(value)} items>"
        elif isinstance(value, dict) and len(json.dumps(value, default=str)) > 500:
            kept[key] = {k: (f"<{len(v)} items>" if isinstance(v, list) else v) for k, v in value.items()}
        else:
            kept[key] = value
    return kept
