"""AskFlow in AWS: StartSyncExecution as botocore sends it, answered by a scripted Stubber
(no Step Functions here), and how each returned status becomes a FlowExecution."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from memtool.runtime.step_functions import StepFunctionsRunner

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:memtool-AskFlow"


def runner_with(response: dict, expected_input: dict) -> tuple[StepFunctionsRunner, Stubber]:
    sfn = boto3.client("stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(sfn)
    stubber.add_response(
        "start_sync_execution",
        response,
        {"stateMachineArn": ARN, "name": expected_input["episode_id"], "input": json.dumps(expected_input, ensure_ascii=False)},
    )
    stubber.activate()
    return StepFunctionsRunner(sfn, {"AskFlow": ARN}), stubber


def test_a_succeeded_execution_returns_the_final_state():
    first = {"episode_id": "ep_1", "input": {"question": "上个月净收入"}}
    final = {**first, "status": "answered", "route": "kpi_lookup"}
    runner, stubber = runner_with(
        {
            "executionArn": f"{ARN}:ep_1",
            "startDate": "2026-11-29T09:00:00Z",
            "stopDate": "2026-11-29T09:00:01Z",
            "status": "SUCCEEDED",
            "output": json.dumps(final, ensure_ascii=False),
        },
        first,
    )
    execution = runner.run("AskFlow", first)
    stubber.assert_no_pending_responses()
    assert execution.status == "SUCCEEDED" and execution.output == final and execution.error is None


def test_a_failed_execution_carries_its_error_and_cause():
    first = {"episode_id": "ep_2", "input": {"question": "x"}}
    runner, _ = runner_with(
        {
            "executionArn": f"{ARN}:ep_2",
            "startDate": "2026-11-29T09:00:00Z",
            "stopDate": "2026-11-29T09:00:01Z",
            "status": "FAILED",
            "error": "Lambda.Unknown",
            "cause": "The cause",
        },
        first,
    )
    execution = runner.run("AskFlow", first)
    assert (execution.status, execution.output, execution.error, execution.cause) == ("FAILED", None, "Lambda.Unknown", "The cause")


def test_the_ask_service_turns_a_failed_execution_into_a_failed_answer():
    from memtool.flows.ask import AskCommand, AskService
    from memtool.identity import Identity
    from memtool.flows.runner import FlowExecution
    from memtool.clock import FrozenClock

    class FailingRunner:
        def run(self, machine, execution_input):
            cause = '{"errorType": "KeyError", "errorMessage": "x", "stackTrace": ["  File \\"/srv/app.py\\", line 3"]}'
            return FlowExecution("FAILED", None, "States.TaskFailed", cause, 12.0)

    answer = AskService(FailingRunner(), FrozenClock(), response_rows=200).ask(Identity("t", "u"), AskCommand(question="上个月净收入"))
    assert answer.status == "failed"
    # a stable code and a message; the cause (with its stack trace) stays in the logs
    error = answer.model_dump(mode="json")["error"]
    assert set(error) == {"error", "message", "step"} and error["error"] == "internal_error"
    assert "app.py" not in str(error) and "stackTrace" not in str(error)


def test_a_throttled_start_is_tried_again_and_a_read_timeout_never_is():
    """A throttle starts no flow, so it is retried; the answer comes from the second attempt."""
    from botocore.exceptions import ReadTimeoutError

    first = {"episode_id": "ep_9", "input": {"question": "x"}}
    sfn = boto3.client("stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(sfn)
    expected = {"stateMachineArn": ARN, "name": "ep_9", "input": json.dumps(first, ensure_ascii=False)}
    stubber.add_client_error("start_sync_execution", "ThrottlingException", "Rate exceeded", expected_params=expected)
    stubber.add_response(
        "start_sync_execution",
        {"executionArn": f"{ARN}:ep_9", "startDate": "2026-11-29T09:00:00Z", "stopDate": "2026-11-29T09:00:01Z", "status": "SUCCEEDED", "output": "{}"},
        expected,
    )
    stubber.activate()
    execution = StepFunctionsRunner(sfn, {"AskFlow": ARN}, pauses=(0.0, 0.0)).run("AskFlow", first)
    stubber.assert_no_pending_responses()
    assert execution.status == "SUCCEEDED"

    class TimesOut:
        calls = 0

        def start_sync_execution(self, **_request):
            TimesOut.calls += 1
            raise ReadTimeoutError(endpoint_url="https://sync-states.us-east-1.amazonaws.com/")

    timed_out = StepFunctionsRunner(TimesOut(), {"AskFlow": ARN}, pauses=(0.0, 0.0)).run("AskFlow", first)
    assert timed_out.status == "TIMED_OUT" and TimesOut.calls == 1

    sfn = boto3.client("stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(sfn)
    for _ in range(3):
        stubber.add_client_error("start_sync_execution", "ThrottlingException", "Rate exceeded", expected_params=expected)
    stubber.activate()
    with pytest.raises(ClientError, match="ThrottlingException"):  # three refusals: the caller sees the last
        StepFunctionsRunner(sfn, {"AskFlow": ARN}, pauses=(0.0, 0.0)).run("AskFlow", first)
    stubber.assert_no_pending_responses()
