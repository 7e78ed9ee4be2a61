"""The local runtime runs AskFlow's own ASL, with its TimeoutSeconds scaled (every step shares one
process locally; in AWS each has its own Lambda)."""

from __future__ import annotations

import json
from typing import Any

from memtool.runtime.local_flows import render_definition, scale_timeouts
from memtool.runtime.template import load_template
from memtool.settings import Settings
from tests.support import ROOT


def timeouts(node: Any, path: str = "") -> dict[str, int]:
    found: dict[str, int] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "TimeoutSeconds":
                found[path or "flow"] = value
            else:
                found.update(timeouts(value, f"{path}/{key}" if path else key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found.update(timeouts(item, f"{path}[{index}]"))
    return found


def test_every_timeout_of_the_flow_and_its_nested_steps_is_scaled_and_nothing_else_changes() -> None:
    _, definition = render_definition(load_template(ROOT / "template.yaml"), ROOT, "AskFlow")
    original = json.loads(definition)
    scaled = json.loads(scale_timeouts(definition, 10))

    before, after = timeouts(original), timeouts(scaled)
    assert before["flow"] == 23 and after["flow"] == 230
    assert before.keys() == after.keys() and len(before) > 10
    assert any("ItemProcessor" in path for path in before)  # the Map's tool tasks too
    assert all(after[path] == before[path] * 10 for path in before)

    def without_timeouts(node: Any) -> Any:
        if isinstance(node, dict):
            return {key: without_timeouts(value) for key, value in node.items() if key != "TimeoutSeconds"}
        if isinstance(node, list):
            return [without_timeouts(item) for item in node]
        return node

    assert without_timeouts(scaled) == without_timeouts(original)


def test_the_local_runtime_scales_by_ten_unless_told_otherwise() -> None:
    assert Settings().local_flow_timeout_scale == 10
    assert Settings(local_flow_timeout_scale=1).local_flow_timeout_scale == 1


def machine_runner(machine: str, name: str, definition: str) -> Any:
    """A runner whose ``machine`` is ``definition``, created on moto's engine (inside mock_aws)."""
    import boto3

    from memtool.runtime import local_flows

    sfn = boto3.client("stepfunctions", region_name=local_flows.REGION)
    arn = sfn.create_state_machine(name=name, definition=definition, roleArn=f"arn:aws:iam::{local_flows.ACCOUNT}:role/r")[
        "stateMachineArn"
    ]
    local_flows._make_restartable(arn)
    runner = local_flows.LocalFlowRunner(sfn=sfn, template={}, root=ROOT)
    runner._arns[machine] = arn
    return runner


PASS_MACHINE = json.dumps({"StartAt": "Echo", "States": {"Echo": {"Type": "Pass", "End": True}}})


def test_the_runner_is_woken_by_the_engine_as_an_execution_ends_and_never_polls(monkeypatch: Any) -> None:
    from moto import mock_aws

    from memtool.runtime import local_flows

    def no_polling(seconds: float) -> None:
        raise AssertionError(f"the runner polled ({seconds} s) instead of waiting on the engine")

    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        runner = machine_runner("Echo", "echo", PASS_MACHINE)
        monkeypatch.setattr(local_flows.time, "sleep", no_polling)

        first = runner.run("Echo", {"episode_id": "e1", "question": "销售额"})
        second = runner.run("Echo", {"episode_id": "e2", "question": "revenue"})

    assert (first.status, first.output) == ("SUCCEEDED", {"episode_id": "e1", "question": "销售额"})
    assert (second.status, second.output) == ("SUCCEEDED", {"episode_id": "e2", "question": "revenue"})


def test_an_execution_that_never_ends_times_out_and_is_stopped(monkeypatch: Any) -> None:
    from moto import mock_aws

    waiting = json.dumps({"StartAt": "Hold", "States": {"Hold": {"Type": "Wait", "Seconds": 30, "End": True}}})
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        runner = machine_runner("Hold", "hold", waiting)

        result = runner.run("Hold", {"episode_id": "e3"}, timeout_seconds=0.2)

    assert (result.status, result.error) == ("TIMED_OUT", "States.Timeout")


MAP_MACHINE = json.dumps(
    {
        "StartAt": "Each",
        "States": {
            "Each": {
                "Type": "Map",
                "ItemsPath": "$.items",
                "ItemProcessor": {
                    "StartAt": "Both",
                    "States": {
                        "Both": {
                            "Type": "Parallel",
                            "Branches": [
                                {"StartAt": "Keep", "States": {"Keep": {"Type": "Pass", "End": True}}},
                                {"StartAt": "Tag", "States": {"Tag": {"Type": "Pass", "Result": "tag", "End": True}}},
                            ],
                            "End": True,
                        }
                    },
                },
                "ResultPath": "$.kept",
                "End": True,
            }
        },
    }
)


def test_a_map_and_parallel_definition_is_parsed_once_and_concurrent_executions_keep_their_own_items() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from moto import mock_aws
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    from memtool.runtime import local_flows

    local_flows.enable_execution_in_moto()
    cached = AmazonStateLanguageParser.parse.__closure__  # the installed wrapper holds the lru_cache
    assert cached is not None
    lru = next(cell.cell_contents for cell in cached if hasattr(cell.cell_contents, "cache_info"))
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        runner = machine_runner("Each", "each", MAP_MACHINE)
        misses_before, hits_before = lru.cache_info().misses, lru.cache_info().hits

        def run(n: int) -> Any:
            return runner.run("Each", {"episode_id": f"m{n}", "items": [{"n": n, "i": i} for i in range(n % 4 + 1)]})

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(run, range(24)))

    for n, result in enumerate(results):
        assert result.status == "SUCCEEDED"
        assert result.output["kept"] == [[{"n": n, "i": i}, "tag"] for i in range(n % 4 + 1)]
    assert lru.cache_info().misses == misses_before  # parsed once, at creation; every execution shares it
    assert lru.cache_info().hits - hits_before >= 24
