"""Proposals: any member of a tenant proposes a change to a shared definition, and a curator
accepts or rejects it (docs/knowledge.md, Proposals). The application service behind /proposals.

A proposal is a ``knowledge`` record in the tenant's shared partition, slot ``proposal.<token>``:
the record store's versions and optimistic locking are the proposal's, and its ``value`` holds
what was proposed (``ProposalValue``, read back as hostile input). Proposals are never recalled
and never listed through /memories for anyone but curators; a user sees their own at /proposals.

A proposal names its target (a shared knowledge memory or correction) at the version it was made
against, ``base_version``. While the target stays at that version the proposal is ``open``; once
the target moves on it is ``outdated`` and must be re-based (``rebase``) before it can be
accepted. Accepting writes the target's next version through the memory service, so every rule of
a write holds (sizes, PII, a correction's term and meaning), with the proposal in its provenance
``{proposal_id, proposer, reviewer}``. A rejected proposal changes nothing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memtool.clock import Clock
from memtool.errors import Forbidden, NotFound, ValidationFailed, VersionConflict
from memtool.flows.memory_write import MemoryService
from memtool.identity import Identity
from memtool.knowledge.governance import governance_draft, parsed, scan, shared
from memtool.memory.commands import MemoryEdit
from memtool.memory.pii import scrub_fields
from memtool.memory.records import (
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryScope,
    MemoryStatus,
    ProposalProvenance,
)
from memtool.memory.slots import MAINTENANCE_KEY_PREFIX, PROPOSAL_KEY_PREFIX, is_governance_record
from memtool.memory.store import MemoryStore, Partition, UndecodableRecord
from memtool.semantic.model_store import MODEL_KEY

PROPOSAL_TAG = "proposal"
PROPOSABLE_KINDS = (MemoryKind.KNOWLEDGE, MemoryKind.CORRECTION)
CHANGE_FIELDS = ("content", "value")


class ProposalState(StrEnum):
    """What a proposal's record says."""

    OPEN = "open"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ProposalStatus(StrEnum):
    """What a proposal is now: ``outdated`` is an open proposal whose target moved past its base."""

    OPEN = "open"
    OUTDATED = "outdated"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class ProposalValue(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    target_id: str
    target_kind: MemoryKind
    target_key: str | None
    base_version: int = Field(ge=1)
    change: dict[str, Any]
    reason: str
    from_memory_id: str | None = None
    from_version: int | None = None
    proposer: str
    state: ProposalState = ProposalState.OPEN
    reviewer: str | None = None
    decision_reason: str | None = None
    decided_at: datetime | None = None
    result_version: int | None = None


@dataclass(frozen=True)
class Proposal:
    id: str
    version: int  # of the proposal's own record
    value: ProposalValue
    status: ProposalStatus
    target_version: int | None  # the target's version now; None when it is gone
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class ProposalListing:
    items: list[Proposal]
    next_cursor: str | None


@dataclass(frozen=True)
class Decision:
    proposal: Proposal
    target: MemoryRecord | None  # the target's new version (accepted); None when rejected


class ProposalOutdated(VersionConflict):
    """The target moved past the version the proposal was made against: re-base it first."""

    code = "proposal_outdated"


class ProposalService:
    def __init__(self, store: MemoryStore, memories: MemoryService, clock: Clock) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock

    # ---- making one ---------------------------------------------------------------------

    def propose(
        self,
        who: Identity,
        *,
        reason: str,
        target_id: str | None = None,
        change: dict[str, Any] | None = None,
        from_memory_id: str | None = None,
    ) -> Proposal:
        """Propose ``change`` to the shared memory ``target_id``; or propose the caller's own memory
        ``from_memory_id`` (a personal correction) to the shared one of the same kind and key."""
        now = self._clock.now()
        source = self._own_memory(who, from_memory_id) if from_memory_id is not None else None
        target = self._target(who, target_id, source)
        if change is None:
            if source is None:
                raise ValidationFailed("give the change ({content, value}) or from_memory_id", field="change")
            change = {"content": source.content}
            if source.kind is target.kind and source.value is not None:
                change["value"] = source.value
        scrubbed = _scrubbed(_checked_change(change, target))
        reason_text = _scrubbed_text(reason) or ""
        proposal = ProposalValue(
            target_id=target.id,
            target_kind=target.kind,
            target_key=target.key,
            base_version=target.version,
            change=scrubbed,
            reason=reason_text,
            from_memory_id=source.id if source else None,
            from_version=source.version if source else None,
            proposer=who.user,
        )
        draft = governance_draft(
            PROPOSAL_KEY_PREFIX + secrets.token_hex(8),
            f"Proposal to change {target.key or target.id} (v{target.version}): {reason_text}",
            proposal,
            who.user,
            [PROPOSAL_TAG, f"proposal_state:{ProposalState.OPEN.value}"],
        )
        record = self._store.create(shared(who.tenant), draft, now).record
        return self._view(record, proposal)

    # ---- reading ------------------------------------------------------------------------

    def get(self, who: Identity, proposal_id: str) -> Proposal:
        record, value = self._load(who, proposal_id)
        return self._view(record, value)

    def list(self, who: Identity, status: ProposalStatus | None = None, cursor: str | None = None, limit: int = 20) -> ProposalListing:
        """Curators: the tenant's proposals. Anyone else: the proposals they made."""

        def pick(record: MemoryRecord) -> Proposal | None:
            value = proposal_value(record)
            if value is None or not (who.is_curator or value.proposer == who.user):
                return None
            proposal = self._view(record, value)
            return proposal if status is None or proposal.status is status else None

        items, next_cursor = scan(self._store, who.tenant, self._clock.now(), pick, cursor, limit)
        return ProposalListing(items=items, next_cursor=next_cursor)

    # ---- deciding -----------------------------------------------------------------------

    def accept(self, who: Identity, proposal_id: str, *, change: dict[str, Any] | None = None, reason: str | None = None) -> Decision:
        """Write the target's next version with the proposal's change (or the curator's edit of it)."""
        _require_curator(who, "accepts")
        record, value = self._load(who, proposal_id)
        _require_open(value)
        target = self._target_head(who.tenant, value.target_id)
        proposal = ProposalProvenance(proposal_id=record.id, proposer=value.proposer, reviewer=who.user)
        if target is not None and target.provenance.proposal == proposal and target.version == value.base_version + 1:
            written = target  # an accept that stopped after writing the target: finish recording it
        else:
            if target is None or target.version != value.base_version:
                raise _outdated(value, target)
            final = _scrubbed(_checked_change(change, target)) if change is not None else value.change
            edit = MemoryEdit.model_validate({"expected_version": value.base_version, **final})
            try:
                written = self._memories.revise(who, value.target_id, edit, proposal=proposal).record
            except VersionConflict:
                now = self._target_head(who.tenant, value.target_id)
                if now is not None and now.provenance.proposal is not None and now.provenance.proposal.proposal_id == record.id:
                    raise VersionConflict(f"the proposal was just accepted by {now.provenance.proposal.reviewer}") from None
                raise _outdated(value, now) from None
            value = value.model_copy(update={"change": final})
        decided = value.model_copy(
            update={
                "state": ProposalState.ACCEPTED,
                "reviewer": who.user,
                "decision_reason": _scrubbed_text(reason),
                "decided_at": self._clock.now(),
                "result_version": written.version,
            }
        )
        return Decision(self._save(record, decided), written)

    def reject(self, who: Identity, proposal_id: str, *, reason: str) -> Decision:
        _require_curator(who, "rejects")
        record, value = self._load(who, proposal_id)
        _require_open(value)
        decided = value.model_copy(
            update={
                "state": ProposalState.REJECTED,
                "reviewer": who.user,
                "decision_reason": _scrubbed_text(reason),
                "decided_at": self._clock.now(),
            }
        )
        return Decision(self._save(record, decided), None)

    def rebase(self, who: Identity, proposal_id: str, *, change: dict[str, Any] | None = None) -> Proposal:
        """Move an open proposal onto its target's version now (optionally with a new change):
        the proposer or a curator."""
        record, value = self._load(who, proposal_id)
        if not (who.is_curator or value.proposer == who.user):
            raise Forbidden("a proposal is re-based by its proposer or a curator", field="roles")
        _require_open(value)
        target = self._target_head(who.tenant, value.target_id)
        if target is None:
            raise NotFound(f"the target {value.target_id} of proposal {proposal_id} is gone: nothing to re-base onto", field="target_id")
        final = _scrubbed(_checked_change(change if change is not None else value.change, target))
        return self._save(record, value.model_copy(update={"base_version": target.version, "change": final}))

    # ---- inside -------------------------------------------------------------------------

    def _own_memory(self, who: Identity, memory_id: str) -> MemoryRecord:
        try:
            return self._store.get(Partition(who.tenant, who.user), memory_id, self._clock.now())
        except (NotFound, UndecodableRecord):
            raise NotFound(f"memory {memory_id} is not one of yours", field="from_memory_id") from None

    def _target(self, who: Identity, target_id: str | None, source: MemoryRecord | None) -> MemoryRecord:
        if target_id is not None:
            target = self._target_head(who.tenant, target_id)
            if target is None:
                raise NotFound(f"no shared memory {target_id} in this tenant", field="target_id")
        else:
            if source is None:
                raise ValidationFailed("give target_id, or from_memory_id to propose your own memory", field="target_id")
            found = None
            if source.key:
                try:
                    found = self._store.get_slot(shared(who.tenant), source.kind, source.key, self._clock.now())
                except UndecodableRecord:
                    found = None
            if found is None:
                raise ValidationFailed(
                    f"no shared {source.kind.value} has the key of memory {source.id} ({source.key or 'no key'}): give target_id",
                    field="target_id",
                )
            target = found
        if is_governance_record(target.key) or target.key == MODEL_KEY:
            # another user's proposal, a suggestion, a task or the model: not a definition to propose to
            raise NotFound(f"no shared memory {target.id} in this tenant takes proposals", field="target_id")
        problem = _not_proposable(target)
        if problem:
            raise ValidationFailed(problem, field="target_id")
        return target

    def _target_head(self, tenant: str, target_id: str) -> MemoryRecord | None:
        try:
            return self._store.get(shared(tenant), target_id, self._clock.now())
        except (NotFound, UndecodableRecord):
            return None

    def _load(self, who: Identity, proposal_id: str) -> tuple[MemoryRecord, ProposalValue]:
        missing = NotFound(f"proposal {proposal_id} not found", field="id")
        try:
            record = self._store.get(shared(who.tenant), proposal_id, self._clock.now())
        except (NotFound, UndecodableRecord):
            raise missing from None
        value = proposal_value(record)
        if value is None or not (who.is_curator or value.proposer == who.user):
            raise missing  # another user's proposal is not found, as another user's memory is
        return record, value

    def _save(self, record: MemoryRecord, value: ProposalValue) -> Proposal:
        patch = MemoryPatch(value=value.model_dump(mode="json"), tags=[PROPOSAL_TAG, f"proposal_state:{value.state.value}"])
        written = self._store.update(shared(record.tenant), record.id, patch, record.version, self._clock.now()).record
        return self._view(written, value)

    def _view(self, record: MemoryRecord, value: ProposalValue) -> Proposal:
        target = self._target_head(record.tenant, value.target_id)
        target_version = target.version if target is not None else None
        if value.state is ProposalState.OPEN:
            status = ProposalStatus.OPEN if target_version == value.base_version else ProposalStatus.OUTDATED
        else:
            status = ProposalStatus(value.state.value)
        return Proposal(
            id=record.id,
            version=record.version,
            value=value,
            status=status,
            target_version=target_version,
            created_at=record.created_at,
            updated_at=record.updated_at,
        )


def proposal_value(record: MemoryRecord) -> ProposalValue | None:
    """A record's proposal, or None when it is not a (valid) one: stored values are hostile input."""
    value = parsed(record, PROPOSAL_KEY_PREFIX, ProposalValue)
    return value if value is not None and value.change and set(value.change) <= set(CHANGE_FIELDS) else None


def _not_proposable(target: MemoryRecord) -> str | None:
    if target.scope is not MemoryScope.TENANT:
        return f"memory {target.id} is not shared: only the tenant's memories take proposals"
    if target.kind not in PROPOSABLE_KINDS:
        return f"a {target.kind.value} memory takes no proposals (knowledge and corrections do)"
    key = target.key or ""
    if is_governance_record(key) or key.startswith(MAINTENANCE_KEY_PREFIX) or key == MODEL_KEY:
        return f"memory {target.id} ({key}) is written through its own route, not by proposals"
    if target.status is not MemoryStatus.ACTIVE:
        return f"memory {target.id} is {target.status.value}: only an active memory takes proposals"
    return None


def _checked_change(change: dict[str, Any], target: MemoryRecord) -> dict[str, Any]:
    unknown = sorted(set(change) - set(CHANGE_FIELDS))
    if unknown:
        raise ValidationFailed(f"a change holds content and value only (not {', '.join(unknown)})", field="change")
    if not change:
        raise ValidationFailed("the change is empty: give content, value or both", field="change")
    if "content" in change and (not isinstance(change["content"], str) or not change["content"].strip()):
        raise ValidationFailed("content is a non-empty text", field="change.content")
    if all(getattr(target, name) == new for name, new in change.items()):
        raise ValidationFailed(f"memory {target.id} v{target.version} already says this: nothing to change", field="change")
    return dict(change)


def _scrubbed(change: dict[str, Any]) -> dict[str, Any]:
    """A change with PII redacted, as every memory write redacts it (memtool.memory.pii)."""
    content, _, value, _ = scrub_fields(change.get("content"), None, change.get("value"))
    return {**change, **({"content": content} if "content" in change else {}), **({"value": value} if "value" in change else {})}


def _scrubbed_text(text: str | None) -> str | None:
    return None if text is None else scrub_fields(text, None, None)[0]


def _require_curator(who: Identity, verb: str) -> None:
    if not who.is_curator:
        raise Forbidden(f"a curator (role curator or admin) {verb} proposals", field="roles")


def _require_open(value: ProposalValue) -> None:
    if value.state is not ProposalState.OPEN:
        raise VersionConflict(f"the proposal was already {value.state.value} by {value.reviewer}")


def _outdated(value: ProposalValue, target: MemoryRecord | None) -> ProposalOutdated:
    if target is None:
        return ProposalOutdated(f"the target {value.target_id} is gone: the proposal cannot be accepted (reject it)")
    return ProposalOutdated(
        f"the proposal was made against v{value.base_version} of {value.target_key or value.target_id}, which is at "
        f"v{target.version} now: re-base it (POST /proposals/{{id}}/rebase) and review it again",
        current_version=target.version,
    )


__all__ = [
    "Decision",
    "Proposal",
    "ProposalListing",
    "ProposalOutdated",
    "ProposalService",
    "ProposalState",
    "ProposalStatus",
    "ProposalValue",
    "proposal_value",
]
