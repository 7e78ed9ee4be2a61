"""AskFlow's PlanAnalyses and Summarize: the deep-analysis route's tables and scripts, and the answer's sentences."""

from __future__ import annotations

import logging
from datetime import date
from typing import Any, Literal

from memtool.errors import MemtoolError
from memtool.flows.ask.base import StepsBase, crash_reason, intent_json, is_zh
from memtool.flows.ask.state import AnalysisReport, AskState, QueryRows
from memtool.sql.warehouse import WarehouseError
from memtool.tools.executor import echo_arguments

# An analysis's drill-down table must be complete: above this many rows the analysis refuses.
ANALYSIS_ROW_CAP = 5000

logger = logging.getLogger("memtool.flows")


class AnalyzeSteps(StepsBase):
    """The deep-analysis route's PlanAnalyses, and Summarize for every route."""

    def step_plananalyses(self, state: AskState) -> AskState:
        """The analyses the question asks for, each with its table and the runner its size chooses.

        Drill-down tables (attribution's breakdown, clustering's profiles) are compiled from the
        intent by the semantic layer, guarded and run here; the Map state then runs each task.
        An analysis that cannot be prepared is listed under ``analysis.skipped`` with the reason.
        """
        from memtool.analysis.inputs import analysis_windows
        from memtool.analysis.selection import AnalysisTask, choose_analyses, runner_for, tool_for

        state.analysis_tasks = []
        kinds, words = choose_analyses(state.input.question)
        if not kinds:
            kinds, words = ["anomaly"], [""]
            state.note("no analysis was named: the series was scanned for anomalies")
        intent = state.plan.intent if state.plan is not None else None
        today = self._today_for(state.caller.tenant)
        recognised = self._planner(state.caller.tenant).rules.parser.recognise(state.input.question, today=today)
        windows = analysis_windows(recognised.times if recognised is not None else [], today)
        named = list(recognised.metrics) if recognised is not None else []
        skipped: list[dict[str, Any]] = []
        queries: list[str] = []
        charts_kept = 0
        for kind, why in zip(kinds, words, strict=True):
            try:
                tables = self._analysis_tables(state, kind, intent, windows, today, asks_why="attribution" in kinds, named=named)
            except (ValueError, MemtoolError, WarehouseError) as exc:
                reason = getattr(exc, "message", None) or str(exc)
                skipped.append({"kind": kind, "reason": reason})
                state.note(f"the {kind} analysis could not run: {reason}")
                continue
            for table, context in tables:
                task_kind = context.pop("kind", kind)
                queries.extend(table.queries)
                for note in table.notes:
                    state.note(note)
                runner = runner_for(len(table.rows), code_rows=self._settings.analysis_code_rows)
                params = dict(table.params)
                if runner == "sandbox":
                    arguments: dict[str, Any] = {"analysis": task_kind, "columns": table.columns, "rows": table.rows, "params": params}
                    code = self._generated_script(state, task_kind, table, params)
                    if code:
                        arguments["code"] = code
                    if task_kind == "segments" or charts_kept >= 1:
                        arguments["return_files"] = False  # one chart travels with the answer; the rest stay in the sandbox
                    else:
                        charts_kept += 1
                else:
                    arguments = {"columns": table.columns, "rows": table.rows, **params}
                tool = tool_for(task_kind, runner)
                task = AnalysisTask(kind=task_kind, runner=runner, tool=tool, arguments=arguments, rows=len(table.rows), why=why)
                state.analysis_tasks.append({**task.model_dump(mode="json"), "context": context})
        state.analysis_count = len(state.analysis_tasks)
        state.analysis = AnalysisReport(status="planned", skipped=skipped, queries=queries)
        return state

    def _analysis_tables(
        self, state: AskState, kind: str, intent: Any, windows: Any, today: date, *, asks_why: bool = False, named: list[str] | None = None
    ) -> list[tuple[Any, dict[str, Any]]]:
        """The tables one analysis runs on, each with what Summarize needs to word its result."""
        from memtool.analysis import inputs

        columns, rows = self._complete_series(state, intent, today, note=kind in ("anomaly", "forecast"))
        metric = intent.metric if intent is not None else (columns[-1] if columns else "value")
        base = {
            "metric": metric,
            "unit": intent.unit if intent is not None else None,
            "focus": inputs.month_labels(windows.focus) if windows.focus else [],
        }
        _check_series(kind, columns, rows, windows, today)
        if kind == "anomaly":
            table = inputs.series_table(columns, rows, intent, windows)
            if table.params["group_columns"]:
                return _anomaly_tables_by_group(table, columns, metric, base)
            return self._anomaly_tables(state, table, columns, intent, metric, base, asks_why=asks_why)
        if kind == "forecast":
            table = inputs.forecast_table(columns, rows, intent, windows, today)
            return [
                (
                    inputs.Table(table.columns, table.rows, inputs.forecast_params(table), notes=table.notes),
                    {**base, "report_periods": table.params["report_periods"], "horizon_label": table.params["horizon_label"]},
                )
            ]
        if intent is None:
            raise ValueError("the question's intent is not known")
        catalog = self._catalog(state.caller.tenant)
        if kind == "attribution":
            period = next(c for c in columns if c in inputs.GRAINS)
            labels = sorted({str(r[columns.index(period)])[:7] for r in rows})
            table = inputs.attribution_table(
                intent, windows, lambda drill: self._run_drilldown(state, drill), catalog, labels, today
            )
            # The drill-down is in the base unit (元), whatever unit the answer shows.
            return [(table, {**base, "unit": None, "before": table.params["before_period"], "after": table.params["after_period"]})]
        table = inputs.profile_table(
            intent,
            lambda drill: self._run_drilldown(state, drill),
            catalog,
            windows.focus,
            named=named or (),
        )
        if len(table.rows) < 3:
            raise ValueError(f"{kind} needs at least 3 members with every measure; the data has {len(table.rows)}")
        return [
            (inputs.Table(table.columns, table.rows, inputs.profile_params(kind, table), queries=table.queries), {**base, "unit": None})
        ]

    def _anomaly_tables(
        self, state: AskState, table: Any, columns: list[str], intent: Any, metric: str, base: dict[str, Any], *, asks_why: bool
    ) -> list[tuple[Any, dict[str, Any]]]:
        """The total's series; and, for "为什么6月…异常高" (a why, or one month named), where the
        anomaly sits, member by member, besides the total."""
        from memtool.analysis import inputs

        period, value = table.params["period_column"], table.params["value_column"]
        total = inputs.Table(
            [period, value],
            [[r[columns.index(period)], r[columns.index(value)]] for r in table.rows],
            inputs.anomaly_params(table, metric),
        )
        focus = base["focus"]
        if intent is None or not focus or not (asks_why or len(focus) == 1):
            return [(total, base)]
        catalog = self._catalog(state.caller.tenant)
        try:
            segments = inputs.segment_table(intent, focus[-1], lambda drill: self._run_drilldown(state, drill), catalog)
        except (ValueError, MemtoolError, WarehouseError) as exc:  # the total's scan still runs
            state.note(f"the segment scan could not run: {getattr(exc, 'message', None) or exc}")
            segments = None
        if segments is None:
            return [(total, base)]
        return [(total, base), (segments, {**base, "kind": "segments", "focus": [focus[-1]]})]

    def _generated_script(self, state: AskState, kind: str, table: Any, params: dict[str, Any]) -> str | None:
        """The Bedrock planner's script for this analysis, when the Bedrock planner is configured
        (the rule planner writes none: the templated script runs)."""
        if kind == "segments":
            return None
        planner = self._planner(state.caller.tenant)
        script = planner.write_analysis_script(state.input.question, kind, table.columns, table.rows, params)
        if script:
            state.note(f"the {kind} script was written by {planner.name}; it runs only in the sandbox")
        return script

    def _complete_series(self, state: AskState, intent: Any, today: date, *, note: bool = True) -> tuple[list[str], list[list[Any]]]:
        """The answered table without its partial periods (the month so far is not a month: it
        would read as a drop), with a note naming what was left out."""
        from memtool.semantic.periods import partial_buckets

        result = state.result or QueryRows()
        columns, rows = list(result.columns), list(result.rows)
        partial = {b.label[:10] for b in partial_buckets(intent, today)} if intent is not None else set()
        if not partial or not columns:
            return columns, rows
        kept = [row for row in rows if str(row[0])[:10] not in partial]
        if len(kept) < len(rows) and note:
            state.note(f"the partial period {', '.join(sorted(p[:7] for p in partial))} is left out of the analysis (it is not over yet)")
        return columns, kept

    def _run_drilldown(self, state: AskState, drill: Any) -> tuple[list[str], list[list[Any]], str]:
        """Compile, guard and run one drill-down; the rows must be complete (a sum over a
        truncated table would be wrong)."""
        from memtool.sql.guardrails import GuardPolicy, check_sql

        if self._compiler is None:
            raise ValueError("no semantic layer is configured to build the analysis's tables")
        compiled = self._compiler(state.caller.tenant).compile(drill)
        verdict = check_sql(compiled.sql, self._guard_policy(GuardPolicy, state.caller.tenant))
        if not verdict.allowed or verdict.sql is None:
            raise ValueError(f"the guardrails refused the analysis's query: {verdict.reason}")
        try:
            warehouse = self._warehouse_factory(state.caller.tenant)
            result = warehouse.run(
                verdict.sql, max_rows=ANALYSIS_ROW_CAP, timeout_seconds=self._time_left(state, self._settings.statement_timeout_seconds)
            )
        except WarehouseError as exc:
            raise ValueError(f"the analysis's query failed on the warehouse ({exc.code})") from exc
        if result.truncated or result.row_count > ANALYSIS_ROW_CAP:
            raise ValueError(f"the analysis's table has more than {ANALYSIS_ROW_CAP} rows; narrow the question")
        return list(result.columns), [list(r) for r in result.rows], verdict.sql

    def step_summarize(self, state: AskState) -> AskState:
        """The tools' results as ``analysis`` {status, tool, result, summary, analyses}; a
        summary in the question's language built from the numbers, and each failure named."""
        from memtool.analysis.summary import catalog_labels

        planned = state.analysis or AnalysisReport(status="planned")
        skipped = list(planned.skipped)
        runs = state.analysis_runs or []
        crashed = getattr(state, "analysis_error", None)
        lang: Literal["zh", "en"] = "zh" if is_zh(state.input.question) else "en"
        labels = catalog_labels(self._catalog(state.caller.tenant), lang)  # measures and dimensions in the question's language
        read = _ReadRuns(state, lang, labels)
        for position, task in enumerate(state.analysis_tasks):
            raw = runs[position] if position < len(runs) and isinstance(runs[position], dict) else None
            read.add(task, raw)
        analyses = read.analyses
        failed = [a for a in analyses if not a.get("success")]
        _note_failures(state, failed, crashed)
        done = [a for a in analyses if a.get("success")]
        if done:  # the tools ran in the Map (in parallel): its wall time is at least the longest
            state.timings["Analyze"] = round(max(a.get("duration_ms") or 0.0 for a in done), 3)
        status = _analysis_status(done=bool(done), whole=not failed and not skipped and crashed is None)
        summaries = read.summaries(done)
        state.analysis = AnalysisReport(
            status=status,
            tool=done[0]["tool"] if done else None,
            result=done[0]["result"] if done else None,
            summary="\n".join(summaries) if summaries else None,
            analyses=analyses,
            skipped=skipped,
            queries=list(planned.queries),
            chart_png=read.png,
        )
        if status != "complete" and not done:
            state.note("no analysis ran: the answer has the data only")
        # The runs and the tasks' tables now live in ``analysis``: carrying them on would double
        # the state (Step Functions caps a state, and a Lambda's answer, at 256 KB).
        state.analysis_runs = None
        for task in state.analysis_tasks:
            task["arguments"] = echo_arguments(task.get("arguments") or {})
        return state


def _check_series(kind: str, columns: list[str], rows: list[list[Any]], windows: Any, today: date) -> None:
    """Refuse, with the reason, a series an anomaly scan, a forecast or an attribution cannot use."""
    from memtool.analysis import inputs

    if kind in ("anomaly", "forecast", "attribution") and not any(c in inputs.GRAINS for c in columns):
        raise ValueError("the answer has no time series to analyse")
    if kind in ("anomaly", "forecast", "attribution") and not rows:
        raise ValueError("there is no data for the period asked about")
    if kind == "forecast" and windows.horizon is None and windows.focus is not None and windows.focus.end <= today:
        raise ValueError(
            f"{windows.focus.label or windows.focus.start} is already over: "
            "its actual value is in the answer, there is nothing to forecast"
        )
    if kind not in ("anomaly", "forecast"):
        return
    grain = columns.index(next(c for c in columns if c in inputs.GRAINS))
    periods = {str(r[grain])[:7] for r in rows}
    if len(periods) < 6:
        raise ValueError(
            f"{len(periods)} periods of data are too few to judge what is "
            f"{'unusual' if kind == 'anomaly' else 'coming'} (6 or more are needed)"
        )


def _anomaly_tables_by_group(table: Any, columns: list[str], metric: str, base: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """One series per group (the answer's dimension members), each scanned on its own."""
    from memtool.analysis import inputs

    groups = table.params["group_columns"]
    period, value = table.params["period_column"], table.params["value_column"]
    by_group: dict[str, list[list[Any]]] = {}
    for row in table.rows:
        name = " / ".join(str(row[columns.index(g)]) for g in groups)
        by_group.setdefault(name, []).append([row[columns.index(period)], row[columns.index(value)]])
    if len(by_group) > inputs.MAX_SERIES:
        raise ValueError(f"{len(by_group)} series are more than the {inputs.MAX_SERIES} one question can scan; narrow the question")
    return [
        (inputs.Table([period, value], series, inputs.anomaly_params(table, f"{metric} ({name})")), {**base, "group": name})
        for name, series in sorted(by_group.items())
    ]


def _note_failures(state: AskState, failed: list[dict[str, Any]], crashed: Any) -> None:
    for item in failed:
        message = (item.get("error") or {}).get("message") or "it failed"
        state.note(f"the {item['kind']} analysis{' of ' + item['group'] if item.get('group') else ''} could not run: {message}")
    if crashed is not None:
        state.note("the analyses could not be run: " + crash_reason(crashed))


def _analysis_status(*, done: bool, whole: bool) -> Literal["complete", "partial", "failed"]:
    """complete: some ran, and none failed, was skipped or crashed; partial: some ran; else failed."""
    if not done:
        return "failed"
    return "complete" if whole else "partial"


class _ReadRuns:
    """Summarize's reading of the Map's runs, one task at a time: each analysis's entry (its result
    and sentence, or its error), the chart a script drew, and the segments scanned."""

    def __init__(self, state: AskState, lang: Literal["zh", "en"], labels: dict[str, str]) -> None:
        self.state, self.lang, self.labels = state, lang, labels
        self.analyses: list[dict[str, Any]] = []
        self.png: dict[str, Any] | None = None
        self.segments_scanned: list[dict[str, Any]] = []
        self.segment_hits: list[dict[str, Any]] = []

    def add(self, task: dict[str, Any], raw: dict[str, Any] | None) -> None:
        from memtool.tools.executor import ToolResult

        context = task.get("context") or {}
        entry: dict[str, Any] = {
            "kind": task["kind"],
            "tool": task["tool"],
            "runner": task["runner"],
            "rows": task.get("rows"),
            "group": context.get("group"),
        }
        self.analyses.append(entry)
        if raw is None:
            entry.update(success=False, error={"kind": "internal", "message": "the analysis did not return a result"})
            return
        try:
            outcome = ToolResult.model_validate(raw)
        except ValueError:
            entry.update(success=False, error={"kind": "internal", "message": "the analysis returned a result of the wrong shape"})
            return
        self.state.tool_calls.append(outcome.trajectory_entry())
        if not outcome.success or outcome.data is None:
            entry.update(success=False, error=outcome.error.model_dump() if outcome.error else None)
            return
        data = outcome.data
        result = data.get("result") if task["tool"] == "code_interpreter" else data
        for note in data.get("notes") or []:
            self.state.note(f"{task['kind']}: {note}")
        if task["tool"] == "code_interpreter" and self.png is None:
            self.png = next((f for f in data.get("files") or [] if f.get("content_type") == "image/png" and f.get("data_base64")), None)
        if task["kind"] == "segments":
            result, summary = self._segments_brief(result or {}), ""
        else:
            summary = self._sentence(task, result or {}, context)
        entry.update(success=True, result=result, summary=summary, duration_ms=outcome.duration_ms, isolation=data.get("isolation"))

    def _segments_brief(self, result: dict[str, Any]) -> dict[str, Any]:
        """Each member's whole series stays in the sandbox's answer; the state keeps the month asked about."""
        self.segment_hits.extend(result.get("hits") or [])
        self.segments_scanned.extend(result.get("members") or [])
        focus = result.get("focus")
        return {
            **result,
            "members": [
                {
                    **{k: m[k] for k in ("dimension", "member", "anomalies")},
                    "points": [p for p in m.get("points") or [] if p.get("label") == focus],
                }
                for m in result.get("members") or []
            ],
        }

    def _sentence(self, task: dict[str, Any], result: dict[str, Any], context: dict[str, Any]) -> str:
        from memtool.analysis.summary import focus_sentence, premise_sentence, reported_part, summarize_analysis

        state, lang, labels = self.state, self.lang, self.labels
        metric_label = labels.get(context.get("metric") or "", context.get("metric") or "")
        try:
            shown = reported_part(task["kind"], result, context)
            summary = summarize_analysis(
                task["kind"], shown, lang=lang, metric_label=metric_label, unit=context.get("unit"), dimension_labels=labels
            )
            if task["kind"] == "attribution":
                summary = premise_sentence(state.input.question, shown, lang, metric_label) + summary
            if task["kind"] == "anomaly" and context.get("focus"):
                with_segments = any(t["kind"] == "segments" for t in state.analysis_tasks)
                summary = focus_sentence(result, context["focus"], lang, context.get("group"), total=with_segments) + summary
        except Exception:  # the numbers stand without their sentence
            logger.warning("episode %s: the %s result could not be summarised", state.episode_id, task["kind"], exc_info=True)
            summary = ""
        return summary

    def summaries(self, done: list[dict[str, Any]]) -> list[str]:
        """The answer's sentences: each analysis's, the segments' after the first, the scope before all."""
        from memtool.analysis.summary import scope_prefix, segment_sentence

        summaries = [a["summary"] for a in done if a.get("summary")]
        if self.segments_scanned:
            summaries.insert(1 if summaries else 0, segment_sentence(self.segment_hits, self.segments_scanned, self.lang, self.labels))
        scope = scope_prefix(intent_json(self.state.plan), self.lang)
        if scope and summaries:
            summaries[0] = scope + summaries[0]
        return summaries
