"""Values the entity index cannot hold, looked up in the warehouse where a question names them.

A dimension with more values than its cap, or one not indexed, has its values checked one by one:
next to one of its role words or nouns ("from JFK", "从EWR出发", "JFK airport"), or written as a
name with nothing to say whose ("did Ipsos conduct"). Each look-up is a bound, cached ``SELECT 1
... LIMIT 1`` (``EntityIndex.holds``), at most ``MAX_PROBES`` a question. A word the warehouse
holds becomes an entity span; one it does not hold stays a word, and is asked about.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace

from memtool.semantic.catalog import Catalog
from memtool.semantic.entities import EntityIndex, EntityValue
from memtool.semantic.parsed import Span
from memtool.semantic.phrases import COORDINATED, MAX_PROBES, NAME_RUN, ROLE_GAP, VALUE_CHUNK, VALUE_STOP, VALUE_WORD, language_of
from memtool.semantic.vocabulary import Vocabulary

_AFTER_PLACE_WORD = re.compile(r"(?<![A-Za-z])(?:from|for|in|at|of)\s+([a-z][a-z0-9'\-]*)(?![A-Za-z0-9])")


class ValueProber:
    """Finds the values a question names that only the warehouse can confirm (see the module docstring)."""

    def __init__(self, catalog: Catalog, entities: EntityIndex, vocabulary: Vocabulary) -> None:
        self.catalog = catalog
        self.entities = entities
        self._siblings = vocabulary.siblings
        self._role_bearing = vocabulary.role_bearing
        self._role_words_of = vocabulary.role_words_of
        self._filler_en = vocabulary.filler_en

    def with_probed_values(self, text: str, spans: list[Span]) -> list[Span]:
        """``spans`` with the values looked up in the warehouse where the question names the
        dimension: the words right after or before one of its role words or nouns, as written, in
        upper case and in title case; then the names written as names (``_bare_values``)."""
        if self.entities.probe is None:
            return spans
        taken = bytearray(len(text) + 1)
        for span in spans:
            taken[span.start : span.end] = b"\x01" * (span.end - span.start)
        budget = [MAX_PROBES]
        spans = list(spans)
        for index, span in enumerate(spans):
            counterparts = self._counterparts(span)
            if counterparts:  # "flights at JFK", JFK indexed as an origin: is it a destination past the cap too?
                spans[index] = self._with_roles_held(span, counterparts, budget)
        found: list[Span] = []
        for index in range(len(spans)):
            found += self._probed_near(text, spans, index, taken, budget)
        found += self._bare_values(text, taken, budget)
        return sorted([*spans, *found], key=lambda s: s.start) if found else spans

    def _probe_groups(self, span: Span) -> list[tuple[str, ...]]:
        """The dimension groups (one column's dimensions together) a role word or noun names whose
        values all need a look-up; none for any other span."""
        if span.kind == "role":
            named: Iterable[str] = span.payload
        elif span.kind == "noun":
            named = (span.payload,)
        else:
            return []
        groups = list(dict.fromkeys(self._siblings.get(name, (name,)) for name in named))
        return [g for g in groups if all(self.entities.needs_probe(d) for d in g)]

    def _probed_near(self, text: str, spans: list[Span], index: int, taken: bytearray, budget: list[int]) -> list[Span]:
        """The values found next to span ``index`` when it is a role word or noun of a dimension
        past its cap; an indexed value right next to such a role word gets that role too (in ``spans``)."""
        span = spans[index]
        groups = self._probe_groups(span)
        if not groups:
            return []
        if span.kind == "role":  # "from JFK", JFK indexed as a destination only: is it an origin past the cap?
            for other in (index - 1, index + 1):
                if 0 <= other < len(spans) and spans[other].kind == "entity":
                    gap = text[spans[other].end : span.start] if other < index else text[span.end : spans[other].start]
                    if ROLE_GAP.fullmatch(gap):
                        spans[other] = self._with_roles_held(spans[other], groups, budget)
        return self._probed_around(text, span, groups, taken, budget)

    def _probed_around(
        self, text: str, span: Span, groups: list[tuple[str, ...]], taken: bytearray, budget: list[int]
    ) -> list[Span]:
        """The value right after ``span``, else right before it, that the warehouse holds; a value
        joined to it ("from JFK and LGA") is looked up too, after it."""
        found: list[Span] = []
        after: int | None = span.end
        before: int | None = span.start
        while after is not None or before is not None:
            candidates = self._value_candidates(text, taken, after, before)
            after = before = None
            for start, end in candidates:
                probed = self._probed_span(text, start, end, groups, budget, taken)
                if probed is not None:
                    found.append(probed)
                    joined = COORDINATED.match(text, end)  # "from JFK and LGA": LGA is looked up too
                    if joined is not None and joined.end() > end:
                        after = joined.end()
                    break
        return found

    def _bare_values(self, text: str, taken: bytearray, budget: list[int]) -> list[Span]:
        """Names written as names ("did Ipsos conduct", "Ipsos做了"), with no noun or role word to
        say whose, looked up in every dimension past its cap (or not indexed): a name one dimension
        holds is its value; one that several hold is asked about (an entity conflict); one none
        holds stays a word. English words count from the second word on, so the capital of a
        sentence's first word is not read as a name."""
        groups = list(
            dict.fromkeys(
                self._siblings.get(d.name, (d.name,))
                for d in self.catalog.attribute_dimensions
                if self.entities.needs_probe(d.name)
            )
        )
        groups = [g for g in groups if all(self.entities.needs_probe(d) for d in g)]
        if not groups:
            return []
        english = language_of(text) == "en"
        first_word = re.match(r"\s*[A-Za-z0-9]+", text)
        out: list[Span] = []
        runs = [m.span() for m in NAME_RUN.finditer(text)]
        # a word in lower case where a value goes ("from prt", "for usa"): the warehouse may hold it as written
        runs += [m.span(1) for m in _AFTER_PLACE_WORD.finditer(text)]
        for start, end in sorted(set(runs)):
            if any(taken[start:end]) or (english and first_word is not None and start < first_word.end()):
                continue
            if text[start:end].lower() in self._filler_en or budget[0] <= 0:
                continue
            probed = self._probed_span(text, start, end, groups, budget, taken)
            if probed is not None:
                out.append(probed)
        return out

    def _probed_span(
        self, text: str, start: int, end: int, groups: list[tuple[str, ...]], budget: list[int], taken: bytearray
    ) -> Span | None:
        """``text[start:end]`` as an entity span of every dimension group the warehouse holds it in
        (marking it taken), or None when none does."""
        words = text[start:end]
        values = [
            EntityValue(dimension, value, None, (words,))
            for group in groups
            if (value := self._probe_value(words, group[0], budget)) is not None
            for dimension in group
        ]
        if not values:
            return None
        taken[start:end] = b"\x01" * (end - start)
        return Span(start, end, "entity", words, values, 4)

    def _counterparts(self, span: Span) -> list[tuple[str, ...]]:
        """For an indexed value of a dimension with role words, the dimensions of the other roles
        (other role words) whose values are not all indexed: the value may be theirs too."""
        if span.kind != "entity":
            return []
        dims = {v.dimension for v in span.payload}
        if not dims <= self._role_bearing:
            return []
        words = {self._role_words_of[d] for d in dims}
        others = [d for d in self._role_bearing if d not in dims and self._role_words_of[d] not in words]
        groups = dict.fromkeys(self._siblings.get(d, (d,)) for d in sorted(others))
        return [g for g in groups if not dims & set(g) and all(self.entities.needs_probe(d) for d in g)]

    def _with_roles_held(self, span: Span, groups: list[tuple[str, ...]], budget: list[int]) -> Span:
        """An indexed value next to a role word of a dimension past its cap: that dimension's too when the warehouse holds it."""
        values: list[EntityValue] = list(span.payload)
        for group in groups:
            if any(v.dimension in group for v in values):
                continue
            for value in dict.fromkeys(v.value for v in span.payload):
                if budget[0] <= 0:
                    break
                budget[0] -= 1
                if self.entities.holds(group[0], value):
                    first = next(v for v in span.payload if v.value == value)
                    values.extend(EntityValue(d, value, first.label_en, first.names) for d in group)
                    break
        return span if len(values) == len(span.payload) else replace(span, payload=values)

    def _probe_value(self, words: str, dimension: str, budget: list[int]) -> str | None:
        for variant in dict.fromkeys((words, words.upper(), words.title())):
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            if self.entities.holds(dimension, variant):
                return variant
        return None

    def _value_candidates(self, text: str, taken: bytearray, after: int | None, before: int | None) -> list[tuple[int, int]]:
        """Where a value may be: the words not yet read right after position ``after``, then right
        before ``before``, longest first (at most four English words, or two to eight characters)."""
        out: list[tuple[int, int]] = []
        if after is not None:
            gap = ROLE_GAP.match(text, after)
            start = end = gap.end() if gap else after
            while end < len(text) and not taken[end] and not VALUE_STOP.match(text, end):
                end += 1
            out.extend(self._value_pieces(text, start, end, forward=True))
        if before is not None:
            end = before
            while end > 0 and text[end - 1] in " 的":
                end -= 1
            start = end
            while start > 0 and not taken[start - 1] and not VALUE_STOP.match(text, start - 1):
                start -= 1
            out.extend(self._value_pieces(text, start, end, forward=False))
        return out

    def _value_pieces(self, text: str, start: int, end: int, *, forward: bool) -> list[tuple[int, int]]:
        chunks = [(m.start() + start, m.end() + start) for m in VALUE_CHUNK.finditer(text[start:end])]
        if not chunks:
            return []
        chunk_start, chunk_end = chunks[0] if forward else chunks[-1]
        piece = text[chunk_start:chunk_end]
        if not piece.isascii():
            sizes = range(min(8, chunk_end - chunk_start), 1, -1)
            return [(chunk_start, chunk_start + n) if forward else (chunk_end - n, chunk_end) for n in sizes]
        words = [(m.start() + chunk_start, m.end() + chunk_start) for m in VALUE_WORD.finditer(piece)]
        out: list[tuple[int, int]] = []
        for n in range(min(4, len(words)), 0, -1):
            chosen = words[:n] if forward else words[-n:]
            edge_start, edge_end = chosen[-1] if forward else chosen[0]
            edge = text[edge_start:edge_end]
            if edge.lower() in self._filler_en and not edge.isupper():
                continue  # "JFK in", "the": a value does not end (or start) with a filler word
            out.append((chosen[0][0], chosen[-1][1]))
        return out
