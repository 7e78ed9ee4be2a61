"""Typed slots: the slot-like keys the ask flow reads, and what a valid value of each one is.

Most slots hold free text. These few are read by code (Prepare feeds them to the planner and
the chart recommender, Record appends to them), so a value of the wrong shape is refused on
write, and one that got stored anyway (before this rule, or straight into the table) is ignored
on read, never trusted.

    profile  display.currency_unit    {"unit": "元" | "万元" | "分"}
    profile  display.chart            {"chart": "line" | "bar" | "pie" | "kpi_card" | "table"}
    working  session.<id>.turns       {"turns": [{...}, ...]}

A display slot may also carry no value at all: its ``content`` then holds the user's words
("金额默认用万元"), which the planner reads as it always has.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from memtool.errors import ValidationFailed
from memtool.memory.records import MemoryKind

# The same literals as this-time conditions on POST /ask (a unit test keeps the two in step).
CURRENCY_UNITS: tuple[str, ...] = ("元", "万元", "分")
CHART_TYPES: tuple[str, ...] = ("line", "bar", "pie", "kpi_card", "table")


@dataclass(frozen=True)
class ChoiceSlot:
    """A profile preference: ``{field: one of allowed}``, or no value (the content says it)."""

    kind: MemoryKind
    key: str
    field: str
    allowed: tuple[str, ...]

    def matches(self, kind: MemoryKind, key: str | None) -> bool:
        return kind is self.kind and key == self.key

    @property
    def shape(self) -> str:
        return f'{{"{self.field}": one of {", ".join(self.allowed)}}}'

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not valid for this slot, or None when it is."""
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) != {self.field}:
            return f"{self.key} takes {self.shape}; got {_show(value)}"
        if value[self.field] not in self.allowed:
            return f"{self.key} takes {self.shape}; {_show(value[self.field])} is not one of them"
        return None

    def read(self, value: Any) -> str | None:
        """The chosen value of a valid slot value; None when there is none (or it is invalid)."""
        if self.problem(value) is not None or value is None:
            return None
        return str(value[self.field])


_SESSION_TURNS = re.compile(r"^session\.(?P<session>.+)\.turns$")


@dataclass(frozen=True)
class SessionTurnsSlot:
    """A session's recent turns in working memory: ``{"turns": [turn, ...]}``, each turn an object."""

    kind: MemoryKind = MemoryKind.WORKING
    field: str = "turns"

    @staticmethod
    def key_for(session_id: str) -> str:
        return f"session.{session_id}.turns"

    def matches(self, kind: MemoryKind, key: str | None) -> bool:
        return kind is self.kind and key is not None and _SESSION_TURNS.match(key) is not None

    @property
    def shape(self) -> str:
        return '{"turns": [ {...}, ... ]} (a list of turn objects)'

    def problem(self, value: Any) -> str | None:
        if value is None:
            return None
        turns = value.get(self.field) if isinstance(value, dict) else None
        if not isinstance(value, dict) or not isinstance(turns, list):
            return f"a session's turns take {self.shape}; got {_show(value)}"
        if not all(isinstance(turn, dict) for turn in turns):
            return f"a session's turns take {self.shape}; every turn must be an object"
        return None

    def read(self, value: Any) -> list[dict[str, Any]]:
        """The turns of a valid value; an empty list when there are none (or it is invalid)."""
        if value is None or self.problem(value) is not None:
            return []
        return list(value[self.field])


CURRENCY_UNIT = ChoiceSlot(MemoryKind.PROFILE, "display.currency_unit", "unit", CURRENCY_UNITS)
CHART = ChoiceSlot(MemoryKind.PROFILE, "display.chart", "chart", CHART_TYPES)
SESSION_TURNS = SessionTurnsSlot()

TypedSlot = ChoiceSlot | SessionTurnsSlot
TYPED_SLOTS: tuple[TypedSlot, ...] = (CURRENCY_UNIT, CHART, SESSION_TURNS)


def slot_for(kind: MemoryKind, key: str | None) -> TypedSlot | None:
    """The typed slot a (kind, key) names, or None for a free-form memory."""
    return next((slot for slot in TYPED_SLOTS if slot.matches(kind, key)), None)


def check_slot_value(kind: MemoryKind, key: str | None, value: Any) -> None:
    """Refuse a value of the wrong shape for a typed slot: ValidationFailed on ``value``."""
    slot = slot_for(kind, key)
    if slot is None:
        return
    problem = slot.problem(value)
    if problem is not None:
        raise ValidationFailed(problem, field="value")


def _show(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A user's chart for one shape of data (display.chart_for.<shape kind>): chosen among an answer's
# chart candidates (POST /charts/choice), then used and cited by the next answer of that shape.
CHART_FOR_KEY_PREFIX = "display.chart_for."


def chart_for_key(shape_kind: str) -> str:
    return CHART_FOR_KEY_PREFIX + shape_kind


# MaintenanceFlow's own records (its report, a tenant's maintenance state): never recalled, never
# written through /memories.
MAINTENANCE_KEY_PREFIX = "maintenance."


def is_maintenance_record(key: str | None) -> bool:
    return key is not None and key.startswith(MAINTENANCE_KEY_PREFIX)


# Governance records in the tenant's shared partition: sources (memtool.knowledge.sources) and
# proposals (memtool.flows.proposals). They are read through their own routes, never recalled.
# So are pre-fill tasks and the suggestions they write (memtool.flows.prefill): a suggestion is a
# model's, not yet a human's, and is read at /suggestions.
SOURCE_KEY_PREFIX = "source."
PROPOSAL_KEY_PREFIX = "proposal."
PREFILL_KEY_PREFIX = "prefill."
SUGGESTION_KEY_PREFIX = "suggestion."
GOVERNANCE_KEY_PREFIXES = (SOURCE_KEY_PREFIX, PROPOSAL_KEY_PREFIX, PREFILL_KEY_PREFIX, SUGGESTION_KEY_PREFIX)


def is_governance_record(key: str | None) -> bool:
    return key is not None and key.startswith(GOVERNANCE_KEY_PREFIXES)


def episode_key(episode_id: str) -> str:
    """The slot that finds an episode's memory by its episode id (feedback names episodes)."""
    return f"episode.{episode_id}"


def correction_key(term: str) -> str:
    """One correction per term and owner: a newer one supersedes the older, with history."""
    return "term." + re.sub(r"[\s#]+", "_", term.strip().lower())[:180]


def correction_term_key(value: Any) -> str | None:
    """The key of a correction that teaches a term (its ``value.term``); None for one that
    teaches none (a rule in words)."""
    term = value.get("term") if isinstance(value, dict) else None
    if not isinstance(term, str) or not term.strip():
        return None
    return correction_key(term)
