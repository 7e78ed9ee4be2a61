"""AskFlow's CacheLookup and CacheStore: the SQL cache before planning and after an answer."""

from __future__ import annotations

import logging

from memtool.flows.ask.base import StepsBase
from memtool.flows.ask.state import AskState, CacheReport, MemoryUse
from memtool.planning.plan import Plan

logger = logging.getLogger("memtool.flows")


class CacheSteps(StepsBase):
    """CacheLookup (a question asked before skips Recall and Plan) and CacheStore."""

    def step_cachelookup(self, state: AskState) -> AskState:
        """A question asked before: its cached SQL (run again by Execute), skipping Recall and Plan."""
        state.cache_status = "miss"
        if self._cache is None:
            state.cache = CacheReport(hit=False, reason="disabled")
            return state
        previous = state.working[-1] if state.working else None
        try:
            outcome = self._cache().lookup(
                state.caller.tenant,
                state.caller.user,
                state.input.question,
                state.route or "",
                profile_unit=state.profile.get("unit"),
                conditions=dict(state.input.conditions),
                previous_turn=previous if isinstance(previous, dict) else None,
            )
        except Exception:  # a cache that fails is a miss; the question is planned
            logger.warning("episode %s: the SQL cache lookup failed", state.episode_id, exc_info=True)
            state.cache = CacheReport(hit=False, reason="error")
            return state
        state.cache = CacheReport.model_validate(outcome.public())
        if not outcome.hit:
            return state
        state.cache_status = "hit"
        state.cache_entry = {"id": outcome.entry_id, "owner": outcome.entry_owner}
        state.sql = outcome.sql
        state.planned_sql = outcome.sql
        state.lessons = list(outcome.lessons)
        state.plan_status = "ready"
        how = "the same question" if outcome.reason == "exact" else "a question of the same shape, with this question's values bound in"
        state.plan = Plan.model_validate(
            {
                "status": "planned",
                "route": state.route,
                "intent": outcome.intent,
                "sql": outcome.sql,
                "planner": "cache",
                "notes": [*outcome.notes, f"SQL from the cache ({how}; {state.cache.entry}); it ran again on the warehouse"],
            }
        )
        state.memories_used = [
            MemoryUse(id=memory_id, version=version, kind=kind, score=1.0, content="shaped the cached SQL")
            for memory_id, version, kind in outcome.memories
        ]
        return state

    def step_cachestore(self, state: AskState) -> AskState:
        """Keep the SQL of an answered question for the next time it is asked (never a failure's)."""
        if self._cache is None or state.cache_status == "hit" or getattr(state, "error", None) or state.guard_status != "passed":
            return state
        plan = state.plan
        if plan is None or plan.carried_over or plan.resolved_question or state.repaired is not None or not state.planned_sql:
            return state  # a follow-up, a reply or a repair means more than its own words: not cached
        if plan.remember is not None or state.result is None or not state.result.has_data() or state.data_status == "no_data":
            return state  # a stated preference is not replayed; an empty answer (or a period without data) is not kept
        from memtool.semantic.intent import Intent

        try:
            record = self._cache().store(
                state.caller.tenant,
                state.caller.user,
                state.input.question,
                state.route or "",
                planned_intent=Intent.model_validate(state.planned_intent) if state.planned_intent else None,
                sql=state.planned_sql,
                lessons=state.lessons,
                used=[(m.id, m.version, m.kind) for m in state.memories_used],
                notes=list(plan.notes),
                profile_unit=state.profile.get("unit"),
                conditions=dict(state.input.conditions),
                planner=plan.planner,
                episode_id=state.episode_id,
            )
        except Exception:  # the answer stands without its cache entry
            logger.warning("episode %s: the SQL could not be cached", state.episode_id, exc_info=True)
            return state
        if record is not None and state.cache is not None:
            # "stored" is an extra of the report: only a kept entry has it
            state.cache = state.cache.model_copy(update={"stored": f"memory:{record.id}@v{record.version}"})
        return state
