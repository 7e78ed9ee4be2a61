"""The timeout chain, read from where each number lives and held to one rule: an outer wait always
outlasts what it waits for, so nothing is abandoned (and started again) while it still runs.

    API Gateway 29 s  >  AskFunction 28 s  >=  connect 2 + read 25 + margin 1
    read 25 s  >  AskFlow TimeoutSeconds 23  >  every Task's TimeoutSeconds 20  >=  its Lambda's Timeout 20

Function Timeouts come from template.yaml as CloudFormation deploys it (Globals merged, through the
SAM translator), TimeoutSeconds from statemachines/ask_flow.asl.json, and the Step Functions client's
timeouts from the settings the ask Lambda builds it with (memtool.settings.Settings). moto enforces
none of these; AWS enforces all of them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from memtool.deploy.check import (
    API_GATEWAY_TIMEOUT_SECONDS,
    CLIENT_MARGIN_SECONDS,
    TimeoutChain,
    read_timeout_chain,
    timeout_chain_problems,
)
from memtool.deploy.iam import resolve_template
from memtool.runtime.template import load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
COGNITO = {"CognitoUserPoolArn": "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_EXAMPLE"}
API_FUNCTIONS = {"AskFunction", "FeedbackFunction", "MemoryWriteFunction", "DiagnoseFunction"}
STEP_FUNCTIONS = {"FlowStepsFunction", "AnalyzeFunction", "MlToolsFunction"}


def chain_of(template_path: Path) -> TimeoutChain:
    deployment = resolve_template(COGNITO, template_path=template_path)
    return read_timeout_chain(deployment, load_template(template_path), template_path.parent)


@pytest.fixture(scope="module")
def chain() -> TimeoutChain:
    return chain_of(TEMPLATE_PATH)


def client_timeouts() -> tuple[float, float]:
    from memtool.settings import Settings

    fields = Settings.model_fields
    for name in ("ask_flow_connect_timeout_seconds", "ask_flow_read_timeout_seconds"):
        assert name in fields, f"memtool.settings.Settings has no {name}: the ask Lambda's client timeouts are unknown"
    return float(fields["ask_flow_connect_timeout_seconds"].default), float(fields["ask_flow_read_timeout_seconds"].default)


def test_the_chain_holds(chain: TimeoutChain) -> None:
    connect, read = client_timeouts()
    ask = chain.flow("AskFlow")

    # Every API-facing function answers before API Gateway gives up.
    assert set(chain.api_functions) == API_FUNCTIONS
    assert all(timeout < API_GATEWAY_TIMEOUT_SECONDS for timeout in chain.api_functions.values()), chain.api_functions
    # The ask Lambda waits for its flow: connect + read + a margin.
    assert (ask.caller, chain.connect_seconds, chain.read_seconds) == ("AskFunction", connect, read)
    assert API_GATEWAY_TIMEOUT_SECONDS > ask.caller_timeout >= connect + read + CLIENT_MARGIN_SECONDS
    # The client waits longer than the flow may run, and the flow longer than any step.
    assert ask.timeout is not None and read > ask.timeout
    assert ask.tasks and all(t.timeout is not None and ask.timeout > t.timeout for t in ask.tasks), ask.tasks
    # No step's Lambda outlives its Task (a late result of a timed-out Task is thrown away).
    assert {t.function for t in ask.tasks} == STEP_FUNCTIONS
    assert all(t.function_timeout <= t.timeout for t in ask.tasks), ask.tasks
    assert timeout_chain_problems(chain) == []


def test_the_agreed_numbers(chain: TimeoutChain) -> None:
    ask = chain.flow("AskFlow")

    assert client_timeouts() == (2.0, 25.0)
    assert chain.api_functions == dict.fromkeys(API_FUNCTIONS, 28)
    assert (ask.caller_timeout, ask.timeout) == (28, 23)
    assert {(t.timeout, t.function_timeout) for t in ask.tasks} == {(20, 20)}


def test_the_maintenance_function_never_outlives_its_tasks() -> None:
    everything = {
        **COGNITO,
        "OpenSearchEndpoint": "https://abc123.us-east-1.aoss.amazonaws.com",
        "OpenSearchResourceArn": "arn:aws:aoss:us-east-1:123456789012:collection/abc123",
    }
    deployment = resolve_template(everything, template_path=TEMPLATE_PATH)
    chain = read_timeout_chain(deployment, load_template(TEMPLATE_PATH), ROOT)

    maintenance = chain.flow("MaintenanceFlow")
    assert maintenance.caller is None  # started by its schedule, not by an API function
    assert {t.function for t in maintenance.tasks} == {"MaintenanceFunction"}
    assert {t.function_timeout for t in maintenance.tasks} == {900}
    assert timeout_chain_problems(chain) == []


def _copy_project(tmp_path: Path) -> Path:
    """template.yaml and the state machines, to break one number in."""
    shutil.copy(TEMPLATE_PATH, tmp_path / "template.yaml")
    shutil.copytree(ROOT / "statemachines", tmp_path / "statemachines")
    return tmp_path / "template.yaml"


def _edit_asl(template: Path, edit: object) -> None:
    path = template.parent / "statemachines" / "ask_flow.asl.json"
    definition = json.loads(path.read_text(encoding="utf-8"))
    edit(definition)  # type: ignore[operator]
    path.write_text(json.dumps(definition), encoding="utf-8")


def _first_task(definition: dict) -> dict:
    """Prepare: the flow starts with Pass states (its Defaults), which have no TimeoutSeconds."""
    return next(state for state in definition["States"].values() if state["Type"] == "Task")


@pytest.mark.parametrize(
    ("breakage", "reported"),
    [
        ("ask-lambda-at-29", "AskFunction: Timeout 29 s is not under API Gateway's 29 s"),
        ("ask-lambda-too-short", "AskFunction: Timeout 27 s is under connect 2 + read 25 + margin 1 s = 28 s"),
        ("flow-as-long-as-read", "read timeout 25 s is not longer than AskFlow's TimeoutSeconds 25"),
        ("task-as-long-as-flow", "AskFlow.Prepare: TimeoutSeconds 23 is not under the flow's 23"),
        ("task-without-timeout", "AskFlow.Prepare: no TimeoutSeconds"),
        ("step-lambda-outlives-task", "AskFlow.Prepare: FlowStepsFunction's Timeout 21 s outlives the Task's TimeoutSeconds 20"),
        ("feedback-at-30", "FeedbackFunction: Timeout 30 s is not under API Gateway's 29 s"),
    ],
)
def test_a_broken_copy_breaks_the_chain(tmp_path: Path, breakage: str, reported: str) -> None:
    # Given a copy of the template and the ASL with one number broken
    template = _copy_project(tmp_path)
    text = template.read_text(encoding="utf-8")
    ask_props = (
        "      Handler: app.lambda_handler\n      Layers: [!Ref CoreLayer]\n"
        "      LoggingConfig:\n        LogGroup: !Ref AskFunctionLogGroup\n"
    )
    feedback_props = ask_props.replace("AskFunctionLogGroup", "FeedbackFunctionLogGroup")
    steps_timeout = "      Timeout: 20  # AskFlow's Task TimeoutSeconds: a step's Lambda never outlives its Task\n"
    if breakage == "ask-lambda-at-29":
        assert text.count(ask_props) == 1
        template.write_text(text.replace(ask_props, ask_props + "      Timeout: 29\n"), encoding="utf-8")
    elif breakage == "ask-lambda-too-short":
        template.write_text(text.replace(ask_props, ask_props + "      Timeout: 27\n"), encoding="utf-8")
    elif breakage == "feedback-at-30":
        assert text.count(feedback_props) == 1
        template.write_text(text.replace(feedback_props, feedback_props + "      Timeout: 30\n"), encoding="utf-8")
    elif breakage == "step-lambda-outlives-task":
        assert text.count(steps_timeout) == 1
        template.write_text(text.replace(steps_timeout, "      Timeout: 21\n"), encoding="utf-8")
    elif breakage == "flow-as-long-as-read":
        _edit_asl(template, lambda d: d.update(TimeoutSeconds=25))
    elif breakage == "task-as-long-as-flow":
        _edit_asl(template, lambda d: _first_task(d).update(TimeoutSeconds=23))
    elif breakage == "task-without-timeout":
        _edit_asl(template, lambda d: _first_task(d).pop("TimeoutSeconds"))

    # When the chain is read and checked, Then that break is reported
    problems = timeout_chain_problems(chain_of(template))
    assert any(reported in p for p in problems), problems
