"""Unit tests for EmbeddedIndex: filters inside the search, tenant isolation, versions, persistence,
true cosine, BM25, fusion, Chinese text, concurrency, and the approximate (inverted-file) path."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memtool.retrieval.embedded_index import ApproximateSearch, EmbeddedIndex
from memtool.retrieval.embedders import HashingEmbedder
from memtool.retrieval.index import (
    RRF_RANK_CONSTANT,
    DeleteRef,
    IndexDocument,
    IndexFilter,
    IndexQuery,
)
from memtool.retrieval.lexical import bm25_scores

EMBEDDER = HashingEmbedder(256)
E = EMBEDDER.id


def doc(
    memory_id: str,
    text: str,
    *,
    vector: Sequence[float] | None = None,
    tenant: str = "acme",
    owner: str = "li",
    kind: str = "episodic",
    status: str = "active",
    version: int = 1,
    embedder: str = E,
) -> IndexDocument:
    return IndexDocument(
        memory_id=memory_id,
        version=version,
        tenant=tenant,
        owner=owner,
        kind=kind,
        status=status,
        scope="user",
        text=text,
        vector=list(vector) if vector is not None else EMBEDDER.embed([text])[0],
        embedder=embedder,
        tags=("t:1",),
        tools=("sql",),
    )


def query(
    text: str = "",
    *,
    vector: Sequence[float] | None = None,
    tenant: str = "acme",
    owners: tuple[str, ...] = ("li",),
    kinds: tuple[str, ...] | None = None,
    statuses: tuple[str, ...] | None = None,
    embedder: str = E,
    k: int = 10,
    embed: bool = True,
) -> IndexQuery:
    if vector is None and embed and text:
        vector = EMBEDDER.embed([text])[0]
    return IndexQuery(
        filter=IndexFilter(tenant=tenant, owners=owners, embedder=embedder, kinds=kinds, statuses=statuses),
        k=k,
        text=text,
        vector=vector,
    )


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


@pytest.fixture
def index() -> EmbeddedIndex:
    built = EmbeddedIndex(None)
    built.ensure()
    return built


# ---- filters inside the search -------------------------------------------------------------


def test_k_results_survive_a_filter_that_removes_ninety_percent(index: EmbeddedIndex) -> None:
    # Given 900 documents of another owner right next to the query and 100 of li's further away
    rng = np.random.default_rng(1)
    target = unit(rng.standard_normal(32))
    near = [doc(f"w{i}", "x", vector=unit(target + 0.1 * rng.standard_normal(32)), owner="wang") for i in range(900)]
    far = [doc(f"l{i}", "x", vector=unit(target + 1.5 * rng.standard_normal(32)), owner="li") for i in range(100)]
    index.upsert(near + far)

    # When li asks for 10 neighbours
    hits = index.knn(query(vector=target, owners=("li",), k=10, embedder=E))

    # Then 10 of li's come back, the best of li's first (a post-filter would have returned none)
    assert len(hits) == 10
    assert {h.owner for h in hits} == {"li"}
    li_vectors = {d.memory_id: np.asarray(d.vector) for d in far}
    best = max(li_vectors, key=lambda mid: float(li_vectors[mid] @ target))
    assert hits[0].memory_id == best


def test_owner_filter_returns_only_the_owners_asked_for(index: EmbeddedIndex) -> None:
    index.upsert(
        [
            doc("a", "净收入 默认单位 元", owner="li"),
            doc("b", "净收入 默认单位 万元", owner="wang"),
            doc("c", "净收入 定义 net_amount", owner="_tenant", kind="knowledge"),
        ]
    )

    for search in (index.knn, index.lexical, index.hybrid):
        hits = search(query("净收入", owners=("li", "_tenant")))
        assert {h.memory_id for h in hits} == {"a", "c"}, search.__name__
        assert {h.owner for h in hits} == {"li", "_tenant"}


def test_kinds_and_statuses_filters(index: EmbeddedIndex) -> None:
    index.upsert(
        [
            doc("p1", "退款率 用百分比", kind="profile"),
            doc("e1", "退款率 上月 上海", kind="episodic"),
            doc("c1", "退款率 要扣除 测试订单", kind="correction"),
            doc("c2", "退款率 旧的修正", kind="correction", status="superseded"),
        ]
    )

    by_kind = index.hybrid(query("退款率", kinds=("profile", "correction")))
    assert {h.memory_id for h in by_kind} == {"p1", "c1", "c2"}
    live_corrections = index.lexical(query("退款率", kinds=("correction",), statuses=("active", "approved")))
    assert [h.memory_id for h in live_corrections] == ["c1"]
    assert index.knn(query("退款率", kinds=("working",))) == []


# ---- tenants and embedders -----------------------------------------------------------------


def test_a_query_never_returns_another_tenants_documents(index: EmbeddedIndex) -> None:
    # Given near-identical memories in two tenants, one with the same id in both
    text = "上海 天猫 上月净收入 用万元"
    index.upsert(
        [
            doc("shared-id", text, tenant="acme"),
            doc("shared-id", text + " 另一家", tenant="globex"),
            doc("globex-only", text, tenant="globex"),
        ]
    )

    # When acme searches every way
    for search in (index.knn, index.lexical, index.hybrid):
        hits = search(query(text, tenant="acme"))
        # Then only acme's document comes back
        assert [h.memory_id for h in hits] == ["shared-id"], search.__name__
    assert index.knn(query(text, tenant="initech")) == []

    # And versions and deletes are per tenant too
    assert index.indexed_version("globex-only", "acme") is None
    assert index.delete([DeleteRef("shared-id", "globex", 9)]) == 1
    assert index.indexed_version("shared-id", "acme") == 1
    assert [h.memory_id for h in index.lexical(query(text, tenant="acme"))] == ["shared-id"]


def test_documents_of_another_embedder_are_filtered_out(index: EmbeddedIndex) -> None:
    # Given one memory embedded by our embedder and one by a 128-dimension model
    index.upsert(
        [
            doc("ours", "net revenue last month"),
            doc("theirs", "net revenue last month", vector=[0.1] * 128, embedder="titan-v2/128"),
        ]
    )

    # When querying with our embedder id, every search sees only our document
    for search in (index.knn, index.lexical, index.hybrid):
        assert [h.memory_id for h in search(query("net revenue"))] == ["ours"], search.__name__

    # And a vector of the wrong dimension for the embedder named does not crash: it matches nothing,
    # while the lexical half of hybrid still answers
    wrong = query("net revenue", vector=[0.1] * 128)
    assert index.knn(wrong) == []
    assert [h.memory_id for h in index.hybrid(wrong)] == ["ours"]
    assert [h.memory_id for h in index.knn(query(vector=[0.1] * 128, embedder="titan-v2/128"))] == ["theirs"]


def test_a_batch_with_a_mismatched_dimension_writes_nothing(index: EmbeddedIndex) -> None:
    index.upsert([doc("a", "one")])

    with pytest.raises(ValueError, match="dimensions"):
        index.upsert([doc("b", "two"), doc("c", "three", vector=[1.0] * 64)])

    assert index.indexed_version("b", "acme") is None
    assert index.indexed_version("c", "acme") is None


# ---- versions ------------------------------------------------------------------------------


def test_upsert_and_delete_are_idempotent_by_version(index: EmbeddedIndex) -> None:
    # Given version 2 indexed
    assert index.upsert([doc("m", "以后默认用万元", version=2)]).written == ["m"]

    # When version 1 arrives late, it is skipped and version 2 stays searchable
    late = index.upsert([doc("m", "以后默认用元", version=1)])
    assert late.skipped_stale == ["m"] and late.written == []
    assert index.indexed_version("m", "acme") == 2
    assert [h.version for h in index.lexical(query("万元"))] == [2]
    assert index.lexical(query("默认用元")) and index.lexical(query("默认用元"))[0].version == 2

    # When the same version is written again it is rewritten (a re-index), and a newer one wins
    assert index.upsert([doc("m", "以后默认用百万元", version=2)]).written == ["m"]
    assert index.lexical(query("百万元"))[0].memory_id == "m"
    assert index.upsert([doc("m", "以后默认用亿元", version=3)]).written == ["m"]
    assert index.indexed_version("m", "acme") == 3
    assert index.lexical(query("百万")) == []

    # And a delete carrying an older version leaves the newer document; a current one removes it
    assert index.delete([DeleteRef("m", "acme", 2)]) == 0
    assert index.indexed_version("m", "acme") == 3
    assert index.delete([DeleteRef("m", "acme", 3)]) == 1
    assert index.indexed_version("m", "acme") is None
    assert index.hybrid(query("亿元")) == []


def test_within_one_batch_the_newest_version_wins(index: EmbeddedIndex) -> None:
    report = index.upsert([doc("m", "v3 text", version=3), doc("m", "v1 text", version=1), doc("m", "v4 text", version=4)])

    assert report.skipped_stale == ["m"]
    assert index.indexed_version("m", "acme") == 4
    assert [h.version for h in index.lexical(query("v4"))] == [4]


def test_tombstones_compact_without_changing_answers(index: EmbeddedIndex) -> None:
    # Given 1500 memories, each then rewritten twice (3000 tombstones trigger compaction)
    texts = [f"memory {i} about metric{i % 50} city{i % 7}" for i in range(1500)]
    vectors = EMBEDDER.embed(texts)
    for version in (1, 2, 3):
        index.upsert([doc(f"m{i}", t, vector=v, version=version) for i, (t, v) in enumerate(zip(texts, vectors))])
    stats = index.stats()[f"acme/{E}"]
    assert stats["live"] == 1500 and stats["rows"] < 4500

    # Then every memory is found at its latest version, by text and by vector
    assert index.lexical(query("metric7 city3"))[0].version == 3
    hit = index.knn(query(vector=vectors[42], k=1))[0]
    assert (hit.memory_id, hit.version) == ("m42", 3)
    assert hit.cosine == pytest.approx(1.0, abs=1e-5)


# ---- persistence ---------------------------------------------------------------------------


def test_documents_survive_close_and_reopen(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    first = EmbeddedIndex(folder)
    first.ensure()
    first.upsert([doc(f"m{i}", f"上海 渠道{i} 净收入 {i}", owner="li" if i % 2 else "wang") for i in range(40)])
    first.upsert([doc("m3", "上海 渠道3 净收入 改过", version=2)])
    first.delete([DeleteRef("m5", "acme", 1)])
    probes = [query("净收入 渠道3"), query("渠道7", owners=("li", "wang"), k=5)]
    before = [(first.knn(q), first.lexical(q), first.hybrid(q)) for q in probes]
    first.close()

    reopened = EmbeddedIndex(folder)
    after = [(reopened.knn(q), reopened.lexical(q), reopened.hybrid(q)) for q in probes]

    for (knn_before, lex_before, hyb_before), (knn_after, lex_after, hyb_after) in zip(before, after, strict=True):
        assert [(h.memory_id, h.version) for h in knn_after] == [(h.memory_id, h.version) for h in knn_before]
        assert [h.cosine for h in knn_after] == pytest.approx([h.cosine for h in knn_before], abs=1e-6)
        assert [(h.memory_id, h.lexical) for h in lex_after] == [(h.memory_id, h.lexical) for h in lex_before]
        assert [h.memory_id for h in hyb_after] == [h.memory_id for h in hyb_before]
    assert reopened.indexed_version("m3", "acme") == 2
    assert reopened.indexed_version("m5", "acme") is None
    assert (folder / "index.sqlite3").exists()
    reopened.close()


def test_a_second_handle_sees_writes_made_through_another(tmp_path: Path) -> None:
    writer, reader = EmbeddedIndex(tmp_path), EmbeddedIndex(tmp_path)
    reader.ensure()
    writer.upsert([doc("m1", "订单量 按天")])

    assert [h.memory_id for h in reader.lexical(query("订单量"))] == ["m1"]
    writer.close()
    reader.close()


# ---- scores --------------------------------------------------------------------------------


def test_knn_returns_true_cosine_in_order(index: EmbeddedIndex) -> None:
    rng = np.random.default_rng(7)
    raw = rng.standard_normal((300, 48)) * rng.uniform(0.1, 5.0, size=(300, 1))  # not unit length
    index.upsert([doc(f"m{i}", "x", vector=raw[i]) for i in range(300)])
    probe = rng.standard_normal(48) * 3.0

    hits = index.knn(query(vector=probe, k=25))

    expected = (raw @ probe) / (np.linalg.norm(raw, axis=1) * np.linalg.norm(probe))
    best = np.argsort(-expected)[:25]
    assert [h.memory_id for h in hits] == [f"m{i}" for i in best]
    assert [h.cosine for h in hits] == pytest.approx(expected[best].tolist(), abs=1e-5)
    assert all(h.lexical is None and h.fused is None for h in hits)


def test_bm25_ranks_the_rare_term_first_and_matches_the_reference_formula(index: EmbeddedIndex) -> None:
    texts = [f"net revenue by channel report {i}" for i in range(30)] + ["net revenue with chargebacks"]
    index.upsert([doc(f"m{i}", t) for i, t in enumerate(texts)])

    hits = index.lexical(query("net revenue chargebacks", k=40, embed=False))

    assert hits[0].memory_id == "m30"
    reference = bm25_scores("net revenue chargebacks", texts)
    assert {h.memory_id: h.lexical for h in hits} == pytest.approx({f"m{i}": s for i, s in enumerate(reference)}, rel=1e-5)
    assert all(h.cosine is None for h in hits)


def test_hybrid_fuses_vector_and_lexical_ranks(index: EmbeddedIndex) -> None:
    # Given one memory that only the vector finds and one that only BM25 finds
    rng = np.random.default_rng(3)
    probe = unit(rng.standard_normal(16))
    side = unit(rng.standard_normal(16) - 4 * probe)  # far from the probe
    index.upsert(
        [
            doc("vector-only", "alpha", vector=probe),
            doc("text-only", "gross margin by city", vector=side),
            doc("both", "gross margin alpha", vector=unit(probe + 0.3 * side)),
        ]
    )

    hits = index.hybrid(query("gross margin", vector=probe))

    ids = [h.memory_id for h in hits]
    assert ids[0] == "both" and set(ids) == {"both", "vector-only", "text-only"}
    fused = {h.memory_id: h.fused for h in hits}
    knn_rank = {h.memory_id: r for r, h in enumerate(index.knn(query(vector=probe)), start=1)}
    lex_rank = {h.memory_id: r for r, h in enumerate(index.lexical(query("gross margin")), start=1)}
    for mid in ids:
        expected = sum(1 / (RRF_RANK_CONSTANT + ranks[mid]) for ranks in (knn_rank, lex_rank) if mid in ranks)
        assert fused[mid] == pytest.approx(expected)
    both = next(h for h in hits if h.memory_id == "both")
    assert both.cosine is not None and both.lexical is not None
    assert index.exact_hybrid(query("gross margin", vector=probe)) == hits  # small partitions are exact anyway


def test_chinese_question_finds_net_revenue_memories(index: EmbeddedIndex) -> None:
    index.upsert(
        [
            doc("nr1", "净收入 = 销售额 - 退款 - 优惠券", kind="knowledge", owner="_tenant"),
            doc("nr2", "上海天猫净收入用万元显示", kind="profile"),
            doc("sales", "北京京东销售额按周汇总", kind="episodic"),
            doc("refund", "退款率要扣除测试订单", kind="correction"),
        ]
    )
    question = query("上月净收入", owners=("li", "_tenant"))

    for search in (index.lexical, index.hybrid, index.knn):
        top_two = {h.memory_id for h in search(question)[:2]}
        assert top_two == {"nr1", "nr2"}, search.__name__


# ---- concurrency ---------------------------------------------------------------------------


def test_concurrent_upserts_and_queries(tmp_path: Path) -> None:
    index = EmbeddedIndex(tmp_path)
    vectors = EMBEDDER.embed([f"城市{i % 9} 渠道{i % 5} 销售额 {i}" for i in range(400)])
    errors: list[BaseException] = []
    stop = threading.Event()

    def write(worker: int) -> None:
        try:
            for start in range(0, 100, 10):
                index.upsert(
                    [
                        doc(f"w{worker}-{i}", f"城市{i % 9} 渠道{i % 5} 销售额 {i}", vector=vectors[worker * 100 + i])
                        for i in range(start, start + 10)
                    ]
                )
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    def read() -> None:
        try:
            while not stop.is_set():
                for hit in index.hybrid(query("销售额 城市3", vector=vectors[3], k=5)):
                    assert hit.owner == "li"
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(3)]
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in readers + writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()

    assert errors == []
    assert index.stats()[f"acme/{E}"]["live"] == 400
    assert all(index.indexed_version(f"w{w}-{i}", "acme") == 1 for w in range(4) for i in range(100))
    index.close()


# ---- the approximate path ------------------------------------------------------------------


def clustered_vectors(count: int, dimension: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((60, dimension))
    points = centres[rng.integers(0, 60, count)] + 1.0 * rng.standard_normal((count, dimension))
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


def test_approximate_search_keeps_recall_and_filters() -> None:
    # Given a partition big enough to be clustered (threshold lowered for the test)
    settings = ApproximateSearch(approximate_from=2000, exact_below=100)
    index = EmbeddedIndex(None, approximate=settings)
    vectors = clustered_vectors(6060, 32, seed=5)
    owners = ["li" if i % 10 < 3 else "wang" for i in range(6000)]
    index.upsert([doc(f"m{i}", "x", vector=vectors[i], owner=owners[i]) for i in range(6000)])
    assert index.stats()[f"acme/{E}"]["approximate"] is True

    # When 60 filtered queries from the same distribution run approximately and exactly
    probes = vectors[6000:]
    recalls = []
    for probe in probes:
        q = query(vector=probe, owners=("li",), k=10)
        approximate, exact = index.knn(q), index.exact_knn(q)
        assert len(approximate) == 10 and {h.owner for h in approximate} == {"li"}
        cut = exact[-1].cosine - 1e-6
        recalls.append(sum(h.cosine >= cut for h in approximate) / 10)
        assert [h.cosine for h in approximate] == sorted((h.cosine for h in approximate), reverse=True)

    # Then recall@10 stays high
    assert np.mean(recalls) >= 0.95


def test_approximate_search_sees_new_and_deleted_documents() -> None:
    settings = ApproximateSearch(approximate_from=2000, exact_below=50)
    index = EmbeddedIndex(None, approximate=settings)
    vectors = clustered_vectors(3601, 32, seed=8)
    index.upsert([doc(f"m{i}", f"note {i}", vector=vectors[i]) for i in range(3000)])
    assert index.stats()[f"acme/{E}"]["approximate"] is True
    probe, more = vectors[3000], vectors[3001:]

    # A document written after clustering sits in the tail and is still found first
    index.upsert([doc("newcomer", "note newcomer", vector=probe)])
    assert index.stats()[f"acme/{E}"]["unclustered"] >= 1
    assert index.knn(query(vector=probe, k=3))[0].memory_id == "newcomer"

    # Deleted documents disappear; a regrouping after many writes keeps answers
    best = index.knn(query(vector=probe, k=2))[1].memory_id
    index.delete([DeleteRef(best, "acme", 1)])
    assert best not in {h.memory_id for h in index.knn(query(vector=probe, k=10))}
    index.upsert([doc(f"n{i}", f"note n{i}", vector=more[i]) for i in range(600)])
    assert index.stats()[f"acme/{E}"]["unclustered"] < 600
    assert index.knn(query(vector=probe, k=1))[0].memory_id == "newcomer"
    assert index.lexical(query("newcomer", embed=False))[0].memory_id == "newcomer"


def test_queries_on_an_empty_index_return_nothing(index: EmbeddedIndex) -> None:
    q = query("anything", owners=(f"u-{uuid.uuid4().hex[:6]}",))
    assert index.knn(q) == [] and index.lexical(q) == [] and index.hybrid(q) == []
    assert index.delete([DeleteRef("nope", "acme", 1)]) == 0
    assert index.indexed_version("nope", "acme") is None


def test_a_partition_holds_few_tombstones_and_little_slack(index: EmbeddedIndex) -> None:
    # Given 3000 memories written 100 at a time, then a third of them rewritten three times
    texts = [f"memory {i} about metric{i % 50} city{i % 7}" for i in range(3000)]
    vectors = EMBEDDER.embed(texts)
    for start in range(0, 3000, 100):
        index.upsert([doc(f"m{i}", texts[i], vector=vectors[i]) for i in range(start, start + 100)])
    grown = index.stats()[f"acme/{E}"]
    for version in (2, 3, 4):
        index.upsert([doc(f"m{i}", texts[i], vector=vectors[i], version=version) for i in range(0, 3000, 3)])
    rewritten = index.stats()[f"acme/{E}"]

    # Then the columns grew by quarters, not doublings (4096 would be a doubling of 2048) ...
    assert grown["rows"] == 3000 and 3000 <= int(grown["capacity"]) <= 3000 * 5 // 4
    # ... and the 3000 rewrites left at most an eighth of the rows as tombstones
    assert rewritten["live"] == 3000
    assert int(rewritten["rows"]) - 3000 <= max(256, int(rewritten["rows"]) // 8)
    # ... and answers are the same: untouched memories at version 1, rewritten ones at 4
    top = index.lexical(query("memory 2998 metric48"))[0]
    assert (top.memory_id, top.version) == ("m2998", 1)
    nearest = index.knn(query(vector=vectors[999], k=1))[0]
    assert (nearest.memory_id, nearest.version) == ("m999", 4)
