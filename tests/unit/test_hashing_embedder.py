"""Unit tests for HashingEmbedder: deterministic, normalized, and close for close phrasings."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from memtool.retrieval.embedders import Embedder, HashingEmbedder

TEXTS = ["上个月各渠道净收入", "weekly active users by region", "orders.net_revenue 2026-10", "", "混合 mixed 文本"]


def cosine(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_identical_in_a_fresh_process() -> None:
    # Given vectors computed here
    here = HashingEmbedder(256).embed(TEXTS)

    # When another interpreter (its own str hash seed) embeds the same texts
    script = (
        "import json, sys\n"
        "from memtool.retrieval.embedders import HashingEmbedder\n"
        "texts = json.loads(sys.stdin.read())\n"
        "print(json.dumps(HashingEmbedder(256).embed(texts)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(TEXTS),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    there = json.loads(done.stdout)

    # Then every float matches exactly (JSON round-trips Python floats losslessly)
    assert there == here


@pytest.mark.parametrize("dimension", [16, 64, 256, 1024])
def test_vectors_have_the_requested_dimension_and_unit_norm(dimension: int) -> None:
    embedder = HashingEmbedder(dimension)

    vectors = embedder.embed([t for t in TEXTS if t])

    assert embedder.dimension == dimension
    for vector in vectors:
        assert len(vector) == dimension
        assert math.sqrt(math.fsum(v * v for v in vector)) == pytest.approx(1.0, abs=1e-12)


def test_same_text_in_one_batch_gives_the_same_vector() -> None:
    first, second = HashingEmbedder(128).embed(["净收入", "净收入"])

    assert first == second


@pytest.mark.parametrize("empty", ["", "   ", "?!。，"])
def test_text_without_features_gives_a_zero_vector(empty: str) -> None:
    [vector] = HashingEmbedder(64).embed([empty])

    assert vector == [0.0] * 64


def test_empty_batch_gives_no_vectors() -> None:
    assert HashingEmbedder().embed([]) == []


def test_similar_chinese_phrasings_are_closer_than_an_unrelated_question() -> None:
    base, rephrased, unrelated = HashingEmbedder(256).embed(
        ["上个月各渠道净收入", "上月各渠道的净收入是多少", "北京的天气怎么样"]
    )

    assert cosine(base, rephrased) > 0.4
    assert cosine(base, rephrased) > cosine(base, unrelated) + 0.3
    assert cosine(rephrased, base) > cosine(rephrased, unrelated) + 0.3


def test_english_plural_and_singular_are_close() -> None:
    plural, singular, unrelated = HashingEmbedder(256).embed(
        ["net revenues by channels", "net revenue by channel", "weather forecast in Beijing"]
    )

    assert cosine(plural, singular) > 0.6
    assert cosine(plural, singular) > cosine(plural, unrelated) + 0.4


def test_id_names_the_version_and_dimension() -> None:
    assert HashingEmbedder(384).id == "hashing-v1/384"
    assert HashingEmbedder().id == "hashing-v1/256"
    assert HashingEmbedder(64).id != HashingEmbedder(128).id


@pytest.mark.parametrize("dimension", [0, 1, 15])
def test_dimension_below_16_is_rejected(dimension: int) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        HashingEmbedder(dimension)


def test_it_satisfies_the_embedder_port() -> None:
    embedder: Embedder = HashingEmbedder(32)

    assert len(embedder.embed(["x"])[0]) == embedder.dimension
