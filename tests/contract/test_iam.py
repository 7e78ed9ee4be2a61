"""Every function's IAM permissions, proven by running its code as its role.

The statements come from template.yaml through the SAM translator (``memtool.deploy.iam``), for two
parameter sets: the defaults (no OpenSearch, no Redshift, no E2B, a plain Bedrock model id) and
"everything configured" (an OpenSearch Serverless collection, a Redshift secret with tenants'
secrets under a name prefix beside it, an E2B secret, the planner through the ``us.``
cross-region inference profile).

For each set, one moto session holds the template's tables and queue and, in moto's IAM, a role
per function whose inline policy is that function's derived statements. Each handler
(functions/<name>/app.py ``lambda_handler``) then runs its real code paths with the events in
events/*.json (ids filled in from what the earlier paths stored), signed with credentials from
``sts:AssumeRole`` on its role, with moto's IAM enforcement on
(``moto.core.authorization.enable_iam_authentication``): moto checks each SigV4 signature and
finds the assumed role and its policies. moto's own permission check compares the action against
``Resource: "*"`` only and does not know that a DynamoDB transaction is authorized item by item,
so the decision is made by ``memtool.deploy.iam.evaluate`` on the IAM requests AWS documents for
each call (tests/contract/iam_support.py): action and resource ARN, for every service.

Services moto does not serve or authorize are answered by the same hook, after the same
decision: Bedrock runtime (InvokeModel embeddings and Converse, scripted answers), Step Functions
StartSyncExecution (answered with the final state of the flow this module ran through the flow
steps), and OpenSearch (the signed HTTP request: ``aoss:APIAccessAll`` on the collection, or
``es:ESHttp<Method>`` on the domain path; a recording cluster answers). AskFlow's Lambda tasks
are driven here in the order the ASL gives (a small stand-in for Step Functions: Choice rules and
Catch; tests/contract/test_template.py and the e2e tests run the ASL itself), and each task's
``lambda:InvokeFunction`` is authorized against the state machine's role.

Then:
- every call is allowed (the template as it is works);
- for each function and each statement of its policy, the same calls evaluated without that one
  statement include a denied one: the run is identical up to the first call a policy denies, so
  that call is where the code would fail in AWS (the test names the path and the call);
  ``test_a_removed_statement_fails_the_handler`` re-runs real paths with a statement removed;
- a statement (or an action in it) that no path uses is reported, except the documented
  ``ALLOWED_UNUSED`` entries.
Managed policies SAM attaches (logs, X-Ray, the event source pollers) are used by the Lambda and
Step Functions services, not by the code: they are listed and left out of the proof.
"""

from __future__ import annotations

import copy
import json
import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from memtool.clock import FrozenClock
from memtool.deploy.iam import Deployment, Statement, evaluate, resolve_template
from memtool.runtime import container
from memtool.settings import Settings, use_settings
from tests.contract.iam_support import ACCOUNT, REGION, CallLog, FakeCluster, IamRequest, LoggedCall

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
TODAY = date(2026, 11, 29)
POOL = f"arn:aws:cognito-idp:{REGION}:{ACCOUNT}:userpool/{REGION}_EXAMPLE"
REDSHIFT_SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:memtool/redshift-AbCdEf"
E2B_SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:memtool/e2b-AbCdEf"
TENANT_SECRETS = "memtool/tenants/"  # TenantRedshiftSecretPrefix
OWN_SECRET_TENANT = "initech"  # has a Redshift secret of its own; the events' tenant (acme-pharma) has none
COLLECTION = "memtoolproof"
DOMAIN = "memtool"

PARAMETER_SETS: dict[str, dict[str, str]] = {
    "defaults": {"CognitoUserPoolArn": POOL},
    "configured": {
        "CognitoUserPoolArn": POOL,
        "OpenSearchEndpoint": f"https://{COLLECTION}.{REGION}.aoss.amazonaws.com",
        "OpenSearchService": "aoss",
        "OpenSearchResourceArn": f"arn:aws:aoss:{REGION}:{ACCOUNT}:collection/{COLLECTION}",
        "RedshiftSecretArn": REDSHIFT_SECRET,
        "TenantRedshiftSecretPrefix": TENANT_SECRETS,
        # the stack's shared Redshift: the events' tenant is granted the demo's tables before it stores a model
        "TenantTables": '{"acme-pharma": ["fact_*", "dim_*"]}',
        "E2BApiKeySecretArn": E2B_SECRET,
        "BedrockPlannerModelId": "us.anthropic.claude-3-5-sonnet-20240620-v1:0",
    },
    # A managed OpenSearch domain instead of a Serverless collection (es:ESHttp* on the domain's
    # paths); only the paths that reach the index run in this set.
    "domain": {
        "CognitoUserPoolArn": POOL,
        "OpenSearchEndpoint": f"https://search-{DOMAIN}-abc123def456.{REGION}.es.amazonaws.com",
        "OpenSearchService": "es",
        "OpenSearchResourceArn": f"arn:aws:es:{REGION}:{ACCOUNT}:domain/{DOMAIN}",
    },
}

# Statements (by name) that no offline path can use, per parameter set, each with the reason.
# Keys: (parameter set, role owner, statement name).
LOG_DELIVERY = "Step Functions itself delivers the execution logs (vended logs); no code path calls CloudWatch Logs"
ALLOWED_UNUSED: dict[tuple[str, str], str] = {(machine, "DeliverExecutionLogs"): LOG_DELIVERY for machine in ("AskFlow", "MaintenanceFlow")}
# Actions of a used statement that no offline path uses, with the reason: (role owner, statement, action).
POWERTOOLS_GET = (
    "Powertools reads an idempotency record with GetItem when a conflicting PutItem returns no old item "
    "(DynamoDB returns it with ReturnValuesOnConditionCheckFailure, so offline it never does); its documented permissions include it"
)
ALLOWED_UNUSED_ACTIONS: dict[tuple[str, str, str], str] = {
    **{
        (owner, "IdempotencyRecords", "dynamodb:GetItem"): POWERTOOLS_GET
        for owner in ("AskFunction", "FeedbackFunction", "MemoryWriteFunction", "DiagnoseFunction")
    },
    # Store paths these runs do not reach (each named where the code takes it):
    ("FlowStepsFunction", "ReadWriteMemories", "dynamodb:DeleteItem"): (
        "a cached SQL that fails when it runs again is forgotten (AskSteps -> SqlCache.forget -> store.forget); "
        "it needs a cache hit whose query then fails"
    ),
    ("DiagnoseFunction", "ReadWriteMemories", "dynamodb:UpdateItem"): (
        "a newer verified lesson archives the older lesson of the same target (DiagnosisService, store.update); "
        "it needs two verified diagnoses of one target"
    ),
    **{
        (owner, statement, "es:ESHttpPut"): (
            "whichever function first finds the index or the hybrid search pipeline missing creates it (OpenSearchIndex.ensure, "
            "a PUT); in these runs MemoryWriteFunction's search comes first"
        )
        for owner, statement in (
            ("FlowStepsFunction", "SearchDomain"),
            ("IndexerFunction", "WriteDomain"),
            ("MaintenanceFunction", "WriteDomain"),
        )
    },
    ("DiagnoseFunction", "ReadWriteMemories", "dynamodb:DeleteItem"): (
        "writing a lesson drops a slot an interrupted forget left behind (DynamoMemoryStore._supersede_slot)"
    ),
}


@dataclass
class Deployed:
    name: str
    deployment: Deployment
    policies: dict[str, list[Statement]]  # every role owner (functions and state machines)


def _deployed(name: str) -> Deployed:
    deployment = resolve_template(PARAMETER_SETS[name])
    owners = deployment.functions() + deployment.state_machines()
    return Deployed(name, deployment, {owner: deployment.role_statements(owner) for owner in owners})


DEPLOYED = {name: _deployed(name) for name in PARAMETER_SETS}


def proven(statements: list[Statement]) -> list[Statement]:
    """The statements the code's calls are proven against (managed policies serve the services)."""
    return [s for s in statements if s.managed is None and not _event_destination(s)]


def _event_destination(statement: Statement) -> bool:
    """SAM's policy for an event source mapping's on-failure destination: Lambda's poller sends there."""
    return statement.policy.endswith("SQSPolicy") and statement.policy != f"{statement.role}RolePolicy"


STATEMENT_CASES = [
    pytest.param(owner, name, id=f"{owner}-{name}")
    for owner, name in sorted(
        {
            (owner, statement.name)
            for deployed in DEPLOYED.values()
            for owner, statements in deployed.policies.items()
            for statement in proven(statements)
        }
    )
]
ROLE_CASES = [
    pytest.param(set_name, owner, id=f"{set_name}-{owner}") for set_name, deployed in DEPLOYED.items() for owner in deployed.policies
]
OWNERS = sorted({owner for deployed in DEPLOYED.values() for owner in deployed.policies})


# ---------------------------------------------------------------------------------- events


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


PLACEHOLDER_IDS = ("mem_01JD0000000000000000000000", "ep_01JD0000000000000000000000")


def api_event(
    name: str,
    *,
    ids: dict[str, str] | None = None,
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An events/*.json API event with its placeholder ids replaced (and body/headers/query if given)."""
    text = (EVENTS / name).read_text(encoding="utf-8")
    for placeholder, value in (ids or {}).items():
        text = text.replace(placeholder, value)
    event = json.loads(text)
    if body is not None:
        event["body"] = json.dumps(body, ensure_ascii=False)
    for key, value in (headers or {}).items():
        event.setdefault("headers", {})[key] = value
        event.setdefault("multiValueHeaders", {})[key] = [value]
    if query is not None:
        event["queryStringParameters"] = query
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()}
    return event


# ---------------------------------------------------------------------------------- the proof run


@dataclass
class Proof:
    deployed: Deployed
    log: CallLog
    outcomes: list[tuple[str, str, Any]] = field(default_factory=list)  # (role, path, status or result)
    bodies: dict[str, Any] = field(default_factory=dict)  # path -> the body of an error answer

    def calls(self, owner: str) -> list[LoggedCall]:
        return [c for c in self.log.calls if c.role == owner]

    def status(self, path: str) -> Any:
        return next(result for _, p, result in self.outcomes if p == path)


class Harness:
    """One moto session with the stack's tables, queue, secrets and roles; runs handlers as roles."""

    def __init__(self, deployed: Deployed, home: Path, monkeypatch: pytest.MonkeyPatch, warehouse: Path) -> None:
        self.warehouse = warehouse
        self.deployed = deployed
        self.deployment = deployed.deployment
        self.home = home
        self.monkeypatch = monkeypatch
        self.credentials: dict[str, dict[str, str]] = {}
        self.log = CallLog(policies=deployed.policies)
        self.proof = Proof(deployed, self.log)

    # -- setup (as the test's own account, before enforcement)

    def admin(self, service: str) -> Any:
        import boto3

        return boto3.client(service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")

    def build(self, policies: dict[str, list[Statement]] | None = None) -> None:
        from memtool.runtime.tables import create_tables
        from memtool.runtime.template import load_template

        env = self.deployment.environment("FeedbackFunction")
        names = Settings(memory_table=env["MEMTOOL_MEMORY_TABLE"], idempotency_table=env["MEMTOOL_IDEMPOTENCY_TABLE"])
        create_tables(self.admin("dynamodb"), names, load_template(ROOT / "template.yaml"))
        self.admin("sqs").create_queue(QueueName=self.deployment.physical_name("DiagnoseQueue"))
        self.admin("s3").create_bucket(Bucket=self.deployment.physical_name("SourcesBucket").lower())
        params = self.deployment.parameters
        secrets = self.admin("secretsmanager")
        for arn, value in (
            (params.get("RedshiftSecretArn"), {"host": "127.0.0.1", "port": 9, "dbname": "dev", "username": "reader", "password": "x"}),
            (params.get("E2BApiKeySecretArn"), {"api_key": "e2b_offline"}),
        ):
            if arn:
                name = arn.split(":secret:", 1)[1].rsplit("-", 1)[0]
                secrets.create_secret(Name=name, SecretString=json.dumps(value))
                _pin_secret_arn(name, arn)
        if params.get("TenantRedshiftSecretPrefix"):
            own = {"host": "127.0.0.2", "port": 9, "dbname": OWN_SECRET_TENANT, "username": "reader", "password": "y"}
            secrets.create_secret(Name=params["TenantRedshiftSecretPrefix"] + OWN_SECRET_TENANT, SecretString=json.dumps(own))
        self.grant(policies or self.deployed.policies)

    def grant(self, policies: dict[str, list[Statement]]) -> None:
        from memtool.deploy.iam import policy_document

        iam, sts = self.admin("iam"), self.admin("sts")
        trust = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "sts:AssumeRole"}],
        }
        self.log.policies = policies
        for owner, statements in policies.items():
            role = f"proof-{owner}-{uuid.uuid4().hex[:6]}"
            iam.create_role(RoleName=role, AssumeRolePolicyDocument=json.dumps(trust))
            inline = [s for s in statements if s.managed is None]
            if inline:
                iam.put_role_policy(RoleName=role, PolicyName="derived", PolicyDocument=json.dumps(policy_document(inline)))
            creds = sts.assume_role(RoleArn=f"arn:aws:iam::{ACCOUNT}:role/{role}", RoleSessionName="proof")["Credentials"]
            self.credentials[owner] = creds
            self.log.keys[creds["AccessKeyId"]] = owner

    # -- running a handler as its role

    def settings_for(self, function: str) -> Settings:
        env = self.deployment.environment(function)
        values: dict[str, Any] = {k.removeprefix("MEMTOOL_").lower(): v for k, v in env.items() if k.startswith("MEMTOOL_") and v != ""}
        return Settings(**values, region=REGION, today=TODAY, home=self.home)

    @contextmanager
    def as_role(self, function: str) -> Iterator[None]:
        from moto.core.authorization import enable_iam_authentication

        import memtool.runtime.aws as aws

        creds = self.credentials[function]
        saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
        os.environ.update(
            AWS_ACCESS_KEY_ID=creds["AccessKeyId"], AWS_SECRET_ACCESS_KEY=creds["SecretAccessKey"], AWS_SESSION_TOKEN=creds["SessionToken"]
        )
        aws._session = None  # a Lambda container: clients built with this role's credentials
        use_settings(self.settings_for(function))
        self.log.active = True
        try:
            with enable_iam_authentication():
                yield
        finally:
            self.log.active = False
            use_settings(None)
            aws._session = None
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def invoke(self, function: str, code: str, path: str, event: dict[str, Any]) -> Any:
        from memtool.runtime.handlers import function_handler
        from memtool.runtime.lambda_context import LocalLambdaContext

        handler = function_handler(ROOT, code)
        with self.log.on(f"{function} {path}"):
            result = handler(event, LocalLambdaContext(function_name=self.deployment.physical_name(function)))
        outcome = result.get("statusCode") if isinstance(result, dict) and "statusCode" in result else result
        if isinstance(result, dict) and "statusCode" in result and result["statusCode"] >= 400:
            self.proof.bodies[path] = result.get("body")
        self.proof.outcomes.append((function, path, outcome))
        return result

    def state_machine_invokes(self, machine: str, function_arn: str, path: str) -> None:
        key = f"state-machine-{machine}"
        self.log.keys[key] = machine
        with self.log.on(f"{machine} {path}"):
            self.log.decide(key, "lambda", "Invoke", [IamRequest("lambda:InvokeFunction", function_arn)])

    def substitution_arn(self, machine: str, name: str) -> str:
        return str(self.deployment.resources[machine]["Properties"]["DefinitionSubstitutions"][name])


def _pin_secret_arn(name: str, arn: str) -> None:
    """moto gives a secret a random ARN suffix; the stack's parameter names one ARN."""
    from moto.secretsmanager.models import secretsmanager_backends

    secret = secretsmanager_backends[ACCOUNT][REGION].secrets[name]
    secret.arn = arn


# ---------------------------------------------------------------------------------- AskFlow, stepped


def _compare(op: str, value: Any, present: bool, expected: Any) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if op == "StringEquals":
        return bool(value == expected)
    if op == "NumericEquals":
        return number and value == expected
    if op == "NumericLessThanEquals":
        return number and value <= expected
    if op == "NumericGreaterThan":
        return number and value > expected
    if op == "IsPresent":
        return present == expected
    if op == "IsString":
        return isinstance(value, str) == expected
    if op == "IsNull":
        return (present and value is None) == expected
    if op == "BooleanEquals":
        return value is expected
    raise AssertionError(f"the stepped AskFlow does not know Choice operator {op}")


def _choose(state_def: dict[str, Any], state: dict[str, Any]) -> str:
    def holds(rule: dict[str, Any]) -> bool:
        if "And" in rule:
            return all(holds(r) for r in rule["And"])
        if "Or" in rule:
            return any(holds(r) for r in rule["Or"])
        if "Not" in rule:
            return not holds(rule["Not"])
        value: Any = state
        present = True
        for part in rule["Variable"].removeprefix("$.").split("."):
            if isinstance(value, dict) and part in value:
                value = value[part]
            else:
                present, value = False, None
        for op, expected in rule.items():
            if op not in ("Variable", "Next"):
                return _compare(op, value, present, expected)
        raise AssertionError(f"empty Choice rule {rule}")

    for rule in state_def["Choices"]:
        if holds(rule):
            return rule["Next"]
    return state_def["Default"]


def run_ask_flow(harness: Harness, first: dict[str, Any], label: str) -> dict[str, Any]:
    """AskFlow's states in ASL order, each Lambda task through the flow steps handler as FlowStepsFunction."""
    definition = json.loads((ROOT / "statemachines" / "ask_flow.asl.json").read_text(encoding="utf-8"))
    steps_arn = harness.substitution_arn("AskFlow", "FlowStepsFunctionArn")
    state, name = first, definition["StartAt"]
    with harness.as_role("FlowStepsFunction"):  # one warm container for the whole flow
        return _step_through(harness, definition, steps_arn, state, name, label)


def _step_through(
    harness: Harness, definition: dict[str, Any], steps_arn: str, state: dict[str, Any], name: str, label: str
) -> dict[str, Any]:
    for _ in range(40):
        spec = definition["States"][name]
        kind = spec["Type"]
        if kind == "Task":
            step = spec["Parameters"]["Payload"]["step"]
            harness.state_machine_invokes("AskFlow", steps_arn, f"{label} {name}")
            try:
                state = harness.invoke("FlowStepsFunction", "flow_steps", f"{label} {name}", {"step": step, "state": state})
            except Exception as exc:  # noqa: BLE001 - a task's error goes to its Catch, as in Step Functions
                catch = next(c for c in spec.get("Catch", []) if "States.ALL" in c["ErrorEquals"] or type(exc).__name__ in c["ErrorEquals"])
                state = {**state, "error": {"Error": type(exc).__name__, "Cause": str(exc)}}
                name = catch["Next"]
                continue
            if spec.get("End"):
                return state
            name = spec["Next"]
        elif kind == "Choice":
            name = _choose(spec, state)
        elif kind == "Pass":
            if "Result" in spec and "ResultPath" in spec:
                state = {**state, spec["ResultPath"].removeprefix("$."): spec["Result"]}
            name = spec["Next"]
        elif kind == "Map":  # the analysis runners are proven by their own handlers below
            name = spec["Next"]
        else:  # Succeed, Fail
            return state
    raise AssertionError("AskFlow did not end in 40 states")


# ---------------------------------------------------------------------------------- the paths


def maintenance_steps() -> list[str]:
    """The Lambda Tasks of statemachines/maintenance.asl.json, the Map's inside included, in order."""
    definition = json.loads((ROOT / "statemachines" / "maintenance.asl.json").read_text(encoding="utf-8"))

    def tasks(states: dict[str, Any]) -> list[str]:
        found = []
        for state in states.values():
            if state["Type"] == "Task":
                found.append(state["Parameters"]["Payload"]["step"])
            elif state["Type"] == "Map":
                found.extend(tasks(state["ItemProcessor"]["States"]))
        return found

    return tasks(definition["States"])


def run_paths(harness: Harness) -> None:
    deployment = harness.deployment
    functions = set(deployment.functions())
    full = harness.deployed.name != "domain"

    # The tenant's semantic model first: a curator stores it (validated on the warehouse), and
    # every path that plans, compiles or guards SQL reads it.
    with harness.as_role("MemoryWriteFunction"):
        harness.invoke("MemoryWriteFunction", "memory_write", "PUT /model", api_event("model_put.json"))
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /model", api_event("model_put.json") | {"httpMethod": "GET", "body": None})
    if harness.deployment.parameters.get("TenantRedshiftSecretPrefix"):  # checked on the tenant's own warehouse
        with harness.as_role("MemoryWriteFunction"):
            own = api_event("model_put.json")
            own["requestContext"]["authorizer"]["claims"]["custom:tenant_id"] = OWN_SECRET_TENANT
            harness.invoke("MemoryWriteFunction", "memory_write", "PUT /model (a tenant with its own Redshift secret)", own)

    # Explicit memories: create, list, read, edit, search, forget, end a session.
    with harness.as_role("MemoryWriteFunction"):
        created = harness.invoke("MemoryWriteFunction", "memory_write", "POST /memories", api_event("memory_create.json"))
        memory_id = json.loads(created["body"])["memory"]["id"]
        ids = {"mem_01JD0000000000000000000000": memory_id}
        harness.invoke("MemoryWriteFunction", "memory_write", "POST /memories (replayed)", api_event("memory_create.json"))
        correction = {
            "kind": "correction",
            "key": "term.华东大区",
            "content": "“华东大区”指 region_name = 华东",
            "source_text": "华东大区就是华东",
        }
        harness.invoke(
            "MemoryWriteFunction",
            "memory_write",
            "POST /memories (a correction)",
            api_event("memory_create.json", body=correction, headers={"Idempotency-Key": "proof-correction"}),
        )
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /memories", api_event("memory_list.json"))
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /memories/{id}", api_event("memory_get.json", ids=ids))
        harness.invoke(
            "MemoryWriteFunction",
            "memory_write",
            "PATCH /memories/{id}",
            api_event("memory_patch.json", ids=ids, headers={"Idempotency-Key": "proof-patch"}),
        )
        harness.invoke(
            "MemoryWriteFunction",
            "memory_write",
            "PATCH /memories/{id} (stale version)",
            api_event("memory_patch.json", ids=ids, headers={"Idempotency-Key": "proof-patch-stale"}),
        )
        search = api_event("memory_list.json", query={"q": "金额 单位", "route": "nl2sql_query"})
        search.update(path="/memories/search", resource="/memories/search")
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /memories/search", search)
        second = harness.invoke(
            "MemoryWriteFunction",
            "memory_write",
            "POST /memories (to forget)",
            api_event(
                "memory_create.json",
                body={"kind": "profile", "key": "display.chart", "content": "默认用柱状图", "source_text": "默认用柱状图"},
                headers={"Idempotency-Key": "proof-create-2"},
            ),
        )
        doomed = json.loads(second["body"])["memory"]["id"]
        harness.invoke(
            "MemoryWriteFunction",
            "memory_write",
            "DELETE /memories/{id}",
            api_event("memory_delete.json", ids={"mem_01JD0000000000000000000000": doomed}),
        )

    # Sources: a curator stores one (its text in the bucket, its metadata in the table), anyone of
    # the tenant lists it, reads its metadata and its text a page at a time; a curator deletes it.
    with harness.as_role("MemoryWriteFunction"):
        stored = harness.invoke("MemoryWriteFunction", "memory_write", "POST /sources", api_event("source_create.json"))
        source_ids = {"mem_01JD0000000000000000000001": json.loads(stored["body"])["source"]["id"]}
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /sources", api_event("source_list.json"))
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /sources/{id}", api_event("source_get.json", ids=source_ids))
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /sources/{id}/read", api_event("source_read.json", ids=source_ids))
        harness.invoke("MemoryWriteFunction", "memory_write", "DELETE /sources/{id}", api_event("source_delete.json", ids=source_ids))
        # One stays: the Bedrock planner lists it and reads a page of it (read_source) when POST /ask plans.
        harness.invoke("MemoryWriteFunction", "memory_write", "POST /sources (for the planner)", api_event("source_create.json"))

    # MaintenanceFlow's Tasks before any stream delivery, in the flow's order and with the payloads
    # its states build (Plan, each lifecycle step over each tenant, Reconcile, WriteReport):
    # Reconcile indexes the heads still pending, so the searches below find them.
    if "MaintenanceFunction" in functions:
        arn = harness.substitution_arn("MaintenanceFlow", "MaintenanceFunctionArn")
        later = FrozenClock(datetime.now(UTC) + timedelta(hours=1))  # past ReconcileIndex's grace period
        container.use_clock(later)
        with harness.as_role("MaintenanceFunction"):
            assert maintenance_steps() == ["Plan", *["Lifecycle"] * 5, "Reconcile", "WriteReport"]
            harness.state_machine_invokes("MaintenanceFlow", arn, "MaintenanceFlow Plan")
            plan = harness.invoke(
                "MaintenanceFunction", "maintenance", "MaintenanceFlow Plan", {"step": "Plan", "input": load_event("maintenance_input.json")}
            )
            results = []
            for tenant in plan["tenants"]:
                state = {"tenant": tenant, "steps": plan["steps"], "reports": {}}
                for step in ("decay", "consolidate", "conflicts", "capacity", "pii_rescan"):
                    state = {**state, "step": step, "cursor": None}
                    while True:
                        state = harness.invoke("MaintenanceFunction", "maintenance", f"MaintenanceFlow {step}", {"step": "Lifecycle", "state": state})
                        if state["cursor"] is None:
                            break
                results.append({"tenant": tenant, "reports": state["reports"]})
            reconcile = harness.invoke("MaintenanceFunction", "maintenance", "MaintenanceFlow Reconcile", {"step": "Reconcile", "steps": plan["steps"]})
            run = {"started_at": plan["started_at"], "results": results, "reconcile": reconcile}
            harness.invoke("MaintenanceFunction", "maintenance", "MaintenanceFlow WriteReport", {"step": "WriteReport", "run": run})
        container.use_clock(None)
    # An admin asks for a run (in AWS: a started Standard execution) and a curator lists the
    # tenant's conflicts (a Scan for the tenant's partitions).
    with harness.as_role("MemoryWriteFunction"):
        harness.invoke("MemoryWriteFunction", "memory_write", "POST /maintenance/run", api_event("maintenance_run.json"))
        harness.invoke("MemoryWriteFunction", "memory_write", "GET /conflicts", api_event("conflicts_list.json"))
    with harness.as_role("DiagnoseFunction"):
        harness.invoke("DiagnoseFunction", "diagnose", "GET /diagnoses", api_event("diagnoses_list.json"))

    if "MaintenanceFunction" in functions:
        with harness.as_role("MemoryWriteFunction"):
            search = api_event("memory_list.json", query={"q": "金额 单位 元", "route": "nl2sql_query"})
            search.update(path="/memories/search", resource="/memories/search")
            harness.invoke("MemoryWriteFunction", "memory_write", "GET /memories/search (indexed)", search)

    # A data question through AskFlow's steps, then POST /ask (its StartSyncExecution answered with that flow's end).
    # The console input leaves out what AskFlow's Defaults state takes from the execution: its name
    # and its start time (this walk of the states passes the Pass states by).
    first = load_event("ask_flow_input.json")
    first.update(episode_id=f"ep_{uuid.uuid4().hex[:26].upper()}", started_at=datetime.now(UTC).isoformat())
    final = run_ask_flow(harness, first, "AskFlow nl2sql")
    episode_id = final["episode_id"]
    harness.log.sfn_output = lambda execution_input: {**final, "episode_id": execution_input["episode_id"]}
    if full:  # the domain set proves only the OpenSearch statements: the paths that reach the index
        with harness.as_role("AskFunction"):
            harness.invoke("AskFunction", "ask", "POST /ask", api_event("ask.json", headers={"Idempotency-Key": "proof-ask-1"}))
        with harness.as_role("MemoryWriteFunction"):  # the flow's session ends: its working memory goes
            session = first["input"]["session_id"]
            end = api_event("session_end.json")
            end.update(path=f"/sessions/{session}", pathParameters={"id": session})
            harness.invoke("MemoryWriteFunction", "memory_write", "DELETE /sessions/{id}", end)

        # Feedback: a thumbs-up (a few-shot candidate), its review by another admin, then corrections
        # (one the rules read, one in words for the planner to split) with a thumbs-down (a diagnosis is enqueued).
        with harness.as_role("FeedbackFunction"):

            def feedback(label: str, body: dict[str, Any]) -> None:
                harness.invoke(
                    "FeedbackFunction",
                    "feedback",
                    label,
                    api_event(
                        "feedback.json", body=body, headers={"Idempotency-Key": "proof-" + re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")}
                    ),
                )

            feedback("POST /feedback (thumbs-up)", {"episode_id": episode_id, "rating": 1})
            listing = harness.invoke("FeedbackFunction", "feedback", "GET /fewshots", api_event("fewshot_list.json"))
            pending = [item["id"] for item in json.loads(listing["body"]).get("items", [])]
            approve = api_event(
                "fewshot_approve.json",
                ids={"mem_01JD0000000000000000000000": pending[0]} if pending else None,
                headers={"Idempotency-Key": "proof-approve"},
            )
            approve["requestContext"]["authorizer"]["claims"]["sub"] = "another-admin"  # a reviewer never approves their own
            harness.invoke("FeedbackFunction", "feedback", "POST /fewshots/{id}/approve", approve)
            feedback("POST /feedback (a correction in words)", {"episode_id": episode_id, "rating": -1, "correction": "净收入要扣除退款"})
            feedback(
                "POST /feedback (thumbs-down, a correction)", {"episode_id": episode_id, "rating": -1, "correction": "单子数就是订单数"}
            )

        # Diagnosis over the API and from the queue (the message the feedback path sent).
        sqs = harness.admin("sqs")
        queue_url = harness.deployment.environment("FeedbackFunction")["MEMTOOL_DIAGNOSE_QUEUE_URL"]
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
        with harness.as_role("DiagnoseFunction"):
            ep = {"ep_01JD0000000000000000000000": episode_id}
            harness.invoke(
                "DiagnoseFunction",
                "diagnose",
                "POST /diagnose",
                api_event("diagnose.json", ids=ep, headers={"Idempotency-Key": "proof-diagnose"}),
            )
            harness.invoke("DiagnoseFunction", "diagnose", "GET /episodes/{id}", api_event("episode_get.json", ids=ep))
            harness.invoke(
                "DiagnoseFunction",
                "diagnose",
                "POST /lessons/{id}/share",
                api_event("lesson_share.json", headers={"Idempotency-Key": "proof-share"}),
            )
            queued = load_event("diagnose_queue.json")
            template_record = queued["Records"][0]
            queued["Records"] = [
                {**template_record, "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"]} for m in messages
            ] or queued["Records"]
            harness.invoke("DiagnoseFunction", "diagnose", "SQS diagnose queue", queued)

    # The indexer: every stored item as an INSERT, then a memory's head removed by TTL.
    if "IndexerFunction" in functions:
        items = harness.admin("dynamodb").scan(TableName=deployment.environment("FeedbackFunction")["MEMTOOL_MEMORY_TABLE"])["Items"]
        template_record = load_event("indexer_stream.json")["Records"][0]
        records = [
            {
                **template_record,
                "eventID": uuid.uuid4().hex,
                "eventName": "INSERT",
                "dynamodb": {**template_record["dynamodb"], "Keys": {"pk": i["pk"], "sk": i["sk"]}, "NewImage": i},
            }
            for i in items
        ]
        head = next(i for i in items if i.get("item_type", {}).get("S") == "head")
        records.append(
            {
                **template_record,
                "eventID": uuid.uuid4().hex,
                "eventName": "REMOVE",
                "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
                "dynamodb": {"Keys": {"pk": head["pk"], "sk": head["sk"]}, "OldImage": head, "StreamViewType": "NEW_AND_OLD_IMAGES"},
            }
        )
        with harness.as_role("IndexerFunction"):
            harness.invoke("IndexerFunction", "indexer", "DynamoDB stream (INSERT, TTL REMOVE)", {"Records": records})

    if full:
        # AskFlow's Map: the code interpreter and the ML tools.
        harness.state_machine_invokes(
            "AskFlow", harness.substitution_arn("AskFlow", "AnalyzeFunctionArn"), "AskFlow Analyze RunCodeInterpreter"
        )
        with harness.as_role("AnalyzeFunction"):
            harness.invoke("AnalyzeFunction", "analyze", "tool call code_interpreter", load_event("analyze_tool_call.json"))
        harness.state_machine_invokes("AskFlow", harness.substitution_arn("AskFlow", "MlToolsFunctionArn"), "AskFlow Analyze RunMlTool")
        with harness.as_role("MlToolsFunction"):
            harness.invoke("MlToolsFunction", "ml_tools", "tool call ml_anomaly", load_event("ml_tool_call.json"))


@contextmanager
def proof_environment(harness: Harness) -> Iterator[None]:
    """moto in-process with the call log's hooks, OpenSearch answered, E2B offline."""
    import botocore.handlers
    import requests.adapters
    from moto import mock_aws
    from moto.iam import access_control

    log = harness.log
    log.cluster = FakeCluster(dimension=1024)
    hooks = [("before-parameter-build", log.before_parameter_build), ("before-call", log.before_call)]
    botocore.handlers.BUILTIN_HANDLERS.extend(hooks)
    mp = harness.monkeypatch
    mp.setattr(access_control.IAMRequest, "check_action_permitted", lambda self, resource: log.moto_check(self, resource))
    mp.setattr(access_control.S3IAMRequest, "check_action_permitted", lambda self, resource: log.moto_check(self, resource))
    try:
        from memtool.analysis.sandbox import e2b
        from memtool.analysis.sandbox.port import SandboxUnavailable

        def offline(*_: Any, **__: Any) -> Any:
            raise SandboxUnavailable("E2B is not reachable offline")

        mp.setattr(e2b.E2BSandbox, "_create", offline)  # the key is read; the run falls back to the local sandbox
    except ImportError:
        pass
    from memtool.sql import redshift_warehouse
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    def offline_redshift(secret_arn: str, secretsmanager_client: Any, **_: Any) -> Any:
        """Redshift is not reachable offline: its secret is read as the role (as the first
        connection does), then the demo warehouse answers in its place."""
        secretsmanager_client.get_secret_value(SecretId=secret_arn)
        return DuckDBWarehouse(harness.warehouse)

    mp.setattr(redshift_warehouse, "redshift_from_secret", offline_redshift)
    # Each role gets fresh sessions (its own credentials); they share one loader of botocore's
    # service models, which is most of the cost of a session's first client.
    import botocore.loaders
    import botocore.session

    shared_loader = botocore.loaders.create_loader()
    mp.setattr(botocore.session, "create_loader", lambda *_: shared_loader)
    for key, value in {
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        mp.setenv(key, value)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        mp.delenv(key, raising=False)
    try:
        with mock_aws():
            # moto's HTTP mock (responses) replaces HTTPAdapter.send when it starts: wrap its send,
            # and put it back before moto restores the original.
            mocked = requests.adapters.HTTPAdapter.send
            requests.adapters.HTTPAdapter.send = log.opensearch_send(mocked)  # type: ignore[method-assign]
            try:
                yield
            finally:
                requests.adapters.HTTPAdapter.send = mocked  # type: ignore[method-assign]
    finally:
        for hook in hooks:
            botocore.handlers.BUILTIN_HANDLERS.remove(hook)
        container.reset()


@pytest.fixture(scope="module")
def proofs(tmp_path_factory: pytest.TempPathFactory, demo_warehouse: Path) -> dict[str, Proof]:
    done: dict[str, Proof] = {}
    for name, deployed in DEPLOYED.items():
        with pytest.MonkeyPatch.context() as mp:
            harness = Harness(deployed, tmp_path_factory.mktemp(f"iam-{name}"), mp, demo_warehouse)
            with proof_environment(harness):
                harness.build()
                run_paths(harness)
            done[name] = harness.proof
    return done


# ---------------------------------------------------------------------------------- the tests


def _denials(calls: list[LoggedCall], statements: list[Statement]) -> list[tuple[LoggedCall, IamRequest]]:
    return [
        (call, request)
        for call in calls
        for request in call.requests
        if evaluate(statements, request.action, request.resource, request.context_dict) is None
    ]


@pytest.mark.parametrize(("set_name", "owner"), ROLE_CASES)
def test_every_call_is_allowed(proofs: dict[str, Proof], set_name: str, owner: str) -> None:
    proof = proofs[set_name]
    denied = [f"{c.path}: {c.service}:{c.operation}: {r}" for c in proof.calls(owner) for r in c.denied]
    assert denied == [], f"{owner} ({set_name}) made calls its role does not allow:\n" + "\n".join(denied)


@pytest.mark.parametrize(("owner", "statement_name"), STATEMENT_CASES)
def test_removing_a_statement_denies_a_call(proofs: dict[str, Proof], owner: str, statement_name: str) -> None:
    """In some parameter set that has the statement, a call the role made is denied without it."""
    if (owner, statement_name) in ALLOWED_UNUSED:
        pytest.skip(ALLOWED_UNUSED[(owner, statement_name)])
    failing = []
    for set_name, proof in proofs.items():
        statements = proof.deployed.policies.get(owner, [])
        without = [s for s in statements if s.name != statement_name]
        if len(without) == len(statements):
            continue  # not in this parameter set
        assert len(without) == len(statements) - 1
        denied = _denials(proof.calls(owner), without)
        if denied:
            first_call, first_request = denied[0]
            failing.append(f"{set_name}: {first_call.path} fails at {first_call.service}:{first_call.operation} ({first_request})")
    assert failing, f"{owner}: no path needs {statement_name}: trim it from template.yaml"
    print(f"without {statement_name}: " + "; ".join(failing))  # the path that fails first (pytest -rP shows it)


@pytest.mark.parametrize("owner", OWNERS)
def test_no_permission_goes_unused(proofs: dict[str, Proof], owner: str) -> None:
    """Every action of every statement is used by some path in some parameter set that grants it."""
    unused: dict[str, set[str]] = {}
    used: set[tuple[str, str]] = set()
    for proof in proofs.values():
        requests_made = [r for c in proof.calls(owner) for r in c.requests]
        for statement in proven(proof.deployed.policies.get(owner, [])):
            if (owner, statement.name) in ALLOWED_UNUSED:
                continue
            for action in statement.actions:
                single = Statement(
                    owner,
                    statement.policy,
                    statement.index,
                    statement.sid,
                    statement.effect,
                    (action,),
                    statement.resources,
                    statement.condition,
                )
                if any(single.matches(r.action, r.resource, r.context_dict) for r in requests_made):
                    used.add((statement.name, action))
                elif (owner, statement.name, action) not in ALLOWED_UNUSED_ACTIONS:
                    unused.setdefault(statement.name, set()).add(action)
    report = sorted(f"{name}: {action}" for name, actions in unused.items() for action in actions if (name, action) not in used)
    assert report == [], f"{owner} has permissions no path uses:\n" + "\n".join(report)


def test_managed_policies_are_left_to_the_services() -> None:
    """Every statement outside the proof is a managed policy SAM attaches or an event destination's."""
    from memtool.deploy.iam import MANAGED_POLICY_USERS

    for deployed in DEPLOYED.values():
        for statements in deployed.policies.values():
            for statement in statements:
                if statement in proven(statements):
                    continue
                assert statement.managed in MANAGED_POLICY_USERS or _event_destination(statement), statement


def _ttl_removal(harness: Harness) -> dict[str, Any]:
    """A stream REMOVE of a memory's head by DynamoDB's TTL (the memory is written first, as its own role)."""
    with harness.as_role("MemoryWriteFunction"):
        harness.invoke("MemoryWriteFunction", "memory_write", "POST /memories", api_event("memory_create.json"))
    table = harness.deployment.environment("FeedbackFunction")["MEMTOOL_MEMORY_TABLE"]
    items = harness.admin("dynamodb").scan(TableName=table)["Items"]
    head = next(i for i in items if i.get("item_type", {}).get("S") == "head")
    record = copy.deepcopy(load_event("indexer_stream.json")["Records"][0])
    record.update(eventName="REMOVE", userIdentity={"type": "Service", "principalId": "dynamodb.amazonaws.com"})
    record["dynamodb"] = {
        "Keys": {"pk": head["pk"], "sk": head["sk"]},
        "OldImage": head,
        "SequenceNumber": "1",
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    return {"Records": [record]}


@pytest.mark.parametrize("purge_allowed", [True, False], ids=["with-BatchWriteItem", "without-BatchWriteItem"])
def test_a_removed_statement_fails_the_handler(tmp_path: Path, demo_warehouse: Path, purge_allowed: bool) -> None:
    """The defect of issue 12, run for real: an indexer role without dynamodb:BatchWriteItem (the
    template had a read policy and UpdateItem) cannot purge a TTL-removed memory's snapshots; moto,
    enforcing IAM on the assumed role, refuses the call and the batch fails (in AWS it is retried,
    then goes to the dead-letter queue)."""
    deployed = DEPLOYED["configured"]
    policies = {owner: list(statements) for owner, statements in deployed.policies.items()}
    purge = next(s for s in policies["IndexerFunction"] if s.name == "PurgeSnapshots")
    if not purge_allowed:
        without = Statement(purge.role, purge.policy, purge.index, purge.sid, purge.effect, ("dynamodb:Query",), purge.resources)
        policies["IndexerFunction"] = [without if s is purge else s for s in policies["IndexerFunction"]]
    with pytest.MonkeyPatch.context() as mp:
        harness = Harness(deployed, tmp_path, mp, demo_warehouse)
        harness.log.policies = policies
        with proof_environment(harness):
            harness.build(policies)
            event = _ttl_removal(harness)
            with harness.as_role("IndexerFunction"):
                if purge_allowed:
                    assert harness.invoke("IndexerFunction", "indexer", "TTL REMOVE", event) == {"batchItemFailures": []}
                else:  # the whole batch failed: Lambda retries it, then sends it to the dead-letter queue
                    with pytest.raises(BatchProcessingError) as failed:
                        harness.invoke("IndexerFunction", "indexer", "TTL REMOVE", event)
                    assert "is not authorized to perform: dynamodb:BatchWriteItem" in str(failed.value)
    denied = [(c.operation, str(r)) for c in harness.log.calls if c.role == "IndexerFunction" for r in c.denied]
    assert denied == ([] if purge_allowed else [("BatchWriteItem", "dynamodb:BatchWriteItem on " + purge.resources[0])])


EXPECTED_OUTCOMES: dict[str, dict[str, Any]] = {
    # The paths ran as a user would see them (a proof over paths that failed early would prove little).
    "defaults": {
        "POST /memories": 201,
        "PATCH /memories/{id}": 200,
        "PATCH /memories/{id} (stale version)": 409,
        "DELETE /memories/{id}": 204,
        "POST /ask": 503,  # no warehouse configured: a clear configuration error, no flow
        "GET /fewshots": 200,
        "POST /maintenance/run": 202,  # a started MaintenanceFlow execution
        "GET /conflicts": 200,
        "GET /diagnoses": 200,
        "POST /sources": 201,
        "GET /sources": 200,
        "GET /sources/{id}": 200,
        "GET /sources/{id}/read": 200,
        "DELETE /sources/{id}": 204,
    },
    "configured": {
        "PUT /model": 201,
        "PUT /model (a tenant with its own Redshift secret)": 201,
        "GET /model": 200,
        "POST /memories": 201,
        "POST /memories (a correction)": 201,
        "GET /memories/search (indexed)": 200,
        "DELETE /sessions/{id}": 204,
        "POST /maintenance/run": 202,
        "GET /conflicts": 200,
        "POST /ask": 200,
        "POST /feedback (thumbs-up)": 200,
        "POST /fewshots/{id}/approve": 200,
        "POST /feedback (thumbs-down, a correction)": 200,
        "POST /diagnose": 200,
        "SQS diagnose queue": {"batchItemFailures": []},
        "DynamoDB stream (INSERT, TTL REMOVE)": {"batchItemFailures": []},
    },
    "domain": {
        "GET /memories/search (indexed)": 200,
        "DynamoDB stream (INSERT, TTL REMOVE)": {"batchItemFailures": []},
    },
}


@pytest.mark.parametrize("set_name", list(PARAMETER_SETS))
def test_the_paths_ran_to_their_answers(proofs: dict[str, Proof], set_name: str) -> None:
    proof = proofs[set_name]
    got = {path: proof.status(path) for path in EXPECTED_OUTCOMES[set_name]}
    assert got == EXPECTED_OUTCOMES[set_name], proof.bodies
    if set_name in ("configured", "domain"):
        reconcile = proof.status("MaintenanceFlow Reconcile")
        assert reconcile["indexed"] > 0 and reconcile["failed"] == []
    if set_name == "configured":
        reconcile = proof.status("MaintenanceFlow Reconcile")
        assert reconcile["indexed"] > 0 and reconcile["failed"] == []
        assert proof.status("tool call ml_anomaly")["success"] is True
        assert proof.status("tool call code_interpreter")["success"] is True  # E2B unreachable: the local sandbox ran it


def test_the_evaluator_reads_statements_as_iam_does() -> None:
    table = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/t"
    allow = Statement("F", "p", 0, "A", "Allow", ("dynamodb:Get*",), (table,))
    deny = Statement("F", "p", 1, "D", "Deny", ("dynamodb:GetItem",), ("*",))
    through = json.dumps({"StringEquals": {"bedrock:InferenceProfileArn": "arn:aws:bedrock:us-east-1:1:inference-profile/us.m"}})
    profile = Statement("F", "p", 2, "P", "Allow", ("bedrock:InvokeModel",), ("arn:aws:bedrock:*::foundation-model/*",), through)
    assert evaluate([allow], "DynamoDB:GetItem", table) is allow  # actions ignore case
    assert evaluate([allow], "dynamodb:GetItem", f"{table}/index/i") is None  # resources do not
    assert evaluate([allow], "dynamodb:PutItem", table) is None
    assert evaluate([allow, deny], "dynamodb:GetItem", table) is None  # an explicit deny wins
    model = "arn:aws:bedrock:us-west-2::foundation-model/m"
    assert evaluate(
        [profile], "bedrock:InvokeModel", model, {"bedrock:InferenceProfileArn": "arn:aws:bedrock:us-east-1:1:inference-profile/us.m"}
    )
    assert evaluate([profile], "bedrock:InvokeModel", model) is None  # the key is missing: the condition fails


@pytest.mark.parametrize(
    ("set_name", "model"),
    [("defaults", "anthropic.claude-3-5-sonnet-20240620-v1:0"), ("configured", "us.anthropic.claude-3-5-sonnet-20240620-v1:0")],
)
def test_the_planner_may_invoke_its_model_and_no_other(set_name: str, model: str) -> None:
    """A plain model id needs its foundation model; a cross-region profile needs the profile in the
    Region and its model in every Region it routes to (derived from the template's Fn::Split)."""
    from tests.contract.iam_support import bedrock_requests

    statements = DEPLOYED[set_name].policies["FlowStepsFunction"]
    requests = bedrock_requests("bedrock:InvokeModel", model)
    assert len(requests) == (1 if set_name == "defaults" else 4)
    assert all(evaluate(statements, r.action, r.resource, r.context_dict) for r in requests)
    other = bedrock_requests("bedrock:InvokeModel", model.replace("sonnet", "opus"))
    assert not any(evaluate(statements, r.action, r.resource, r.context_dict) for r in other)


def test_a_tenant_with_its_own_secret_reads_it_and_the_others_the_stacks(proofs: dict[str, Proof]) -> None:
    """TenantRedshiftSecretPrefix: a tenant's secret is looked up by name, then read by its ARN; a
    tenant without one is looked up (not found) and reads the stack's RedshiftSecretArn."""
    proof = proofs["configured"]

    def secret_reads(path: str) -> list[tuple[str, str]]:
        return [
            (call.operation, request.resource)
            for call in proof.calls("MemoryWriteFunction")
            if call.path == f"MemoryWriteFunction {path}" and call.service == "secretsmanager"
            for request in call.requests
        ]

    named = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{TENANT_SECRETS}"
    own = secret_reads("PUT /model (a tenant with its own Redshift secret)")
    assert own[0] == ("GetSecretValue", named + OWN_SECRET_TENANT)
    assert len(own) == 2 and re.fullmatch(re.escape(named + OWN_SECRET_TENANT) + r"-\w{6}", own[1][1]), own
    assert secret_reads("PUT /model") == [("GetSecretValue", named + "acme-pharma"), ("GetSecretValue", REDSHIFT_SECRET)]
