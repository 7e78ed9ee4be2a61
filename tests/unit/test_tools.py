"""memtool.tools: one definition (Converse toolSpec, flow step), the executor, circuit breakers."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from memtool.tools.base import BadArguments, NeedsClarification, Tool, ToolContext, ToolRegistry
from memtool.tools.breakers import CLOSED, HALF_OPEN, OPEN, CircuitBreaker, CircuitBreakers, CircuitOpen, GuardedClient
from memtool.tools.executor import ToolCall, ToolExecutor
from memtool.tools.step import run_tool_event


class TopArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: Literal["net_revenue", "units"] = Field(description="the measure to rank by")
    n: int = Field(3, ge=1, le=50, description="how many to return")


class TopOut(BaseModel):
    metric: str
    items: list[int]


def top(args: TopArgs, context: ToolContext) -> TopOut:
    if args.n == 13:
        raise NeedsClarification("13 is unlucky: ask for another number", field="n")
    if args.n == 7:
        raise RuntimeError("secret detail: password=hunter2 at /srv/app/x.py")
    return TopOut(metric=args.metric, items=list(range(args.n)))


TOP = Tool("top_items", "the top n items by a metric", TopArgs, TopOut, top, feedback=lambda out: 1.0 if out.items else -0.5)


def executor(*tools: Tool, **kwargs) -> ToolExecutor:
    return ToolExecutor(ToolRegistry(tools or (TOP,)), **kwargs)


def test_a_tool_definition_is_a_valid_converse_tool_spec():
    spec = TOP.tool_spec()["toolSpec"]
    assert re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{0,63}", spec["name"])
    schema = spec["inputSchema"]["json"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["properties"]["metric"]["enum"] == ["net_revenue", "units"]
    assert schema["properties"]["n"]["default"] == 3 and schema["properties"]["n"]["description"]
    assert ToolRegistry([TOP]).tool_config() == {"tools": [TOP.tool_spec()]}


def test_a_tool_must_forbid_extra_fields_and_describe_every_field():
    class Loose(BaseModel):
        n: int = Field(description="n")

    class Undescribed(BaseModel):
        model_config = ConfigDict(extra="forbid")
        n: int

    with pytest.raises(ValueError, match="forbid extra"):
        Tool("loose", "x", Loose, TopOut, top)
    with pytest.raises(ValueError, match="without a description: n"):
        Tool("undescribed", "x", Undescribed, TopOut, top)
    with pytest.raises(ValueError, match="must match"):
        Tool("has space", "x", TopArgs, TopOut, top)


def test_arguments_are_coerced_and_the_result_is_standard():
    result = executor().call("top_items", {"metric": "units", "n": "4"})
    assert result.success and result.error is None
    assert result.data == {"metric": "units", "items": [0, 1, 2, 3]}
    assert result.arguments == {"metric": "units", "n": 4}  # "4" became 4
    assert result.tool == "top_items" and result.duration_ms >= 0 and result.reward == 1.0
    assert set(result.model_dump()) >= {"success", "data", "error", "tool", "arguments", "duration_ms"}


def test_bad_arguments_name_each_field_and_what_it_needs():
    result = executor().call("top_items", {"metric": "gmv", "n": "lots", "tenant": "other"})
    assert not result.success and result.error.kind == "bad_arguments" and not result.error.retryable
    assert result.error.field == "metric"
    message = result.error.message
    assert "metric:" in message and "'net_revenue' or 'units'" in message
    assert "n:" in message and "'lots'" in message
    assert "tenant: unknown field" in message
    assert executor().call("top_items", {"metric": "units", "n": 0}).error.message.startswith("n: Input should be greater than or equal to 1")


def test_unknown_tools_business_errors_and_internal_errors_are_classified(caplog):
    missing = executor().call("drop_tables", {})
    assert missing.error.kind == "not_found" and "top_items" in missing.error.message

    business = executor().call("top_items", {"metric": "units", "n": 13})
    assert (business.error.kind, business.error.field) == ("business", "n") and "unlucky" in business.error.message

    with caplog.at_level(logging.ERROR, logger="memtool.tools"):
        internal = executor().call("top_items", {"metric": "units", "n": 7})
    assert internal.error.kind == "internal"
    assert "hunter2" not in internal.error.message and "/srv" not in internal.error.message
    assert "hunter2" in caplog.text  # the details are in the log only


def test_a_slow_tool_times_out_as_retryable():
    class SleepArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        seconds: float = Field(description="how long to sleep")

    release = threading.Event()
    slow = Tool("slow", "sleeps", SleepArgs, TopOut, lambda a, c: (release.wait(a.seconds), TopOut(metric="x", items=[]))[1], timeout_seconds=0.2)
    result = executor(slow).call("slow", {"seconds": 5})
    release.set()
    assert not result.success and result.error.kind == "timeout" and result.error.retryable
    assert "0.2 s" in result.error.message and result.duration_ms < 4000


def test_independent_calls_run_in_parallel_up_to_the_cap_and_keep_their_order():
    class WaitArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        i: int = Field(description="call number")

    running, peak, lock = [0], [0], threading.Lock()
    barrier = threading.Barrier(2, timeout=2)

    def wait(args: WaitArgs, context: ToolContext) -> TopOut:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            barrier.wait()  # only passes when two calls are in flight at once
        except threading.BrokenBarrierError:
            raise BadArguments("no partner call ran at the same time") from None
        finally:
            with lock:
                running[0] -= 1
        return TopOut(metric="x", items=[args.i])

    tool = Tool("pair", "waits for a partner", WaitArgs, TopOut, wait, timeout_seconds=5)
    results = executor(tool, max_parallel=2).call_many([ToolCall(tool="pair", arguments={"i": i}) for i in range(4)])
    assert [r.data["items"] for r in results] == [[0], [1], [2], [3]]
    assert all(r.success for r in results) and peak[0] == 2  # two at a time, never more

    barrier.reset()
    serial = executor(tool, max_parallel=1).call_many([ToolCall(tool="pair", arguments={"i": i}) for i in range(2)])
    assert not any(r.success for r in serial)  # one at a time: the barrier never fills


def test_every_call_reaches_the_trajectory_with_its_inputs_and_a_summary():
    trajectory: list[dict] = []
    run = executor(on_result=lambda r: trajectory.append(r.trajectory_entry()))
    run.call("top_items", {"metric": "units", "n": 2})
    run.call("top_items", {"metric": "gmv"})
    assert [t["tool"] for t in trajectory] == ["top_items", "top_items"]
    assert trajectory[0]["arguments"] == {"metric": "units", "n": 2} and trajectory[0]["success"]
    assert trajectory[0]["summary"] == "fields: metric, items"
    assert trajectory[1]["summary"].startswith("bad_arguments: metric")


def test_the_step_face_turns_an_event_into_a_result_and_refuses_a_malformed_one():
    ok = run_tool_event(executor(), {"tool": "top_items", "arguments": {"metric": "units", "n": "2"}, "context": {"tenant": "acme", "user": "li"}})
    assert ok["success"] and ok["data"]["items"] == [0, 1]
    bad = run_tool_event(executor(), {"tool": "top_items", "arguments": [], "tenant": "x"})
    assert not bad["success"] and bad["error"]["kind"] == "bad_arguments"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_breaker_opens_after_repeated_failures_skips_for_the_cooldown_then_tries_once():
    clock = FakeClock()
    breaker = CircuitBreaker("bedrock", failure_threshold=3, cooldown_seconds=30, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure(RuntimeError("throttled"))
    assert breaker.state == CLOSED
    breaker.record_failure(RuntimeError("throttled"))
    assert breaker.state == OPEN and not breaker.allow()
    assert "skipped for 30 s" in str(breaker.open_error())
    clock.now = 31
    assert breaker.state == HALF_OPEN
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    breaker.record_failure("still down")
    assert breaker.state == OPEN and breaker.health()["times_opened"] == 2
    clock.now = 62
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == CLOSED
    health = breaker.health()
    assert health["state"] == "closed" and health["calls_skipped"] == 2 and health["last_error"] == "still down"


def test_only_dependency_failures_trip_a_guarded_client_and_an_open_circuit_speaks_the_clients_language():
    class Warehouse:
        calls = 0

        def run(self, sql: str) -> str:
            Warehouse.calls += 1
            if sql == "bad":
                raise ValueError("syntax error")
            raise ConnectionError("refused")

    breakers = CircuitBreakers(failure_threshold=2, cooldown_seconds=60, clock=FakeClock())
    guarded = GuardedClient(
        Warehouse(),
        breakers.get("redshift"),
        counts=lambda exc: isinstance(exc, ConnectionError),
        open_error=lambda exc, name: LookupError(f"{name}: {exc}"),
    )
    for _ in range(3):
        with pytest.raises(ValueError):
            guarded.run("bad")  # the request's fault: the circuit stays closed
    assert breakers.health()["redshift"]["state"] == "closed"
    for _ in range(2):
        with pytest.raises(ConnectionError):
            guarded.run("select 1")
    with pytest.raises(LookupError, match="run: redshift is skipped for 60 s"):
        guarded.run("select 1")
    assert Warehouse.calls == 5  # the open circuit never reached the warehouse
    assert breakers.health()["redshift"]["state"] == "open"


def test_the_executor_skips_a_tool_whose_dependency_circuit_is_open():
    breakers = CircuitBreakers(failure_threshold=1, cooldown_seconds=60, clock=FakeClock())
    calls = []

    def flaky(args: TopArgs, context: ToolContext) -> TopOut:
        calls.append(args.n)
        raise ConnectionError("e2b down")

    tool = Tool("flaky", "depends on e2b", TopArgs, TopOut, flaky, dependency="e2b")
    run = executor(tool, breakers=breakers)
    first = run.call("flaky", {"metric": "units"})
    assert first.error.kind == "internal"
    second = run.call("flaky", {"metric": "units"})
    assert second.error.kind == "unavailable" and second.error.retryable and "e2b is skipped" in second.error.message
    assert calls == [3]


def test_circuit_open_is_an_exception_naming_the_dependency():
    error = CircuitOpen("opensearch", 12.4)
    assert error.dependency == "opensearch" and "opensearch is skipped for 12 s" in str(error)


def test_a_call_that_timed_out_keeps_its_slot_until_it_really_ends():
    class SleepArgs(BaseModel):
        model_config = ConfigDict(extra="forbid")
        seconds: float = Field(description="how long to work")

    release = threading.Event()
    busy = Tool("busy", "works until released", SleepArgs, TopOut, lambda a, c: (release.wait(a.seconds), TopOut(metric="x", items=[]))[1], timeout_seconds=0.2)
    run = executor(busy, max_parallel=1)
    assert run.call("busy", {"seconds": 30}).error.kind == "timeout"  # abandoned, still running
    refused = run.call("busy", {"seconds": 0})
    assert refused.error.kind == "unavailable" and refused.error.retryable and "slots are busy" in refused.error.message
    release.set()
    time.sleep(0.05)
    assert run.call("busy", {"seconds": 0}).success  # the slot came back when the handler ended
