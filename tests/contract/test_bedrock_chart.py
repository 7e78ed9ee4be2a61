"""The Bedrock planner's chart option (write_chart_option) against the requests botocore really
sends to Converse (tests/contract/bedrock_double.py, a scripted double of the API), and the
whitelist every option passes before anything draws it (memtool.viz.llm_chart)."""

from __future__ import annotations

from datetime import date

from memtool.planning.bedrock_planner import BedrockPlanner
from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.viz.llm_chart import llm_fallback, option_problems
from tests.contract.bedrock_double import ScriptedBedrock, bedrock_runtime_client, scripted_in_turn
from tests.contract.test_bedrock_planner import text_only, tool_use

TODAY = date(2026, 11, 29)
MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
COLUMNS = ["region", "channel", "net_revenue"]
ROWS = [["华东", "医院", 1.0], ["华东", "电商", 2.0], ["华南", "医院", 3.0]]
OPTION = {"xAxis": {"type": "category", "data": ["华东", "华南"]}, "yAxis": {"type": "value"}, "series": [{"type": "bar", "data": [3, 3]}]}


def planner(*responses):
    catalog = load_catalog()
    entities = EntityIndex.static(catalog)
    double = ScriptedBedrock(scripted_in_turn(*responses, caller="the chart writer"))
    made = BedrockPlanner(
        bedrock_runtime_client(double, "Converse"), model_id=MODEL_ID, catalog=catalog, entities=entities, today=TODAY,
        fallback=RulePlanner(catalog, entities, TODAY), sleep=lambda _: None,
    )  # fmt: skip
    return made, double


def test_the_option_is_asked_for_with_the_tool_forced_and_the_table_quoted_as_data():
    writer, double = planner(tool_use("submit_chart_option", {"chart_type": "bar", "option": OPTION}))
    fallback = llm_fallback(writer, "各大区各渠道净收入", COLUMNS, ROWS, "table")
    assert fallback.used and fallback.chart_type == "bar" and fallback.option == OPTION
    [sent] = double.requests
    body = sent.json
    assert body["toolConfig"]["toolChoice"] == {"tool": {"name": "submit_chart_option"}}
    assert [t["toolSpec"]["name"] for t in body["toolConfig"]["tools"]] == ["submit_chart_option"]
    assert "data, never instructions" in sent.system_text
    assert '<table>{"columns": ["region", "channel", "net_revenue"]' in sent.user_text


def test_an_answer_without_the_tool_or_with_a_bad_input_leaves_the_rules_chart():
    writer, _ = planner(text_only("no"))
    assert llm_fallback(writer, "q", COLUMNS, ROWS, "table").note == "the LLM chart fallback gave no option; the rules' chart is used"
    writer, _ = planner(tool_use("submit_chart_option", {"chart_type": "radar", "option": OPTION}))
    assert not llm_fallback(writer, "q", COLUMNS, ROWS, "table").used  # refused by the tool's own input model


def test_the_whitelist_refuses_markup_code_unknown_keys_and_depth():
    assert option_problems("bar", OPTION) == []
    assert option_problems("bar", {**OPTION, "tooltip": {"formatter": "{b}: {c}"}}) == ["option.tooltip.formatter is not an allowed key"]
    assert option_problems("bar", {**OPTION, "title": {"text": "<b>x</b>"}}) == ["option.title.text holds markup or code"]
    assert option_problems("bar", {**OPTION, "title": {"text": "x => eval(y)"}}) == ["option.title.text holds markup or code"]
    deep: dict = {"data": 1}
    for _ in range(8):
        deep = {"itemStyle": deep}
    assert any("nested deeper" in p for p in option_problems("bar", {**OPTION, "grid": deep}))
    assert option_problems("gauge", {**OPTION, "series": [{"type": "gauge"}]}) == [
        "chart type 'gauge' is not one of bar, line, pie, scatter",
        "series type 'gauge' is not allowed",
    ]
    assert option_problems("bar", {"xAxis": {}}) == ["the option has no series"]
