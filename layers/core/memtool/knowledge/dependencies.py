"""Dependency chains: what a knowledge memory depends on, checked on every read.

A memory declares dependencies as ``provenance.sources`` entries with ``depends_on`` set: a
``source`` (memtool.knowledge.sources) or another ``memory``, each at a version. Sources are
records in the tenant's shared partition, so both resolve the same way: in the tenant's shared
partition, or (for a user's own memory) in that user's partition. Nothing else is reachable, so a
dependency can never name, or reveal the state of, another user's memory.

A dependency is ``current`` while its newest version is the one declared, ``newer`` once a later
version exists, and ``gone`` when it was forgotten or deleted. Either of the last two makes the
memory ``stale``: reads and answers that cite it say so (docs/knowledge.md). A write that would
close a cycle (A depends on B, which depends on A) is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memtool.clock import Clock
from memtool.errors import NotFound, ValidationFailed
from memtool.knowledge.sources import SOURCE_KEY_PREFIX, is_source
from memtool.memory.records import MemoryKind, MemoryRecord, SourceRef
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition, UndecodableRecord

MAX_DEPENDENCIES = 20
_MAX_WALK = 200  # records a cycle check visits at most

DependencyState = Literal["current", "newer", "gone"]


@dataclass(frozen=True)
class Dependency:
    id: str
    depends_on: Literal["source", "memory"]
    version: int  # the version depended on
    latest_version: int | None  # None: gone
    name: str  # a source's name, a memory's key or the start of its content

    @property
    def state(self) -> DependencyState:
        if self.latest_version is None:
            return "gone"
        return "newer" if self.latest_version > self.version else "current"

    @property
    def stale(self) -> bool:
        return self.state != "current"

    def describe(self) -> str:
        """ "refunds-policy v2; v3 exists" / "refunds-policy v2; it was deleted"."""
        if self.latest_version is None:
            return f"{self.name} v{self.version}; it was deleted"
        if self.latest_version > self.version:
            return f"{self.name} v{self.version}; v{self.latest_version} exists"
        return f"{self.name} v{self.version}"

    def as_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "depends_on": self.depends_on,
            "version": self.version,
            "latest_version": self.latest_version,
            "name": self.name,
            "state": self.state,
        }


def declared(record: MemoryRecord) -> list[SourceRef]:
    return [ref for ref in record.provenance.sources if ref.depends_on is not None]


class DependencyChecker:
    def __init__(self, store: MemoryStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def states(self, record: MemoryRecord) -> list[Dependency]:
        """The state of each dependency ``record`` declares (none: an empty list)."""
        return [self._state(record.tenant, record.owner, ref) for ref in declared(record)]

    def resolve(self, tenant: str, owner: str, refs: Sequence[SourceRef], *, memory_id: str | None = None) -> list[SourceRef]:
        """The dependencies a write declares, each checked and pinned to a version (the newest when
        none is given). ``memory_id`` is the memory being revised, when it exists: a dependency
        that leads back to it is a cycle. ``ValidationFailed`` naming ``depends_on`` otherwise."""
        checked = [ref for ref in refs if ref.depends_on is not None]
        if len(checked) > MAX_DEPENDENCIES:
            raise ValidationFailed(f"a memory depends on at most {MAX_DEPENDENCIES} items", field="depends_on")
        pinned: list[SourceRef] = []
        for index, ref in enumerate(checked):
            head = self._head(tenant, owner, ref.id)
            field = f"depends_on.{index}"
            if head is not None and ref.depends_on == "memory" and _not_dependable(head):
                head = None  # a proposal, a pre-fill record or the model is no definition to depend on: not found
            if head is None or is_source(head) != (ref.depends_on == "source"):
                raise ValidationFailed(f"{ref.depends_on} {ref.id} not found (for this caller)", field=field)
            if ref.version is not None and ref.version > head.version:
                raise ValidationFailed(f"{ref.depends_on} {ref.id} has no version {ref.version} (it is at {head.version})", field=field)
            if memory_id is not None and (ref.id == memory_id or self._leads_to(tenant, owner, head, memory_id)):
                raise ValidationFailed(f"depending on {ref.id} would make a cycle: it depends on {memory_id}", field=field)
            pinned.append(SourceRef(id=ref.id, version=ref.version or head.version, depends_on=ref.depends_on))
        others = [ref for ref in refs if ref.depends_on is None]
        return [*others, *pinned]

    def source_named(self, tenant: str, name: str, version: int | None) -> Dependency:
        """A semantic model's dependency: the tenant's source ``name`` at ``version``, as it is now."""
        head = self._source_head(tenant, name)
        pinned = version or 1
        if head is None:
            return Dependency(name, "source", pinned, None, name)
        return Dependency(head.id, "source", pinned, head.version, name)

    def pin_source(self, tenant: str, name: str, version: int | None) -> int:
        """The version a model's dependency on ``name`` is pinned to (the newest when none is given);
        ``ValueError`` with what is wrong when the source or that version does not exist."""
        head = self._source_head(tenant, name)
        if head is None:
            raise ValueError(f"the tenant has no source named {name!r} (store it with POST /sources)")
        if version is not None and version > head.version:
            raise ValueError(f"source {name} has no version {version} (it is at {head.version})")
        return version or head.version

    # ---- inside ---------------------------------------------------------------------------

    def _source_head(self, tenant: str, name: str) -> MemoryRecord | None:
        try:
            head = self._store.get_slot(Partition(tenant, TENANT_OWNER), MemoryKind.KNOWLEDGE, SOURCE_KEY_PREFIX + name, self._clock.now())
        except UndecodableRecord:
            return None
        return head if head is not None and is_source(head) else None

    def _state(self, tenant: str, owner: str, ref: SourceRef) -> Dependency:
        assert ref.depends_on is not None
        head = self._head(tenant, owner, ref.id)
        version = ref.version or 1
        if head is None:
            return Dependency(ref.id, ref.depends_on, version, None, ref.id)
        return Dependency(ref.id, ref.depends_on, version, head.version, _name_of(head))

    def _head(self, tenant: str, owner: str, memory_id: str) -> MemoryRecord | None:
        owners = [TENANT_OWNER] if owner == TENANT_OWNER else [TENANT_OWNER, owner]
        now = self._clock.now()
        for who in owners:
            try:
                return self._store.get(Partition(tenant, who), memory_id, now)
            except (NotFound, UndecodableRecord):
                continue
        return None

    def _leads_to(self, tenant: str, owner: str, start: MemoryRecord, target: str) -> bool:
        """Whether ``start``'s dependencies, followed through, reach ``target``."""
        seen: set[str] = {start.id}
        frontier = [start]
        while frontier and len(seen) < _MAX_WALK:
            record = frontier.pop()
            for ref in declared(record):
                if ref.id == target:
                    return True
                if ref.id in seen:
                    continue
                seen.add(ref.id)
                head = self._head(tenant, owner, ref.id)
                if head is not None:
                    frontier.append(head)
        return False


def _not_dependable(record: MemoryRecord) -> bool:
    from memtool.memory.slots import PREFILL_KEY_PREFIX, PROPOSAL_KEY_PREFIX, SUGGESTION_KEY_PREFIX, is_maintenance_record
    from memtool.semantic.model_store import MODEL_KEY

    key = record.key or ""
    governance = key.startswith((PROPOSAL_KEY_PREFIX, PREFILL_KEY_PREFIX, SUGGESTION_KEY_PREFIX))
    return governance or key == MODEL_KEY or is_maintenance_record(key)


def _name_of(record: MemoryRecord) -> str:
    if is_source(record) and record.key:
        return record.key[len(SOURCE_KEY_PREFIX) :]
    if record.key:
        return record.key
    content = record.content.strip().splitlines()[0] if record.content.strip() else record.id
    return content if len(content) <= 60 else content[:57] + "..."


__all__ = ["MAX_DEPENDENCIES", "Dependency", "DependencyChecker", "declared"]
