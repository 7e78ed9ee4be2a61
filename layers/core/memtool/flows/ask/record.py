"""AskFlow's Record and RecordFailure: the episode, what was learned, the session's turn, and a failure queued for diagnosis."""

from __future__ import annotations

import json
import logging
import random
from typing import Any

from memtool.analysis.selection import CHART_TOOL, SQL_TOOL
from memtool.errors import MemtoolError, NotFound, ValidationFailed, VersionConflict
from memtool.feedback.reward import environment_reward
from memtool.flows.ask.base import StepsBase, intent_json, is_zh, turns_key
from memtool.flows.ask.state import AskState, MemoryUse, answer_error
from memtool.memory.commands import MemoryEdit, NewMemory
from memtool.memory.records import MemoryKind, MemoryRecord, SourceRef, Trigger
from memtool.memory.sessions import fold, summary_of
from memtool.memory.slots import SESSION_TURNS, correction_key, episode_key
from memtool.memory.store import TENANT_OWNER, Partition

# Two asks in one session race on the working-memory slot: re-read and retry this many times,
# with a short jittered backoff, before giving up on keeping the turn (never on the answer).
TURN_WRITE_ATTEMPTS = 5
TURN_WRITE_BACKOFF_SECONDS = 0.02

logger = logging.getLogger("memtool.flows")


class RecordSteps(StepsBase):
    """Record and RecordFailure: what the ask leaves in memory."""

    def step_record(self, state: AskState) -> AskState:
        """Keep what happened: the episode, the session's turn, the failure's credit and its diagnosis.

        Idempotent by execution: Step Functions retries a Record task with the same state, and a
        retry finds the episode it wrote (unchanged: no second version), the turn already in the
        session, the credit already counted for this episode, and the diagnosis already queued.
        """
        state.status = _outcome(state)
        return self._record(state)

    def step_recordfailure(self, state: AskState) -> AskState:
        state.status = "failed"
        raw = getattr(state, "error", None)
        public = answer_error(state)
        if public is not None:
            # AskFailed fails the execution with $.error.Error and $.error.Cause: hand it the public
            # error, so no stack trace travels on. Operators find the original in this log line.
            logger.warning(
                "AskFlow episode %s failed at %s: %s", state.episode_id, public.step, json.dumps(raw, ensure_ascii=False, default=str)
            )
            state.error = {"Error": public.error, "Cause": public.model_dump_json()}  # type: ignore[attr-defined]
        return self._record(state)

    def _record(self, state: AskState) -> AskState:
        """Record's writes, each one idempotent for a retried task (see ``step_record``)."""
        self._forget_failed_entry(state)  # forgetting twice forgets nothing more
        self._remember_learned(state)  # the same correction again is unchanged
        episode, first_record = self._remember_episode(state)
        self._remember_turn(state)  # a turn already in the session is not appended again
        self._credit_failure(state, episode)  # credit counts an episode once (credit_after)
        self._queue_diagnosis(state, episode, send=first_record)  # a retry found its episode: the first attempt queued it
        return state

    def _forget_failed_entry(self, state: AskState) -> None:
        """A cached SQL that failed is never served again."""
        if state.status == "failed" and state.cache_status == "hit" and state.cache_entry and self._cache is not None:
            self._cache().forget(state.caller.tenant, str(state.cache_entry.get("owner")), str(state.cache_entry.get("id")))

    def _queue_diagnosis(self, state: AskState, episode: MemoryRecord | None, *, send: bool = True) -> None:
        """A failed SQL answer the flow could not repair is diagnosed off the request path
        (``send=False``: a retried Record, whose first attempt sent the event, only says so)."""
        if state.status != "failed" or state.failure is None or state.repaired is not None or episode is None or self._diagnosis is None:
            return
        from memtool.diagnosis.requests import DiagnoseRequest

        queued = not send or self._diagnosis().enqueue(
            DiagnoseRequest(
                tenant=state.caller.tenant,
                user=state.caller.user,
                episode_id=state.episode_id,
                reason="failed_episode",
                request_id=f"{state.episode_id}:failed",
            )
        )
        if queued:
            state.note("the failure is queued for a diagnosis; see GET /episodes/" + state.episode_id)

    def _remember_episode(self, state: AskState) -> tuple[MemoryRecord, bool]:
        """The episode, and whether this call recorded it (False: a retry found it as it is)."""
        public = answer_error(state)
        error = public.model_dump() if public is not None else None
        plan = state.plan
        value = {
            "route": state.route,
            "sql": state.sql,
            "intent": intent_json(plan),
            "asked": (plan.resolved_question if plan else None) or state.input.question,  # a reply answers the pending question
            "clarified": list(plan.clarified) if plan else [],  # the kinds of clarification choices it took
            "outcome": state.status,
            "row_count": state.result.row_count if state.result is not None else None,
            # rows that hold nothing but NULLs (a total over no data) answer nothing either
            "empty": state.result is not None
            and bool(state.result.rows)
            and all(cell is None for row in state.result.rows for cell in row[-1:]),
            "error": error,
            "plan_status": state.plan_status,
            "planner": plan.planner if plan else None,
            "carried_over": list(plan.carried_over) if plan else [],
            "guard": state.guard.model_dump(mode="json") if state.guard is not None else None,
            **_chart_fields(state.chart),
            # Recalled and applied kept apart: feedback credits only what shaped the plan.
            "memories_recalled": [{"id": m.id, "version": m.version, "kind": m.kind} for m in state.memories_recalled],
            "memories_used": [{"id": m.id, "version": m.version, "kind": m.kind} for m in state.memories_used],
            "tools": tools_of(state),  # what recall's tool match compares with the tools an ask will use
            "trajectory": [{"step": step, "ms": ms} for step, ms in state.timings.items()]
            + [{"step": "tool", **call} for call in state.tool_calls],
            "lessons": state.lessons,  # verified lessons applied: a later diagnosis starts from the query as it ran
            "cache": state.cache.model_dump(mode="json") if state.cache is not None else None,
            "failure": state.failure,
            "repaired": state.repaired,
            "diagnosis": None
            if state.diagnosis is None
            else {
                "verified": state.diagnosis.verified,
                "cause": state.diagnosis.cause,
                "hypotheses": len(state.diagnosis.hypotheses),
                "executions": state.diagnosis.executions,
            },
        }
        sources = [SourceRef(id=m.id, version=m.version) for m in state.memories_used]

        asked = str(value["asked"])  # a reply to a clarification is an episode of the question it answered

        def episode(value: dict[str, Any], sources: list[SourceRef]) -> NewMemory:
            return NewMemory(
                kind=MemoryKind.EPISODIC,
                key=episode_key(state.episode_id),
                content=asked,
                source_text=state.input.question,
                value=value,
                session_id=state.input.session_id,
                trigger=Trigger.INTERACTION,
                episode_id=state.episode_id,
                sources=sources,
            )

        try:
            result = self._memories.remember(self._who(state), episode(value, sources), system=True)
        except ValidationFailed as exc:  # e.g. an oversize SQL: keep the episode without it
            logger.warning("episode %s could not be kept in full: %s", state.episode_id, exc.message)
            result = self._memories.remember(self._who(state), episode({**value, "sql": None, "trajectory": []}, []), system=True)
        return result.record, not result.unchanged

    def _remember_learned(self, state: AskState) -> None:
        """A clarification reply that chose a meaning for a term: the user's correction from now on."""
        learned = state.plan.learned if state.plan is not None else None
        if learned is None:
            return
        term, maps_to = learned.term, learned.maps_to
        target = maps_to.get("metric") or f"{maps_to.get('dimension')} = {maps_to.get('value')}"
        try:
            result = self._memories.remember(
                self._who(state),
                NewMemory(
                    kind=MemoryKind.CORRECTION,
                    key=correction_key(term),
                    content=f"「{term}」指 {target}" if is_zh(term) else f"'{term}' means {target}",
                    source_text=state.input.question,
                    value={"term": term, "maps_to": maps_to},
                    confidence=self._settings.clarification_confidence,
                    trigger=Trigger.CLARIFICATION,
                    episode_id=state.episode_id,
                    sources=[SourceRef(id=learned.episode_id)] if learned.episode_id else [],
                ),
            )
        except MemtoolError as exc:
            logger.warning("episode %s could not keep what %r means: %s", state.episode_id, term, exc.message)
            state.note(f"the meaning of {term!r} was used for this question but could not be remembered: {exc.message}")
            return
        state.note(f"remembered: {term} -> {target} (memory:{result.record.id}@v{result.record.version})")
        # The choice shaped this answer: feedback on it credits (or blames) the correction it made.
        state.memories_used.append(
            MemoryUse(
                id=result.record.id,
                version=result.record.version,
                kind=MemoryKind.CORRECTION.value,
                score=1.0,
                content=result.record.content,
            )
        )

    def _credit_failure(self, state: AskState, episode: MemoryRecord | None) -> None:
        """A failed episode carries negative credit, and so do the memories it applied (a few-shot's
        fail_count is its failures); feedback on the episode later replaces this reward."""
        if state.status != "failed":
            return
        from memtool.memory.credit import credit_after

        reward = environment_reward("failed")
        now = self._clock.now()
        targets: list[tuple[Partition, str]] = []
        if episode is not None:
            targets.append((Partition(episode.tenant, episode.owner), episode.id))
        for used in state.memories_used:
            for owner in (state.caller.user, TENANT_OWNER):
                targets.append((Partition(state.caller.tenant, owner), used.id))
        for where, memory_id in targets:
            try:
                self._store.update_credit(
                    where,
                    memory_id,
                    lambda record: credit_after(
                        record.credit, episode_id=state.episode_id, reward=reward, alpha=self._settings.credit_ema_alpha, now=now
                    ),
                    now,
                    now,
                )
            except NotFound:
                continue  # the memory lives in the other partition (or was forgotten since)
            except Exception:  # credit is learning; the answer stands regardless
                logger.warning("episode %s could not credit memory %s", state.episode_id, memory_id, exc_info=True)

    def _remember_turn(self, state: AskState) -> None:
        """Append this turn to the session's working memory, on top of whatever is there now.

        The slot is re-read here, not taken from Prepare: another ask of the same session may
        have written since. A conflicting write is retried on the latest version; when every
        attempt conflicts, the turn is not kept and the answer says so, but the ask still answers.
        """
        if not state.input.session_id:
            return
        key = turns_key(state.input.session_id)
        where = Partition(state.caller.tenant, state.caller.user)
        plan = state.plan
        turn = {
            "episode_id": state.episode_id,
            "question": state.input.question,
            "route": state.route,
            "status": state.status,
            "sql": state.sql,
            "intent": intent_json(plan) if state.status == "answered" else None,
            "clarification": plan.clarification.model_dump(mode="json")
            if plan and plan.clarification and state.status == "needs_clarification"
            else None,
        }
        displaced: list[dict[str, Any]] = []  # turns a racing first write replaced: put them back
        for attempt in range(TURN_WRITE_ATTEMPTS):
            if attempt:
                self._sleep(random.uniform(0, TURN_WRITE_BACKOFF_SECONDS * 2**attempt))
            try:
                current = self._store.get_slot(where, MemoryKind.WORKING, key, self._clock.now())
            except ValidationFailed as exc:  # undecodable: it cannot be appended to
                logger.warning("episode %s could not read working memory %s: %s", state.episode_id, key, exc.message)
                state.note(f"this turn was not kept in the session's working memory: {exc.message}")
                return
            latest = SESSION_TURNS.read(current.value) if current is not None else []
            if not displaced and any(_turn_id(kept) == _turn_id(turn) for kept in latest):
                return  # a retried Record: this turn is in the session already
            value, content = self._window(current, _merge_turns(latest, displaced, turn), state.input.session_id)
            turns = value["turns"]
            try:
                if current is None:
                    result = self._memories.remember(
                        self._who(state),
                        NewMemory(
                            kind=MemoryKind.WORKING,
                            key=key,
                            content=content,
                            value=value,
                            session_id=state.input.session_id,
                            trigger=Trigger.INTERACTION,
                            episode_id=state.episode_id,
                        ),
                        system=True,  # a session's turns are the ask flow's: /memories refuses them to callers
                    )
                    if result.superseded is not None and not result.superseded.is_expired(self._clock.now()):
                        # Another ask created the slot between our read and our write, and ours
                        # replaced it: carry its turns into the next attempt.
                        kept = {_turn_id(t) for t in [*turns, *displaced]}
                        lost = [t for t in SESSION_TURNS.read(result.superseded.value) if _turn_id(t) not in kept]
                        if lost:
                            displaced.extend(lost)
                            continue
                else:
                    self._memories.revise(
                        self._who(state),
                        current.id,
                        MemoryEdit(expected_version=current.version, content=content, value=value),
                        system=True,
                    )
                return
            except VersionConflict as exc:
                logger.info("episode %s: working memory %s moved on (attempt %d): %s", state.episode_id, key, attempt + 1, exc.message)
                continue
            except NotFound:  # forgotten between our read and our write: start the slot afresh
                continue
            except MemtoolError as exc:  # refused (or unreadable on write): the answer stands regardless
                logger.warning("episode %s could not keep its turn in %s: %s", state.episode_id, key, exc.message)
                state.note(f"this turn was not kept in the session's working memory: {exc.message}")
                return
            except Exception as exc:  # e.g. a transaction cancelled by a concurrent one
                # The turn is a convenience for the next question; the answer is what was asked for.
                logger.warning(
                    "episode %s: writing working memory %s failed (attempt %d)", state.episode_id, key, attempt + 1, exc_info=True
                )
                if attempt + 1 == TURN_WRITE_ATTEMPTS:
                    state.note(f"this turn was not kept in the session's working memory: the store failed ({type(exc).__name__})")
                    return
                continue
        logger.warning(
            "episode %s gave up keeping its turn in %s after %d conflicting attempts", state.episode_id, key, TURN_WRITE_ATTEMPTS
        )
        state.note("this turn was not kept in the session's working memory: other asks in this session kept writing it at the same time")

    def _window(self, current: MemoryRecord | None, merged: list[dict[str, Any]], session_id: str) -> tuple[dict[str, Any], str]:
        """The session's value: its newest turns (MEMTOOL_SESSION_TURNS, within the size limit), the
        older ones folded into its running summary (memory.sessions); and the memory's content."""
        turns = self._fit(merged[-self._settings.session_turns :])
        summary = summary_of(current.value) if current is not None else None
        dropped = merged[: len(merged) - len(turns)]
        if dropped:
            summary = fold(summary, dropped)
        value: dict[str, Any] = {"turns": turns, **({"summary": summary} if summary else {})}
        return value, f"{len(turns)} recent turns of session {session_id}" + (f"; {summary['text']}" if summary else "")

    def _fit(self, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The newest turns that fit the size limit of one memory value (the oldest go first)."""
        limit = self._settings.max_content_bytes
        kept = list(turns)
        while len(kept) > 1 and _size({"turns": kept}) > limit:
            kept.pop(0)
        if kept and _size({"turns": kept}) > limit:  # one turn alone is too big: drop its SQL
            kept = [{**kept[0], "sql": None}]
        return kept


def _merge_turns(latest: list[dict[str, Any]], displaced: list[dict[str, Any]], turn: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored turns, the ones a racing write displaced, then this one; each once, newest kept."""
    seen = {_turn_id(turn)}
    merged: list[dict[str, Any]] = []
    for item in [*latest, *displaced]:
        if _turn_id(item) in seen:
            continue
        seen.add(_turn_id(item))
        merged.append(item)
    return [*merged, turn]


def _turn_id(turn: dict[str, Any]) -> str:
    """A turn is its episode; a turn without one (written by hand) is its own content."""
    episode = turn.get("episode_id")
    return str(episode) if episode else json.dumps(turn, sort_keys=True, ensure_ascii=False, default=str)


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def _outcome(state: AskState) -> str:
    if getattr(state, "error", None) or state.guard_status == "blocked":
        return "failed"
    if state.data_status == "no_data":
        return "no_data"
    if (
        state.route == "deep_analysis_workflow"
        and state.result is not None
        and (state.analysis is None or state.analysis.status != "complete")
    ):
        return "partial"  # the data is there; an analysis it asked for did not run (the notes say which)
    if state.plan_status == "needs_clarification":
        return "needs_clarification"
    if state.plan_status == "remembered":
        return "remembered"
    return "answered"


def tools_of(state: AskState) -> list[str]:
    """The tools this ask used: SQL execution (it ran a query), the chart, each analysis tool called."""
    used = [SQL_TOOL] if state.result is not None else []
    if state.chart:
        used.append(CHART_TOOL)
    used.extend(str(call["tool"]) for call in state.tool_calls if isinstance(call, dict) and call.get("tool"))
    return list(dict.fromkeys(used))


def _chart_fields(chart: dict[str, Any] | None) -> dict[str, Any]:
    """The episode's chart: its type, its shape of data (POST /charts/choice keeps a chart per
    shape) and the candidates it was chosen among."""
    chart = chart or {}
    return {
        "chart": chart.get("type"),
        "chart_shape": chart.get("shape"),
        "chart_candidates": [c.get("type") for c in chart.get("candidates") or []],
    }
