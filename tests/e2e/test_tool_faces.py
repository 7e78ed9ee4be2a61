"""One tool definition, three faces: the same ``ml_anomaly`` Tool is a valid Bedrock Converse
toolSpec, a working AskFlow step (the ML tools' Lambda handler with events/ml_tool_call.json, as
``sam local invoke -e`` sends it) and a working MCP tool, called through the ``mcp`` package's own
ClientSession over its in-memory transport (stdio and HTTP are in test_mcp.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
from jsonschema import Draft202012Validator
from mcp.client.session import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from memtool.analysis.ml.registry import ml_registry
from memtool.identity import Identity
from memtool.runtime.handlers import function_fleet
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.tools.executor import ToolExecutor
from memtool.mcp.server import build_server

ROOT = Path(__file__).resolve().parents[2]
EVENT = json.loads((ROOT / "events" / "ml_tool_call.json").read_text(encoding="utf-8"))


def test_the_tool_is_a_valid_converse_tool_spec():
    tool = ml_registry().get("ml_anomaly")
    spec = tool.tool_spec()["toolSpec"]
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", spec["name"]) and spec["description"]
    schema = spec["inputSchema"]["json"]
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert all(field.get("description") for field in schema["properties"].values())
    Draft202012Validator(schema).validate(EVENT["arguments"])  # the event's arguments fit the spec


def test_the_tool_is_a_working_flow_step():
    handler = function_fleet(ROOT, "ml_tools")
    result = handler(EVENT, LocalLambdaContext(function_name="MlToolsFunction"))
    assert result["success"] and result["tool"] == "ml_anomaly", result
    assert result["data"]["anomalies"] and result["arguments"]["series_name"] == EVENT["arguments"].get("series_name", "value")
    bad = handler({**EVENT, "arguments": {**EVENT["arguments"], "period": "monthly"}}, LocalLambdaContext(function_name="MlToolsFunction"))
    assert not bad["success"] and bad["error"]["kind"] == "bad_arguments" and bad["error"]["field"] == "period"


def test_the_tool_is_a_working_mcp_tool():
    registry = ml_registry()
    server = build_server(ToolExecutor(registry), Identity("acme", "li", frozenset()))

    async def scenario() -> tuple[list, object, object]:
        async with create_client_server_memory_streams() as (client_streams, server_streams):
            async with anyio.create_task_group() as group:
                group.start_soon(lambda: server.run(server_streams[0], server_streams[1], server.create_initialization_options()))
                async with ClientSession(client_streams[0], client_streams[1]) as session:
                    await session.initialize()
                    listed = (await session.list_tools()).tools
                    called = await session.call_tool("ml_anomaly", EVENT["arguments"])
                    refused = await session.call_tool("ml_anomaly", {**EVENT["arguments"], "tenant": "other"})
                group.cancel_scope.cancel()
        return listed, called, refused

    listed, called, refused = anyio.run(scenario)
    [tool] = [t for t in listed if t.name == "ml_anomaly"]
    assert tool.input_schema == registry.get("ml_anomaly").input_schema()
    assert not called.is_error and called.structured_content["success"]
    assert called.structured_content["data"]["anomalies"] == EVENT_ANOMALIES()
    assert refused.is_error and refused.structured_content["error"]["field"] == "tenant"


def EVENT_ANOMALIES() -> list[str]:  # noqa: N802 - the flow step's answer, for the same arguments
    handler = function_fleet(ROOT, "ml_tools")
    return handler(EVENT, LocalLambdaContext(function_name="MlToolsFunction"))["data"]["anomalies"]


def test_the_code_interpreter_event_runs_in_the_sandbox_through_its_handler():
    event = json.loads((ROOT / "events" / "analyze_tool_call.json").read_text(encoding="utf-8"))
    result = function_fleet(ROOT, "analyze")(event, LocalLambdaContext(function_name="AnalyzeFunction"))
    assert result["success"], result
    assert result["data"]["isolation"].startswith("local-process") and result["data"]["script"].startswith("templated:")
    assert result["data"]["result"]["anomalies"]
