"""Logger, Tracer and Metrics come from memtool.observability, and every handler starts with a
clean logger: a log line of one invocation carries none of the keys of the previous one.

The lines are read as Powertools formats them (its registered JSON formatter on a captured
stream); metrics as the EMF document Powertools prints, the way its testing guide reads them.
"""

from __future__ import annotations

import ast
import io
import json
import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from memtool.observability import instrumented, invocation_keys, logger, metrics
from memtool.runtime.lambda_context import LocalLambdaContext
from tests.support import ROOT

FUNCTIONS = sorted(path.parent.name for path in (ROOT / "functions").glob("*/app.py"))


@pytest.fixture
def log_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Reads every line the memtool logger wrote during the test, parsed from Powertools' JSON."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    target = logging.getLogger("memtool")
    level = target.level  # the local runtime quietens it (runtime/local.py); warnings are what these tests log
    target.setLevel(logging.WARNING)
    target.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    finally:
        target.removeHandler(handler)
        target.setLevel(level)


def api_event(correlation: str) -> dict[str, Any]:
    return {"requestContext": {"requestId": correlation}, "path": "/x", "httpMethod": "GET"}


@instrumented(emit_metrics=False)
def step_handler(event: dict[str, Any], context: Any) -> None:
    invocation_keys(step=event["step"], episode_id=event["episode_id"])
    logger.append_keys(tenant=event["tenant"])  # a shared key, as a careless handler might add
    logging.getLogger("memtool.flows").warning("step ran")


@instrumented(correlation_id_path="requestContext.requestId", emit_metrics=False)
def api_handler(event: dict[str, Any], context: Any) -> None:
    logging.getLogger("memtool.api").warning("request failed")


@instrumented(emit_metrics=False)
def quiet_handler(event: dict[str, Any], context: Any) -> None:
    logging.getLogger("memtool.indexer").warning("indexed")


def test_a_log_line_of_one_invocation_carries_none_of_the_keys_of_the_previous_one(log_lines) -> None:
    step_handler({"step": "Plan", "episode_id": "ep_first", "tenant": "acme"}, LocalLambdaContext(function_name="flow-steps"))
    api_handler(api_event("req-feedback"), LocalLambdaContext(function_name="feedback"))
    quiet_handler({}, LocalLambdaContext(function_name="indexer"))
    first, second, third = log_lines()

    assert (first["step"], first["episode_id"], first["tenant"], first["function_name"]) == ("Plan", "ep_first", "acme", "flow-steps")
    assert second["message"] == "request failed" and second["correlation_id"] == "req-feedback"
    assert not {"step", "episode_id", "tenant"} & second.keys(), second
    assert second["function_name"] == "feedback"
    assert third.get("correlation_id") is None, third  # the API call's correlation id stays with it
    assert not {"step", "episode_id", "tenant"} & third.keys(), third


def test_without_a_clean_start_powertools_keeps_the_previous_invocations_keys(log_lines) -> None:
    """The defect the clean start removes (an ask's episode_id on a feedback log line)."""

    @logger.inject_lambda_context
    def careless(event: dict[str, Any], context: Any) -> None:
        if "episode_id" in event:
            logger.append_keys(episode_id=event["episode_id"])
        logging.getLogger("memtool.flows").warning("ran")

    careless({"episode_id": "ep_leaked"}, LocalLambdaContext())
    careless({}, LocalLambdaContext())
    try:
        lines = log_lines()
        assert lines[1].get("episode_id") == "ep_leaked"
    finally:
        logger.remove_keys(["episode_id"])


def test_invocation_keys_stay_on_their_own_thread(log_lines) -> None:
    import threading

    started, release = threading.Event(), threading.Event()

    @instrumented(emit_metrics=False)
    def slow(event: dict[str, Any], context: Any) -> None:
        invocation_keys(episode_id="ep_thread")
        started.set()
        release.wait(5)

    worker = threading.Thread(target=slow, args=({}, LocalLambdaContext()))
    worker.start()
    assert started.wait(5)
    try:
        logging.getLogger("memtool.local").warning("meanwhile")  # the local runtime's own thread
    finally:
        release.set()
        worker.join(5)
    (line,) = log_lines()
    assert "episode_id" not in line


@pytest.mark.parametrize("function", FUNCTIONS)
def test_every_handler_is_instrumented_from_the_one_module(function: str) -> None:
    """Each functions/<name>/app.py takes Logger/Tracer/Metrics from memtool.observability (it makes
    none itself) and its lambda_handler is wrapped by `instrumented`."""
    tree = ast.parse((ROOT / "functions" / function / "app.py").read_text(encoding="utf-8"))
    made = [
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"Logger", "Tracer", "Metrics"}
    ]
    assert made == []
    handler = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "lambda_handler")
    decorators = [ast.unparse(d) for d in handler.decorator_list]
    assert len(decorators) == 1 and decorators[0].startswith("instrumented("), decorators


def test_no_library_module_makes_its_own_powertools_logger_tracer_or_metrics() -> None:
    package = ROOT / "layers" / "core" / "memtool"
    offenders = []
    for path in package.rglob("*.py"):
        if path.name == "observability.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"Logger", "Tracer"}:
                offenders.append(f"{path.relative_to(package)}:{node.lineno}")
    assert offenders == []


@pytest.fixture
def emitted_metrics(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[Any]:
    """Powertools' testing pattern: metrics enabled, the buffer cleared before and after, the EMF
    document read from stdout."""
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    metrics.clear_metrics()
    metrics.clear_default_dimensions()

    def read() -> list[dict[str, Any]]:
        out = capsys.readouterr().out
        return [json.loads(line) for line in out.splitlines() if line.startswith("{") and "_aws" in line]

    yield read
    metrics.clear_metrics()


def test_an_instrumented_handler_publishes_its_metrics_as_one_emf_document(emitted_metrics) -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    @instrumented()
    def counting(event: dict[str, Any], context: Any) -> None:
        metrics.add_metric(name="Ask_answered", unit=MetricUnit.Count, value=1)
        metrics.add_metric(name="CacheMiss_new_question", unit=MetricUnit.Count, value=1)

    counting({}, LocalLambdaContext())
    (document,) = emitted_metrics()
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "memtool"
    assert ["service"] in directive["Dimensions"] and document["service"] == "memtool"
    assert {m["Name"]: m["Unit"] for m in directive["Metrics"]} == {"Ask_answered": "Count", "CacheMiss_new_question": "Count"}
    assert document["Ask_answered"] == [1.0] or document["Ask_answered"] == 1.0

    counting({}, LocalLambdaContext())  # the buffer was flushed: the next invocation starts from zero
    (again,) = emitted_metrics()
    assert again["Ask_answered"] in (1.0, [1.0])


def test_a_handler_that_records_no_metric_publishes_no_empty_document(emitted_metrics) -> None:
    @instrumented(emit_metrics=False)
    def silent(event: dict[str, Any], context: Any) -> str:
        return "ok"

    assert silent({}, LocalLambdaContext(aws_request_id=str(uuid.uuid4()))) == "ok"
    assert emitted_metrics() == []


def test_maintenance_write_report_publishes_the_runs_counts(emitted_metrics, monkeypatch) -> None:
    """MaintenanceFlow's WriteReport Task (functions/maintenance): the run's main counts as metrics."""
    from memtool.runtime import maintenance
    from memtool.runtime.handlers import function_handler
    from tests.support import ROOT

    class Reports:
        def write_report(self, run: dict[str, Any]) -> dict[str, Any]:
            return {"steps": {"capacity": {"evicted": 50, "read": 151}, "consolidate": {"summaries": 3}}, "tenants": {}}

    monkeypatch.setattr(maintenance, "maintenance_service", lambda: Reports())
    function_handler(ROOT, "maintenance")({"step": "WriteReport", "run": {}}, LocalLambdaContext())

    (document,) = emitted_metrics()
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert {m["Name"] for m in directive["Metrics"]} == {"Maintenance_capacity_evicted", "Maintenance_consolidate_summaries"}
    assert document["Maintenance_capacity_evicted"] in (50.0, [50.0])
