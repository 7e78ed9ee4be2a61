"""Contract tests of the OpenSearch adapter against the wire format opensearch-py really sends.

No cluster runs here. Each test builds a real ``opensearchpy.OpenSearch`` client whose transport
uses a recording connection with scripted responses: opensearch-py serializes every call exactly
as it would for a live cluster (method, path, query parameters, JSON or NDJSON body), the
connection records it and answers from the test's script. An unscripted request fails the test.
What this proves is the request shape and the adapter's reading of responses; it does not prove
that a live cluster accepts the mapping (that needs an OpenSearch >= 2.19 domain).

The SigV4 tests go one layer further down: the factory's real ``RequestsHttpConnection`` signs the
request, and a requests transport adapter records the signed headers instead of sending them.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import requests
from botocore.credentials import Credentials
from memtool.retrieval.index import (
    RRF_RANK_CONSTANT,
    DeleteRef,
    IndexDocument,
    IndexFilter,
    IndexQuery,
    IndexUnavailable,
)
from memtool.retrieval.opensearch_index import (
    IndexWriteError,
    OpenSearchIndex,
    opensearch_client,
)
from opensearchpy import Connection, OpenSearch
from opensearchpy.exceptions import ConnectionError as TransportConnectionError
from opensearchpy.exceptions import ConnectionTimeout, RequestError

INDEX = "memtool-memories"
PIPELINE = "memtool-hybrid"
DIMENSION = 4
EMBEDDER = "hashing-v1/4"


# -- the recording transport -------------------------------------------------------------------


@dataclass
class Recorded:
    method: str
    path: str
    params: dict[str, Any]
    body: Any  # a JSON object, a list of NDJSON lines, or None


@dataclass
class ScriptedCluster:
    """Scripted answers by (method, path); each answer is used once, the last one repeats."""

    requests: list[Recorded] = field(default_factory=list)
    answers: dict[tuple[str, str], list[Any]] = field(default_factory=dict)

    def answer(self, method: str, path: str, status: int = 200, body: Any = None) -> None:
        self.answers.setdefault((method, path), []).append((status, body))

    def fail(self, method: str, path: str, error: Exception) -> None:
        self.answers.setdefault((method, path), []).append(error)

    def respond(self, method: str, path: str, params: dict[str, Any], body: Any) -> tuple[int, Any]:
        self.requests.append(Recorded(method, path, dict(params), _decode(body)))
        queue = self.answers.get((method, path))
        if not queue:
            raise AssertionError(f"unscripted request {method} {path}")
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def sent(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def searches(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/_search")]


class RecordingConnection(Connection):
    """An opensearch-py connection that records each request and answers from the script."""

    def __init__(self, cluster: ScriptedCluster, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cluster = cluster

    def perform_request(  # type: ignore[override]
        self,
        method: str,
        url: str,
        params: Any = None,
        body: Any = None,
        timeout: Any = None,
        ignore: Any = (),
        headers: Any = None,
    ) -> tuple[int, dict[str, str], str]:
        status, payload = self.cluster.respond(method, url, params or {}, body)
        raw = "" if payload is None else json.dumps(payload)
        if not 200 <= status < 300 and status not in ignore:
            self._raise_error(status, raw, "application/json")  # the same exception mapping as http
        return status, {"content-type": "application/json"}, raw


def _decode(body: Any) -> Any:
    if body is None:
        return None
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    if text.endswith("\n"):  # NDJSON, as opensearch-py sends _bulk
        return [json.loads(line) for line in text.splitlines() if line]
    return json.loads(text)


@pytest.fixture
def cluster() -> ScriptedCluster:
    return ScriptedCluster()


@pytest.fixture
def client(cluster: ScriptedCluster) -> OpenSearch:
    return OpenSearch(
        hosts=[{"host": "search.test", "port": 443}],
        connection_class=RecordingConnection,
        cluster=cluster,
        max_retries=0,
    )


@pytest.fixture
def index(client: OpenSearch) -> OpenSearchIndex:
    return OpenSearchIndex(client, dimension=DIMENSION, index=INDEX, pipeline=PIPELINE)


@pytest.fixture
def aoss_index(client: OpenSearch) -> OpenSearchIndex:
    return OpenSearchIndex(client, dimension=DIMENSION, index=INDEX, pipeline=PIPELINE, serverless=True)


def expected_pipeline() -> dict[str, Any]:
    """The score-ranker-processor body as the OpenSearch docs give it (Introduced 2.19)."""
    return {
        "description": "memtool hybrid recall: BM25 and k-NN fused by reciprocal rank",
        "phase_results_processors": [
            {"score-ranker-processor": {"combination": {"technique": "rrf", "rank_constant": RRF_RANK_CONSTANT}}}
        ],
    }


def script_existing_index(cluster: ScriptedCluster, *, dimension: int = DIMENSION, pipeline: bool = True) -> None:
    cluster.answer("HEAD", f"/{INDEX}", 200)
    cluster.answer(
        "GET",
        f"/{INDEX}/_mapping",
        200,
        {INDEX: {"mappings": {"properties": {"vector": {"type": "knn_vector", "dimension": dimension}}}}},
    )
    if pipeline:
        cluster.answer("GET", f"/_search/pipeline/{PIPELINE}", 200, {PIPELINE: expected_pipeline()})


def new_id() -> str:
    return f"mem-{uuid.uuid4().hex[:10]}"


def document(memory_id: str, version: int, *, tenant: str = "acme", vector: list[float] | None = None) -> IndexDocument:
    return IndexDocument(
        memory_id=memory_id,
        version=version,
        tenant=tenant,
        owner="li",
        kind="profile",
        status="active",
        scope="user",
        text="以后默认用元 amounts in yuan",
        vector=vector or [0.5, 0.5, 0.5, 0.5],
        embedder=EMBEDDER,
        key="display.currency_unit",
        tags=("currency",),
        tools=("run_sql",),
        updated_at=datetime(2026, 11, 29, 9, 0, tzinfo=UTC),
    )


def search_answer(*hits: tuple[str, int, float], doc_ids: list[str] | None = None) -> dict[str, Any]:
    return {
        "hits": {
            "total": {"value": len(hits), "relation": "eq"},
            "hits": [
                {
                    "_index": INDEX,
                    "_id": (doc_ids[n] if doc_ids else memory_id),
                    "_score": score,
                    "_source": {"memory_id": memory_id, "version": version, "owner": "li", "kind": "profile"},
                }
                for n, (memory_id, version, score) in enumerate(hits)
            ],
        }
    }


def query(*, text: str = "默认单位 yuan", vector: list[float] | None = None, tenant: str = "acme") -> IndexQuery:
    return IndexQuery(
        filter=IndexFilter(tenant=tenant, owners=("li", "shared"), embedder=EMBEDDER, kinds=("profile", "correction")),
        k=5,
        text=text,
        vector=vector if vector is not None else [0.1, 0.2, 0.3, 0.4],
    )


def guarded(clause: dict[str, Any], tenant: str) -> bool:
    """True when this query clause (and every hybrid sub-query) restricts documents to ``tenant``."""
    if "hybrid" in clause:
        subqueries = clause["hybrid"]["queries"]
        return bool(subqueries) and all(guarded(sub, tenant) for sub in subqueries)
    if "knn" in clause:
        (spec,) = clause["knn"].values()
        return "filter" in spec and guarded(spec["filter"], tenant)
    if "bool" in clause:
        return {"term": {"tenant": tenant}} in clause["bool"].get("filter", [])
    return False


# -- ensure --------------------------------------------------------------------------------------


def test_ensure_creates_faiss_cosine_index_and_rrf_pipeline(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given no index and no pipeline
    cluster.answer("HEAD", f"/{INDEX}", 404)
    cluster.answer("PUT", f"/{INDEX}", 200, {"acknowledged": True, "index": INDEX})
    cluster.answer("GET", f"/_search/pipeline/{PIPELINE}", 404, {})
    cluster.answer("PUT", f"/_search/pipeline/{PIPELINE}", 200, {"acknowledged": True})

    # When
    index.ensure()

    # Then the index is created with k-NN on and faiss HNSW over cosine similarity
    (create,) = cluster.sent("PUT", f"/{INDEX}")
    assert create.body["settings"] == {"index": {"knn": True, "knn.algo_param.ef_search": 100}}
    properties = create.body["mappings"]["properties"]
    assert properties["vector"] == {
        "type": "knn_vector",
        "dimension": DIMENSION,
        "method": {
            "name": "hnsw",
            "engine": "faiss",
            "space_type": "cosinesimil",
            "parameters": {"m": 16, "ef_construction": 128},
        },
    }
    assert properties["text"]["type"] == "text"
    assert properties["text"]["analyzer"] == "standard"
    assert properties["text"]["fields"]["cjk"] == {"type": "text", "analyzer": "cjk"}
    for name in ("memory_id", "tenant", "owner", "kind", "status", "scope", "key", "embedder", "tags", "tools"):
        assert properties[name] == {"type": "keyword"}, name
    assert properties["version"] == {"type": "long"}
    assert properties["updated_at"] == {"type": "date"}
    # and the hybrid pipeline fuses by reciprocal rank with the port's rank constant
    (put,) = cluster.sent("PUT", f"/_search/pipeline/{PIPELINE}")
    assert put.body == expected_pipeline()
    assert put.body["phase_results_processors"][0]["score-ranker-processor"]["combination"]["rank_constant"] == 60


def test_ensure_twice_recreates_nothing(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given the index and an identical pipeline exist
    script_existing_index(cluster)

    # When
    index.ensure()
    index.ensure()

    # Then only reads went out
    assert {r.method for r in cluster.requests} == {"HEAD", "GET"}
    assert len(cluster.sent("GET", f"/_search/pipeline/{PIPELINE}")) == 2


def test_ensure_rewrites_a_pipeline_that_differs(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given the pipeline exists with another rank constant
    cluster.answer("HEAD", f"/{INDEX}", 200)
    cluster.answer("GET", f"/{INDEX}/_mapping", 200, {INDEX: {"mappings": {"properties": {"vector": {"dimension": 4}}}}})
    stale = expected_pipeline()
    stale["phase_results_processors"][0]["score-ranker-processor"]["combination"]["rank_constant"] = 40
    cluster.answer("GET", f"/_search/pipeline/{PIPELINE}", 200, {PIPELINE: stale})
    cluster.answer("PUT", f"/_search/pipeline/{PIPELINE}", 200, {"acknowledged": True})

    # When
    index.ensure()

    # Then the pipeline is put back, the index is left alone
    assert [r.body for r in cluster.sent("PUT", f"/_search/pipeline/{PIPELINE}")] == [expected_pipeline()]
    assert cluster.sent("PUT", f"/{INDEX}") == []


def test_ensure_tolerates_losing_the_creation_race(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    cluster.answer("HEAD", f"/{INDEX}", 404)
    cluster.answer(
        "PUT", f"/{INDEX}", 400, {"error": {"type": "resource_already_exists_exception", "reason": "exists"}, "status": 400}
    )
    cluster.answer("GET", f"/_search/pipeline/{PIPELINE}", 200, {PIPELINE: expected_pipeline()})

    index.ensure()

    assert len(cluster.sent("PUT", f"/{INDEX}")) == 1


def test_ensure_refuses_an_index_built_for_another_dimension(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    script_existing_index(cluster, dimension=1024)

    with pytest.raises(IndexUnavailable, match="1024-dimension vectors but the embedder makes 4"):
        index.ensure()


def test_serverless_ensure_skips_unsupported_settings_and_the_pipeline(
    cluster: ScriptedCluster, aoss_index: OpenSearchIndex
) -> None:
    cluster.answer("HEAD", f"/{INDEX}", 404)
    cluster.answer("PUT", f"/{INDEX}", 200, {"acknowledged": True})

    aoss_index.ensure()

    (create,) = cluster.sent("PUT", f"/{INDEX}")
    assert create.body["settings"] == {"index": {"knn": True}}
    assert create.body["mappings"]["properties"]["vector"]["method"] == {
        "name": "hnsw",
        "engine": "faiss",
        "space_type": "innerproduct",
        "parameters": {"m": 16, "ef_construction": 128, "ef_search": 100},
    }
    assert not [r for r in cluster.requests if r.path.startswith("/_search/pipeline")]


# -- upsert --------------------------------------------------------------------------------------


def test_upsert_sends_one_bulk_with_external_versions(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given
    script_existing_index(cluster)
    first, second = new_id(), new_id()
    cluster.answer(
        "POST",
        f"/{INDEX}/_bulk",
        200,
        {
            "errors": False,
            "items": [
                {"index": {"_id": first, "_version": 3, "result": "created", "status": 201}},
                {"index": {"_id": second, "_version": 1, "result": "updated", "status": 200}},
            ],
        },
    )

    # When
    report = index.upsert([document(first, 3), document(second, 1, tenant="globex")])

    # Then
    assert report.written == [first, second]
    assert report.skipped_stale == []
    (bulk,) = cluster.sent("POST", f"/{INDEX}/_bulk")
    actions, sources = bulk.body[0::2], bulk.body[1::2]
    assert actions == [
        {"index": {"_id": first, "version": 3, "version_type": "external_gte"}},
        {"index": {"_id": second, "version": 1, "version_type": "external_gte"}},
    ]
    assert sources[0] == {
        "memory_id": first,
        "version": 3,
        "tenant": "acme",
        "owner": "li",
        "kind": "profile",
        "status": "active",
        "scope": "user",
        "key": "display.currency_unit",
        "text": "以后默认用元 amounts in yuan",
        "vector": [0.5, 0.5, 0.5, 0.5],
        "embedder": EMBEDDER,
        "tags": ["currency"],
        "tools": ["run_sql"],
        "updated_at": "2026-11-29T09:00:00+00:00",
    }
    assert sources[1]["tenant"] == "globex"


def test_upsert_reports_a_version_conflict_as_stale(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given the cluster holds a newer version of the second memory
    script_existing_index(cluster)
    fresh, stale = new_id(), new_id()
    cluster.answer(
        "POST",
        f"/{INDEX}/_bulk",
        200,
        {
            "errors": True,
            "items": [
                {"index": {"_id": fresh, "result": "created", "status": 201}},
                {
                    "index": {
                        "_id": stale,
                        "status": 409,
                        "error": {
                            "type": "version_conflict_engine_exception",
                            "reason": f"[{stale}]: version conflict, current version [7] is higher than [2]",
                        },
                    }
                },
            ],
        },
    )

    # When
    report = index.upsert([document(fresh, 1), document(stale, 2)])

    # Then nothing is raised and the stale one is reported
    assert report.written == [fresh]
    assert report.skipped_stale == [stale]


def test_upsert_sends_only_the_newest_version_of_a_memory_in_one_batch(
    cluster: ScriptedCluster, index: OpenSearchIndex
) -> None:
    script_existing_index(cluster)
    memory = new_id()
    cluster.answer("POST", f"/{INDEX}/_bulk", 200, {"errors": False, "items": [{"index": {"_id": memory, "status": 200}}]})

    report = index.upsert([document(memory, 4), document(memory, 2)])

    assert report.written == [memory]
    (bulk,) = cluster.sent("POST", f"/{INDEX}/_bulk")
    assert bulk.body[0]["index"]["version"] == 4
    assert len(bulk.body) == 2


def test_upsert_raises_on_other_item_errors(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    script_existing_index(cluster)
    memory = new_id()
    cluster.answer(
        "POST",
        f"/{INDEX}/_bulk",
        200,
        {
            "errors": True,
            "items": [
                {
                    "index": {
                        "_id": memory,
                        "status": 400,
                        "error": {"type": "mapper_parsing_exception", "reason": "bad vector"},
                    }
                }
            ],
        },
    )

    with pytest.raises(IndexWriteError, match="mapper_parsing_exception") as raised:
        index.upsert([document(memory, 1)])
    assert raised.value.memory_id == memory


def test_upsert_throttled_item_is_unavailable_not_a_write_error(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    script_existing_index(cluster)
    memory = new_id()
    cluster.answer(
        "POST",
        f"/{INDEX}/_bulk",
        200,
        {
            "errors": True,
            "items": [{"index": {"_id": memory, "status": 429, "error": {"type": "es_rejected_execution_exception"}}}],
        },
    )

    with pytest.raises(IndexUnavailable, match="retry later"):
        index.upsert([document(memory, 1)])


def test_upsert_creates_a_missing_index_before_the_first_write(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given no index: a plain bulk would auto-create one without the k-NN mapping
    memory = new_id()
    cluster.answer("HEAD", f"/{INDEX}", 404)
    cluster.answer("PUT", f"/{INDEX}", 200, {"acknowledged": True})
    cluster.answer("GET", f"/_search/pipeline/{PIPELINE}", 200, {PIPELINE: expected_pipeline()})
    cluster.answer("POST", f"/{INDEX}/_bulk", 200, {"errors": False, "items": [{"index": {"_id": memory, "status": 201}}]})

    index.upsert([document(memory, 1)])
    index.upsert([document(memory, 2)])

    assert [(r.method, r.path) for r in cluster.requests if r.method != "GET"] == [
        ("HEAD", f"/{INDEX}"),
        ("PUT", f"/{INDEX}"),
        ("POST", f"/{INDEX}/_bulk"),
        ("POST", f"/{INDEX}/_bulk"),
    ]


def test_serverless_upsert_compares_versions_then_replaces_the_old_copy(
    cluster: ScriptedCluster, aoss_index: OpenSearchIndex
) -> None:
    # Given the collection holds version 2 of one memory (under a server-made id) and 9 of another
    script_existing_index(cluster, pipeline=False)
    updated, stale = new_id(), new_id()
    cluster.answer(
        "POST", f"/{INDEX}/_search", 200, search_answer((updated, 2, 0.0), (stale, 9, 0.0), doc_ids=["srv-1", "srv-2"])
    )
    cluster.answer("POST", f"/{INDEX}/_bulk", 200, {"errors": False, "items": [{"index": {"_id": "srv-3", "status": 201}}]})
    cluster.answer("POST", f"/{INDEX}/_bulk", 200, {"errors": False, "items": [{"delete": {"_id": "srv-1", "status": 200}}]})

    # When
    report = aoss_index.upsert([document(updated, 3, vector=[3.0, 0.0, 4.0, 0.0]), document(stale, 8)])

    # Then
    assert report.written == [updated]
    assert report.skipped_stale == [stale]
    (lookup,) = cluster.searches()
    assert lookup.body["query"]["bool"]["filter"] == [
        {"term": {"tenant": "acme"}},
        {"terms": {"memory_id": [updated, stale]}},
    ]
    write, cleanup = cluster.sent("POST", f"/{INDEX}/_bulk")
    assert write.body[0] == {"index": {}}  # Serverless vector collections assign ids
    assert write.body[1]["memory_id"] == updated
    assert write.body[1]["vector"] == pytest.approx([0.6, 0.0, 0.8, 0.0])  # unit length for innerproduct
    assert len(write.body) == 2
    assert cleanup.body == [{"delete": {"_id": "srv-1"}}]


# -- delete and indexed_version ------------------------------------------------------------------


def test_delete_checks_the_tenant_and_keeps_newer_versions(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    # Given three refs: one of this tenant, one whose id belongs to another tenant, one missing
    mine, theirs, missing = new_id(), new_id(), new_id()
    cluster.answer(
        "POST",
        f"/{INDEX}/_mget",
        200,
        {
            "docs": [
                {"_id": mine, "found": True, "_source": {"tenant": "acme"}},
                {"_id": theirs, "found": True, "_source": {"tenant": "globex"}},
                {"_id": missing, "found": False},
            ]
        },
    )
    deleted_item = {"delete": {"_id": mine, "result": "deleted", "status": 200}}
    cluster.answer("POST", f"/{INDEX}/_bulk", 200, {"errors": False, "items": [deleted_item]})

    # When
    deleted = index.delete(
        [DeleteRef(mine, "acme", 4), DeleteRef(theirs, "acme", 4), DeleteRef(missing, "acme", 1)]
    )

    # Then only the tenant's own document is deleted, with the version condition
    assert deleted == 1
    (mget,) = cluster.sent("POST", f"/{INDEX}/_mget")
    assert mget.body == {"ids": [mine, theirs, missing]}
    assert mget.params == {"_source_includes": "tenant"}
    (bulk,) = cluster.sent("POST", f"/{INDEX}/_bulk")
    assert bulk.body == [{"delete": {"_id": mine, "version": 4, "version_type": "external_gte"}}]


def test_delete_leaves_a_newer_version_standing(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    memory = new_id()
    cluster.answer("POST", f"/{INDEX}/_mget", 200, {"docs": [{"_id": memory, "found": True, "_source": {"tenant": "acme"}}]})
    cluster.answer(
        "POST",
        f"/{INDEX}/_bulk",
        200,
        {
            "errors": True,
            "items": [{"delete": {"_id": memory, "status": 409, "error": {"type": "version_conflict_engine_exception"}}}],
        },
    )

    assert index.delete([DeleteRef(memory, "acme", 2)]) == 0


def test_serverless_delete_removes_copies_up_to_the_ref_version(
    cluster: ScriptedCluster, aoss_index: OpenSearchIndex
) -> None:
    memory = new_id()
    cluster.answer(
        "POST", f"/{INDEX}/_search", 200, search_answer((memory, 3, 0.0), (memory, 6, 0.0), doc_ids=["srv-a", "srv-b"])
    )
    cluster.answer("POST", f"/{INDEX}/_bulk", 200, {"errors": False, "items": [{"delete": {"_id": "srv-a", "status": 200}}]})

    assert aoss_index.delete([DeleteRef(memory, "acme", 5)]) == 1

    (bulk,) = cluster.sent("POST", f"/{INDEX}/_bulk")
    assert bulk.body == [{"delete": {"_id": "srv-a"}}]
    assert guarded(cluster.searches()[0].body["query"], "acme")


def test_indexed_version_answers_only_for_the_owning_tenant(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    memory, absent = new_id(), new_id()
    cluster.answer(
        "GET",
        f"/{INDEX}/_doc/{memory}",
        200,
        {"_id": memory, "found": True, "_version": 5, "_source": {"tenant": "acme", "version": 5}},
    )
    cluster.answer("GET", f"/{INDEX}/_doc/{absent}", 404, {"_id": absent, "found": False})

    assert index.indexed_version(memory, "acme") == 5
    assert index.indexed_version(memory, "globex") is None
    assert index.indexed_version(absent, "acme") is None


# -- searches ------------------------------------------------------------------------------------


def test_knn_puts_the_filter_inside_the_knn_clause_and_reports_true_cosine(
    cluster: ScriptedCluster, index: OpenSearchIndex
) -> None:
    # Given
    near, far = new_id(), new_id()
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((near, 2, 0.9), (far, 1, 0.25)))

    # When
    hits = index.knn(query())

    # Then OpenSearch's (1 + cos) / 2 becomes cosine
    assert [(h.memory_id, h.version) for h in hits] == [(near, 2), (far, 1)]
    assert hits[0].cosine == pytest.approx(0.8)
    assert hits[1].cosine == pytest.approx(-0.5)
    (search,) = cluster.searches()
    assert search.body["size"] == 5
    assert set(search.body["query"]) == {"knn"}
    knn = search.body["query"]["knn"]["vector"]
    assert knn["vector"] == [0.1, 0.2, 0.3, 0.4]
    assert knn["k"] == 5
    assert knn["filter"] == {
        "bool": {
            "filter": [
                {"term": {"tenant": "acme"}},
                {"terms": {"owner": ["li", "shared"]}},
                {"term": {"embedder": EMBEDDER}},
                {"terms": {"kind": ["profile", "correction"]}},
            ]
        }
    }
    assert "post_filter" not in search.body


def test_lexical_scores_are_bm25(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    memory = new_id()
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((memory, 1, 7.25)))

    (hit,) = index.lexical(query())

    assert hit.lexical == 7.25
    assert hit.cosine is None
    (search,) = cluster.searches()
    assert search.body["query"]["bool"]["must"] == [
        {"multi_match": {"query": "默认单位 yuan", "fields": ["text", "text.cjk"], "type": "most_fields"}}
    ]


def test_hybrid_runs_through_the_rrf_search_pipeline(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    memory = new_id()
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((memory, 3, 0.0325)))

    (hit,) = index.hybrid(query())

    assert hit.fused == pytest.approx(0.0325)
    (search,) = cluster.searches()
    assert search.params == {"search_pipeline": PIPELINE}
    lexical, knn = search.body["query"]["hybrid"]["queries"]
    assert "multi_match" in lexical["bool"]["must"][0]
    assert knn["knn"]["vector"]["k"] == 5


def test_every_search_carries_the_tenant_filter(
    cluster: ScriptedCluster, index: OpenSearchIndex, aoss_index: OpenSearchIndex
) -> None:
    # Given answers for every kind of search, managed and Serverless
    tenant = f"tenant-{uuid.uuid4().hex[:6]}"
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((new_id(), 1, 0.5)))

    # When each search path runs
    index.knn(query(tenant=tenant))
    index.lexical(query(tenant=tenant))
    index.hybrid(query(tenant=tenant))
    aoss_index.knn(query(tenant=tenant))
    aoss_index.lexical(query(tenant=tenant))
    aoss_index.hybrid(query(tenant=tenant))
    aoss_index.indexed_version(new_id(), tenant)

    # Then every recorded search body restricts every (sub)query to the tenant
    searches = cluster.searches()
    assert len(searches) == 8  # 3 managed, knn + lexical + 2 for hybrid + a version lookup on Serverless
    for search in searches:
        assert guarded(search.body["query"], tenant), search.body


def test_a_query_without_tenant_is_refused_before_sending(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    with pytest.raises(ValueError, match="tenant"):
        index.knn(IndexQuery(filter=IndexFilter(tenant="", owners=("li",), embedder=EMBEDDER), k=3, vector=[1, 0, 0, 0]))
    assert cluster.requests == []


def test_a_zero_query_vector_is_similar_to_nothing(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    assert index.knn(query(vector=[0.0, 0.0, 0.0, 0.0])) == []
    assert cluster.requests == []


def test_serverless_hybrid_fuses_both_lists_by_reciprocal_rank(
    cluster: ScriptedCluster, aoss_index: OpenSearchIndex
) -> None:
    # Given BM25 ranks a over b, k-NN ranks b over c (innerproduct scores)
    a, b, c = new_id(), new_id(), new_id()
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((a, 1, 9.0), (b, 1, 4.0)))
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((b, 1, 1.8), (c, 1, 1 / 1.5)))

    # When
    hits = aoss_index.hybrid(query())

    # Then
    assert [h.memory_id for h in hits] == [b, a, c]
    assert hits[0].fused == pytest.approx(1 / (RRF_RANK_CONSTANT + 2) + 1 / (RRF_RANK_CONSTANT + 1))
    assert hits[0].cosine == pytest.approx(0.8)  # innerproduct score 1 + cos
    assert hits[2].cosine == pytest.approx(-0.5)  # innerproduct score 1 / (1 - cos)
    assert hits[0].lexical == 4.0
    lexical_search, knn_search = cluster.searches()
    assert lexical_search.params == {} and knn_search.params == {}
    assert "bool" in lexical_search.body["query"] and "knn" in knn_search.body["query"]
    assert knn_search.body["query"]["knn"]["vector"]["vector"] == pytest.approx(
        [v / (0.3**0.5) for v in (0.1, 0.2, 0.3, 0.4)]
    )
    assert [h.fused for h in hits] == pytest.approx(
        [1 / (RRF_RANK_CONSTANT + 2) + 1 / (RRF_RANK_CONSTANT + 1), 1 / (RRF_RANK_CONSTANT + 1), 1 / (RRF_RANK_CONSTANT + 2)]
    )


def test_serverless_search_collapses_copies_to_the_newest_version(
    cluster: ScriptedCluster, aoss_index: OpenSearchIndex
) -> None:
    memory = new_id()
    cluster.answer("POST", f"/{INDEX}/_search", 200, search_answer((memory, 2, 1.9), (memory, 3, 1.7), doc_ids=["x", "y"]))

    (hit,) = aoss_index.knn(query())

    assert hit.version == 3
    assert hit.cosine == pytest.approx(0.9)


# -- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "message"),
    [
        (TransportConnectionError("N/A", "Connection refused", OSError("refused")), "cannot reach"),
        (ConnectionTimeout("TIMEOUT", "Read timed out", OSError("timeout")), "timed out"),
        ((503, {"error": {"type": "cluster_block_exception"}, "status": 503}), "503"),
        ((429, {"error": {"type": "too_many_requests"}, "status": 429}), "429"),
        ((403, {"message": "User is not authorized"}), "refused the credentials"),
        ((401, {"message": "Unauthorized"}), "refused the credentials"),
        ((404, {"error": {"type": "index_not_found_exception"}, "status": 404}), "run ensure"),
    ],
)
def test_outages_become_index_unavailable(
    cluster: ScriptedCluster, index: OpenSearchIndex, failure: Any, message: str
) -> None:
    if isinstance(failure, Exception):
        cluster.fail("POST", f"/{INDEX}/_search", failure)
    else:
        cluster.answer("POST", f"/{INDEX}/_search", *failure)

    with pytest.raises(IndexUnavailable, match=message):
        index.hybrid(query())


def test_a_bad_request_is_not_disguised_as_an_outage(cluster: ScriptedCluster, index: OpenSearchIndex) -> None:
    cluster.answer("POST", f"/{INDEX}/_search", 400, {"error": {"type": "parsing_exception"}, "status": 400})

    with pytest.raises(RequestError):
        index.lexical(query())


# -- the signed client ---------------------------------------------------------------------------


class RecordingAdapter(requests.adapters.BaseAdapter):
    """Stands in for the network under requests: keeps the prepared (signed) request, answers 200."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__()
        self.payload = payload
        self.sent: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append(request)
        response = requests.Response()
        response.status_code = 200
        response._content = json.dumps(self.payload).encode()
        response.headers["content-type"] = "application/json"
        response.request = request
        response.url = request.url or ""
        return response

    def close(self) -> None:
        pass


@pytest.fixture
def credentials() -> Credentials:
    return Credentials("AKIDMEMTOOLTEST", "memtool-test-secret", "memtool-test-token")


def signed_search(client: OpenSearch, *, serverless: bool) -> tuple[requests.PreparedRequest, dict[str, Any]]:
    adapter = RecordingAdapter(search_answer())
    client.transport.connection_pool.connection.session.mount("https://", adapter)
    OpenSearchIndex(client, dimension=DIMENSION, serverless=serverless).knn(query())
    (request,) = adapter.sent
    return request, {key.lower(): value for key, value in request.headers.items()}


def test_serverless_client_signs_for_aoss(credentials: Credentials) -> None:
    client = opensearch_client("https://abc123.us-east-1.aoss.amazonaws.com", "us-east-1", "aoss", credentials)

    request, headers = signed_search(client, serverless=True)

    assert request.url is not None and request.url.startswith("https://abc123.us-east-1.aoss.amazonaws.com:443/")
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDMEMTOOLTEST/")
    assert "/us-east-1/aoss/aws4_request" in headers["authorization"]
    assert "x-amz-content-sha256" in headers["authorization"]  # signed, as aoss requires
    assert headers["x-amz-content-sha256"] == hashlib.sha256(request.body or b"").hexdigest()
    assert headers["x-amz-security-token"] == "memtool-test-token"
    assert client.transport.kwargs["http_auth"].service == "aoss"


def test_managed_domain_client_signs_for_es(credentials: Credentials) -> None:
    client = opensearch_client("search-memtool.us-west-2.es.amazonaws.com", "us-west-2", "es", credentials)

    _, headers = signed_search(client, serverless=False)

    assert "/us-west-2/es/aws4_request" in headers["authorization"]


def test_client_takes_credentials_from_the_given_session(credentials: Credentials) -> None:
    class Session:
        def get_credentials(self) -> Credentials:
            return credentials

    session: Any = Session()
    client = opensearch_client("abc.eu-west-1.aoss.amazonaws.com", "eu-west-1", "aoss", session=session)

    _, headers = signed_search(client, serverless=True)
    assert "Credential=AKIDMEMTOOLTEST/" in headers["authorization"]


@pytest.mark.parametrize("endpoint", ["http://search.example.com", ""])
def test_client_requires_an_https_endpoint(credentials: Credentials, endpoint: str) -> None:
    with pytest.raises(ValueError, match="https"):
        opensearch_client(endpoint, "us-east-1", "es", credentials)


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # requests merges proxy settings from the environment; the recording adapter needs none.
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    yield
