"""Sources and dependency chains (docs/knowledge.md) on both record stores, and both body stores:
files under the state folder, and S3 on moto (the bucket made as the template makes it: private,
encrypted, versioned)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from memtool.errors import Forbidden, NotFound, ValidationFailed
from memtool.flows.memory_write import MemoryService
from memtool.identity import Identity
from memtool.knowledge.bodies import FileSourceBodies, S3SourceBodies
from memtool.knowledge.sources import READ_MAX_CHARS, SOURCE_MAX_BYTES, SourceKind, SourceLibrary, source_digest
from memtool.memory.commands import NewMemory
from memtool.memory.records import MemoryKind, MemoryScope, SourceRef
from memtool.runtime.aws import client
from memtool.settings import get_settings

CURATOR = Identity(tenant="acme", user="mei", roles=frozenset({"curator"}))
ANALYST = Identity(tenant="acme", user="li", roles=frozenset({"analyst"}))
OTHER_TENANT = Identity(tenant="globex", user="mei", roles=frozenset({"curator"}))


def _document(chars: int, seed: int = 3) -> str:
    """Multi-byte text: Chinese, accents, emoji (outside the BMP) and ASCII, in lines."""
    rng = random.Random(seed)
    alphabet = "退款政策净收入医院渠道éüß—😀🧾abcdefghij 0123456789"
    text = []
    while sum(map(len, text)) < chars:
        text.append("".join(rng.choice(alphabet) for _ in range(rng.randint(20, 90))) + "\n")
    return "".join(text)[:chars]


@pytest.fixture(params=["files", "s3"])
def bodies(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "files":
        return FileSourceBodies(tmp_path / "sources")
    request.getfixturevalue("aws")
    s3 = client("s3", get_settings())
    s3.create_bucket(Bucket="memtool-sources-test")
    s3.put_bucket_versioning(Bucket="memtool-sources-test", VersioningConfiguration={"Status": "Enabled"})
    return S3SourceBodies(s3, "memtool-sources-test")


@pytest.fixture
def library(store, bodies, clock) -> SourceLibrary:
    return SourceLibrary(store, bodies, clock)


def test_a_200k_document_reads_back_in_pages_and_a_changed_text_is_version_2(library: SourceLibrary) -> None:
    text = _document(200_000)
    written = library.put(CURATOR, "refunds-policy.md", SourceKind.DOCUMENT, text)
    assert written.created and not written.unchanged
    source = written.source
    assert (source.version, source.chars, source.sha256) == (1, 200_000, source_digest(text))
    assert source.bytes == len(text.encode("utf-8")) > 200_000

    pages, offset = [], 0
    while True:
        page = library.read(ANALYST, source.id, offset=offset)
        pages.append(page.text)
        assert page.total_chars == 200_000 and page.limit == READ_MAX_CHARS and not page.source.stale
        if page.complete:
            assert page.next_offset is None
            break
        assert page.next_offset == offset + READ_MAX_CHARS
        offset = page.next_offset
    assert len(pages) == 13 and "".join(pages) == text

    again = library.put(CURATOR, "refunds-policy.md", SourceKind.DOCUMENT, text)
    assert again.unchanged and again.source.version == 1 and again.source.id == source.id

    changed = text[:1000] + "退款在30天内可申请。" + text[1000:]
    second = library.put(CURATOR, "refunds-policy.md", SourceKind.DOCUMENT, changed)
    assert (second.source.id, second.source.version, second.created) == (source.id, 2, False)

    old = library.read(ANALYST, source.id, version=1, offset=199_990, limit=50)
    assert old.text == text[199_990:] and old.complete and old.source.stale
    assert (old.source.version, old.source.latest_version) == (1, 2)
    new = library.read(ANALYST, source.id, offset=1000, limit=11)
    assert new.text == "退款在30天内可申请。" and not new.source.stale and new.source.version == 2
    assert [v.version for v in library.history(ANALYST, source.id)] == [1, 2]
    assert [s.id for s in library.list(ANALYST).items] == [source.id]


def test_only_curators_write_and_other_tenants_see_nothing(library: SourceLibrary) -> None:
    with pytest.raises(Forbidden):
        library.put(ANALYST, "etl/orders.sql", SourceKind.ETL_SQL, "select 1")
    source = library.put(CURATOR, "etl/orders.sql", SourceKind.ETL_SQL, "insert into orders select * from staging").source
    with pytest.raises(NotFound):
        library.read(OTHER_TENANT, source.id)
    assert library.list(OTHER_TENANT).items == []
    with pytest.raises(Forbidden):
        library.delete(ANALYST, source.id)
    library.delete(CURATOR, source.id)
    with pytest.raises(NotFound):
        library.read(CURATOR, source.id)
    assert library.list(CURATOR).items == []


@pytest.mark.parametrize(
    ("name", "text", "offset", "limit", "field"),
    [
        ("../../etc/passwd", "x", 0, 10, "name"),
        ("ok.sql", "x" * (SOURCE_MAX_BYTES + 1), 0, 10, "text"),
        ("ok.sql", "select 1", 9, 10, "offset"),
        ("ok.sql", "select 1", 0, READ_MAX_CHARS + 1, "limit"),
        ("ok.sql", "select 1", -1, 10, "offset"),
    ],
)
def test_bad_input_names_its_field_and_stores_nothing_more(library: SourceLibrary, name, text, offset, limit, field) -> None:
    with pytest.raises(ValidationFailed) as refused:
        source = library.put(CURATOR, name, SourceKind.ETL_SQL, text).source
        library.read(CURATOR, source.id, offset=offset, limit=limit)
    assert refused.value.field == field
    if field in ("name", "text"):
        assert library.list(CURATOR).items == []


def test_a_knowledge_memory_depending_on_a_source_is_stale_after_its_version_2(store, clock, tmp_path: Path) -> None:
    library = SourceLibrary(store, FileSourceBodies(tmp_path / "sources"), clock)
    memories = MemoryService(store, clock, get_settings())
    policy = library.put(CURATOR, "refunds-policy.md", SourceKind.DOCUMENT, "Refunds within 30 days.").source
    definition = memories.remember(
        CURATOR,
        NewMemory(
            kind=MemoryKind.KNOWLEDGE,
            content="Net revenue is gross revenue less refunds, as the refunds policy defines them.",
            key="metric.net_revenue",
            scope=MemoryScope.TENANT,
            sources=[SourceRef(id=policy.id, depends_on="source")],
        ),
    ).record
    [dependency] = memories.dependencies(definition)
    assert (dependency.version, dependency.state, dependency.name) == (1, "current", "refunds-policy.md")
    assert memories.stale_knowledge(CURATOR) == []

    library.put(CURATOR, "refunds-policy.md", SourceKind.DOCUMENT, "Refunds within 14 days.")
    [dependency] = memories.dependencies(memories.recall_one(ANALYST, definition.id))
    assert dependency.state == "newer" and dependency.describe() == "refunds-policy.md v1; v2 exists"
    [(stale, states)] = memories.stale_knowledge(CURATOR)
    assert stale.id == definition.id and [s.latest_version for s in states] == [2]
    with pytest.raises(Forbidden):
        memories.stale_knowledge(ANALYST)

    library.delete(CURATOR, policy.id)
    [dependency] = memories.dependencies(definition)
    assert dependency.state == "gone" and dependency.describe().endswith("it was deleted")


def test_a_dependency_must_exist_for_the_caller_and_a_cycle_is_refused(store, clock) -> None:
    memories = MemoryService(store, clock, get_settings())
    private = memories.remember(ANALYST, NewMemory(kind=MemoryKind.EPISODIC, content="li's own note", scope=MemoryScope.USER))
    with pytest.raises(ValidationFailed) as refused:
        memories.remember(
            CURATOR,
            NewMemory(
                kind=MemoryKind.KNOWLEDGE,
                content="shared, citing a private note",
                scope=MemoryScope.TENANT,
                sources=[SourceRef(id=private.record.id, depends_on="memory")],
            ),
        )
    assert refused.value.field == "depends_on.0"

    def shared(key: str, content: str, depends: list[str]):
        refs = [SourceRef(id=i, depends_on="memory") for i in depends]
        return memories.remember(
            CURATOR, NewMemory(kind=MemoryKind.KNOWLEDGE, content=content, key=key, scope=MemoryScope.TENANT, sources=refs)
        )

    a = shared("term.a", "A", []).record
    b = shared("term.b", "B depends on A", [a.id]).record
    with pytest.raises(ValidationFailed) as cycle:
        shared("term.a", "A, now depending on B", [b.id])
    assert cycle.value.field == "depends_on.0" and "cycle" in str(cycle.value)
    assert memories.recall_one(CURATOR, a.id).version == 1  # nothing written
    with pytest.raises(ValidationFailed) as unknown_version:
        memories.remember(
            CURATOR,
            NewMemory(
                kind=MemoryKind.KNOWLEDGE,
                content="C",
                scope=MemoryScope.TENANT,
                sources=[SourceRef(id=a.id, version=5, depends_on="memory")],
            ),
        )
    assert "no version 5" in str(unknown_version.value)
    c = shared("term.c", "C depends on B", [b.id]).record  # a chain without a cycle is fine
    assert [d.state for d in memories.dependencies(c)] == ["current"]


def test_a_source_record_is_not_written_or_forgotten_through_memories(store, clock, tmp_path: Path) -> None:
    library = SourceLibrary(store, FileSourceBodies(tmp_path / "sources"), clock)
    memories = MemoryService(store, clock, get_settings())
    source = library.put(CURATOR, "ddl/orders.sql", SourceKind.DDL, "create table orders (id int)").source
    with pytest.raises(Forbidden):
        memories.remember(CURATOR, NewMemory(kind=MemoryKind.KNOWLEDGE, content="x", key="source.ddl/orders.sql", scope=MemoryScope.TENANT))
    with pytest.raises(Forbidden):
        memories.forget(CURATOR, source.id)
    assert library.read(CURATOR, source.id).text == "create table orders (id int)"
