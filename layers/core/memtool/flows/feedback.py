"""Feedback on an answer: the application service behind POST /feedback.

One feedback names an episode (the caller's own; anyone else's is not found) and carries a
rating, implicit signals, a comment and/or a correction. It:

1. checks everything first (the episode, the correction's meaning, the caller's right to share
   it): a refusal writes nothing;
2. fuses the reward R = α·R_env + β·R_user and keeps it on the episode (a new version, so the
   rating's history stays); a second rating of the same episode replaces the first;
3. credits the memories the episode *applied* (never the ones merely recalled) and the episode
   itself: uses, successes, failures, the EMA feedback_score and last_used_at, in one
   conditional write per memory (``MemoryStore.update_credit``), so concurrent feedback loses no
   update; a memory whose score stays below the retirement threshold after N uses is archived
   with the reason in its history;
4. turns a correction into a correction memory of the user (or, from a curator, of the tenant);
5. records a thumbs-up on an answered episode as a few-shot candidate, pending review.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from memtool.clock import Clock
from memtool.errors import Forbidden, MemtoolError, NotFound, ValidationFailed, VersionConflict
from memtool.feedback.corrections import CorrectionRefused, correction_target, split_correction
from memtool.feedback.corrections import StatedCorrection as SplitCorrection
from memtool.feedback.reward import Reward, environment_reward, fuse
from memtool.identity import Identity
from memtool.memory.credit import credit_after
from memtool.memory.pii import redact
from memtool.memory.records import (
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryScope,
    MemoryStatus,
    Provenance,
    SourceRef,
    Trigger,
)
from memtool.memory.slots import correction_key, episode_key
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition
from memtool.semantic.parser import MappingTarget, QuestionParser
from memtool.settings import Settings

logger = logging.getLogger("memtool.flows")

WRITE_ATTEMPTS = 5


class CorrectionSplitter(Protocol):
    """Splits a sentence into (term, what it means); the Bedrock planner does it when configured."""

    def split_correction(self, text: str) -> SplitCorrection | None: ...
# Kinds feedback never archives: the session's scratchpad, and the record of what happened.
_NEVER_RETIRED = {MemoryKind.WORKING, MemoryKind.EPISODIC}


@dataclass(frozen=True)
class StatedCorrection:
    """A correction as the caller gave it: free text, or a term and what it means."""

    text: str | None = None
    term: str | None = None
    means: str | None = None
    scope: Literal["user", "tenant"] = "user"


@dataclass(frozen=True)
class FeedbackCommand:
    episode_id: str
    rating: int | None = None
    comment: str | None = None
    correction: StatedCorrection | None = None
    signals: dict[str, Any] = field(default_factory=dict)
    expected: Any = None  # memtool.diagnosis.requests.Expected: the value the answer should have been


@dataclass(frozen=True)
class CreditedMemory:
    id: str
    version: int
    kind: str
    role: Literal["applied", "episode"]
    uses: int
    successes: int
    failures: int
    feedback_score: float
    last_used_at: datetime | None
    status: str
    retired: bool
    status_reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "kind": self.kind,
            "role": self.role,
            "uses": self.uses,
            "successes": self.successes,
            "failures": self.failures,
            "feedback_score": round(self.feedback_score, 6),
            "last_used_at": None if self.last_used_at is None else self.last_used_at.isoformat(),
            "status": self.status,
            "retired": self.retired,
            "status_reason": self.status_reason,
        }


@dataclass(frozen=True)
class FeedbackOutcome:
    episode_id: str
    reward: Reward
    replaced: bool  # this rating replaced an earlier one of the same episode
    credited: list[CreditedMemory]
    correction: MemoryRecord | None
    fewshot_candidate: MemoryRecord | None
    notes: list[str]
    diagnosis_queued: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id,
            "reward": self.reward.as_dict(),
            "replaced": self.replaced,
            "credited": [c.as_dict() for c in self.credited],
            "correction": None if self.correction is None else self.correction.model_dump(mode="json"),
            "fewshot_candidate": None
            if self.fewshot_candidate is None
            else {
                "id": self.fewshot_candidate.id,
                "version": self.fewshot_candidate.version,
                "status": self.fewshot_candidate.status.value,
            },
            "diagnosis_queued": self.diagnosis_queued,
            "notes": self.notes,
        }


class FeedbackService:
    def __init__(
        self,
        store: MemoryStore,
        clock: Clock,
        settings: Settings,
        *,
        parser: Callable[[str], QuestionParser],  # (tenant) -> the parser over the tenant's model
        today: Callable[[], Any],
        fewshots: Callable[[], Any] | None = None,  # the few-shot library (record_candidate)
        splitter: Callable[[str], CorrectionSplitter | None] | None = None,  # (tenant) ->  # the LLM, for what the rules cannot split
        diagnosis: Callable[[], Any] | None = None,  # -> DiagnosisService: a thumbs-down or an expected value is diagnosed
    ) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._parser = parser
        self._today = today
        self._fewshots = fewshots
        self._splitter = splitter
        self._diagnosis = diagnosis

    # ---- the service ----------------------------------------------------------------------

    def give(self, who: Identity, command: FeedbackCommand) -> FeedbackOutcome:
        mine = Partition(who.tenant, who.user)
        now = self._clock.now()
        episode = self._store.get_slot(mine, MemoryKind.EPISODIC, episode_key(command.episode_id), now)
        if episode is None:
            raise NotFound(f"episode {command.episode_id} not found", field="episode_id")
        taught = self._checked_correction(who, command.correction)  # refused before anything is written
        value = episode.value if isinstance(episode.value, dict) else {}
        self._check_expected(command, value)  # refused before anything is written, too
        error = value.get("error") if isinstance(value.get("error"), dict) else None
        env = environment_reward(str(value.get("outcome") or "failed"), row_count=value.get("row_count"), error=(error or {}).get("error"))
        notes: list[str] = []
        previous = value.get("feedback") if isinstance(value.get("feedback"), dict) else None
        rating, signals = self._verdict(command, previous, notes)
        reward = fuse(env, rating=rating, signals=signals, alpha=self._settings.reward_env_weight, beta=self._settings.reward_user_weight)
        candidate_id = (previous or {}).get("fewshot_candidate")
        episode = self._keep_on_episode(mine, episode, command, rating, signals, reward, now, candidate_id)
        says = rating is not None or reward.user is not None
        credited = self._credit(who, episode, value, reward, command.episode_id, now, notes) if says else []
        if not says:
            notes.append("a comment alone credits nothing; rate the answer to credit the memories it used")
        correction = self._remember_correction(who, command, taught, episode, now) if taught is not None else None
        candidate = None
        if rating == 1 and self._fewshot_worthy(value):
            candidate = self._record_fewshot(who, episode, value, reward, notes)
            ours = candidate is not None and candidate.provenance.episode_id == command.episode_id
            if ours and candidate is not None and candidate.id != candidate_id:
                # Only the candidate this episode recorded is its to withdraw later (an equal example
                # someone else recorded, or one an admin approved, is not).
                episode = self._note_candidate(mine, episode, candidate.id, now)
        elif candidate_id and rating != 1:
            self._withdraw_candidate(who, str(candidate_id), command.episode_id, rating, now, notes)
        if rating == -1 or command.expected is not None:
            self._drop_cached_sql(who, value, notes)
        queued = self._queue_diagnosis(who, command, value, notes)
        return FeedbackOutcome(
            diagnosis_queued=queued,
            episode_id=command.episode_id,
            reward=reward,
            replaced=previous is not None,
            credited=credited,
            correction=correction,
            fewshot_candidate=candidate,
            notes=notes,
        )

    # ---- pieces ---------------------------------------------------------------------------

    @staticmethod
    def _check_expected(command: FeedbackCommand, value: dict[str, Any]) -> None:
        """The value the answer should have been can only be compared with an answer that ran SQL."""
        if command.expected is None:
            return
        from memtool.flows.diagnose import check_expected

        if not value.get("sql"):
            raise ValidationFailed("this answer ran no SQL, so there is no value to compare with the one expected", field="expected")
        check_expected(value, command.expected)

    @staticmethod
    def _fewshot_worthy(value: dict[str, Any]) -> bool:
        """An episode a thumbs-up makes a few-shot candidate: answered, by SQL that returned rows."""
        return bool(value.get("outcome") == "answered" and value.get("sql") and (value.get("row_count") or 0) > 0)

    def _drop_cached_sql(self, who: Identity, value: dict[str, Any], notes: list[str]) -> None:
        """An answer reported wrong is not served to anyone again from the SQL cache."""
        stored = value.get("cache")
        cache: dict[str, Any] = stored if isinstance(stored, dict) else {}
        refs = [ref for ref in (cache.get("entry"), cache.get("stored")) if isinstance(ref, str) and ref.startswith("memory:")]
        for ref in dict.fromkeys(refs):
            memory_id = ref.removeprefix("memory:").split("@", 1)[0]
            for owner in (who.user, TENANT_OWNER):
                try:
                    self._store.forget(Partition(who.tenant, owner), memory_id)
                except NotFound:
                    continue
                notes.append(f"the cached SQL of this answer ({ref}) was dropped")
                break

    def _queue_diagnosis(self, who: Identity, command: FeedbackCommand, value: dict[str, Any], notes: list[str]) -> bool:
        """A thumbs-down on an answer that ran SQL, or the value it should have been, is diagnosed
        off the request path (the queue); the result shows at GET /episodes/{id}."""
        if self._diagnosis is None or not value.get("sql"):
            return False
        if command.rating != -1 and command.expected is None:
            return False
        import hashlib
        import json as _json

        from memtool.diagnosis.requests import DiagnoseRequest

        said = {
            "rating": command.rating,
            "expected": None if command.expected is None else command.expected.model_dump(),
            "comment": command.comment,
        }
        digest = hashlib.sha256(_json.dumps(said, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
        queued = self._diagnosis().enqueue(
            DiagnoseRequest(
                tenant=who.tenant,
                user=who.user,
                episode_id=command.episode_id,
                reason="negative_feedback",
                request_id=f"{command.episode_id}:feedback:{digest}",  # the same feedback again is diagnosed once
                expected=command.expected,
                comment=command.comment,
            )
        )
        if queued:
            notes.append(f"a diagnosis of this answer is queued; see GET /episodes/{command.episode_id}")
        return queued

    @staticmethod
    def _verdict(command: FeedbackCommand, previous: dict[str, Any] | None, notes: list[str]) -> tuple[int | None, dict[str, Any]]:
        """The rating and signals this feedback stands for.

        An explicit rating is the verdict. Otherwise an earlier rating of the episode stands (new
        signals join the earlier ones); a correction on an episode never rated says the answer was
        wrong (-1); signals alone are the verdict of an episode never rated.
        """
        if command.rating is not None:
            return command.rating, command.signals
        earlier = previous.get("rating") if previous is not None and previous.get("rating") in (-1, 0, 1) else None
        signals = {**dict((previous or {}).get("signals") or {}), **command.signals}
        if earlier is not None:
            return earlier, signals
        if command.correction is not None:
            notes.append("a correction without a rating counts as a thumbs-down: the answer was wrong")
            return -1, signals
        return None, signals

    def _checked_correction(self, who: Identity, stated: StatedCorrection | None) -> tuple[str, MappingTarget, str] | None:
        if stated is None:
            return None
        if stated.scope == "tenant" and not who.is_curator:
            raise Forbidden("only curators share a correction with the tenant", field="correction.scope")
        if stated.text is None:
            term, means = (stated.term or "").strip(), (stated.means or "").strip()
            try:
                return term, correction_target(term, means, self._parser(who.tenant), self._today()), f"{stated.term} = {stated.means}"
            except CorrectionRefused as exc:
                raise ValidationFailed(str(exc), field=f"correction.{exc.part}") from exc
        # Free text: the rules first; when they cannot split it, or their split names nothing the
        # catalog has, the LLM (when configured) splits it, and the rules still resolve the meaning.
        refused: CorrectionRefused | None = None
        for split in (split_correction(stated.text), None):
            if split is None:
                splitter = self._splitter(who.tenant) if self._splitter is not None else None
                split = splitter.split_correction(stated.text) if splitter is not None else None
            if split is None:
                continue
            try:
                return split.term, correction_target(split.term, split.means, self._parser(who.tenant), self._today()), stated.text
            except CorrectionRefused as exc:
                refused = exc
        if refused is not None:
            raise ValidationFailed(str(refused), field="correction") from refused
        raise ValidationFailed(
            "say what a term means, e.g. 「单子数就是订单数」 or 'by takings I mean net revenue', or send {term, means}",
            field="correction",
        )

    def _keep_on_episode(
        self,
        mine: Partition,
        episode: MemoryRecord,
        command: FeedbackCommand,
        rating: int | None,
        signals: dict[str, Any],
        reward: Reward,
        now: datetime,
        candidate_id: Any,
    ) -> MemoryRecord:
        """The feedback as a new version of the episode: a later rating replaces this one."""
        comment = redact(command.comment).text if command.comment else None
        if comment is None and isinstance(episode.value, dict):
            comment = (episode.value.get("feedback") or {}).get("comment")  # a rating keeps the earlier comment
        for _ in range(WRITE_ATTEMPTS):
            value = dict(episode.value) if isinstance(episode.value, dict) else {}
            value["feedback"] = {
                "rating": rating,
                "signals": signals,
                "comment": comment,
                "reward": reward.as_dict(),
                "at": now.isoformat(),
                "fewshot_candidate": candidate_id,
            }
            try:
                return self._store.update(mine, episode.id, MemoryPatch(value=value), episode.version, now).record
            except VersionConflict:
                episode = self._store.get(mine, episode.id, now)
        raise VersionConflict(f"episode {command.episode_id} kept changing; send the feedback again")

    def _credit(
        self, who: Identity, episode: MemoryRecord, value: dict[str, Any], reward: Reward, episode_id: str, now: datetime, notes: list[str]
    ) -> list[CreditedMemory]:
        applied = [m for m in value.get("memories_used") or [] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        targets: list[tuple[str, Literal["applied", "episode"]]] = [(m["id"], "applied") for m in applied]
        targets.append((episode.id, "episode"))
        credited: list[CreditedMemory] = []
        seen: set[str] = set()
        for memory_id, role in targets:
            if memory_id in seen:
                continue
            seen.add(memory_id)
            where = self._holder(who, memory_id, now)
            if where is None:
                notes.append(f"memory {memory_id} the episode applied no longer exists; not credited")
                continue
            record = self._store.update_credit(
                where,
                memory_id,
                lambda current: credit_after(
                    current.credit, episode_id=episode_id, reward=reward.total, alpha=self._settings.credit_ema_alpha, now=now
                ),
                now,
                now,
            )
            record, retired = self._maybe_retire(where, record, now, notes)
            credited.append(
                CreditedMemory(
                    id=record.id,
                    version=record.version,
                    kind=record.kind.value,
                    role=role,
                    uses=record.credit.uses,
                    successes=record.credit.successes,
                    failures=record.credit.failures,
                    feedback_score=record.credit.feedback_score,
                    last_used_at=record.last_used_at,
                    status=record.status.value,
                    retired=retired,
                    status_reason=record.status_reason,
                )
            )
        return credited

    def _holder(self, who: Identity, memory_id: str, now: datetime) -> Partition | None:
        for where in (Partition(who.tenant, who.user), Partition(who.tenant, TENANT_OWNER)):
            try:
                self._store.get(where, memory_id, now)
            except NotFound:
                continue
            return where
        return None

    def _maybe_retire(self, where: Partition, record: MemoryRecord, now: datetime, notes: list[str]) -> tuple[MemoryRecord, bool]:
        """Archive a user's memory whose score stays below the threshold after enough uses.

        A shared (tenant) memory is never archived by one user's feedback: it is left for a
        curator (a few-shot leaves search by its fail_count instead).
        """
        threshold, uses = self._settings.retire_below_score, self._settings.retire_after_uses
        live = record.status in (MemoryStatus.ACTIVE, MemoryStatus.APPROVED)
        if record.kind in _NEVER_RETIRED or not live or record.credit.uses < uses or record.credit.feedback_score >= threshold:
            return record, False
        if record.scope is MemoryScope.TENANT:
            notes.append(f"shared memory {record.id} is below the retirement threshold; a curator should review it")
            return record, False
        reason = f"retired by feedback: feedback_score {record.credit.feedback_score:.3f} below {threshold} after {record.credit.uses} uses"
        for _ in range(WRITE_ATTEMPTS):
            try:
                archived = self._store.update(
                    where, record.id, MemoryPatch(status=MemoryStatus.ARCHIVED, status_reason=reason), record.version, now
                ).record
            except VersionConflict:
                record = self._store.get(where, record.id, now)
                if record.status not in (MemoryStatus.ACTIVE, MemoryStatus.APPROVED):
                    return record, False
                continue
            notes.append(f"memory {record.id} archived: {reason}")
            return archived, True
        return record, False

    def _remember_correction(
        self, who: Identity, command: FeedbackCommand, taught: tuple[str, MappingTarget, str], episode: MemoryRecord, now: datetime
    ) -> MemoryRecord:
        term, target, source = taught
        assert command.correction is not None
        shared = command.correction.scope == "tenant"
        where = Partition(who.tenant, TENANT_OWNER if shared else who.user)
        maps_to = target.model_dump(exclude_none=True)
        zh = re.search(r"[\u4e00-\u9fff]", term) is not None
        content = f"「{term}」指 {target.describe()}" if zh else f"'{term}' means {target.describe()}"
        text = redact(source).text
        draft = MemoryDraft(
            kind=MemoryKind.CORRECTION,
            key=correction_key(term),
            content=content,
            value={"term": term, "maps_to": maps_to},
            source_text=text,
            scope=MemoryScope.TENANT if shared else MemoryScope.USER,
            confidence=1.0,
            provenance=Provenance(
                trigger=Trigger.CORRECTION,
                author=who.user,
                episode_id=command.episode_id,
                sources=[SourceRef(id=episode.id, version=episode.version)],
            ),
        )
        return self._store.create(where, draft, now).record

    def _note_candidate(self, mine: Partition, episode: MemoryRecord, candidate_id: str, now: datetime) -> MemoryRecord:
        """Keep the candidate's id with the feedback, so a later rating can withdraw it."""
        for _ in range(WRITE_ATTEMPTS):
            value = dict(episode.value) if isinstance(episode.value, dict) else {}
            value["feedback"] = {**(value.get("feedback") or {}), "fewshot_candidate": candidate_id}
            try:
                return self._store.update(mine, episode.id, MemoryPatch(value=value), episode.version, now).record
            except VersionConflict:
                episode = self._store.get(mine, episode.id, now)
        return episode

    def _withdraw_candidate(
        self, who: Identity, candidate_id: str, episode_id: str, rating: int | None, now: datetime, notes: list[str]
    ) -> None:
        """The example this episode's thumbs-up made stops steering: its author no longer vouches for it."""
        shared = Partition(who.tenant, TENANT_OWNER)
        reason = f"withdrawn: the rating of episode {episode_id} changed to {rating if rating is not None else 'none'}"
        for _ in range(WRITE_ATTEMPTS):
            try:
                current = self._store.get(shared, candidate_id, now)
            except NotFound:
                return
            if current.status is not MemoryStatus.PENDING_REVIEW or current.provenance.episode_id != episode_id:
                return  # reviewed already (an admin's call now), or recorded by another episode
            try:
                self._store.update(
                    shared, candidate_id, MemoryPatch(status=MemoryStatus.ARCHIVED, status_reason=reason), current.version, now
                )
            except VersionConflict:
                continue
            notes.append(f"few-shot candidate {candidate_id} {reason}")
            return

    def _record_fewshot(
        self, who: Identity, episode: MemoryRecord, value: dict[str, Any], reward: Reward, notes: list[str]
    ) -> MemoryRecord | None:
        if self._fewshots is None:
            return None
        unlearned = [r for r in value.get("clarified") or [] if r not in ("ambiguous_metric", "unknown_term", "ambiguous_value")]
        if unlearned:
            # A choice the question's words do not carry (a place the data lacks, one of several
            # windows): the example would answer the next asker with this user's choice.
            notes.append("an answer reached through a clarification choice is not recorded as an example")
            return None
        try:
            return self._fewshots().record_candidate(
                who.tenant,
                who.user,
                episode_id=episode.provenance.episode_id or episode.id,
                question=str(value.get("asked") or episode.content),
                intent=value.get("intent"),
                sql=value["sql"],
                reward=reward.total,
            )
        except MemtoolError as exc:  # the rating stands; the example is a bonus
            notes.append(f"the answer could not be recorded as an example: {exc.message}")
            return None
