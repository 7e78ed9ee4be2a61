"""Handlers a later issue fills must run and answer a clear 501, never crash."""

from __future__ import annotations

import json

import pytest

from memtool.runtime.handlers import function_handler
from memtool.runtime.lambda_context import LocalLambdaContext

from tests.support import ROOT, load_event


@pytest.mark.parametrize(("function", "event_file"), [("feedback", "feedback.json"), ("diagnose", "diagnose.json")])
def test_api_handlers_answer_501_to_an_authenticated_caller(aws, function, event_file):
    from memtool.runtime.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    reply = function_handler(ROOT, function)(load_event(event_file), LocalLambdaContext())
    assert reply["statusCode"] == 501
    assert json.loads(reply["body"])["error"] == "not_implemented"


def test_api_placeholders_still_require_identity(aws):
    from memtool.runtime.settings import use_settings

    use_settings(aws.model_copy(update={"runtime": "aws"}))
    event = load_event("feedback.json")
    del event["requestContext"]["authorizer"]
    reply = function_handler(ROOT, "feedback")(event, LocalLambdaContext())
    assert reply["statusCode"] == 401


@pytest.mark.parametrize(
    ("function", "event"),
    [
        ("maintenance", {"step": "Decay", "input": {}}),
    ],
)
def test_non_api_handlers_answer_501(function, event):
    reply = function_handler(ROOT, function)(event, LocalLambdaContext())
    assert reply["statusCode"] == 501 and reply["error"] == "not_implemented"
