"""Converse's ``toolSpec`` and ``toolConfig`` are rendered in one place, memtool/tools/base.py.

A ``Tool`` renders its own; a tool whose schema is written by hand (the planner's intent, SQL,
clarification and correction answers, the diagnoser's report) goes through the same two
functions. A dict spelled ``{"toolSpec": ...}`` or ``{"toolChoice": ...}`` anywhere else in the
library is a second copy of the shape, and fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from memtool.tools.base import converse_tool_config, converse_tool_spec

LIBRARY = Path(__file__).resolve().parents[2] / "layers" / "core" / "memtool"
CONVERSE_KEYS = {"toolSpec", "toolChoice", "inputSchema"}
SCHEMA = {"type": "object", "properties": {}, "additionalProperties": False}


def converse_dicts(source: str) -> list[int]:
    """Lines of dict displays keyed by one of Converse's tool keys."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Dict) and any(isinstance(key, ast.Constant) and key.value in CONVERSE_KEYS for key in node.keys)
    ]


def test_the_shapes():
    spec = converse_tool_spec("answer", "Answer.", SCHEMA)
    assert spec == {"toolSpec": {"name": "answer", "description": "Answer.", "inputSchema": {"json": SCHEMA}}}
    assert converse_tool_config([spec]) == {"tools": [spec]}
    assert converse_tool_config([spec], choice="any") == {"tools": [spec], "toolChoice": {"any": {}}}
    assert converse_tool_config([spec], force="answer") == {"tools": [spec], "toolChoice": {"tool": {"name": "answer"}}}


def test_what_converse_would_refuse_is_refused_here():
    with pytest.raises(ValueError, match="must match"):
        converse_tool_spec("an answer", "Answer.", SCHEMA)
    spec = converse_tool_spec("answer", "Answer.", SCHEMA)
    with pytest.raises(ValueError, match="not offered"):
        converse_tool_config([spec], force="other")
    with pytest.raises(ValueError, match="not both"):
        converse_tool_config([spec], choice="any", force="answer")


def test_the_converse_shapes_are_written_only_in_tools_base():
    found = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        name = str(path.relative_to(LIBRARY))
        lines = converse_dicts(path.read_text(encoding="utf-8"))
        if lines and name != "tools/base.py":
            found[name] = lines
    assert found == {}, f"Converse tool dicts written beside memtool.tools.base: {found}"
    assert converse_dicts((LIBRARY / "tools" / "base.py").read_text(encoding="utf-8"))  # the check sees the one home


def test_the_check_catches_a_hand_written_spec():
    assert converse_dicts('TOOLS = [{"toolSpec": {"name": "x"}}]\n') == [1]
    assert converse_dicts('CONFIG = {"tools": [], "toolChoice": {"any": {}}}\n') == [1]
    assert converse_dicts('SPEC = {"name": "x", "description": "y"}\n') == []


def test_the_planner_and_the_diagnoser_offer_their_tools_through_it():
    from datetime import date

    from memtool.diagnosis.bedrock import TOOL_DIAGNOSIS, BedrockDiagnoser, diagnosis_schema
    from memtool.planning.bedrock_planner import BedrockPlanner
    from memtool.semantic.catalog import load_catalog
    from memtool.semantic.entities import EntityIndex

    catalog = load_catalog()
    planner = BedrockPlanner(object(), model_id="m", catalog=catalog, entities=EntityIndex.static(catalog), today=date(2026, 7, 1))
    names = [spec["toolSpec"]["name"] for spec in planner._tools["tools"]]
    assert names == ["propose_intent", "propose_sql", "ask_clarification"] and planner._tools["toolChoice"] == {"any": {}}
    assert planner._tools["tools"][0]["toolSpec"]["inputSchema"]["json"] == planner.intent_schema()

    diagnoser = BedrockDiagnoser(object(), model_id="m", max_hypotheses=2)
    [spec] = diagnoser.tool_config["tools"]
    assert spec["toolSpec"]["name"] == TOOL_DIAGNOSIS and spec["toolSpec"]["inputSchema"]["json"] == diagnosis_schema(2)
    assert diagnoser.tool_config["toolChoice"] == {"tool": {"name": TOOL_DIAGNOSIS}}
