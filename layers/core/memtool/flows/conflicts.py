"""GET /conflicts and POST /conflicts/{id}/resolve: contradicting memories, found and settled.

A curator sees the conflicts of the tenant's shared memories and of every user in the tenant; a
user sees their own. Resolving keeps one member and archives the others (a new version each, with
``status_reason`` naming the conflict and the kept memory), so history shows what was decided.
Who may resolve is who may see: a user settles their own, a curator any in the tenant.
"""

from __future__ import annotations

from typing import Any

from memtool.clock import Clock
from memtool.errors import NotFound, ValidationFailed, VersionConflict
from memtool.identity import Identity
from memtool.lifecycle.conflicts import Conflict, find_conflicts
from memtool.lifecycle.walk import partitions_from
from memtool.memory.records import MemoryPatch, MemoryStatus
from memtool.memory.store import MemoryStore, Partition


class ConflictService:
    def __init__(self, store: MemoryStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def _visible(self, who: Identity) -> list[Partition]:
        if who.is_curator:
            return list(partitions_from(self._store, who.tenant, None))
        return [Partition(who.tenant, who.user)]

    def list(self, who: Identity) -> list[Conflict]:
        return find_conflicts(self._store, self._visible(who), self._clock.now())

    def resolve(self, who: Identity, conflict_id: str, keep: str) -> dict[str, Any]:
        conflict = next((c for c in self.list(who) if c.id == conflict_id), None)
        if conflict is None:
            raise NotFound(f"no conflict {conflict_id} among yours (it may be resolved already)", field="id")
        if keep not in {m.id for m in conflict.members}:
            members = ", ".join(m.id for m in conflict.members)
            raise ValidationFailed(f"keep names one of the conflict's memories: {members}", field="keep")
        where = Partition(conflict.tenant, conflict.owner)
        now = self._clock.now()
        archived = []
        for member in conflict.members:
            if member.id == keep:
                continue
            reason = f"conflict {conflict.id} resolved by {who.user}: kept {keep}"
            try:
                written = self._store.update(
                    where, member.id, MemoryPatch(status=MemoryStatus.ARCHIVED, status_reason=reason), member.version, now
                )
            except VersionConflict as exc:
                raise VersionConflict(
                    f"memory {member.id} changed while resolving the conflict; list the conflicts again",
                    current_version=exc.current_version,
                ) from exc
            archived.append({"id": written.record.id, "version": written.record.version})
        return {"id": conflict.id, "kept": keep, "archived": archived}
