"""The rule-based planner: the embedded default behind the planning port.

``plan(question, route=, context=)`` returns a Plan:

- ``business_knowledge_qa``: status ``answered`` with the catalog definitions of the terms the
  question names (both candidates for an ambiguous word such as 收入) and the recalled knowledge
  memories about them, each cited; no SQL.
- other routes: status ``planned`` with the intent and its Redshift-dialect SQL, or
  ``needs_clarification`` when a term is unknown or ambiguous (never a guess).

Units for money metrics, most specific first: a unit the question itself names ("用万元"), then
the request's ``conditions`` (this time only: the profile is not touched), then the profile, then
元. 元 is the canonical default and is stored as ``unit=None`` in the intent so "no preference"
and "prefers 元" share one cache key. ``notes`` record what was applied and where it came from;
corrections used are cited by memory id and version.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime
from typing import Protocol

from memtool.planning.context import KnowledgeItem, PlanContext, normalize_unit
from memtool.planning.plan import Citation, Clarification, Plan, Route
from memtool.planning.routes import classify_route, parse_forced_route
from memtool.semantic.catalog import Catalog, Lang
from memtool.semantic.compiler import IntentCompiler
from memtool.semantic.entities import EntityIndex
from memtool.semantic.parser import ParsedQuestion, QuestionParser, TermMapping, language_of



class _Clock(Protocol):
    def now(self) -> datetime: ...


TodaySource = date | Callable[[], date] | _Clock  # a fixed date, a callable returning one, or a Clock


def resolve_today(source: TodaySource) -> date:
    """Today from a date, a datetime, a clock (``now()``) or a callable returning either."""
    if isinstance(source, datetime):
        return source.date()
    if isinstance(source, date):
        return source
    if not callable(source):
        return source.now().date()
    value = source()
    return value.date() if isinstance(value, datetime) else value


class RulePlanner:
    name = "rules"

    def __init__(self, catalog: Catalog, entities: EntityIndex, today: TodaySource) -> None:
        self.catalog = catalog
        self.entities = entities
        self.parser = QuestionParser(catalog, entities)
        self.compiler = IntentCompiler(catalog)
        self._today = today

    def today(self) -> date:
        return resolve_today(self._today)

    # ---- the port -------------------------------------------------------------------------

    def plan(self, question: str, *, route: Route | str | None = None, context: PlanContext | None = None) -> Plan:
        chosen: Route = classify_route(question) if route is None else parse_forced_route(route)
        context = context or PlanContext()
        notes: list[str] = []
        corrections = self._usable_corrections(context.corrections, notes)
        if chosen == "business_knowledge_qa":
            return self._answer_knowledge(question, context, corrections, notes)
        today = self.today()
        result = self.parser.parse(question, today=today, route=chosen, corrections=corrections)
        notes.extend(result.notes)
        citations = [Citation(source=m.source, text=f"{m.term} -> {m.maps_to.describe()}") for m in result.parsed.corrections_used]
        if result.clarification is not None:
            need = result.clarification
            notes.append(f"clarification needed: {need.reason}")
            return Plan(
                status="needs_clarification",
                route=chosen,
                clarification=Clarification(question=need.question, term=need.term, options=need.options),
                citations=citations,
                planner=self.name,
                notes=notes,
            )
        intent = result.intent
        assert intent is not None
        metric = self.catalog.metric(intent.metric)
        if metric.kind == "money":
            unit, source = self._unit(intent.unit, context)
            intent = intent.model_copy(update={"unit": None if unit == "元" else unit})
            notes.append(f"unit {unit} from {source}")
        chart, chart_source = self._chart(context)
        if chart is not None:
            notes.append(f"chart {chart} from {chart_source}")
        compiled = self.compiler.compile(intent)
        citations.append(Citation(source=f"catalog:metric/{metric.name}", text=metric.definition(result.parsed.lang)))
        notes.append(f"model_version {self.catalog.model_version_for(intent)}")
        return Plan(
            status="planned",
            route=chosen,
            intent=intent,
            sql=compiled.sql,
            citations=citations,
            planner=self.name,
            notes=notes,
        )

    # ---- pieces ---------------------------------------------------------------------------

    def _usable_corrections(self, corrections: list[TermMapping], notes: list[str]) -> list[TermMapping]:
        """Corrections that name things the catalog and warehouse know; the rest are noted and skipped."""
        usable: list[TermMapping] = []
        for mapping in corrections:
            target = mapping.maps_to
            problem = None
            if target.metric is not None and not self.catalog.has_metric(target.metric):
                problem = f"unknown metric {target.metric!r}"
            elif target.dimension is not None and not self.catalog.has_dimension(target.dimension):
                problem = f"unknown dimension {target.dimension!r}"
            elif target.value is not None and target.dimension is not None:
                entity = self.entities.resolve(target.dimension, target.value)
                if entity is None and self.entities.of(target.dimension):
                    problem = f"no {target.dimension} {target.value!r} in the warehouse"
                elif entity is not None and entity.value != target.value:
                    mapping = mapping.model_copy(update={"maps_to": target.model_copy(update={"value": entity.value})})
            if problem:
                notes.append(f"correction {mapping.term!r} ({mapping.source}) skipped: {problem}")
            else:
                usable.append(mapping)
        return usable

    def _unit(self, question_unit: str | None, context: PlanContext) -> tuple[str, str]:
        if question_unit is not None:
            return question_unit, "the question"
        condition = context.condition_unit()
        profile = normalize_unit(context.profile_unit)
        if condition is not None:
            kept = f"; profile unit {profile} unchanged" if profile and profile != condition else ""
            return condition, f"this request's conditions{kept}"
        if profile is not None:
            return profile, "the profile"
        return "元", "the default"

    @staticmethod
    def _chart(context: PlanContext) -> tuple[str | None, str]:
        chart = context.conditions.get("chart")
        if isinstance(chart, str) and chart:
            return chart, "this request's conditions"
        if context.profile_chart:
            return context.profile_chart, "the profile"
        return None, ""

    def _answer_knowledge(self, question: str, context: PlanContext, corrections: list[TermMapping], notes: list[str]) -> Plan:
        lang: Lang = language_of(question)
        parsed = self.parser.recognise(question, today=self.today(), corrections=corrections)
        metrics = list(parsed.metrics)
        for _term, candidates in parsed.ambiguous:
            metrics.extend(c for c in candidates if c not in metrics)
        dimensions = [] if metrics else _mentioned_dimensions(parsed)
        citations: list[Citation] = []
        paragraphs: list[str] = []
        for mapping in parsed.corrections_used:
            citations.append(Citation(source=mapping.source, text=f"{mapping.term} -> {mapping.maps_to.describe()}"))
        if parsed.ambiguous:
            term = parsed.ambiguous[0][0]
            labels = "、".join(self.catalog.metric(m).label(lang) for m in metrics) if lang == "zh" else " or ".join(self.catalog.metric(m).label(lang) for m in metrics)
            paragraphs.append(f"「{term}」可能指：{labels}。" if lang == "zh" else f"'{term}' can mean {labels}.")
        for name in metrics:
            spec = self.catalog.metric(name)
            citations.append(Citation(source=f"catalog:metric/{name}", text=spec.definition(lang)))
            paragraphs.append(spec.definition(lang))
        for name in dimensions:
            spec = self.catalog.dimension(name)
            citations.append(Citation(source=f"catalog:dimension/{name}", text=spec.definition(lang)))
            paragraphs.append(spec.definition(lang))
        for item in self._relevant_knowledge(context, metrics, dimensions):
            citations.append(Citation(source=item.source, text=item.text))
            paragraphs.append(item.text)
        if not paragraphs:
            options = [m.label(lang) for m in self.catalog.metrics]
            notes.append("clarification needed: no catalog term or knowledge in the question")
            return Plan(
                status="needs_clarification",
                route="business_knowledge_qa",
                clarification=Clarification(
                    question="你想了解哪个指标的定义？" if lang == "zh" else "Which metric's definition do you want?",
                    term=None,
                    options=options,
                ),
                citations=citations,
                planner=self.name,
                notes=notes,
            )
        notes.append("answered from " + ", ".join(c.source for c in citations))
        answer = "\n\n".join(f"{text} [{index}]" for index, text in enumerate(paragraphs, start=1))
        return Plan(status="answered", route="business_knowledge_qa", answer=answer, citations=citations, planner=self.name, notes=notes)

    def _relevant_knowledge(self, context: PlanContext, metrics: list[str], dimensions: list[str]) -> list[KnowledgeItem]:
        """Knowledge memories about the metrics/dimensions asked (all of them when none is named)."""
        if not metrics and not dimensions:
            return list(context.knowledge)
        terms: set[str] = set()
        for name in metrics:
            spec = self.catalog.metric(name)
            terms.update(t.lower() for t in (name, spec.zh, spec.en, *spec.synonyms_zh, *spec.synonyms_en))
        for name in dimensions:
            spec = self.catalog.dimension(name)
            terms.update(t.lower() for t in (name, spec.zh, spec.en))
        relevant: list[KnowledgeItem] = []
        for item in context.knowledge:
            haystack = f"{item.key or ''} {item.text}".lower()
            if any(term in haystack for term in terms if len(term) >= 2):
                relevant.append(item)
        return relevant


def _mentioned_dimensions(parsed: ParsedQuestion) -> list[str]:
    names: list[str] = []
    for name in [*parsed.group_dims, *parsed.filters]:
        if name not in names:
            names.append(name)
    return names


