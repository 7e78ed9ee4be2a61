"""The parser's vocabulary: every phrase one catalog and one entity index give it, compiled once,
and where those phrases (and the fixed ones of ``phrases``) occur in a question.

The model gives metric synonyms, dimension nouns and group terms, the role words of dimensions in
two roles, ambiguous and unsupported terms, the dates a source may be read on and its own filler
words; the entity index gives value names (tried only when their longest literal part is in the
question) and names outside the data. ``Vocabulary.candidates`` lists every find as a ``Span``,
overlapping ones included: the parser settles them longest-first.

A question is read from its text once: the finds that depend only on the text and the day are
kept (a few dozen questions, least recently used out), so the route classifier, the planner, the
SQL cache and the analysis steps of one ask share one reading of the raw string, and only the
caller's corrections (terms a user taught) are looked for again. ``Vocabulary.scans`` counts the
readings.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

from memtool.semantic.catalog import Catalog
from memtool.semantic.entities import EntityIndex, role_siblings
from memtool.semantic.followup import FOLLOW_UP_PATTERNS, drop_patterns
from memtool.semantic.parsed import Span, TermMapping
from memtool.semantic.phrases import (
    CALENDAR_GROUP_TERMS,
    CHARTS,
    COMPARISONS,
    FILLER_EN,
    FILLER_ZH,
    GROUP_PREFIX_EN,
    GROUP_PREFIX_ZH,
    GROUP_SUFFIX_EN,
    GROUP_SUFFIX_ZH,
    LASTING,
    NEGATION,
    ORDER_WORDS,
    PLURAL_ZH,
    SHARE,
    THIS_TIME,
    TOP_N,
    TREND,
    UNIT_WORDS,
    UNITS,
    WORD_END,
    WORD_START,
    date_words,
    find_all,
    normalize,
    probe_literal,
    role_words,
    term_pattern,
    weak_value,
    word_order,
)
from memtool.semantic.time_expressions import parse_number, time_candidates

_NOTHING = r"(?!x)x"  # an alternation with no phrase in it matches nothing, never the empty phrase


class Vocabulary:
    """The phrases of one catalog and one entity index, compiled once (entity names on first use)."""

    SCANS_KEPT = 64  # readings kept: the questions in flight, and a few more

    def __init__(self, catalog: Catalog, entities: EntityIndex) -> None:
        self.entities = entities
        self.scans = 0  # readings of a question's text (tests count them: one per ask)
        self._scanned: OrderedDict[tuple[str, date], tuple[Span, ...]] = OrderedDict()
        self._scan_lock = threading.Lock()
        self._compile_model_terms(catalog, entities)
        nouns = [(noun, dim.name) for dim in catalog.attribute_dimensions for noun in {*dim.nouns_zh, *dim.nouns_en}]
        self.nouns = [(term_pattern(noun), noun, dim) for noun, dim in nouns]
        self.noun_dim = {noun.lower(): dim for noun, dim in nouns}
        # Dimensions that share a noun ("series" of the bakers and of the episodes): a question's
        # noun reads as the one its metric has (QuestionParser._metric_twin).
        by_noun: dict[str, set[str]] = {}
        for noun, dim in nouns:
            by_noun.setdefault(noun.lower(), set()).add(dim)
        self.noun_twins: dict[str, frozenset[str]] = {}
        for dims in by_noun.values():
            for dim in dims if len(dims) > 1 else ():
                self.noun_twins[dim] = self.noun_twins.get(dim, frozenset()) | (dims - {dim})
        self._compile_roles(catalog)
        noun_alt_zh, noun_alt_en = _noun_alternations([noun for noun, _ in nouns])
        self.group_patterns = _group_patterns(noun_alt_zh, noun_alt_en)
        self._compile_group_terms(catalog)
        self._compile_fixed_phrases(noun_alt_zh, noun_alt_en)
        # The dates a period may read where a source has several ("by enddate", "end date"): each choice's words.
        self.date_terms = _date_terms(catalog)
        self._compile_filler(catalog)
        self._compile_grain_nouns(catalog)

    def _compile_model_terms(self, catalog: Catalog, entities: EntityIndex) -> None:
        """Metric synonyms, ambiguous and unsupported terms, value names and names outside the data."""
        self.metric_terms = [(term_pattern(t), m.name) for m in catalog.metrics for t in {*m.synonyms_zh, *m.synonyms_en, m.zh, m.en}]
        self.ambiguous = [(term_pattern(a.term), a.term, a.candidates) for a in catalog.ambiguous_terms]
        self.unsupported = [(term_pattern(t), t) for t in catalog.unsupported_terms]
        # Entity names can be many (every customer's): each is tried only when its longest literal part
        # is in the question, and its pattern is compiled on first use.
        self.entity_terms = [(probe_literal(name), name) for name in {n for e in entities.values for n in e.names}]
        self.entity_patterns: dict[str, re.Pattern[str]] = {}
        self.outside = [(term_pattern(o.name), o) for o in entities.outside]

    def _compile_roles(self, catalog: Catalog) -> None:
        """Role words ("from", "飞往") and the dimensions each says a value is of; dimensions over one column."""
        self.siblings = role_siblings(catalog)
        role_terms = _role_terms(catalog)
        self.role_terms = [(term_pattern(word), frozenset(dims)) for word, dims in role_terms.items()]
        self.role_bearing = frozenset(dim for dims in role_terms.values() for dim in dims)
        self.role_words_of = {d: frozenset(w for w, dims in role_terms.items() if d in dims) for d in self.role_bearing}

    def _compile_group_terms(self, catalog: Catalog) -> None:
        """The group terms of time dimensions (grains) and of attribute dimensions."""
        self.grain_terms = [
            (term_pattern(t), dim.name)
            for dim in catalog.time_dimensions
            for t in {*dim.group_terms_zh, *dim.group_terms_en, *CALENDAR_GROUP_TERMS.get(dim.grain or "", ())}
        ]
        # Group-only words of attribute dimensions ("按原因", "by reason"): the bare noun stays filler.
        self.attribute_group_terms = [
            (term_pattern(t), dim.name) for dim in catalog.attribute_dimensions for t in {*dim.group_terms_zh, *dim.group_terms_en}
        ]

    def _compile_fixed_phrases(self, noun_alt_zh: str, noun_alt_en: str) -> None:
        """The fixed phrases of ``phrases``; a drop ("不看城市") names one of the model's nouns."""
        self.comparisons = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in COMPARISONS]
        self.units = [re.compile(p, re.IGNORECASE) for p in UNITS]
        self.top_n = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in TOP_N]
        self.order_words = [(order, re.compile(p, re.IGNORECASE), sup) for order, p, sup in ORDER_WORDS]
        self.trend = re.compile(TREND, re.IGNORECASE)
        self.share = re.compile(SHARE, re.IGNORECASE)
        self.negation = re.compile(NEGATION, re.IGNORECASE)
        self.plural_zh = re.compile(PLURAL_ZH)
        self.follow_up = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in FOLLOW_UP_PATTERNS]
        self.drops = [re.compile(p, re.IGNORECASE) for p in drop_patterns(noun_alt_zh, noun_alt_en)]
        self.lasting = re.compile(LASTING, re.IGNORECASE)
        self.this_time = re.compile(THIS_TIME, re.IGNORECASE)
        self.charts = [(chart, re.compile(p, re.IGNORECASE)) for chart, p in CHARTS]

    def _compile_filler(self, catalog: Catalog) -> None:
        """Filler with the model's own words, and the words of its multi-word phrases."""
        # The model's own nouns left over once its phrases are read ("华东大区": the value, then 大区) name nothing more.
        model_words = [*catalog.filler_words, *(n for d in catalog.dimensions for n in (*d.nouns_zh, *d.nouns_en))]
        extra_zh = [w for w in model_words if not w.isascii()]
        self.filler_zh = re.compile("|".join(re.escape(f) for f in sorted({*FILLER_ZH, *extra_zh}, key=len, reverse=True)))
        self.filler_en = FILLER_EN | {part.lower() for w in model_words if w.isascii() for part in w.split()}
        self.noun_needs_marker = frozenset(d.name for d in catalog.attribute_dimensions if not d.bare_noun_groups)
        # The words of the model's multi-word phrases, per metric and for the rest (nouns, aliases).
        self.metric_words = {m.name: self._words_of((*m.synonyms_en, m.en)) for m in catalog.metrics}
        self.phrase_words = self._words_of(
            [*(n for d in catalog.dimensions for n in d.nouns_en), *(a for e in catalog.entity_aliases for a in e.aliases)]
        )

    def _compile_grain_nouns(self, catalog: Catalog) -> None:
        """The time dimensions' nouns, and a grain joined to a grouping ("by priority and quarter")."""
        self.grain_noun = {n.lower(): d.name for d in catalog.time_dimensions for n in (*d.nouns_zh, *d.nouns_en, d.zh, d.en)}
        grain_alt = "|".join(re.escape(n) for n in sorted(self.grain_noun, key=len, reverse=True)) or _NOTHING
        self.grain_after_group = re.compile(
            rf"\s*(?:and|&|,|和|与|及|、)\s*(?:the\s+|by\s+|按)?(?P<noun>{grain_alt})(?![A-Za-z])", re.IGNORECASE
        )

    def _words_of(self, phrases: Iterable[str]) -> frozenset[str]:
        """The words (four letters or more, not filler) of the multi-word English phrases among ``phrases``."""
        return frozenset(
            w
            for phrase in phrases
            if phrase.isascii() and " " in phrase.strip()
            for w in re.findall(r"[a-z][a-z'\-]+", phrase.lower())
            if w not in self.filler_en and len(w) >= 4
        )

    # ---- finding the phrases in a question ----------------------------------------------------

    def candidates(self, text: str, today: date, corrections: Sequence[TermMapping]) -> list[Span]:
        """Every phrase found in ``text``, overlapping finds included, in a fixed order (a tie of
        length, priority and start is settled by it)."""
        spans: list[Span] = []
        for mapping in corrections:
            spans += _spans(term_pattern(mapping.term), text, "correction", mapping, 0)
        return spans + list(self.scan(text, today))

    def scan(self, text: str, today: date) -> tuple[Span, ...]:
        """Every find in ``text`` but the corrections', read once per (text, day) and kept."""
        key = (text, today)
        with self._scan_lock:
            kept = self._scanned.get(key)
            if kept is not None:
                self._scanned.move_to_end(key)
                return kept
        found = tuple(self._fixed_candidates(text, today) + self._model_candidates(text) + self._marker_candidates(text))
        with self._scan_lock:
            self.scans += 1
            self._scanned[key] = found
            while len(self._scanned) > self.SCANS_KEPT:
                self._scanned.popitem(last=False)
        return found

    def _fixed_candidates(self, text: str, today: date) -> list[Span]:
        """Comparisons, units, time expressions and top-N phrases."""
        spans: list[Span] = []
        for kind, pattern in self.comparisons:
            spans += _spans(pattern, text, "compare", kind, 1)
        for pattern in self.units:
            for m in find_all(pattern, text):
                spans.append(_span(m, "unit", UNIT_WORDS[re.sub(r"\s+", " ", m.group("u").lower())], 1))
        for found in time_candidates(text, today):
            spans.append(Span(found.start, found.end, "time", found.text, found, 2))
        for kind, pattern in self.top_n:
            for m in find_all(pattern, text):
                n = parse_number(m.group("n"))
                if n is None or not 1 <= n <= 10_000:
                    continue
                order = kind if kind in ("asc", "desc") else (None if kind == "which" else word_order(m.group("o")))
                spans.append(_span(m, "top_n", (order, n), 2))
        return spans

    def _model_candidates(self, text: str) -> list[Span]:
        """Groupings, grains, metrics, values, ambiguous, unsupported and outside terms, nouns and role words."""
        spans: list[Span] = []
        for pattern in self.group_patterns:
            for m in find_all(pattern, text):
                spans.append(_span(m, "group", self.noun_dim[re.sub(r"[\s\-]+", " ", m.group("noun").lower())], 3))
        for pattern, dim in self.attribute_group_terms:
            spans += _spans(pattern, text, "group", dim, 3)
        for pattern, dim in self.grain_terms:
            spans += _spans(pattern, text, "grain", dim, 3)
        for pattern, metric in self.metric_terms:
            spans += _spans(pattern, text, "metric", metric, 4)
        spans += self._entity_candidates(text)
        for pattern, term, candidates in self.ambiguous:
            spans += _spans(pattern, text, "ambiguous", (term, candidates), 5)
        for pattern, term in self.unsupported:
            spans += _spans(pattern, text, "unsupported", term, 5)
        for pattern, outside in self.outside:
            spans += _spans(pattern, text, "outside", outside, 5)
        for pattern, _noun, dim in self.nouns:
            spans += _spans(pattern, text, "noun", dim, 6)
        for pattern, dims in self.role_terms:
            spans += _spans(pattern, text, "role", dims, 8)
        return spans

    def _entity_candidates(self, text: str) -> list[Span]:
        """The index's value names in ``text``: only those whose longest literal part it contains are matched."""
        found: list[tuple[Span, bool]] = []
        lowered = text.lower()
        for probe, name in self.entity_terms:
            if probe not in lowered:
                continue
            compiled = self.entity_patterns.get(name)
            if compiled is None:  # no plural for a short value: "is" is not the room type "i" twice
                compiled = self.entity_patterns.setdefault(name, term_pattern(name, plural=len(normalize(name)) > 3))
            for m in find_all(compiled, text):
                kind = "weak_entity" if weak_value(name, m.group(0)) else "entity"
                found.append((_span(m, kind, self.entities.lookup(name), 4), m.group(0).lower() == normalize(name).lower()))
        # One value written exactly ("groups") and another only as its plural ("group" + s): the exact one.
        exact = {(s.start, s.end) for s, is_exact in found if is_exact}
        return [s for s, is_exact in found if is_exact or (s.start, s.end) not in exact]

    def _marker_candidates(self, text: str) -> list[Span]:
        """Order, trend, share, negation, plural, follow-up, drop, lasting and this-time words, charts and dates."""
        spans: list[Span] = []
        for order, pattern, superlative in self.order_words:
            spans += _spans(pattern, text, "order", (order, superlative), 6)
        spans += _spans(self.trend, text, "trend", True, 6)
        spans += _spans(self.share, text, "share", True, 7)
        spans += _spans(self.negation, text, "negation", True, 6)
        spans += _spans(self.plural_zh, text, "plural", True, 7)
        for kind, pattern in self.follow_up:
            spans += _spans(pattern, text, "follow_up", kind, 7)
        for pattern in self.drops:
            for m in find_all(pattern, text):
                spans.append(_span(m, "drop", self.noun_dim[re.sub(r"[\s\-]+", " ", m.group("noun").lower())], 1))
        for m in find_all(self.lasting, text):
            spans.append(_span(m, "lasting", m.group(0), 6))
        spans += _spans(self.this_time, text, "this_time", True, 6)
        for chart, pattern in self.charts:
            spans += _spans(pattern, text, "chart", chart, 5)
        for pattern, column in self.date_terms:
            spans += _spans(pattern, text, "date_column", column, 3)
        return spans


def _span(match: re.Match[str], kind: str, payload: Any, priority: int) -> Span:
    return Span(match.start(), match.end(), kind, match.group(0), payload, priority)


def _spans(pattern: re.Pattern[str], text: str, kind: str, payload: Any, priority: int) -> list[Span]:
    """One span of ``kind`` for each (non-empty) match of ``pattern``, all with the same payload."""
    return [_span(m, kind, payload, priority) for m in find_all(pattern, text)]


def _role_terms(catalog: Catalog) -> dict[str, set[str]]:
    """Each role word (normalised, lower case) and the dimensions it says a value is of."""
    role_terms: dict[str, set[str]] = {}
    for dim in catalog.attribute_dimensions:
        zh_words, en_words = role_words(dim)
        for word in (*zh_words, *en_words):
            if normalize(word):
                role_terms.setdefault(normalize(word).lower(), set()).add(dim.name)
    return role_terms


def _noun_alternations(nouns: list[str]) -> tuple[str, str]:
    """The dimension nouns as two regex alternations, Chinese and English, longest first. A model
    without nouns in one language (an unedited draft has no Chinese ones) matches nothing there."""
    longest_first = sorted(nouns, key=lambda n: -len(n))
    noun_alt_zh = "|".join(re.escape(n) for n in longest_first if not n.isascii())
    noun_alt_en = "|".join(r"[\s\-]+".join(re.escape(w) for w in n.split()) for n in longest_first if n.isascii())
    return noun_alt_zh or _NOTHING, noun_alt_en or _NOTHING


def _group_patterns(noun_alt_zh: str, noun_alt_en: str) -> list[re.Pattern[str]]:
    """A grouping by a dimension noun: 按城市, 城市分布, "by city", "city breakdown"."""
    return [
        re.compile(rf"{GROUP_PREFIX_ZH}(?P<noun>{noun_alt_zh})"),
        re.compile(rf"(?P<noun>{noun_alt_zh}){GROUP_SUFFIX_ZH}"),
        re.compile(rf"{WORD_START}{GROUP_PREFIX_EN}(?:the\s+)?(?P<noun>{noun_alt_en}){WORD_END}", re.IGNORECASE),
        re.compile(rf"{WORD_START}(?P<noun>{noun_alt_en}){GROUP_SUFFIX_EN}{WORD_END}", re.IGNORECASE),
    ]


def _date_terms(catalog: Catalog) -> list[tuple[re.Pattern[str], str]]:
    """The words naming each date a source with several may be read on, and the column each names."""
    return [
        (term_pattern(word), column)
        for source in catalog.sources
        if source.other_time_columns
        for column in (source.time_column, *source.other_time_columns)
        if column
        for word in date_words(column)
    ]
