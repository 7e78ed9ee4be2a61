"""`memtool mcp` through the `mcp` package's own client: one tool definition is a Converse
toolSpec and an MCP tool with the same schema, and the identity is the server's, never the
arguments'."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp.client.session import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from memtool.api.ask import AskBody  # noqa: E402
from memtool.api.feedback import FeedbackBody  # noqa: E402
from memtool.identity import Identity  # noqa: E402
from memtool.api.memories import CreateMemoryBody  # noqa: E402
from memtool.errors import Forbidden, MemtoolError, NotFound, ValidationFailed  # noqa: E402
from memtool.runtime.local import free_port  # noqa: E402
from memtool.mcp.server import offered_tools  # noqa: E402
from memtool.mcp.service_tools import service_tools, tool_failure  # noqa: E402

from tests.support import ROOT  # noqa: E402

SERVICE_TOOLS = {"ask", "recall", "feedback", "remember", "forget"}
CONVERSE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # Converse's toolSpec.name constraint


# ---- one definition, three faces (no server) ------------------------------------------------------


def test_every_service_tool_is_a_valid_converse_tool_spec() -> None:
    for tool in service_tools(Identity("acme", "li")):
        spec = tool.tool_spec()["toolSpec"]
        assert set(spec) == {"name", "description", "inputSchema"}
        assert CONVERSE_NAME.fullmatch(spec["name"])
        assert spec["description"].strip()
        schema = spec["inputSchema"]["json"]
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert "tenant" not in schema["properties"] and "user" not in schema["properties"]
        assert all(p.get("description") for p in schema["properties"].values()), tool.name
        json.dumps(spec)  # Converse takes it as JSON


def _without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k not in ("description", "title")}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema


@pytest.mark.parametrize(("name", "body"), [("ask", AskBody), ("feedback", FeedbackBody), ("remember", CreateMemoryBody)])
def test_a_service_tool_takes_the_http_api_body(name: str, body: type) -> None:
    """The tool's schema is the API body's (same fields, types, limits) with descriptions added."""
    tool = next(t for t in service_tools(Identity("acme", "li")) if t.name == name)
    assert _without_descriptions(tool.input_schema()) == _without_descriptions(body.model_json_schema())


def test_tools_built_for_one_identity_refuse_a_context_naming_another() -> None:
    from memtool.tools.base import ToolContext, ToolRegistry
    from memtool.tools.executor import ToolExecutor

    executor = ToolExecutor(ToolRegistry(service_tools(Identity("acme", "li"))))
    result = executor.call("recall", {"text": "净收入"}, ToolContext(tenant="other", user="li"))
    assert not result.success and result.error is not None
    assert result.error.kind == "business" and result.error.field == "tenant"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ValidationFailed("must be one of -1, 0, 1", field="rating"), "bad_arguments"),
        (NotFound("episode ep_x not found", field="episode_id"), "not_found"),
        (Forbidden("curators only", field="scope"), "business"),
    ],
)
def test_domain_errors_become_the_tool_failure_a_caller_can_act_on(error: MemtoolError, kind: str) -> None:
    failure = tool_failure(error)
    assert failure.kind == kind and failure.field == error.field and error.message in failure.message


# ---- over MCP ----------------------------------------------------------------------------------


@pytest.fixture
def server_env(tmp_path: Path, demo_warehouse: Path) -> dict[str, str]:
    """A fresh state folder on the small demo warehouse; no identity in the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMTOOL_")}
    env.update(
        MEMTOOL_HOME=str(tmp_path / "home"),
        MEMTOOL_WAREHOUSE_PATH=str(demo_warehouse),
        MEMTOOL_TODAY="2026-11-29",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    )
    return env


@asynccontextmanager
async def stdio_session(env: dict[str, str], tenant: str, user: str = "li", *extra: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memtool.cli", "mcp", "--tenant", tenant, "--user", user, *extra], env=env, cwd=str(ROOT)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(60):
            await session.initialize()
        yield session


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """(isError, the ToolResult) of one call; the text content must say the same as the structure."""
    result = await session.call_tool(name, arguments)
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content
    assert result.structured_content["success"] is (not result.is_error)
    return result.is_error, result.structured_content


@pytest.mark.slow
def test_stdio_server_answers_through_its_tools_for_its_own_identity_only(server_env: dict[str, str]) -> None:
    """One scenario, two servers on one state folder (each start costs seconds): tenant A's server
    lists and runs the tools; tenant B's server cannot reach what A wrote, by any argument."""
    tenant_a, tenant_b = f"alpha-{uuid.uuid4().hex[:6]}", f"beta-{uuid.uuid4().hex[:6]}"
    expected = {t.name: t for t in offered_tools(Identity(tenant_a, "li"))}
    marker = f"zq{uuid.uuid4().hex[:8]}"
    note = f"以后净收入默认用万元 {marker}"
    written: dict[str, Any] = {}

    async def as_tenant_a() -> None:
        async with stdio_session(server_env, tenant_a) as session:
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert set(listed) == set(expected) and SERVICE_TOOLS <= set(listed)
            for name, tool in listed.items():
                assert tool.input_schema == expected[name].input_schema(), name
                assert tool.description == expected[name].description
                assert tool.output_schema is not None and tool.output_schema["type"] == "object"
            assert listed["ask"].input_schema["additionalProperties"] is False

            # Given a question the demo warehouse answers, When asked through MCP, Then rows come back.
            failed, asked = await call(session, "ask", {"question": "上个月各渠道的净收入"})
            assert not failed, asked
            answer = asked["data"]
            assert answer["status"] == "answered" and answer["sql"]
            assert answer["columns"] == ["channel", "net_revenue"]
            assert answer["row_count"] >= 3 and len(answer["rows"]) == answer["row_count"]
            assert all(isinstance(row[1], int | float) for row in answer["rows"])
            assert asked["reward"] == 1.0

            # Feedback on that episode credits it (the episode belongs to the server's user).
            failed, fed = await call(session, "feedback", {"episode_id": answer["episode_id"], "rating": 1})
            assert not failed, fed
            assert fed["data"]["episode_id"] == answer["episode_id"] and fed["data"]["reward"]["user"] == 1.0

            # A bad argument: isError, naming the field and what it needs.
            failed, bad = await call(session, "feedback", {"episode_id": answer["episode_id"], "rating": 5})
            assert failed and bad["error"]["kind"] == "bad_arguments" and bad["error"]["field"] == "rating"
            assert "rating" in bad["error"]["message"]
            failed, empty = await call(session, "feedback", {"episode_id": answer["episode_id"]})
            assert failed and empty["error"]["field"] == "rating"  # says nothing: refused as POST /feedback does
            failed, missing = await call(session, "feedback", {"episode_id": "ep_does_not_exist", "rating": 1})
            assert failed and missing["error"]["kind"] == "not_found" and missing["error"]["field"] == "episode_id"
            failed, unknown = await call(session, "no_such_tool", {})
            assert failed and unknown["error"]["kind"] == "not_found"

            # Identity is not an argument: naming a tenant is an unknown field, refused before anything runs.
            failed, refused = await call(session, "ask", {"question": "上个月净收入", "tenant": tenant_b, "user": "x"})
            assert failed and refused["error"]["kind"] == "bad_arguments"
            assert refused["error"]["field"] in ("tenant", "user") and "unknown field" in refused["error"]["message"]

            # remember, then recall finds it.
            failed, remembered = await call(
                session, "remember", {"kind": "profile", "key": "display.currency_unit", "value": {"unit": "万元"}, "content": note}
            )
            assert not failed, remembered
            written.update(remembered["data"]["memory"])
            assert written["tenant"] == tenant_a and written["owner"] == "li"
            # Saved is not yet indexed (the outbox feeds the index in the background): recall until it is.
            found: list[str] = []
            with anyio.fail_after(15):
                while written["id"] not in found:
                    failed, recalled = await call(session, "recall", {"text": f"净收入 {marker}"})
                    assert not failed, recalled
                    found = [item["memory"]["id"] for item in recalled["data"]["items"]]
                    await anyio.sleep(0.2)

            assert "ml_correlation" in listed
            # an ML tool through the same server, on a small table
            rows = [[x, 2 * x + 1, 10 - x] for x in range(1, 13)]
            failed, corr = await call(session, "ml_correlation", {"columns": ["x", "y", "z"], "rows": rows})
            assert not failed, corr
            pairs = {(p["x"], p["y"]): p for p in corr["data"]["pairs"]}
            assert corr["data"]["n_rows"] == 12 and set(pairs) == {("x", "y"), ("x", "z"), ("y", "z")}
            assert pairs[("x", "y")]["pearson_r"] == pytest.approx(1.0) and pairs[("x", "z")]["pearson_r"] == pytest.approx(-1.0)

    async def as_tenant_b() -> None:
        async with stdio_session(server_env, tenant_b) as session:
            failed, recalled = await call(session, "recall", {"text": f"净收入 {marker}"})
            assert not failed, recalled
            assert recalled["data"]["items"] == []
            # Asking for tenant A's memories by argument is refused, not obeyed and not ignored.
            failed, refused = await call(session, "recall", {"text": f"净收入 {marker}", "tenant": tenant_a, "user": "li"})
            assert failed and refused["error"]["kind"] == "bad_arguments"
            failed, forget = await call(session, "forget", {"memory_id": written["id"]})
            assert failed and forget["error"]["kind"] == "not_found"

    anyio.run(as_tenant_a)
    anyio.run(as_tenant_b)

    # Both servers ran on one store, and tenant A's memory is still in it, untouched by B's forget.
    from memtool.memory.sqlite_store import SQLiteMemoryStore
    from memtool.memory.store import Partition

    store = SQLiteMemoryStore(Path(server_env["MEMTOOL_HOME"]) / "state" / "memtool.sqlite3")
    try:
        kept = store.get(Partition(tenant_a, "li"), written["id"], datetime.now(UTC))
    finally:
        store.close()
    assert kept.content == note and kept.version == written["version"]


@pytest.mark.slow
def test_streamable_http_server_lists_and_calls_tools(server_env: dict[str, str]) -> None:
    port = free_port()
    tenant = f"web-{uuid.uuid4().hex[:6]}"
    server = subprocess.Popen(
        [sys.executable, "-m", "memtool.cli", "mcp", "--transport", "http", "--port", str(port)],
        cwd=ROOT,
        env={**server_env, "MEMTOOL_MCP_TENANT": tenant, "MEMTOOL_MCP_USER": "li"},  # identity from the environment
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_port(server, port)

        async def scenario() -> None:
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed = {t.name for t in (await session.list_tools()).tools}
                assert SERVICE_TOOLS <= listed
                failed, remembered = await call(session, "remember", {"kind": "profile", "content": "喜欢看折线图"})
                assert not failed, remembered
                assert remembered["data"]["memory"]["tenant"] == tenant and remembered["data"]["created"] is True

        anyio.run(scenario)
    finally:
        server.terminate()
        stdout, stderr = server.communicate(timeout=20)
    assert server.returncode == 0, stderr
    assert stdout == ""  # logs go to stderr only
    assert "stopped" in stderr  # SIGTERM stopped the runtime cleanly


def test_missing_identity_is_a_usage_error_naming_the_option(server_env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtool.cli", "mcp", "--user", "li"], cwd=ROOT, env=server_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--tenant is required" in done.stderr and "MEMTOOL_MCP_TENANT" in done.stderr
    assert done.stdout == ""


def _wait_for_port(process: subprocess.Popen[str], port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"memtool mcp exited: {process.stderr.read() if process.stderr else ''}")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    process.kill()
    raise AssertionError("memtool mcp did not come up")


@pytest.mark.slow
def test_stdio_server_serves_a_tenants_own_warehouse_and_never_the_demos_to_another_model(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    """memtool mcp --tenants FILE reads each tenant's own warehouse; a tenant whose model has no
    warehouse here gets warehouse_missing as the tool's error (isError), never the demo's data."""
    import yaml

    from memtool.datasets.tpch import build_tpch_warehouse
    from memtool.identity import Identity
    from memtool.runtime import container
    from memtool.semantic.catalog import load_catalog
    from memtool.settings import Settings, use_settings

    tpch_model = ROOT / "examples" / "tpch" / "model.yaml"
    warehouse = tmp_path / "tpch.duckdb"
    build_tpch_warehouse(warehouse, scale=0.01)
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tpch": {"warehouse": f"duckdb://{warehouse}", "model": str(tpch_model)}}), encoding="utf-8")
    # A model stored for tenant "lost" (pushed where it had a warehouse), in this server's state folder.
    use_settings(Settings(runtime="local", home=Path(server_env["MEMTOOL_HOME"]), store="sqlite"))
    try:
        document = load_catalog(tpch_model).model_dump(mode="json")
        container.model_store().put("lost", document, actor=Identity("lost", "wang", frozenset({"curator"})), expected_version=None)
    finally:
        use_settings(None)

    async def scenario() -> None:
        async with stdio_session(server_env, "tpch", "li", "--tenants", str(tenants)) as session:
            is_error, result = await call(session, "ask", {"question": "1995年的总收入是多少？"})
            assert not is_error and result["data"]["status"] == "answered", result
            assert "lineitem" in result["data"]["sql"] and result["data"]["rows"][0][0] > 0, result["data"]
        async with stdio_session(server_env, "lost", "li") as session:
            is_error, result = await call(session, "ask", {"question": "1995年的总收入是多少？"})
            assert is_error and result["error"]["message"].startswith("warehouse_missing: tenant lost's semantic model"), result
            assert "--tenants FILE" in result["error"]["message"] and "data" not in result or not result.get("data"), result

    anyio.run(scenario)
