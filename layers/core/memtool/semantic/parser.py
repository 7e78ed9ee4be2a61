"""The rule-based question parser: Chinese or English question -> Intent, or a clarification.

No segmenter: every known phrase (metric synonyms, dimension words, entity names, time
expressions, comparison, top-N and unit phrases, and terms taught by corrections) is looked for
in the text, overlapping finds are settled longest-first (a correction wins a tie), and whatever
is left must be filler ("帮我查一下", "what was the"). A leftover word the catalog does not know,
an ambiguous one ("收入", "revenue", "GMV") or a value the warehouse does not hold ("西安") makes
the parser ask instead of guess.

Defaults when the question names no window (``default_window``): the last full month for a
single number or a breakdown; for a time grain, the last 12 full months (month), 12 full weeks
(week), 30 full days (day), 4 full quarters (quarter) or last year plus this year to date (year).
Deep-analysis questions get a month grain when they have none, over the last 12 full months; a
window shorter than three months ("为什么9月净收入下降") is widened to the 12 months ending with it,
so the analysis sees the month in context. A trend word (趋势/走势/trend/over time) means a month grain unless another grain is named.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Literal

from memtool.semantic.catalog import Catalog
from memtool.semantic.clarifications import ClarificationNeed, Clarifier
from memtool.semantic.entities import EntityIndex, EntityValue
from memtool.semantic.followup import ChoiceTarget, is_follow_up, mark_incompatible, merge_previous
from memtool.semantic.intent import Comparison, Filter, Intent, TimeWindow
from memtool.semantic.parsed import MappingTarget, ParsedQuestion, Span, TermMapping
from memtool.semantic.phrases import (
    AFTER_GROUP_WORD,
    COORDINATED,
    DEFAULT_TOP,
    FUNCTION_WORDS_EN,
    ROLE_GAP,
    STATISTIC_EN,
    TOGETHER,
    add_unique,
    date_words,
    language_of,
    normalize,
    role_words,
    term_pattern,
)
from memtool.semantic.time_expressions import add_months, month_start
from memtool.semantic.value_probes import ValueProber
from memtool.semantic.vocabulary import Vocabulary
from memtool.semantic.windows import ParseRoute, default_window, read_window

__all__ = [
    "Choice",
    "ClarificationNeed",
    "MappingTarget",
    "ParseResult",
    "ParseRoute",
    "ParsedQuestion",
    "QuestionParser",
    "Span",
    "TermMapping",
    "Unit",
    "date_words",
    "default_window",
    "language_of",
    "normalize",
    "role_words",
    "term_pattern",
]

Unit = Literal["元", "万元", "分"]


# English participles without -ed that follow a noun to describe its rows ("products sold").
_PARTICIPLES_EN = frozenset({"sold", "bought", "paid", "made", "sent", "held", "given", "taken", "won", "lost"})


@dataclass
class ParseResult:
    parsed: ParsedQuestion
    intent: Intent | None = None
    clarification: ClarificationNeed | None = None
    notes: list[str] = field(default_factory=list)
    carried_over: list[str] = field(default_factory=list)  # what a follow-up took from the previous turn


@dataclass(frozen=True)
class Choice:
    """A reply to a clarification: the option chosen for the pending question's term."""

    reason: str
    term: str | None
    target: ChoiceTarget


@dataclass
class _Reading:
    """What reading a question's spans in order carries from one span to the next."""

    negate_until: int = -1  # a value before this position is excluded ("除了北京")
    previous_entity: tuple[int, str] | None = None  # (end, dimension) of the last value read
    resolved: dict[int, str] = field(default_factory=dict)  # span index -> the dimension its value was read as


class QuestionParser:
    """Parses questions against one catalog and one entity index (patterns compiled once)."""

    def __init__(self, catalog: Catalog, entities: EntityIndex) -> None:
        self.catalog = catalog
        self.entities = entities
        self._vocabulary = Vocabulary(catalog, entities)
        self._prober = ValueProber(catalog, entities, self._vocabulary)
        self._clarifier = Clarifier(catalog, entities)

    @property
    def vocabulary(self) -> Vocabulary:
        """The phrases it reads, and the readings of the questions it has read (``Vocabulary.scan``)."""
        return self._vocabulary

    def states_lasting(self, question: str) -> bool:
        """Whether the question has a word of a standing preference ("以后", "from now on")."""
        return self._vocabulary.lasting.search(normalize(question)) is not None

    # ---- recognition --------------------------------------------------------------------

    def recognise(self, question: str, *, today: date, corrections: Sequence[TermMapping] = ()) -> ParsedQuestion:
        text = normalize(question)
        parsed = ParsedQuestion(text=text, lang=language_of(text))
        chosen = self._settle_weak_values(text, self._select(self._vocabulary.candidates(text, today, corrections)))
        spans = self._prober.with_probed_values(text, chosen)
        parsed.spans = spans
        self._interpret(parsed, spans)
        self._leftovers(parsed, spans)
        return parsed

    @staticmethod
    def _select(candidates: list[Span]) -> list[Span]:
        chosen: list[Span] = []
        taken = bytearray(max((s.end for s in candidates), default=0) + 1)
        for span in sorted(candidates, key=lambda s: (-(s.end - s.start), s.priority, s.start)):
            if any(taken[span.start : span.end]):
                continue
            taken[span.start : span.end] = b"\x01" * (span.end - span.start)
            chosen.append(span)
        return sorted(chosen, key=lambda s: s.start)

    def _interpret(self, parsed: ParsedQuestion, spans: list[Span]) -> None:
        """What the chosen spans say, read in order (a negation covers the values after it)."""
        reading = _Reading()
        for index, span in enumerate(spans):
            kind = span.kind
            if kind == "correction":
                self._read_correction(parsed, span, reading)
            elif kind == "entity":
                self._read_entity(parsed, spans, index, reading)
            elif kind == "negation":
                reading.negate_until = self._extend_negation(parsed.text, spans, index)
            elif kind == "group":
                add_unique(parsed.group_dims, span.payload)
                grain = self._coordinated_grain(parsed.text, span.end)
                if grain is not None:
                    parsed.grain = parsed.grain or grain
            elif kind == "noun":
                self._read_noun(parsed, spans, index, reading)
            else:
                _read_what_is_asked(parsed, span)
                _read_answer_shape(parsed, span)
        self._scope_noun(parsed, [s for s in spans if s.kind == "metric"])
        self._metric_twin(parsed)
        mark_incompatible(parsed, self.catalog)

    def _scope_noun(self, parsed: ParsedQuestion, metric_spans: list[Span]) -> None:
        """"the average age of the bakers", "烘焙师的平均年龄": a fact's bare noun beside a measure of
        the same fact names whose rows are measured, not a second metric (its row count). Said with
        a counting word ("number of bakers and average age") it stays a metric."""
        if len(parsed.metrics) != 2 or not all(self.catalog.has_metric(m) for m in parsed.metrics):
            return
        specs = {m: self.catalog.metric(m) for m in parsed.metrics}
        for span in metric_spans:
            count = specs.get(span.payload)
            measured = [s for s in metric_spans if s.payload != span.payload]
            if count is None or count.expression.strip().upper() != "COUNT(*)" or len(measured) != 1 or _COUNTING.search(span.text):
                continue
            other, measure = specs[measured[0].payload], measured[0]
            if other.source != count.source or other.expression.strip().upper() == "COUNT(*)":
                continue
            # only joined to the measure: "age of the bakers", "bakers' age", "烘焙师的平均年龄" (not "bakers and age")
            between = parsed.text[measure.end : span.start] if measure.end <= span.start else parsed.text[span.end : measure.start]
            joined = _SCOPE_AFTER if measure.end <= span.start else _SCOPE_BEFORE
            if joined.fullmatch(between):
                parsed.metrics.remove(span.payload)
                return

    def _metric_twin(self, parsed: ParsedQuestion) -> None:
        """A grouping by a noun two dimensions share, read as the one the question's metric has."""
        if len(parsed.metrics) != 1 or not self.catalog.has_metric(parsed.metrics[0]):
            return
        own = self.catalog.metric(parsed.metrics[0]).dimensions
        for position, dim in enumerate(parsed.group_dims):
            twins = [d for d in self._vocabulary.noun_twins.get(dim, ()) if d in own]
            if dim not in own and len(twins) == 1 and twins[0] not in parsed.group_dims:
                parsed.group_dims[position] = twins[0]

    def _read_correction(self, parsed: ParsedQuestion, span: Span, reading: _Reading) -> None:
        """A term a correction teaches: a metric, a value (filtered or excluded), a grain or a grouping."""
        mapping: TermMapping = span.payload
        parsed.corrections_used.append(mapping)
        target = mapping.maps_to
        if target.metric is not None:
            add_unique(parsed.metrics, target.metric)
        elif target.value is not None and target.dimension is not None:
            entity = self.entities.resolve(target.dimension, target.value)
            value = entity.value if entity else target.value
            bucket = parsed.exclusions if span.start < reading.negate_until else parsed.filters
            add_unique(bucket.setdefault(target.dimension, []), value)
            reading.previous_entity = (span.end, target.dimension)
        elif target.dimension is not None:
            if self.catalog.has_dimension(target.dimension) and self.catalog.dimension(target.dimension).kind == "time":
                parsed.grain = target.dimension
            else:
                add_unique(parsed.group_dims, target.dimension)

    def _read_entity(self, parsed: ParsedQuestion, spans: list[Span], index: int, reading: _Reading) -> None:
        """A value: of the one dimension its neighbours or role words say (filtered or excluded), in
        a role only another dimension holds (asked about), or of several (an entity conflict)."""
        span = spans[index]
        values: list[EntityValue] = span.payload
        if len({v.dimension for v in values}) == 1:
            role = self._in_another_role(parsed.text, spans, index, values[0].dimension)
            if role is not None:
                parsed.outside.append((span.text, role))
                return
        else:
            values = self._by_neighbour(parsed.text, spans, index, values)
        if len({v.dimension for v in values}) > 1:
            values = self._by_role(parsed.text, spans, index, values, reading.resolved)
        if len({v.dimension for v in values}) > 1:
            parsed.entity_conflicts.append((span.text, values))
            return
        if values != span.payload:  # what it was read as: masking and follow-ups see one dimension
            spans[index] = replace(span, payload=values)
        entity = values[0]
        reading.resolved[index] = entity.dimension
        bucket = parsed.exclusions if span.start < reading.negate_until else parsed.filters
        add_unique(bucket.setdefault(entity.dimension, []), entity.value)
        reading.previous_entity = (span.end, entity.dimension)

    def _read_noun(self, parsed: ParsedQuestion, spans: list[Span], index: int, reading: _Reading) -> None:
        """A dimension noun: a grouping, unless it only describes the value before it ("北京城市")
        or its dimension groups only with a marker and none is there."""
        span = spans[index]
        if span.payload in self._vocabulary.noun_needs_marker and not self._after_top_n(parsed.text, spans, index):
            return  # "customers in GERMANY" names the customers' nation, not a grouping by customer
        previous = reading.previous_entity
        follows_own_value = previous is not None and previous[1] == span.payload and not parsed.text[previous[0] : span.start].strip(" 的")
        if not follows_own_value and not self._names_own_value(parsed.text, spans, index):
            add_unique(parsed.group_dims, span.payload)
            if parsed.lang == "en" and re.search(r"(?:s|es)$", span.text, re.IGNORECASE):
                parsed.plural = True

    def _settle_weak_values(self, text: str, spans: list[Span]) -> list[Span]:
        """A value that may just be an English word ("is", "and", "a": :func:`weak_value`) is that
        value with its dimension named right before it ("country and"). A letter or two that is no
        word ("i", "e") is also a value when the question uses a word of its dimension's name
        elsewhere ("room type i": assigned or reserved?). Otherwise it is the word: nothing is filtered."""
        settled: list[Span] = []
        for index, span in enumerate(spans):
            if span.kind != "weak_entity":
                settled.append(span)
                continue
            dims = {v.dimension for v in span.payload}
            beside = self._named_beside(text, spans, index, dims)
            if beside is not None:
                settled.append(replace(span, kind="entity", payload=[v for v in span.payload if v.dimension == beside]))
            elif normalize(span.text).lower() not in FUNCTION_WORDS_EN and self._dimension_words_elsewhere(text, span, dims):
                settled.append(replace(span, kind="entity"))
        return settled

    @staticmethod
    def _named_beside(text: str, spans: list[Span], index: int, dims: set[str]) -> str | None:
        # The dimension first ("country and", "a grade of A+"): before a noun such a word is an article.
        span, other = spans[index], index - 1
        if other < 0 or spans[other].kind not in ("noun", "group") or spans[other].payload not in dims:
            return None
        return str(spans[other].payload) if _BESIDE_ITS_NOUN.fullmatch(text[spans[other].end : span.start]) else None

    def _dimension_words_elsewhere(self, text: str, span: Span, dims: set[str]) -> bool:
        rest = (text[: span.start] + " " + text[span.end :]).lower()
        for name in dims:
            if not self.catalog.has_dimension(name):
                continue
            dim = self.catalog.dimension(name)
            words = {w for label in (dim.en, dim.name, *dim.nouns_en) for w in re.split(r"[\s_]+", label.lower()) if len(w) > 2}
            if any(re.search(rf"(?<![a-z]){re.escape(w)}", rest) for w in words):
                return True
        return False

    @staticmethod
    def _names_own_value(text: str, spans: list[Span], index: int) -> bool:
        """Whether a dimension noun introduces a value of its own right after it ("评级为A+",
        "渠道是医院", "a grade of A+", "city = Beijing"): it says what the value is, not a grouping."""
        nxt = index + 1
        if nxt >= len(spans) or spans[nxt].kind != "entity":
            return False
        if spans[index].payload not in {v.dimension for v in spans[nxt].payload}:
            return False
        between = text[spans[index].end : spans[nxt].start]
        return re.fullmatch(r"\s*(?:为|是|等于|=|:|：|of|is|equals?|equal\s+to)?\s*", between, re.IGNORECASE) is not None

    def _by_neighbour(self, text: str, spans: list[Span], index: int, values: list[EntityValue]) -> list[EntityValue]:
        """A value two dimensions hold (GERMANY: the customer's nation, the supplier's), read by the
        dimension named right next to it ("德国供应商", "customers in GERMANY"): the one reached
        through that dimension's table. Unchanged when no neighbour tells them apart."""
        neighbours = []
        for other in (index - 1, index + 1):  # "customers in FRANCE by supplier nation": the nearer description first
            if 0 <= other < len(spans) and spans[other].kind in ("noun", "group"):
                start, end = sorted((spans[index].end, spans[other].start) if other > index else (spans[other].end, spans[index].start))
                if re.fullmatch(r"[\s的]*(?:in|from|of|at)?[\s的]*", text[start:end], re.IGNORECASE):
                    neighbours.append(spans[other].payload)
        for name in neighbours:
            if not self.catalog.has_dimension(name) or self.catalog.dimension(name).table is None:
                continue
            table = self.catalog.dimension(name).table
            assert table is not None
            chosen = [v for v in values if self.catalog.has_dimension(v.dimension) and self.catalog.reached_through(v.dimension, table)]
            if len({v.dimension for v in chosen}) > 1:  # one table holds both ("grade of B", room type b): the one named
                chosen = [v for v in chosen if v.dimension == name]
            if chosen and len({v.dimension for v in chosen}) == 1:
                return chosen
        return values

    @staticmethod
    def _role_named(text: str, spans: list[Span], index: int) -> set[str]:
        """The dimensions the role words next to span ``index`` name: one right before it ("from
        JFK", "飞往LAX"), or one right after it ("EWR出发") unless that one is right before the next
        value ("EWR到LAX": 到 is LAX's)."""
        named: set[str] = set()
        before, after = index - 1, index + 1
        if before >= 0 and spans[before].kind == "role" and ROLE_GAP.fullmatch(text[spans[before].end : spans[index].start]):
            named |= spans[before].payload
        if after < len(spans) and spans[after].kind == "role" and ROLE_GAP.fullmatch(text[spans[index].end : spans[after].start]):
            following = after + 1
            forward = (
                following < len(spans)
                and spans[following].kind == "entity"
                and ROLE_GAP.fullmatch(text[spans[after].end : spans[following].start]) is not None
            )
            if not forward:
                named |= spans[after].payload
        return named

    def _by_role(self, text: str, spans: list[Span], index: int, values: list[EntityValue], resolved: dict[int, str]) -> list[EntityValue]:
        """A value of a table in two roles read by the role word next to it: "from JFK", "从EWR出发"
        (origin), "to LAX", "飞往LAX" (destination). A value joined to the one before ("from JFK
        and LGA") takes its role. Unchanged otherwise: a value named with no role word is asked about."""
        named = self._role_named(text, spans, index)
        chosen = [v for v in values if v.dimension in named]
        if chosen and len({v.dimension for v in chosen}) == 1:
            return chosen
        before = index - 1
        if not named and before in resolved and COORDINATED.fullmatch(text[spans[before].end : spans[index].start]):
            chosen = [v for v in values if v.dimension == resolved[before]]
            if chosen:
                return chosen
        return values

    def _in_another_role(self, text: str, spans: list[Span], index: int, dimension: str) -> str | None:
        """The role a role word gives a value that only another role holds ("from JFK", JFK only a
        destination): that role's dimension, asked about, never read as the other role."""
        if dimension not in self._vocabulary.role_bearing:
            return None
        named = self._role_named(text, spans, index)
        if not named or dimension in named:
            return None
        return next(d.name for d in self.catalog.attribute_dimensions if d.name in named)

    @staticmethod
    def _after_top_n(text: str, spans: list[Span], index: int) -> bool:
        """Whether span ``index`` directly follows a top-N ("top 5 customers", "最高的5个客户")."""
        if index == 0 or spans[index - 1].kind != "top_n":
            return False
        return re.fullmatch(r"[\s个位名家的]*", text[spans[index - 1].end : spans[index].start]) is not None

    def _coordinated_grain(self, text: str, end: int) -> str | None:
        """The time grain joined to a grouping by and/和 ("by priority and quarter", "按优先级和季度")."""
        match = self._vocabulary.grain_after_group.match(text, end)
        return self._vocabulary.grain_noun[match.group("noun").lower()] if match else None

    @staticmethod
    def _extend_negation(text: str, spans: list[Span], index: int) -> int:
        """A negation covers the entities right after it, joined by 和/、/and/or/commas."""
        end = spans[index].end
        for span in spans[index + 1 :]:
            gap = text[end : span.start]
            if span.kind in ("entity", "correction") and re.fullmatch(r"[\s,、和与及或]*(?:and|or)?[\s,]*", gap, re.IGNORECASE):
                end = span.end
                continue
            break
        return end + 1

    def _leftovers(self, parsed: ParsedQuestion, spans: list[Span]) -> None:
        chars = list(parsed.text)
        for span in spans:
            for i in range(span.start, span.end):
                chars[i] = "|"
        residual = "".join(chars)
        for run in re.findall(r"[\u4e00-\u9fff]+", residual):
            for piece in self._vocabulary.filler_zh.sub("|", run).split("|"):
                if len(piece) >= 2:
                    add_unique(parsed.unknown_terms, piece)
        tokens = list(re.finditer(r"[A-Za-z][A-Za-z'\-]*", residual))
        filler_en = self._vocabulary.filler_en
        # where a dimension's noun ends: a word right after one names something else with it
        # ("product category", "customer segment"); dropped, the answer would be by the wrong
        # dimension. A participle there ("products sold", "orders placed") describes the rows.
        dimension_ends = {span.end for span in spans if span.kind in ("noun", "group") and self.catalog.has_dimension(span.payload)}
        for match in tokens:
            word = match.group(0).strip("'-")
            lower = word.lower()
            if lower in ("total", "sum", "totals") and self._names_a_level(parsed):
                add_unique(parsed.unknown_terms, word)  # "the total unemploy": an average or a level has no total
                continue
            if lower in filler_en or lower.rstrip("s") in filler_en or len(word) < 2:
                continue
            before = parsed.text[: match.start()].rstrip()
            sentence_start = not before or before[-1] in ".?!。？！:：\"'“"
            if (word.isupper() and len(word) >= 2) or (word[0].isupper() and not sentence_start):
                add_unique(parsed.unknown_terms, word)
            elif self._changes_the_answer(lower, residual[: match.start()], parsed) or (
                len(before) in dimension_ends
                and parsed.text[len(before) : match.start()].isspace()
                and not (lower.endswith("ed") or lower in _PARTICIPLES_EN)
            ):
                add_unique(parsed.unknown_terms, word)  # asked about, never dropped: it would change the number
            else:
                add_unique(parsed.ignored_words, lower)

    def _names_a_level(self, parsed: ParsedQuestion) -> bool:
        """Whether the question's one metric does not add up (an average, a ratio, a level)."""
        metrics = [self.catalog.metric(m) for m in parsed.metrics if self.catalog.has_metric(m)]
        return len(metrics) == 1 and not metrics[0].additive

    def _changes_the_answer(self, word: str, before: str, parsed: ParsedQuestion) -> bool:
        """An English word memtool does not know that would change the answer if dropped: a statistic
        ("average"), a word right after by/per/each (what to group by), or a word of one of the model's
        own phrases that the question did not say whole ("returned" of "revenue lost to returned items"),
        unless it belongs to a metric the question names or may mean ("gross or net? revenue")."""
        if word in STATISTIC_EN or word.rstrip("s") in STATISTIC_EN:
            return True
        if AFTER_GROUP_WORD.search(before):
            return True
        if _AFTER_PLACE_WORD.search(before):
            return True  # "for xyz", "from prt": where a value goes, a word nothing reads would drop a filter
        named = {*parsed.metrics, *(c for _, candidates in parsed.ambiguous for c in candidates)}
        metric_words = self._vocabulary.metric_words
        words = set(self._vocabulary.phrase_words).union(*(w for m, w in metric_words.items() if m not in named))
        words -= set().union(*(metric_words.get(m, frozenset()) for m in named))
        return word in words or word.rstrip("s") in words

    # ---- intent ---------------------------------------------------------------------------

    def parse(
        self,
        question: str,
        *,
        today: date,
        route: ParseRoute | None = None,
        corrections: Sequence[TermMapping] = (),
        previous: Intent | None = None,
        choice: Choice | Sequence[Choice] | None = None,
    ) -> ParseResult:
        """The intent of ``question``; with ``previous`` (the session's last intent) a follow-up
        is read against it, and with ``choice`` (one, or every reply so far) the question is a
        pending one, now clarified."""
        parsed = self.recognise(question, today=today, corrections=corrections)
        result = ParseResult(parsed)
        self._clarify_and_carry_over(result, previous, choice)
        if route == "deep_analysis_workflow" and len(parsed.metrics) > 1:
            # "各城市净收入和订单数相关吗": an analysis reads several measures at once; the series
            # is the first one's, and the analysis takes the others from the question itself.
            named = list(parsed.metrics)
            parsed.metrics = named[:1]
            result.notes.append("deep analysis: several measures named (" + ", ".join(named) + "); the series is " + named[0] + "'s")
        need = self._clarifier.clarification(parsed)
        if need is not None:
            result.clarification = need
            return result
        metric = parsed.metric
        assert metric is not None
        every_row = self.catalog.default_window == "all"
        window, comparison, need = read_window(parsed, today, route, result.notes, every_row_by_default=every_row)
        if need is not None:
            result.clarification = need
            return result
        grain = parsed.grain or ("month" if parsed.trend else None)
        time_column, need = self._clarifier.date_asked(parsed, metric, grain)
        if need is not None:
            result.clarification = need
            return result
        if grain is None and route == "deep_analysis_workflow":
            grain = "month"
            result.notes.append("deep analysis: added a month grain so the analysis gets a series")
            window = _widened_for_analysis(window, comparison, result.notes)
        dimensions = _dimensions(parsed, grain, result.notes)
        order, limit = _ranking(parsed, dimensions)
        filters = [Filter(dimension=d, values=tuple(v)) for d, v in parsed.filters.items()]
        filters += [Filter(dimension=d, op="not_in", values=tuple(v)) for d, v in parsed.exclusions.items()]
        share: str | None = None
        if parsed.share:
            share, need = self._clarifier.share_asked(parsed, metric, dimensions, comparison)
            if need is not None:
                result.clarification = need
                return result
        money = self.catalog.metric(metric).kind == "money"
        result.intent = Intent(
            metric=metric,
            dimensions=dimensions,
            filters=tuple(filters),
            time_window=window,
            comparison=comparison,
            order=order,
            limit=limit,
            unit=parsed.unit if money else None,
            share=share,
            time_column=time_column,
        )
        _note_intent(parsed, result.notes, metric, money=money, share=share, time_column=time_column)
        return result

    def _clarify_and_carry_over(self, result: ParseResult, previous: Intent | None, choice: Choice | Sequence[Choice] | None) -> None:
        """The corrections used, the replies applied and what a follow-up takes from ``previous``, each noted."""
        parsed = result.parsed
        for mapping in parsed.corrections_used:
            result.notes.append(f"correction {mapping.term!r} -> {_describe(mapping.maps_to)} ({mapping.source})")
        for made in [choice] if isinstance(choice, Choice) else list(choice or ()):
            self._apply_choice(parsed, made)
            result.notes.append(f"clarified: {made.term or made.reason} -> {_describe_target(made.target)}")
        if previous is not None and is_follow_up(parsed):
            result.carried_over = merge_previous(parsed, previous, self.catalog)
            if result.carried_over:
                result.notes.append("carried over from the previous question: " + "; ".join(result.carried_over))

    def _apply_choice(self, parsed: ParsedQuestion, choice: Choice) -> None:
        """The pending question as the user clarified it: the chosen meaning replaces the term."""
        target, term = choice.target, choice.term
        if term is not None:
            parsed.unknown_terms = [t for t in parsed.unknown_terms if t != term]
            parsed.ignored_words = [w for w in parsed.ignored_words if w != term.lower()]
            parsed.ambiguous = [a for a in parsed.ambiguous if a[0] != term]
            parsed.unsupported = [u for u in parsed.unsupported if u != term]
            parsed.outside = [o for o in parsed.outside if o[0] != term]
            parsed.entity_conflicts = [c for c in parsed.entity_conflicts if c[0] != term]
        if target.metric is not None:
            if choice.reason in ("several_metrics", "incompatible_dimension", "unknown_metric") or term is None:
                parsed.metrics = [target.metric]
            else:
                add_unique(parsed.metrics, target.metric)
        elif target.dimension is not None and target.value is not None:
            add_unique(parsed.filters.setdefault(target.dimension, []), target.value)
        elif target.dimension is not None:
            add_unique(parsed.group_dims, target.dimension)
        elif target.window is not None:
            parsed.times = [t for t in parsed.times if t.window.label == target.window] or parsed.times[:1]
        elif target.time_column is not None:
            parsed.date_columns = [target.time_column]
        mark_incompatible(parsed, self.catalog)


_BESIDE_ITS_NOUN = re.compile(r"[\s的]*(?:of|is|=|:|：|为|是)?[\s的]*", re.IGNORECASE)


_AFTER_PLACE_WORD = re.compile(r"(?<![A-Za-z])(?:from|for|in|at)\s+$", re.IGNORECASE)
_SCOPE_AFTER = re.compile(r"\s*(?:of|for|among|across|per)\s+(?:the\s+|all\s+|all\s+the\s+)?", re.IGNORECASE)
_SCOPE_BEFORE = re.compile(r"\s*(?:'s?|’s?)?\s*(?:的)?\s*", re.IGNORECASE)
_COUNTING = re.compile(r"number|count|how\s+many|数|多少|几", re.IGNORECASE)


def _read_what_is_asked(parsed: ParsedQuestion, span: Span) -> None:
    """Metrics, terms to ask about, periods, grain, comparison, unit and date column."""
    kind = span.kind
    if kind == "metric":
        add_unique(parsed.metrics, span.payload)
    elif kind == "ambiguous":
        parsed.ambiguous.append(span.payload)
    elif kind == "unsupported":
        parsed.unsupported.append(span.payload)
    elif kind == "outside":
        parsed.outside.append((span.text, span.payload.dimension))
    elif kind == "grain":
        parsed.grain = parsed.grain or span.payload
    elif kind == "time":
        parsed.times.append(span.payload)
    elif kind == "compare":
        parsed.comparison = parsed.comparison or span.payload
    elif kind == "unit":
        parsed.unit = span.payload
    elif kind == "date_column":
        add_unique(parsed.date_columns, span.payload)


def _read_answer_shape(parsed: ParsedQuestion, span: Span) -> None:
    """Ranking, trend, share, plural, chart, and the follow-up, drop, lasting and this-time words."""
    kind = span.kind
    if kind == "top_n":
        order, n = span.payload
        parsed.order, parsed.top_n = order or parsed.order, n
    elif kind == "order":
        order, superlative = span.payload
        if order == "top":
            parsed.order = parsed.order or "desc"
            parsed.top_n = parsed.top_n or DEFAULT_TOP
        else:
            parsed.order = parsed.order or order
            parsed.superlative = parsed.superlative or superlative
    elif kind == "trend":
        parsed.trend = True
    elif kind == "share":
        parsed.share = True
    elif kind == "plural":
        parsed.plural = True
    elif kind == "follow_up":
        add_unique(parsed.follow_up_markers, span.payload)
    elif kind == "drop":
        add_unique(parsed.dropped_dims, span.payload)
    elif kind == "lasting":
        add_unique(parsed.lasting, span.payload)
    elif kind == "this_time":
        parsed.this_time = True
    elif kind == "chart":
        parsed.chart = parsed.chart or span.payload


def _widened_for_analysis(window: TimeWindow | None, comparison: Comparison | None, notes: list[str]) -> TimeWindow | None:
    """A deep analysis of three months or less, with no comparison, widened to the 24 months ending with it."""
    if window is not None and comparison is None and window.end <= add_months(month_start(window.start), 3):
        # Two years: the same month a year earlier is what a seasonal baseline compares with.
        window = TimeWindow(
            start=add_months(month_start(window.start), -23),
            end=window.end,
            label=f"24 months to {window.label}",
        )
        notes.append(f"deep analysis: widened the window to [{window.start}, {window.end}) for context")
    return window


def _dimensions(parsed: ParsedQuestion, grain: str | None, notes: list[str]) -> tuple[str, ...]:
    """The grain first, then the groupings, then each dimension with several values named (one series each)."""
    dimensions = tuple(([grain] if grain else []) + [d for d in parsed.group_dims if d != grain])
    # "北京和上海每月的净收入对比", "compare Beijing and Shanghai": two or more values of one
    # dimension are each a series of their own, unless the question asks for them together.
    compared = [d for d, values in parsed.filters.items() if len(values) > 1 and d not in dimensions]
    if compared and not TOGETHER.search(parsed.text):
        dimensions = (*dimensions, *compared)
        for dim in compared:
            notes.append(f"compared: {dim} {' / '.join(parsed.filters[dim])}, one series each")
    return dimensions


def _ranking(parsed: ParsedQuestion, dimensions: tuple[str, ...]) -> tuple[Literal["asc", "desc"] | None, int | None]:
    """Order and limit: a superlative over a grouping is the top one; a single number has nothing to rank."""
    order, limit = parsed.order, parsed.top_n
    if limit is None and parsed.superlative and parsed.group_dims and not parsed.plural:
        limit = 1
    if (order or limit) and not dimensions:
        order, limit = None, None  # a single number has nothing to rank
    return order, limit


def _note_intent(parsed: ParsedQuestion, notes: list[str], metric: str, *, money: bool, share: str | None, time_column: str | None) -> None:
    """The notes on how the intent was read: its date, unit and share, and the words ignored."""
    if time_column is not None:
        notes.append(f"dated by {time_column}, as the question says")
    if parsed.unit is not None and money:
        notes.append(f"unit {parsed.unit} from the question")
    elif parsed.unit is not None:
        notes.append(f"unit {parsed.unit} ignored: {metric} is not an amount of money")
    if share == "groups":
        notes.append("share: each group's share of the total over the question's scope")
    elif share is not None:
        notes.append(f"share: the {share} named, as a share of every {share} in the question's scope")
    if parsed.ignored_words:
        notes.append("ignored words: " + ", ".join(parsed.ignored_words))


def _describe_target(target: ChoiceTarget) -> str:
    if target.metric is not None:
        return f"metric {target.metric}"
    if target.value is not None:
        return f"{target.dimension} = {target.value}"
    if target.dimension is not None:
        return f"group by {target.dimension}"
    if target.time_column is not None:
        return f"date {target.time_column}"
    return f"window {target.window}"


def _describe(target: MappingTarget) -> str:
    if target.metric is not None:
        return f"metric {target.metric}"
    if target.value is not None:
        return f"{target.dimension} = {target.value}"
    return f"group by {target.dimension}"
