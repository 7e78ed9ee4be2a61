"""The LLM chart fallback over HTTP (docs/asking.md, Charts): when the rules are not sure (no chart
rule fits the result of three dimensions and a measure), the Bedrock planner writes an ECharts
option; the answer draws it (``source: llm``) only when it passes the whitelist, and otherwise keeps
the rules' table with a note. The Converse calls go to a double of the runtime client (the wire
format is contract-tested in tests/contract/test_bedrock_chart.py)."""

from __future__ import annotations

from typing import Any

import pytest

from memtool.runtime import container
from tests.contract.test_bedrock_planner import text_only, tool_use

QUESTION = "上个月各大区各渠道各品牌净收入"
GOOD = {
    "chart_type": "bar",
    "option": {
        "title": {"text": "净收入：大区 × 渠道"},
        "tooltip": {"trigger": "axis"},
        "legend": {"data": ["医院", "电商"]},
        "xAxis": {"type": "category", "data": ["华东", "华南"]},
        "yAxis": {"type": "value"},
        "series": [{"name": "医院", "type": "bar", "stack": "total", "data": [1, 2]}, {"name": "电商", "type": "bar", "stack": "total", "data": [3, 4]}],
    },
    "reason": "stacked bars by region and channel",
}


class Converse:
    """Converse as the planner calls it: the plan is left to the rules (a text answer), then the
    chart option is the scripted one."""

    def __init__(self, chart: dict[str, Any]) -> None:
        self.chart = chart
        self.calls: list[dict[str, Any]] = []

    def converse(self, **request: Any) -> dict[str, Any]:
        self.calls.append(request)
        forced = (request.get("toolConfig") or {}).get("toolChoice", {}).get("tool", {}).get("name")
        if forced == "submit_chart_option":
            return tool_use("submit_chart_option", self.chart).payload
        return text_only("I leave this to the rules.").payload


def bedrock_charts(monkeypatch: pytest.MonkeyPatch, chart: dict[str, Any]) -> Converse:
    from memtool.planning.bedrock_planner import BedrockPlanner

    double = Converse(chart)
    rules = container.rule_planner()
    bedrock = BedrockPlanner(
        double, model_id="anthropic.claude-3-5-sonnet-20240620-v1:0", catalog=rules.parser.catalog, entities=rules.parser.entities,
        today=container.today, fallback=rules,
    )  # fmt: skip
    monkeypatch.setattr(container, "planner", lambda tenant=None: bedrock)
    return double


def ask(api) -> dict[str, Any]:
    reply = api.call("POST", "/ask", {"question": QUESTION})
    assert reply.status == 200, reply.body
    return reply.json()


def test_the_llms_checked_option_is_the_chart_when_no_rule_fits(api, monkeypatch):
    double = bedrock_charts(monkeypatch, GOOD)
    answer = ask(api)
    assert answer["status"] == "answered" and answer["columns"] == ["region", "channel", "brand", "net_revenue"]
    chart = answer["chart"]
    assert (chart["type"], chart["source"], chart["checkpoint_status"]) == ("bar", "llm", "needs_review")
    assert chart["option"] == GOOD["option"]
    assert "the chart is the LLM's bar option (checked against the whitelist)" in answer["notes"]
    [asked] = [c for c in double.calls if (c.get("toolConfig") or {}).get("toolChoice", {}).get("tool")]
    prompt = asked["messages"][0]["content"][0]["text"]
    assert "<table>" in prompt and '"region", "channel", "brand", "net_revenue"' in prompt


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"tooltip": {"trigger": "axis", "formatter": "<img src=x onerror=alert(document.cookie)>"}}, "option.tooltip.formatter is not an allowed key"),
        ({"title": {"text": "javascript:alert(1)"}}, "option.title.text holds markup or code"),
        ({"series": [{"type": "custom", "renderItem": "function(){}", "data": [1]}]}, "series type 'custom' is not allowed"),
        ({"graphic": [{"type": "text"}]}, "option.graphic is not an allowed key"),
    ],
)
def test_a_malicious_option_is_refused_and_the_rules_table_stays_with_a_note(api, monkeypatch, change, why):
    bedrock_charts(monkeypatch, {**GOOD, "option": {**GOOD["option"], **change}})
    answer = ask(api)
    assert answer["status"] == "answered"
    assert answer["chart"]["type"] == "table" and "source" not in answer["chart"]
    [note] = [n for n in answer["notes"] if n.startswith("the LLM's chart option was refused")]
    assert why in note and note.endswith("the rules' chart is used")


def test_a_sure_chart_never_asks_the_model(api, monkeypatch):
    double = bedrock_charts(monkeypatch, GOOD)
    reply = api.call("POST", "/ask", {"question": "上个月各大区净收入"})
    assert reply.json()["chart"]["type"] == "horizontal_bar"
    assert not [c for c in double.calls if (c.get("toolConfig") or {}).get("toolChoice", {}).get("tool")]
