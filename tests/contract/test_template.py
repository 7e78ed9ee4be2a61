"""Contract tests for template.yaml and statemachines/*.asl.json.

They hold the deployable shape to what the code and the local runtime rely on: cfn-lint is clean,
the tables have the key schema the record store expects, every function answers its routes, every
state machine's placeholders are substituted, every ASL parses on the Step Functions engine that
the local runtime uses, and the flows route the way docs/architecture.md (AskFlow) says. Fast, no network.
"""

from __future__ import annotations

import io
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from cfnlint.api import lint_file
from moto import mock_aws
from moto.stepfunctions.parser.asl.component.state.exec.state_task import (
    lambda_eval_utils,
)
from moto.stepfunctions.parser.asl.parse.asl_parser import (
    AmazonStateLanguageParser,
    ASLParserException,
)

from memtool.runtime.local_flows import enable_execution_in_moto
from memtool.runtime.template import load_template as load_cfn_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = ROOT / "template.yaml"
STATEMACHINES_DIR = ROOT / "statemachines"
REGION = "us-east-1"
ACCOUNT = "123456789012"

# cfn-lint findings that are accepted, by rule id, each with the reason. Errors are never accepted.
IGNORED_LINT_WARNINGS: dict[str, str] = {}

LAMBDA_SERVICE_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}

EXPECTED_FUNCTIONS: dict[str, tuple[str, set[tuple[str, str]]]] = {
    "AskFunction": ("functions/ask/", {("post", "/ask")}),
    "FeedbackFunction": (
        "functions/feedback/",
        {("post", "/feedback"), ("get", "/fewshots"), ("post", "/fewshots/{id}/approve"), ("post", "/fewshots/{id}/reject"),
         ("post", "/charts/choice")},
    ),
    "MemoryWriteFunction": (
        "functions/memory_write/",
        {
            ("post", "/memories"),
            ("get", "/memories"),
            ("get", "/memories/search"),
            ("get", "/memories/{id}"),
            ("patch", "/memories/{id}"),
            ("delete", "/memories/{id}"),
            ("delete", "/sessions/{id}"),
            ("post", "/maintenance/run"),
            ("get", "/conflicts"),
            ("post", "/conflicts/{id}/resolve"),
            ("get", "/model"),
            ("put", "/model"),
            ("get", "/model/history"),
            ("get", "/knowledge/stale"),
            ("get", "/memories/{id}/read"),
            ("post", "/sources"),
            ("get", "/sources"),
            ("get", "/sources/{id}"),
            ("get", "/sources/{id}/read"),
            ("delete", "/sources/{id}"),
            ("post", "/proposals"),
            ("get", "/proposals"),
            ("get", "/proposals/{id}"),
            ("post", "/proposals/{id}/accept"),
            ("post", "/proposals/{id}/reject"),
            ("post", "/proposals/{id}/rebase"),
            ("post", "/prefill"),
            ("get", "/prefill/{id}"),
            ("post", "/prefill/{id}/run"),
            ("get", "/suggestions"),
            ("get", "/suggestions/{id}"),
            ("post", "/suggestions/{id}/override"),
            ("post", "/suggestions/{id}/review"),
        },
    ),
    "DiagnoseFunction": (
        "functions/diagnose/",
        {
            ("post", "/diagnose"), ("get", "/episodes/{id}"), ("post", "/lessons/{id}/share"),
            ("get", "/diagnoses"), ("post", "/diagnoses/{id}/confirm"), ("post", "/diagnoses/{id}/reject"),
        },
    ),  # fmt: skip
    "FlowStepsFunction": ("functions/flow_steps/", set()),
    "IndexerFunction": ("functions/indexer/", set()),
    "MaintenanceFunction": ("functions/maintenance/", set()),
}
# The analysis runners: container images built from a Dockerfile (no routes, invoked by AskFlow).
EXPECTED_IMAGE_FUNCTIONS: dict[str, str] = {
    "AnalyzeFunction": "functions/analyze/Dockerfile",
    "MlToolsFunction": "functions/ml_tools/Dockerfile",
}

# The step names each state machine sends in its Lambda payload; the handlers dispatch on them.
ASK_FLOW_STEPS = {
    "Prepare",
    "CacheLookup",
    "Recall",
    "Plan",
    "Guard",
    "Execute",
    "Diagnose",
    "PlanAnalyses",
    "Summarize",
    "VisualizeKpi",
    "Visualize",
    "CacheStore",
    "Record",
    "RecordFailure",
}
# States that run a step under another name: the knowledge route's own Recall and Plan.
ASK_FLOW_ALIASES = {"KnowledgeRecall": "Recall", "KnowledgeAnswer": "Plan"}
# Map iterations call a tool ({tool, arguments, context}) on the analysis functions.
ASK_FLOW_TOOL_TASKS = {"RunCodeInterpreter": "${AnalyzeFunctionArn}", "RunMlTool": "${MlToolsFunctionArn}"}
MAINTENANCE_TASKS = {
    "Plan": "Plan",
    "Decay": "Lifecycle",
    "Consolidate": "Lifecycle",
    "Conflicts": "Lifecycle",
    "Capacity": "Lifecycle",
    "PiiRescan": "Lifecycle",
    "Reconcile": "Reconcile",
    "WriteReport": "WriteReport",
}

PLAIN_TABLE_PROPERTIES = (
    "BillingMode",
    "AttributeDefinitions",
    "KeySchema",
    "GlobalSecondaryIndexes",
    "TimeToLiveSpecification",
    "StreamSpecification",
)


# ---------------------------------------------------------------------------------- loading


def load_template() -> dict[str, Any]:
    return load_cfn_template(TEMPLATE_PATH)


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def state_machines(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: resource["Properties"]
        for name, resource in template["Resources"].items()
        if resource["Type"] == "AWS::Serverless::StateMachine"
    }


def fake_arn_for(placeholder: str) -> str:
    return f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{placeholder}"


def render_definition(asl_text: str, substitutions: dict[str, Any]) -> str:
    """Substitute every ${Name} the way CloudFormation does, with a fake ARN for each value."""
    rendered = asl_text
    for name in substitutions:
        rendered = rendered.replace("${" + name + "}", fake_arn_for(name))
    return rendered


def rendered_definitions(template: dict[str, Any]) -> dict[str, str]:
    return {
        name: render_definition(
            (ROOT / props["DefinitionUri"]).read_text(encoding="utf-8"),
            props["DefinitionSubstitutions"],
        )
        for name, props in state_machines(template).items()
    }


def contains_intrinsic(value: Any) -> bool:
    if isinstance(value, dict):
        return any(
            key == "Ref" or key == "Condition" or key.startswith("Fn::") or contains_intrinsic(v)
            for key, v in value.items()
        )
    if isinstance(value, list):
        return any(contains_intrinsic(item) for item in value)
    return False


# ---------------------------------------------------------------------------------- cfn-lint


def test_cfn_lint_reports_no_errors_and_no_unlisted_warnings() -> None:
    # Given the template, When cfn-lint runs with its default rules
    matches = lint_file(TEMPLATE_PATH)

    # Then nothing but the explicitly accepted warnings remains
    findings = [
        f"{m.rule.id} {m.message} (line {m.linenumber})"
        for m in matches
        if m.rule.id[0] == "E" or (m.rule.id[0] == "W" and m.rule.id not in IGNORED_LINT_WARNINGS)
    ]
    assert findings == []


def test_cfn_lint_catches_a_broken_template(tmp_path: Path) -> None:
    # Given a copy of the template whose memory table carries a property DynamoDB does not have
    broken = TEMPLATE_PATH.read_text(encoding="utf-8").replace(
        "      BillingMode: PAY_PER_REQUEST\n", "      BillingMode: PAY_PER_REQUEST\n      NoSuchProperty: true\n", 1
    )
    assert "NoSuchProperty" in broken
    broken_path = tmp_path / "template.yaml"
    broken_path.write_text(broken, encoding="utf-8")
    for folder in ("functions", "layers", "statemachines"):
        (tmp_path / folder).symlink_to(ROOT / folder)

    # When it is linted, Then the lint run is not vacuous: an error is reported
    errors = [m for m in lint_file(broken_path) if m.rule.id[0] == "E"]
    assert errors, "cfn-lint accepted a table with a property that does not exist"


# ---------------------------------------------------------------------------------- tables


def test_memory_table_has_the_record_store_key_schema(template: dict[str, Any]) -> None:
    table = template["Resources"]["MemoryTable"]
    props = table["Properties"]

    assert table["Type"] == "AWS::DynamoDB::Table"
    assert "TableName" not in props
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert {(a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]} == {
        ("pk", "S"),
        ("sk", "S"),
        ("gsi1pk", "S"),
        ("gsi1sk", "S"),
    }
    assert props["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert props["GlobalSecondaryIndexes"] == [
        {
            "IndexName": "by_kind",
            "KeySchema": [
                {"AttributeName": "gsi1pk", "KeyType": "HASH"},
                {"AttributeName": "gsi1sk", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
    ]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"]["SSEEnabled"] is True


def test_idempotency_table_matches_powertools_defaults(template: dict[str, Any]) -> None:
    table = template["Resources"]["IdempotencyTable"]
    props = table["Properties"]

    assert table["Type"] == "AWS::DynamoDB::Table"
    assert "TableName" not in props
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["AttributeDefinitions"] == [{"AttributeName": "id", "AttributeType": "S"}]
    assert props["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}


@pytest.mark.parametrize("table_name", ["MemoryTable", "IdempotencyTable"])
def test_table_properties_read_by_the_local_runtime_are_plain(
    template: dict[str, Any], table_name: str
) -> None:
    props = template["Resources"][table_name]["Properties"]
    for key in PLAIN_TABLE_PROPERTIES:
        assert not contains_intrinsic(props.get(key)), f"{table_name}.{key} uses an intrinsic"


@mock_aws
def test_tables_can_be_created_from_the_template_properties(template: dict[str, Any]) -> None:
    # Given the table Properties exactly as the local runtime reads them
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    for logical_id in ("MemoryTable", "IdempotencyTable"):
        props = template["Resources"][logical_id]["Properties"]
        create_args = {k: props[k] for k in PLAIN_TABLE_PROPERTIES[:4] if k in props}
        if "StreamSpecification" in props:
            create_args["StreamSpecification"] = {
                "StreamEnabled": True,
                **props["StreamSpecification"],
            }
        name = f"{logical_id}-{uuid.uuid4().hex[:8]}"

        # When DynamoDB creates a table from them
        dynamodb.create_table(TableName=name, **create_args)
        ttl = props["TimeToLiveSpecification"]
        dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)

        # Then the table has the declared keys and TTL
        described = dynamodb.describe_table(TableName=name)["Table"]
        assert described["KeySchema"] == props["KeySchema"]
        ttl_desc = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
        assert ttl_desc["AttributeName"] == ttl["AttributeName"]
        assert ttl_desc["TimeToLiveStatus"] == "ENABLED"
    memory = [t for t in dynamodb.list_tables()["TableNames"] if t.startswith("MemoryTable-")][0]
    indexes = dynamodb.describe_table(TableName=memory)["Table"]["GlobalSecondaryIndexes"]
    assert [i["IndexName"] for i in indexes] == ["by_kind"]


# ---------------------------------------------------------------------------------- functions


def api_routes(function: dict[str, Any]) -> set[tuple[str, str]]:
    events = function["Properties"].get("Events", {})
    return {
        (event["Properties"]["Method"].lower(), event["Properties"]["Path"])
        for event in events.values()
        if event["Type"] == "Api"
    }


def test_every_function_exists_with_exactly_its_routes(template: dict[str, Any]) -> None:
    resources = template["Resources"]
    functions = {
        name: r for name, r in resources.items() if r["Type"] == "AWS::Serverless::Function"
    }

    assert set(functions) == set(EXPECTED_FUNCTIONS) | set(EXPECTED_IMAGE_FUNCTIONS)
    for name, (code_uri, routes) in EXPECTED_FUNCTIONS.items():
        props = functions[name]["Properties"]
        assert props.get("PackageType", "Zip") == "Zip", name
        assert props["CodeUri"] == code_uri, name
        assert props["Handler"] == "app.lambda_handler", name
        assert props["Runtime"] == "python3.12", name
        # The core layer only: with the analysis dependencies a zip function passes 250 MB.
        assert props["Layers"] == [{"Ref": "CoreLayer"}], name
        assert (ROOT / code_uri).is_dir(), f"{code_uri} is missing"
        assert api_routes(functions[name]) == routes, name
        for event in props.get("Events", {}).values():
            if event["Type"] == "Api":
                assert event["Properties"]["RestApiId"] == {"Ref": "MemtoolApi"}, name
                # Every route goes through the Cognito authorizer (no per-route opt-out).
                assert "Auth" not in event["Properties"], name


def test_the_analysis_runners_are_images_that_sam_build_can_build(template: dict[str, Any]) -> None:
    for name, dockerfile in EXPECTED_IMAGE_FUNCTIONS.items():
        function = template["Resources"][name]
        props = function["Properties"]

        assert props["PackageType"] == "Image", name
        # SAM rejects Runtime, Handler and Layers on an image function (the image's CMD is the handler).
        assert not {"Runtime", "Handler", "Layers", "CodeUri"} & set(props), name
        assert props["Timeout"] == 20, name  # AskFlow's Task TimeoutSeconds (test_timeout_chain.py)
        assert not props.get("Events"), name
        metadata = function["Metadata"]
        assert metadata["DockerContext"] == "."
        assert metadata["Dockerfile"] == dockerfile
        assert (ROOT / metadata["DockerContext"] / dockerfile).is_file(), dockerfile
        assert metadata["DockerTag"], name
    assert template["Resources"]["AnalyzeFunction"]["Properties"]["MemorySize"] == 2048
    assert template["Resources"]["MlToolsFunction"]["Properties"]["MemorySize"] == 3008
    analyze_env = template["Resources"]["AnalyzeFunction"]["Properties"]["Environment"]["Variables"]
    assert analyze_env["MEMTOOL_SANDBOX"] == {"Fn::If": ["HasE2BSecret", "e2b", "local"]}
    assert analyze_env["MEMTOOL_E2B_SECRET_ARN"] == {"Ref": "E2BApiKeySecretArn"}


def test_the_analysis_layer_is_gone(template: dict[str, Any]) -> None:
    layers = {n for n, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::LayerVersion"}

    assert layers == {"CoreLayer"}
    assert not (ROOT / "layers" / "analysis").exists()


def test_api_uses_the_cognito_authorizer_by_default(template: dict[str, Any]) -> None:
    api = template["Resources"]["MemtoolApi"]["Properties"]

    assert api["Auth"]["DefaultAuthorizer"] == "CognitoAuthorizer"
    assert api["Auth"]["Authorizers"]["CognitoAuthorizer"]["UserPoolArn"] == {
        "Ref": "CognitoUserPoolArn"
    }
    assert api["StageName"] == {"Ref": "Stage"}
    assert api["TracingEnabled"] is True


def test_globals_give_every_function_the_shared_settings(template: dict[str, Any]) -> None:
    function_globals = template["Globals"]["Function"]
    variables = function_globals["Environment"]["Variables"]

    # Globals reach the image functions too: nothing SAM rejects on PackageType Image.
    assert not {"Runtime", "Handler", "Layers", "CodeUri"} & set(function_globals)
    assert function_globals["Architectures"] == ["arm64"]
    assert function_globals["Tracing"] == "Active"
    assert variables["MEMTOOL_RUNTIME"] == "aws"
    assert variables["MEMTOOL_MEMORY_TABLE"] == {"Ref": "MemoryTable"}
    assert variables["MEMTOOL_IDEMPOTENCY_TABLE"] == {"Ref": "IdempotencyTable"}
    assert variables["MEMTOOL_TENANT_CLAIM"] == {"Ref": "TenantClaim"}
    # No local fallback in AWS: without a secret no warehouse, without an endpoint no index.
    assert variables["MEMTOOL_WAREHOUSE"] == {"Fn::If": ["HasRedshiftSecret", "redshift", "none"]}
    assert variables["MEMTOOL_VECTOR_INDEX"] == {"Fn::If": ["HasOpenSearchEndpoint", "opensearch", "none"]}
    layer = template["Resources"]["CoreLayer"]
    assert layer["Properties"]["CompatibleArchitectures"] == function_globals["Architectures"]
    assert layer["Metadata"]["BuildArchitecture"] == function_globals["Architectures"][0]
    for name in (
        "MEMTOOL_OPENSEARCH_ENDPOINT",
        "MEMTOOL_OPENSEARCH_SERVICE",
        "MEMTOOL_REDSHIFT_SECRET_ARN",
        "MEMTOOL_BEDROCK_PLANNER_MODEL_ID",
        "MEMTOOL_BEDROCK_EMBEDDING_MODEL_ID",
        "POWERTOOLS_SERVICE_NAME",
        "POWERTOOLS_METRICS_NAMESPACE",
        "POWERTOOLS_LOG_LEVEL",
    ):
        assert name in variables, name
    ask_env = template["Resources"]["AskFunction"]["Properties"]["Environment"]["Variables"]
    assert ask_env["MEMTOOL_ASK_STATE_MACHINE_ARN"] == {"Ref": "AskFlow"}


def test_indexer_reads_the_memory_stream_with_partial_failures_and_a_dlq(
    template: dict[str, Any],
) -> None:
    events = template["Resources"]["IndexerFunction"]["Properties"]["Events"]
    (stream,) = [e["Properties"] for e in events.values() if e["Type"] == "DynamoDB"]

    assert stream["Stream"] == {"Fn::GetAtt": ["MemoryTable", "StreamArn"]}
    assert stream["StartingPosition"] == "TRIM_HORIZON"
    assert stream["BatchSize"] == 100
    assert stream["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert stream["BisectBatchOnFunctionError"] is True
    assert isinstance(stream["MaximumRetryAttempts"], int)
    assert stream["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": ["IndexerDeadLetterQueue", "Arn"]
    }


def test_alarms_notify_only_when_a_topic_is_given(template: dict[str, Any]) -> None:
    alarms = {
        name: r["Properties"]
        for name, r in template["Resources"].items()
        if r["Type"] == "AWS::CloudWatch::Alarm"
    }
    alarmed_functions = {
        p["Dimensions"][0]["Value"]["Ref"]
        for p in alarms.values()
        if p.get("Namespace") == "AWS/Lambda" and p.get("MetricName") == "Errors"
    }

    assert alarmed_functions == set(EXPECTED_FUNCTIONS) | set(EXPECTED_IMAGE_FUNCTIONS)
    for name, props in alarms.items():
        assert props["AlarmActions"] == {
            "Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]
        }, name


def test_outputs_name_the_entry_points(template: dict[str, Any]) -> None:
    assert {"ApiUrl", "MemoryTableName", "AskFlowArn", "MaintenanceFlowArn"} <= set(
        template["Outputs"]
    )


# ---------------------------------------------------------------------------------- diagnose queue

DIAGNOSE_QUEUE = "DiagnoseQueue"
DIAGNOSE_DLQ = "DiagnoseDeadLetterQueue"
DIAGNOSE_ENQUEUERS = {"FeedbackFunction", "FlowStepsFunction"}


def sam_transformed() -> dict[str, Any]:
    """The template as CloudFormation receives it: SAM's transform (as cfn-lint runs it) applied,
    so roles, event source mappings and merged environments are the ones AWS would create."""
    from cfnlint.decode import decode
    from cfnlint.template.transforms._sam import Transform

    decoded, errors = decode(str(TEMPLATE_PATH))
    assert not errors and decoded is not None
    transform = Transform(str(TEMPLATE_PATH), decoded, REGION)
    assert transform.transform_template() == []
    return transform.template()


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    return sam_transformed()


def function_timeout(template: dict[str, Any], function: str) -> int:
    props = template["Resources"][function]["Properties"]
    return int(props.get("Timeout", template["Globals"]["Function"]["Timeout"]))


def diagnose_event_source_problems(template: dict[str, Any]) -> list[str]:
    """What keeps DiagnoseFunction from consuming the diagnose queue with partial batch failures."""
    problems = []
    events = template["Resources"]["DiagnoseFunction"]["Properties"].get("Events", {})
    sqs = [e["Properties"] for e in events.values() if e["Type"] == "SQS"]
    if len(sqs) != 1:
        return [f"DiagnoseFunction has {len(sqs)} SQS event sources, not 1"]
    (source,) = sqs
    if source.get("Queue") != {"Fn::GetAtt": [DIAGNOSE_QUEUE, "Arn"]}:
        problems.append(f"the SQS event reads {source.get('Queue')}, not {DIAGNOSE_QUEUE}")
    if source.get("FunctionResponseTypes") != ["ReportBatchItemFailures"]:
        problems.append("the SQS event does not report batch item failures: one failure retries the whole batch")
    queue = template["Resources"][DIAGNOSE_QUEUE]["Properties"]
    timeout = function_timeout(template, "DiagnoseFunction")
    if queue.get("VisibilityTimeout", 30) < 6 * timeout:
        problems.append(f"VisibilityTimeout {queue.get('VisibilityTimeout', 30)} < 6 x the function timeout {timeout}")
    return problems


def diagnose_redrive_problems(template: dict[str, Any]) -> list[str]:
    problems = []
    queue = template["Resources"][DIAGNOSE_QUEUE]["Properties"]
    dlq = template["Resources"][DIAGNOSE_DLQ]
    redrive = queue.get("RedrivePolicy") or {}
    if redrive.get("deadLetterTargetArn") != {"Fn::GetAtt": [DIAGNOSE_DLQ, "Arn"]}:
        problems.append(f"{DIAGNOSE_QUEUE} does not redrive to {DIAGNOSE_DLQ}")
    if redrive.get("maxReceiveCount") != 3:
        problems.append(f"maxReceiveCount is {redrive.get('maxReceiveCount')}, not 3")
    if dlq["Type"] != "AWS::SQS::Queue" or dlq["Properties"].get("MessageRetentionPeriod") != 14 * 24 * 3600:
        problems.append(f"{DIAGNOSE_DLQ} does not keep messages 14 days")
    # A standard queue keeps a message's original enqueue time in its dead-letter queue.
    if queue.get("MessageRetentionPeriod", 345600) >= dlq["Properties"].get("MessageRetentionPeriod", 345600):
        problems.append("the dead-letter queue would expire messages before the queue does")
    for name in (DIAGNOSE_QUEUE, DIAGNOSE_DLQ):
        if template["Resources"][name]["Properties"].get("SqsManagedSseEnabled") is not True:
            problems.append(f"{name} is not encrypted at rest")
    return problems


def _policies(policy: dict[str, Any]) -> list[dict[str, Any]]:
    """A role policy, or both branches of a conditional one (SAM keeps a Policies Fn::If as is)."""
    if "Fn::If" in policy:
        _condition, *branches = policy["Fn::If"]
        return [p for branch in branches if isinstance(branch, dict) for p in _policies(branch)]
    return [policy] if "PolicyDocument" in policy else []


def _statements(role: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for policy in (p for item in role["Properties"].get("Policies", []) for p in _policies(item)):
        statements = policy["PolicyDocument"]["Statement"]
        found.extend(statements if isinstance(statements, list) else [statements])
    return found


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement.get("Action", [])
    return [actions] if isinstance(actions, str) else list(actions)


def diagnose_send_problems(transformed: dict[str, Any]) -> list[str]:
    """Exactly the enqueuing functions may send, only to the diagnose queue, and know its URL."""
    problems = []
    resources = transformed["Resources"]
    functions = {n: r for n, r in resources.items() if r["Type"] == "AWS::Lambda::Function"}
    expected = {
        "Fn::Sub": [
            "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${queueName}",
            {"queueName": {"Fn::GetAtt": [DIAGNOSE_QUEUE, "QueueName"]}},
        ]
    }
    senders: set[str] = set()  # functions that may send to the diagnose queue
    for name, function in functions.items():
        role_ref = function["Properties"]["Role"]
        role = resources[role_ref["Fn::GetAtt"][0]]
        for statement in _statements(role):
            if statement.get("Effect") != "Allow":
                continue
            if not any(a.lower().startswith("sqs:send") or a in ("sqs:*", "*") for a in _actions(statement)):
                continue
            resource = statement.get("Resource")
            if resource == "*" or f"'{DIAGNOSE_QUEUE}'" in repr(resource):
                senders.add(name)
            if name in DIAGNOSE_ENQUEUERS and resource != expected:
                problems.append(f"{name} may send to {resource}, not only {DIAGNOSE_QUEUE}")
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        url = variables.get("MEMTOOL_DIAGNOSE_QUEUE_URL")
        if name in DIAGNOSE_ENQUEUERS and url != {"Ref": DIAGNOSE_QUEUE}:
            problems.append(f"{name} has MEMTOOL_DIAGNOSE_QUEUE_URL {url}, not Ref {DIAGNOSE_QUEUE}")
        if name not in DIAGNOSE_ENQUEUERS and url is not None:
            problems.append(f"{name} has MEMTOOL_DIAGNOSE_QUEUE_URL but no business sending")
    if senders != DIAGNOSE_ENQUEUERS:
        problems.append(f"functions that may send diagnose events: {sorted(senders)}, expected {sorted(DIAGNOSE_ENQUEUERS)}")
    return problems


def test_diagnose_function_consumes_its_queue_with_partial_batch_failures(template: dict[str, Any]) -> None:
    from memtool.runtime.diagnose_drain import DiagnoseDrainer

    assert diagnose_event_source_problems(template) == []
    # The local drain delivers the batches Lambda's poller would, with the same visibility timeout.
    (source,) = [
        e["Properties"]
        for e in template["Resources"]["DiagnoseFunction"]["Properties"]["Events"].values()
        if e["Type"] == "SQS"
    ]
    assert DiagnoseDrainer.batch_size == source["BatchSize"] == 5
    assert DiagnoseDrainer.visibility_seconds == template["Resources"][DIAGNOSE_QUEUE]["Properties"]["VisibilityTimeout"]


def test_diagnose_queue_redrives_to_its_dead_letter_queue(template: dict[str, Any]) -> None:
    from memtool.settings import Settings

    assert diagnose_redrive_problems(template) == []
    # The local queue dead-letters after as many deliveries as the redrive policy.
    redrive = template["Resources"][DIAGNOSE_QUEUE]["Properties"]["RedrivePolicy"]
    assert Settings.model_fields["diagnose_max_attempts"].default == redrive["maxReceiveCount"]
    assert {"DiagnoseQueueUrl", "DiagnoseDeadLetterQueueUrl"} <= set(template["Outputs"])


def test_only_the_enqueuing_functions_may_send_diagnose_events(transformed: dict[str, Any]) -> None:
    assert diagnose_send_problems(transformed) == []
    # SAM gives the consumer the poller's permissions for its SQS event.
    consumer_role = transformed["Resources"]["DiagnoseFunctionRole"]["Properties"]
    assert "arn:aws:iam::aws:policy/service-role/AWSLambdaSQSQueueExecutionRole" in consumer_role["ManagedPolicyArns"]
    (mapping,) = [
        r["Properties"]
        for r in transformed["Resources"].values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping" and r["Properties"]["FunctionName"] == {"Ref": "DiagnoseFunction"}
    ]
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [DIAGNOSE_QUEUE, "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_the_diagnose_queue_checks_catch_a_broken_template(template: dict[str, Any], transformed: dict[str, Any]) -> None:
    import copy

    # Given copies broken one way each, When checked, Then each check reports its break.
    no_partial = copy.deepcopy(template)
    for event in no_partial["Resources"]["DiagnoseFunction"]["Properties"]["Events"].values():
        event["Properties"].pop("FunctionResponseTypes", None)
    assert any("batch item failures" in p for p in diagnose_event_source_problems(no_partial))

    short_visibility = copy.deepcopy(template)
    short_visibility["Resources"][DIAGNOSE_QUEUE]["Properties"]["VisibilityTimeout"] = 60
    assert any("VisibilityTimeout" in p for p in diagnose_event_source_problems(short_visibility))

    no_redrive = copy.deepcopy(template)
    del no_redrive["Resources"][DIAGNOSE_QUEUE]["Properties"]["RedrivePolicy"]
    assert any("redrive" in p for p in diagnose_redrive_problems(no_redrive))

    wrong_queue = copy.deepcopy(transformed)
    for statement in _statements(wrong_queue["Resources"]["FeedbackFunctionRole"]):
        if "sqs:SendMessage*" in _actions(statement):
            statement["Resource"]["Fn::Sub"][1]["queueName"] = {"Fn::GetAtt": [DIAGNOSE_DLQ, "QueueName"]}
    assert any("FeedbackFunction may send" in p for p in diagnose_send_problems(wrong_queue))

    extra_sender = copy.deepcopy(transformed)
    extra_sender["Resources"]["AskFunctionRole"]["Properties"].setdefault("Policies", []).append(
        {"PolicyName": "x", "PolicyDocument": {"Statement": [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"}]}}
    )
    assert any("AskFunction" in p for p in diagnose_send_problems(extra_sender))


def test_the_local_gateway_serves_only_api_events(template: dict[str, Any]) -> None:
    from memtool.runtime.local_api import LocalApiGateway

    gateway = LocalApiGateway(template, ROOT)
    diagnose_routes = {(r.method, r.path) for r in gateway.routes if r.function == "DiagnoseFunction"}
    assert diagnose_routes == {
        ("POST", "/diagnose"), ("GET", "/episodes/{id}"), ("POST", "/lessons/{id}/share"),
        ("GET", "/diagnoses"), ("POST", "/diagnoses/{id}/confirm"), ("POST", "/diagnoses/{id}/reject"),
    }  # fmt: skip
    assert all(r.path.startswith("/") for r in gateway.routes)


# ---------------------------------------------------------------------------------- state machines


def test_each_definition_substitution_matches_a_placeholder(template: dict[str, Any]) -> None:
    machines = state_machines(template)

    assert set(machines) == {"AskFlow", "MaintenanceFlow"}
    for name, props in machines.items():
        text = (ROOT / props["DefinitionUri"]).read_text(encoding="utf-8")
        placeholders = set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", text))
        assert placeholders == set(props["DefinitionSubstitutions"]), name
        assert "${" not in render_definition(text, props["DefinitionSubstitutions"]), name


def test_state_machine_types_and_wiring(template: dict[str, Any]) -> None:
    machines = state_machines(template)
    ask, maintenance = machines["AskFlow"], machines["MaintenanceFlow"]

    assert ask["Type"] == "EXPRESS"
    assert ask["DefinitionSubstitutions"] == {
        "FlowStepsFunctionArn": {"Fn::GetAtt": ["FlowStepsFunction", "Arn"]},
        "AnalyzeFunctionArn": {"Fn::GetAtt": ["AnalyzeFunction", "Arn"]},
        "MlToolsFunctionArn": {"Fn::GetAtt": ["MlToolsFunction", "Arn"]},
    }
    # The flow may invoke exactly the functions it names.
    invoked = {p["LambdaInvokePolicy"]["FunctionName"]["Ref"] for p in ask["Policies"] if "LambdaInvokePolicy" in p}
    assert invoked == {"FlowStepsFunction", "AnalyzeFunction", "MlToolsFunction"}
    assert ask["Logging"]["Level"] == "ERROR"
    assert ask["Tracing"]["Enabled"] is True
    assert maintenance["Type"] == "STANDARD"
    assert maintenance["DefinitionSubstitutions"] == {
        "MaintenanceFunctionArn": {"Fn::GetAtt": ["MaintenanceFunction", "Arn"]}
    }
    assert [e["Type"] for e in maintenance["Events"].values()] == ["Schedule"]


def test_every_definition_file_is_used_by_the_template(template: dict[str, Any]) -> None:
    used = {props["DefinitionUri"] for props in state_machines(template).values()}
    on_disk = {f"statemachines/{p.name}" for p in STATEMACHINES_DIR.glob("*.asl.json")}
    assert on_disk == used


def test_every_definition_parses_on_the_local_step_functions_engine(
    template: dict[str, Any],
) -> None:
    for name, definition in rendered_definitions(template).items():
        program, _tree = AmazonStateLanguageParser.parse(definition)
        assert program is not None, name


@pytest.mark.parametrize(
    "broken",
    [
        '{"StartAt": "A", "States": {"A": {"Type": "Bogus", "End": true}}}',
        '{"StartAt": "A", "States": {"A": {"Type": "Pass", "Nxt": "B"}}}',
        '{"StartAt": "A", "States": {"A": {"Type": "Task", "End": true}}}',
        '{"StartAt": "A", "States": ',
    ],
    ids=["unknown-state-type", "misspelled-field", "task-without-resource", "truncated"],
)
def test_a_broken_definition_does_not_parse(broken: str) -> None:
    # The parser reports grammar errors as ASLParserException and missing required fields as
    # ValueError while building the program.
    with pytest.raises((ASLParserException, ValueError)):
        AmazonStateLanguageParser.parse(broken)


def test_a_broken_copy_of_the_real_definition_does_not_parse(template: dict[str, Any]) -> None:
    definition = json.loads(rendered_definitions(template)["AskFlow"])
    definition["States"]["Prepare"]["Retry"][0]["MaxAttempts"] = "three"
    with pytest.raises(ASLParserException):
        AmazonStateLanguageParser.parse(json.dumps(definition))


def iter_states(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every state, including those nested in Parallel branches and Map iterators."""
    for name, state in states.items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from iter_states(branch["States"])
        processor = state.get("ItemProcessor") or state.get("Iterator")
        if processor:
            yield from iter_states(processor["States"])


def transitions(state: dict[str, Any]) -> list[str]:
    targets = [state[k] for k in ("Next", "Default") if k in state]
    targets += [choice["Next"] for choice in state.get("Choices", [])]
    targets += [catcher["Next"] for catcher in state.get("Catch", [])]
    return targets


def definition_problems(definition: dict[str, Any]) -> list[str]:
    """What the parser does not check: resilience rules, dangling and unreachable states."""
    problems: list[str] = []
    states = definition["States"]
    if definition.get("QueryLanguage", "JSONPath") != "JSONPath":
        problems.append("QueryLanguage must be JSONPath")
    for name, state in iter_states(states):
        kind = state["Type"]
        if kind == "Task":
            retried = {e for retrier in state.get("Retry", []) for e in retrier["ErrorEquals"]}
            if not retried >= LAMBDA_SERVICE_ERRORS:
                problems.append(f"{name}: Retry misses {sorted(LAMBDA_SERVICE_ERRORS - retried)}")
            catch_all = [c for c in state.get("Catch", []) if "States.ALL" in c["ErrorEquals"]]
            if not catch_all:
                problems.append(f"{name}: no Catch on States.ALL")
            for catcher in state.get("Catch", []):
                # The error goes beside the input, never over it: $.error; $.cache_error for a step
                # whose failure is only a miss; $.analysis_error for an analysis step (Summarize
                # reports it); $.crash in a Map iteration (it becomes that analysis's failed result).
                if catcher.get("ResultPath") not in ("$.error", "$.cache_error", "$.analysis_error", "$.crash"):
                    problems.append(f"{name}: Catch must keep the input (ResultPath $.error)")
        if kind == "Choice" and "Default" not in state:
            problems.append(f"{name}: Choice without Default")
        terminal = kind in {"Choice", "Succeed", "Fail"} or state.get("End")
        if not terminal and "Next" not in state:
            problems.append(f"{name}: neither Next nor End")
    for name, state in states.items():
        for target in transitions(state):
            if target not in states:
                problems.append(f"{name}: goes to missing state {target}")
    reachable, frontier = set(), [definition["StartAt"]]
    while frontier:
        current = frontier.pop()
        if current in reachable or current not in states:
            continue
        reachable.add(current)
        frontier.extend(transitions(states[current]))
    problems += [f"{name}: unreachable" for name in states if name not in reachable]
    return problems


def test_every_task_retries_and_catches_and_every_choice_has_a_default(
    template: dict[str, Any],
) -> None:
    for name, definition in rendered_definitions(template).items():
        assert definition_problems(json.loads(definition)) == [], name


def test_the_structure_check_is_not_vacuous() -> None:
    definition = {
        "StartAt": "A",
        "States": {
            "A": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Next": "B"},
            "B": {
                "Type": "Choice",
                "Choices": [{"Variable": "$.x", "IsPresent": True, "Next": "C"}],
            },
            "Orphan": {"Type": "Succeed"},
        },
    }
    problems = definition_problems(definition)
    assert any("A: Retry misses" in p for p in problems)
    assert "A: no Catch on States.ALL" in problems
    assert "B: Choice without Default" in problems
    assert "B: goes to missing state C" in problems
    assert "Orphan: unreachable" in problems


def lambda_tasks(definition: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: state
        for name, state in iter_states(definition["States"])
        if state["Type"] == "Task"
    }


def test_ask_flow_tasks_follow_the_flow_steps_convention() -> None:
    definition = json.loads((STATEMACHINES_DIR / "ask_flow.asl.json").read_text(encoding="utf-8"))
    tasks = lambda_tasks(definition)
    steps = {name: task for name, task in tasks.items() if name not in ASK_FLOW_TOOL_TASKS}

    assert {t["Parameters"]["Payload"]["step"] for t in steps.values()} == ASK_FLOW_STEPS
    for name, task in steps.items():
        assert task["Resource"] == "arn:aws:states:::lambda:invoke", name
        assert task["Parameters"]["FunctionName"] == "${FlowStepsFunctionArn}", name
        assert task["Parameters"]["Payload"] == {"step": ASK_FLOW_ALIASES.get(name, name), "state.$": "$"}, name
        # The step's returned object becomes the whole new state.
        assert task["ResultSelector"] == {"state.$": "$.Payload"}, name
        assert task["OutputPath"] == "$.state", name
        assert task.get("ResultPath", "$") == "$", name
    for name, function in ASK_FLOW_TOOL_TASKS.items():
        task = tasks[name]
        assert task["Parameters"]["FunctionName"] == function, name
        assert task["Parameters"]["Payload"] == {"tool.$": "$.task.tool", "arguments.$": "$.task.arguments", "context.$": "$.context"}
        assert task["OutputPath"] == "$.result" and task["End"] is True
    analyze = definition["States"]["Analyze"]
    assert analyze["Type"] == "Map" and analyze["ItemsPath"] == "$.analysis_tasks" and analyze["MaxConcurrency"] >= 1
    assert analyze["ResultPath"] == "$.analysis_runs" and analyze["Next"] == "Summarize"
    route_choice = definition["States"]["RouteChoice"]
    assert {c["StringEquals"] for c in route_choice["Choices"]} == {
        "nl2sql_query",
        "kpi_lookup",
        "business_knowledge_qa",
        "deep_analysis_workflow",
    }
    assert definition["States"][route_choice["Default"]]["Type"] == "Fail"


def test_maintenance_tasks_follow_the_maintenance_convention() -> None:
    definition = json.loads(
        (STATEMACHINES_DIR / "maintenance.asl.json").read_text(encoding="utf-8")
    )
    tasks = lambda_tasks(definition)

    assert {name: task["Parameters"]["Payload"]["step"] for name, task in tasks.items()} == MAINTENANCE_TASKS
    for name, task in tasks.items():
        assert task["Parameters"]["FunctionName"] == "${MaintenanceFunctionArn}", name
        assert task["Retry"][0]["ErrorEquals"][0] == "Lambda.ServiceException", name
        assert task["Catch"][0]["ErrorEquals"] == ["States.ALL"], name
        if MAINTENANCE_TASKS[name] == "Lifecycle":
            # one bounded call over one tenant, again while it returns a cursor
            assert task["Parameters"]["Payload"] == {"step": "Lifecycle", "state.$": "$"}, name
            more = definition["States"]["Tenants"]["ItemProcessor"]["States"][task["Next"]]
            assert more["Type"] == "Choice" and more["Choices"] == [{"Variable": "$.cursor", "IsNull": False, "Next": name}]


# ---------------------------------------------------------------------------------- execution


class ScriptedLambda:
    """Stands in for the Lambda client of moto's Step Functions engine: each invoke runs a Python
    step function in-process, the way the local runtime dispatches to the real handlers."""

    def __init__(self, steps: dict[str, Callable[[dict[str, Any]], Any]], body_key: str) -> None:
        self.steps = steps
        self.body_key = body_key
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def invoke(self, **parameters: Any) -> dict[str, Any]:
        event = json.loads(parameters["Payload"])
        if "tool" in event and "step" not in event:  # a Map iteration's tool call
            function = str(parameters["FunctionName"]).rsplit(":", 1)[-1].removesuffix("Arn")
            step, body = f"{function}:{event['tool']}", event
            self.calls.append((step, body))
            handler = self.steps.get(step) or self.steps.get(f"tool:{event['tool']}") or (
                lambda e: {"success": True, "data": {"ok": e["tool"]}, "error": None, "tool": e["tool"], "arguments": {}, "duration_ms": 1}
            )
            try:
                return {"StatusCode": 200, "Payload": _stream(handler(body))}
            except StepError as error:
                payload = {"errorType": error.error_type, "errorMessage": str(error)}
                return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(payload)}
        step, body = event["step"], (event[self.body_key] if self.body_key else event)
        self.calls.append((step, body))
        try:
            result = self.steps[step](body)
        except StepError as error:
            payload = {"errorType": error.error_type, "errorMessage": str(error)}
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": _stream(payload)}
        return {"StatusCode": 200, "Payload": _stream(result)}

    @property
    def steps_called(self) -> list[str]:
        return [step for step, _ in self.calls]


class StepError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _stream(payload: Any) -> io.BytesIO:
    return io.BytesIO(json.dumps(payload).encode("utf-8"))


def run_on_local_engine(
    monkeypatch: pytest.MonkeyPatch,
    template: dict[str, Any],
    machine: str,
    scripted: ScriptedLambda,
    execution_input: dict[str, Any],
) -> dict[str, Any]:
    """Create the real state machine on moto's Step Functions engine and run it to the end (set up as
    the local runtime sets it: each definition parsed once, see local_flows._cache_definition_parsing)."""
    enable_execution_in_moto()
    monkeypatch.setattr(lambda_eval_utils, "boto_client_for", lambda **_kwargs: scripted)
    props = state_machines(template)[machine]
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        arn = sfn.create_state_machine(
            name=f"{machine}-{uuid.uuid4().hex[:8]}",
            definition=rendered_definitions(template)[machine],
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/{machine}Role",
            type=props["Type"],
        )["stateMachineArn"]
        execution_arn = sfn.start_execution(  # named, as AWS names every execution (moto leaves it None)
            stateMachineArn=arn, name=str(uuid.uuid4()), input=json.dumps(execution_input)
        )["executionArn"]
        deadline = time.monotonic() + 20
        while True:
            execution = sfn.describe_execution(executionArn=execution_arn)
            if execution["status"] != "RUNNING" or time.monotonic() > deadline:
                return execution
            time.sleep(0.02)


def set_field(**fields: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda state: {**state, **fields}


def happy_flow_steps(route: str, **overrides: Callable[[dict[str, Any]], Any]) -> ScriptedLambda:
    steps: dict[str, Callable[[dict[str, Any]], Any]] = {
        "Prepare": set_field(route=route),
        "CacheLookup": set_field(cache_status="miss"),
        "Recall": set_field(memories=["m-1"]),
        "Plan": set_field(plan_status="ready", sql="SELECT 1"),
        "Guard": set_field(guard_status="passed"),
        "Execute": set_field(rows=[[1]]),
        "Diagnose": set_field(repair_status="not_repaired", repair_attempts=1),
        "PlanAnalyses": set_field(
            analysis_tasks=[
                {"kind": "anomaly", "runner": "sandbox", "tool": "code_interpreter", "arguments": {"analysis": "anomaly"}},
                {"kind": "forecast", "runner": "ml", "tool": "ml_forecast", "arguments": {"horizon": 3}},
            ],
            analysis_count=2,
            caller={"tenant": "acme", "user": "li"},
            episode_id="ep-1",
        ),
        "Summarize": lambda state: {**state, "analysis": {"runs": state.get("analysis_runs"), "error": state.get("analysis_error")}},
        "VisualizeKpi": set_field(chart={"type": "kpi_card"}),
        "Visualize": set_field(chart={"type": "line"}),
        "CacheStore": set_field(cached=True),
        "Record": set_field(recorded=True),
        "RecordFailure": set_field(recorded_failure=True),
    }
    if route == "business_knowledge_qa":  # a definition: no SQL
        steps["Plan"] = set_field(plan_status="ready", sql=None, answer="净收入 = 销售额 − 折扣 − 退款")
    steps.update(overrides)
    return ScriptedLambda(steps, body_key="state")


@pytest.mark.parametrize(
    ("route", "expected_steps"),
    [
        ("nl2sql_query", ["Prepare", "CacheLookup", "Recall", "Plan", "Guard", "Execute", "Visualize", "CacheStore", "Record"]),
        ("kpi_lookup", ["Prepare", "CacheLookup", "Recall", "Plan", "Guard", "Execute", "VisualizeKpi", "CacheStore", "Record"]),
        ("business_knowledge_qa", ["Prepare", "Recall", "Plan", "Record"]),
        (
            "deep_analysis_workflow",
            [
                "Prepare", "Recall", "Plan", "Guard", "Execute", "PlanAnalyses",
                "AnalyzeFunction:code_interpreter", "MlToolsFunction:ml_forecast", "Summarize", "Visualize", "Record",
            ],
        ),
    ],
)
def test_ask_flow_routes_each_question_kind(
    monkeypatch: pytest.MonkeyPatch,
    template: dict[str, Any],
    route: str,
    expected_steps: list[str],
) -> None:
    scripted = happy_flow_steps(route)

    execution = run_on_local_engine(
        monkeypatch, template, "AskFlow", scripted, {"question": "net revenue by channel"}
    )

    assert execution["status"] == "SUCCEEDED"
    assert in_map_order(scripted.steps_called) == expected_steps
    output = json.loads(execution["output"])
    assert output["question"] == "net revenue by channel"
    assert output["route"] == route
    assert output["recorded"] is True


def in_map_order(steps: list[str]) -> list[str]:
    """The steps with each run of Map iterations (tool calls, concurrent) sorted into task order."""
    order = {"AnalyzeFunction:code_interpreter": 0, "MlToolsFunction:ml_forecast": 1}
    out: list[str] = []
    for step in steps:
        if ":" in step and out and ":" in out[-1]:
            out.append(step)
            tail = [s for s in out if ":" in s]
            out = [s for s in out if ":" not in s] + sorted(tail, key=lambda s: order.get(s, 99))
        else:
            out.append(step)
    return out


def test_ask_flow_takes_what_the_input_leaves_out_from_the_execution(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    # The console input has no episode id and no start time: the execution's name and start time
    left_out = happy_flow_steps("nl2sql_query")
    execution = run_on_local_engine(monkeypatch, template, "AskFlow", left_out, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    prepared = left_out.calls[0]
    assert prepared[0] == "Prepare"
    assert prepared[1]["episode_id"] == execution["executionArn"].rsplit(":", 1)[-1]  # the execution's name
    # moto's engine writes the start time without its offset; AWS writes it with a Z
    started = datetime.fromisoformat(prepared[1]["started_at"])
    assert started.tzinfo is None or started.utcoffset() == timedelta(0)
    # DescribeExecution's startDate, as boto3 reads it (to the millisecond)
    assert abs(started.replace(tzinfo=UTC) - execution["startDate"].astimezone(UTC)) < timedelta(milliseconds=1)
    assert prepared[1]["question"] == "q" and set(prepared[1]) == {"question", "episode_id", "started_at"}

    # POST /ask sends both: the input's own win
    given = happy_flow_steps("nl2sql_query")
    sent = {"question": "q", "episode_id": "ep_01JD0000000000000000000000", "started_at": "2026-11-29T09:00:00+00:00"}
    execution = run_on_local_engine(monkeypatch, template, "AskFlow", given, sent)

    assert execution["status"] == "SUCCEEDED"
    assert given.calls[0] == ("Prepare", sent)


def test_ask_flow_runs_each_analysis_on_its_runner_and_keeps_the_results_in_task_order(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = happy_flow_steps("deep_analysis_workflow")

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    runs = json.loads(execution["output"])["analysis"]["runs"]
    assert [r["data"]["ok"] for r in runs] == ["code_interpreter", "ml_forecast"]
    tool_calls = {step: body for step, body in scripted.calls if ":" in step}
    assert tool_calls["MlToolsFunction:ml_forecast"] == {"tool": "ml_forecast", "arguments": {"horizon": 3}, "context": {"tenant": "acme", "user": "li", "episode_id": "ep-1"}}


def test_a_crashed_analysis_function_is_one_failed_result_and_the_others_still_count(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    def crash(event: dict[str, Any]) -> Any:
        raise StepError("Sandbox.Timeout", "took too long")

    scripted = happy_flow_steps("deep_analysis_workflow", **{"tool:code_interpreter": crash})

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    first, second = json.loads(execution["output"])["analysis"]["runs"]
    assert (first["success"], first["tool"], first["error"]["kind"]) == (False, "code_interpreter", "internal")
    assert first["error"]["message"] == "Sandbox.Timeout" and first["error"]["retryable"] is True
    assert second["success"] is True


def test_a_deep_question_with_nothing_to_analyse_goes_straight_to_summarize(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = happy_flow_steps("deep_analysis_workflow", PlanAnalyses=set_field(analysis_tasks=[], analysis_count=0))

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called[-4:] == ["PlanAnalyses", "Summarize", "Visualize", "Record"]


def test_a_failed_plan_analyses_is_reported_by_summarize_never_a_failed_ask(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    def broken(state: dict[str, Any]) -> Any:
        raise StepError("ValueError", "no series")

    scripted = happy_flow_steps("deep_analysis_workflow", PlanAnalyses=broken)

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called[-4:] == ["PlanAnalyses", "Summarize", "Visualize", "Record"]
    output = json.loads(execution["output"])
    assert output["analysis"]["error"]["Error"] == "ValueError" and "error" not in output


def test_a_knowledge_reply_that_planned_sql_goes_through_the_guard(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    answered = happy_flow_steps("business_knowledge_qa", Plan=set_field(plan_status="ready", sql=None))
    run_on_local_engine(monkeypatch, template, "AskFlow", answered, {"question": "q"})
    assert answered.steps_called == ["Prepare", "Recall", "Plan", "Record"]

    replied = happy_flow_steps("business_knowledge_qa", Plan=set_field(plan_status="ready", sql="SELECT 1"))
    run_on_local_engine(monkeypatch, template, "AskFlow", replied, {"question": "q"})
    assert replied.steps_called == ["Prepare", "Recall", "Plan", "Guard", "Execute", "Visualize", "Record"]


def test_ask_flow_records_a_clarification_without_running_sql(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = happy_flow_steps(
        "nl2sql_query", Plan=set_field(plan_status="needs_clarification", clarification="GMV?")
    )

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called == ["Prepare", "CacheLookup", "Recall", "Plan", "Record"]
    assert json.loads(execution["output"])["clarification"] == "GMV?"


def test_ask_flow_runs_a_cache_hit_again_without_recall_or_planning(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = happy_flow_steps("kpi_lookup", CacheLookup=set_field(cache_status="hit", sql="SELECT 1"))

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called == ["Prepare", "CacheLookup", "Guard", "Execute", "VisualizeKpi", "CacheStore", "Record"]


def test_a_failed_cache_step_is_a_miss_or_a_skipped_store_never_a_failed_ask(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    def broken(state: dict[str, Any]) -> dict[str, Any]:
        raise StepError("KeyError", "cache")

    scripted = happy_flow_steps("nl2sql_query", CacheLookup=broken, CacheStore=broken)

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called == ["Prepare", "CacheLookup", "Recall", "Plan", "Guard", "Execute", "Visualize", "CacheStore", "Record"]
    output = json.loads(execution["output"])
    assert output["cache_error"]["Error"] == "KeyError" and "error" not in output


def test_ask_flow_never_executes_blocked_sql(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = happy_flow_steps("nl2sql_query", Guard=set_field(guard_status="blocked"))

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called == ["Prepare", "CacheLookup", "Recall", "Plan", "Guard", "Record"]


def test_ask_flow_diagnoses_a_database_error_and_retries_once_through_guard(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    attempts: list[dict[str, Any]] = []

    def execute(state: dict[str, Any]) -> dict[str, Any]:
        attempts.append(state)
        if len(attempts) == 1:
            raise StepError("WarehouseError", 'column "amt" does not exist')
        return {**state, "rows": [[42]]}

    def diagnose(state: dict[str, Any]) -> dict[str, Any]:
        assert state["error"]["Error"] == "WarehouseError"
        assert state["sql"] == "SELECT 1"  # the input survived the failure
        return {
            **{k: v for k, v in state.items() if k != "error"},
            "sql": "SELECT 2",
            "repair_status": "repaired",
            "repair_attempts": state.get("repair_attempts", 0) + 1,
        }

    scripted = happy_flow_steps("nl2sql_query", Execute=execute, Diagnose=diagnose)

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called == [
        "Prepare", "CacheLookup", "Recall", "Plan", "Guard", "Execute",
        "Diagnose", "Guard", "Execute", "Visualize", "CacheStore", "Record",
    ]  # fmt: skip
    assert attempts[1]["sql"] == "SELECT 2"
    assert json.loads(execution["output"])["rows"] == [[42]]


def test_ask_flow_stops_repairing_after_one_attempt(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    def always_fails(state: dict[str, Any]) -> dict[str, Any]:
        raise StepError("WarehouseError", "syntax error")

    def diagnose(state: dict[str, Any]) -> dict[str, Any]:
        return {
            **state,
            "repair_status": "repaired",
            "repair_attempts": state.get("repair_attempts", 0) + 1,
        }

    scripted = happy_flow_steps("nl2sql_query", Execute=always_fails, Diagnose=diagnose)

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "SUCCEEDED"
    assert scripted.steps_called == [
        "Prepare", "CacheLookup", "Recall", "Plan", "Guard", "Execute", "Diagnose",
        "Guard", "Execute", "Diagnose", "Record",
    ]  # fmt: skip
    assert json.loads(execution["output"])["error"]["Error"] == "WarehouseError"


def test_ask_flow_records_a_step_failure_and_fails_with_the_step_error(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    def plan(state: dict[str, Any]) -> dict[str, Any]:
        raise StepError("PlannerUnavailable", "bedrock throttled")

    scripted = happy_flow_steps("kpi_lookup", Plan=plan)

    execution = run_on_local_engine(
        monkeypatch, template, "AskFlow", scripted, {"question": "q", "episode_id": "e-1"}
    )

    assert execution["status"] == "FAILED"
    assert scripted.steps_called == ["Prepare", "CacheLookup", "Recall", "Plan", "RecordFailure"]
    recorded = scripted.calls[-1][1]
    assert recorded["failed_step"] == "Plan"
    assert recorded["error"]["Error"] == "PlannerUnavailable"
    assert recorded["episode_id"] == "e-1"  # the state survived
    assert execution["error"] == "PlannerUnavailable"
    assert "bedrock throttled" in execution["cause"]


def test_ask_flow_fails_on_an_unknown_route(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = happy_flow_steps("weather_forecast")

    execution = run_on_local_engine(monkeypatch, template, "AskFlow", scripted, {"question": "q"})

    assert execution["status"] == "FAILED"
    assert execution["error"] == "UnknownRoute"
    assert scripted.steps_called == ["Prepare"]


def maintenance_steps(**overrides: Callable[[dict[str, Any]], Any]) -> ScriptedLambda:
    """MaintenanceFlow's Tasks: two tenants; decay over tenant "a" needs two calls (a cursor)."""

    def lifecycle(event: dict[str, Any]) -> dict[str, Any]:
        state = event["state"]
        step, tenant = state["step"], state["tenant"]
        more = step == "decay" and tenant == "a" and state["cursor"] is None
        reports = {**state["reports"], step: {"counts": {"calls": state["reports"].get(step, {}).get("counts", {}).get("calls", 0) + 1}}}
        return {**state, "reports": reports, "cursor": "u1" if more else None}

    steps: dict[str, Callable[[dict[str, Any]], Any]] = {
        "Plan": lambda event: {"tenants": ["a", "b"], "steps": ["decay", "capacity"], "started_at": "2026-12-03T03:00:00+00:00"},
        "Lifecycle": lifecycle,
        "Reconcile": lambda event: {"indexed": 2},
        "WriteReport": lambda event: {"steps": {"reconcile": event["run"]["reconcile"]}, "tenants": len(event["run"]["results"])},
    }
    steps.update(overrides)
    return ScriptedLambda(steps, body_key="")


def test_maintenance_runs_each_tenant_through_the_steps_and_keeps_the_report(
    monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]
) -> None:
    scripted = maintenance_steps()

    execution = run_on_local_engine(monkeypatch, template, "MaintenanceFlow", scripted, {"trigger": "schedule", "tenant": None})

    assert execution["status"] == "SUCCEEDED", execution
    assert scripted.calls[0][1] == {"step": "Plan", "input": {"trigger": "schedule", "tenant": None}}
    lifecycle = [(body["state"]["tenant"], body["state"]["step"], body["state"]["cursor"] or "") for step, body in scripted.calls if step == "Lifecycle"]
    # every step over each tenant, the decay of tenant "a" called again with the cursor it returned
    assert sorted(lifecycle) == sorted(
        [("a", "decay", ""), ("a", "decay", "u1")]
        + [(t, s, "") for t in "ab" for s in ("consolidate", "conflicts", "capacity", "pii_rescan")]
        + [("b", "decay", "")]
    )
    assert scripted.steps_called[-2:] == ["Reconcile", "WriteReport"]
    output = json.loads(execution["output"])
    assert output["maintenance"]["report"] == {"steps": {"reconcile": {"indexed": 2}}, "tenants": 2}
    a = next(r for r in output["results"] if r["tenant"] == "a")
    assert a["reports"]["decay"]["counts"]["calls"] == 2


def test_maintenance_fails_with_the_error_of_a_failed_step(monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]) -> None:
    def reconcile(_event: dict[str, Any]) -> dict[str, Any]:
        raise StepError("MaintenanceStepFailed", "ReconcileIndex could not index 1 of 3 memories")

    scripted = maintenance_steps(Reconcile=reconcile)

    execution = run_on_local_engine(monkeypatch, template, "MaintenanceFlow", scripted, {"trigger": "manual"})

    assert execution["status"] == "FAILED"
    assert scripted.steps_called[-1] == "Reconcile" and "WriteReport" not in scripted.steps_called
    assert execution["error"] == "MaintenanceStepFailed"
    assert "could not index 1 of 3" in execution["cause"]


def test_a_step_that_fails_over_one_tenant_fails_the_run(monkeypatch: pytest.MonkeyPatch, template: dict[str, Any]) -> None:
    def lifecycle(event: dict[str, Any]) -> dict[str, Any]:
        if event["state"]["step"] == "capacity":
            raise StepError("VersionConflict", "memory kept changing")
        return {**event["state"], "cursor": None}

    scripted = maintenance_steps(Lifecycle=lifecycle)

    execution = run_on_local_engine(monkeypatch, template, "MaintenanceFlow", scripted, {})

    assert execution["status"] == "FAILED"
    assert execution["error"] == "VersionConflict"
    assert "Reconcile" not in scripted.steps_called


# ---------------------------------------------------------------------------------- analysis runners


def e2b_secret_readers(transformed: dict[str, Any]) -> set[str]:
    """Functions whose role may read the E2B API key secret (in either branch of a condition)."""
    resources = transformed["Resources"]
    readers = set()
    for name, function in resources.items():
        if function["Type"] != "AWS::Lambda::Function":
            continue
        role = resources[function["Properties"]["Role"]["Fn::GetAtt"][0]]
        for statement in _statements(role):
            reads = any(a in ("secretsmanager:GetSecretValue", "secretsmanager:*", "*") for a in _actions(statement))
            if statement.get("Effect") == "Allow" and reads and "E2BApiKeySecretArn" in repr(statement.get("Resource")):
                readers.add(name)
    return readers


def test_only_the_code_interpreter_may_read_the_e2b_secret(transformed: dict[str, Any]) -> None:
    import copy

    assert e2b_secret_readers(transformed) == {"AnalyzeFunction"}
    # The ML tools make no AWS call: logs and X-Ray (SAM's managed policies), nothing inline.
    ml_role = transformed["Resources"]["MlToolsFunctionRole"]["Properties"]
    assert not ml_role.get("Policies")
    assert sorted(ml_role["ManagedPolicyArns"]) == sorted(
        ["arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole", "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess"]
    )

    # The check is not vacuous: a second reader is reported.
    leaky = copy.deepcopy(transformed)
    leaky["Resources"]["FlowStepsFunctionRole"]["Properties"]["Policies"].append(
        {
            "PolicyName": "x",
            "PolicyDocument": {
                "Statement": [{"Effect": "Allow", "Action": "secretsmanager:GetSecretValue", "Resource": {"Ref": "E2BApiKeySecretArn"}}]
            },
        }
    )
    assert e2b_secret_readers(leaky) == {"AnalyzeFunction", "FlowStepsFunction"}
