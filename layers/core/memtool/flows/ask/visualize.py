"""AskFlow's VisualizeKpi and Visualize: a chart for the answer."""

from __future__ import annotations

from typing import Any, cast

from memtool.flows.ask.base import StepsBase, crash_reason, is_zh, logger
from memtool.flows.ask.state import AnalysisReport, AskState, QueryRows
from memtool.memory.records import MemoryKind
from memtool.memory.slots import chart_for_key
from memtool.memory.store import Partition
from memtool.planning.plan import Citation, Plan


class VisualizeSteps(StepsBase):
    """VisualizeKpi and Visualize: the chart, from the result's shape."""

    def step_visualizekpi(self, state: AskState) -> AskState:
        """kpi_lookup: one number is a KPI card at once, without the chart candidate search;
        anything else (or another chart asked for) gets the full recommendation."""
        from memtool.semantic.periods import partial_buckets
        from memtool.viz.charts import kpi_card

        result = state.result or QueryRows()
        if state.input.conditions.get("chart") not in (None, "kpi_card"):
            return self._visualize_result(state)
        intent = state.plan.intent if state.plan is not None else None
        buckets = partial_buckets(intent, self._today_for(state.caller.tenant)) if intent else []
        card = kpi_card(
            result.columns, result.rows, hints=_shape_hints(state.plan, state.input.question), partial=[b.label for b in buckets]
        )
        if card is None:
            return self._visualize_result(state)
        state.chart = _chart_state(card)
        return state

    def step_visualize(self, state: AskState) -> AskState:
        crashed = getattr(state, "analysis_error", None)
        if (
            state.route == "deep_analysis_workflow"
            and crashed is not None
            and (state.analysis is None or state.analysis.status == "planned")
        ):
            # Summarize itself failed: the answer still says that no analysis result is there.
            state.note("the analyses could not be summarised: " + crash_reason(crashed))
            state.analysis = AnalysisReport(status="failed")
        if state.route == "deep_analysis_workflow" and state.analysis is not None and state.analysis.result is not None:
            return self._visualize_analysis(state)
        return self._visualize_result(state)

    def _visualize_analysis(self, state: AskState) -> AskState:
        """The chart of the first analysis that ran (its PNG from the sandbox rides along)."""
        from memtool.viz.analysis_charts import analysis_chart

        first = state.analysis.first_success() if state.analysis is not None else None
        result = state.result or QueryRows()
        columns = list(result.columns)
        history: list[tuple[str, float]] = []
        if columns and columns[0] in ("day", "week", "month", "quarter", "year") and len(columns) == 2:
            history = [(str(r[0])[:7], r[-1]) for r in result.rows if isinstance(r[-1], (int, float))]
        built = (
            analysis_chart(first["kind"], first.get("result") or {}, lang="zh" if is_zh(state.input.question) else "en", history=history)
            if first
            else None
        )
        if built is None or first is None:
            return self._visualize_result(state)
        if state.input.conditions.get("chart"):
            state.note(
                f"the chart is the {first['kind']} analysis's; "
                f"the chart condition ({state.input.conditions['chart']}) applies to data answers"
            )
        state.chart = {
            "type": built["type"],
            "confidence": 1.0,
            "checkpoint_status": "auto_pass",
            "candidates": [],
            "option": built["option"],
            "partial_buckets": [],
            "of": f"analysis:{first['kind']}",
        }
        return state

    def _visualize_result(self, state: AskState) -> AskState:
        from memtool.semantic.periods import partial_buckets, partial_note
        from memtool.viz.charts import recommend_chart

        result = state.result or QueryRows()
        intent = state.plan.intent if state.plan is not None else None
        buckets = partial_buckets(intent, self._today_for(state.caller.tenant)) if intent else []
        condition = state.input.conditions.get("chart")
        hints = _shape_hints(state.plan, state.input.question)
        partial = [b.label for b in buckets]
        preferred = condition or state.profile.get("chart")
        chart = recommend_chart(result.columns, result.rows, hints=hints, preferred=preferred, partial=partial)
        choice = None if condition else self._chart_choice(state, str(chart.shape.kind))
        if choice is not None:  # the user's chart for this shape of data beats their general preference
            chosen, source = choice
            if chosen != chart.chart_type:
                chart = recommend_chart(result.columns, result.rows, hints=hints, preferred=chosen, partial=partial)
            if chart.chart_type == chosen:
                state.note(f"the chart is {chosen}: your choice for a {chart.shape.kind} ({source})")
                if state.plan is not None:
                    state.plan.citations.append(Citation(source=source, text=f"chart for a {chart.shape.kind}: {chosen}"))
        note = partial_note(buckets)
        if note:
            state.note(note)
        state.chart = _chart_state(chart)
        # The rules are not sure: below their confidence floor (0.3), or no chart rule fits numbers
        # they found (a table of three dimensions and a measure). With no data there is nothing to draw.
        no_rule = chart.chart_type == "table" and chart.shape.kind == "table" and bool(chart.shape.measures)
        unsure = chart.checkpoint_status == "blocked" or no_rule
        if unsure and not condition and chart.shape.kind != "empty":
            self._llm_chart(state, str(chart.shape.kind))
        return state

    def _llm_chart(self, state: AskState, kind: str) -> None:
        """Below the rules' confidence floor: the Bedrock planner's ECharts option, when it passes
        the whitelist (memtool.viz.llm_chart); the rules' chart stays otherwise, with a note."""
        from memtool.viz.llm_chart import ChartWriter, llm_fallback

        planner = self._planner(state.caller.tenant)
        if not hasattr(planner, "write_chart_option"):
            return  # the rule planner has no model to ask
        result = state.result or QueryRows()
        fallback = llm_fallback(cast(ChartWriter, planner), state.input.question, result.columns, result.rows, kind)
        state.note(fallback.note)
        if fallback.used and state.chart is not None:
            drawn = {"type": fallback.chart_type, "option": fallback.option, "source": "llm", "checkpoint_status": "needs_review"}
            state.chart = {**state.chart, **drawn}


    def _chart_choice(self, state: AskState, kind: str) -> tuple[str, str] | None:
        """The chart the caller chose for ``kind`` (display.chart_for.<kind>) and its citation, when
        it is a chart that can draw that kind; a stored value is read as hostile input."""
        from memtool.viz.charts import fits_kind

        try:
            mine = Partition(state.caller.tenant, state.caller.user)
            record = self._store.get_slot(mine, MemoryKind.PROFILE, chart_for_key(kind), self._clock.now())
        except Exception:  # noqa: BLE001 - a preference helps; a store that cannot read it never fails the answer
            logger.warning("episode %s: the chart choice for %s was not read", state.episode_id, kind, exc_info=True)
            return None
        if record is None:
            return None
        chosen = record.value.get("chart") if isinstance(record.value, dict) else None
        if not isinstance(chosen, str) or not fits_kind(chosen, kind):
            state.note(f"the chart choice {record.id} was ignored: it names no chart that can draw a {kind}")
            return None
        return chosen, f"memory:{record.id}@v{record.version}"


def _chart_state(chart: Any) -> dict[str, Any]:
    return {
        "shape": str(chart.shape.kind),
        "type": chart.chart_type,
        "confidence": chart.confidence,
        "checkpoint_status": chart.checkpoint_status,
        "candidates": [{"type": c.chart_type, "confidence": c.confidence, "reason": c.reason} for c in chart.candidates],
        "option": chart.option,
        "partial_buckets": list(chart.partial_buckets),
    }


def _shape_hints(plan: Plan | None, question: str) -> Any:
    from memtool.viz.shape import ShapeHints

    return ShapeHints.from_intent(plan.intent if plan is not None else None, question)
