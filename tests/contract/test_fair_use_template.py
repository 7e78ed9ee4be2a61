"""Fair use as the stack deploys it (template.yaml through the SAM translator, resolved per parameter
set): the tenant request budget reaches the functions that spend it, the ask path reserves
concurrency, and the API stage writes access logs, each with the parameter that turns it off."""

from __future__ import annotations

from pathlib import Path

import pytest

from memtool.deploy.iam import Deployment, evaluate, function_policies, resolve_template
from memtool.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
COGNITO = {"CognitoUserPoolArn": "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_EXAMPLE"}
ASK_PATH = ["AskFunction", "FlowStepsFunction", "AnalyzeFunction", "MlToolsFunction"]


@pytest.fixture(scope="module")
def defaults() -> Deployment:
    return resolve_template(COGNITO, template_path=TEMPLATE_PATH)


def stage(deployment: Deployment) -> dict:
    (found,) = [r["Properties"] for r in deployment.resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
    return found


def test_the_budget_reaches_the_functions_that_spend_it_and_their_settings(defaults: Deployment) -> None:
    for function in ("AskFunction", "FeedbackFunction"):
        env = defaults.environment(function)
        settings = Settings(**{k.removeprefix("MEMTOOL_").lower(): v for k, v in env.items() if k.startswith("MEMTOOL_") and v})
        assert (settings.tenant_requests_per_minute, settings.tenant_request_burst) == (60, 10), function
    # Only those: the other functions start no work a tenant could flood.
    others = set(defaults.functions()) - {"AskFunction", "FeedbackFunction"}
    assert not [f for f in others if "MEMTOOL_TENANT_REQUESTS_PER_MINUTE" in defaults.environment(f)]
    # Outside the template the budget is off (the local runtime, the tests).
    assert Settings().tenant_requests_per_minute == 0


def test_the_ask_function_may_update_the_memory_table_and_nothing_else_there(defaults: Deployment) -> None:
    table = f"arn:aws:dynamodb:us-east-1:123456789012:table/{defaults.environment('AskFunction')['MEMTOOL_MEMORY_TABLE']}"
    statements = function_policies(COGNITO, template_path=TEMPLATE_PATH)["AskFunction"]

    assert evaluate(statements, "dynamodb:UpdateItem", table).name == "TenantRequestBudget"  # type: ignore[union-attr]
    for action in ("dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem", "dynamodb:Scan"):
        assert evaluate(statements, action, table) is None, action


def test_the_ask_path_reserves_concurrency_and_zero_reserves_none(defaults: Deployment) -> None:
    assert {f: defaults.resources[f]["Properties"].get("ReservedConcurrentExecutions") for f in ASK_PATH} == dict.fromkeys(ASK_PATH, "50")
    assert "ReservedConcurrentExecutions" not in defaults.resources["MemoryWriteFunction"]["Properties"]

    off = resolve_template({**COGNITO, "AskReservedConcurrency": "0"}, template_path=TEMPLATE_PATH)

    # Not ReservedConcurrentExecutions 0, which would stop the functions: no reservation at all.
    assert [f for f in ASK_PATH if "ReservedConcurrentExecutions" in off.resources[f]["Properties"]] == []


def test_access_logs_are_on_by_default_with_retention_and_the_account_role(defaults: Deployment) -> None:
    setting = stage(defaults)["AccessLogSetting"]
    group = defaults.resources["ApiAccessLogGroup"]["Properties"]
    assert setting["DestinationArn"] == "arn:aws:logs:us-east-1:123456789012:log-group:memtool-ApiAccessLogGroup:*"
    assert group["RetentionInDays"] == "30"
    logged = ("$context.requestId", "$context.resourcePath", "$context.status", "$context.error.responseType")
    logged += ("$context.authorizer.claims.sub",)
    for field in logged:
        assert field in setting["Format"], field
    # API Gateway logs only with the account's CloudWatch Logs role: the stack sets it, and the API waits for it.
    role = defaults.resources["ApiGatewayCloudWatchRole"]
    assert role["DeletionPolicy"] == "Retain"
    assert defaults.resources["ApiGatewayAccount"]["Properties"]["CloudWatchRoleArn"].endswith(":role/memtool-ApiGatewayCloudWatchRole")
    assert defaults.resources["MemtoolApi"]["DependsOn"] == "ApiGatewayLogsRoleSet"


@pytest.mark.parametrize(
    ("overrides", "log_group", "account_role"),
    [
        ({"ApiAccessLogs": "OFF"}, False, False),
        ({"ApiGatewayLogsRole": "existing"}, True, False),
        ({"ApiAccessLogs": "OFF", "ApiLoggingLevel": "ERROR"}, False, True),  # execution logs need the role too
    ],
)
def test_the_logging_parameters_deploy_only_what_they_need(overrides: dict[str, str], log_group: bool, account_role: bool) -> None:
    deployment = resolve_template({**COGNITO, **overrides}, template_path=TEMPLATE_PATH)

    assert ("AccessLogSetting" in stage(deployment)) is log_group
    assert ("ApiAccessLogGroup" in deployment.resources) is log_group
    role = {"ApiGatewayCloudWatchRole", "ApiGatewayAccount"} & set(deployment.resources)
    assert role == ({"ApiGatewayCloudWatchRole", "ApiGatewayAccount"} if account_role else set())
    assert "ApiGatewayLogsRoleSet" in deployment.resources  # the API's DependsOn always resolves
