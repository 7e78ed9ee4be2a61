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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

from memtool.planning.context import FewshotExample, KnowledgeItem, PlanContext, PreviousTurn, normalize_unit
from memtool.planning.plan import AppliedMemory, Citation, Clarification, LearnedTerm, Plan, Preference, Route
from memtool.planning.routes import classify_route, parse_forced_route
from memtool.semantic.catalog import Catalog, Lang
from memtool.semantic.compiler import IntentCompiler
from memtool.semantic.entities import EntityIndex
from memtool.semantic.followup import ChoiceTarget, declines_to_choose, option_label, ordinal_choice, plain_reply, usable_term
from memtool.semantic.intent import Intent
from memtool.semantic.parser import Choice, ClarificationNeed, ParsedQuestion, ParseResult, QuestionParser, TermMapping, language_of

# Clarifications about a term whose answer is worth remembering as the user's meaning of it.
LEARNABLE_REASONS = frozenset({"ambiguous_metric", "unknown_term", "ambiguous_value"})



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


@dataclass(frozen=True)
class _Reading:
    """How the rules read a question: the question answered (the pending one, for a reply to its
    clarification), its route, the parse, and what the conversation settled."""

    question: str
    asked: str
    route: Route
    result: ParseResult
    choices: list[Choice] | None
    learned: LearnedTerm | None
    preference: Preference | None


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

    # ---- the port (memtool.planning.port.Planner) -------------------------------------------

    @property
    def rules(self) -> RulePlanner:
        return self

    def write_analysis_script(
        self, question: str, analysis: str, columns: Sequence[str], sample: Sequence[Sequence[Any]], params: Mapping[str, Any]
    ) -> str | None:
        return None  # rules write no script: the templated one runs

    def plan(self, question: str, *, route: Route | str | None = None, context: PlanContext | None = None) -> Plan:
        context = context or PlanContext()
        today = self.today()
        notes: list[str] = []
        corrections = self._usable_corrections(context.corrections, notes)
        pending, choice = self._clarification_reply(question, context, corrections, today)
        if pending is not None and choice is None:
            if declines_to_choose(question, len((pending.clarification or {}).get("options") or [])):
                return self._ask_again(question, pending, route, notes)
            choice = self._other_issue(question, pending, corrections, today)
        asked = _pending_question(pending) if pending is not None and choice is not None else question
        chosen = self._route(question, asked, route, today, answers_pending=pending is not None and choice is not None)
        if chosen == "business_knowledge_qa" and choice is None:
            return self._answer_knowledge(question, context, corrections, notes)
        if chosen == "business_knowledge_qa":
            chosen = "nl2sql_query"
        preference = self.standing_preference(question, today)
        previous = self._previous_intent(context, notes, before=pending)
        choices = [*_earlier_choices(pending), choice] if choice is not None else None
        result = self.parser.parse(asked, today=today, route=chosen, corrections=corrections, previous=previous, choice=choices)
        if preference is not None and not _asks_for_data(self.parser.recognise(question, today=today, corrections=corrections)):
            # Said on its own (in a session too): remembered, not a follow-up of the last question.
            notes.append(f"remembered: {preference.text}")
            return Plan(status="remembered", route=chosen, remember=preference, planner=self.name, notes=notes)
        notes.extend(result.notes)
        applied, citations = _corrections_used(result.parsed)
        learned = self._learned(pending, choice)
        if result.clarification is not None:
            result = self._templated(result, question, context, today, chosen, notes, applied, citations)
        if result.clarification is not None:
            notes.append(f"clarification needed: {result.clarification.reason}")
            clarification = _clarification(result.clarification, asked, choices, context.usual_metrics)
            return Plan(
                status="needs_clarification",
                route=chosen,
                clarification=clarification,
                citations=citations,
                planner=self.name,
                notes=notes,
                applied=applied,
                learned=learned,
                remember=preference,
            )
        reading = _Reading(question, asked, chosen, result, choices, learned, preference)
        return self._planned(reading, context, notes, applied, citations)

    # ---- the steps of a plan --------------------------------------------------------------

    def _route(self, question: str, asked: str, route: Route | str | None, today: date, *, answers_pending: bool) -> Route:
        """A reply answers the pending question, on that question's route; otherwise the forced route or the question's."""
        if answers_pending:
            return classify_route(asked, parser=self.parser, today=today)
        if route is not None:
            return parse_forced_route(route)
        return classify_route(question, parser=self.parser, today=today)

    def _planned(
        self, reading: _Reading, context: PlanContext, notes: list[str], applied: list[AppliedMemory], citations: list[Citation]
    ) -> Plan:
        """The plan of a question the rules read into an intent: unit and chart settled, every filter
        value checked against the warehouse, then compiled."""
        result, preference = reading.result, reading.preference
        chosen = reading.route
        intent = result.intent
        assert intent is not None
        metric = self.catalog.metric(intent.metric)
        if metric.kind == "money":
            intent = self._money_unit(intent, context, preference, notes, applied)
        self._settle_chart(context, preference, notes, applied)
        if chosen == "kpi_lookup" and intent.dimensions and result.carried_over:
            chosen = "nl2sql_query"  # "换成处方量" reads as one number, but it carries a grouping
            notes.append("route nl2sql_query: the follow-up carries a grouping")
        unheld = self._value_not_held(intent)
        if unheld is not None:  # a net under every path a value takes (turns, options, corrections, examples)
            dimension, value = unheld
            notes.append(f"clarification needed: {value[:40]!r} is not a {dimension} of the data")
            return Plan(
                status="needs_clarification",
                route=chosen,
                clarification=self._unheld_value(dimension, value, result.parsed.lang),
                citations=citations,
                planner=self.name,
                notes=notes,
                applied=applied,
            )
        compiled = self.compiler.compile(intent)
        source = f"catalog:metric/{metric.name}@{self.catalog.model_version}"
        citations.append(Citation(source=source, text=metric.definition(result.parsed.lang)))
        notes.append(f"model_version {self.catalog.model_version_for(intent)}")
        if preference is not None:
            notes.append(f"remembered: {preference.text}")
        return Plan(
            status="planned",
            route=chosen,
            intent=intent,
            sql=compiled.sql,
            citations=citations,
            planner=self.name,
            notes=notes,
            applied=[a for a in applied if a.id],
            carried_over=result.carried_over,
            resolved_question=reading.asked if reading.asked != reading.question else None,
            clarified=[c.reason for c in reading.choices or []],
            learned=reading.learned,
            remember=preference,
        )


    def _templated(
        self,
        result: ParseResult,
        question: str,
        context: PlanContext,
        today: date,
        route: Route,
        notes: list[str],
        applied: list[AppliedMemory],
        citations: list[Citation],
    ) -> ParseResult:
        """A question the rules left unclear, planned from an approved example when one has its shape
        (the example is applied and cited); otherwise ``result`` unchanged."""
        templated = self._from_fewshot(question, context, today, route, notes)
        if templated is None:
            return result
        planned, example = templated
        applied.append(AppliedMemory(id=example.memory_id, version=example.version, kind="fewshot", why="intent template"))
        citations.append(Citation(source=example.source, text=f"{example.question} -> {example.sql[:200]}"))
        return planned

    def _money_unit(
        self, intent: Intent, context: PlanContext, preference: Preference | None, notes: list[str], applied: list[AppliedMemory]
    ) -> Intent:
        """The intent of a money metric with its display unit settled, the unit's source noted (and
        the profile memory applied when the unit came from the profile)."""
        unit, source = self._unit(intent.unit, context, preference)
        intent = intent.model_copy(update={"unit": None if unit == "元" else unit})
        if self.catalog.currency != "元":
            if intent.unit is not None:
                notes.append(f"unit {intent.unit} ignored: this model's money is in {self.catalog.currency}")
                intent = intent.model_copy(update={"unit": None})
            unit = self.catalog.currency  # 元, 万元 and 分 are the yuan's; this model keeps its own currency
        notes.append(f"unit {unit} from {source if unit != self.catalog.currency or source != 'the default' else 'the model'}")
        if source == "the profile" and "unit" in context.profile_sources:
            applied.append(_applied_source(context.profile_sources["unit"], "profile", f"unit {unit}"))
        return intent

    def _settle_chart(
        self, context: PlanContext, preference: Preference | None, notes: list[str], applied: list[AppliedMemory]
    ) -> None:
        """Note the chart in force and where it came from (the profile memory applied when it is the profile's)."""
        chart, chart_source = self._chart(context, preference)
        if chart is not None:
            notes.append(f"chart {chart} from {chart_source}")
            if chart_source == "the profile" and "chart" in context.profile_sources:
                applied.append(_applied_source(context.profile_sources["chart"], "profile", f"chart {chart}"))

    def _unheld_value(self, dimension: str, value: str, lang: Lang) -> Clarification:
        """Ask which value is meant when the intent filters on one the warehouse does not hold."""
        spec = self.catalog.dimension(dimension)
        options = self.entities.labels(dimension, lang)[:5]
        return Clarification(
            question=f"数据里没有{spec.label(lang)}「{value[:40]}」。你指的是哪一个？"
            if lang == "zh"
            else f"The data has no {spec.label(lang)} called '{value[:40]}'. Which {spec.label(lang)} do you mean?",
            term=value[:40],
            options=options,
            reason="unknown_value",
            targets=[ChoiceTarget(dimension=dimension, value=e.value).as_json() for e in self.entities.of(dimension)[:5]],
        )

    # ---- conversation ---------------------------------------------------------------------

    def _previous_intent(self, context: PlanContext, notes: list[str], before: PreviousTurn | None = None) -> Intent | None:
        """The intent of the session's latest answered turn (before the pending one, if any).

        A turn is stored state: it is read back only when everything in it is something this model
        and this warehouse know (``stored_intent_problem``), so a follow-up never carries a value
        nobody asked for into the SQL."""
        turns = list(context.turns)
        if before is not None and turns and turns[-1] is before:
            turns = turns[:-1]
        for turn in reversed(turns):
            if turn.intent:
                try:
                    intent = Intent.model_validate(turn.intent)
                except ValueError:
                    return None
                problem = self.stored_intent_problem(intent)
                if problem is not None:
                    notes.append(f"the session's previous question was not carried over: {problem}")
                    return None
                return intent
            if turn.status == "answered":
                return None  # an answered turn without an intent (a knowledge answer) ends the thread
        return None

    def stored_intent_problem(self, intent: Intent) -> str | None:
        """Why an intent read back from stored state cannot be used, or None: an unknown metric or
        dimension, a dimension the metric lacks, or a filter value the warehouse does not hold."""
        if not self.catalog.has_metric(intent.metric):
            return f"unknown metric {intent.metric!r}"
        metric = self.catalog.metric(intent.metric)
        for name in [*intent.dimensions, *(f.dimension for f in intent.filters)]:
            if not self.catalog.has_dimension(name) or name not in metric.dimensions:
                return f"{metric.name} has no dimension {name!r}"
        if intent.time_column is not None and intent.time_column not in self.catalog.time_column_choices(metric.name):
            return f"{intent.time_column[:40]!r} is not a date {metric.name} is read by"
        for item in intent.filters:
            if self.catalog.dimension(item.dimension).kind != "attribute":
                return f"{item.dimension} is not an attribute"
            for value in item.values:
                if not self.entities.holds(item.dimension, value):
                    return f"{value[:40]!r} is not a {item.dimension} of the data"
        return None

    def _value_not_held(self, intent: Intent) -> tuple[str, str] | None:
        """The first (dimension, value) of the intent's filters that the warehouse does not hold."""
        for item in intent.filters:
            for value in item.values:
                if not self.entities.holds(item.dimension, value):
                    return item.dimension, value
        return None

    def target_problem(self, target: ChoiceTarget) -> str | None:
        """Why a stored clarification option cannot be applied, or None (see ``stored_intent_problem``)."""
        if target.metric is not None and not self.catalog.has_metric(target.metric):
            return f"unknown metric {target.metric!r}"
        if target.dimension is not None and not self.catalog.has_dimension(target.dimension):
            return f"unknown dimension {target.dimension!r}"
        if target.value is not None and (target.dimension is None or not self.entities.holds(target.dimension, target.value)):
            return f"{target.value[:40]!r} is not a {target.dimension or 'value'} of the data"
        if target.time_column is not None and not any(
            target.time_column in self.catalog.time_column_choices(m.name) for m in self.catalog.metrics
        ):
            return f"{target.time_column[:40]!r} is not a date of the model"
        return None

    def _clarification_reply(
        self, reply: str, context: PlanContext, corrections: list[TermMapping], today: date
    ) -> tuple[PreviousTurn | None, Choice | None]:
        """When the last turn asked for a clarification and ``reply`` picks one of its options."""
        # A preference said meanwhile ("以后默认用万元", answered `remembered`) leaves the question waiting.
        waiting = [t for t in context.turns if t.status != "remembered"]
        if not waiting:
            return None, None
        last = waiting[-1]
        asked = last.clarification or {}
        if last.status != "needs_clarification" or not asked.get("options"):
            return None, None
        options = [str(o) for o in asked["options"]]
        targets = [ChoiceTarget.from_json(t) for t in asked.get("targets") or []]
        if len(targets) != len(options):
            return last, None
        index = ordinal_choice(reply, len(options))
        if index is None:
            said = plain_reply(reply)
            index = next((i for i, o in enumerate(options) if said and said in (o.lower(), option_label(o).lower())), None)
        if index is None:
            index = self._choice_by_meaning(reply, targets, corrections, today)
        if index is None or targets[index] is None:
            return last, None
        target = targets[index]
        assert target is not None
        if self.target_problem(target) is not None:  # a stored option is read back only when the data has it
            return last, None
        return last, Choice(reason=str(asked.get("reason") or ""), term=asked.get("term"), target=target)

    def _ask_again(self, reply: str, pending: PreviousTurn, route: Route | str | None, notes: list[str]) -> Plan:
        """The same clarification again, the question still waiting: nothing is guessed or stored."""
        asked = Clarification.model_validate(pending.clarification)
        zh = language_of(reply) == "zh" or language_of(asked.question) == "zh"
        count = len(asked.options)
        prefix = f"请从这 {count} 个选项里选一个：" if zh else f"Please pick one of the {count} options: "
        notes.append(f"the reply {reply!r} picks none of the options; the question is still waiting")
        chosen = parse_forced_route(route) if route is not None else classify_route(_pending_question(pending), parser=self.parser)
        return Plan(
            status="needs_clarification",
            route=chosen,
            clarification=asked.model_copy(
                update={
                    "question": prefix + asked.question.removeprefix(prefix),
                    "pending_question": _pending_question(pending),
                }
            ),
            planner=self.name,
            notes=notes,
        )

    def _other_issue(
        self, reply: str, pending: PreviousTurn, corrections: list[TermMapping], today: date
    ) -> Choice | None:
        """A reply that settles another open question of the pending one: "净收入" when 西安 was
        asked about first and 收入 is ambiguous too. The clarification about 西安 then comes again."""
        said = self.parser.recognise(reply, today=today, corrections=corrections)
        if len(said.metrics) != 1 or said.unknown_terms or said.filters or said.group_dims or said.times:
            return None
        waiting = self.parser.recognise(_pending_question(pending), today=today, corrections=corrections)
        for term, candidates in waiting.ambiguous:
            if said.metrics[0] in candidates:
                return Choice(reason="ambiguous_metric", term=term, target=ChoiceTarget(metric=said.metrics[0]))
        return None

    def _choice_by_meaning(
        self, reply: str, targets: list[ChoiceTarget | None], corrections: list[TermMapping], today: date
    ) -> int | None:
        """The option a reply names by a synonym ("net sales" for 净收入); only a bare choice counts."""
        parsed = self.parser.recognise(reply, today=today, corrections=corrections)
        if parsed.unknown_terms or parsed.times or parsed.group_dims or parsed.grain or parsed.top_n is not None:
            return None
        named: list[ChoiceTarget] = [ChoiceTarget(metric=m) for m in parsed.metrics]
        named += [ChoiceTarget(dimension=d, value=v) for d, values in parsed.filters.items() for v in values]
        named += [ChoiceTarget(time_column=c) for c in parsed.date_columns]  # "the end date"
        if len(named) != 1:
            return None
        return next((i for i, t in enumerate(targets) if t == named[0]), None)

    @staticmethod
    def _learned(pending: PreviousTurn | None, choice: Choice | None) -> LearnedTerm | None:
        if pending is None or choice is None or not choice.term or choice.reason not in LEARNABLE_REASONS:
            return None
        if not usable_term(choice.term):
            return None  # "第二", "都不要": words of the conversation, not terms of the business
        target = choice.target
        if target.metric is not None:
            maps_to = {"metric": target.metric}
        elif target.dimension is not None and target.value is not None:
            maps_to = {"dimension": target.dimension, "value": target.value}
        else:
            return None
        return LearnedTerm(term=choice.term, maps_to=maps_to, reason=choice.reason, episode_id=pending.episode_id)

    def standing_preference(self, question: str, today: date) -> Preference | None:
        """"以后默认用万元", "from now on show bar charts": a preference to keep, or None.

        A this-time condition ("这次用分") is never one: it applies to its own question only.
        """
        if not self.parser.states_lasting(question):  # most questions: no parse needed
            return None
        parsed = self.parser.recognise(question, today=today)
        if not parsed.lasting or parsed.this_time:
            return None
        unit = parsed.unit or normalize_unit(question)
        if parsed.chart is not None:
            return Preference(chart=parsed.chart, text=question.strip())  # type: ignore[arg-type]
        if unit is not None:
            return Preference(unit=unit, text=question.strip())
        return None

    def _from_fewshot(
        self, question: str, context: PlanContext, today: date, route: Route, notes: list[str]
    ) -> tuple[ParseResult, FewshotExample] | None:
        """A question the rules cannot parse alone, planned from an approved example of the same shape."""
        if not context.fewshots:
            return None
        from memtool.semantic.masking import rebind_intent

        for example in context.fewshots:
            if not example.intent:
                continue
            intent = rebind_intent(example.intent, example.question, question, self.parser, today)
            if intent is None:
                continue
            parsed = self.parser.recognise(question, today=today)
            notes.append(f"planned from approved example {example.source} (same shape: {example.question})")
            return ParseResult(parsed, intent=intent), example
        return None

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

    def _unit(self, question_unit: str | None, context: PlanContext, preference: Preference | None = None) -> tuple[str, str]:
        if preference is not None and preference.unit is not None:
            return preference.unit, "the preference stated in the question"
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
    def _chart(context: PlanContext, preference: Preference | None = None) -> tuple[str | None, str]:
        if preference is not None and preference.chart is not None:
            return preference.chart, "the preference stated in the question"
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
            names = [self.catalog.metric(m).label(lang) for m in metrics]
            labels = "、".join(names) if lang == "zh" else " or ".join(names)
            paragraphs.append(f"「{term}」可能指：{labels}。" if lang == "zh" else f"'{term}' can mean {labels}.")
        for name in metrics:
            metric = self.catalog.metric(name)
            citations.append(Citation(source=f"catalog:metric/{name}@{self.catalog.model_version}", text=metric.definition(lang)))
            paragraphs.append(metric.definition(lang))
        for name in dimensions:
            dimension = self.catalog.dimension(name)
            citations.append(Citation(source=f"catalog:dimension/{name}@{self.catalog.model_version}", text=dimension.definition(lang)))
            paragraphs.append(dimension.definition(lang))
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
            metric = self.catalog.metric(name)
            terms.update(t.lower() for t in (name, metric.zh, metric.en, *metric.synonyms_zh, *metric.synonyms_en))
        for name in dimensions:
            dimension = self.catalog.dimension(name)
            terms.update(t.lower() for t in (name, dimension.zh, dimension.en))
        relevant: list[KnowledgeItem] = []
        for item in context.knowledge:
            haystack = f"{item.key or ''} {item.text}".lower()
            if any(term in haystack for term in terms if len(term) >= 2):
                relevant.append(item)
        return relevant


def _clarification(
    need: ClarificationNeed, asked: str, choices: list[Choice] | None, usual: Mapping[str, int] | None = None
) -> Clarification:
    """The parser's clarification as the plan's: a reply that led to another question keeps the
    original one waiting, with its answers. Options that name a metric the user keeps asking for
    (``usage.frequent``, distilled from their ended sessions) come first, the most asked first."""
    targets = [t.as_json() for t in need.targets]
    options = list(need.options)
    if usual and len(targets) == len(options):
        order = sorted(range(len(options)), key=lambda i: (-usual.get(str(targets[i].get("metric") or ""), 0), i))
        options, targets = [options[i] for i in order], [targets[i] for i in order]
    return Clarification(
        question=need.question,
        term=need.term,
        options=options,
        reason=need.reason,
        targets=targets,
        pending_question=asked if choices else None,
        choices=[{"reason": c.reason, "term": c.term, "target": c.target.as_json()} for c in choices or []],
    )


def _corrections_used(parsed: ParsedQuestion) -> tuple[list[AppliedMemory], list[Citation]]:
    """The corrections the parse used: applied (those stored as memories) and cited (all of them)."""
    applied = [_applied(m) for m in parsed.corrections_used if m.memory_id is not None]
    citations = [Citation(source=m.source, text=f"{m.term} -> {m.maps_to.describe()}") for m in parsed.corrections_used]
    return applied, citations


def _pending_question(turn: PreviousTurn) -> str:
    """The question a clarification turn left waiting (the original one, across several replies)."""
    waiting = (turn.clarification or {}).get("pending_question")
    return waiting if isinstance(waiting, str) and waiting.strip() else turn.question


def _earlier_choices(turn: PreviousTurn | None) -> list[Choice]:
    made: list[Choice] = []
    for item in (turn.clarification or {}).get("choices") or [] if turn is not None else []:
        target = ChoiceTarget.from_json(item.get("target")) if isinstance(item, dict) else None
        if target is not None:
            made.append(Choice(reason=str(item.get("reason") or ""), term=item.get("term"), target=target))
    return made


def _asks_for_data(parsed: ParsedQuestion) -> bool:
    """Whether a question says more than a preference: a metric or a scope to answer."""
    return bool(
        parsed.metrics or parsed.ambiguous or parsed.unsupported or parsed.group_dims or parsed.grain or parsed.times or parsed.filters
    )


def _applied(mapping: TermMapping) -> AppliedMemory:
    return AppliedMemory(
        id=mapping.memory_id or "",
        version=mapping.version or 1,
        kind="correction",
        why=f"term {mapping.term} -> {mapping.maps_to.describe()}",
    )


def _applied_source(source: str, kind: str, why: str) -> AppliedMemory:
    """An AppliedMemory from a "memory:<id>@v<n>" source."""
    body = source.removeprefix("memory:")
    memory_id, _, version = body.partition("@v")
    return AppliedMemory(id=memory_id, version=int(version) if version.isdigit() else 1, kind=kind, why=why)


def _mentioned_dimensions(parsed: ParsedQuestion) -> list[str]:
    names: list[str] = []
    for name in [*parsed.group_dims, *parsed.filters]:
        if name not in names:
            names.append(name)
    return names
