"""Which analyses a deep-analysis question asks for, and where each one runs.

From the question's words (the route classifier already decided it is an analysis):
异常/离群/unusual → anomaly, 预测/forecast → forecast, 为什么/归因/下降/原因/why → attribution,
分群/聚类/cluster → clustering, 相关/correlation → correlation, 回归/regression → regression.
A question may ask for several ("6月退款为什么异常高": anomaly and attribution); AskFlow's Map
state runs each. A question that names none of them gets an anomaly scan of its series, the
most useful default for "看看…怎么样" kinds of questions, and the answer says so.

The data's shape routes the work: a table of at most ``code_rows`` rows goes to the code
interpreter (a sandboxed script: the Bedrock planner's code when configured, else a templated
script for the analysis); a larger one goes to the ML tools, which run in-process in the ML
tools' function.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from memtool.analysis.kinds import KINDS, AnalysisKind, TaskKind

Runner = Literal["sandbox", "ml"]
# "segments" (a TaskKind) is not asked for by name: it is the anomaly analysis's drill-down ("where is it?").

_WORDS: dict[AnalysisKind, re.Pattern[str]] = {
    "anomaly": re.compile(r"异常|离群|反常|突增|骤增|激增|异动|anomal|outlier|unusual|abnormal|spike", re.IGNORECASE),
    "forecast": re.compile(
        r"预测|预估|预计|展望|forecast|predict|projection|project(?:ed)?\b|next\s+(?:month|quarter|year)s?\b.*\b(?:will|expect)",
        re.IGNORECASE,
    ),
    "attribution": re.compile(
        r"为什么|为何|原因|归因|下降|下滑|下跌|减少|降低|突降|骤降|上升|增长的原因|驱动|怎么回事|贡献|"
        r"\bwhy\b|attribut|drivers?\b|root\s+cause|what\s+caused|contribut|\bdrop(?:ped)?\b|\bdecline[sd]?\b|\bfell\b|\bfall\b",
        re.IGNORECASE,
    ),
    "clustering": re.compile(r"分群|聚类|分组画像|细分|cluster|segment", re.IGNORECASE),
    "correlation": re.compile(r"相关|关联|correlat|relationship\s+between", re.IGNORECASE),
    "regression": re.compile(r"回归|影响多大|弹性|regress|elasticity", re.IGNORECASE),
}


class AnalysisTask(BaseModel):
    """One analysis of one table: which tool runs it, on which runner, with which arguments."""

    model_config = ConfigDict(extra="forbid")

    kind: TaskKind
    runner: Runner
    tool: str  # "code_interpreter" or "ml_<kind>"
    arguments: dict[str, Any] = Field(default_factory=dict)
    rows: int = 0  # the size of the table it analyses (what chose the runner)
    why: str = ""  # the words that asked for it


def choose_analyses(question: str) -> tuple[list[str], list[str]]:
    """(the analyses the question asks for, in a stable order; the words that asked for each)."""
    kinds: list[str] = []
    why: list[str] = []
    for kind in KINDS:
        match = _WORDS[kind].search(question)
        if match:
            kinds.append(kind)
            why.append(match.group(0))
    # "为什么…异常高": the anomaly is the observation; its cause is the attribution. Both run.
    return kinds, why


# The ask flow's own tools, as episodes record them (``value.tools``) and recall matches them.
SQL_TOOL = "sql_execute"
CHART_TOOL = "chart"
DATA_ROUTES = frozenset({"nl2sql_query", "kpi_lookup", "deep_analysis_workflow"})


def expected_tools(route: str | None, question: str) -> tuple[str, ...]:
    """The tools an ask on this route will use, known before it plans: SQL execution and the chart
    on the data routes, and on the deep route each analysis the question asks for, on either
    runner (the table's size, which picks the runner, is known only after the query)."""
    if route not in DATA_ROUTES:
        return ()
    tools = [SQL_TOOL, CHART_TOOL]
    if route == "deep_analysis_workflow":
        kinds, _ = choose_analyses(question)
        if kinds:
            tools.append("code_interpreter")
            tools.extend(f"ml_{kind}" for kind in kinds)
    return tuple(tools)


def runner_for(rows: int, *, code_rows: int) -> Runner:
    """Small tables go to the code interpreter, large ones to the ML tools."""
    return "sandbox" if rows <= code_rows else "ml"


def tool_for(kind: str, runner: Runner) -> str:
    return "code_interpreter" if runner == "sandbox" else f"ml_{kind}"
