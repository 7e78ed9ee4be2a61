"""Contract tests for BedrockTitanEmbedder against the HTTP requests botocore really sends.

Bedrock here is a scripted double, not the service: a real ``bedrock-runtime`` boto3 client
serializes, signs and parses as in production, and a ``before-send`` event hook records each
HTTP request and answers it with a scripted Titan V2 response or a scripted Bedrock error
(status code plus ``x-amzn-errortype``, as the service sends them). Nothing leaves the process.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError
from memtool.retrieval.embedders import BedrockTitanEmbedder, EmbeddingResponseError

from tests.contract.bedrock_double import (
    Scripted,
    ScriptedBedrock,
    SentRequest,
    bedrock_error,
    bedrock_runtime_client,
    scripted_in_turn,
)

MODEL_ID = "amazon.titan-embed-text-v2:0"
INVOKE_URL = "https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.titan-embed-text-v2%3A0/invoke"

# --------------------------------------------------------------------------- the scripted double


def titan_ok(vector: list[float], tokens: int = 5) -> Scripted:
    """What Titan V2 returns for ``embeddingTypes: ["float"]``: the vector twice, plus a token count."""
    return Scripted(200, {"embedding": vector, "embeddingsByType": {"float": vector}, "inputTextTokenCount": tokens})



def bedrock_client(double: ScriptedBedrock) -> Any:
    return bedrock_runtime_client(double, "InvokeModel")


def unit(dimension: int, index: int) -> list[float]:
    vector = [0.0] * dimension
    vector[index] = 1.0
    return vector


class SleepRecorder:
    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# --------------------------------------------------------------------------- request shape


def test_invoke_model_request_is_the_titan_v2_shape() -> None:
    # Given a Titan embedder at 256 dimensions over a scripted Bedrock
    double = ScriptedBedrock(scripted_in_turn(titan_ok(unit(256, 7))))
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=256)

    # When one Chinese question is embedded
    vectors = embedder.embed(["上个月各渠道净收入"])

    # Then exactly one POST to the model's invoke path carries the documented body
    assert len(double.requests) == 1
    sent = double.requests[0]
    assert sent.method == "POST"
    assert sent.url == INVOKE_URL
    assert sent.headers["Content-Type"] == "application/json"
    assert sent.headers["Accept"] == "application/json"
    assert sent.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=x/")
    assert "/us-east-1/bedrock/aws4_request" in sent.headers["Authorization"]
    assert sent.json == {
        "inputText": "上个月各渠道净收入",
        "dimensions": 256,
        "normalize": True,
        "embeddingTypes": ["float"],
    }
    assert list(sent.json) == ["inputText", "dimensions", "normalize", "embeddingTypes"]
    # And the scripted vector comes back as the result
    assert vectors == [unit(256, 7)]


def test_configured_model_id_goes_into_the_path_and_the_id() -> None:
    double = ScriptedBedrock(scripted_in_turn(titan_ok(unit(512, 0))))
    embedder = BedrockTitanEmbedder(bedrock_client(double), model_id="us.amazon.titan-embed-text-v2:0", dimensions=512)

    embedder.embed(["net revenue"])

    assert double.requests[0].url.endswith("/model/us.amazon.titan-embed-text-v2%3A0/invoke")
    assert double.requests[0].json["dimensions"] == 512
    assert embedder.id == "bedrock:us.amazon.titan-embed-text-v2:0/512"


def test_input_longer_than_the_model_limit_is_truncated_to_50000_chars() -> None:
    double = ScriptedBedrock(scripted_in_turn(titan_ok(unit(1024, 1))))
    embedder = BedrockTitanEmbedder(bedrock_client(double))
    text = "收入" * 30_000  # 60,000 characters

    embedder.embed([text])

    assert double.requests[0].json["inputText"] == text[:50_000]
    assert len(double.requests[0].json["inputText"]) == 50_000


@pytest.mark.parametrize("blank", ["", "   ", "\n\t"])
def test_empty_or_whitespace_text_is_rejected_by_index_before_any_call(blank: str) -> None:
    double = ScriptedBedrock(scripted_in_turn())
    embedder = BedrockTitanEmbedder(bedrock_client(double))

    with pytest.raises(ValueError, match=r"texts\[2\]"):
        embedder.embed(["a", "b", blank, "d"])

    assert double.requests == []


def test_empty_batch_sends_nothing() -> None:
    double = ScriptedBedrock(scripted_in_turn())
    embedder = BedrockTitanEmbedder(bedrock_client(double))

    assert embedder.embed([]) == []
    assert double.requests == []


# --------------------------------------------------------------------------- client-side batching


def test_order_is_preserved_across_the_thread_pool_and_concurrency_is_bounded() -> None:
    # Given a double that answers text-i with the unit vector e_i, holds the first four requests
    # at a barrier (so the test fails unless four run at once) and answers earlier texts slower
    count, workers = 12, 4
    barrier = threading.Barrier(workers)
    lock = threading.Lock()
    state = {"arrived": 0, "in_flight": 0, "peak": 0}
    completed: list[int] = []

    def respond(sent: SentRequest) -> Scripted:
        index = int(sent.json["inputText"].removeprefix("text-"))
        with lock:
            arrival = state["arrived"]
            state["arrived"] += 1
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        if arrival < workers:
            barrier.wait(timeout=5)
        time.sleep((count - index) * 0.004)
        with lock:
            state["in_flight"] -= 1
            completed.append(index)
        return titan_ok(unit(256, index))

    double = ScriptedBedrock(respond)
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=256, max_workers=workers)

    # When twelve texts are embedded
    vectors = embedder.embed([f"text-{i}" for i in range(count)])

    # Then vector i belongs to text i although the answers arrived out of order
    assert vectors == [unit(256, i) for i in range(count)]
    assert completed != sorted(completed)
    # And no more than max_workers calls were ever in flight
    assert state["peak"] == workers
    assert len(double.requests) == count


def test_a_failure_in_the_batch_raises_and_the_rest_is_not_sent() -> None:
    def respond(sent: SentRequest) -> Scripted:
        if sent.json["inputText"] == "text-0":
            return bedrock_error(400, "ValidationException", "Malformed input request")
        time.sleep(0.01)
        return titan_ok(unit(256, 0))

    double = ScriptedBedrock(respond)
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=256, max_workers=2)

    with pytest.raises(ClientError) as raised:
        embedder.embed([f"text-{i}" for i in range(40)])

    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert len(double.requests) < 40


# --------------------------------------------------------------------------- retries


def test_throttling_twice_then_success_retries_with_growing_delays() -> None:
    # Given Bedrock throttles twice before answering
    double = ScriptedBedrock(
        scripted_in_turn(
            bedrock_error(429, "ThrottlingException", "Too many requests, please wait before trying again."),
            bedrock_error(429, "ThrottlingException", "Too many requests, please wait before trying again."),
            titan_ok(unit(1024, 3)),
        )
    )
    sleep = SleepRecorder()
    embedder = BedrockTitanEmbedder(bedrock_client(double), sleep=sleep, base_delay=0.5, max_delay=30.0)

    # When one text is embedded
    vectors = embedder.embed(["weekly active users"])

    # Then three identical requests were sent, with two waits that grow, and the vector returned
    assert vectors == [unit(1024, 3)]
    assert len(double.requests) == 3
    assert len({r.body for r in double.requests}) == 1
    assert len(sleep.delays) == 2
    assert 0 < sleep.delays[0] < sleep.delays[1]
    assert 0.25 <= sleep.delays[0] < 0.5 <= sleep.delays[1] < 1.0


def test_backoff_is_capped_by_max_delay_and_gives_up_after_max_attempts() -> None:
    double = ScriptedBedrock(lambda _: bedrock_error(429, "ThrottlingException"))
    sleep = SleepRecorder()
    embedder = BedrockTitanEmbedder(
        bedrock_client(double), max_attempts=6, base_delay=1.0, max_delay=4.0, sleep=sleep, jitter=lambda: 0.999
    )

    with pytest.raises(ClientError) as raised:
        embedder.embed(["x"])

    assert raised.value.response["Error"]["Code"] == "ThrottlingException"
    assert len(double.requests) == 6
    assert len(sleep.delays) == 5
    assert sleep.delays == sorted(sleep.delays)
    assert max(sleep.delays) <= 4.0
    assert sleep.delays[-1] == sleep.delays[-2]  # the cap was reached


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "ThrottlingException"),
        (503, "ServiceUnavailableException"),
        (429, "ModelNotReadyException"),
        (500, "InternalServerException"),
        (408, "ModelTimeoutException"),
    ],
)
def test_each_transient_bedrock_error_is_retried(status: int, code: str) -> None:
    double = ScriptedBedrock(scripted_in_turn(bedrock_error(status, code), titan_ok(unit(256, 0))))
    sleep = SleepRecorder()
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=256, sleep=sleep)

    assert embedder.embed(["x"]) == [unit(256, 0)]
    assert len(double.requests) == 2
    assert len(sleep.delays) == 1


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "ValidationException"), (403, "AccessDeniedException"), (404, "ResourceNotFoundException")],
)
def test_non_retryable_error_raises_at_once(status: int, code: str) -> None:
    double = ScriptedBedrock(scripted_in_turn(bedrock_error(status, code, "Malformed input request")))
    sleep = SleepRecorder()
    embedder = BedrockTitanEmbedder(bedrock_client(double), sleep=sleep)

    with pytest.raises(ClientError) as raised:
        embedder.embed(["x"])

    assert raised.value.response["Error"]["Code"] == code
    assert len(double.requests) == 1
    assert sleep.delays == []


# --------------------------------------------------------------------------- response checks


def test_wrong_dimension_response_raises_without_retrying() -> None:
    double = ScriptedBedrock(scripted_in_turn(titan_ok([1.0] + [0.0] * 511)))
    sleep = SleepRecorder()
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=1024, sleep=sleep)

    with pytest.raises(EmbeddingResponseError, match="512 dimensions, expected 1024"):
        embedder.embed(["x"])

    assert len(double.requests) == 1
    assert sleep.delays == []


def test_embeddings_by_type_is_read_when_embedding_is_absent_and_the_vector_is_renormalized() -> None:
    raw = [3.0, 4.0] + [0.0] * 254
    double = ScriptedBedrock(scripted_in_turn(Scripted(200, {"embeddingsByType": {"float": raw}})))
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=256)

    [vector] = embedder.embed(["x"])

    assert vector[:2] == pytest.approx([0.6, 0.8])
    assert math.fsum(v * v for v in vector) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "payload",
    [{"inputTextTokenCount": 1}, {"embedding": [0.0] * 256}, {"embedding": [float("nan")] + [0.0] * 255}],
    ids=["missing", "zero", "nan"],
)
def test_unusable_vector_raises(payload: dict[str, Any]) -> None:
    double = ScriptedBedrock(scripted_in_turn(Scripted(200, payload)))
    embedder = BedrockTitanEmbedder(bedrock_client(double), dimensions=256)

    with pytest.raises(EmbeddingResponseError):
        embedder.embed(["x"])


# --------------------------------------------------------------------------- properties


def test_id_and_dimension_name_the_model_and_size() -> None:
    client = bedrock_client(ScriptedBedrock(scripted_in_turn()))

    default = BedrockTitanEmbedder(client)
    small = BedrockTitanEmbedder(client, dimensions=256)

    assert default.id == f"bedrock:{MODEL_ID}/1024"
    assert default.dimension == 1024
    assert small.id == f"bedrock:{MODEL_ID}/256"
    assert small.dimension == 256


@pytest.mark.parametrize(
    "kwargs",
    [{"dimensions": 768}, {"max_workers": 0}, {"max_attempts": 0}, {"model_id": ""}],
    ids=["dimensions", "max_workers", "max_attempts", "model_id"],
)
def test_invalid_settings_are_rejected(kwargs: dict[str, Any]) -> None:
    client = bedrock_client(ScriptedBedrock(scripted_in_turn()))

    with pytest.raises(ValueError):
        BedrockTitanEmbedder(client, **kwargs)
