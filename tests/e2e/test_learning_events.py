"""The learning routes' event files (the ones `sam local invoke -e` takes) through the real handlers,
with identity from the authorizer as in AWS."""

from __future__ import annotations

import json

import pytest

from memtool.runtime.handlers import function_handler
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.settings import use_settings

from tests.support import ROOT, load_event


@pytest.mark.parametrize(
    ("function", "event_file", "status", "check"),
    [
        ("feedback", "fewshot_list.json", 200, lambda body: body["items"] == [] and body["next_cursor"] is None),
        ("feedback", "fewshot_approve.json", 404, lambda body: body["field"] == "id"),
        ("memory_write", "session_end.json", 404, lambda body: body["field"] == "id"),
    ],
)
def test_an_event_file_runs_through_its_handler(aws, function, event_file, status, check):
    use_settings(aws.model_copy(update={"runtime": "aws"}))
    reply = function_handler(ROOT, function)(load_event(event_file), LocalLambdaContext())
    assert reply["statusCode"] == status, reply
    assert check(json.loads(reply["body"]))


@pytest.mark.parametrize("event_file", ["fewshot_list.json", "fewshot_approve.json"])
def test_the_review_events_need_the_admin_group(aws, event_file):
    use_settings(aws.model_copy(update={"runtime": "aws"}))
    event = load_event(event_file)
    event["requestContext"]["authorizer"]["claims"]["cognito:groups"] = "analysts"
    reply = function_handler(ROOT, "feedback")(event, LocalLambdaContext())
    assert reply["statusCode"] == 403 and json.loads(reply["body"])["field"] == "roles"
