"""The feedback flow on the SQLite store, with a fake LLM splitter for corrections the rules cannot
split (the Bedrock planner's split_correction is tested against the Converse double elsewhere)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from memtool.identity import Identity
from memtool.errors import ValidationFailed
from memtool.feedback.corrections import StatedCorrection as Split
from memtool.flows.feedback import FeedbackCommand, FeedbackService, StatedCorrection
from memtool.memory.records import MemoryDraft, MemoryKind, Provenance, Trigger
from memtool.memory.slots import episode_key
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import Partition
from memtool.clock import FrozenClock
from memtool.settings import Settings
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.semantic.parser import QuestionParser

WHO = Identity("acme", "li", frozenset())
NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


class FakeSplitter:
    def __init__(self, answer: Split | None) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def split_correction(self, text: str) -> Split | None:
        self.asked.append(text)
        return self.answer


@pytest.fixture
def store(tmp_path):
    with SQLiteMemoryStore(tmp_path / "memtool.sqlite3") as opened:
        yield opened


def service(store: SQLiteMemoryStore, splitter: FakeSplitter | None) -> FeedbackService:
    catalog = load_catalog()
    parser = QuestionParser(catalog, EntityIndex.static(catalog))
    return FeedbackService(
        store, FrozenClock(NOW), Settings(), parser=lambda tenant=None: parser, today=lambda: date(2026, 11, 29), splitter=lambda tenant=None: splitter
    )


def episode(store: SQLiteMemoryStore, episode_id: str = "ep_1") -> None:
    store.create(
        Partition("acme", "li"),
        MemoryDraft(
            kind=MemoryKind.EPISODIC,
            key=episode_key(episode_id),
            content="上个月的单子数",
            value={"outcome": "needs_clarification", "memories_used": []},
            provenance=Provenance(trigger=Trigger.INTERACTION, episode_id=episode_id),
        ),
        NOW,
    )


def correction(text: str) -> FeedbackCommand:
    return FeedbackCommand(episode_id="ep_1", correction=StatedCorrection(text=text))


def test_a_sentence_the_rules_cannot_resolve_is_split_by_the_llm_and_resolved_by_the_rules(store):
    episode(store)
    splitter = FakeSplitter(Split("单子数", "订单数"))

    outcome = service(store, splitter).give(WHO, correction("以后我说的单子数，其实就是订单的数量"))

    assert splitter.asked == ["以后我说的单子数，其实就是订单的数量"]
    assert outcome.correction is not None
    assert outcome.correction.value == {"term": "单子数", "maps_to": {"metric": "order_count"}}


def test_what_the_rules_split_and_resolve_never_reaches_the_llm(store):
    episode(store)
    splitter = FakeSplitter(Split("x", "y"))
    outcome = service(store, splitter).give(WHO, correction("单子数就是订单数"))
    assert splitter.asked == [] and outcome.correction is not None


@pytest.mark.parametrize("answer", [Split("单子数", "毛利率"), None])
def test_a_meaning_the_catalog_lacks_is_refused_whoever_split_it_and_nothing_is_written(store, answer):
    episode(store)
    with pytest.raises(ValidationFailed) as refused:
        service(store, FakeSplitter(answer)).give(WHO, correction("以后我说的单子数，其实就是毛利的意思"))
    assert refused.value.field == "correction"
    assert store.heads(Partition("acme", "li"), [MemoryKind.CORRECTION]) == []
    [kept] = store.heads(Partition("acme", "li"), [MemoryKind.EPISODIC])
    assert kept.version == 1 and kept.credit.uses == 0
