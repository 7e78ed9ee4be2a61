"""AskFlow's Prepare, Recall and Plan: the question read, what memory holds for it, and the plan."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from memtool.analysis.selection import expected_tools
from memtool.errors import MemtoolError
from memtool.flows.ask.base import StepsBase, turns_key
from memtool.flows.ask.state import AskState, MemoryUse
from memtool.memory.commands import NewMemory
from memtool.memory.records import MemoryKind, MemoryRecord, Trigger
from memtool.memory.sessions import USAGE_KEY, summary_of, usual_metrics
from memtool.memory.slots import CHART, CURRENCY_UNIT, SESSION_TURNS
from memtool.memory.store import Partition
from memtool.planning.plan import Citation, Plan
from memtool.retrieval.recall import RecallRequest

logger = logging.getLogger("memtool.flows")


class PlanSteps(StepsBase):
    """The states before the SQL: Prepare, Recall, Plan."""

    def step_prepare(self, state: AskState) -> AskState:
        from memtool.planning.routes import classify_route

        if state.input.route:
            state.route = state.input.route
        else:
            parser = self._parser_for(state.caller.tenant)
            state.route = classify_route(state.input.question, parser=parser, today=self._today_for(state.caller.tenant))
        where = Partition(state.caller.tenant, state.caller.user)
        now = self._clock.now()
        if state.input.session_id:
            turns = self._read_slot(state, where, MemoryKind.WORKING, turns_key(state.input.session_id), now)
            if turns is not None:
                problem = SESSION_TURNS.problem(turns.value)
                if problem is not None:
                    self._ignore(state, turns, f"the session's working memory {turns.id} was ignored: {problem}")
                state.working = SESSION_TURNS.read(turns.value)
                state.session_summary = summary_of(turns.value)  # the turns folded out of the window
        usage = self._read_slot(state, where, MemoryKind.PROFILE, USAGE_KEY, now)
        if usage is not None and usual_metrics(usage.value):
            state.profile["usual_metrics"] = usual_metrics(usage.value)  # distilled from ended sessions
            state.profile_sources["usual_metrics"] = f"memory:{usage.id}@v{usage.version}"
        for slot, name in ((CURRENCY_UNIT, "unit"), (CHART, "chart")):
            record = self._read_slot(state, where, MemoryKind.PROFILE, slot.key, now)
            if record is None:
                continue
            problem = slot.problem(record.value)
            if problem is not None:
                self._ignore(state, record, f"the profile preference {record.id} was ignored: {problem}")
                continue
            state.profile[name] = slot.read(record.value) or record.content
            state.profile_sources[name] = f"memory:{record.id}@v{record.version}"
        return state

    def step_recall(self, state: AskState) -> AskState:
        text = state.input.question
        last = state.working[-1] if state.working else None
        if isinstance(last, dict) and last.get("status") == "needs_clarification":
            # A reply to a clarification answers the question left waiting: recall for both.
            waiting = (last.get("clarification") or {}).get("pending_question") or last.get("question")
            if isinstance(waiting, str) and waiting:
                text = f"{waiting} {text}"
        route = state.route or "nl2sql_query"
        tools = expected_tools(route, state.input.question)  # memories that used them rank higher (tool match)
        result = self._recall().recall(
            RecallRequest(tenant=state.caller.tenant, user=state.caller.user, text=text, route=route, tools=tools)
        )
        state.memories_recalled = [
            MemoryUse(id=m.record.id, version=m.record.version, kind=m.record.kind.value, score=round(m.score, 6), content=m.record.content)
            for m in result.memories
        ]
        state.recall_coverage = result.coverage.as_dict()
        state.recalled = [m.record.model_dump(mode="json") for m in result.memories]
        skipped = result.coverage.skipped_ids
        if skipped:
            state.note(f"skipped {_memories(len(skipped))} that could not be read: {', '.join(skipped)}")
        if self._fewshot_search is not None and state.route != "business_knowledge_qa":
            try:
                found = self._fewshot_search(state.caller.tenant, state.input.question)
            except Exception:  # examples help; their absence never fails an ask
                logger.warning("episode %s: few-shot search failed", state.episode_id, exc_info=True)
                state.note("approved examples could not be searched for this question")
                found = []
            state.fewshots = [example.model_dump(mode="json") for example in found]
        return state

    def step_plan(self, state: AskState) -> AskState:
        self._require_a_warehouse(state.caller.tenant)
        plan = self._planner(state.caller.tenant).plan(state.input.question, route=state.route, context=state.plan_context())
        if self._model is not None and plan.status in ("planned", "answered", "needs_clarification"):
            model = self._model(state.caller.tenant)
            plan.notes.append(f"semantic model: {model.label}")
            window = plan.intent.time_window if plan.intent is not None else None
            if model.catalog.as_of is not None and window is not None and window.start >= model.catalog.as_of:
                last = model.catalog.as_of - timedelta(days=1)
                plan.notes.append(f"the data set ends on {last.isoformat()}: {window.label} has no data")
        self._check_cited_dependencies(state, plan)
        if plan.route == "business_knowledge_qa" and plan.status == "answered":
            self._quote_sources(state, plan)
        state.plan = plan
        state.plan_status = plan.status if plan.status in ("needs_clarification", "remembered") else "ready"
        state.sql = plan.sql
        if plan.route != state.route and state.input.route is None:
            state.route = plan.route  # a clarification reply answers the pending question, on its route
        recalled = {m.id: m for m in state.memories_recalled}
        state.memories_used = [
            MemoryUse(
                id=a.id,
                version=a.version,
                kind=a.kind,
                score=recalled[a.id].score if a.id in recalled else 0.0,
                content=recalled[a.id].content if a.id in recalled else a.why,
            )
            for a in plan.applied
        ]
        if plan.remember is not None:
            self._remember_preference(state, plan.remember.model_dump(exclude_none=True))
        state.planned_intent = plan.intent.model_dump(mode="json") if plan.intent is not None else None
        if state.sql and state.plan_status == "ready":
            self._apply_lessons(state)
        state.planned_sql = state.sql
        return state

    def _check_cited_dependencies(self, state: AskState, plan: Plan) -> None:
        """A cited memory or model definition whose dependency moved on or is gone is cited as
        stale, and the notes say what changed (docs/knowledge.md, Dependency chains)."""
        cited = {c.source: c for c in plan.citations}
        self._check_cited_definitions(state, plan)
        for recalled in state.recalled:
            citation = cited.get(f"memory:{recalled.get('id')}@v{recalled.get('version')}")
            sources = (recalled.get("provenance") or {}).get("sources") or []
            if citation is None or not any(isinstance(s, dict) and s.get("depends_on") for s in sources):
                continue
            try:
                states = self._memories.dependencies(MemoryRecord.model_validate(recalled))
            except Exception:  # a check that cannot run is said, never fatal
                logger.warning("episode %s: dependencies of %s not checked", state.episode_id, recalled.get("id"), exc_info=True)
                plan.notes.append(f"the dependencies of {citation.source} could not be checked")
                continue
            citation.depends_on = [d.describe() for d in states]
            moved = [d for d in states if d.stale]
            if moved:
                citation.stale = True
                subject = recalled.get("key") or citation.source
                plan.notes.append(f"{subject} depends on " + "; and on ".join(d.describe() for d in moved) + " (stale)")

    def _check_cited_definitions(self, state: AskState, plan: Plan) -> None:
        """``catalog:metric/<name>@…`` citations: the metric's (and its dimensions') declared sources."""
        if self._model is None:
            return
        catalog = None
        for citation in plan.citations:
            if not citation.source.startswith("catalog:metric/"):
                continue
            catalog = catalog or self._model(state.caller.tenant).catalog
            name = citation.source[len("catalog:metric/") :].split("@", 1)[0]
            try:
                metric = catalog.metric(name)
            except KeyError:
                continue
            intent = plan.intent
            used = [*intent.dimensions, *(f.dimension for f in intent.filters)] if intent is not None else []
            definitions = [(metric.en, metric.depends_on)]
            known = {d.name: d for d in catalog.dimensions}
            definitions += [(known[n].en, known[n].depends_on) for n in dict.fromkeys(used) if n in known]
            for label, depends_on in definitions:
                if not depends_on:
                    continue
                try:
                    states = self._memories.source_dependencies(state.caller.tenant, [(d.source, d.version) for d in depends_on])
                except Exception:  # a check that cannot run is said, never fatal
                    logger.warning("episode %s: dependencies of %s not checked", state.episode_id, citation.source, exc_info=True)
                    plan.notes.append(f"the dependencies of {label}'s definition could not be checked")
                    continue
                citation.depends_on += [d.describe() for d in states]
                moved = [d for d in states if d.stale]
                if moved:
                    citation.stale = True
                    plan.notes.append(f"{label}'s definition depends on " + "; and on ".join(d.describe() for d in moved) + " (stale)")

    def _quote_sources(self, state: AskState, plan: Plan) -> None:
        """A definition answer quotes the sources its cited definitions rest on, each at its newest
        version (docs/knowledge.md): the lines that name the metric, else the text's start."""
        if self._sources is None or self._model is None:
            return
        catalog = self._model(state.caller.tenant).catalog
        known = {m.name: m for m in catalog.metrics}
        quoted: set[str] = set()
        for citation in list(plan.citations):
            if not citation.source.startswith("catalog:metric/"):
                continue
            metric = known.get(citation.source[len("catalog:metric/") :].split("@", 1)[0])
            for dependency in metric.depends_on if metric is not None else ():
                if dependency.source in quoted:
                    continue
                quoted.add(dependency.source)
                try:
                    source, text = self._sources().text_named(self._who(state), dependency.source)
                except Exception:  # a quote helps; a source that cannot be read is said, never fatal
                    logger.warning("episode %s: source %s not quoted", state.episode_id, dependency.source, exc_info=True)
                    plan.notes.append(f"{dependency.source} could not be quoted")
                    continue
                excerpt = source_excerpt(text, metric.terms if metric is not None else ())
                plan.citations.append(Citation(source=source.cite(), text=excerpt, stale=False))
                label = f"{source.name} v{source.version}"
                plan.answer = (plan.answer or "") + f"\n\n{label}: “{excerpt}” [{len(plan.citations)}]"

    def _apply_lessons(self, state: AskState) -> None:
        """Verified lessons from earlier diagnoses, applied before the SQL is guarded and run."""
        if self._diagnosis is None or self._compiler is None:
            return
        from memtool.diagnosis.lessons import apply_lessons

        try:
            lessons = self._diagnosis().lessons.active(state.caller.tenant, state.caller.user, self._clock.now())
            if not lessons:
                return
            compiler = self._compiler(state.caller.tenant)
            outcome = apply_lessons(state.plan.intent if state.plan is not None else None, state.sql, lessons, compiler)
        except Exception:  # a lesson helps; failing to apply one never fails the ask
            logger.warning("episode %s: lessons could not be applied", state.episode_id, exc_info=True)
            state.note("earlier lessons could not be applied to this question")
            return
        if not outcome.applied:
            return
        state.sql = outcome.sql
        if outcome.intent is not None and state.plan is not None:
            state.plan.intent = outcome.intent
        state.lessons = outcome.lessons_value()
        for lesson, repairs in outcome.applied:
            state.note(f"applied lesson {lesson.cite}: {'; '.join(r.describe() for r in repairs)} (learned: {lesson.root_cause})")
            # The catalog's definition is cited too; the lesson that overrides it for this user is.
            if state.plan is not None:
                state.plan.citations.append(Citation(source=lesson.cite, text=lesson.text))
            state.memories_used.append(
                MemoryUse(id=lesson.memory_id, version=lesson.version, kind=MemoryKind.CAUSAL.value, score=1.0, content=lesson.text)
            )

    def _require_a_warehouse(self, tenant: str) -> None:
        """A tenant whose model has no warehouse here is told what to configure before anything is
        planned (WarehouseMissing), never planned and run on another warehouse; a warehouse that is
        merely down is Execute's to report."""
        from memtool.errors import WarehouseMissing

        try:
            self._warehouse_factory(tenant)
        except WarehouseMissing:
            raise
        except Exception:  # noqa: BLE001 - unavailable, a bad secret: Execute says which
            return

    def _remember_preference(self, state: AskState, preference: dict[str, Any]) -> None:
        """A standing preference stated in chat supersedes the profile slot (its history stays)."""
        slot, field_name = (CURRENCY_UNIT, "unit") if "unit" in preference else (CHART, "chart")
        try:
            result = self._memories.remember(
                self._who(state),
                NewMemory(
                    kind=MemoryKind.PROFILE,
                    key=slot.key,
                    content=preference["text"],
                    source_text=preference["text"],
                    value={field_name: preference[field_name]},
                    trigger=Trigger.INTERACTION,
                    episode_id=state.episode_id,
                ),
            )
        except MemtoolError as exc:
            state.note(f"the preference could not be remembered: {exc.message}")
            return
        state.profile[field_name] = preference[field_name]
        state.profile_sources[field_name] = f"memory:{result.record.id}@v{result.record.version}"
        if not result.unchanged:
            replaced = f"; it replaces version {result.superseded.version}" if result.superseded is not None else ""
            state.note(f"remembered your default {field_name}: {preference[field_name]}{replaced}")


def _memories(n: int) -> str:
    return f"{n} memory" if n == 1 else f"{n} memories"


def source_excerpt(text: str, terms: tuple[str, ...], limit: int = 400) -> str:
    """The lines of ``text`` that name one of ``terms`` (at most ``limit`` characters), else its start."""
    lowered = [t.lower() for t in terms if t]
    lines = [line.strip() for line in text.splitlines() if line.strip() and any(t in line.lower() for t in lowered)]
    excerpt = " / ".join(lines) if lines else " ".join(text.split())
    return excerpt if len(excerpt) <= limit else excerpt[: limit - 1] + "…"
