"""A scripted double of the Bedrock runtime API, shared by the embedder and planner contract tests.

A real ``bedrock-runtime`` boto3 client serializes, signs and parses as in production; a
``before-send`` event hook records each HTTP request and answers it with a scripted response or
a scripted Bedrock error (status code plus ``x-amzn-errortype``, as the service sends them).
Nothing leaves the process.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSPreparedRequest, AWSResponse, HeadersDict
from botocore.config import Config


@dataclass(frozen=True)
class SentRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def system_text(self) -> str:
        """Converse: the system prompt."""
        return "\n".join(block["text"] for block in self.json["system"])

    @property
    def user_text(self) -> str:
        """Converse: the text of the first (user) message."""
        first = self.json["messages"][0]
        assert first["role"] == "user"
        return "\n".join(block["text"] for block in first["content"] if "text" in block)


@dataclass(frozen=True)
class Scripted:
    status: int
    payload: dict[str, Any]
    error_type: str | None = None


def bedrock_error(status: int, error_type: str, message: str = "scripted") -> Scripted:
    return Scripted(status, {"message": message}, error_type)


class _Raw:
    """The urllib3 body surface botocore reads: ``read`` for output, ``stream`` for errors."""

    def __init__(self, data: bytes) -> None:
        self._buffer = io.BytesIO(data)

    def read(self, amt: int | None = None) -> bytes:
        return self._buffer.read() if amt is None else self._buffer.read(amt)

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._buffer.read()


@dataclass
class ScriptedBedrock:
    """Records every request and answers it through ``respond``."""

    respond: Callable[[SentRequest], Scripted]
    requests: list[SentRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def before_send(self, request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        body = request.body if isinstance(request.body, bytes) else request.body.read()
        sent = SentRequest(
            method=request.method,
            url=request.url,
            headers={k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()},
            body=body,
        )
        with self._lock:
            self.requests.append(sent)
        scripted = self.respond(sent)
        data = json.dumps(scripted.payload).encode()
        headers = HeadersDict({"content-type": "application/json", "content-length": str(len(data))})
        if scripted.error_type:
            headers["x-amzn-errortype"] = f"{scripted.error_type}:http://internal.amazon.com/coral/com.amazon.bedrock/"
        return AWSResponse(request.url, scripted.status, headers, _Raw(data))


def scripted_in_turn(*responses: Scripted, caller: str = "the client") -> Callable[[SentRequest], Scripted]:
    remaining = list(responses)
    lock = threading.Lock()

    def respond(_: SentRequest) -> Scripted:
        with lock:
            if not remaining:
                raise AssertionError(f"{caller} sent more requests than were scripted")
            return remaining.pop(0)

    return respond


def bedrock_runtime_client(double: ScriptedBedrock, operation: str) -> Any:
    """A real bedrock-runtime client whose ``operation`` requests go to the double. botocore's own
    retries are off, so every attempt a test counts is the code's."""
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )
    client.meta.events.register(f"before-send.bedrock-runtime.{operation}", double.before_send)
    return client
