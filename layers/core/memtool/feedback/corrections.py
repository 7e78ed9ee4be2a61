"""Corrections stated in chat: "单子数就是订单数", "开方量指的是处方量", "by takings I mean net revenue".

A correction is a term and what it means. The meaning must be something the semantic layer has
(a metric, a dimension, or a value of one); a correction that names nothing the catalog knows is
refused, and nothing is stored.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date

from memtool.semantic.followup import usable_term
from memtool.semantic.parser import MappingTarget, QuestionParser, normalize

_QUOTES = "「」『』\"'“”‘’`《》"
_ZH_PATTERNS = [
    re.compile(r"^(?:其实|我说的)?(?P<term>.+?)\s*(?:就是指|就是|指的是|是指|的意思是|意思是|其实是|应该是|等于|即|=)\s*(?P<means>.+)$"),
    re.compile(r"^(?:把|将)(?P<term>.+?)(?:理解为|理解成|当作|当成|算作|看作)(?P<means>.+)$"),
]
_EN_PATTERNS = [
    re.compile(r"^(?:by|when\s+i\s+say)\s+(?P<term>.+?),?\s+i\s+mean(?:t)?\s+(?P<means>.+)$", re.IGNORECASE),
    re.compile(r"^(?P<term>.+?)\s+(?:means|meant|refers\s+to|should\s+be|is\s+the\s+same\s+as|=)\s+(?P<means>.+)$", re.IGNORECASE),
]
MAX_TERM_CHARS = 50


@dataclass(frozen=True)
class StatedCorrection:
    term: str
    means: str  # the user's words for the meaning


class CorrectionRefused(ValueError):
    """The correction cannot be stored; the message says why (and names the part)."""

    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.part = part


def check_term(term: str, parser: QuestionParser, today: date) -> None:
    """Refuse a term that cannot be taught: too short, invisible characters, a position or a
    refusal, or a word that already means something as a whole (订单数, 华东, 上个月, 各渠道).
    A compound that only contains known words (华东大区) may be taught."""
    if not term.strip():
        raise CorrectionRefused("the term is empty", "term")
    if len(term) > MAX_TERM_CHARS:
        raise CorrectionRefused(f"the term is {len(term)} characters; the limit is {MAX_TERM_CHARS}", "term")
    if any(unicodedata.category(ch) in ("Cf", "Cc", "Co", "Cn") or (ch.isspace() and ch != " ") for ch in term):
        raise CorrectionRefused("the term has invisible characters or odd spaces; type it as it is said", "term")
    if sum(1 for ch in term if ch.isalnum()) < 2:
        raise CorrectionRefused("the term needs at least two letters, digits or characters", "term")
    if not usable_term(term):
        raise CorrectionRefused("the term is not a word a question would use (a position, a refusal, or spaces inside Chinese)", "term")
    parsed = parser.recognise(term, today=today)
    whole = len(parsed.text.strip())
    taken = [s for s in parsed.spans if s.kind in _MEANINGFUL_SPANS and s.end - s.start >= whole]
    if taken:
        raise CorrectionRefused(
            f"{taken[0].text!r} already means something to memtool ({taken[0].kind}); a correction teaches a new word", "term"
        )


def check_taught_meaning(value: object, parser: QuestionParser, today: date) -> None:
    """A correction memory's ``{term, maps_to}`` (or flat ``{term, metric|dimension, value}``), as
    the memory API receives it: the term can be taught and the meaning is in the catalog."""
    if not isinstance(value, dict) or not isinstance(value.get("term"), str):
        return  # a free-text correction note: nothing to apply, nothing to check
    check_term(value["term"].strip(), parser, today)
    raw = value.get("maps_to")
    if raw is None:
        raw = {k: value[k] for k in ("metric", "dimension", "value") if value.get(k) is not None}
    try:
        target = MappingTarget.model_validate(raw)
    except ValueError as exc:
        raise CorrectionRefused(f"maps_to needs a metric, or a dimension (and a value of it): {exc}", "maps_to") from exc
    catalog = parser.catalog
    if target.metric is not None and not catalog.has_metric(target.metric):
        raise CorrectionRefused(f"no metric {target.metric!r} in the catalog", "maps_to")
    if target.dimension is not None and not catalog.has_dimension(target.dimension):
        raise CorrectionRefused(f"no dimension {target.dimension!r} in the catalog", "maps_to")
    if (
        target.value is not None
        and target.dimension is not None
        and parser.entities.of(target.dimension)
        and parser.entities.resolve(target.dimension, target.value) is None
    ):
        raise CorrectionRefused(f"no {target.dimension} {target.value!r} in the data", "maps_to")


def split_correction(text: str) -> StatedCorrection | None:
    """(term, meaning) from a sentence, or None when it is not a correction."""
    body = normalize(text).strip().rstrip("。.!！")
    for pattern in (*_ZH_PATTERNS, *_EN_PATTERNS):
        match = pattern.match(body)
        if match:
            term, means = _clean(match.group("term")), _clean(match.group("means"))
            if term and means:
                return StatedCorrection(term, means)
    return None


def resolve_meaning(means: str, parser: QuestionParser, today: date) -> MappingTarget | None:
    """The catalog thing ``means`` names: exactly one metric, value, or dimension; else None."""
    parsed = parser.recognise(means, today=today)
    if parsed.unknown_terms:
        return None
    found: list[MappingTarget] = [MappingTarget(metric=m) for m in parsed.metrics]
    found += [MappingTarget(dimension=d, value=v) for d, values in parsed.filters.items() for v in values]
    if not found:
        found += [MappingTarget(dimension=d) for d in parsed.group_dims]
        if parsed.grain:
            found.append(MappingTarget(dimension=parsed.grain))
    return found[0] if len(found) == 1 else None


# What a question's words already mean: a term taught to mean something else would change them.
_MEANINGFUL_SPANS = {"metric", "entity", "time", "group", "noun", "grain", "top_n", "compare", "unit", "trend", "share"}


def correction_target(term: str, means: str, parser: QuestionParser, today: date) -> MappingTarget:
    """What ``term`` is taught to mean, or CorrectionRefused naming the part that is wrong."""
    check_term(term, parser, today)
    target = resolve_meaning(means, parser, today)
    if target is None:
        raise CorrectionRefused(
            f"{means!r} names no single metric, dimension or value the catalog has; name one (for example 订单数, 处方量, net revenue)",
            "means",
        )
    return target


def _clean(text: str) -> str:
    return text.strip().strip(_QUOTES).strip(" ,，:：").strip(_QUOTES).strip()
