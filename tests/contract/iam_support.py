"""The machinery of tests/contract/test_iam.py: every AWS call the code makes, as IAM evaluates it.

- ``iam_requests`` turns one API call (service, operation, parameters) into the IAM requests AWS
  authorizes for it: the action and the resource ARN (one call can be several requests: a
  DynamoDB transaction is one request per item, a call through a Bedrock cross-region inference
  profile is one for the profile and one per foundation model in each region it routes to).
- ``CallLog`` installs a botocore hook that works those requests out before each call, a
  replacement for moto's permission check that evaluates them (moto still checks the SigV4
  signature and finds the assumed role and its policies; moto's own check compares the action
  with ``Resource: "*"`` only, and knows no transaction), and answers for the services moto does
  not serve or authorize: Bedrock runtime (scripted answers), Step Functions StartSyncExecution and StartExecution
  (the flow's final state) and OpenSearch (a recording cluster behind the signed HTTP request).
  Every request is logged with the role that signed it and the code path that made it.

A call the role does not allow answers ``AccessDenied`` as AWS would, so the code under test sees
the failure it would see in AWS.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from memtool.deploy.iam import Statement, evaluate

REGION = "us-east-1"
ACCOUNT = "123456789012"
# The regions each geography's cross-region inference profiles route to (Bedrock user guide,
# "Supported Regions and models for inference profiles"; the US Anthropic profiles).
PROFILE_REGIONS = {
    "us": ("us-east-1", "us-east-2", "us-west-2"),
    "eu": ("eu-central-1", "eu-west-1", "eu-west-3"),
    "apac": ("ap-northeast-1", "ap-southeast-1", "ap-southeast-2"),
}


@dataclass(frozen=True)
class IamRequest:
    action: str
    resource: str
    context: tuple[tuple[str, str], ...] = ()

    @property
    def context_dict(self) -> dict[str, str]:
        return dict(self.context)

    def __str__(self) -> str:
        extra = "".join(f" [{k}={v}]" for k, v in self.context)
        return f"{self.action} on {self.resource}{extra}"


@dataclass(frozen=True)
class LoggedCall:
    role: str  # the function (or state machine) whose role signed it
    path: str  # the code path: handler and event
    service: str
    operation: str
    requests: tuple[IamRequest, ...]
    denied: tuple[IamRequest, ...]


class UnmappedCall(AssertionError):
    pass


# ---------------------------------------------------------------------------------- API call -> IAM


def _table_arn(table: str, index: str | None = None) -> str:
    arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"
    return f"{arn}/index/{index}" if index else arn


def _queue_arn(url: str) -> str:
    parts = urlsplit(url)
    account, name = parts.path.strip("/").split("/")[-2:]
    return f"arn:aws:sqs:{REGION}:{account}:{name}"


def _secret_arn(secret_id: str) -> str:
    """A secret named, not given by ARN, is authorized as the ARN of that name (found or not: a
    grant on ``secret:<prefix>*`` covers both it and the found secret's ``<name>-AbCdEf``)."""
    return secret_id if secret_id.startswith("arn:") else f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{secret_id}"


def bedrock_requests(action: str, model_id: str) -> list[IamRequest]:
    """What IAM authorizes for an invocation of ``model_id`` (a model id, a profile id or an ARN)."""
    if model_id.startswith("arn:"):
        return [IamRequest(action, model_id)]
    geography, _, base = model_id.partition(".")
    if geography in PROFILE_REGIONS and "." in base:
        profile = f"arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{model_id}"
        through = (("bedrock:InferenceProfileArn", profile),)
        return [IamRequest(action, profile)] + [
            IamRequest(action, f"arn:aws:bedrock:{region}::foundation-model/{base}", through) for region in PROFILE_REGIONS[geography]
        ]
    return [IamRequest(action, f"arn:aws:bedrock:{REGION}::foundation-model/{model_id}")]


def iam_requests(service: str, operation: str, params: dict[str, Any]) -> list[IamRequest]:
    """The IAM requests one API call is authorized as (Service Authorization Reference)."""
    if service == "dynamodb":
        if operation in ("BatchWriteItem", "BatchGetItem"):
            return [IamRequest(f"dynamodb:{operation}", _table_arn(t)) for t in params["RequestItems"]]
        if operation == "TransactWriteItems":
            kinds = {"ConditionCheck": "ConditionCheckItem", "Put": "PutItem", "Update": "UpdateItem", "Delete": "DeleteItem"}
            return [
                IamRequest(f"dynamodb:{kinds[kind]}", _table_arn(body["TableName"]))
                for item in params["TransactItems"]
                for kind, body in item.items()
            ]
        if operation == "TransactGetItems":
            return [IamRequest("dynamodb:GetItem", _table_arn(i["Get"]["TableName"])) for i in params["TransactItems"]]
        if "TableName" in params:
            return [IamRequest(f"dynamodb:{operation}", _table_arn(params["TableName"], params.get("IndexName")))]
    if service == "sqs":
        if operation == "GetQueueUrl":
            return [IamRequest("sqs:GetQueueUrl", f"arn:aws:sqs:{REGION}:{ACCOUNT}:{params['QueueName']}")]
        if "QueueUrl" in params:
            action = "sqs:SendMessage" if operation == "SendMessageBatch" else f"sqs:{operation}"
            return [IamRequest(action, _queue_arn(params["QueueUrl"]))]
    if service == "stepfunctions":
        if "stateMachineArn" in params:
            return [IamRequest(f"states:{operation}", params["stateMachineArn"])]
        if "executionArn" in params:
            return [IamRequest(f"states:{operation}", params["executionArn"])]
    if service == "secretsmanager" and "SecretId" in params:
        return [IamRequest(f"secretsmanager:{operation}", _secret_arn(params["SecretId"]))]
    if service == "bedrock-runtime":
        action = {
            "InvokeModel": "bedrock:InvokeModel",
            "Converse": "bedrock:InvokeModel",
            "InvokeModelWithResponseStream": "bedrock:InvokeModelWithResponseStream",
            "ConverseStream": "bedrock:InvokeModelWithResponseStream",
        }.get(operation)
        if action:
            return bedrock_requests(action, params["modelId"])
    if service == "s3" and "Bucket" in params:
        bucket = f"arn:aws:s3:::{params['Bucket']}"
        if operation == "ListObjectsV2":
            return [IamRequest("s3:ListBucket", bucket)]
        if operation == "DeleteObjects":  # authorized object by object, as s3:DeleteObject
            return [IamRequest("s3:DeleteObject", f"{bucket}/{o['Key']}") for o in params["Delete"]["Objects"]]
        if operation in ("PutObject", "GetObject", "DeleteObject"):
            return [IamRequest(f"s3:{operation}", f"{bucket}/{params['Key']}")]
        if operation == "HeadObject":
            return [IamRequest("s3:GetObject", f"{bucket}/{params['Key']}")]
    if service == "cloudformation" and operation == "DescribeStacks":  # the stack's ARN (its id; the rehearsal's ends in /0)
        name = params["StackName"]
        return [IamRequest("cloudformation:DescribeStacks", name if name.startswith("arn:") else f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/{name}/0")]
    if service == "cloudfront" and operation == "CreateInvalidation":  # CloudFront is global: no Region in its ARNs
        return [IamRequest("cloudfront:CreateInvalidation", f"arn:aws:cloudfront::{ACCOUNT}:distribution/{params['DistributionId']}")]
    if service == "sts" and operation == "GetCallerIdentity":
        return []  # always allowed
    raise UnmappedCall(f"no IAM mapping for {service}:{operation}; add it to iam_requests")


def opensearch_requests(method: str, url: str, signing_service: str) -> list[IamRequest]:
    """aoss: every data-plane call is aoss:APIAccessAll on the collection; es: es:ESHttp<Method> on the path."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if signing_service == "aoss":
        collection = host.split(".", 1)[0]
        return [IamRequest("aoss:APIAccessAll", f"arn:aws:aoss:{REGION}:{ACCOUNT}:collection/{collection}")]
    domain = re.sub(r"^search-(.+)-[a-z0-9]+$", r"\1", host.split(".", 1)[0])
    return [IamRequest(f"es:ESHttp{method.capitalize()}", f"arn:aws:es:{REGION}:{ACCOUNT}:domain/{domain}{parts.path}")]


# ---------------------------------------------------------------------------------- scripted services


def embedding(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    values = [((digest[i % len(digest)] + i * 7) % 97) / 97.0 - 0.5 for i in range(dimensions)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def bedrock_answer(operation: str, params: dict[str, Any]) -> dict[str, Any]:
    """Titan embeddings for InvokeModel, a plain text turn for Converse (the planner falls back to its rules)."""
    from botocore.response import StreamingBody

    if operation == "InvokeModel":
        body = json.loads(params["body"])
        data = json.dumps(
            {"embedding": embedding(body.get("inputText", ""), int(body.get("dimensions", 1024))), "inputTextTokenCount": 4}
        ).encode()
        return {"body": StreamingBody(io.BytesIO(data), len(data)), "contentType": "application/json"}
    if operation == "Converse":
        read = _read_a_source(params)
        if read is not None:  # the planner offers read_source: read the first source it lists, once
            return {
                "output": {"message": {"role": "assistant", "content": [{"toolUse": read}]}},
                "stopReason": "tool_use",
                "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                "metrics": {"latencyMs": 5},
            }
        return {
            "output": {"message": {"role": "assistant", "content": [{"text": "I cannot plan this question."}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
            "metrics": {"latencyMs": 5},
        }
    raise UnmappedCall(f"no scripted Bedrock answer for {operation}")


def _read_a_source(params: dict[str, Any]) -> dict[str, Any] | None:
    offered = [t.get("toolSpec", {}).get("name") for t in (params.get("toolConfig") or {}).get("tools", [])]
    messages = params.get("messages") or []
    if "read_source" not in offered or len(messages) != 1:
        return None
    first = "".join(block.get("text", "") for block in messages[0].get("content", []))
    found = re.search(r'"source_id": "([^"]+)"', first)
    if found is None:
        return None
    return {"toolUseId": "proof-read", "name": "read_source", "input": {"source_id": found.group(1), "limit": 200}}


@dataclass
class FakeCluster:
    """An OpenSearch cluster that answers every call plausibly and records it (no search results)."""

    dimension: int
    requests: list[tuple[str, str]] = field(default_factory=list)
    documents: list[dict[str, Any]] = field(default_factory=list)  # every indexed source, searchable
    pipelines: dict[str, Any] = field(default_factory=dict)

    def answer(self, method: str, path: str, body: bytes | None) -> tuple[int, Any]:
        self.requests.append((method, path))
        segments = [s for s in path.split("/") if s]
        if method == "HEAD":
            return 200, None
        if segments[-1:] == ["_mapping"]:
            return 200, {segments[0]: {"mappings": {"properties": {"vector": {"type": "knn_vector", "dimension": self.dimension}}}}}
        if "_bulk" in segments:
            lines = [json.loads(line) for line in (body or b"").decode().splitlines() if line.strip()]
            items = []
            for number, line in enumerate(lines):
                if "index" in line and number + 1 < len(lines):
                    self.documents.append(lines[number + 1])
                if "index" in line:
                    items.append({"index": {"status": 201, "_id": line["index"].get("_id", "x"), "result": "created"}})
                elif "delete" in line:
                    items.append({"delete": {"status": 200, "_id": line["delete"]["_id"], "result": "deleted"}})
            return 200, {"took": 1, "errors": False, "items": items}
        if segments[:2] == ["_search", "pipeline"]:  # kept once put, as a cluster does
            name = segments[2]
            if method == "PUT":
                self.pipelines[name] = json.loads(body or b"{}")
                return 200, {"acknowledged": True}
            return (200, {name: self.pipelines[name]}) if name in self.pipelines else (404, {"error": "not found"})
        if segments[-1:] == ["_search"]:
            wanted = _filters(json.loads(body) if body else {})
            matching = [d for d in self.documents if "memory_id" in d and all(d.get(k) in v for k, v in wanted.items())]
            hits = [
                {"_id": f"{d['memory_id']}-{d['version']}", "_score": 1.0 / (rank + 1), "_source": d} for rank, d in enumerate(matching)
            ]
            return 200, {"took": 1, "hits": {"total": {"value": len(hits)}, "hits": hits}}
        if segments[-1:] == ["_mget"]:
            return 200, {"docs": []}
        if "_doc" in segments and method == "GET":
            return 404, {"found": False}
        return 200, {"acknowledged": True}


def _filters(query: Any) -> dict[str, list[Any]]:
    """The term/terms filters of a search body (tenant, memory ids): a cluster answers only what matches."""
    found: dict[str, list[Any]] = {}
    if isinstance(query, dict):
        for key, value in query.items():
            if key == "term" and isinstance(value, dict):
                for field_name, wanted in value.items():
                    found[field_name] = [wanted.get("value") if isinstance(wanted, dict) else wanted]
            elif key == "terms" and isinstance(value, dict):
                for field_name, wanted in value.items():
                    if isinstance(wanted, list):
                        found[field_name] = wanted
            else:
                for name, values in _filters(value).items():
                    found.setdefault(name, values)
    elif isinstance(query, list):
        for item in query:
            for name, values in _filters(item).items():
                found.setdefault(name, values)
    return found


# ---------------------------------------------------------------------------------- the call log


def _http_response(status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> Any:
    from botocore.awsrequest import AWSResponse

    class Raw:
        def __init__(self, data: bytes) -> None:
            self._data = io.BytesIO(data)

        def read(self, amt: int | None = None, **_: Any) -> bytes:
            return self._data.read() if amt is None else self._data.read(amt)

        def stream(self, **_: Any) -> Iterator[bytes]:
            yield self._data.read()

    return AWSResponse("https://scripted.invalid", status, headers or {}, Raw(body))


def access_denied(role: str, denied: list[IamRequest]) -> str:
    return f"User: arn:aws:sts::{ACCOUNT}:assumed-role/{role}/proof is not authorized to perform: " + "; ".join(str(r) for r in denied)


@dataclass
class CallLog:
    """Records and authorizes every AWS call signed with a role's credentials."""

    policies: dict[str, list[Statement]]  # role owner -> the statements its role has (what we evaluate)
    sfn_output: Callable[[dict[str, Any]], dict[str, Any]] = lambda params: {}
    calls: list[LoggedCall] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # access key id -> role owner
    path: str = "setup"
    cluster: FakeCluster | None = None
    _pending: threading.local = field(default_factory=threading.local)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- decisions

    def decide(self, access_key: str, service: str, operation: str, requests: list[IamRequest]) -> list[IamRequest]:
        """Log the call and return the requests the signing role is not allowed."""
        role = self.keys.get(access_key)
        if role is None:
            return []  # the harness itself (setup, state reads): not under proof
        statements = self.policies[role]
        denied = [r for r in requests if evaluate(statements, r.action, r.resource, r.context_dict) is None]
        with self._lock:
            self.calls.append(LoggedCall(role, self.path, service, operation, tuple(requests), tuple(denied)))
        return denied

    # -- botocore hooks

    active: bool = False

    def before_parameter_build(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if not self.active:
            return
        service = model.service_model.service_name
        try:
            self._pending.call = (service, model.name, iam_requests(service, model.name, params), None, dict(params))
        except UnmappedCall as exc:
            self._pending.call = (service, model.name, [], exc, dict(params))

    def before_call(self, model: Any, params: dict[str, Any], request_signer: Any, **_: Any) -> Any:
        if not self.active:
            return None
        service = model.service_model.service_name
        scripted = service == "bedrock-runtime" or (service == "stepfunctions" and model.name in ("StartSyncExecution", "StartExecution"))
        if not scripted:
            return None
        pending = getattr(self._pending, "call", None)
        self._pending.call = None
        access_key = request_signer._credentials.get_frozen_credentials().access_key
        if pending is None:
            raise UnmappedCall(f"{service}:{model.name} was not seen before the call")
        name, operation, requests, error, api_params = pending
        if error is not None:
            self._log_unmapped(access_key, name, operation, error)
            raise error
        denied = self.decide(access_key, name, operation, requests)
        if denied:
            payload = {"__type": "AccessDeniedException", "message": access_denied(self.keys.get(access_key, "?"), denied)}
            parsed = {
                "Error": {"Code": "AccessDeniedException", "Message": payload["message"]},
                "ResponseMetadata": {"HTTPStatusCode": 403},
            }
            return _http_response(403, json.dumps(payload).encode()), parsed
        if service == "bedrock-runtime":
            parsed = bedrock_answer(operation, api_params)
        elif operation == "StartExecution":  # a Standard execution: started, answered at once
            parsed = {"executionArn": f"{api_params['stateMachineArn'].replace(':stateMachine:', ':execution:')}:{api_params['name']}",
                      "startDate": datetime.now(UTC)}  # fmt: skip
        else:
            parsed = self._sfn_answer(api_params)
        parsed["ResponseMetadata"] = {"HTTPStatusCode": 200}
        return _http_response(200), parsed

    def _log_unmapped(self, access_key: str, service: str, operation: str, error: Exception) -> None:
        role = self.keys.get(access_key)
        if role is not None:
            with self._lock:
                self.calls.append(LoggedCall(role, self.path, service, operation, (), (IamRequest("UNMAPPED", str(error)),)))

    def _sfn_answer(self, params: dict[str, Any]) -> dict[str, Any]:
        now = datetime.now(UTC)
        output = self.sfn_output(json.loads(params["input"]))
        return {
            "executionArn": f"{params['stateMachineArn'].replace(':stateMachine:', ':express:')}:{params.get('name', 'x')}",
            "startDate": now,
            "stopDate": now,
            "status": "SUCCEEDED",
            "output": json.dumps(output),
        }

    # -- moto's permission check, replaced

    def moto_check(self, iam_request: Any, resource: str) -> None:
        pending = getattr(self._pending, "call", None)
        self._pending.call = None
        access_key = iam_request._access_key._access_key_id if hasattr(iam_request._access_key, "_access_key_id") else None
        if access_key is None:
            access_key = iam_request._access_key.access_key_id if hasattr(iam_request._access_key, "access_key_id") else ""
        if pending is None:
            if iam_request._action == "sts:GetCallerIdentity":
                return
            raise UnmappedCall(f"{iam_request._action}: no call was seen before moto's check")
        service, operation, requests, error, _params = pending
        if error is not None:
            self._log_unmapped(access_key, service, operation, error)
            iam_request._raise_access_denied()
        # The role's policies as moto stores them must be the ones under proof.
        role = self.keys.get(access_key)
        if role is not None:
            stored = _stored_statements(iam_request._access_key.collect_policies())
            expected = [s.as_dict() for s in self.policies[role] if s.managed is None]
            assert stored == expected, f"{role}: the role moto holds differs from the statements under proof"
        if self.decide(access_key, service, operation, requests):
            iam_request._raise_access_denied()

    # -- OpenSearch over requests

    def opensearch_send(self, original: Callable[..., Any]) -> Callable[..., Any]:
        log = self

        def send(adapter: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            host = urlsplit(request.url).hostname or ""
            if not host.endswith((".aoss.amazonaws.com", ".es.amazonaws.com")):
                return original(adapter, request, *args, **kwargs)
            authorization = request.headers.get("Authorization", "")
            scope = re.search(r"Credential=([^/]+)/\d+/([^/]+)/([^/]+)/aws4_request", authorization)
            assert scope, f"unsigned OpenSearch request {request.method} {request.url}"
            access_key, _region, signing_service = scope.groups()
            body = request.body.encode() if isinstance(request.body, str) else request.body
            denied = log.decide(
                access_key,
                signing_service,
                f"{request.method} {urlsplit(request.url).path}",
                opensearch_requests(request.method, request.url, signing_service),
            )
            if denied:
                status, payload = 403, {"status": 403, "message": access_denied(log.keys.get(access_key, "?"), denied)}
            else:
                assert log.cluster is not None
                status, payload = log.cluster.answer(request.method, urlsplit(request.url).path, body)
            import requests

            response = requests.Response()
            response.status_code = status
            response._content = b"" if payload is None else json.dumps(payload).encode()
            response.headers["Content-Type"] = "application/json"
            response.url = request.url
            response.request = request
            return response

        return send

    @contextmanager
    def on(self, path: str) -> Iterator[None]:
        previous, self.path = self.path, path
        try:
            yield
        finally:
            self.path = previous


def _stored_statements(policies: list[Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for policy in policies:
        document = policy if isinstance(policy, (str, dict)) else None
        if document is None:
            continue  # a managed policy object (not attached by this harness)
        parsed = json.loads(document) if isinstance(document, str) else document
        items = parsed["Statement"]
        found.extend(items if isinstance(items, list) else [items])
    return found
