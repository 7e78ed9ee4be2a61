"""The semantic model store on every record-store adapter (DynamoDB on moto, SQLite): one knowledge
memory per tenant, versions and history, optimistic locking, curators only, refusals that change
nothing, the parsed-model cache, and sizes DynamoDB would accept (moto checks none)."""

from __future__ import annotations

import copy
import uuid
from decimal import Decimal
from typing import Any

import pytest

from memtool.errors import Forbidden, ModelMissing, NotFound, VersionConflict
from memtool.identity import Identity
from memtool.memory.records import MemoryKind, MemoryPatch, MemoryScope
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition
from memtool.runtime import container
from memtool.semantic.catalog import load_catalog
from memtool.semantic.model_store import MODEL_KEY, ModelStore
from memtool.semantic.validation import MODEL_MAX_BYTES, ModelProblem, ModelRejected, stored_size
from tests.support import table_items

DYNAMODB_ITEM_LIMIT = 400 * 1024


@pytest.fixture
def models(store: MemoryStore, clock) -> ModelStore:
    return ModelStore(store, clock)


@pytest.fixture
def tenant() -> str:
    return f"acme-{uuid.uuid4().hex[:6]}"


def curator(tenant: str, user: str = "zhang") -> Identity:
    return Identity(tenant, user, frozenset({"curator"}))


def demo() -> dict[str, Any]:
    return copy.deepcopy(load_catalog().model_dump(mode="json"))


def relabelled(document: dict[str, Any], version: str) -> dict[str, Any]:
    return {**document, "model_version": version}


def test_versions_history_and_a_stale_expected_version(models: ModelStore, store: MemoryStore, tenant: str, clock) -> None:
    # Given the demo model stored by a curator
    first = models.put(tenant, demo(), actor=curator(tenant), expected_version=None)
    assert (first.version, first.model_version, first.updated_by) == (1, load_catalog().model_version, "zhang")

    # When a changed model is stored on version 1
    clock.advance(minutes=5)
    second = models.put(tenant, relabelled(demo(), "2026.12.1"), actor=curator(tenant, "wang"), expected_version=1)

    # Then it is version 2 of the same memory, and history has both
    assert (second.version, second.model_version, second.memory_id) == (2, "2026.12.1", first.memory_id)
    assert [(h.version, h.model_version, h.updated_by) for h in models.history(tenant)] == [
        (1, load_catalog().model_version, "zhang"),
        (2, "2026.12.1", "wang"),
    ]
    assert models.get(tenant, 1).model_version == load_catalog().model_version
    # the memory is tenant knowledge in the slot, as the store sees it
    record = store.get_slot(Partition(tenant, TENANT_OWNER), MemoryKind.KNOWLEDGE, MODEL_KEY, clock.now())
    assert record is not None and record.scope is MemoryScope.TENANT and record.version == 2
    assert record.value["model_version"] == "2026.12.1" and "8 metrics" in record.content

    # And a write on the stale version 1 is a conflict that changes nothing
    with pytest.raises(VersionConflict) as conflict:
        models.put(tenant, relabelled(demo(), "lost"), actor=curator(tenant), expected_version=1)
    assert conflict.value.current_version == 2
    with pytest.raises(VersionConflict):  # nor may a second "first" model replace it
        models.put(tenant, relabelled(demo(), "lost"), actor=curator(tenant), expected_version=None)
    active = models.active(tenant)
    assert active is not None and (active.version, active.model_version) == (2, "2026.12.1")


def test_a_non_curator_is_forbidden_and_nothing_is_stored(models: ModelStore, tenant: str) -> None:
    with pytest.raises(Forbidden):
        models.put(tenant, demo(), actor=Identity(tenant, "li"), expected_version=None)
    with pytest.raises(Forbidden):  # nor may a curator write another tenant's
        models.put(tenant, demo(), actor=curator("other"), expected_version=None)
    assert models.active(tenant) is None
    assert models.history(tenant) == []
    with pytest.raises(ModelMissing) as missing:
        models.get(tenant)
    assert isinstance(missing.value, NotFound) and "memtool model push" in missing.value.message


def test_a_refused_model_leaves_the_version_in_force(models: ModelStore, tenant: str) -> None:
    models.put(tenant, demo(), actor=curator(tenant), expected_version=None)
    broken = demo()
    broken["metrics"][0]["dimensions"] = ["colour"]

    with pytest.raises(ModelRejected) as refused:
        models.put(tenant, broken, actor=curator(tenant), expected_version=1)
    assert [p.path for p in refused.value.problems] == ["metrics[0].dimensions"]

    # the caller's own check (the warehouse's) refuses too, with its problems
    def warehouse_says_no(model):
        return [ModelProblem("metrics[1].expression", "column gone")]

    with pytest.raises(ModelRejected) as refused:
        models.put(tenant, relabelled(demo(), "x"), actor=curator(tenant), expected_version=1, validate=warehouse_says_no)
    assert refused.value.problems == [ModelProblem("metrics[1].expression", "column gone")]

    active = models.active(tenant)
    assert active is not None and active.version == 1
    assert [h.version for h in models.history(tenant)] == [1]


def test_the_head_is_read_every_time_but_parsed_once_per_version(models: ModelStore, store: MemoryStore, tenant: str) -> None:
    models.put(tenant, demo(), actor=curator(tenant), expected_version=None)
    fresh = ModelStore(store, container.clock())  # another process: nothing cached

    first, again = fresh.active(tenant), fresh.active(tenant)
    assert first is not None and again is not None and first.model is again.model  # parsed once

    # a new version written through another instance is seen at once
    models.put(tenant, relabelled(demo(), "2026.12.1"), actor=curator(tenant), expected_version=1)
    seen = fresh.active(tenant)
    assert seen is not None and (seen.version, seen.model_version) == (2, "2026.12.1")


def test_a_head_written_beneath_the_store_that_does_not_parse_never_takes_effect(
    models: ModelStore, store: MemoryStore, tenant: str, clock
) -> None:
    active = models.put(tenant, demo(), actor=curator(tenant), expected_version=None)
    # e.g. a curator's PATCH /memories/{id} on the model's memory
    store.update(Partition(tenant, TENANT_OWNER), active.memory_id, MemoryPatch(value={"metrics": "gone"}), 1, clock.now())

    still = models.active(tenant)
    assert still is not None and (still.version, still.model_version) == (1, active.model_version)


def test_the_demo_model_and_one_near_the_limit_fit_and_a_larger_one_is_refused(
    models: ModelStore, store: MemoryStore, tenant: str, request: pytest.FixtureRequest
) -> None:
    document = demo()
    models.put(tenant, document, actor=curator(tenant), expected_version=None)
    padded = {**relabelled(demo(), "padded"), "description": ""}
    base = stored_size(padded)
    padded["description"] = "界" * ((MODEL_MAX_BYTES - base - 1000) // 6)  # stored escaped (\u754c): 6 bytes each
    stored = models.put(tenant, padded, actor=curator(tenant), expected_version=1)
    assert stored.version == 2 and models.get(tenant).model.description == padded["description"]

    too_big = {**padded, "description": padded["description"] + "界" * 1000}
    with pytest.raises(ModelRejected) as refused:
        models.put(tenant, too_big, actor=curator(tenant), expected_version=2)
    assert "the limit is 300,000 bytes" in refused.value.problems[0].message

    if not isinstance(store, SQLiteMemoryStore):
        # moto accepts items of any size; DynamoDB refuses one over 400 KB: measure them as it does
        items = [i for i in table_items(request.getfixturevalue("aws")) if i.get("memory_id", {}).get("S") == stored.memory_id]
        assert len(items) >= 3  # head, two snapshots (and the slot)
        sizes = [item_size(i) for i in items]
        assert max(sizes) > MODEL_MAX_BYTES  # the padded version's items were measured
        assert max(sizes) < DYNAMODB_ITEM_LIMIT, sizes


def item_size(item: dict[str, Any]) -> int:
    """An item's size as DynamoDB counts it: attribute names plus values (UTF-8 strings, numbers
    about one byte per two digits, 3 bytes of overhead for each map or list and its elements)."""
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def value_size(value: dict[str, Any]) -> int:
    (kind, inner), = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        digits = str(Decimal(inner)).lstrip("-").replace(".", "")
        return (len(digits.strip("0")) + 1) // 2 + 1
    if kind == "B":
        return len(inner)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(len(str(v).encode()) for v in inner)
    raise AssertionError(kind)
