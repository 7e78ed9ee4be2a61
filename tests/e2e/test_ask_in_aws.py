"""POST /ask as it runs in AWS (MEMTOOL_RUNTIME=aws): the ask Lambda's handler with an API Gateway
event whose identity comes from the authorizer's claims.

- A flow slower than the Step Functions client's read timeout is started exactly once: a loopback
  server speaks StartSyncExecution's wire protocol (botocore's own request, one host, no "sync-"
  prefix for a custom endpoint) and holds the answer past the timeout.
- An Idempotency-Key makes a retried POST /ask answer the first answer without a second flow
  (the Powertools idempotency table on moto; the flow runner is a counting fake).
- With no warehouse configured, /ask answers a 503 that names the stack parameter to set.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from memtool.flows.runner import FlowExecution
from memtool.runtime import container
from memtool.runtime.aws import client
from memtool.runtime.handlers import function_handler
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.runtime.tables import create_tables
from memtool.settings import Settings, use_settings
from tests.support import ROOT, load_event

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:memtool-AskFlow"


class SlowStepFunctions(http.server.ThreadingHTTPServer):
    """Answers StartSyncExecution after ``delay`` seconds with a SUCCEEDED execution."""

    daemon_threads = True

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started: list[dict[str, Any]] = []
        self.answered = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SlowStepFunctions

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.started.append({"target": self.headers.get("X-Amz-Target"), **body})
        time.sleep(self.server.delay)
        first = json.loads(body["input"])
        final = {**first, "route": "kpi_lookup", "status": "answered"}
        payload = json.dumps(
            {"executionArn": f"{ARN}:{body.get('name')}", "startDate": 1, "stopDate": 2, "status": "SUCCEEDED", "output": json.dumps(final)}
        ).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-amz-json-1.0")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (its read timeout): the flow still ran once
        finally:
            self.server.answered.set()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def slow_flow() -> Iterator[SlowStepFunctions]:
    server = SlowStepFunctions(delay=4.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def aws_settings(**overrides: Any) -> Settings:
    return Settings(
        runtime="aws",
        region="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        ask_state_machine_arn=ARN,
        warehouse="redshift",
        redshift_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:memtool-redshift",
        vector_index="none",
        **overrides,
    )


def ask_event(body: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    event = load_event("ask.json")
    event["body"] = json.dumps(body, ensure_ascii=False)
    event["headers"] = {**event["headers"], **(headers or {})}
    event["requestContext"]["requestId"] = str(uuid.uuid4())
    return event


def invoke_ask(event: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = function_handler(ROOT, "ask")(event, LocalLambdaContext(function_name="memtool-ask", timeout_seconds=28))
    return response["statusCode"], json.loads(response["body"] or "null")


def test_a_flow_slower_than_the_client_read_timeout_starts_exactly_one_execution(slow_flow: SlowStepFunctions) -> None:
    use_settings(aws_settings(aws_endpoint_url=slow_flow.url, ask_flow_read_timeout_seconds=1.0))
    try:
        status, body = invoke_ask(ask_event({"question": "上个月净收入"}))
        gave_up_first = not slow_flow.answered.is_set()  # the client stopped waiting before the flow ended
        # The flow answers only after the client gave up; a retrying client would start it again
        # while this one is still running. Wait until the server has answered, then count.
        assert slow_flow.answered.wait(10)
        time.sleep(0.3)
    finally:
        container.reset()
    assert [call["target"] for call in slow_flow.started] == ["AWSStepFunctions.StartSyncExecution"]
    assert slow_flow.started[0]["stateMachineArn"] == ARN
    assert slow_flow.started[0]["name"] == body["episode_id"]  # the execution is named by its episode
    assert gave_up_first
    assert status == 200
    assert body["status"] == "failed" and body["error"]["error"] == "flow_timeout", body


def test_the_production_client_neither_retries_nor_waits_less_than_the_flow() -> None:
    """The StartSyncExecution client as container.flow_runner() builds it (read by the timeout-chain test too)."""
    use_settings(aws_settings())
    try:
        sfn = container.flow_runner()._sfn  # noqa: SLF001 - the client's configuration is the contract
        config = sfn.meta.config
    finally:
        container.reset()
    assert config.retries["total_max_attempts"] == 1
    assert config.read_timeout == Settings().ask_flow_read_timeout_seconds == 25
    assert config.connect_timeout == Settings().ask_flow_connect_timeout_seconds == 2


class CountingFlow:
    """A FlowRunner that answers every execution at once and counts them."""

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []

    def run(self, machine: str, execution_input: dict[str, Any]) -> FlowExecution:
        self.inputs.append(execution_input)
        final = {**execution_input, "route": "kpi_lookup", "status": "answered", "plan": {"status": "answered", "route": "kpi_lookup", "answer": f"answer {len(self.inputs)}"}}
        return FlowExecution(status="SUCCEEDED", output=final, elapsed_ms=5.0)


@pytest.fixture
def idempotent_aws(template: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingFlow]:
    from moto import mock_aws

    suffix = uuid.uuid4().hex[:8]
    settings = aws_settings(memory_table=f"memory-{suffix}", idempotency_table=f"idempotency-{suffix}")
    flows = CountingFlow()
    with mock_aws():
        use_settings(settings)
        create_tables(client("dynamodb", settings), settings, template)
        monkeypatch.setattr(container, "flow_runner", lambda: flows)
        yield flows
        container.reset()


def test_a_retried_ask_with_the_same_idempotency_key_answers_the_first_answer_without_a_second_flow(
    idempotent_aws: CountingFlow,
) -> None:
    key = {"Idempotency-Key": "ask-retry-0001"}
    first = invoke_ask(ask_event({"question": "上个月净收入"}, key))
    again = invoke_ask(ask_event({"question": "上个月净收入"}, key))
    assert first[0] == again[0] == 200
    assert again[1] == first[1] and first[1]["answer"] == "answer 1"
    assert len(idempotent_aws.inputs) == 1

    reused = invoke_ask(ask_event({"question": "这个月净收入"}, key))  # the same key for another question
    assert reused[0] == 422 and reused[1]["field"] == "Idempotency-Key"
    assert len(idempotent_aws.inputs) == 1

    invoke_ask(ask_event({"question": "上个月净收入"}))  # no key: every request runs
    invoke_ask(ask_event({"question": "上个月净收入"}))
    assert len(idempotent_aws.inputs) == 3


def test_without_a_warehouse_ask_answers_a_configuration_error_naming_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    flows = CountingFlow()
    use_settings(aws_settings().model_copy(update={"warehouse": "none", "redshift_secret_arn": None}))
    monkeypatch.setattr(container, "flow_runner", lambda: flows)
    try:
        status, body = invoke_ask(ask_event({"question": "上个月净收入"}))
    finally:
        container.reset()
    assert status == 503
    assert body["error"] == "not_configured" and body["field"] == "RedshiftSecretArn"
    assert "RedshiftSecretArn" in body["message"] and "Redshift" in body["message"]
    assert flows.inputs == []  # refused before any flow starts


def test_in_a_lambda_function_no_adapter_may_read_a_local_file() -> None:
    with pytest.raises(ValueError, match="MEMTOOL_WAREHOUSE=duckdb .*MEMTOOL_VECTOR_INDEX=embedded"):
        Settings(AWS_LAMBDA_FUNCTION_NAME="memtool-ask", runtime="aws")
    with pytest.raises(ValueError, match="MEMTOOL_STORE=sqlite"):
        Settings(AWS_LAMBDA_FUNCTION_NAME="memtool-ask", runtime="aws", store="sqlite", warehouse="none", vector_index="none")
    with pytest.raises(ValueError, match="MEMTOOL_SOURCES_BUCKET unset"):
        Settings(AWS_LAMBDA_FUNCTION_NAME="memtool-ask", runtime="aws", warehouse="none", vector_index="none")
    # what the template gives a function with the default parameters (no Redshift, no OpenSearch)
    deployed = Settings(
        AWS_LAMBDA_FUNCTION_NAME="memtool-ask", runtime="aws", warehouse="none", vector_index="none", sources_bucket="stack-sourcesbucket"
    )
    assert deployed.local_path_adapters() == []
    # the local runtime and the tests are not in a Lambda function
    assert Settings(runtime="local").warehouse == "duckdb"
