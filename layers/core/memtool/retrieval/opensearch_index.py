"""The OpenSearch adapter of the vector index port: faiss HNSW k-NN, BM25 and RRF hybrid in one index.

Two deployments, one class (``serverless`` chooses):

* Managed domains (SigV4 service ``es``, OpenSearch >= 2.19). The document ``_id`` is the memory
  id and writes use external versioning (``version_type=external_gte``), so the cluster itself
  refuses to let an older version overwrite a newer one. Vectors use faiss HNSW with
  ``cosinesimil`` (faiss supports it from 2.19). Hybrid search runs server-side through a search
  pipeline with the ``score-ranker-processor`` (RRF, rank constant 60, also from 2.19).
* Serverless vector-search collections (SigV4 service ``aoss``). They assign their own document
  ids, have no external versioning, no refresh, and their hybrid pipelines offer only the
  ``normalization-processor``. So here a memory is found by its ``memory_id`` field, versions are
  compared client-side (read, compare, write), vectors are unit-normalized and searched with
  faiss ``innerproduct`` (equal to cosine on unit vectors, and available on every faiss version),
  and hybrid runs the BM25 and k-NN queries separately and fuses them with
  :func:`reciprocal_rank_fusion`, the same RRF the managed pipeline computes.

Every search carries the tenant filter inside the query (inside the ``knn`` clause for vectors, so
k results survive it). Outages, throttling and refused credentials surface as
:class:`IndexUnavailable`; callers degrade visibly instead of reporting "nothing found".
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NoReturn
from urllib.parse import urlsplit

from opensearchpy import OpenSearch, RequestsAWSV4SignerAuth, RequestsHttpConnection
from opensearchpy.exceptions import (
    AuthenticationException,
    AuthorizationException,
    ConnectionTimeout,
    NotFoundError,
    RequestError,
    TransportError,
)
from opensearchpy.exceptions import ConnectionError as TransportConnectionError

from memtool.retrieval.index import (
    RRF_RANK_CONSTANT,
    DeleteRef,
    IndexDocument,
    IndexHit,
    IndexQuery,
    IndexUnavailable,
    UpsertReport,
    reciprocal_rank_fusion,
)

if TYPE_CHECKING:
    import boto3
    from botocore.credentials import Credentials

DEFAULT_INDEX = "memtool-memories"
DEFAULT_PIPELINE = "memtool-hybrid"
HIT_FIELDS = ["memory_id", "version", "owner", "kind"]
# Serverless lookups by memory_id read at most this many copies; a search returns at most 10,000.
MAX_LOOKUP = 10_000


class IndexWriteError(RuntimeError):
    """OpenSearch rejected a document for a reason a retry will not fix (mapping, vector, request)."""

    def __init__(self, memory_id: str, status: int, error: Mapping[str, Any] | None) -> None:
        self.memory_id = memory_id
        self.status = status
        self.error_type = str((error or {}).get("type", "unknown"))
        self.reason = str((error or {}).get("reason", ""))
        super().__init__(f"indexing {memory_id} failed ({status} {self.error_type}): {self.reason}")


@dataclass(frozen=True)
class _Copy:
    """One stored document of a memory on Serverless (normally one; more after a lost race)."""

    doc_id: str
    memory_id: str
    version: int


class OpenSearchIndex:
    """:class:`~memtool.retrieval.index.VectorIndex` over one OpenSearch index (managed or Serverless)."""

    def __init__(
        self,
        client: OpenSearch,
        *,
        dimension: int,
        index: str = DEFAULT_INDEX,
        m: int = 16,
        ef_construction: int = 128,
        ef_search: int = 100,
        pipeline: str = DEFAULT_PIPELINE,
        serverless: bool = False,
    ) -> None:
        if dimension < 1:
            raise ValueError("dimension must be positive")
        if not 2 <= m <= 100:
            raise ValueError("m must be between 2 and 100")
        if ef_construction < 1 or ef_search < 1:
            raise ValueError("ef_construction and ef_search must be positive")
        self._client = client
        self._index = index
        self._dimension = dimension
        self._m = m
        self._ef_construction = ef_construction
        self._ef_search = ef_search
        self._pipeline = pipeline
        self._serverless = serverless
        self._ensured = False

    # -- setup ---------------------------------------------------------------------------------

    def ensure(self) -> None:
        with self._answering("create the index"):
            if self._client.indices.exists(index=self._index):
                self._check_dimension()
            else:
                try:
                    self._client.indices.create(index=self._index, body=self._index_body())
                except RequestError as error:
                    if error.error != "resource_already_exists_exception":  # lost a race: fine
                        raise
            if not self._serverless:
                # Serverless hybrid pipelines offer only the normalization-processor, not RRF;
                # hybrid() fuses client-side there, so no pipeline is created.
                self._ensure_pipeline()
        self._ensured = True

    def _index_body(self) -> dict[str, Any]:
        parameters: dict[str, Any] = {"m": self._m, "ef_construction": self._ef_construction}
        index_settings: dict[str, Any] = {"knn": True}
        if self._serverless:
            # Serverless takes no k-NN index settings beyond index.knn; faiss also reads ef_search
            # from the method parameters, where Serverless accepts it.
            parameters["ef_search"] = self._ef_search
        else:
            index_settings["knn.algo_param.ef_search"] = self._ef_search  # dynamic: tunable later
        keyword = {"type": "keyword"}
        return {
            "settings": {"index": index_settings},
            "mappings": {
                "dynamic": False,
                "properties": {
                    "vector": {
                        "type": "knn_vector",
                        "dimension": self._dimension,
                        "method": {
                            "name": "hnsw",
                            "engine": "faiss",
                            "space_type": self._space_type,
                            "parameters": parameters,
                        },
                    },
                    # Standard analysis splits Chinese into single characters; the cjk subfield
                    # adds bigrams ("净收入" → 净收, 收入) so Chinese phrases outrank stray characters.
                    "text": {
                        "type": "text",
                        "analyzer": "standard",
                        "fields": {"cjk": {"type": "text", "analyzer": "cjk"}},
                    },
                    "memory_id": keyword,
                    "tenant": keyword,
                    "owner": keyword,
                    "kind": keyword,
                    "status": keyword,
                    "scope": keyword,
                    "key": keyword,
                    "embedder": keyword,
                    "tags": keyword,
                    "tools": keyword,
                    "version": {"type": "long"},
                    "updated_at": {"type": "date"},
                },
            },
        }

    @property
    def _space_type(self) -> Literal["cosinesimil", "innerproduct"]:
        return "innerproduct" if self._serverless else "cosinesimil"

    def _pipeline_body(self) -> dict[str, Any]:
        return {
            "description": "memtool hybrid recall: BM25 and k-NN fused by reciprocal rank",
            "phase_results_processors": [
                {
                    "score-ranker-processor": {
                        "combination": {"technique": "rrf", "rank_constant": RRF_RANK_CONSTANT}
                    }
                }
            ],
        }

    def _ensure_pipeline(self) -> None:
        wanted = self._pipeline_body()
        try:
            stored = self._client.search_pipeline.get(id=self._pipeline).get(self._pipeline)
        except NotFoundError:
            stored = None
        if not isinstance(stored, dict) or any(stored.get(key) != value for key, value in wanted.items()):
            self._client.search_pipeline.put(id=self._pipeline, body=wanted)

    def _check_dimension(self) -> None:
        """An existing index built for another embedder would reject every write: say so once."""
        mappings = self._client.indices.get_mapping(index=self._index)
        for entry in mappings.values():
            vector = ((entry.get("mappings") or {}).get("properties") or {}).get("vector") or {}
            found = vector.get("dimension")
            if found is not None and int(found) != self._dimension:
                raise IndexUnavailable(
                    f"index {self._index!r} holds {found}-dimension vectors but the embedder makes "
                    f"{self._dimension}: point memtool at a new index name or rebuild this one"
                )

    # -- writes --------------------------------------------------------------------------------

    def upsert(self, documents: Sequence[IndexDocument]) -> UpsertReport:
        """Write the newest version of each memory in ``documents``.

        Each memory id is reported once, for its highest version in the batch. An equal version
        is written again (stream redelivery and re-embedding must land); a strictly newer
        indexed version makes the document ``skipped_stale``.
        """
        latest = _latest_per_memory(documents)
        if not latest:
            return UpsertReport()
        if not self._ensured:
            self.ensure()  # a bulk write to a missing index would auto-create it without k-NN
        if self._serverless:
            return self._upsert_compared(latest)
        actions: list[dict[str, Any]] = []
        for document in latest:
            actions.append(
                {"index": {"_id": document.memory_id, "version": document.version, "version_type": "external_gte"}}
            )
            actions.append(self._source(document))
        with self._answering("index documents"):
            response = self._client.bulk(index=self._index, body=actions)
        report = UpsertReport()
        for document, item in zip(latest, response["items"], strict=True):
            result = item["index"]
            status = int(result["status"])
            if status in (200, 201):
                report.written.append(document.memory_id)
            elif status == 409:  # version_conflict_engine_exception: a newer version is indexed
                report.skipped_stale.append(document.memory_id)
            else:
                self._raise_item_error(document.memory_id, status, result.get("error"))
        return report

    def _upsert_compared(self, latest: list[IndexDocument]) -> UpsertReport:
        """Serverless: read the indexed versions, skip stale documents, write, then drop old copies.

        The read and the write are not atomic, and Serverless search sees writes only after its
        refresh, so two writers of one memory could both add a copy. That is acceptable because
        one indexer invocation processes one stream shard's records in order, and a memory's
        changes all arrive on one shard: there is no second writer for the same memory. Extra
        copies left by a redelivery within the refresh window are deleted by the next write of the
        memory, and searches collapse copies to the highest version meanwhile.
        """
        copies: dict[str, list[_Copy]] = {}
        for tenant, group in _by_tenant(latest).items():
            for copy in self._copies(tenant, [document.memory_id for document in group]):
                copies.setdefault(copy.memory_id, []).append(copy)
        report = UpsertReport()
        writing: list[IndexDocument] = []
        for document in latest:
            if any(copy.version > document.version for copy in copies.get(document.memory_id, [])):
                report.skipped_stale.append(document.memory_id)
            else:
                writing.append(document)
        if not writing:
            return report
        actions: list[dict[str, Any]] = []
        for document in writing:
            actions.append({"index": {}})  # Serverless vector collections assign the _id
            actions.append(self._source(document))
        with self._answering("index documents"):
            response = self._client.bulk(index=self._index, body=actions)
        replaced: list[str] = []
        for document, item in zip(writing, response["items"], strict=True):
            result = item["index"]
            status = int(result["status"])
            if status not in (200, 201):
                self._raise_item_error(document.memory_id, status, result.get("error"))
            report.written.append(document.memory_id)
            replaced.extend(copy.doc_id for copy in copies.get(document.memory_id, []))
        if replaced:  # only after the new copy is stored, so a memory is never missing meanwhile
            self._delete_copies(replaced)
        return report

    def delete(self, refs: Sequence[DeleteRef]) -> int:
        """Remove memories' entries unless the index holds a newer version than the ref's.

        The tenant is verified before anything is deleted: an entry whose stored tenant differs
        from the ref's stays. Returns how many memories lost an entry; missing ones count zero.
        """
        newest: dict[tuple[str, str], int] = {}
        for ref in refs:
            key = (ref.memory_id, ref.tenant)
            newest[key] = max(ref.version, newest.get(key, ref.version))
        if not newest:
            return 0
        if self._serverless:
            return self._delete_compared(newest)
        # Managed: read tenants by id (mget is real-time), then delete with the version condition.
        # Between the two calls the tenant of an id cannot change (ids are never reused across
        # tenants); the version condition on the delete is what orders it against writes.
        ids = list(dict.fromkeys(memory_id for memory_id, _ in newest))
        with self._answering("read documents before deleting"):
            try:
                found = self._client.mget(
                    index=self._index, body={"ids": ids}, params={"_source_includes": "tenant"}
                )["docs"]
            except NotFoundError:
                return 0  # no index, nothing to delete
        stored_tenant = {
            doc["_id"]: (doc.get("_source") or {}).get("tenant") for doc in found if doc.get("found")
        }
        targets = [
            (memory_id, version)
            for (memory_id, tenant), version in newest.items()
            if stored_tenant.get(memory_id) == tenant
        ]
        if not targets:
            return 0
        actions = [
            {"delete": {"_id": memory_id, "version": version, "version_type": "external_gte"}}
            for memory_id, version in targets
        ]
        with self._answering("delete documents"):
            response = self._client.bulk(index=self._index, body=actions)
        deleted = 0
        for (memory_id, _), item in zip(targets, response["items"], strict=True):
            result = item["delete"]
            status = int(result["status"])
            if status == 200 and result.get("result") == "deleted":
                deleted += 1
            elif status not in (404, 409):  # gone already, or a newer version survives
                self._raise_item_error(memory_id, status, result.get("error"))
        return deleted

    def _delete_compared(self, newest: dict[tuple[str, str], int]) -> int:
        doomed: list[str] = []
        memories: set[str] = set()
        by_tenant: dict[str, dict[str, int]] = {}
        for (memory_id, tenant), version in newest.items():
            by_tenant.setdefault(tenant, {})[memory_id] = version
        for tenant, versions in by_tenant.items():
            for copy in self._copies(tenant, list(versions)):  # tenant-filtered: the check
                if copy.version <= versions[copy.memory_id]:
                    doomed.append(copy.doc_id)
                    memories.add(copy.memory_id)
        if doomed:
            self._delete_copies(doomed)
        return len(memories)

    def _delete_copies(self, doc_ids: list[str]) -> None:
        actions = [{"delete": {"_id": doc_id}} for doc_id in doc_ids]
        with self._answering("delete replaced documents"):
            response = self._client.bulk(index=self._index, body=actions)
        for doc_id, item in zip(doc_ids, response["items"], strict=True):
            result = item["delete"]
            status = int(result["status"])
            if status not in (200, 404):
                self._raise_item_error(doc_id, status, result.get("error"))

    def indexed_version(self, memory_id: str, tenant: str) -> int | None:
        if self._serverless:
            versions = [copy.version for copy in self._copies(tenant, [memory_id])]
            return max(versions, default=None)
        with self._answering("read a document"):
            try:
                found = self._client.get(
                    index=self._index, id=memory_id, params={"_source_includes": "tenant,version"}
                )
            except NotFoundError:
                return None
        source = found.get("_source") or {}
        if not found.get("found") or source.get("tenant") != tenant:
            return None
        return int(source["version"])

    def _copies(self, tenant: str, memory_ids: list[str]) -> list[_Copy]:
        body = {
            "size": MAX_LOOKUP,
            "_source": ["memory_id", "version"],
            "query": {"bool": {"filter": [{"term": {"tenant": tenant}}, {"terms": {"memory_id": memory_ids}}]}},
        }
        with self._answering("look up indexed versions"):
            try:
                response = self._client.search(index=self._index, body=body)
            except NotFoundError:
                return []
        return [
            _Copy(doc_id=hit["_id"], memory_id=hit["_source"]["memory_id"], version=int(hit["_source"]["version"]))
            for hit in response["hits"]["hits"]
        ]

    def _source(self, document: IndexDocument) -> dict[str, Any]:
        vector = [float(value) for value in document.vector]
        if len(vector) != self._dimension:
            raise ValueError(
                f"{document.memory_id}: vector has {len(vector)} dimensions, the index {self._dimension}"
            )
        return {
            "memory_id": document.memory_id,
            "version": document.version,
            "tenant": document.tenant,
            "owner": document.owner,
            "kind": document.kind,
            "status": document.status,
            "scope": document.scope,
            "key": document.key,
            "text": document.text,
            "vector": _unit(vector) if self._serverless else vector,
            "embedder": document.embedder,
            "tags": list(document.tags),
            "tools": list(document.tools),
            "updated_at": document.updated_at.isoformat() if document.updated_at else None,
        }

    def _raise_item_error(self, memory_id: str, status: int, error: Mapping[str, Any] | None) -> NoReturn:
        if status == 429 or status >= 500:
            raise IndexUnavailable(
                f"OpenSearch could not take {memory_id} now ({status} {(error or {}).get('type', '')}); retry later"
            )
        raise IndexWriteError(memory_id, status, error)

    # -- searches ------------------------------------------------------------------------------

    def knn(self, query: IndexQuery) -> list[IndexHit]:
        clause = self._knn_clause(query)
        if clause is None:
            return []  # a zero vector points nowhere: nothing is similar to it
        body = {"size": query.k, "_source": HIT_FIELDS, "query": clause}
        return [
            _hit(hit, cosine=self._cosine(float(hit["_score"]))) for hit in self._search(body, "run a k-NN search")
        ]

    def lexical(self, query: IndexQuery) -> list[IndexHit]:
        clause = self._lexical_clause(query)
        if clause is None:
            return []
        body = {"size": query.k, "_source": HIT_FIELDS, "query": clause}
        return [_hit(hit, lexical=float(hit["_score"])) for hit in self._search(body, "run a text search")]

    def hybrid(self, query: IndexQuery) -> list[IndexHit]:
        if self._serverless:
            # No RRF processor on Serverless: the same fusion, computed here over both lists.
            return reciprocal_rank_fusion(self.lexical(query), self.knn(query), k=query.k)
        queries = [clause for clause in (self._lexical_clause(query), self._knn_clause(query)) if clause]
        if not queries:
            return []
        body = {"size": query.k, "_source": HIT_FIELDS, "query": {"hybrid": {"queries": queries}}}
        hits = self._search(body, "run a hybrid search", search_pipeline=self._pipeline)
        return [_hit(hit, fused=float(hit["_score"])) for hit in hits]

    def _filter(self, query: IndexQuery) -> list[dict[str, Any]]:
        selected = query.filter
        if not selected.tenant or not selected.owners:
            raise ValueError("an index query needs a tenant and at least one owner")
        if query.k < 1:
            raise ValueError("k must be at least 1")
        clauses: list[dict[str, Any]] = [
            {"term": {"tenant": selected.tenant}},
            {"terms": {"owner": list(selected.owners)}},
            {"term": {"embedder": selected.embedder}},
        ]
        if selected.kinds is not None:
            clauses.append({"terms": {"kind": list(selected.kinds)}})
        if selected.statuses is not None:
            clauses.append({"terms": {"status": list(selected.statuses)}})
        return clauses

    def _knn_clause(self, query: IndexQuery) -> dict[str, Any] | None:
        filters = self._filter(query)
        if query.vector is None:
            raise ValueError("a k-NN search needs a query vector")
        vector = [float(value) for value in query.vector]
        if len(vector) != self._dimension:
            raise ValueError(f"query vector has {len(vector)} dimensions, the index {self._dimension}")
        if not any(vector):
            return None
        return {
            "knn": {
                "vector": {
                    "vector": _unit(vector) if self._serverless else vector,
                    "k": query.k,
                    # Inside the knn clause: faiss filters while it searches, so k hits survive.
                    "filter": {"bool": {"filter": filters}},
                }
            }
        }

    def _lexical_clause(self, query: IndexQuery) -> dict[str, Any] | None:
        filters = self._filter(query)
        if not query.text.strip():
            return None
        return {
            "bool": {
                "must": [{"multi_match": {"query": query.text, "fields": ["text", "text.cjk"], "type": "most_fields"}}],
                "filter": filters,
            }
        }

    def _search(self, body: dict[str, Any], action: str, **params: str) -> list[dict[str, Any]]:
        with self._answering(action):
            response = self._client.search(index=self._index, body=body, params=params or None)
        return _collapse(response["hits"]["hits"])

    def _cosine(self, score: float) -> float:
        if self._serverless:
            # faiss innerproduct scores: 1 + dot when dot >= 0, else 1 / (1 - dot).
            cosine = score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score
        else:
            cosine = 2.0 * score - 1.0  # cosinesimil scores (1 + cos) / 2
        return max(-1.0, min(1.0, cosine))

    @contextmanager
    def _answering(self, action: str) -> Iterator[None]:
        """Turn "OpenSearch cannot answer now" into IndexUnavailable; let real bugs through."""
        where = f"OpenSearch index {self._index!r}"
        try:
            yield
        except ConnectionTimeout as error:
            raise IndexUnavailable(f"{where} timed out trying to {action}") from error
        except TransportConnectionError as error:
            raise IndexUnavailable(f"cannot reach {where} to {action}: {error.error}") from error
        except (AuthenticationException, AuthorizationException) as error:
            raise IndexUnavailable(
                f"{where} refused the credentials ({error.status_code}) trying to {action}: "
                "check the IAM role and the domain or collection access policy"
            ) from error
        except TransportError as error:
            status = error.status_code
            if isinstance(status, int) and (status >= 500 or status == 429):
                raise IndexUnavailable(f"{where} failed ({status} {error.error}) trying to {action}") from error
            if error.error == "index_not_found_exception":
                raise IndexUnavailable(f"{where} does not exist: run ensure() before searching") from error
            raise


def opensearch_client(
    endpoint: str,
    region: str,
    service: Literal["es", "aoss"],
    credentials: Credentials | None = None,
    *,
    session: boto3.Session | None = None,
    timeout: float = 10.0,
    max_retries: int = 2,
    pool_maxsize: int = 10,
) -> OpenSearch:
    """A SigV4-signing client for a managed domain (``es``) or a Serverless collection (``aoss``).

    Credentials come from the caller: explicit ``credentials``, else ``session`` (or a new boto3
    Session) resolves them. Refreshable credentials are frozen per request by the signer.
    """
    if service not in ("es", "aoss"):
        raise ValueError("service must be 'es' (managed domain) or 'aoss' (Serverless)")
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    if parts.scheme != "https" or not parts.hostname:
        raise ValueError(f"OpenSearch endpoint must be an https URL or host name, got {endpoint!r}")
    if credentials is None:
        if session is None:
            import boto3

            session = boto3.Session(region_name=region)
        credentials = session.get_credentials()
        if credentials is None:
            raise ValueError("no AWS credentials found for signing OpenSearch requests")
    return OpenSearch(
        hosts=[{"host": parts.hostname, "port": parts.port or 443}],
        http_auth=RequestsAWSV4SignerAuth(credentials, region, service),
        use_ssl=True,
        verify_certs=True,
        ssl_show_warn=True,
        connection_class=RequestsHttpConnection,
        timeout=timeout,
        max_retries=max_retries,
        retry_on_timeout=True,
        pool_maxsize=pool_maxsize,
    )


def _latest_per_memory(documents: Sequence[IndexDocument]) -> list[IndexDocument]:
    latest: dict[str, IndexDocument] = {}
    for document in documents:
        seen = latest.get(document.memory_id)
        if seen is None or document.version >= seen.version:
            latest[document.memory_id] = document
    return list(latest.values())


def _by_tenant(documents: Sequence[IndexDocument]) -> dict[str, list[IndexDocument]]:
    groups: dict[str, list[IndexDocument]] = {}
    for document in documents:
        groups.setdefault(document.tenant, []).append(document)
    return groups


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector] if norm else vector


def _collapse(hits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One hit per memory, at its best rank, reporting the highest indexed version.

    Only Serverless can hold two copies of a memory (briefly, see ``_upsert_compared``); the
    back-to-source check would drop the older copy's hit as stale, so the newest version is kept.
    """
    kept: dict[str, dict[str, Any]] = {}
    for hit in hits:
        source = hit["_source"]
        first = kept.get(source["memory_id"])
        if first is None:
            kept[source["memory_id"]] = hit
        elif int(source["version"]) > int(first["_source"]["version"]):
            first["_source"] = {**first["_source"], "version": source["version"]}
    return list(kept.values())


def _hit(
    hit: Mapping[str, Any],
    *,
    cosine: float | None = None,
    lexical: float | None = None,
    fused: float | None = None,
) -> IndexHit:
    source = hit["_source"]
    return IndexHit(
        memory_id=source["memory_id"],
        version=int(source["version"]),
        owner=source["owner"],
        kind=source["kind"],
        cosine=cosine,
        lexical=lexical,
        fused=fused,
    )
