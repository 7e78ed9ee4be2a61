"""Verified lessons, applied before execution to later questions that would hit the same cause.

A lesson is an active causal memory whose diagnosis was verified by running its repair. Its
repairs become rules for the compiler and the SQL: a column or table mapping rewrites any query
that reads the old name; a metric's time column, an exclusion, a window edge or a join type
recompile any question on that metric; a filter value replaces that value wherever it is asked.
Unverified diagnoses (``pending_review``) are never lessons.

A lesson shared with the tenant (``shared_lesson``) keeps the cause, the repair and the evidence,
and drops what was its author's own: the question, the comment and the expected value, unless the
author shares them.
"""

from __future__ import annotations

import copy
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memtool.diagnosis.apply import rewrite
from memtool.diagnosis.model import Repair
from memtool.diagnosis.sql_rewrite import references
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryStatus
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition
from memtool.semantic.compiler import DEFAULT_OPTIONS, CompileError, CompileOptions, IntentCompiler
from memtool.semantic.intent import Intent

logger = logging.getLogger("memtool.diagnosis")

LESSONS_READ = 200  # active lessons read per partition for one ask

# What a tenant copy of a lesson keeps of its value (causal.py describes each): the cause, the
# repair and the evidence. A part added to causal memories later stays the author's until it is
# named here.
SHARED_PARTS = (
    "scenario",  # the resolved intent and the route, without the question (SCENARIO_SHARED)
    "initial_state",  # the SQL that failed, the schema facts, the lessons already applied
    "trajectory",  # every test with its result
    "feedback",  # why it was diagnosed, without the comment and the expected value (FEEDBACK_SHARED)
    "failure",
    "cause",
    "root_cause",
    "repair",  # the rules and the repaired SQL
    "repaired_output",
    "verified",
    "evidence",
    "executions",
    "budget",
    "lesson",
    "episode_id",  # as in the provenance: the author's episode, which only the author reads
    "diagnosed_by",
)
SCENARIO_SHARED = ("intent", "route")
FEEDBACK_SHARED = ("reason",)
# The expected value quoted in a test's result ("… matches the expected 1,234.5000 within 1.00%").
_EXPECTED_QUOTED = re.compile(r"\bthe expected -?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Lesson:
    memory_id: str
    version: int
    owner: str
    cause: str
    root_cause: str
    repairs: tuple[Repair, ...]
    text: str  # "previously failed because X, repaired by Y"

    @property
    def cite(self) -> str:
        return f"memory:{self.memory_id}@v{self.version}"


@dataclass
class LessonOutcome:
    sql: str | None
    intent: Intent | None
    options: CompileOptions = DEFAULT_OPTIONS
    sql_repairs: tuple[Repair, ...] = ()
    applied: list[tuple[Lesson, list[Repair]]] = field(default_factory=list)

    def lessons_value(self) -> list[dict[str, Any]]:
        """What the episode keeps, so a later diagnosis starts from the query as it really ran."""
        return [
            {"id": lesson.memory_id, "version": lesson.version, "repairs": [r.model_dump(exclude_none=True) for r in repairs]}
            for lesson, repairs in self.applied
        ]


def lesson_of(record: MemoryRecord, now: datetime | None = None) -> Lesson | None:
    """The lesson a causal memory holds: only an active, verified one with repairs that parse."""
    if record.kind is not MemoryKind.CAUSAL or record.status is not MemoryStatus.ACTIVE:
        return None
    if now is not None and record.is_expired(now):
        return None
    value = record.value if isinstance(record.value, dict) else {}
    if value.get("verified") is not True:
        return None
    try:
        repairs = tuple(Repair.model_validate(r) for r in (value.get("repair") or {}).get("rules") or [])
    except ValueError:
        logger.warning("causal memory %s holds repairs that do not parse; it is not applied", record.id)
        return None
    if not repairs or any(r.kind == "replace_sql" for r in repairs):
        return None  # a whole statement is a quoted example for a model, not a rule
    return Lesson(
        memory_id=record.id,
        version=record.version,
        owner=record.owner,
        cause=str(value.get("cause") or ""),
        root_cause=str(value.get("root_cause") or ""),
        repairs=repairs,
        text=str(value.get("lesson") or record.content),
    )


@dataclass(frozen=True)
class SharedLesson:
    """What the tenant copy of a lesson holds (its value also gets ``shared_from``)."""

    content: str
    source_text: str | None
    value: dict[str, Any]


def shared_lesson(record: MemoryRecord, *, include_context: bool = False) -> SharedLesson:
    """The tenant copy of a verified lesson: its cause, repair and evidence (the SQL before and
    after, every test and its result), without its author's question, comment and expected value
    (quoted in the test results too) unless ``include_context``, the author sharing them."""
    value = copy.deepcopy(record.value) if isinstance(record.value, dict) else {}
    if include_context:
        return SharedLesson(content=record.content, source_text=record.source_text, value=value)
    kept: dict[str, Any] = {part: value[part] for part in SHARED_PARTS if part in value}
    for part, shared in (("scenario", SCENARIO_SHARED), ("feedback", FEEDBACK_SHARED)):
        if isinstance(kept.get(part), dict):
            kept[part] = {k: v for k, v in kept[part].items() if k in shared}
    if isinstance(kept.get("evidence"), str):
        kept["evidence"] = _unquote_expected(kept["evidence"])
    for step in kept.get("trajectory") or []:
        output = step.get("output") if isinstance(step, dict) else None
        if isinstance(output, dict) and isinstance(output.get("detail"), str):
            output["detail"] = _unquote_expected(output["detail"])
    # the content is the question and the root cause ("<question> — <root cause>"): the root cause
    headline = str(value.get("root_cause") or value.get("lesson") or "a verified lesson")
    return SharedLesson(content=headline, source_text=None, value=kept)


def _unquote_expected(text: str) -> str:
    return _EXPECTED_QUOTED.sub("the expected value", text)


class LessonBook:
    """The caller's verified lessons and the tenant's shared ones: the caller's first, newest
    first within each, which is the order in which they win a target (see ``apply_lessons``)."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def active(self, tenant: str, user: str, now: datetime) -> list[Lesson]:
        lessons: list[Lesson] = []
        for owner in (user, TENANT_OWNER):
            try:
                page = self._store.list(
                    Partition(tenant, owner), now, kind=MemoryKind.CAUSAL, status=MemoryStatus.ACTIVE, limit=LESSONS_READ
                )
            except Exception:  # lessons help; their absence never fails an ask
                logger.warning("lessons of %s/%s could not be read", tenant, owner, exc_info=True)
                continue
            newest_first = sorted(page.items, key=lambda r: r.updated_at, reverse=True)
            lessons += [lesson for record in newest_first if (lesson := lesson_of(record, now)) is not None]
        return lessons


def apply_lessons(intent: Intent | None, sql: str | None, lessons: Sequence[Lesson], compiler: IntentCompiler) -> LessonOutcome:
    """The plan's query with every lesson that matches it applied, and which ones did.

    Each target (a metric's time column, a renamed column, ...) is decided by the first lesson in
    ``lessons`` that has it: the caller's newest over older ones and over the tenant's.
    """
    outcome = LessonOutcome(sql=sql, intent=intent)
    if sql is None or not lessons:
        return outcome
    seen: set[tuple[str | None, ...]] = set()  # the targets decided so far
    changed_intent, options, intent_applied = _intent_lessons(intent, lessons, seen)
    current = sql
    if intent_applied and changed_intent is not None:
        try:
            current = compiler.with_options(options).compile(changed_intent).sql
        except CompileError as exc:  # a lesson that no longer compiles is skipped, never fatal
            logger.warning("lessons %s no longer compile: %s", ", ".join(intent_applied), exc)
            intent_applied, changed_intent, options, current = {}, intent, DEFAULT_OPTIONS, sql
    sql_repairs, sql_applied = _sql_lessons(current, lessons, seen)
    if sql_repairs:
        current = rewrite(current, sql_repairs)
    by_id = {lesson.memory_id: lesson for lesson in lessons}
    for memory_id in dict.fromkeys([*intent_applied, *sql_applied]):
        outcome.applied.append((by_id[memory_id], [*intent_applied.get(memory_id, []), *sql_applied.get(memory_id, [])]))
    outcome.sql, outcome.intent, outcome.options, outcome.sql_repairs = current, changed_intent, options, tuple(sql_repairs)
    return outcome


def _intent_lessons(
    intent: Intent | None, lessons: Sequence[Lesson], seen: set[tuple[str | None, ...]]
) -> tuple[Intent | None, CompileOptions, dict[str, list[Repair]]]:
    """The intent and options with every intent-level repair that concerns them applied (the first
    lesson with a target decides it), and the repairs applied, by lesson id."""
    options = DEFAULT_OPTIONS
    changed_intent = intent
    applied: dict[str, list[Repair]] = {}
    if intent is None:
        return changed_intent, options, applied
    for lesson in lessons:
        for repair in lesson.repairs:
            if repair.sql_level or repair.target() in seen:
                continue
            updated = _on(repair, changed_intent, options)
            if updated is None:
                continue
            changed_intent, options = updated
            seen.add(repair.target())
            applied.setdefault(lesson.memory_id, []).append(repair)
    return changed_intent, options, applied


def _sql_lessons(
    sql: str, lessons: Sequence[Lesson], seen: set[tuple[str | None, ...]]
) -> tuple[list[Repair], dict[str, list[Repair]]]:
    """The SQL-level repairs (renames) whose table or column the query reads, for targets no
    earlier lesson decided, and the same repairs by lesson id."""
    repairs: list[Repair] = []
    applied: dict[str, list[Repair]] = {}
    try:
        read = references(sql)
    except Exception:  # noqa: BLE001 - SQL the parser cannot read is left as it is
        return repairs, applied
    tables = set(read.tables)
    columns = {(c.table, c.column) for c in read.columns}
    for lesson in lessons:
        for repair in lesson.repairs:
            if not repair.sql_level or repair.target() in seen:
                continue
            hit = (repair.kind == "rename_table" and repair.table in tables) or (
                repair.kind == "rename_column" and (repair.table, repair.column) in columns
            )
            if hit:
                seen.add(repair.target())
                repairs.append(repair)
                applied.setdefault(lesson.memory_id, []).append(repair)
    return repairs, applied


def _on(repair: Repair, intent: Intent | None, options: CompileOptions) -> tuple[Intent, CompileOptions] | None:
    """The intent and options with one lesson applied, or None when it does not concern them."""
    from memtool.diagnosis.apply import NotApplicable, change_intent

    if intent is None:
        return None
    metric_repairs = ("include_rows", "window_edges", "join_type", "time_column", "metric_definition", "refund_period")
    if repair.kind in metric_repairs and repair.metric not in (None, intent.metric):
        return None
    if repair.kind in ("include_rows", "window_edges", "join_type") and repair.metric is None:
        return None  # unscoped: it was learned on one metric and says nothing about the others
    try:
        return change_intent(repair, intent, options)
    except NotApplicable:
        return None
