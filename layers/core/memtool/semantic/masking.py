"""Masked questions: a question's shape with its slot values (entities, windows, top-N, units) taken out.

A few-shot example is found for a new question by the shape of the two, not their values:
"上周华东的动销" and "上个月华南的动销" both mask to "{window}{region}的动销". Only what the parser
recognised as a value becomes a slot; metrics, dimensions, negations, comparison words and terms
the parser does not know stay verbatim, so a question about another metric, or one that excludes
instead of filters, never has the same shape.

``rebind_intent`` then applies an example to the new question: the example's resolved intent with
the new question's values bound into the slots the example's values filled. It answers None
rather than guess whenever the shapes differ or a slot's value cannot be traced into the intent.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from pydantic import ValidationError

from memtool.semantic.entities import EntityValue
from memtool.semantic.intent import Comparison, Filter, Intent, TimeWindow
from memtool.semantic.parser import ParsedQuestion, QuestionParser, Span, default_window
from memtool.semantic.time_expressions import EN_NUMBER, ZH_NUMBER, TimeMatch, parse_number, previous_window, window_offset

SlotKind = Literal["entity", "window", "n", "unit"]

TIME_GRAINS = ("day", "week", "month", "quarter", "year")
_NUMBER = re.compile(rf"\d+|{ZH_NUMBER}|(?<![A-Za-z]){EN_NUMBER}(?![A-Za-z])", re.IGNORECASE)
_TRAILING = re.compile(r"[\s?？。.!！,，;；:：]+$")


@dataclass(frozen=True)
class Slot:
    """One value taken out of a question, and the placeholder that stands for it."""

    kind: SlotKind
    name: str  # the placeholder's name: a dimension ("region"), "window", "n" or "unit"
    text: str  # the words it replaced
    value: Any  # warehouse value (str), TimeWindow, int (top-N) or unit (元/万元/分)
    negated: bool = False  # an entity the question excludes ("除了上海")

    @property
    def placeholder(self) -> str:
        return "{" + self.name + "}"


@dataclass(frozen=True)
class MaskedQuestion:
    text: str  # the normalised question with each slot's words replaced by its placeholder
    slots: tuple[Slot, ...] = ()

    @property
    def key(self) -> str:
        """The shape as compared: case-folded, trailing punctuation dropped."""
        return shape_key(self.text)

    @property
    def signature(self) -> tuple[tuple[str, str, bool], ...]:
        """The slot set in order: which placeholders, and which entities are excluded."""
        return tuple((slot.kind, slot.name, slot.negated) for slot in self.slots)


def shape_key(masked: str) -> str:
    """A masked text as compared and hashed: NFKC, single spaces, case-folded, no trailing punctuation."""
    text = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", masked)).strip()
    return _TRAILING.sub("", text).casefold()


def mask_question(parsed: ParsedQuestion) -> MaskedQuestion:
    """The question's shape: entity values become ``{<dimension>}``, time expressions ``{window}``,
    top-N numbers ``{n}`` and unit phrases ``{unit}``; every other character stays as it was."""
    pieces: list[str] = []
    slots: list[Slot] = []
    cursor = 0
    for span in sorted(parsed.spans, key=lambda s: s.start):
        found = _slot_of(span, parsed)
        if found is None:
            continue
        slot, start, end = found
        pieces.append(parsed.text[cursor:start])
        pieces.append(slot.placeholder)
        slots.append(slot)
        cursor = end
    pieces.append(parsed.text[cursor:])
    return MaskedQuestion(text="".join(pieces), slots=tuple(slots))


def _slot_of(span: Span, parsed: ParsedQuestion) -> tuple[Slot, int, int] | None:
    """The slot a recognised span fills, with the characters its placeholder replaces."""
    if span.kind == "entity":
        values: list[EntityValue] = span.payload
        if len({v.dimension for v in values}) != 1:
            return None  # a name of several dimensions (the parser asks): it stays as words
        entity = values[0]
        negated = entity.value in parsed.exclusions.get(entity.dimension, ()) and entity.value not in parsed.filters.get(
            entity.dimension, ()
        )
        return Slot("entity", entity.dimension, span.text, entity.value, negated), span.start, span.end
    if span.kind == "time":
        match: TimeMatch = span.payload
        return Slot("window", "window", span.text, match.window), span.start, span.end
    if span.kind == "top_n":
        _order, n = span.payload
        for number in _NUMBER.finditer(span.text):
            if parse_number(number.group(0)) == n:  # only the number: "前{n}名", "top {n}"
                start, end = span.start + number.start(), span.start + number.end()
                return Slot("n", "n", number.group(0), n), start, end
        return None
    if span.kind == "unit":
        return Slot("unit", "unit", span.text, span.payload), span.start, span.end
    return None


# ---- applying an example to a new question --------------------------------------------------


def rebind_intent(
    example_intent: dict[str, Any],
    example_question: str,
    question: str,
    parser: QuestionParser,
    today: date,
    *,
    same_shape: bool = True,
) -> Intent | None:
    """The example's intent with ``question``'s slot values bound in, or None.

    Entity filters take the new values per dimension (and per include/exclude), the time window the
    new window (a comparison follows it), a top-N limit the new number, a unit the new unit. None when
    the two masked shapes or slot sets differ, when the example intent is not a valid Intent, or when
    one of the example's slot values cannot be found in its intent (then the intent did not come
    from those words, and binding new values into it would be a guess).
    """
    try:
        intent = Intent.model_validate(example_intent)
    except ValidationError:
        return None
    example_parsed = parser.recognise(example_question, today=today)
    new_parsed = parser.recognise(question, today=today)
    example, new = mask_question(example_parsed), mask_question(new_parsed)
    if (same_shape and example.key != new.key) or example.signature != new.signature:
        return None  # (the SQL cache compares shapes by similarity and terms itself: same_shape=False)
    pairs = list(zip(example.slots, new.slots, strict=True))
    try:
        filters = _bind_filters(intent, [(a, b) for a, b in pairs if a.kind == "entity"])
        window, comparison = _bind_window(intent, [(a, b) for a, b in pairs if a.kind == "window"], new_parsed, today)
        limit = _bind_limit(intent, [(a, b) for a, b in pairs if a.kind == "n"])
        unit = _bind_unit(intent, [(a, b) for a, b in pairs if a.kind == "unit"], parser)
    except _Unbound:
        return None
    bound = intent.model_dump()
    bound.update(filters=filters, time_window=window, comparison=comparison, limit=limit, unit=unit)
    try:
        return Intent.model_validate(bound)
    except ValidationError:
        return None


class _Unbound(Exception):
    """A slot of the example whose value its intent does not hold."""


def _bind_filters(intent: Intent, pairs: list[tuple[Slot, Slot]]) -> list[Filter]:
    example_values: dict[tuple[str, str], list[str]] = {}
    new_values: dict[tuple[str, str], list[str]] = {}
    for old, new in pairs:
        where = (old.name, "not_in" if old.negated else "in")
        for bucket, value in ((example_values, old.value), (new_values, new.value)):
            values = bucket.setdefault(where, [])
            if value not in values:
                values.append(value)
    bound: list[Filter] = []
    used: set[tuple[str, str]] = set()
    for item in intent.filters:
        where = (item.dimension, item.op)
        if where not in example_values:
            bound.append(item)  # not from the question's values (a taught term, say): it stays
            continue
        if set(item.values) != set(example_values[where]) or where in used:
            raise _Unbound
        used.add(where)
        bound.append(Filter(dimension=item.dimension, op=item.op, values=tuple(new_values[where])))
    if used != set(example_values):
        raise _Unbound
    return bound


def _grain(intent: Intent) -> str | None:
    return next((d for d in intent.dimensions if d in TIME_GRAINS), None)


def _bind_window(
    intent: Intent, pairs: list[tuple[Slot, Slot]], new_parsed: ParsedQuestion, today: date
) -> tuple[TimeWindow | None, Comparison | None]:
    current = intent.time_window
    if current is None:
        if pairs:
            raise _Unbound
        return None, intent.comparison
    grain = _grain(intent)
    if not pairs:
        # No window in the words: the example's window was the parser's default for its day.
        window = next(
            (
                w
                for w in (default_window(today, grain=grain), default_window(today, grain=grain, route="deep_analysis_workflow"))
                if w.label == current.label
            ),
            None,
        )
        if window is None:
            raise _Unbound
        return window, _bind_comparison(intent, window, None, pairs, new_parsed)
    at = next((i for i, (old, _) in enumerate(pairs) if old.value.label == current.label), None)
    if at is None:
        raise _Unbound
    window = pairs[at][1].value
    return window, _bind_comparison(intent, window, at, pairs, new_parsed)


def _bind_comparison(
    intent: Intent, window: TimeWindow, at: int | None, pairs: list[tuple[Slot, Slot]], new_parsed: ParsedQuestion
) -> Comparison | None:
    comparison, current = intent.comparison, intent.time_window
    assert current is not None
    others = [i for i in range(len(pairs)) if i != at]
    if comparison is None:
        if others:
            raise _Unbound  # a second window the intent does not use
        return None
    other = next((i for i in others if pairs[i][0].value.label == comparison.window.label), None)
    if other is not None:  # two windows named ("本月 vs 上月"): the second one is the comparison's
        if len(others) != 1:
            raise _Unbound
        assert at is not None  # ``others`` excludes it, and holds ``other``
        earlier = pairs[other][1].value
        if window_offset(window, earlier) != window_offset(pairs[at][0].value, pairs[other][0].value):
            raise _Unbound  # the new windows stand apart differently: another comparison
        return Comparison(kind=comparison.kind, window=earlier)
    if others:
        raise _Unbound
    # A comparison word (同比, 环比, "vs last year"): the comparison window follows the new window.
    asked = new_parsed.comparison
    kind = None if asked == "previous" else (asked or comparison.kind)
    grain = _grain(intent)
    _, example_previous = previous_window(current, kind, grain=grain)
    if example_previous.label != comparison.window.label:
        raise _Unbound  # the example's comparison was not derived this way
    new_kind, previous = previous_window(window, kind, grain=grain)
    return Comparison(kind=new_kind, window=previous)


def _bind_limit(intent: Intent, pairs: list[tuple[Slot, Slot]]) -> int | None:
    if not pairs:
        return intent.limit
    if len(pairs) != 1 or intent.limit != pairs[0][0].value:
        raise _Unbound
    return int(pairs[0][1].value)


def _bind_unit(intent: Intent, pairs: list[tuple[Slot, Slot]], parser: QuestionParser) -> str | None:
    if not pairs:
        return intent.unit
    if len(pairs) != 1:
        raise _Unbound
    old, new = pairs[0]
    if intent.unit == old.value:
        return str(new.value)
    catalog = parser.catalog
    if intent.unit is None and catalog.has_metric(intent.metric) and catalog.metric(intent.metric).kind != "money":
        return None  # a unit only money metrics take: the parser drops it, and so does the binding
    raise _Unbound


__all__ = ["MaskedQuestion", "Slot", "mask_question", "rebind_intent", "shape_key"]
