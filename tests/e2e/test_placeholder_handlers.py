"""Handlers run from their events/*.json as AWS (and `sam local invoke -e`) would send them."""

from __future__ import annotations

import json

import pytest

from memtool.runtime.handlers import function_handler
from memtool.runtime.lambda_context import LocalLambdaContext

from tests.support import ROOT, load_event


def test_the_diagnose_event_reaches_the_service_as_its_authorizer_says(aws):
    """events/diagnose.json, as `sam local invoke -e` sends it: the tenant comes from the authorizer
    and the episode is not that caller's, so a 404 naming the field (never someone else's episode)."""
    from memtool.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    reply = function_handler(ROOT, "diagnose")(load_event("diagnose.json"), LocalLambdaContext())
    assert reply["statusCode"] == 404
    assert json.loads(reply["body"])["field"] == "episode_id"


def test_the_feedback_event_reaches_the_flow_as_its_authorizer_says(aws):
    """events/feedback.json, as `sam local invoke -e` sends it: the tenant comes from the authorizer
    (the spoofed header is ignored) and its episode is not that caller's, so a 404 naming the field."""
    from memtool.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    reply = function_handler(ROOT, "feedback")(load_event("feedback.json"), LocalLambdaContext())
    assert reply["statusCode"] == 404
    assert json.loads(reply["body"])["field"] == "episode_id"


def test_api_handlers_still_require_identity(aws):
    from memtool.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    event = load_event("feedback.json")
    del event["requestContext"]["authorizer"]
    reply = function_handler(ROOT, "feedback")(event, LocalLambdaContext())
    assert reply["statusCode"] == 401


def test_the_maintenance_step_event_runs_one_lifecycle_call(aws):
    """events/maintenance_step.json, as MaintenanceFlow's Lifecycle Task sends it: the Map item's state
    back with the step's counts and no cursor (the tenant holds nothing yet: one call covers it)."""
    event = load_event("maintenance_step.json")
    reply = function_handler(ROOT, "maintenance")(event, LocalLambdaContext())
    assert reply["cursor"] is None and reply["tenant"] == "acme-pharma" and reply["step"] == "decay"
    assert reply["reports"]["decay"]["calls"] == 1 and reply["reports"]["decay"]["counts"] == {}


def test_the_flow_steps_event_runs_prepare(aws):
    """events/flow_steps.json, as AskFlow's Prepare Task sends it (``sam local invoke FlowStepsFunction
    -e``): the state after the Defaults state filled in the episode id and start time (Prepare reads
    neither), returned with its route and nothing of the input lost."""
    event = load_event("flow_steps.json")
    state = function_handler(ROOT, "flow_steps")(event, LocalLambdaContext())
    assert state["route"] == "nl2sql_query"
    assert {key: state[key] for key in event["state"]} == event["state"]
    assert state["working"] == [] and state["profile"] == {}  # a new session, no preferences


def test_an_unknown_maintenance_step_fails_naming_the_steps(aws):
    from memtool.flows.maintenance import MaintenanceStepFailed

    with pytest.raises(MaintenanceStepFailed, match="no MaintenanceFlow Task named 'Decay': Plan, Lifecycle, Reconcile, WriteReport"):
        function_handler(ROOT, "maintenance")({"step": "Decay", "input": {}}, LocalLambdaContext())
    with pytest.raises(MaintenanceStepFailed, match="no lifecycle step named 'shrink'; the steps are: decay, consolidate"):
        function_handler(ROOT, "maintenance")({"step": "Lifecycle", "state": {"tenant": "acme", "step": "shrink"}}, LocalLambdaContext())


@pytest.mark.parametrize(("event_file", "field"), [("episode_get.json", "episode_id"), ("lesson_share.json", "id")])
def test_the_episode_and_lesson_events_answer_for_their_caller_only(aws, event_file, field):
    """GET /episodes/{id} and POST /lessons/{id}/share as API Gateway sends them: the ids are not
    this caller's, so a 404 naming the field."""
    from memtool.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    reply = function_handler(ROOT, "diagnose")(load_event(event_file), LocalLambdaContext())
    assert reply["statusCode"] == 404, reply
    assert json.loads(reply["body"])["field"] == field


def test_the_diagnose_queue_event_is_consumed_as_a_batch(aws):
    """events/diagnose_queue.json, as SQS delivers it: its episode does not exist (expired or
    forgotten), so the record is consumed, not retried, and nothing is written."""
    from memtool.memory.records import MemoryKind
    from memtool.memory.store import Partition
    from memtool.runtime import container
    from memtool.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    event = load_event("diagnose_queue.json")
    reply = function_handler(ROOT, "diagnose")(event, LocalLambdaContext())
    assert reply == {"batchItemFailures": []}
    body = json.loads(event["Records"][0]["body"])
    where = Partition(body["tenant"], body["user"])
    assert container.memory_store().heads(where, [MemoryKind.CAUSAL]) == []
