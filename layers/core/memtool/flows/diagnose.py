"""Diagnosing failures: the application service behind the Diagnose step, POST /diagnose, the
diagnose queue and GET /episodes/{id}.

Every path does the same thing in the same order: classify the failure, form hypotheses (rules
over the live schema, and the Bedrock diagnoser when configured), test each by running its repair
within the execution budget, and keep the result as a causal memory: verified ones are active
lessons for the user; unverified ones wait as ``pending_review`` and never steer generation.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from memtool.clock import Clock
from memtool.diagnosis.apply import Subject, options_from
from memtool.diagnosis.causal import causal_content, causal_value, clip, fit
from memtool.diagnosis.engine import Budget, Diagnoser, HypothesisSource
from memtool.diagnosis.failures import guard_failure, logical_failure
from memtool.diagnosis.lessons import LessonBook, lesson_of, shared_lesson
from memtool.diagnosis.model import DiagnosisReport, Failure, Repair
from memtool.diagnosis.requests import DiagnoseRequest, Expected
from memtool.errors import Forbidden, NotFound, ValidationFailed, VersionConflict
from memtool.flows.memory_write import MemoryService
from memtool.identity import Identity
from memtool.memory.commands import NewMemory
from memtool.memory.records import MemoryKind, MemoryPatch, MemoryRecord, MemoryScope, MemoryStatus, SourceRef, Trigger
from memtool.memory.slots import episode_key
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition
from memtool.semantic.intent import Intent
from memtool.settings import Settings

logger = logging.getLogger("memtool.flows")

EPISODE_DIAGNOSES_SCANNED = 2000
# Repairs that change what a metric means: kept for a person to confirm even when verified.
HIGH_RISK_REPAIRS = frozenset({"metric_definition"})


class DiagnosisService:
    def __init__(
        self,
        *,
        store: MemoryStore,
        memories: MemoryService,
        clock: Clock,
        settings: Settings,
        warehouse: Callable[..., Any],  # (tenant) -> the tenant's Warehouse
        compiler: Callable[..., Any],  # (tenant) -> IntentCompiler over the tenant's model
        llm: Callable[[], HypothesisSource | None] | None = None,
        queue: Callable[[], Any] | None = None,  # -> DiagnosisQueue
        foreign_tables: Callable[[str | None], frozenset[str]] | None = None,  # (tenant) -> other tenants' tables
        granted_tables: Callable[[str | None], tuple[str, ...] | None] | None = None,  # (tenant) -> the operator's grant
    ) -> None:
        self._store = store
        self._memories = memories
        self._clock = clock
        self._settings = settings
        self._warehouse = warehouse
        self._compiler = compiler
        self._llm = llm
        self._queue = queue
        self._foreign_tables = foreign_tables
        self._granted_tables = granted_tables
        self.lessons = LessonBook(store)

    def diagnoser(self, deadline_seconds: float | None = None, *, tenant: str | None = None) -> Diagnoser:
        s = self._settings
        return Diagnoser(
            warehouse=self._warehouse(tenant),
            compiler=self._compiler(tenant),
            budget=Budget(
                s.diagnosis_max_executions,
                s.diagnosis_row_cap,
                s.diagnosis_timeout_seconds,
                s.diagnosis_tolerance,
                s.diagnosis_deadline_seconds if deadline_seconds is None else min(deadline_seconds, s.diagnosis_deadline_seconds),
            ),
            llm=self._llm() if self._llm is not None else None,
            foreign_tables=self._foreign_tables(tenant) if self._foreign_tables is not None else frozenset(),
            granted_tables=self._granted_tables(tenant) if self._granted_tables is not None else None,
        )

    # ---- in the ask flow --------------------------------------------------------------------

    def repair(
        self,
        who: Identity,
        *,
        episode_id: str,
        failure: Failure,
        subject: Subject,
        scenario: dict[str, Any],
        lessons: list[dict[str, Any]],
        deadline_seconds: float | None = None,
    ) -> tuple[DiagnosisReport, MemoryRecord | None]:
        """Diagnose a failure inside an ask; a verified repair is kept as the user's lesson at once.

        An unverified diagnosis is not stored here: the failed episode goes to the diagnose queue,
        whose diagnosis (with the Bedrock diagnoser when configured) keeps it for review.
        """
        texts = [str(x.get("text", "")) for x in lessons]
        report = self.diagnoser(deadline_seconds, tenant=who.tenant).diagnose(failure, subject, episode_id=episode_id, lessons=texts)
        if not report.verified:
            return report, None
        record = self._keep(
            who,
            report,
            scenario=scenario,
            initial_sql=subject.sql,
            lessons=lessons,
            feedback={"reason": "failed_episode", "step": failure.origin},
            request_id=f"{episode_id}:flow",
            diagnosed_by="flow",
        )
        return report, record

    # ---- episodes ----------------------------------------------------------------------------

    def diagnose_episode(
        self,
        who: Identity,
        episode_id: str,
        *,
        reason: str,
        request_id: str,
        expected: Expected | None = None,
        comment: str | None = None,
        diagnosed_by: str = "api",
    ) -> DiagnosisReport:
        episode = self._episode(who, episode_id)
        value = episode.value if isinstance(episode.value, dict) else {}
        subject = self._subject(value, episode)
        if subject is None:
            raise ValidationFailed(
                "this episode ran no SQL (a clarification, a preference, a knowledge answer): there is no query to diagnose",
                field="episode_id",
            )
        check_expected(value, expected)
        comment = comment if comment and comment.strip() else None
        failure = self._failure_of(value, expected=expected)
        if failure is None:
            raise ValidationFailed(
                "this answer did not fail; give the value you expected (expected) to diagnose why it differs", field="expected"
            )
        lessons = list(value.get("lessons") or [])
        diagnoser = self.diagnoser(tenant=who.tenant)
        report = diagnoser.diagnose(failure, subject, episode_id=episode_id, expected=expected, stop_at_verified=True)
        if report.nothing_to_explain:
            return report  # the answer already is what the user expected: nothing to keep
        record = self._keep(
            who,
            report,
            scenario=self._scenario(value, episode),
            initial_sql=subject.sql,
            lessons=lessons,
            feedback={
                "reason": reason,
                "expected": None if expected is None else expected.model_dump(exclude_none=True),
                "comment": comment,
            },
            request_id=request_id,
            diagnosed_by=diagnosed_by,
        )
        if record is not None:
            report.memory_id, report.memory_version = record.id, record.version
            report.status = "active" if record.status is MemoryStatus.ACTIVE else "pending_review"
        return report

    def run_request(self, request: DiagnoseRequest) -> DiagnosisReport | None:
        """A diagnose event from the queue: run once per request id (a redelivery finds it done)."""
        who = Identity(request.tenant, request.user, frozenset())
        if self._already_done(who, request.request_id):
            logger.info("diagnose request %s was already diagnosed", request.request_id)
            return None
        try:
            return self.diagnose_episode(
                who,
                request.episode_id,
                reason=request.reason,
                request_id=request.request_id,
                expected=request.expected,
                comment=request.comment,
                diagnosed_by="queue",
            )
        except (NotFound, ValidationFailed) as exc:
            # Nothing a retry could change (the episode expired or was forgotten; nothing to diagnose).
            logger.info("diagnose request %s dropped: %s", request.request_id, exc.message)
            return None

    def enqueue(self, request: DiagnoseRequest) -> bool:
        """Put a diagnose event on the queue; False (logged) when there is none or it failed."""
        if self._queue is None:
            return False
        try:
            queue = self._queue()
            if queue is None:
                return False
            queue.send(request)
            return True
        except Exception:  # diagnosis is learning; the answer or feedback stands regardless
            logger.warning("diagnose event for episode %s could not be queued", request.episode_id, exc_info=True)
            return False

    def episode_view(self, who: Identity, episode_id: str) -> dict[str, Any]:
        """The caller's episode and every diagnosis of it: the caller's, and tenant copies a
        curator shared (the episode is the caller's, so diagnoses of it are too)."""
        episode = self._episode(who, episode_id)
        diagnoses = [d for d in self._diagnoses(who) if d.provenance.episode_id == episode_id]
        diagnoses.sort(key=lambda r: r.created_at)
        return {"episode": episode, "diagnoses": diagnoses}

    def share(self, who: Identity, memory_id: str, owner: str | None = None, *, include_context: bool = False) -> MemoryRecord:
        """A curator shares a verified lesson with the tenant: a tenant copy citing the original.

        The lesson is the curator's own, or ``owner``'s in the same tenant (a curator reviews the
        lessons of the tenant's users; the copy names who shared it). The copy keeps the cause, the
        repair and the evidence, not the author's question, comment and expected value: those only
        the author shares (``include_context``, sharing a lesson of one's own)."""
        if not who.is_curator:
            raise Forbidden("lessons are shared with the tenant by curators", field="id")
        if include_context and owner not in (None, who.user):
            raise Forbidden(
                "only the lesson's author shares its question, comment and expected value (share it without include_context)",
                field="include_context",
            )
        now = self._clock.now()
        try:
            record = self._store.get(Partition(who.tenant, owner or who.user), memory_id, now)
        except NotFound:
            raise NotFound(f"lesson {memory_id} not found", field="id") from None
        if record.kind is not MemoryKind.CAUSAL:
            raise NotFound(f"lesson {memory_id} not found", field="id")
        if lesson_of(record, now) is None:
            raise ValidationFailed("only an active, verified lesson can be shared (this one is not verified, or archived)", field="id")
        tenant = Partition(who.tenant, TENANT_OWNER)
        for copy in self._store.heads(tenant, [MemoryKind.CAUSAL], limit=EPISODE_DIAGNOSES_SCANNED):
            shared = (copy.value or {}).get("shared_from") if isinstance(copy.value, dict) else None
            if (
                copy.status is MemoryStatus.ACTIVE
                and isinstance(shared, dict)
                and shared.get("id") == record.id
                and shared.get("version") == record.version
                and shared.get("context", True) is include_context  # a copy from before scrubbing had it all
            ):
                return copy  # shared already: the same copy, not a second one
        lesson = shared_lesson(record, include_context=include_context)
        shared_from = {"id": record.id, "version": record.version, "by": who.user, "context": include_context}
        body = NewMemory(
            kind=MemoryKind.CAUSAL,
            scope=MemoryScope.TENANT,
            content=lesson.content,
            source_text=lesson.source_text,
            value={**lesson.value, "shared_from": shared_from},
            confidence=record.confidence,
            trigger=Trigger.DIAGNOSIS,
            episode_id=record.provenance.episode_id,
            sources=[SourceRef(id=record.id, version=record.version)],
        )
        copy = self._memories.remember(who, body, system=True).record
        self._supersede(tenant, copy, [])  # the lesson's earlier copy, with or without the context, goes
        return copy

    # ---- review: a person confirms or rejects a diagnosis -----------------------------------

    def pending(self, who: Identity) -> list[MemoryRecord]:
        """Diagnoses waiting for a person (``pending_review``): a curator's view is every user's in the
        tenant and the tenant's own, a user's their own; newest first."""
        now = self._clock.now()
        from memtool.lifecycle.walk import partitions_from

        partitions = list(partitions_from(self._store, who.tenant, None)) if who.is_curator else [Partition(who.tenant, who.user)]
        found = []
        for where in partitions:
            for record in self._store.heads(where, [MemoryKind.CAUSAL], limit=EPISODE_DIAGNOSES_SCANNED):
                if record.status is MemoryStatus.PENDING_REVIEW and not record.is_expired(now):
                    found.append(record)
        return sorted(found, key=lambda r: r.created_at, reverse=True)

    def confirm(self, who: Identity, memory_id: str, owner: str | None = None, hypothesis: str | None = None) -> MemoryRecord:
        """A person confirms a pending diagnosis: its repair (the named hypothesis's, or the first one
        that ran) is run once more, and only when it runs does the diagnosis become an active lesson,
        with who confirmed it. One that does not run stays pending, and the answer says why."""
        from memtool.diagnosis.apply import NotApplicable
        from memtool.sql.warehouse import WarehouseError

        where, record = self._reviewable(who, memory_id, owner)
        value = dict(record.value) if isinstance(record.value, dict) else {}
        chosen = _chosen_test(value, hypothesis)
        subject = self._diagnosed_subject(where, record)
        try:
            sql, result = self.diagnoser(tenant=who.tenant).rerun(subject, [Repair.model_validate(r) for r in chosen["repairs"]])
        except (NotApplicable, WarehouseError, ValueError) as exc:
            raise ValidationFailed(
                f"the repair of {chosen.get('hypothesis')} did not run again ({exc}): the diagnosis stays pending_review", field="id"
            ) from exc
        now = self._clock.now()
        value.update(
            verified=True,
            cause=chosen.get("cause") or value.get("cause"),
            repair={"rules": chosen["repairs"], "sql": sql},
            repaired_output={"columns": result.columns, "row_count": result.row_count, "sample": [list(r) for r in result.rows[:5]]},
            confirmed={"by": who.user, "at": now.isoformat(), "hypothesis": chosen.get("hypothesis"), "row_count": result.row_count},
        )
        patch = MemoryPatch(
            status=MemoryStatus.ACTIVE, status_reason=f"confirmed by {who.user}", value=value, confidence=max(record.confidence, 0.8)
        )
        try:
            confirmed = self._store.update(where, record.id, patch, record.version, now).record
        except VersionConflict as exc:
            raise VersionConflict(
                f"diagnosis {record.id} changed while it was confirmed; read it again", current_version=exc.current_version
            ) from exc
        self._supersede(where, confirmed, [])
        return confirmed

    def _diagnosed_subject(self, where: Partition, record: MemoryRecord) -> Subject:
        """The query a diagnosis is about, from its episode (which must still be there)."""
        episode_id = record.provenance.episode_id
        episode = self._store.get_slot(where, MemoryKind.EPISODIC, episode_key(episode_id), self._clock.now()) if episode_id else None
        subject = self._subject(episode.value if isinstance(episode.value, dict) else {}, episode) if episode is not None else None
        if subject is None:
            raise ValidationFailed("the diagnosed episode is gone (expired or forgotten): its repair cannot be run again", field="id")
        return subject

    def reject(self, who: Identity, memory_id: str, owner: str | None = None, reason: str | None = None) -> MemoryRecord:
        """A person rejects a pending diagnosis: it is archived with who rejected it and why."""
        where, record = self._reviewable(who, memory_id, owner)
        said = f"rejected by {who.user}" + (f": {reason.strip()}" if reason and reason.strip() else "")
        try:
            return self._store.update(
                where, record.id, MemoryPatch(status=MemoryStatus.ARCHIVED, status_reason=said[:500]), record.version, self._clock.now()
            ).record
        except VersionConflict as exc:
            raise VersionConflict(
                f"diagnosis {record.id} changed while it was rejected; read it again", current_version=exc.current_version
            ) from exc

    def _reviewable(self, who: Identity, memory_id: str, owner: str | None) -> tuple[Partition, MemoryRecord]:
        """The pending diagnosis a caller may review: the episode's own user reviews their lesson; a
        curator any user's (``owner``) or the tenant's."""
        owner = owner or who.user
        if owner != who.user and not who.is_curator:
            raise Forbidden("the diagnoses of other users (and the tenant's) are reviewed by curators", field="owner")
        where = Partition(who.tenant, owner)
        try:
            record = self._store.get(where, memory_id, self._clock.now())
        except NotFound:
            raise NotFound(f"diagnosis {memory_id} not found", field="id") from None
        if record.kind is not MemoryKind.CAUSAL:
            raise NotFound(f"diagnosis {memory_id} not found", field="id")
        if record.scope is MemoryScope.TENANT and not who.is_curator:
            raise Forbidden("the tenant's lessons are reviewed by curators", field="id")
        if record.status is not MemoryStatus.PENDING_REVIEW:
            raise ValidationFailed(
                f"diagnosis {memory_id} is {record.status.value}: only one pending_review is confirmed or rejected", field="id"
            )
        return where, record

    # ---- pieces ------------------------------------------------------------------------------

    def _keep(
        self,
        who: Identity,
        report: DiagnosisReport,
        *,
        scenario: dict[str, Any],
        initial_sql: str | None,
        lessons: list[dict[str, Any]],
        feedback: dict[str, Any],
        request_id: str,
        diagnosed_by: str,
    ) -> MemoryRecord | None:
        value = causal_value(
            report,
            scenario=scenario,
            initial_sql=initial_sql,
            lessons=lessons,
            feedback=feedback,
            request_id=request_id,
            diagnosed_by=diagnosed_by,
        )
        confidence = max((t.confidence for t in report.hypotheses if t.result == "verified"), default=0.0) if report.verified else 0.0
        question = str(scenario.get("asked") or scenario.get("question") or "")
        limit = self._settings.max_content_bytes
        body = NewMemory(
            kind=MemoryKind.CAUSAL,
            content=clip(causal_content(report, question), limit),
            source_text=clip(question, limit),
            value=fit(value, limit),  # over the size limit, its bulkiest parts go first
            confidence=round(confidence, 3),
            trigger=Trigger.DIAGNOSIS,
            episode_id=report.episode_id,
            sources=[SourceRef(id=report.episode_id)],
        )
        high_risk = any(r.get("kind") in HIGH_RISK_REPAIRS for r in report.repairs)
        status = MemoryStatus.ACTIVE if report.verified and not high_risk else MemoryStatus.PENDING_REVIEW
        if report.verified and high_risk:
            report.notes.append("the repair changes a metric's definition: it waits for a person to confirm it")
        try:
            record = self._memories.remember(who, body, system=True, status=status).record
        except Exception:  # the diagnosis is still returned, and says it was not kept
            logger.warning("episode %s: the diagnosis could not be kept", report.episode_id, exc_info=True)
            report.notes.append("the diagnosis could not be stored")
            return None
        report.memory_id, report.memory_version = record.id, record.version
        report.status = "active" if status is MemoryStatus.ACTIVE else "pending_review"
        if status is MemoryStatus.ACTIVE:
            self._supersede(Partition(who.tenant, who.user), record, report.notes)
        return record

    def _supersede(self, where: Partition, newest: MemoryRecord, notes: list[str]) -> None:
        """Older active lessons that decide nothing the newest does not decide again are archived
        (their history stays): one lesson per target, so deleting the newest brings back nothing stale."""
        decided = _targets(newest)
        if not decided:
            return
        now = self._clock.now()
        for record in self._store.heads(where, [MemoryKind.CAUSAL], limit=EPISODE_DIAGNOSES_SCANNED):
            if record.id == newest.id or record.status is not MemoryStatus.ACTIVE or record.is_expired(now):
                continue
            targets = _targets(record)
            if not targets or not targets <= decided:
                continue
            try:
                self._store.update(
                    where,
                    record.id,
                    MemoryPatch(status=MemoryStatus.ARCHIVED, status_reason=f"superseded by memory:{newest.id}@v{newest.version}"),
                    record.version,
                    now,
                )
            except (VersionConflict, NotFound):
                continue  # it changed or went meanwhile; the newest still wins when lessons apply
            notes.append(f"lesson memory:{record.id} is superseded by this one")

    def _episode(self, who: Identity, episode_id: str) -> MemoryRecord:
        episode = self._store.get_slot(Partition(who.tenant, who.user), MemoryKind.EPISODIC, episode_key(episode_id), self._clock.now())
        if episode is None:
            raise NotFound(f"episode {episode_id} not found", field="episode_id")
        return episode

    def _diagnoses(self, who: Identity) -> list[MemoryRecord]:
        found: list[MemoryRecord] = []
        now = self._clock.now()
        for owner in (who.user, TENANT_OWNER):
            heads = self._store.heads(Partition(who.tenant, owner), [MemoryKind.CAUSAL], limit=EPISODE_DIAGNOSES_SCANNED)
            found += [r for r in heads if not r.is_expired(now)]
        return found

    def _already_done(self, who: Identity, request_id: str) -> bool:
        heads = self._store.heads(Partition(who.tenant, who.user), [MemoryKind.CAUSAL], limit=EPISODE_DIAGNOSES_SCANNED)
        return any(isinstance(r.value, dict) and r.value.get("request_id") == request_id for r in heads)

    @staticmethod
    def _failure_of(value: dict[str, Any], *, expected: Expected | None) -> Failure | None:
        if expected is not None:
            return logical_failure(expected=True, row_count=value.get("row_count"))
        stored = value.get("failure")
        if isinstance(stored, dict) and stored.get("class"):
            try:
                return Failure(
                    kind=stored["class"],
                    origin=stored.get("origin") or "execution",
                    message=str(stored.get("message") or ""),
                    code=stored.get("code"),
                )
            except ValueError:
                pass
        guard = value.get("guard")
        if value.get("outcome") == "failed" and isinstance(guard, dict) and guard.get("allowed") is False:
            return guard_failure(guard.get("code"), guard.get("reason"))
        if value.get("outcome") in ("answered", "no_data"):  # no_data: empty, for a period outside the data
            empty = value.get("row_count") == 0 or value.get("empty") is True  # no rows, or only NULLs
            return logical_failure(expected=False, row_count=0 if empty else value.get("row_count"))
        return None

    @staticmethod
    def _subject(value: dict[str, Any], episode: MemoryRecord) -> Subject | None:
        sql = value.get("sql")
        if not isinstance(sql, str) or not sql.strip():
            return None
        intent = None
        if isinstance(value.get("intent"), dict):
            try:
                intent = Intent.model_validate(value["intent"])
            except ValueError:
                intent = None
        repairs: list[Repair] = []
        for lesson in value.get("lessons") or []:
            for raw in lesson.get("repairs") or [] if isinstance(lesson, dict) else []:
                try:
                    repairs.append(Repair.model_validate(raw))
                except ValueError:
                    continue
        return Subject(
            question=str(value.get("asked") or episode.content),
            intent=intent,
            sql=sql,
            options=options_from([r for r in repairs if not r.sql_level]),
            sql_repairs=tuple(r for r in repairs if r.sql_level),
        )

    @staticmethod
    def _scenario(value: dict[str, Any], episode: MemoryRecord) -> dict[str, Any]:
        return {
            "question": episode.source_text or episode.content,
            "asked": value.get("asked") or episode.content,
            "intent": value.get("intent"),
            "route": value.get("route"),
        }


def check_expected(episode_value: dict[str, Any], expected: Expected | None) -> None:
    """An expected value is one number: it can be compared only with an answer of one row."""
    if expected is None:
        return
    rows = episode_value.get("row_count")
    if isinstance(rows, int) and rows != 1:
        raise ValidationFailed(
            f"the answer has {rows} rows; an expected value is compared with an answer of one value (ask for the total, or one group)",
            field="expected",
        )


def _targets(record: MemoryRecord) -> frozenset[tuple[str | None, ...]]:
    value = record.value if isinstance(record.value, dict) else {}
    rules = (value.get("repair") or {}).get("rules") if isinstance(value.get("repair"), dict) else None
    found = set()
    for raw in rules or []:
        try:
            found.add(Repair.model_validate(raw).target())
        except ValueError:
            continue
    return frozenset(found)


def new_request_id(episode_id: str, origin: str) -> str:
    return f"{episode_id}:{origin}:{uuid.uuid4().hex[:12]}"


def _chosen_test(value: dict[str, Any], hypothesis: str | None) -> dict[str, Any]:
    """The hypothesis test a confirmation runs again: the named one, or the first whose repair ran."""
    tests = [
        step["input"] | step["output"] for step in value.get("trajectory") or [] if isinstance(step, dict) and step.get("step") == "test"
    ]
    if hypothesis:
        chosen = next((t for t in tests if t.get("hypothesis") == hypothesis), None)
        if chosen is None:
            named = ", ".join(str(t.get("hypothesis")) for t in tests)
            raise ValidationFailed(f"the diagnosis has no hypothesis {hypothesis}: {named}", field="hypothesis")
    else:
        chosen = next((t for t in tests if t.get("result") in ("ran", "verified") and t.get("repairs")), None)
    if chosen is None or not chosen.get("repairs"):
        raise ValidationFailed("no repair of this diagnosis ran: there is nothing to confirm (reject it instead)", field="id")
    return chosen
