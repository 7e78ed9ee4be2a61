"""Typed slots: which (kind, key) pairs are typed, what a valid value is, and that the memory
service refuses a bad one before anything reaches the store."""

from __future__ import annotations

import typing
from datetime import UTC, datetime

import pytest

from memtool.api.ask import AskConditions
from memtool.identity import Identity
from memtool.memory.commands import MemoryEdit, NewMemory
from memtool.errors import ValidationFailed
from memtool.flows.memory_write import MemoryService
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus
from memtool.memory.slots import (
    CHART,
    CHART_TYPES,
    CURRENCY_UNIT,
    CURRENCY_UNITS,
    SESSION_TURNS,
    check_slot_value,
    slot_for,
)
from memtool.clock import FrozenClock
from memtool.settings import Settings

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def literals(field: str) -> set[str]:
    annotation = AskConditions.model_fields[field].annotation
    return {value for arg in typing.get_args(annotation) for value in typing.get_args(arg)}


def test_the_slots_allow_what_ask_conditions_allow():
    assert set(CURRENCY_UNITS) == literals("unit") == {"元", "万元", "分"}
    assert set(CHART_TYPES) == literals("chart") == {"line", "bar", "pie", "kpi_card", "table"}


@pytest.mark.parametrize(
    ("kind", "key", "slot"),
    [
        (MemoryKind.PROFILE, "display.currency_unit", CURRENCY_UNIT),
        (MemoryKind.PROFILE, "display.chart", CHART),
        (MemoryKind.WORKING, "session.s-1.turns", SESSION_TURNS),
        (MemoryKind.WORKING, "session.a.b.turns", SESSION_TURNS),
        (MemoryKind.CORRECTION, "display.chart", None),  # typed only where the ask reads it
        (MemoryKind.PROFILE, "display.chart.old", None),
        (MemoryKind.WORKING, "session.s-1", None),
        (MemoryKind.PROFILE, None, None),
    ],
)
def test_slot_for_names_the_typed_slots(kind, key, slot):
    assert slot_for(kind, key) == slot


@pytest.mark.parametrize("unit", ["元", "万元", "分"])
def test_every_allowed_unit_is_valid_and_read_back(unit):
    check_slot_value(MemoryKind.PROFILE, "display.currency_unit", {"unit": unit})
    assert CURRENCY_UNIT.read({"unit": unit}) == unit


@pytest.mark.parametrize("chart", ["line", "bar", "pie", "kpi_card", "table"])
def test_every_allowed_chart_is_valid_and_read_back(chart):
    check_slot_value(MemoryKind.PROFILE, "display.chart", {"chart": chart})
    assert CHART.read({"chart": chart}) == chart


def test_no_value_is_valid_the_content_says_it():
    check_slot_value(MemoryKind.PROFILE, "display.currency_unit", None)
    assert CURRENCY_UNIT.read(None) is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("display.chart", 5),
        ("display.chart", "bar"),
        ("display.chart", ["bar"]),
        ("display.chart", {"chart": 5}),
        ("display.chart", {"chart": "radar"}),
        ("display.chart", {"unit": "元"}),
        ("display.chart", {}),
        ("display.currency_unit", {"unit": "kg"}),
        ("display.currency_unit", {"unit": "yuan"}),  # an alias in a sentence is fine, not in a value
        ("display.currency_unit", {"unit": "元", "chart": "bar"}),
        ("display.currency_unit", True),
    ],
)
def test_a_bad_display_value_names_value_and_the_allowed_ones(key, value):
    with pytest.raises(ValidationFailed) as caught:
        check_slot_value(MemoryKind.PROFILE, key, value)
    assert caught.value.field == "value"
    allowed = CHART_TYPES if key == "display.chart" else CURRENCY_UNITS
    assert all(option in caught.value.message for option in allowed)
    assert key in caught.value.message


@pytest.mark.parametrize("value", [["q1"], "turns", {"turns": "q1"}, {"turns": ["q1"]}, {"history": []}])
def test_a_bad_session_turns_value_is_refused(value):
    with pytest.raises(ValidationFailed) as caught:
        check_slot_value(MemoryKind.WORKING, "session.s-1.turns", value)
    assert caught.value.field == "value"
    assert SESSION_TURNS.read(value) == []


def test_session_turns_read_back():
    turns = [{"episode_id": "ep_1", "question": "q"}]
    check_slot_value(MemoryKind.WORKING, "session.s-1.turns", {"turns": turns})
    assert SESSION_TURNS.read({"turns": turns}) == turns
    assert SESSION_TURNS.key_for("s-1") == "session.s-1.turns"


def test_free_form_memories_take_any_value():
    check_slot_value(MemoryKind.PROFILE, "favourite.metric", 5)
    check_slot_value(MemoryKind.CORRECTION, "display.chart", ["anything"])
    check_slot_value(MemoryKind.WORKING, None, ["a", "list"])


def test_a_long_bad_value_is_shown_shortened():
    with pytest.raises(ValidationFailed) as caught:
        check_slot_value(MemoryKind.PROFILE, "display.chart", {"chart": "x" * 5000})
    assert len(caught.value.message) < 300


# ---- the memory service refuses before the store sees anything ------------------------------


class RecordingStore:
    """A store fake that holds one memory and records every write it is asked for."""

    def __init__(self, record: MemoryRecord | None = None) -> None:
        self.record = record
        self.writes: list[tuple[str, object]] = []

    def create(self, where, draft, now):
        self.writes.append(("create", draft))
        raise AssertionError("a refused value must never reach the store")

    def update(self, where, memory_id, patch, expected_version, now):
        self.writes.append(("update", patch))
        raise AssertionError("a refused value must never reach the store")

    def get(self, where, memory_id, now, version=None):
        from memtool.errors import NotFound

        if self.record is None or memory_id != self.record.id or where.owner != self.record.owner:
            raise NotFound(f"memory {memory_id} not found", field="id")
        return self.record


def service(store: RecordingStore, tmp_path) -> MemoryService:
    return MemoryService(store, FrozenClock(NOW), Settings(runtime="local", home=tmp_path))  # type: ignore[arg-type]


LI = Identity("acme", "li", frozenset())


def test_remember_refuses_a_bad_slot_value_before_the_store(tmp_path):
    store = RecordingStore()
    with pytest.raises(ValidationFailed) as caught:
        service(store, tmp_path).remember(
            LI, NewMemory(kind=MemoryKind.PROFILE, key="display.chart", content="默认", value=5)
        )
    assert caught.value.field == "value" and store.writes == []


def test_revise_refuses_a_bad_slot_value_before_the_store(tmp_path):
    record = MemoryRecord(
        id="mem_1",
        tenant="acme",
        owner="li",
        kind=MemoryKind.PROFILE,
        key="display.currency_unit",
        content="金额默认用元",
        value={"unit": "元"},
        scope=MemoryScope.USER,
        status=MemoryStatus.ACTIVE,
        version=1,
        created_at=NOW,
        updated_at=NOW,
    )
    store = RecordingStore(record)
    with pytest.raises(ValidationFailed) as caught:
        service(store, tmp_path).revise(LI, "mem_1", MemoryEdit(expected_version=1, value={"unit": "美元"}))
    assert caught.value.field == "value" and "万元" in caught.value.message and store.writes == []
