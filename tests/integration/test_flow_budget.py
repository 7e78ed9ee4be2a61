"""A step's waits fit into what is left of AskFlow's own time (its TimeoutSeconds, less a reserve
for the steps that record the answer): a slow warehouse or diagnosis then fails in a step, where
the flow records it, instead of running the execution into its timeout, which records nothing."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from memtool.flows.ask import AskCommand
from memtool.flows.ask.state import AskState
from memtool.flows.ask.base import FLOW_RESERVE_SECONDS, MIN_STEP_SECONDS
from memtool.identity import Identity
from memtool.runtime import container
from memtool.settings import use_settings


def state_started(seconds_ago: float, clock: Any) -> AskState:
    first = container.ask_service().first_state(Identity(tenant="acme", user="li"), AskCommand(question="上个月净收入"))
    first["started_at"] = (clock.now() - timedelta(seconds=seconds_ago)).isoformat()
    return AskState.model_validate(first)


def test_a_step_gets_what_is_left_of_the_flows_time_in_aws_terms(aws: Any, clock: Any) -> None:
    use_settings(aws.model_copy(update={"runtime": "aws", "local_flow_timeout_scale": 10.0}))  # AWS: no local scale
    steps = container.ask_steps()
    budget = aws.ask_flow_timeout_seconds - FLOW_RESERVE_SECONDS  # 23 - 4 = 19 s of waiting in all

    assert steps._time_left(state_started(0, clock), 15.0) == 15.0  # a fresh flow: the setting
    assert steps._time_left(state_started(10, clock), 15.0) == budget - 10  # 9 s left
    assert steps._time_left(state_started(30, clock), 15.0) == MIN_STEP_SECONDS  # spent: fail fast


def test_the_local_runtime_scales_the_flows_time_like_its_asl(aws: Any, clock: Any) -> None:
    steps = container.ask_steps()  # the aws fixture runs the local runtime (scale 10)
    assert steps._time_left(state_started(30, clock), 15.0) == 15.0


def test_a_diagnosis_in_the_flow_gets_the_capped_deadline(aws: Any) -> None:
    service = container.diagnosis_service()
    assert service.diagnoser(3.5)._budget.deadline_seconds == 3.5
    assert service.diagnoser(60.0)._budget.deadline_seconds == aws.diagnosis_deadline_seconds  # never more than the setting
    assert service.diagnoser()._budget.deadline_seconds == aws.diagnosis_deadline_seconds


def test_the_setting_is_the_asls_timeout() -> None:
    import json

    from memtool.settings import Settings
    from tests.support import ROOT

    definition = json.loads((ROOT / "statemachines" / "ask_flow.asl.json").read_text(encoding="utf-8"))
    assert Settings().ask_flow_timeout_seconds == definition["TimeoutSeconds"]
