"""Explicit memory writes, reads, edits and forgetting: the application service behind /memories.

It decides whose partition a request touches (the caller's own, or the tenant's shared one),
scrubs PII before anything is stored, and enforces size, scope and status rules. The store
below it knows nothing about callers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from memtool.clock import Clock
from memtool.errors import Forbidden, NotFound, ValidationFailed, VersionConflict
from memtool.identity import Identity
from memtool.knowledge.dependencies import Dependency, DependencyChecker, declared
from memtool.knowledge.sources import SOURCE_KEY_PREFIX
from memtool.memory.commands import MemoryEdit, MemoryPageRequest, NewMemory
from memtool.memory.pii import scrub_fields
from memtool.memory.policy import policy_for
from memtool.memory.records import (
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryScope,
    MemoryStatus,
    ProposalProvenance,
    Provenance,
    SourceRef,
    Trigger,
)
from memtool.memory.slots import (
    MAINTENANCE_KEY_PREFIX,
    PREFILL_KEY_PREFIX,
    PROPOSAL_KEY_PREFIX,
    SUGGESTION_KEY_PREFIX,
    check_slot_value,
    correction_term_key,
    is_governance_record,
)
from memtool.memory.store import TENANT_OWNER, ForgetOutcome, MemoryPage, MemoryStore, Partition, UndecodableRecord
from memtool.semantic.model_store import MODEL_KEY
from memtool.settings import Settings

# Slots that only memtool writes: an episode is the record of what happened (feedback trusts it).
# Slots only the ask flow writes: an episode's record, and a session's turns (a follow-up reads its
# filters back, so a turn a caller could write would be a question they never asked).
SYSTEM_KEY_PREFIXES = ("episode.", "session.")
# Kinds that hold other users' questions: read through /memories by admins only.
_ADMIN_READ = frozenset({MemoryKind.FEWSHOT, MemoryKind.CACHE})

logger = logging.getLogger("memtool.flows")


@dataclass(frozen=True)
class MemoryWriteResult:
    record: MemoryRecord
    created: bool
    superseded: MemoryRecord | None
    unchanged: bool
    redactions: dict[str, int]


class MemoryService:
    def __init__(
        self,
        store: MemoryStore,
        clock: Clock,
        settings: Settings,
        *,
        check_correction: Callable[[Any, str], None] | None = None,  # (value, tenant): CorrectionRefused for what cannot be taught
    ) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._check_correction = check_correction
        self._dependencies = DependencyChecker(store, clock)

    # ---- writes -------------------------------------------------------------------------

    def remember(self, who: Identity, memory: NewMemory, *, system: bool = False, status: MemoryStatus | None = None) -> MemoryWriteResult:
        """Store a memory for ``who``; ``system`` is memtool itself (the ask flow recording an
        episode, a diagnosis keeping its causal memory), which may write what the API refuses to
        callers, and may set the first version's ``status`` (an unverified diagnosis waits for review)."""
        memory = self._keyed_by_term(memory)
        if not system:
            self._refuse_reserved(memory.kind, memory.key)
            self._pinned_by_curators(who, memory.value)
            status = None
        policy = policy_for(memory.kind)
        scope = memory.scope or policy.default_scope
        if scope not in policy.allowed_scopes:
            allowed = ", ".join(sorted(s.value for s in policy.allowed_scopes))
            raise ValidationFailed(f"{memory.kind.value} memories take scope {allowed}", field="scope")
        if memory.kind is MemoryKind.WORKING and not memory.session_id:
            raise ValidationFailed("working memory belongs to a session", field="session_id")
        check_slot_value(memory.kind, memory.key, memory.value)
        if memory.kind is MemoryKind.CORRECTION:
            self._checked_meaning(memory.value, who.tenant)
        where = self._partition(who, scope, writing=True)
        if any(ref.depends_on is not None for ref in memory.sources):
            memory = memory.model_copy(update={"sources": self._resolved_dependencies(where, memory)})
        self._check_sizes(content=memory.content, source_text=memory.source_text, value=memory.value)
        content, source_text, value, counts = self._scrub(memory.content, memory.source_text, memory.value)
        assert content is not None  # scrubbing a str gives a str
        draft = MemoryDraft(
            kind=memory.kind,
            content=content,
            key=memory.key,
            value=value,
            source_text=source_text,
            scope=scope,
            status=status,
            confidence=memory.confidence,
            provenance=Provenance(trigger=memory.trigger, author=who.user, episode_id=memory.episode_id, sources=list(memory.sources)),
            session_id=memory.session_id,
            tags=list(memory.tags),
            redactions=counts,
        )
        outcome = self._store.create(where, draft, self._clock.now())
        return MemoryWriteResult(outcome.record, outcome.created, outcome.superseded, outcome.unchanged, counts)

    def revise(
        self, who: Identity, memory_id: str, edit: MemoryEdit, *, system: bool = False, proposal: ProposalProvenance | None = None
    ) -> MemoryWriteResult:
        """Change a memory; ``system`` is memtool itself (the ask flow appending a session's turn).
        ``proposal``: the change is an accepted proposal, recorded in the new version's provenance
        (its author is the reviewer; its dependencies stay as they were)."""
        where, current = self._locate(who, memory_id)
        self._require_write_access(who, current.scope)
        if not system:
            self._refuse_reserved(current.kind, current.key)
        if edit.status is not None and edit.status not in policy_for(current.kind).allowed_statuses:
            allowed = ", ".join(sorted(s.value for s in policy_for(current.kind).allowed_statuses))
            raise ValidationFailed(f"{current.kind.value} memories take status {allowed}", field="status")
        fields = edit.changes()
        if not fields:
            raise ValidationFailed("nothing to change", field="body")
        if "value" in fields:
            if not system:
                self._pinned_by_curators(who, fields["value"], current.value)
            check_slot_value(current.kind, current.key, fields["value"])
            if current.kind is MemoryKind.CORRECTION:
                self._same_term(current, fields["value"])
                self._checked_meaning(fields["value"], who.tenant)
        self._check_sizes(content=fields.get("content"), source_text=fields.get("source_text"), value=fields.get("value"))
        content, source_text, value, counts = self._scrub(fields.get("content"), fields.get("source_text"), fields.get("value"))
        for name, scrubbed in (("content", content), ("source_text", source_text), ("value", value)):
            if name in fields:
                fields[name] = scrubbed
        if proposal is not None:
            fields["provenance"] = current.provenance.model_copy(update={"author": who.user, "proposal": proposal})
        patch = MemoryPatch.model_validate({**fields, "redactions": counts})
        outcome = self._store.update(where, memory_id, patch, edit.expected_version, self._clock.now())
        return MemoryWriteResult(outcome.record, False, current, False, counts)

    def forget(self, who: Identity, memory_id: str) -> ForgetOutcome:
        try:
            where, current = self._locate(who, memory_id)
        except UndecodableRecord:
            # A damaged record cannot be read, but it must not be stuck: its owner (or a curator,
            # for a shared one) deletes it by id, every version and slot with it.
            where = self._partition_holding(who, memory_id)
            self._require_write_access(who, MemoryScope.TENANT if where.owner == TENANT_OWNER else MemoryScope.USER)
            logger.warning("deleting undecodable memory %s of %s/%s at the request of %s", memory_id, where.tenant, where.owner, who.user)
            return self._store.delete_by_id(where, memory_id)
        self._require_write_access(who, current.scope)
        self._require_reviewer_for(who, current.kind)
        if current.key is not None and current.key.startswith(SOURCE_KEY_PREFIX):
            raise Forbidden("a source is deleted at DELETE /sources/{id}, with its texts", field="id")
        if current.scope is MemoryScope.TENANT and is_governance_record(current.key):
            # Proposals, pre-fill tasks and suggestions (with their human overrides) are the review's record.
            raise Forbidden("proposals, pre-fill tasks and suggestions are kept as the record of their review", field="id")
        return self._store.forget(where, memory_id)

    def end_session(self, who: Identity, session_id: str) -> ForgetOutcome:
        """Clear a session's working memory (its turns and any pending clarification); 404 when
        the caller has no such session."""
        from memtool.memory.slots import SESSION_TURNS

        where = Partition(who.tenant, who.user)
        try:
            current = self._store.get_slot(where, MemoryKind.WORKING, SESSION_TURNS.key_for(session_id), self._clock.now())
        except UndecodableRecord as exc:
            return self._store.delete_by_id(where, exc.memory_id)
        if current is None:
            raise NotFound(f"session {session_id} not found (or already ended)", field="id")
        self.distil_session(who, current)
        return self._store.forget(where, current.id)

    def distil_session(self, who: Identity, session: MemoryRecord) -> MemoryRecord | None:
        """What an ending session taught, kept in the user's profile (``usage.frequent``): the metrics,
        dimensions and filters its answered turns (and its summary) asked for, added to the counts of
        the sessions before. Nothing is written for a session that answered nothing."""
        from memtool.memory.sessions import USAGE_KEY, add_counts, summary_of, usage_of
        from memtool.memory.slots import SESSION_TURNS

        counts = add_counts(summary_of(session.value), usage_of(SESSION_TURNS.read(session.value)))
        if not any(counts.values()):
            return None
        where = Partition(who.tenant, who.user)
        for _ in range(3):  # another session ending at once may have written it since
            current = self._store.get_slot(where, MemoryKind.PROFILE, USAGE_KEY, self._clock.now())
            before = current.value if current is not None and isinstance(current.value, dict) else {}
            usage = add_counts(before, counts)
            value: dict[str, Any] = {**usage, "sessions": int(before.get("sessions") or 0) + 1}
            top = ", ".join(list(usage["metrics"])[:3])
            content = f"usually asks for {top}" if top else "usage over ended sessions"
            try:
                if current is None:
                    provenance = Provenance(trigger=Trigger.INTERACTION, author=who.user, episode_id=session.provenance.episode_id)
                    draft = MemoryDraft(
                        kind=MemoryKind.PROFILE, key=USAGE_KEY, content=content, value=value, scope=MemoryScope.USER, provenance=provenance
                    )
                    return self._store.create(where, draft, self._clock.now()).record
                patch = MemoryPatch(content=content, value=value)
                return self._store.update(where, current.id, patch, current.version, self._clock.now()).record
            except VersionConflict:
                continue
        logger.warning("session %s ended, but its usage could not be kept (usage.frequent kept changing)", session.session_id)
        return None

    # ---- reads --------------------------------------------------------------------------

    def dependencies(self, record: MemoryRecord) -> list[Dependency]:
        """What ``record`` depends on, as it is now (docs/knowledge.md, Dependency chains)."""
        return self._dependencies.states(record)

    def source_dependencies(self, tenant: str, declared: Sequence[tuple[str, int | None]]) -> list[Dependency]:
        """A semantic model definition's dependencies, (source name, pinned version) each, as they are now."""
        return [self._dependencies.source_named(tenant, name, version) for name, version in declared]

    def stale_definitions(self, who: Identity, catalog: Any) -> list[tuple[str, str, list[Dependency]]]:
        """The tenant model's metrics and dimensions with a declared source that moved on or is
        gone: (``metric`` or ``dimension``, name, every dependency's state). Curators only."""
        if not who.is_curator:
            raise Forbidden("the stale knowledge of a tenant is listed for curators (role curator or admin)", field="roles")
        found = []
        for kind, items in (("metric", catalog.metrics), ("dimension", catalog.dimensions)):
            for item in items:
                if item.depends_on:
                    states = self.source_dependencies(who.tenant, [(d.source, d.version) for d in item.depends_on])
                    if any(d.stale for d in states):
                        found.append((kind, item.name, states))
        return found

    def stale_knowledge(self, who: Identity, limit: int = 2000) -> list[tuple[MemoryRecord, list[Dependency]]]:
        """The tenant's shared memories with a dependency that moved on or is gone (curators)."""
        if not who.is_curator:
            raise Forbidden("the stale list is the curators' (role curator or admin)", field="roles")
        where = Partition(who.tenant, TENANT_OWNER)
        found = []
        for record in self._store.heads(where, limit=limit):
            if record.status is not MemoryStatus.ACTIVE or not declared(record):
                continue
            states = self._dependencies.states(record)
            if any(d.stale for d in states):
                found.append((record, states))
        return found

    def _resolved_dependencies(self, where: Partition, memory: NewMemory) -> list[SourceRef]:
        """Dependencies checked and pinned; a re-written slot is the memory a cycle would lead back to."""
        slot_id = None
        if memory.key is not None:
            try:
                current = self._store.get_slot(where, memory.kind, memory.key, self._clock.now())
            except UndecodableRecord:
                current = None
            slot_id = current.id if current is not None else None
        return self._dependencies.resolve(where.tenant, where.owner, memory.sources, memory_id=slot_id)

    def recall_one(self, who: Identity, memory_id: str, version: int | None = None) -> MemoryRecord:
        where, current = self._locate(who, memory_id)
        self._require_reviewer_for(who, current.kind)
        self._hide_proposals(who, current)
        if version is None:
            return current
        return self._store.get(where, memory_id, self._clock.now(), version=version)

    def history(self, who: Identity, memory_id: str) -> list[MemoryRecord]:
        where, current = self._locate(who, memory_id)
        self._require_reviewer_for(who, current.kind)
        self._hide_proposals(who, current)
        return self._store.history(where, memory_id, self._clock.now())

    def browse(self, who: Identity, query: MemoryPageRequest) -> MemoryPage:
        """A page of the caller's memories; records the store cannot read are left out (and
        named in ``page.skipped``), so one bad record never hides the rest."""
        where = self._partition(who, query.scope, writing=False)
        if query.kind is not None:
            self._require_reviewer_for(who, query.kind)
        page = self._store.list(where, self._clock.now(), kind=query.kind, status=query.status, cursor=query.cursor, limit=query.limit)
        if not who.is_admin and any(r.kind in _ADMIN_READ for r in page.items):
            # The review queue and the SQL cache hold other users' questions: only admins read them.
            page = MemoryPage([r for r in page.items if r.kind not in _ADMIN_READ], page.next_cursor, page.skipped)
        if not who.is_curator and any(_is_proposal(r) for r in page.items):
            page = MemoryPage([r for r in page.items if not _is_proposal(r)], page.next_cursor, page.skipped)
        skipped = page.skipped
        if skipped:
            logger.warning(
                "listing %s/%s skipped %d memories that could not be read: %s",
                where.tenant,
                where.owner,
                len(skipped),
                ", ".join(skipped),
            )
        return page

    # ---- rules --------------------------------------------------------------------------

    def _partition(self, who: Identity, scope: MemoryScope, *, writing: bool) -> Partition:
        if scope is MemoryScope.TENANT:
            if writing:
                self._require_write_access(who, scope)
            return Partition(who.tenant, TENANT_OWNER)
        return Partition(who.tenant, who.user)

    def _locate(self, who: Identity, memory_id: str) -> tuple[Partition, MemoryRecord]:
        """The caller's own memory, else the tenant's shared one; anything else is not found."""
        now = self._clock.now()
        for where in (Partition(who.tenant, who.user), Partition(who.tenant, TENANT_OWNER)):
            try:
                return where, self._store.get(where, memory_id, now)
            except NotFound:
                continue
        raise NotFound(f"memory {memory_id} not found", field="id")

    def _partition_holding(self, who: Identity, memory_id: str) -> Partition:
        """Where the caller's (or the tenant's) memory ``memory_id`` is, readable or not."""
        now = self._clock.now()
        for where in (Partition(who.tenant, who.user), Partition(who.tenant, TENANT_OWNER)):
            try:
                self._store.get(where, memory_id, now)
            except UndecodableRecord:
                return where
            except NotFound:
                continue
            return where
        raise NotFound(f"memory {memory_id} not found", field="id")

    @staticmethod
    def _keyed_by_term(memory: NewMemory) -> NewMemory:
        """A correction that teaches a term is kept under that term's key (``term.<term>``, as
        feedback and a clarification keep theirs): a second correction of the term, by the same
        owner, is a new version that supersedes the first, never a second active one."""
        key = correction_term_key(memory.value) if memory.kind is MemoryKind.CORRECTION else None
        if key is None or memory.key == key:
            return memory
        if memory.key is not None:
            raise ValidationFailed(f"a correction of a term is kept under the term's key, {key}: leave key out", field="key")
        return memory.model_copy(update={"key": key})

    @staticmethod
    def _same_term(current: MemoryRecord, value: Any) -> None:
        """An edit keeps the term a correction teaches (its key names it): another term is a new correction."""
        key = correction_term_key(value)
        if key is not None and key not in (current.key, correction_term_key(current.value)):
            raise ValidationFailed(
                "an edit keeps the term a correction teaches; a correction of another term is a new memory (POST /memories)",
                field="value.term",
            )

    def _checked_meaning(self, value: Any, tenant: str) -> None:
        if self._check_correction is None:
            return
        from memtool.feedback.corrections import CorrectionRefused

        try:
            self._check_correction(value, tenant)
        except CorrectionRefused as exc:
            raise ValidationFailed(str(exc), field=f"value.{exc.part}") from exc

    @staticmethod
    def _pinned_by_curators(who: Identity, value: Any, before: Any = None) -> None:
        """``value.pinned`` (a golden memory: maintenance never decays, merges or evicts it) is a curator's to set or clear."""

        def pinned(v: Any) -> bool:
            return isinstance(v, dict) and v.get("pinned") is True

        if pinned(value) != pinned(before) and not who.is_curator:
            raise Forbidden("pinning a memory (value.pinned) is for curators: a pinned memory never decays or leaves", field="value.pinned")

    @staticmethod
    def _refuse_reserved(kind: MemoryKind, key: str | None) -> None:
        """What only memtool writes: few-shots (from feedback, reviewed at /fewshots) and episodes."""
        if kind is MemoryKind.FEWSHOT:
            raise Forbidden("few-shots are recorded from thumbs-up feedback and reviewed at /fewshots/{id}/approve|reject", field="kind")
        if kind is MemoryKind.CACHE:
            raise Forbidden("the SQL cache is written by the ask flow only", field="kind")
        if kind is MemoryKind.CAUSAL:
            raise Forbidden("causal memories are made by diagnosis (POST /diagnose) and shared at /lessons/{id}/share", field="kind")
        if key is not None and key.startswith("episode."):
            raise Forbidden("keys starting with 'episode.' hold the ask flow's record of what happened", field="key")
        if key is not None and key.startswith(SYSTEM_KEY_PREFIXES):
            raise Forbidden(
                "keys starting with 'session.' hold a session's turns, written by POST /ask only (end a session with "
                "DELETE /sessions/{id})",
                field="key",
            )
        if key is not None and key.startswith(MAINTENANCE_KEY_PREFIX):
            raise Forbidden("keys starting with 'maintenance.' hold MaintenanceFlow's report and state", field="key")
        if key is not None and key.startswith(SOURCE_KEY_PREFIX):
            raise Forbidden("keys starting with 'source.' hold sources, written at POST /sources", field="key")
        if key is not None and key.startswith(PROPOSAL_KEY_PREFIX):
            raise Forbidden("keys starting with 'proposal.' hold proposals, made at POST /proposals", field="key")
        if key is not None and key.startswith((PREFILL_KEY_PREFIX, SUGGESTION_KEY_PREFIX)):
            raise Forbidden("keys starting with 'prefill.' or 'suggestion.' hold pre-fill tasks and suggestions (/prefill)", field="key")
        if kind is MemoryKind.KNOWLEDGE and key == MODEL_KEY:
            raise Forbidden("the semantic model is written at PUT /model (memtool model push), where it is validated", field="key")

    @staticmethod
    def _require_reviewer_for(who: Identity, kind: MemoryKind) -> None:
        if kind is MemoryKind.FEWSHOT and not who.is_admin:
            raise Forbidden("the few-shot library is read by admins, at /fewshots", field="kind")
        if kind is MemoryKind.CACHE and not who.is_admin:
            raise Forbidden("the SQL cache holds the tenant's questions: admins read it", field="kind")

    @staticmethod
    def _hide_proposals(who: Identity, record: MemoryRecord) -> None:
        """Proposals are read at /proposals, where a user sees only their own: not through /memories."""
        if _is_proposal(record) and not who.is_curator:
            raise NotFound(f"memory {record.id} not found", field="id")

    @staticmethod
    def _require_write_access(who: Identity, scope: MemoryScope) -> None:
        if scope is MemoryScope.TENANT and not who.is_curator:
            raise Forbidden("shared (tenant) memories are written by curators", field="scope")

    def _check_sizes(self, **fields: Any) -> None:
        limit = self._settings.max_content_bytes
        for name, value in fields.items():
            if value is None:
                continue
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            size = len(text.encode("utf-8"))
            if size > limit:
                raise ValidationFailed(f"is {size} bytes; the limit is {limit} bytes (UTF-8)", field=name)

    @staticmethod
    def _scrub(content: str | None, source_text: str | None, value: Any) -> tuple[str | None, str | None, Any, dict[str, int]]:
        return scrub_fields(content, source_text, value)


def _is_proposal(record: MemoryRecord) -> bool:
    return record.scope is MemoryScope.TENANT and bool(record.key and record.key.startswith(PROPOSAL_KEY_PREFIX))
