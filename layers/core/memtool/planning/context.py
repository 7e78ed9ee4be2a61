"""What a planner knows besides the question: who asks, their preferences, this-time conditions,
the corrections and shared definitions recalled for them — all as data, each with its source."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memtool.errors import ValidationFailed
from memtool.semantic.parser import MappingTarget, TermMapping

Unit = Literal["元", "万元", "分"]

_UNIT_EXACT: dict[str, Unit] = {
    "元": "元", "yuan": "元", "rmb": "元", "cny": "元",
    "万元": "万元", "10k": "万元", "10k yuan": "万元", "wan": "万元", "wan yuan": "万元",
    "分": "分", "fen": "分", "cent": "分", "cents": "分",
}  # fmt: skip
# In a sentence: 万元 before 元, so "万元" is never read as 元; English words need boundaries.
_UNIT_IN_TEXT: tuple[tuple[re.Pattern[str], Unit], ...] = (
    (re.compile(r"万元|\b10k\b|\bwan\b|ten thousand yuan", re.IGNORECASE), "万元"),
    (re.compile(r"元|\byuan\b|\brmb\b|\bcny\b", re.IGNORECASE), "元"),
    (re.compile(r"用分|以分|单位[:：为是]?分|\bfen\b|\bcents?\b", re.IGNORECASE), "分"),
)


def normalize_unit(value: object) -> Unit | None:
    """元/万元/分 from a unit value or a sentence that names one ("以后默认用万元"); None if none."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().lower()
    if text in _UNIT_EXACT:
        return _UNIT_EXACT[text]
    for pattern, unit in _UNIT_IN_TEXT:
        if pattern.search(text):
            return unit
    return None


class KnowledgeItem(BaseModel):
    """A shared definition or business rule recalled from knowledge memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_id: str
    version: int
    text: str
    key: str | None = None  # e.g. "metric.net_revenue"

    @property
    def source(self) -> str:
        return f"memory:{self.memory_id}@v{self.version}"


class LessonItem(BaseModel):
    """A verified lesson recalled from causal memory: why an earlier answer failed and what repaired it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_id: str
    version: int
    text: str  # "previously failed (…) because X; repaired by: Y"

    @property
    def source(self) -> str:
        return f"memory:{self.memory_id}@v{self.version}"


class FewshotExample(BaseModel):
    """An approved few-shot (question, resolved intent, SQL) from the reviewed library."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_id: str
    version: int
    question: str
    sql: str
    intent: dict[str, Any] | None = None  # the resolved Intent as JSON
    masked: str = ""  # the question with entity values, windows and numbers as typed slots
    similarity: float = 0.0

    @property
    def source(self) -> str:
        return f"memory:{self.memory_id}@v{self.version}"


class PreviousTurn(BaseModel):
    """The session's last turn, as the planner reads a follow-up against it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episode_id: str | None = None
    question: str
    status: str | None = None
    intent: dict[str, Any] | None = None  # the resolved Intent as JSON (answered turns)
    clarification: dict[str, Any] | None = None  # the pending Clarification (needs_clarification turns)


class PlanContext(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = "default"
    user: str = "anonymous"
    profile_unit: Unit | None = None  # the user's standing preference (profile memory)
    profile_chart: str | None = None
    profile_sources: dict[str, str] = Field(default_factory=dict)  # "unit"/"chart" -> "memory:<id>@v<n>"
    turns: list[PreviousTurn] = Field(default_factory=list)  # the session's recent turns, oldest first
    session_summary: str | None = None  # the turns that left the session's window, in brief
    usual_metrics: dict[str, int] = Field(default_factory=dict)  # the user's metrics over ended sessions (usage.frequent)
    fewshots: list[FewshotExample] = Field(default_factory=list)  # approved, searched for this question
    conditions: dict[str, Any] = Field(default_factory=dict)  # this request only; wins over the profile
    corrections: list[TermMapping] = Field(default_factory=list)
    knowledge: list[KnowledgeItem] = Field(default_factory=list)
    lessons: list[LessonItem] = Field(default_factory=list)  # verified causal memories only

    def condition_unit(self) -> Unit | None:
        """The unit this request asks for; a value that names no unit is a 400 on conditions.unit."""
        value = self.conditions.get("unit")
        if value is None:
            return None
        unit = normalize_unit(value)
        if unit is None:
            raise ValidationFailed("unit must be one of 元, 万元, 分", field="conditions.unit")
        return unit


def term_mapping_from_memory(record: Mapping[str, Any]) -> TermMapping | None:
    """A correction memory's value as a TermMapping, or None when it is not a term correction.

    Accepted values: ``{"term": "GMV", "maps_to": {"metric": "gross_revenue"}}`` or the flat
    ``{"term": "华东大区", "dimension": "region", "value": "华东"}``.
    """
    value = record.get("value")
    if not isinstance(value, dict) or not isinstance(value.get("term"), str) or not value["term"].strip():
        return None
    target = value.get("maps_to")
    if target is None:
        target = {k: value[k] for k in ("metric", "dimension", "value") if value.get(k) is not None}
    try:
        return TermMapping(
            term=value["term"].strip(),
            maps_to=MappingTarget.model_validate(target),
            memory_id=record.get("id"),
            version=record.get("version"),
        )
    except ValidationError:
        return None


def plan_context(
    *,
    tenant: str,
    user: str,
    recalled: Sequence[Mapping[str, Any]] = (),
    profile: Mapping[str, Any] | None = None,
    profile_sources: Mapping[str, str] | None = None,
    session_turns: Sequence[Mapping[str, Any]] = (),
    session_summary: Mapping[str, Any] | None = None,
    examples: Sequence[Mapping[str, Any]] = (),
    conditions: Mapping[str, Any] | None = None,
) -> PlanContext:
    """The planner's context from what an ask gathered: the caller, their profile, this-time
    conditions, the session's turns, approved few-shots and the recalled memory records (as JSON)."""
    profile = profile or {}
    corrections: list[tuple[tuple[int, str, float], TermMapping]] = []
    knowledge: list[KnowledgeItem] = []
    lessons: list[LessonItem] = []
    for record in recalled:
        kind = record.get("kind")
        if kind == "correction":
            mapping = term_mapping_from_memory(record)
            if mapping is not None:
                # One meaning per term: the user's own over the tenant's, then newer, then more confident.
                rank = (int(record.get("scope") == "user"), str(record.get("updated_at") or ""), float(record.get("confidence") or 0))
                corrections.append((rank, mapping))
        elif kind == "causal":
            lesson = _lesson_from_memory(record)
            if lesson is not None:
                lessons.append(lesson)
        elif kind == "knowledge" and record.get("content"):
            knowledge.append(
                KnowledgeItem(
                    memory_id=str(record["id"]), version=int(record.get("version") or 1), text=str(record["content"]), key=record.get("key")
                )
            )
    chosen = _one_meaning_per_term(corrections)
    chart = profile.get("chart")
    turns = _previous_turns(session_turns, session_summary)
    fewshots = _fewshot_examples(examples)
    usual = profile.get("usual_metrics")
    return PlanContext(
        tenant=tenant,
        user=user,
        profile_unit=normalize_unit(profile.get("unit")),
        profile_chart=chart if isinstance(chart, str) and chart else None,
        profile_sources=dict(profile_sources or {}),
        conditions={k: v for k, v in (conditions or {}).items() if v is not None},
        corrections=chosen,
        knowledge=knowledge,
        lessons=lessons,
        turns=turns,
        session_summary=str(session_summary["text"]) if session_summary and session_summary.get("text") else None,
        usual_metrics={k: v for k, v in usual.items() if isinstance(k, str) and isinstance(v, int)} if isinstance(usual, dict) else {},
        fewshots=fewshots,
    )


def _lesson_from_memory(record: Mapping[str, Any]) -> LessonItem | None:
    """A causal memory as a lesson: only a verified, active diagnosis; one pending review never steers a plan."""
    raw_value = record.get("value")
    value: Mapping[str, Any] = raw_value if isinstance(raw_value, dict) else {}
    if record.get("status") == "active" and value.get("verified") is True and value.get("lesson"):
        return LessonItem(memory_id=str(record["id"]), version=int(record.get("version") or 1), text=str(value["lesson"]))
    return None


def _one_meaning_per_term(ranked: Sequence[tuple[tuple[int, str, float], TermMapping]]) -> list[TermMapping]:
    """The best-ranked correction of each term (case-insensitive), in the order the terms were first met."""
    chosen: dict[str, tuple[tuple[int, str, float], TermMapping]] = {}
    for rank, mapping in ranked:
        term = mapping.term.lower()
        if term not in chosen or rank > chosen[term][0]:
            chosen[term] = (rank, mapping)
    return [mapping for _, mapping in chosen.values()]


RECENT_TURNS = 5  # the turns the planner reads; an older answered one joins them when these hold none


def _previous_turns(session_turns: Sequence[Mapping[str, Any]], summary: Mapping[str, Any] | None = None) -> list[PreviousTurn]:
    """The session's last five turns as conversation state. When none of them was answered, the
    thread is the newest answered turn before them: an older stored turn, or the one the session's
    summary kept when the window moved past it (memory.sessions), so a follow-up still finds it."""
    stored = [t for t in session_turns if isinstance(t, Mapping)]
    recent = stored[-RECENT_TURNS:]
    if not any(t.get("status") == "answered" for t in recent):
        older = [t for t in stored[:-RECENT_TURNS] if t.get("status") == "answered"]
        last = summary.get("last_answered") if summary else None
        if older:
            recent = [older[-1], *recent]
        elif isinstance(last, Mapping) and last.get("question"):
            recent = [{**last, "status": "answered"}, *recent]
    turns: list[PreviousTurn] = []
    for turn in recent:
        if not isinstance(turn, Mapping):
            continue  # not a turn at all: no conversation state
        try:
            turns.append(
                PreviousTurn(
                    episode_id=turn.get("episode_id"),
                    question=str(turn.get("question") or ""),
                    status=turn.get("status"),
                    intent=turn.get("intent") if isinstance(turn.get("intent"), dict) else None,
                    clarification=turn.get("clarification") if isinstance(turn.get("clarification"), dict) else None,
                )
            )
        except ValidationError:
            continue  # a turn written by hand in another shape is not conversation state
    return turns


def _fewshot_examples(examples: Sequence[Mapping[str, Any]]) -> list[FewshotExample]:
    """The approved few-shots that validate; the others are skipped."""
    fewshots: list[FewshotExample] = []
    for item in examples:
        try:
            fewshots.append(FewshotExample.model_validate(item))
        except ValidationError:
            continue
    return fewshots


__all__ = [
    "FewshotExample",
    "KnowledgeItem",
    "LessonItem",
    "PreviousTurn",
    "MappingTarget",
    "PlanContext",
    "TermMapping",
    "normalize_unit",
    "plan_context",
    "term_mapping_from_memory",
]
