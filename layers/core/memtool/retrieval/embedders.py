"""Embedders behind one port: Bedrock Titan Text Embeddings V2 in AWS, a hashing embedder locally."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from memtool.bedrock import RETRYABLE_ERRORS, BedrockRetry


class Embedder(Protocol):
    @property
    def id(self) -> str:
        """Names the model and dimension, e.g. ``hashing-v1/256``; stored on every indexed document."""

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One L2-normalized vector per text, in order."""


class HashingEmbedder:
    """Character n-grams plus word tokens, hashed with signs into a dense vector (a sparse random
    projection), L2-normalized. Deterministic across processes and machines; downloads nothing.
    """

    VERSION = "hashing-v1"

    def __init__(self, dimension: int = 256) -> None:
        if dimension < 16:
            raise ValueError("dimension must be at least 16")
        self._dimension = dimension

    @property
    def id(self) -> str:
        return f"{self.VERSION}/{self._dimension}"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        import hashlib
        import math

        from memtool.retrieval.text import features

        counts: dict[str, int] = {}
        for feature in features(text):
            counts[feature] = counts.get(feature, 0) + 1
        vector = [0.0] * self._dimension
        for feature, count in counts.items():
            digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "big")
            weight = 1.0 + math.log(count)
            vector[digest % self._dimension] += weight if digest >> 63 else -weight
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm else vector


class BedrockRuntimeClient(Protocol):
    """The slice of boto3's ``bedrock-runtime`` client the Titan embedder calls."""

    def invoke_model(self, **kwargs: Any) -> dict[str, Any]: ...


class EmbeddingResponseError(RuntimeError):
    """Bedrock answered, but not with a usable vector (wrong length, missing, zero or non-finite)."""


RETRYABLE_ERROR_CODES = RETRYABLE_ERRORS  # the one retry policy's codes (memtool.bedrock)


class BedrockTitanEmbedder:
    """Amazon Titan Text Embeddings V2 through ``bedrock-runtime`` ``InvokeModel``.

    Titan V2 embeds one text per call, so ``embed`` fans the texts out over a bounded thread pool
    and returns the vectors in input order. Retryable Bedrock errors are retried with exponential
    backoff and jitter (``memtool.bedrock.BedrockRetry``; the last error is raised as botocore
    raised it); the client's own botocore retries (on by default, including for
    throttling) run underneath each attempt, so callers that want only this policy should build
    the client with ``Config(retries={"total_max_attempts": 1})``.
    """

    DEFAULT_MODEL_ID = "amazon.titan-embed-text-v2:0"
    SUPPORTED_DIMENSIONS = (256, 512, 1024)
    MAX_INPUT_CHARS = 50_000

    def __init__(
        self,
        client: BedrockRuntimeClient,
        *,
        model_id: str = DEFAULT_MODEL_ID,
        dimensions: int = 1024,
        max_workers: int = 4,
        max_attempts: int = 5,
        base_delay: float = 0.25,
        max_delay: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        """``max_attempts``, ``base_delay``, ``max_delay``, ``sleep`` and ``jitter`` are the retry
        policy (``memtool.bedrock.BedrockRetry``): ``jitter`` returns a float in [0, 1); the
        wait before retry *n* (1-based) is ``cap/2 + jitter()*cap/2`` with
        ``cap = min(max_delay, base_delay * 2**(n-1))``, so waits grow until they reach
        ``max_delay`` while concurrent callers still spread out."""
        if not model_id:
            raise ValueError("model_id must not be empty")
        if dimensions not in self.SUPPORTED_DIMENSIONS:
            raise ValueError(f"dimensions must be one of {self.SUPPORTED_DIMENSIONS}, got {dimensions}")
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._retry = BedrockRetry(max_attempts, base_delay, max_delay, sleep, jitter)
        self._client = client
        self._model_id = model_id
        self._dimensions = dimensions
        self._max_workers = max_workers

    @property
    def id(self) -> str:
        return f"bedrock:{self._model_id}/{self._dimensions}"

    @property
    def dimension(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # Validate everything before the first call, so a bad batch costs no model invocations.
        prepared = [self._prepare(index, text) for index, text in enumerate(texts)]
        if len(prepared) <= 1:
            return [self._embed_one(text) for text in prepared]

        from concurrent.futures import ThreadPoolExecutor

        workers = min(self._max_workers, len(prepared))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="titan-embed") as pool:
            futures = [pool.submit(self._embed_one, text) for text in prepared]
            try:
                return [future.result() for future in futures]
            except BaseException:
                # Do not keep paying for a batch that has already failed.
                for future in futures:
                    future.cancel()
                raise

    def _prepare(self, index: int, text: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] must be a string, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"texts[{index}] is empty or whitespace; Titan cannot embed it")
        return text[: self.MAX_INPUT_CHARS]

    def _embed_one(self, text: str) -> list[float]:
        body = json.dumps(
            {"inputText": text, "dimensions": self._dimensions, "normalize": True, "embeddingTypes": ["float"]},
            ensure_ascii=False,
        ).encode("utf-8")
        response = self._retry.call(
            lambda: self._client.invoke_model(
                modelId=self._model_id,
                body=body,
                contentType="application/json",
                accept="application/json",
            )
        )
        return self._vector_from(response)

    def _vector_from(self, response: dict[str, Any]) -> list[float]:
        payload = json.loads(response["body"].read())
        vector = payload.get("embedding")
        if vector is None:
            vector = (payload.get("embeddingsByType") or {}).get("float")
        if not isinstance(vector, list):
            raise EmbeddingResponseError(f"{self._model_id} returned no float embedding")
        if len(vector) != self._dimensions:
            raise EmbeddingResponseError(
                f"{self._model_id} returned {len(vector)} dimensions, expected {self._dimensions}"
            )
        values = [float(v) for v in vector]
        # Titan normalizes when asked; re-normalizing costs little and keeps cosine == dot product.
        norm = math.sqrt(math.fsum(v * v for v in values))
        if not math.isfinite(norm) or norm == 0.0:
            raise EmbeddingResponseError(f"{self._model_id} returned a zero or non-finite vector")
        return [v / norm for v in values]
