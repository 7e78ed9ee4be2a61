"""The few-shot library with review: candidates from thumbs-up, approval by a reviewer, search.

A thumbs-up on a correct answer records a candidate (question, resolved intent, SQL) in the
tenant's shared partition, pending review. Only an admin who is not its author can approve or
reject it, each a new version that keeps the history. Search returns approved examples only, and
only those similar enough in shape (the cosine of the embedder's vectors of the masked questions),
confident enough, and not failing too often (``credit.failures``, which feedback raises when an
episode that applied the example goes wrong).

The library writes through the record store directly: recording a candidate is the system's
doing, not the caller's, so the curator rule of the memory API does not apply to it.
"""

from __future__ import annotations

import builtins
import hashlib
import logging
import math
import re
import threading
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from memtool.errors import Forbidden, MemtoolError, NotFound, ValidationFailed, VersionConflict
from memtool.memory.pii import redact
from memtool.memory.records import (
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryScope,
    MemoryStatus,
    Provenance,
    Trigger,
)
from memtool.memory.store import TENANT_OWNER, MemoryPage, MemoryStore, Partition
from memtool.planning.context import FewshotExample
from memtool.semantic.intent import Intent
from memtool.semantic.masking import MaskedQuestion, shape_key

if TYPE_CHECKING:  # ports and the settings model: received, never built here
    from memtool.clock import Clock
    from memtool.retrieval.embedders import Embedder
    from memtool.settings import Settings

logger = logging.getLogger("memtool.cache")

PII_KINDS = ("phone", "email", "cn_id", "bank_card")
REVIEW_ATTEMPTS = 3  # a review re-reads and retries when another write lands in between
LIBRARY_SCAN_LIMIT = 2000  # approved examples search reads per tenant (the reviewed library is small)
VECTOR_CACHE_SIZE = 4096  # embeddings kept, by (tenant, id, version)


class NotPendingReview(VersionConflict):
    """A review of a candidate that is no longer pending (approved, rejected or archived already)."""

    code = "not_pending_review"

    def __init__(self, message: str, *, current_version: int | None = None) -> None:
        MemtoolError.__init__(self, message, field="status")
        self.current_version = current_version


class FewshotValue(BaseModel):
    """What a few-shot record's ``value`` holds."""

    model_config = ConfigDict(extra="ignore")

    question: str
    intent: dict[str, Any] | None = None
    sql: str
    masked: str = ""
    author: str | None = None
    episode_id: str | None = None
    reviewed_by: str | None = None
    reviewed_at: datetime | None = None

    @classmethod
    def of(cls, record: MemoryRecord) -> FewshotValue:
        """The value of a few-shot record; raises ValidationFailed when it is not one."""
        try:
            return cls.model_validate(record.value)
        except ValidationError as exc:
            raise ValidationFailed(f"memory {record.id} does not hold a few-shot example", field="id") from exc


class FewshotLibrary:
    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        clock: Clock,
        settings: Settings,
        *,
        masker: Callable[[str, str], str] | None = None,  # (question, tenant) -> its masked text
    ) -> None:
        """``masker`` masks a question when a caller records one without its masked text."""
        self._store = store
        self._embedder = embedder
        self._clock = clock
        self._settings = settings
        self._masker = masker
        self._vectors: OrderedDict[tuple[str, str, int], tuple[float, ...]] = OrderedDict()
        self._vectors_lock = threading.Lock()

    @property
    def store(self) -> MemoryStore:
        return self._store

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    # ---- candidates ---------------------------------------------------------------------

    def record_candidate(
        self,
        tenant: str,
        author: str,
        *,
        episode_id: str,
        question: str,
        intent: dict[str, Any] | None,
        sql: str,
        reward: float,
        masked: str | None = None,
    ) -> MemoryRecord:
        """A candidate pending review, or the record that already holds an equal example.

        Equal means the same masked question (normalised) and the same SQL (normalised): a second
        thumbs-up on it leaves it as it is, whatever its status. ``masked`` is the question's masked
        text (``semantic.masking.mask_question``); without it the library's masker makes it, or,
        with no masker, the question itself stands for its shape.
        """
        if not question.strip():
            raise ValidationFailed("a few-shot needs the question", field="question")
        if not sql.strip():
            raise ValidationFailed("a few-shot needs the SQL", field="sql")
        if not isinstance(reward, int | float) or isinstance(reward, bool) or not math.isfinite(reward):
            raise ValidationFailed(f"reward must be a finite number, not {reward!r}", field="reward")
        if intent is not None:
            try:
                Intent.model_validate(intent)
            except ValidationError as exc:
                raise ValidationFailed(f"intent is not a resolved intent: {exc.errors()[0]['msg']}", field="intent") from exc
        if masked is None:
            masked = self._masker(question, tenant) if self._masker is not None else question
        self._check_sizes(question=question, sql=sql, masked=masked)
        counts = dict.fromkeys(PII_KINDS, 0)
        question, masked, sql = (_scrubbed(text, counts) for text in (question, masked, sql))
        intent = _scrubbed_json(intent, counts)
        where = Partition(tenant, TENANT_OWNER)
        key = slot_key(masked, sql)
        existing = self._store.get_slot(where, MemoryKind.FEWSHOT, key, self._clock.now())
        if existing is not None:
            return existing
        value = FewshotValue(question=question, intent=intent, sql=sql, masked=masked, author=author, episode_id=episode_id)
        draft = MemoryDraft(
            kind=MemoryKind.FEWSHOT,
            content=question,
            key=key,
            value=value.model_dump(mode="json", exclude={"reviewed_by", "reviewed_at"}),
            source_text=question,
            scope=MemoryScope.TENANT,
            status=MemoryStatus.PENDING_REVIEW,
            confidence=min(1.0, max(0.0, float(reward))),
            provenance=Provenance(trigger=Trigger.FEEDBACK, author=author, episode_id=episode_id),
            redactions=counts,
        )
        return self._store.create(where, draft, self._clock.now()).record

    # ---- review -------------------------------------------------------------------------

    def list(
        self, tenant: str, status: MemoryStatus | None = MemoryStatus.PENDING_REVIEW, cursor: str | None = None, limit: int = 20
    ) -> MemoryPage:
        """A page of the tenant's few-shots in ``status`` (all of them for None), newest change first."""
        page = self._store.list(
            Partition(tenant, TENANT_OWNER), self._clock.now(), kind=MemoryKind.FEWSHOT, status=status, cursor=cursor, limit=limit
        )
        if page.skipped:
            logger.warning("few-shot listing of %s skipped %d unreadable records: %s", tenant, len(page.skipped), ", ".join(page.skipped))
        return page

    def get(self, tenant: str, memory_id: str) -> MemoryRecord:
        try:
            record = self._store.get(Partition(tenant, TENANT_OWNER), memory_id, self._clock.now())
        except NotFound:
            record = None
        if record is None or record.kind is not MemoryKind.FEWSHOT:
            raise NotFound(f"few-shot {memory_id} not found", field="id")
        return record

    def history(self, tenant: str, memory_id: str) -> builtins.list[MemoryRecord]:
        self.get(tenant, memory_id)
        return self._store.history(Partition(tenant, TENANT_OWNER), memory_id, self._clock.now())

    def approve(self, tenant: str, memory_id: str, reviewer: str, reason: str | None = None) -> MemoryRecord:
        """Approve a pending candidate: from now on search may return it."""
        return self._review(tenant, memory_id, reviewer, MemoryStatus.APPROVED, reason or f"approved by {reviewer}")

    def reject(self, tenant: str, memory_id: str, reviewer: str, reason: str | None = None) -> MemoryRecord:
        """Reject a pending candidate: search never returns it."""
        return self._review(tenant, memory_id, reviewer, MemoryStatus.REJECTED, reason or f"rejected by {reviewer}")

    def _review(self, tenant: str, memory_id: str, reviewer: str, status: MemoryStatus, reason: str) -> MemoryRecord:
        verb = "approve" if status is MemoryStatus.APPROVED else "reject"
        where = Partition(tenant, TENANT_OWNER)
        for attempt in range(REVIEW_ATTEMPTS):
            current = self.get(tenant, memory_id)
            if current.status is not MemoryStatus.PENDING_REVIEW:
                raise NotPendingReview(
                    f"few-shot {memory_id} is {current.status.value}, not pending_review: only a pending candidate can be reviewed",
                    current_version=current.version,
                )
            # A value written by hand through /memories may be anything; the review keeps it whole.
            stored = current.value if isinstance(current.value, dict) else {"value": current.value}
            if status is MemoryStatus.APPROVED:
                FewshotValue.of(current)  # one that search could not use is only ever rejected
            authors = {a for a in (stored.get("author"), current.provenance.author) if isinstance(a, str)}
            if reviewer in authors:
                raise Forbidden(f"the author of a candidate cannot {verb} it", field="user")
            now = self._clock.now()
            reviewed = {**stored, "reviewed_by": reviewer, "reviewed_at": now.isoformat()}
            patch = MemoryPatch(status=status, status_reason=reason, value=reviewed)
            try:
                return self._store.update(where, memory_id, patch, current.version, now).record
            except VersionConflict:
                if attempt == REVIEW_ATTEMPTS - 1:
                    raise
                logger.info("few-shot %s changed during review; reading it again", memory_id)
        raise AssertionError("unreachable")  # the loop returns or raises

    # ---- search -------------------------------------------------------------------------

    def search(self, tenant: str, question: str, masked: str | MaskedQuestion) -> builtins.list[FewshotExample]:
        """Approved examples whose masked question is as similar as ``masked`` needs, best first.

        Confidence at least ``fewshot_min_confidence``, at most ``fewshot_max_fail_count`` failures,
        cosine at least ``fewshot_min_similarity``, at most ``fewshot_top_k`` of them. ``masked`` is
        the question's ``mask_question`` (or its text); ``question`` stands in for it when it is
        empty. The embedder's errors propagate: the caller reports the library as unavailable
        instead of claiming it has no example.
        """
        if isinstance(masked, MaskedQuestion):
            masked = masked.text
        settings = self._settings
        usable: list[tuple[MemoryRecord, FewshotValue]] = []
        for record in self._approved(tenant):
            if record.confidence < settings.fewshot_min_confidence or record.credit.failures > settings.fewshot_max_fail_count:
                continue
            try:
                usable.append((record, FewshotValue.of(record)))
            except ValidationFailed:
                logger.warning("few-shot %s of %s has no usable value; skipped", record.id, tenant)
        if not usable:
            return []
        query = self._embedder.embed([shape_key(masked or question)])[0]
        vectors = self._vectors_of(tenant, usable)
        scored = []
        for (record, value), vector in zip(usable, vectors, strict=True):
            similarity = _cosine(query, vector)
            if similarity >= settings.fewshot_min_similarity:
                scored.append((similarity, record, value))
        scored.sort(key=lambda s: (-s[0], -s[1].confidence, s[1].credit.failures, s[1].id))
        return [
            FewshotExample(
                memory_id=record.id,
                version=record.version,
                question=value.question,
                sql=value.sql,
                intent=value.intent,
                masked=value.masked,
                similarity=round(min(similarity, 1.0), 6),
            )
            for similarity, record, value in scored[: settings.fewshot_top_k]
        ]

    def _approved(self, tenant: str) -> builtins.list[MemoryRecord]:
        where = Partition(tenant, TENANT_OWNER)
        found: list[MemoryRecord] = []
        cursor: str | None = None
        while True:
            page = self._store.list(
                where, self._clock.now(), kind=MemoryKind.FEWSHOT, status=MemoryStatus.APPROVED, cursor=cursor, limit=100
            )
            found.extend(r for r in page.items if r.status is MemoryStatus.APPROVED)
            cursor = page.next_cursor
            if cursor is None:
                return found
            if len(found) >= LIBRARY_SCAN_LIMIT:
                logger.warning("few-shot search of %s read its limit of %d approved examples", tenant, LIBRARY_SCAN_LIMIT)
                return found

    def _vectors_of(self, tenant: str, usable: Sequence[tuple[MemoryRecord, FewshotValue]]) -> builtins.list[tuple[float, ...]]:
        """Each example's vector, embedded once per (id, version): a version's text never changes."""
        keys = [(tenant, record.id, record.version) for record, _ in usable]
        with self._vectors_lock:
            known = {key: self._vectors[key] for key in keys if key in self._vectors}
            for key in known:
                self._vectors.move_to_end(key)
        missing = [
            (key, shape_key(value.masked or value.question)) for key, (_, value) in zip(keys, usable, strict=True) if key not in known
        ]
        if missing:
            embedded = self._embedder.embed([text for _, text in missing])
            with self._vectors_lock:
                for (key, _), vector in zip(missing, embedded, strict=True):
                    known[key] = self._vectors[key] = tuple(vector)
                while len(self._vectors) > VECTOR_CACHE_SIZE:
                    self._vectors.popitem(last=False)
        return [known[key] for key in keys]

    # ---- rules --------------------------------------------------------------------------

    def _check_sizes(self, **fields: str) -> None:
        limit = self._settings.max_content_bytes
        for name, text in fields.items():
            size = len(text.encode("utf-8"))
            if size > limit:
                raise ValidationFailed(f"is {size} bytes; the limit is {limit} bytes (UTF-8)", field=name)


def slot_key(masked: str, sql: str) -> str:
    """The slot one example holds: a hash of its normalised masked question and normalised SQL."""
    digest = hashlib.sha256(f"{shape_key(masked)}\n{normalise_sql(sql)}".encode()).hexdigest()
    return f"fewshot.{digest[:32]}"


def normalise_sql(sql: str) -> str:
    """SQL as sqlglot writes it back (keyword case, spacing, no comments); plain text when it cannot parse it."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    text = unicodedata.normalize("NFKC", sql).strip().rstrip(";").strip()
    try:
        parsed = sqlglot.parse(text)
    except SqlglotError:
        parsed = []
    if len(parsed) == 1 and parsed[0] is not None:
        return parsed[0].sql(comments=False)
    return re.sub(r"\s+", " ", text)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        return 0.0  # vectors of another embedder: never similar
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norms if norms else 0.0


def _scrubbed(text: str, counts: dict[str, int]) -> str:
    result = redact(text)
    for kind, n in result.counts.items():
        counts[kind] = counts.get(kind, 0) + n
    return result.text


def _scrubbed_json(node: Any, counts: dict[str, int]) -> Any:
    if isinstance(node, str):
        return _scrubbed(node, counts)
    if isinstance(node, list):
        return [_scrubbed_json(item, counts) for item in node]
    if isinstance(node, dict):
        return {key: _scrubbed_json(item, counts) for key, item in node.items()}
    return node


__all__ = ["FewshotLibrary", "FewshotValue", "NotPendingReview", "normalise_sql", "slot_key"]
