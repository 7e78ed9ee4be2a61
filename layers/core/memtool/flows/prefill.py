"""Pre-fill tasks and the suggestions they write, kept apart from human values (docs/knowledge.md,
Pre-fill). The application service behind /prefill and /suggestions.

A task freezes its input when it is made: the sources' ids and versions, an ``input_fingerprint``
(SHA-256 over them and their texts' digests), and the ``expected_version`` of every suggestion it
will write (0: none yet). Running it later reads exactly those versions, and writes a suggestion
only where its target is still at the expected version; a target that moved on (a human
override, a newer task) makes that suggestion ``superseded``, and nothing is overwritten.

A suggestion is a ``knowledge`` record in the tenant's shared partition, slot
``suggestion.<table>.<column>``. Its value keeps the model's ``suggestion`` and a human's
``human_override`` apart; ``effective_value`` is the override when there is one, else the
suggestion. A later task never replaces an override: it may refresh ``suggestion`` beside it
(the target at the version the task expected), and the override stays in effect.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from memtool.clock import Clock
from memtool.errors import Forbidden, NotFound, ValidationFailed, VersionConflict
from memtool.identity import Identity
from memtool.knowledge.governance import governance_draft, parsed, scan, shared
from memtool.knowledge.prefill import Fact, SourceText, Suggestion, quote_found, suggest
from memtool.knowledge.sources import SourceLibrary
from memtool.memory.pii import scrub_fields
from memtool.memory.records import MemoryKind, MemoryPatch, MemoryRecord
from memtool.memory.slots import PREFILL_KEY_PREFIX, SUGGESTION_KEY_PREFIX
from memtool.memory.store import MemoryStore, Partition, UndecodableRecord

MAX_TASK_SOURCES = 20


class ReviewState(StrEnum):
    UNVERIFIED = "unverified"  # as suggested, every fact found in its source
    NEEDS_REVIEW = "needs_review"  # a gap, a fact not found, or a suggestion changed beside an override
    REVIEWED = "reviewed"  # a curator reviewed it, or wrote an override


class TaskState(StrEnum):
    PLANNED = "planned"
    DONE = "done"


class Outcome(StrEnum):
    WRITTEN = "written"  # a new suggestion, or one replacing the previous suggestion
    KEPT_OVERRIDE = "kept_override"  # the suggestion refreshed beside a human override that stays in effect
    UNCHANGED = "unchanged"  # the same suggestion as before
    SUPERSEDED = "superseded"  # the target moved past the task's expected version: nothing written


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FrozenSource(_Value):
    id: str
    version: int = Field(ge=1)
    name: str
    kind: str
    sha256: str
    statements: int | None = Field(None, description="statements of it the task read (a large file may be read in part)")


class FactView(_Value):
    source_id: str
    version: int
    quote: str


class SuggestedValue(_Value):
    text: str
    lineage: dict[str, Any]
    task_id: str
    input_fingerprint: str
    sources: list[FrozenSource]


class HumanOverride(_Value):
    text: str
    by: str
    at: datetime
    reason: str | None = None


class SuggestionValue(_Value):
    target: str
    suggestion: SuggestedValue
    source_facts: list[FactView]
    human_override: HumanOverride | None = None
    effective_value: str
    review_state: ReviewState
    coverage_gaps: list[str] = Field(default_factory=list)
    reviewed_by: str | None = None


class TaskResult(_Value):
    key: str
    target: str
    expected_version: int
    outcome: Outcome | None = None
    version: int | None = None  # the suggestion's version after the run
    id: str | None = None


class TaskValue(_Value):
    sources: list[FrozenSource]
    input_fingerprint: str
    targets: list[TaskResult]
    state: TaskState = TaskState.PLANNED
    gaps: list[str] = Field(default_factory=list)
    created_by: str
    ran_by: str | None = None
    ran_at: datetime | None = None


@dataclass(frozen=True)
class PrefillTask:
    id: str
    value: TaskValue
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class SuggestionItem:
    id: str
    version: int
    value: SuggestionValue
    updated_at: datetime


@dataclass(frozen=True)
class SuggestionListing:
    items: list[SuggestionItem]
    next_cursor: str | None


class PrefillService:
    def __init__(self, store: MemoryStore, sources: SourceLibrary, clock: Clock) -> None:
        self._store = store
        self._sources = sources
        self._clock = clock

    # ---- tasks --------------------------------------------------------------------------

    def plan(self, who: Identity, source_ids: list[str]) -> PrefillTask:
        """Freeze the input: the sources at their versions now, and each target's version now."""
        _require_curator(who)
        if not source_ids:
            raise ValidationFailed("name at least one source", field="source_ids")
        if len(source_ids) > MAX_TASK_SOURCES:
            raise ValidationFailed(f"a task reads at most {MAX_TASK_SOURCES} sources", field="source_ids")
        frozen: list[FrozenSource] = []
        for index, source_id in enumerate(dict.fromkeys(source_ids)):
            try:
                source = self._sources.get(who, source_id)
            except NotFound:
                raise NotFound(f"source {source_id} not found", field=f"source_ids.{index}") from None
            frozen.append(
                FrozenSource(id=source.id, version=source.version, name=source.name, kind=source.kind.value, sha256=source.sha256)
            )
        suggestions, gaps, read = suggest(self._texts(who, frozen))
        frozen = [f.model_copy(update={"statements": read.get(f.id, 0)}) for f in frozen]
        where = shared(who.tenant)
        targets = [
            TaskResult(key=s.key, target=s.target, expected_version=self._version_now(where, s.key)) for s in suggestions
        ]
        value = TaskValue(sources=frozen, input_fingerprint=fingerprint(frozen), targets=targets, gaps=gaps, created_by=who.user)
        summary = f"Pre-fill over {', '.join(f'{s.name} v{s.version}' for s in frozen)}"
        draft = governance_draft(PREFILL_KEY_PREFIX + secrets.token_hex(8), summary, value, who.user, ["prefill"])
        record = self._store.create(where, draft, self._clock.now()).record
        return _task(record, value)

    def get(self, who: Identity, task_id: str) -> PrefillTask:
        record, value = self._load_task(who, task_id)
        return _task(record, value)

    def run(self, who: Identity, task_id: str) -> PrefillTask:
        """Write each suggestion whose target is still at the version the task expected."""
        _require_curator(who)
        record, task = self._load_task(who, task_id)
        if task.state is TaskState.DONE:
            raise VersionConflict(f"pre-fill task {task_id} already ran (by {task.ran_by}); plan a new one")
        # Exactly the statements planning read: the run suggests what the plan froze, however long it takes.
        suggestions, _, _ = suggest(self._texts(who, task.sources), statements={s.id: s.statements or 0 for s in task.sources})
        by_key = {s.key: s for s in suggestions}
        where = shared(who.tenant)
        results = []
        for target in task.targets:
            suggestion = by_key.get(target.key)
            if suggestion is None:  # cannot happen with frozen input; said rather than skipped
                results.append(target.model_copy(update={"outcome": Outcome.SUPERSEDED}))
                continue
            results.append(self._write(who, where, task_id, task, target, suggestion))
        done = task.model_copy(update={"targets": results, "state": TaskState.DONE, "ran_by": who.user, "ran_at": self._clock.now()})
        patch = MemoryPatch(value=done.model_dump(mode="json"))
        written = self._store.update(where, record.id, patch, record.version, self._clock.now()).record
        return _task(written, done)

    # ---- suggestions --------------------------------------------------------------------

    def suggestions(
        self, who: Identity, review_state: ReviewState | None = None, cursor: str | None = None, limit: int = 20
    ) -> SuggestionListing:
        def pick(record: MemoryRecord) -> SuggestionItem | None:
            value = suggestion_value(record)
            if value is None or (review_state is not None and value.review_state is not review_state):
                return None
            return SuggestionItem(record.id, record.version, value, record.updated_at)

        items, next_cursor = scan(self._store, who.tenant, self._clock.now(), pick, cursor, limit)
        return SuggestionListing(items, next_cursor)

    def suggestion(self, who: Identity, suggestion_id: str) -> SuggestionItem:
        record, value = self._load_suggestion(who, suggestion_id)
        return SuggestionItem(record.id, record.version, value, record.updated_at)

    def override(self, who: Identity, suggestion_id: str, *, text: str, expected_version: int, reason: str | None = None) -> SuggestionItem:
        """A curator's value for the item: it wins over every suggestion, now and later."""
        _require_curator(who)
        record, value = self._load_suggestion(who, suggestion_id)
        scrubbed, reason_text, _, _ = scrub_fields(text, reason, None)  # PII redacted, as every memory write
        human = HumanOverride(text=scrubbed or "", by=who.user, at=self._clock.now(), reason=reason_text)
        changed = value.model_copy(
            update={"human_override": human, "effective_value": human.text, "review_state": ReviewState.REVIEWED, "reviewed_by": who.user}
        )
        return self._save(record, changed, expected_version, content=human.text)

    def review(self, who: Identity, suggestion_id: str, *, expected_version: int) -> SuggestionItem:
        """A curator checked the item as it is: its effective value is reviewed."""
        _require_curator(who)
        record, value = self._load_suggestion(who, suggestion_id)
        changed = value.model_copy(update={"review_state": ReviewState.REVIEWED, "reviewed_by": who.user})
        return self._save(record, changed, expected_version)

    # ---- inside -------------------------------------------------------------------------

    def _texts(self, who: Identity, frozen: list[FrozenSource]) -> list[SourceText]:
        texts = []
        for index, source in enumerate(frozen):
            try:
                version, text = self._sources.text(who, source.id, source.version)
            except NotFound as missing:
                raise NotFound(f"source {source.name} v{source.version} is gone: {missing.message}", field=f"sources.{index}") from None
            if version.sha256 != source.sha256:
                raise ValidationFailed(f"source {source.name} v{source.version} is not the text the task froze", field=f"sources.{index}")
            texts.append(SourceText(source.id, source.version, source.name, source.kind, text))
        return texts

    def _write(
        self, who: Identity, where: Partition, task_id: str, task: TaskValue, target: TaskResult, suggestion: Suggestion
    ) -> TaskResult:
        now = self._clock.now()
        head = self._head(where, target.key)
        current = head.version if head is not None else 0
        if current != target.expected_version:
            return target.model_copy(update={"outcome": Outcome.SUPERSEDED, "version": current or None, "id": head.id if head else None})
        facts, dropped = self._checked_facts(who, task, suggestion.facts)
        gaps = [*suggestion.gaps, *dropped]
        suggested = SuggestedValue(
            text=suggestion.text,
            lineage=suggestion.lineage,
            task_id=task_id,
            input_fingerprint=task.input_fingerprint,
            sources=task.sources,
        )
        state = ReviewState.NEEDS_REVIEW if gaps or not facts else ReviewState.UNVERIFIED
        if head is None:
            value = SuggestionValue(
                target=suggestion.target, suggestion=suggested, source_facts=facts, effective_value=suggestion.text, review_state=state,
                coverage_gaps=gaps,
            )  # fmt: skip
            tags = ["suggestion", f"review_state:{state.value}"]
            draft = governance_draft(target.key, value.effective_value, value, who.user, tags, max_chars=8000)
            record = self._store.create(where, draft, now).record
            return target.model_copy(update={"outcome": Outcome.WRITTEN, "version": record.version, "id": record.id})
        before = suggestion_value(head)
        if before is not None and before.suggestion.text == suggestion.text:
            return target.model_copy(update={"outcome": Outcome.UNCHANGED, "version": head.version, "id": head.id})
        if before is not None and before.human_override is not None:
            # The human's value stays in effect; the new suggestion is kept beside it, to be looked at.
            value = before.model_copy(
                update={"suggestion": suggested, "source_facts": facts, "coverage_gaps": gaps, "review_state": ReviewState.NEEDS_REVIEW}
            )
            outcome = Outcome.KEPT_OVERRIDE
        else:
            value = SuggestionValue(
                target=suggestion.target, suggestion=suggested, source_facts=facts, effective_value=suggestion.text, review_state=state,
                coverage_gaps=gaps,
            )  # fmt: skip
            outcome = Outcome.WRITTEN
        try:
            saved = self._save(head, value, current)
        except VersionConflict:  # moved between the read and the write
            return target.model_copy(update={"outcome": Outcome.SUPERSEDED, "id": head.id})
        return target.model_copy(update={"outcome": outcome, "version": saved.version, "id": head.id})

    def _checked_facts(self, who: Identity, task: TaskValue, facts: tuple[Fact, ...]) -> tuple[list[FactView], list[str]]:
        """Only quotes found, verbatim, in the cited source version stand as facts."""
        texts = {s.id: t for s, t in ((s, self._sources.text(who, s.id, s.version)[1]) for s in task.sources)}
        kept: list[FactView] = []
        dropped: list[str] = []
        for fact in facts:
            frozen = next((s for s in task.sources if s.id == fact.source_id and s.version == fact.version), None)
            if frozen is None or not quote_found(texts[frozen.id], fact.quote):
                dropped.append(f"a quote was not found in its source and was left out: {fact.quote[:80]!r}")
                continue
            view = FactView(source_id=fact.source_id, version=fact.version, quote=fact.quote)
            if view not in kept:
                kept.append(view)
        return kept, dropped

    def _save(self, record: MemoryRecord, value: SuggestionValue, expected_version: int, content: str | None = None) -> SuggestionItem:
        patch = MemoryPatch(
            value=value.model_dump(mode="json"),
            content=(content or value.effective_value)[:8000],
            tags=["suggestion", f"review_state:{value.review_state.value}"],
        )
        written = self._store.update(shared(record.tenant), record.id, patch, expected_version, self._clock.now()).record
        return SuggestionItem(written.id, written.version, value, written.updated_at)

    def _head(self, where: Partition, key: str) -> MemoryRecord | None:
        try:
            return self._store.get_slot(where, MemoryKind.KNOWLEDGE, key, self._clock.now())
        except UndecodableRecord:
            return None

    def _version_now(self, where: Partition, key: str) -> int:
        head = self._head(where, key)
        return head.version if head is not None else 0

    def _load_task(self, who: Identity, task_id: str) -> tuple[MemoryRecord, TaskValue]:
        record = self._get(who, task_id, "pre-fill task")
        value = parsed(record, PREFILL_KEY_PREFIX, TaskValue)
        if value is None:
            raise NotFound(f"pre-fill task {task_id} not found", field="id")
        return record, value

    def _load_suggestion(self, who: Identity, suggestion_id: str) -> tuple[MemoryRecord, SuggestionValue]:
        record = self._get(who, suggestion_id, "suggestion")
        value = suggestion_value(record)
        if value is None:
            raise NotFound(f"suggestion {suggestion_id} not found", field="id")
        return record, value

    def _get(self, who: Identity, memory_id: str, what: str) -> MemoryRecord:
        try:
            return self._store.get(shared(who.tenant), memory_id, self._clock.now())
        except (NotFound, UndecodableRecord):
            raise NotFound(f"{what} {memory_id} not found", field="id") from None


def fingerprint(sources: list[FrozenSource]) -> str:
    """SHA-256 over the frozen input: each source's id, version and text digest, in order."""
    payload = json.dumps([[s.id, s.version, s.sha256] for s in sources], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def suggestion_value(record: MemoryRecord) -> SuggestionValue | None:
    return parsed(record, SUGGESTION_KEY_PREFIX, SuggestionValue)


def _task(record: MemoryRecord, value: TaskValue) -> PrefillTask:
    return PrefillTask(record.id, value, record.created_at, record.updated_at)


def _require_curator(who: Identity) -> None:
    if not who.is_curator:
        raise Forbidden("pre-fill and its reviews are for curators (role curator or admin)", field="roles")


__all__ = ["Outcome", "PrefillService", "PrefillTask", "ReviewState", "SuggestionItem", "SuggestionListing", "TaskState"]
