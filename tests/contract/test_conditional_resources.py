"""The stack deploys nothing that cannot work: what exists with the default parameters and with
everything configured, and what each function's environment makes it do in AWS.

The template goes through the SAM translator and is resolved for each parameter set
(``memtool.deploy.iam.resolve_template``: conditions evaluated, resources that are off dropped), so
the resources asserted are the ones CloudFormation would create, including SAM's generated roles,
stream mapping and schedule.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from memtool.deploy.check import rule_problems
from memtool.deploy.iam import Deployment, resolve_template
from memtool.runtime.template import load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
COGNITO = {"CognitoUserPoolArn": "arn:aws:cognito-idp:us-east-1:123456789012:userpool/us-east-1_EXAMPLE"}
ENDPOINT = "https://abc123.us-east-1.aoss.amazonaws.com"
COLLECTION = "arn:aws:aoss:us-east-1:123456789012:collection/abc123"
REDSHIFT = "arn:aws:secretsmanager:us-east-1:123456789012:secret:redshift-AbCdEf"
TENANT_SECRETS = "memtool/prod/tenants/"
EVERYTHING = {
    **COGNITO,
    "OpenSearchEndpoint": ENDPOINT,
    "OpenSearchResourceArn": COLLECTION,
    "RedshiftSecretArn": REDSHIFT,
    "TenantRedshiftSecretPrefix": TENANT_SECRETS,
    "E2BApiKeySecretArn": "arn:aws:secretsmanager:us-east-1:123456789012:secret:e2b-AbCdEf",
    "AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:memtool-alarms",
}
# Only with the vector index: the indexer (its stream mapping, dead-letter queue, log group, role
# and alarms). The maintenance flow runs the memory lifecycle in every deployment; its Reconcile
# step has nothing to do without an index.
VECTOR_INDEX_RESOURCES = {
    "IndexerFunction", "IndexerFunctionRole", "IndexerFunctionMemoryStream", "IndexerFunctionLogGroup",
    "IndexerDeadLetterQueue", "IndexerFunctionErrorsAlarm", "IndexerDeadLetterQueueDepthAlarm",
}  # fmt: skip
MAINTENANCE_RESOURCES = {
    "MaintenanceFlow", "MaintenanceFlowRole", "MaintenanceFlowDaily", "MaintenanceFlowDailyRole",
    "MaintenanceFlowLogGroup", "MaintenanceFlowFailuresAlarm",
    "MaintenanceFunction", "MaintenanceFunctionRole", "MaintenanceFunctionLogGroup", "MaintenanceFunctionErrorsAlarm",
}  # fmt: skip
ALWAYS_FUNCTIONS = {
    "AskFunction", "FeedbackFunction", "MemoryWriteFunction", "DiagnoseFunction", "FlowStepsFunction",
    "AnalyzeFunction", "MlToolsFunction", "MaintenanceFunction",
}  # fmt: skip
# A value that names a file or folder on the machine that runs it.
LOCAL_PATH = re.compile(r"^(/|\./|\.\./|~)|\.(duckdb|sqlite3?|db)$|\.memtool")


@pytest.fixture(scope="module")
def defaults() -> Deployment:
    return resolve_template(COGNITO, template_path=TEMPLATE_PATH)


@pytest.fixture(scope="module")
def everything() -> Deployment:
    return resolve_template(EVERYTHING, template_path=TEMPLATE_PATH)


def off_without_vector_index(deployment: Deployment) -> set[str]:
    """Resources deployed without a vector index that need one (each fails every call without it)."""
    return VECTOR_INDEX_RESOURCES & set(deployment.resources)


def test_without_opensearch_the_index_resources_are_not_deployed_and_maintenance_is(
    defaults: Deployment, everything: Deployment
) -> None:
    assert off_without_vector_index(defaults) == set()
    assert set(defaults.functions()) == ALWAYS_FUNCTIONS
    assert MAINTENANCE_RESOURCES <= set(defaults.resources)
    assert defaults.state_machines() == ["AskFlow", "MaintenanceFlow"]
    # Everything else is the same stack: the vector index adds exactly its resources.
    assert set(everything.resources) - set(defaults.resources) == VECTOR_INDEX_RESOURCES
    assert set(everything.functions()) == ALWAYS_FUNCTIONS | {"IndexerFunction"}
    assert everything.state_machines() == ["AskFlow", "MaintenanceFlow"]
    mapping = everything.resources["IndexerFunctionMemoryStream"]["Properties"]
    assert mapping["EventSourceArn"].startswith("arn:aws:dynamodb:") and "/stream/" in mapping["EventSourceArn"]
    schedule = everything.resources["MaintenanceFlowDaily"]["Properties"]
    assert schedule["ScheduleExpression"] == "cron(0 3 * * ? *)"


def test_the_outputs_of_conditional_resources_share_their_condition() -> None:
    template = load_template(TEMPLATE_PATH)
    conditions = {n: r.get("Condition") for n, r in template["Resources"].items()}

    for name, output in template["Outputs"].items():
        referenced = set(re.findall(r"'(?:Ref|Fn::GetAtt)': \[?'([A-Za-z0-9]+)'", repr(output["Value"])))
        referenced |= set(re.findall(r"\$\{([A-Za-z0-9]+)[}.]", repr(output["Value"])))
        needed = {conditions[r] for r in referenced if conditions.get(r)}
        assert needed <= {output.get("Condition")}, name
    assert "Condition" not in template["Outputs"]["MaintenanceFlowArn"]
    assert template["Outputs"]["IndexerDeadLetterQueueUrl"]["Condition"] == "HasOpenSearch"


def test_a_copy_that_deploys_the_indexer_without_an_index_is_caught(tmp_path: Path) -> None:
    # Given a copy where the indexer lost its condition
    text = TEMPLATE_PATH.read_text(encoding="utf-8")
    marker = "  IndexerFunction:\n    Type: AWS::Serverless::Function\n    Condition: HasOpenSearch\n"
    assert text.count(marker) == 1
    broken = tmp_path / "template.yaml"
    broken.write_text(text.replace(marker, "  IndexerFunction:\n    Type: AWS::Serverless::Function\n"), encoding="utf-8")
    # (its dead-letter queue keeps its condition, so the copy would not even deploy: CloudFormation
    # refuses a reference to a resource that is off)
    text_both = broken.read_text(encoding="utf-8").replace(
        "  IndexerDeadLetterQueue:\n    Type: AWS::SQS::Queue\n    Condition: HasOpenSearch\n",
        "  IndexerDeadLetterQueue:\n    Type: AWS::SQS::Queue\n",
    )
    broken.write_text(text_both, encoding="utf-8")

    # When resolved with the defaults, Then the indexer and its stream mapping are reported
    deployment = resolve_template(COGNITO, template_path=broken)
    assert {"IndexerFunction", "IndexerFunctionMemoryStream", "IndexerDeadLetterQueue"} <= off_without_vector_index(deployment)


@pytest.mark.parametrize(
    ("given", "fails"),
    [
        ({}, False),
        ({"OpenSearchEndpoint": ENDPOINT, "OpenSearchResourceArn": COLLECTION}, False),
        ({"OpenSearchEndpoint": ENDPOINT}, True),
        ({"OpenSearchResourceArn": COLLECTION}, True),
    ],
    ids=["neither", "both", "endpoint-only", "arn-only"],
)
def test_the_opensearch_endpoint_and_arn_come_together(given: dict[str, str], fails: bool) -> None:
    template = load_template(TEMPLATE_PATH)
    values = {n: str(p.get("Default", "")) for n, p in template["Parameters"].items()} | COGNITO | given

    problems = rule_problems(template, values)

    assert bool(problems) is fails, problems
    if fails:
        (problem,) = problems
        assert "OpenSearchEndpointAndResourceArnTogether" in problem and "set together" in problem


@pytest.mark.parametrize(
    ("given", "fails"),
    [
        ({}, False),
        ({"RedshiftSecretArn": REDSHIFT}, False),
        ({"RedshiftSecretArn": REDSHIFT, "TenantRedshiftSecretPrefix": TENANT_SECRETS}, False),
        ({"TenantRedshiftSecretPrefix": TENANT_SECRETS}, True),
    ],
    ids=["neither", "stack-secret-only", "both", "prefix-only"],
)
def test_tenant_redshift_secrets_need_the_stacks_secret(given: dict[str, str], fails: bool) -> None:
    """A tenant without a secret of its own falls back to the stack's: a prefix alone would leave it none."""
    template = load_template(TEMPLATE_PATH)
    values = {n: str(p.get("Default", "")) for n, p in template["Parameters"].items()} | COGNITO | given

    problems = rule_problems(template, values)

    assert bool(problems) is fails, problems
    if fails:
        (problem,) = problems
        assert "TenantRedshiftSecretsNeedTheStackSecret" in problem and "needs RedshiftSecretArn" in problem


def test_the_functions_that_read_redshift_may_read_the_tenants_secrets(defaults: Deployment, everything: Deployment) -> None:
    """Each function whose role reads the stack's Redshift secret also gets the tenants' prefix and
    may read the secrets under it, and no other function does; with the defaults, none."""
    readers = {f for f in everything.functions() if any(s.name == "ReadRedshiftSecret" for s in everything.role_statements(f))}
    tenant_readers = {
        f for f in everything.functions() if any(s.name == "ReadTenantRedshiftSecrets" for s in everything.role_statements(f))
    }
    prefixed = {f for f in everything.functions() if everything.environment(f).get("MEMTOOL_TENANT_REDSHIFT_SECRET_PREFIX")}

    assert readers == tenant_readers == prefixed == {"FeedbackFunction", "MemoryWriteFunction", "DiagnoseFunction", "FlowStepsFunction"}
    for function in readers:
        (statement,) = [s for s in everything.role_statements(function) if s.name == "ReadTenantRedshiftSecrets"]
        assert statement.actions == ("secretsmanager:GetSecretValue",)
        assert statement.resources == (f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{TENANT_SECRETS}*",)
        assert everything.environment(function)["MEMTOOL_TENANT_REDSHIFT_SECRET_PREFIX"] == TENANT_SECRETS
    for function in defaults.functions():
        assert not [s for s in defaults.role_statements(function) if "secretsmanager:GetSecretValue" in s.actions], function
        assert not defaults.environment(function).get("MEMTOOL_TENANT_REDSHIFT_SECRET_PREFIX"), function


def test_the_sam_translator_keeps_the_rules_for_cloudformation() -> None:
    from memtool.deploy.iam import translate

    template = copy.deepcopy(load_template(TEMPLATE_PATH))
    values = {n: str(p.get("Default", "")) for n, p in template["Parameters"].items()} | COGNITO

    translated = translate(template, values)

    assert translated["Rules"] == load_template(TEMPLATE_PATH)["Rules"]


def _settings_from(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch, function: str) -> Any:
    import os

    from memtool.settings import Settings

    for name in list(os.environ):
        if name.startswith(("MEMTOOL_", "AWS_LAMBDA_")):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function)  # as Lambda sets it
    return Settings()


@pytest.mark.parametrize("configuration", ["defaults", "everything"])
def test_no_function_reads_a_local_path_in_aws(
    configuration: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment: Deployment = request.getfixturevalue(configuration)

    for function in deployment.functions():
        environment = deployment.environment(function)
        # No variable names a file, and the settings it makes choose no file-backed adapter
        # (Settings refuses one at cold start in a Lambda; building it here is that cold start).
        assert not [v for v in environment.values() if LOCAL_PATH.search(v)], function
        settings = _settings_from(environment, monkeypatch, function)
        assert settings.local_path_adapters() == [], function
        assert settings.record_store == "dynamodb", function
        if configuration == "defaults":
            assert (settings.warehouse, settings.vector_index) == ("none", "none"), function
        else:
            assert (settings.warehouse, settings.vector_index) == ("redshift", "opensearch"), function
            assert (settings.redshift_secret_arn, settings.opensearch_endpoint) == (REDSHIFT, ENDPOINT), function


def test_the_local_path_check_is_not_vacuous(defaults: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    # The old default: a missing Redshift secret fell back to DuckDB, a file no layer ships.
    environment = {**defaults.environment("FlowStepsFunction"), "MEMTOOL_WAREHOUSE": "duckdb"}

    with pytest.raises(ValueError, match="MEMTOOL_WAREHOUSE=duckdb"):
        _settings_from(environment, monkeypatch, "FlowStepsFunction")
    assert LOCAL_PATH.search(".memtool/warehouse/demo.duckdb") and LOCAL_PATH.search("/tmp/x.sqlite3")


def test_the_api_is_deployed_as_exactly_one_stage(defaults: Deployment) -> None:
    """SAM adds a stage named "Stage" (the routes without the configured throttling, metrics and
    alarms) unless Globals.Api.OpenApiVersion is set; only the Stage parameter's stage exists."""
    stages = [r for r in defaults.resources.values() if r["Type"] == "AWS::ApiGateway::Stage"]
    deployments = [r for r in defaults.resources.values() if r["Type"] == "AWS::ApiGateway::Deployment"]
    assert [stage["Properties"]["StageName"] for stage in stages] == ["dev"]
    assert all("StageName" not in deployment["Properties"] for deployment in deployments)
