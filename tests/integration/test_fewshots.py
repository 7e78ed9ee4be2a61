"""The few-shot library on both record stores: candidates, review, and what search returns.

record -> pending (never searched) -> approved (searched for a question of the same shape, with
other values) or rejected (never); an approved example is retired by failures, and kept out by low
confidence or low similarity. Reviews are new versions that keep the history.
"""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from memtool.cache.fewshots import FewshotLibrary, NotPendingReview, slot_key
from memtool.errors import Forbidden, NotFound, ValidationFailed, VersionConflict
from memtool.memory.records import MemoryKind, MemoryPatch, MemoryScope, MemoryStatus, Trigger
from memtool.memory.store import TENANT_OWNER, Partition
from memtool.retrieval.embedders import HashingEmbedder
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.semantic.masking import mask_question
from memtool.semantic.parser import QuestionParser
from memtool.settings import Settings

TODAY = date(2026, 11, 29)
AUTHOR, REVIEWER = "li", "wang"
EXAMPLE_QUESTION = "上个月华南的动销"
EXAMPLE_SQL = "SELECT SUM(units) AS units FROM order_lines WHERE region = '华南' AND order_date >= DATE '2026-10-01'"
EXAMPLE_INTENT = {
    "metric": "units",
    "filters": [{"dimension": "region", "op": "in", "values": ["华南"]}],
    "time_window": {"start": "2026-10-01", "end": "2026-11-01", "label": "上个月"},
}


@pytest.fixture(scope="module")
def parser() -> QuestionParser:
    catalog = load_catalog()
    return QuestionParser(catalog, EntityIndex.static(catalog))


@pytest.fixture
def library(store, clock, tmp_path) -> FewshotLibrary:
    return FewshotLibrary(store, HashingEmbedder(256), clock, Settings(home=tmp_path / "home"))


@pytest.fixture
def tenant() -> str:
    return f"acme-{uuid.uuid4().hex[:6]}"


def masked(parser: QuestionParser, question: str) -> str:
    return mask_question(parser.recognise(question, today=TODAY)).text


def record(library, parser, tenant, question=EXAMPLE_QUESTION, *, sql=EXAMPLE_SQL, reward=1.0, author=AUTHOR, episode="ep_1"):
    return library.record_candidate(
        tenant,
        author,
        episode_id=episode,
        question=question,
        intent=EXAMPLE_INTENT,
        sql=sql,
        reward=reward,
        masked=masked(parser, question),
    )


def search(library, parser, tenant, question):
    return library.search(tenant, question, masked(parser, question))


# ---- candidates ---------------------------------------------------------------------------------


def test_a_candidate_is_a_pending_tenant_fewshot_with_its_example_and_provenance(library, parser, store, tenant, clock):
    candidate = record(library, parser, tenant, reward=1.4)

    stored = store.get(Partition(tenant, TENANT_OWNER), candidate.id, clock.now())
    assert (stored.kind, stored.scope, stored.owner, stored.status) == (
        MemoryKind.FEWSHOT,
        MemoryScope.TENANT,
        TENANT_OWNER,
        MemoryStatus.PENDING_REVIEW,
    )
    assert stored.content == EXAMPLE_QUESTION
    assert stored.value == {
        "question": EXAMPLE_QUESTION,
        "intent": EXAMPLE_INTENT,
        "sql": EXAMPLE_SQL,
        "masked": "{window}{region}的动销",
        "author": AUTHOR,
        "episode_id": "ep_1",
    }
    assert stored.confidence == 1.0  # the reward, clamped to [0, 1]
    assert (stored.provenance.trigger, stored.provenance.author, stored.provenance.episode_id) == (Trigger.FEEDBACK, AUTHOR, "ep_1")
    assert stored.key == slot_key("{window}{region}的动销", EXAMPLE_SQL)


def test_a_negative_reward_is_confidence_zero(library, parser, tenant):
    candidate = record(library, parser, tenant, "上个月华东的动销", sql="SELECT 1", reward=-0.5)
    assert candidate.confidence == 0.0


def test_an_equal_example_is_recorded_once_and_left_as_it_is(library, parser, store, tenant, clock):
    # Given a candidate that has been approved
    first = record(library, parser, tenant)
    approved = library.approve(tenant, first.id, REVIEWER)

    # When another thumbs-up brings the same example (other values, other spacing and case in the SQL)
    again = record(
        library, parser, tenant, "上周华东的动销", sql=EXAMPLE_SQL.lower().replace(" ", "  "), author="zhao", episode="ep_2"
    )

    # Then it is the same record, still approved, still at its version
    assert (again.id, again.version, again.status) == (first.id, approved.version, MemoryStatus.APPROVED)
    page = store.list(Partition(tenant, TENANT_OWNER), clock.now(), kind=MemoryKind.FEWSHOT)
    assert [r.id for r in page.items] == [first.id]


def test_pii_is_redacted_before_the_candidate_is_stored(library, parser, tenant):
    candidate = record(library, parser, tenant, "上个月华南的动销 联系13812345678", sql="SELECT '13812345678' AS phone")

    assert "13812345678" not in str(candidate.model_dump())
    assert candidate.content == "上个月华南的动销 联系[PHONE]"
    assert candidate.value["sql"] == "SELECT '[PHONE]' AS phone"
    assert candidate.redactions["phone"] == 3  # question, masked question, SQL


def test_a_candidate_without_sql_or_with_a_broken_intent_is_refused(library, tenant):
    with pytest.raises(ValidationFailed) as no_sql:
        library.record_candidate(tenant, AUTHOR, episode_id="e", question="q", intent=None, sql=" ", reward=1.0)
    with pytest.raises(ValidationFailed) as bad_intent:
        library.record_candidate(tenant, AUTHOR, episode_id="e", question="q", intent={"metric": 3}, sql="SELECT 1", reward=1.0)
    with pytest.raises(ValidationFailed) as nan:
        library.record_candidate(tenant, AUTHOR, episode_id="e", question="q", intent=None, sql="SELECT 1", reward=float("nan"))
    assert (no_sql.value.field, bad_intent.value.field, nan.value.field) == ("sql", "intent", "reward")


# ---- review and search --------------------------------------------------------------------------


def test_pending_is_never_searched_approved_is_found_for_the_same_shape_with_other_values(library, parser, tenant):
    # Given a candidate, pending review
    candidate = record(library, parser, tenant)
    assert search(library, parser, tenant, "上周华东的动销") == []

    # When a reviewer approves it
    library.approve(tenant, candidate.id, REVIEWER)

    # Then a question of the same shape with another region and another window finds it
    found = search(library, parser, tenant, "上周华东的动销")
    assert [(f.memory_id, f.version) for f in found] == [(candidate.id, 2)]
    example = found[0]
    assert (example.question, example.sql, example.intent, example.masked) == (
        EXAMPLE_QUESTION,
        EXAMPLE_SQL,
        EXAMPLE_INTENT,
        "{window}{region}的动销",
    )
    assert example.similarity == pytest.approx(1.0)
    # The masked question may come as mask_question's answer itself
    shape = mask_question(parser.recognise("上周华东的动销", today=TODAY))
    assert library.search(tenant, "上周华东的动销", shape) == found
    # And another tenant's library does not hold it
    assert search(library, parser, f"{tenant}-other", "上周华东的动销") == []


def test_a_rejected_candidate_is_never_searched(library, parser, tenant):
    candidate = record(library, parser, tenant)
    rejected = library.reject(tenant, candidate.id, REVIEWER, "uses the wrong date column")

    assert rejected.status is MemoryStatus.REJECTED and rejected.status_reason == "uses the wrong date column"
    assert search(library, parser, tenant, EXAMPLE_QUESTION) == []
    assert search(library, parser, tenant, "上周华东的动销") == []


def test_more_failures_than_allowed_retire_an_example_from_search(library, parser, store, tenant, clock):
    # Given an approved example that has failed three times: still searched
    candidate = library.approve(tenant, record(library, parser, tenant).id, REVIEWER)
    where = Partition(tenant, TENANT_OWNER)

    def failures(n: int) -> None:
        store.update_credit(where, candidate.id, lambda head: head.credit.model_copy(update={"failures": n}), clock.now(), clock.now())

    failures(3)
    assert [f.memory_id for f in search(library, parser, tenant, "上周华东的动销")] == [candidate.id]

    # When a fourth failure is credited to it
    failures(4)

    # Then search no longer returns it, though it is still approved
    assert store.get(where, candidate.id, clock.now()).credit.failures == 4
    assert search(library, parser, tenant, "上周华东的动销") == []
    assert store.get(where, candidate.id, clock.now()).status is MemoryStatus.APPROVED


def test_a_question_of_another_shape_is_below_the_similarity_threshold(library, parser, tenant, clock):
    candidate = record(library, parser, tenant)
    library.approve(tenant, candidate.id, REVIEWER)

    for question in ("上周华东的净收入", "除了华东上周的动销", "上周华东各城市的动销排名"):
        assert search(library, parser, tenant, question) == [], question
    # The threshold is the setting: a library with a lower one finds the same question
    lenient = FewshotLibrary(library.store, library.embedder, clock, Settings(fewshot_min_similarity=0.3))
    found = search(lenient, parser, tenant, "上周华东的净收入")
    assert [f.memory_id for f in found] == [candidate.id] and 0.3 <= found[0].similarity < 0.95


def test_an_example_with_confidence_below_the_minimum_is_not_searched(library, parser, tenant):
    unsure = record(library, parser, tenant, reward=0.85)
    library.approve(tenant, unsure.id, REVIEWER)
    assert search(library, parser, tenant, "上周华东的动销") == []

    sure = record(library, parser, tenant, sql="SELECT SUM(units) FROM order_lines", reward=0.9)
    library.approve(tenant, sure.id, REVIEWER)
    assert [f.memory_id for f in search(library, parser, tenant, "上周华东的动销")] == [sure.id]


def test_search_returns_at_most_top_k_best_first(library, parser, tenant, clock):
    questions = ["上个月华南的动销", "上个月华南的动销情况", "上个月华南的动销是多少", "请问上个月华南的动销"]
    ids = []
    for n, question in enumerate(questions):
        candidate = record(library, parser, tenant, question, sql=f"SELECT {n}")
        library.approve(tenant, candidate.id, REVIEWER)
        ids.append(candidate.id)
    lenient = FewshotLibrary(library.store, library.embedder, clock, Settings(fewshot_min_similarity=0.5))

    found = search(lenient, parser, tenant, "上周华东的动销")

    assert len(found) == 3
    assert found[0].memory_id == ids[0] and found[0].similarity == pytest.approx(1.0)
    assert [f.similarity for f in found] == sorted((f.similarity for f in found), reverse=True)


def test_search_embeds_each_example_version_once(library, parser, tenant, store, clock):
    calls: list[list[str]] = []
    embedder = HashingEmbedder(256)

    class Counting:
        id, dimension = embedder.id, embedder.dimension

        def embed(self, texts):
            calls.append(list(texts))
            return embedder.embed(texts)

    counted = FewshotLibrary(store, Counting(), clock, Settings())
    candidate = record(counted, parser, tenant)
    counted.approve(tenant, candidate.id, REVIEWER)

    search(counted, parser, tenant, "上周华东的动销")
    search(counted, parser, tenant, "上个月华北的动销情况")

    # The first search embeds its query and the example; the second only its query
    assert calls == [["{window}{region}的动销"], ["{window}{region}的动销"], ["{window}{region}的动销情况"]]


# ---- review rules -------------------------------------------------------------------------------


def test_the_author_of_a_candidate_cannot_review_it(library, parser, tenant, store, clock):
    candidate = record(library, parser, tenant)

    with pytest.raises(Forbidden, match="the author of a candidate cannot approve it"):
        library.approve(tenant, candidate.id, AUTHOR)
    with pytest.raises(Forbidden):
        library.reject(tenant, candidate.id, AUTHOR)
    assert store.get(Partition(tenant, TENANT_OWNER), candidate.id, clock.now()).status is MemoryStatus.PENDING_REVIEW


def test_only_a_pending_candidate_can_be_reviewed(library, parser, tenant):
    candidate = record(library, parser, tenant)
    library.approve(tenant, candidate.id, REVIEWER)

    with pytest.raises(NotPendingReview) as again:
        library.reject(tenant, candidate.id, "zhao")

    assert isinstance(again.value, VersionConflict)  # a 409
    assert again.value.field == "status" and again.value.current_version == 2
    assert "is approved, not pending_review" in again.value.message


def test_an_unknown_id_or_a_memory_that_is_no_fewshot_is_not_found(library, parser, tenant, store, clock):
    from memtool.memory.records import MemoryDraft

    knowledge = store.create(
        Partition(tenant, TENANT_OWNER), MemoryDraft(kind=MemoryKind.KNOWLEDGE, content="净收入 = 销售额 - 退款"), clock.now()
    ).record
    for memory_id in ("mem_unknown", knowledge.id):
        with pytest.raises(NotFound) as missing:
            library.approve(tenant, memory_id, REVIEWER)
        assert missing.value.field == "id"
    # Nor is another tenant's candidate
    candidate = record(library, parser, tenant)
    with pytest.raises(NotFound):
        library.approve(f"{tenant}-other", candidate.id, REVIEWER)


def test_a_review_records_reviewer_and_time_and_keeps_the_history(library, parser, tenant, clock):
    candidate = record(library, parser, tenant)
    clock.advance(hours=2)

    approved = library.approve(tenant, candidate.id, REVIEWER)

    assert (approved.version, approved.status, approved.status_reason) == (2, MemoryStatus.APPROVED, f"approved by {REVIEWER}")
    assert approved.value["reviewed_by"] == REVIEWER
    assert approved.value["reviewed_at"] == clock.now().isoformat()
    assert {k: approved.value[k] for k in ("question", "sql", "author")} == {
        "question": EXAMPLE_QUESTION,
        "sql": EXAMPLE_SQL,
        "author": AUTHOR,
    }
    history = library.history(tenant, candidate.id)
    # The candidate as it was stays readable (an older version reads as superseded)
    assert [(h.version, h.status) for h in history] == [(1, MemoryStatus.SUPERSEDED), (2, MemoryStatus.APPROVED)]
    assert history[0].value == candidate.value and "reviewed_by" not in history[0].value


def test_a_review_retries_when_another_write_lands_in_between(library, parser, tenant, store, clock):
    candidate = record(library, parser, tenant)
    where = Partition(tenant, TENANT_OWNER)
    real_update = store.update
    raced: list[int] = []

    def update(where_, memory_id, patch, expected_version, now):
        if not raced:  # someone else edits the candidate (still pending) just before the review lands
            raced.append(expected_version)
            real_update(where_, memory_id, MemoryPatch(tags=["edited"]), expected_version, now)
        return real_update(where_, memory_id, patch, expected_version, now)

    store.update = update  # type: ignore[method-assign]
    try:
        approved = library.approve(tenant, candidate.id, REVIEWER)
    finally:
        del store.update

    assert raced == [1]
    assert (approved.version, approved.status, approved.tags) == (3, MemoryStatus.APPROVED, ["edited"])
    assert store.get(where, candidate.id, clock.now()).status is MemoryStatus.APPROVED


def test_listing_by_status_pages_through_the_library(library, parser, tenant):
    pending = [record(library, parser, tenant, sql=f"SELECT {n}") for n in range(3)]
    approved = library.approve(tenant, pending[0].id, REVIEWER)

    first = library.list(tenant, MemoryStatus.PENDING_REVIEW, limit=1)
    second = library.list(tenant, MemoryStatus.PENDING_REVIEW, cursor=first.next_cursor, limit=1)

    assert len(first.items) == len(second.items) == 1 and first.next_cursor
    assert {r.id for r in first.items + second.items} == {pending[1].id, pending[2].id}
    assert [r.id for r in library.list(tenant, MemoryStatus.APPROVED).items] == [approved.id]
    assert library.list(tenant, MemoryStatus.REJECTED).items == []
