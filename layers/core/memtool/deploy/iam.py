"""The IAM statements every role of the stack gets, read from template.yaml as CloudFormation deploys it.

The template goes through the SAM translator (``aws-sam-translator``, the transform CloudFormation
runs), so policy templates such as ``DynamoDBCrudPolicy`` become the statements AWS creates and
each function gets the role SAM makes for it. The translated template is then resolved for one set
of parameter values: conditions are evaluated, ``Fn::If`` branches chosen, ``AWS::NoValue`` removed,
and ``Ref``/``Fn::GetAtt``/``Fn::Sub``/``Fn::Join``/``Fn::Select``/``Fn::Split`` replaced by
concrete values. Resources get deterministic physical names (``<stack>-<LogicalId>``), so a test
can create the same tables and queues on moto and the ARNs in the statements are the ARNs the code
calls.

Managed policies SAM attaches (logs, X-Ray, the SQS and DynamoDB stream pollers) are represented by
their documented actions on ``*`` and marked ``managed``: the Lambda service uses them (the
runtime writes logs, the event source mapping polls), not the function's code, so a proof by
running the code leaves them out (:attr:`Statement.managed`).

:func:`evaluate` is a small policy evaluator (action and resource wildcards, explicit deny wins,
the string, ARN and Bool condition operators the stack uses); ``tests/contract/test_iam.py`` uses it for
the calls moto does not authorize (Bedrock, OpenSearch) and for every call as a cross-check.

Deploy tooling: imported by ``memtool aws check`` and the tests, never by a Lambda function.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

DEFAULT_REGION = "us-east-1"
DEFAULT_ACCOUNT = "123456789012"
DEFAULT_STACK = "memtool"

# The managed policies SAM attaches, with the actions AWS documents for them (all on "*").
MANAGED_POLICY_ACTIONS: dict[str, tuple[str, ...]] = {
    "AWSLambdaBasicExecutionRole": ("logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"),
    "AWSXrayWriteOnlyAccess": (
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "xray:GetSamplingStatisticSummaries",
    ),
    "AWSLambdaSQSQueueExecutionRole": (
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    ),
    "AWSLambdaDynamoDBExecutionRole": (
        "dynamodb:DescribeStream",
        "dynamodb:GetRecords",
        "dynamodb:GetShardIterator",
        "dynamodb:ListStreams",
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    ),
}
MANAGED_POLICY_USERS: dict[str, str] = {
    "AWSLambdaBasicExecutionRole": "the Lambda runtime writes the function's logs",
    "AWSXrayWriteOnlyAccess": "the X-Ray daemon of Lambda/Step Functions sends the traces",
    "AWSLambdaSQSQueueExecutionRole": "the SQS event source mapping polls and deletes the messages",
    "AWSLambdaDynamoDBExecutionRole": "the DynamoDB stream event source mapping reads the stream",
}


# ---------------------------------------------------------------------------------- statements


@dataclass(frozen=True)
class Statement:
    """One resolved IAM statement of a role."""

    role: str  # logical id of the function or state machine the role belongs to
    policy: str  # the inline policy's name, or the managed policy's name
    index: int  # position in that policy
    sid: str | None
    effect: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    condition: str = ""  # the Condition block as sorted JSON ("" when none)
    managed: str | None = None  # the managed policy it stands for, when it is one

    @property
    def name(self) -> str:
        """How tests and reports name the statement: its Sid, else <policy>[<index>]."""
        return self.sid or f"{self.policy}[{self.index}]"

    @property
    def conditions(self) -> dict[str, dict[str, Any]]:
        return json.loads(self.condition) if self.condition else {}

    def matches(self, action: str, resource: str, context: Mapping[str, str] | None = None) -> bool:
        """Whether this statement applies to the request (its effect says allow or deny)."""
        return (
            any(_wildcard(pattern, action, ignore_case=True) for pattern in self.actions)
            and any(_wildcard(pattern, resource) for pattern in self.resources)
            and _conditions_hold(self.conditions, context or {})
        )

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"Effect": self.effect, "Action": list(self.actions), "Resource": list(self.resources)}
        if self.sid:
            document["Sid"] = self.sid
        if self.condition:
            document["Condition"] = self.conditions
        return document


def evaluate(statements: Iterable[Statement], action: str, resource: str, context: Mapping[str, str] | None = None) -> Statement | None:
    """The statement that allows the request, or None (not allowed, or explicitly denied).

    IAM's order: an explicit deny wins, then any allow, else the implicit deny. Wildcards: ``*``
    and ``?`` in actions (case-insensitive) and resources (case-sensitive). Conditions: the
    String*/Arn* operators and Bool, with ``IfExists``; a key missing from the request fails a condition
    that is not ``IfExists``.
    """
    allowed = None
    for statement in statements:
        if not statement.matches(action, resource, context):
            continue
        if statement.effect == "Deny":
            return None
        allowed = allowed or statement
    return allowed


def policy_document(statements: Iterable[Statement]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [s.as_dict() for s in statements]}


@lru_cache(maxsize=256)
def _pattern(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(f"^{regex}$", re.IGNORECASE | re.DOTALL if ignore_case else re.DOTALL)


def _wildcard(pattern: str, value: str, *, ignore_case: bool = False) -> bool:
    return _pattern(pattern, ignore_case).match(value) is not None


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], context: Mapping[str, str]) -> bool:
    for operator, tests in conditions.items():
        if_exists = operator.endswith("IfExists")
        base = operator.removesuffix("IfExists")
        for key, expected in tests.items():
            values = expected if isinstance(expected, list) else [expected]
            actual = context.get(key)
            if actual is None:
                if if_exists:
                    continue
                return False
            if not _condition_matches(base, [str(v) for v in values], actual):
                return False
    return True


def _condition_matches(operator: str, values: list[str], actual: str) -> bool:
    if operator in ("StringEquals", "ArnEquals"):
        return actual in values
    if operator == "Bool":  # "true"/"false", as IAM compares them (case-insensitive)
        return actual.lower() in [v.lower() for v in values]
    if operator == "StringEqualsIgnoreCase":
        return actual.lower() in [v.lower() for v in values]
    if operator in ("StringLike", "ArnLike"):
        return any(_wildcard(v, actual) for v in values)
    if operator in ("StringNotEquals", "ArnNotEquals"):
        return actual not in values
    if operator in ("StringNotLike", "ArnNotLike"):
        return not any(_wildcard(v, actual) for v in values)
    raise ValueError(f"condition operator {operator} is not supported by this evaluator")


# ---------------------------------------------------------------------------------- deployment


@dataclass
class Deployment:
    """The translated template, resolved for one set of parameter values."""

    parameters: dict[str, str]
    region: str
    account: str
    stack_name: str
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)  # resolved, only the deployed ones
    roles_of: dict[str, str] = field(default_factory=dict)  # function or state machine -> its role's logical id

    @property
    def partition(self) -> str:
        return _partition(self.region)

    def role_statements(self, owner: str) -> list[Statement]:
        """Every statement of the role of this function or state machine (inline, then managed)."""
        role = self.resources[self.roles_of[owner]]["Properties"]
        statements: list[Statement] = []
        for policy in role.get("Policies") or []:
            document = policy["PolicyDocument"]
            items = document["Statement"]
            for index, item in enumerate(items if isinstance(items, list) else [items]):
                statements.append(_statement(owner, policy["PolicyName"], index, item))
        for arn in role.get("ManagedPolicyArns") or []:
            name = str(arn).rsplit("/", 1)[-1]
            actions = MANAGED_POLICY_ACTIONS.get(name)
            if actions is None:
                raise ValueError(f"{owner}'s role attaches {arn}, whose actions this module does not know")
            statements.append(Statement(owner, name, 0, None, "Allow", actions, ("*",), managed=name))
        return statements

    def functions(self) -> list[str]:
        return sorted(k for k, r in self.resources.items() if r["Type"] == "AWS::Lambda::Function" and k in self.roles_of)

    def state_machines(self) -> list[str]:
        return sorted(k for k, r in self.resources.items() if r["Type"] == "AWS::StepFunctions::StateMachine" and k in self.roles_of)

    def environment(self, function: str) -> dict[str, str]:
        """The function's environment variables (the template's Globals merged in by SAM)."""
        env = (self.resources[function]["Properties"].get("Environment") or {}).get("Variables") or {}
        return {k: str(v) for k, v in env.items()}

    def physical_name(self, logical_id: str) -> str:
        return _physical_name(self.stack_name, logical_id)


def _statement(owner: str, policy: str, index: int, item: Mapping[str, Any]) -> Statement:
    actions = item.get("Action", [])
    resources = item.get("Resource", "*")
    return Statement(
        role=owner,
        policy=policy,
        index=index,
        sid=item.get("Sid"),
        effect=item.get("Effect", "Allow"),
        actions=tuple([actions] if isinstance(actions, str) else actions),
        resources=tuple([resources] if isinstance(resources, str) else resources),
        condition=json.dumps(item["Condition"], sort_keys=True) if item.get("Condition") else "",
    )


def function_policies(parameters: Mapping[str, str], **options: Any) -> dict[str, list[Statement]]:
    """Per Lambda function logical id, its role's statements (inline and managed)."""
    return policies_of_functions(resolve_template(parameters, **options))


def policies_of_functions(deployment: Deployment) -> dict[str, list[Statement]]:
    """Per Lambda function logical id of a resolved deployment, its role's statements."""
    return {name: deployment.role_statements(name) for name in deployment.functions()}


def state_machine_policies(parameters: Mapping[str, str], **options: Any) -> dict[str, list[Statement]]:
    """Per state machine logical id, its role's statements (inline and managed)."""
    deployment = resolve_template(parameters, **options)
    return {name: deployment.role_statements(name) for name in deployment.state_machines()}


def resolve_template(
    parameters: Mapping[str, str],
    *,
    template_path: Path | None = None,
    region: str = DEFAULT_REGION,
    account: str = DEFAULT_ACCOUNT,
    stack_name: str = DEFAULT_STACK,
) -> Deployment:
    """Translate template.yaml with SAM and resolve it for these parameter values.

    Parameters left out take the template's defaults; a parameter without a default must be given.
    """
    from memtool.runtime.template import load_template, project_root

    path = template_path or project_root() / "template.yaml"
    source = copy.deepcopy(load_template(Path(path)))
    values = _parameter_values(source, parameters)
    translated = translate(source, values, region)
    return _resolve(translated, values, region, account, stack_name)


def _parameter_values(template: Mapping[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    declared = template.get("Parameters") or {}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(f"unknown template parameters: {', '.join(unknown)}")
    values: dict[str, str] = {}
    missing = []
    for name, spec in declared.items():
        if name in given:
            values[name] = str(given[name])
        elif "Default" in spec:
            values[name] = str(spec["Default"])
        else:
            missing.append(name)
    if missing:
        raise ValueError(f"parameters without a default need a value: {', '.join(missing)}")
    return values


def translate(template: dict[str, Any], parameters: Mapping[str, str], region: str = DEFAULT_REGION) -> dict[str, Any]:
    """The SAM transform, offline: local code and definition paths become placeholder S3 URIs."""
    from samtranslator.parser.parser import Parser  # type: ignore[import-untyped]
    from samtranslator.translator.translator import Translator  # type: ignore[import-untyped]

    for resource in template.get("Resources", {}).values():
        props = resource.get("Properties") or {}
        kind = resource.get("Type")
        if kind == "AWS::Serverless::Function":
            if props.get("PackageType") == "Image":
                props.setdefault("ImageUri", f"{DEFAULT_ACCOUNT}.dkr.ecr.{region}.amazonaws.com/memtool:latest")
            elif isinstance(props.get("CodeUri"), str):
                props["CodeUri"] = "s3://memtool-artifacts/code.zip"
        elif kind == "AWS::Serverless::LayerVersion" and isinstance(props.get("ContentUri"), str):
            props["ContentUri"] = "s3://memtool-artifacts/layer.zip"
        elif kind == "AWS::Serverless::StateMachine" and isinstance(props.get("DefinitionUri"), str):
            props["DefinitionUri"] = {"Bucket": "memtool-artifacts", "Key": props["DefinitionUri"]}
    previous = os.environ.get("AWS_DEFAULT_REGION")
    os.environ["AWS_DEFAULT_REGION"] = region  # SAM's ARN generator reads the region from here
    try:
        translated = Translator(managed_policy_map={}, sam_parser=Parser()).translate(
            sam_template=template, parameter_values=dict(parameters), get_managed_policy_map=dict
        )
    finally:
        if previous is None:
            os.environ.pop("AWS_DEFAULT_REGION", None)
        else:
            os.environ["AWS_DEFAULT_REGION"] = previous
    return json.loads(json.dumps(translated, default=str))


# ---------------------------------------------------------------------------------- intrinsics


class _NoValue:
    pass


NO_VALUE = _NoValue()


def _partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def _physical_name(stack: str, logical_id: str) -> str:
    return f"{stack}-{logical_id}"


def rest_api_id(logical_id: str) -> str:
    """The id the rehearsal gives a REST API (AWS's are 10 random lower-case letters and digits)."""
    return logical_id.lower()[:10]


def cloudfront_id(physical: str) -> str:
    """A CloudFront id as AWS makes them (E and 13 upper-case letters and digits), fixed per name."""
    digest = hashlib.sha256(physical.encode()).hexdigest().upper()
    return "E" + digest[:13]


@dataclass
class _Resolver:
    template: dict[str, Any]
    parameters: dict[str, str]
    region: str
    account: str
    stack: str
    _conditions: dict[str, bool] = field(default_factory=dict)

    @property
    def partition(self) -> str:
        return _partition(self.region)

    def pseudo(self) -> dict[str, str]:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": self.partition,
            "AWS::StackName": self.stack,
            "AWS::StackId": f"arn:{self.partition}:cloudformation:{self.region}:{self.account}:stack/{self.stack}/0",
            "AWS::URLSuffix": "amazonaws.com.cn" if self.partition == "aws-cn" else "amazonaws.com",
        }

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            self._conditions[name] = bool(self.value(self.template["Conditions"][name]))
        return self._conditions[name]

    def value(self, node: Any) -> Any:
        if isinstance(node, list):
            items = [self.value(item) for item in node]
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
            intrinsic = _INTRINSICS.get(key)
            if intrinsic is not None:
                return intrinsic(self, arg)
            if key == "Condition" and isinstance(arg, str) and arg in (self.template.get("Conditions") or {}):
                return self.condition(arg)
            if key.startswith("Fn::"):
                raise ValueError(f"intrinsic {key} is not supported")
        resolved = {k: self.value(v) for k, v in node.items()}
        return {k: v for k, v in resolved.items() if v is not NO_VALUE}

    # ---- one method per intrinsic function (the table _INTRINSICS names them; Ref and Fn::Sub
    # are ``ref`` and ``sub``, which templates' strings use too)

    def _fn_get_att(self, arg: Any) -> Any:
        logical_id, attribute = arg.split(".", 1) if isinstance(arg, str) else arg
        return self.get_att(logical_id, self.value(attribute))

    def _fn_join(self, arg: Any) -> str:
        separator, items = arg
        return str(self.value(separator)).join(str(v) for v in self.value(items))

    def _fn_select(self, arg: Any) -> Any:
        index, items = arg
        return self.value(items)[int(self.value(index))]

    def _fn_split(self, arg: Any) -> list[str]:
        separator, text = arg
        return str(self.value(text)).split(str(self.value(separator)))

    def _fn_if(self, arg: Any) -> Any:
        name, when_true, when_false = arg
        return self.value(when_true if self.condition(name) else when_false)

    def _fn_equals(self, arg: Any) -> bool:
        left, right = (self.value(v) for v in arg)
        return str(left) == str(right)

    def _fn_not(self, arg: Any) -> bool:
        return not self.value(arg[0])

    def _fn_and(self, arg: Any) -> bool:
        return all(self.value(v) for v in arg)

    def _fn_or(self, arg: Any) -> bool:
        return any(self.value(v) for v in arg)

    def _fn_get_azs(self, arg: Any) -> list[str]:
        return [f"{self.region}a", f"{self.region}b", f"{self.region}c"]

    def sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
        local = {name: self.value(v) for name, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in local:
                return str(local[name])
            if "." in name:
                logical_id, attribute = name.split(".", 1)
                return str(self.get_att(logical_id, attribute))
            return str(self.ref(name))

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        pseudo = self.pseudo()
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        resource = self.template["Resources"].get(name)
        if resource is None:
            raise ValueError(f"Ref to unknown {name}")
        kind = resource["Type"]
        physical = _physical_name(self.stack, name)
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{self.region}.{pseudo['AWS::URLSuffix']}/{self.account}/{physical}"
        if kind == "AWS::StepFunctions::StateMachine":
            return self.get_att(name, "Arn")
        if kind in ("AWS::Lambda::LayerVersion", "AWS::SNS::Topic"):
            return self.get_att(name, "Arn")
        if kind == "AWS::ApiGateway::RestApi":
            return rest_api_id(name)
        if kind == "AWS::S3::Bucket":
            return physical.lower()  # CloudFormation names buckets in lower case (S3 allows no other)
        if kind == "AWS::CloudFront::Distribution":
            return cloudfront_id(physical)
        return physical

    def get_att(self, name: str, attribute: str) -> Any:
        resource = self.template["Resources"].get(name)
        if resource is None:
            raise ValueError(f"Fn::GetAtt of unknown {name}")
        kind = resource["Type"]
        physical = _physical_name(self.stack, name)
        head = f"arn:{self.partition}"
        where = f"{self.region}:{self.account}"
        arns = {
            "AWS::DynamoDB::Table": f"{head}:dynamodb:{where}:table/{physical}",
            "AWS::SQS::Queue": f"{head}:sqs:{where}:{physical}",
            "AWS::Lambda::Function": f"{head}:lambda:{where}:function:{physical}",
            "AWS::StepFunctions::StateMachine": f"{head}:states:{where}:stateMachine:{physical}",
            "AWS::Logs::LogGroup": f"{head}:logs:{where}:log-group:{self._log_group_name(name)}:*",
            "AWS::IAM::Role": f"{head}:iam::{self.account}:role/{physical}",
            "AWS::Lambda::LayerVersion": f"{head}:lambda:{where}:layer:{physical}:1",
            "AWS::SNS::Topic": f"{head}:sns:{where}:{physical}",
            "AWS::SQS::QueuePolicy": physical,
            "AWS::S3::Bucket": f"{head}:s3:::{physical.lower()}",
        }
        if attribute == "Arn":
            return arns.get(kind, f"{head}:cloudformation:{where}:resource/{physical}")
        if kind == "AWS::DynamoDB::Table" and attribute == "StreamArn":
            return f"{arns[kind]}/stream/2026-01-01T00:00:00.000"
        if kind == "AWS::SQS::Queue" and attribute == "QueueName":
            return physical
        if kind == "AWS::SQS::Queue" and attribute == "QueueUrl":
            return self.ref(name)
        if kind == "AWS::StepFunctions::StateMachine" and attribute == "Name":
            return physical
        if kind == "AWS::ApiGateway::RestApi" and attribute == "RootResourceId":
            return "root"
        if kind == "AWS::S3::Bucket" and attribute == "RegionalDomainName":
            return f"{physical.lower()}.s3.{self.region}.{self.pseudo()['AWS::URLSuffix']}"
        if kind == "AWS::CloudFront::Distribution" and attribute == "DomainName":
            return f"{cloudfront_id(physical).lower()}.cloudfront.net"
        if kind == "AWS::CloudFront::Function" and attribute == "FunctionMetadata.FunctionARN":
            return f"{head}:cloudfront::{self.account}:function/{self.value(resource['Properties']['Name'])}"
        if kind == "AWS::CloudFront::OriginAccessControl" and attribute == "Id":
            return cloudfront_id(physical)
        return f"{physical}.{attribute}"

    def _log_group_name(self, logical_id: str) -> str:
        props = self.template["Resources"][logical_id].get("Properties") or {}
        if "LogGroupName" in props:
            return str(self.value(props["LogGroupName"]))
        return _physical_name(self.stack, logical_id)


# The intrinsic functions the resolver evaluates: a one-key node {name: argument} is resolved by its entry.
_INTRINSICS: dict[str, Callable[[_Resolver, Any], Any]] = {
    "Ref": _Resolver.ref,
    "Fn::GetAtt": _Resolver._fn_get_att,
    "Fn::Sub": _Resolver.sub,
    "Fn::Join": _Resolver._fn_join,
    "Fn::Select": _Resolver._fn_select,
    "Fn::Split": _Resolver._fn_split,
    "Fn::If": _Resolver._fn_if,
    "Fn::Equals": _Resolver._fn_equals,
    "Fn::Not": _Resolver._fn_not,
    "Fn::And": _Resolver._fn_and,
    "Fn::Or": _Resolver._fn_or,
    "Fn::GetAZs": _Resolver._fn_get_azs,
}


def _resolve(translated: dict[str, Any], parameters: dict[str, str], region: str, account: str, stack: str) -> Deployment:
    resolver = _Resolver(translated, parameters, region, account, stack)
    deployment = Deployment(parameters=parameters, region=region, account=account, stack_name=stack)
    for logical_id, resource in translated["Resources"].items():
        condition = resource.get("Condition")
        if condition and not resolver.condition(condition):
            continue
        resolved = dict(resource)
        resolved["Properties"] = resolver.value(resource.get("Properties") or {})
        deployment.resources[logical_id] = resolved
        role = (resource.get("Properties") or {}).get("Role") or (resource.get("Properties") or {}).get("RoleArn")
        if isinstance(role, dict) and "Fn::GetAtt" in role:
            target = role["Fn::GetAtt"]
            deployment.roles_of[logical_id] = (target.split(".", 1) if isinstance(target, str) else target)[0]
    return deployment
