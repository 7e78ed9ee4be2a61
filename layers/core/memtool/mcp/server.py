"""memtool's tools as an MCP server (the `mcp` package's low-level server), over stdio or
streamable HTTP on loopback.

``tools/list`` gives each tool its own definition: name, description, the input model's JSON
Schema (the Converse toolSpec's ``inputSchema.json``) and an output schema (the executor's
``ToolResult`` with ``data`` typed as the tool's output model). ``tools/call`` goes through the
``ToolExecutor`` with a ``ToolContext`` carrying the identity the server was started for; a call's
arguments never choose the tenant or the user. Every answer is the ``ToolResult`` as structured
content plus the same JSON as text, with ``isError`` when the call did not succeed.

Everything this process logs goes to stderr: on stdio, stdout is the protocol channel.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from pydantic import BaseModel, create_model

from memtool import __version__
from memtool.identity import Identity
from memtool.tools.base import Tool, ToolContext, ToolRegistry
from memtool.tools.executor import ToolExecutor, ToolResult

Transport = Literal["stdio", "http"]
HOST = "127.0.0.1"  # the HTTP transport listens on loopback only: it trusts its configured identity
DEFAULT_PORT = 3001
MCP_PATH = "/mcp"

logger = logging.getLogger("memtool.mcp")

INSTRUCTIONS = (
    "memtool answers data questions over the warehouse and learns from feedback. Call `ask` with the user's "
    "question; give `feedback` on its episode_id when the user says the answer is right or wrong (or corrects a "
    "term); `remember` preferences and corrections the user states; `recall` shows what memtool knows."
)


def result_schema(tool: Tool[Any, Any]) -> dict[str, Any]:
    """The JSON Schema of a call's structured content: a ToolResult whose ``data`` is the tool's output."""
    envelope: type[BaseModel] = create_model(
        f"{tool.output_model.__name__}Result",
        __base__=ToolResult,
        __module__=__name__,
        data=(tool.output_model | None, None),
    )
    schema = envelope.model_json_schema(mode="serialization")
    schema.pop("title", None)
    return schema


def mcp_tool(tool: Tool[Any, Any]) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema(),
        output_schema=result_schema(tool),
    )


def call_result(result: ToolResult) -> types.CallToolResult:
    content = result.model_dump(mode="json")
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(content, ensure_ascii=False))],
        structured_content=content,
        is_error=not result.success,
    )


def build_server(executor: ToolExecutor, identity: Identity) -> Server[Any]:
    """An MCP server offering every tool of the executor's registry, each call run for ``identity``."""
    registry = executor.registry
    listed = types.ListToolsResult(tools=[mcp_tool(tool) for tool in registry])
    context = ToolContext(tenant=identity.tenant, user=identity.user, extras={"transport": "mcp"})

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        import anyio.to_thread

        # The executor blocks (the handler runs under its timeout in a worker thread): keep it off the loop.
        result = await anyio.to_thread.run_sync(partial(executor.call, params.name, params.arguments or {}, context))
        if not result.success and result.error is not None:
            logger.warning("tool %s failed: %s: %s", params.name, result.error.kind, result.error.message)  # --verbose
        return call_result(result)

    schemas = {tool.name: tool.input_schema() for tool in registry}
    return Server(
        "memtool",
        version=__version__,
        title="memtool",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


# ---- the tools a server offers --------------------------------------------------------------------


def offered_tools(identity: Identity, say: Callable[[str], None] | None = None) -> list[Tool[Any, Any]]:
    """The service tools for ``identity`` and, when the analysis package is installed, the ML tools."""
    from memtool.mcp.service_tools import service_tools

    return [*service_tools(identity), *_ml_tools(say or logger.warning)]


def _ml_tools(say: Callable[[str], None]) -> list[Tool[Any, Any]]:
    try:
        from memtool.analysis.ml.registry import ml_tools
    except ImportError as exc:  # not in this build (or its libraries are missing): serve without them
        say(f"memtool mcp: the ML tools are not offered ({exc})")
        return []
    return list(ml_tools())


def executor_for(tools: Sequence[Tool[Any, Any]]) -> ToolExecutor:
    from memtool.settings import get_settings
    from memtool.tools.breakers import CircuitBreakers

    settings = get_settings()
    breakers = CircuitBreakers(
        failure_threshold=settings.breaker_failure_threshold, cooldown_seconds=settings.breaker_cooldown_seconds
    )
    return ToolExecutor(ToolRegistry(tools), breakers=breakers, max_parallel=settings.tool_max_parallel)


# ---- running it on the local runtime --------------------------------------------------------------


@dataclass(frozen=True)
class McpOptions:
    identity: Identity
    transport: Transport = "stdio"
    port: int = DEFAULT_PORT
    home: Path = Path(".memtool")
    store: Literal["sqlite", "dynamodb"] | None = None
    verbose: bool = False
    tenants_file: Path | None = None  # tenant -> {warehouse, model, tables}, as memtool serve --tenants takes it


def serve(options: McpOptions, *, say: Callable[[str], None] | None = None) -> int:
    """Run the MCP server on the local runtime's embedded stores until the client leaves (stdio),
    or SIGTERM / Ctrl-C arrives (either transport). Returns the exit status."""
    import anyio

    say = say or _to_stderr
    level = logging.INFO if options.verbose else logging.WARNING
    logging.basicConfig(stream=sys.stderr, level=level, format="%(levelname)s %(name)s: %(message)s")
    if options.transport == "http" and _port_in_use(options.port):
        say(f"memtool mcp: port {options.port} on {HOST} is already in use (choose another with --port)")
        return 2
    anyio.run(_serve, options, say, _StopRequest())
    return 0


class _StopRequest:
    """SIGTERM or Ctrl-C: stop serving gracefully (uvicorn finishes its requests), then the runtime."""

    def __init__(self) -> None:
        self.requested = False
        self.scope: Any = None  # cancelled when nothing gentler is running
        self.http: Any = None  # the uvicorn server, once it serves

    def __call__(self) -> None:
        self.requested = True
        if self.http is not None:
            self.http.should_exit = True
        elif self.scope is not None:
            self.scope.cancel()

    async def listen(self) -> None:
        import anyio

        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                self()


async def _serve(options: McpOptions, say: Callable[[str], None], stop: _StopRequest) -> None:
    import anyio

    async with anyio.create_task_group() as group:
        # Listening from the start: a signal during the runtime's start stops it once started.
        stop.scope = group.cancel_scope
        group.start_soon(stop.listen)
        if options.transport == "stdio":
            await _serve_stdio(options, say, stop)
        else:
            await _serve_http(options, say, stop)
        group.cancel_scope.cancel()  # the client left, or the HTTP server stopped: stop listening


async def _serve_stdio(options: McpOptions, say: Callable[[str], None], stop: _StopRequest) -> None:
    from mcp.server.stdio import stdio_server

    # Entering stdio_server points fd 1 at stderr before the runtime starts: nothing the runtime
    # or a library prints can reach the protocol channel.
    async with stdio_server() as (read_stream, write_stream):
        try:
            async with _local_runtime(options, say) as server:
                say(f"memtool mcp: serving over stdio as {options.identity.tenant}/{options.identity.user}")
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            if stop.requested:
                # Stopped by a signal while the client still holds stdin open: the runtime is
                # stopped and the store closed, but the transport's reader thread is blocked in a
                # read only the client can end, and leaving stdio_server would wait for it.
                sys.stderr.flush()
                os._exit(0)


async def _serve_http(options: McpOptions, say: Callable[[str], None], stop: _StopRequest) -> None:
    import uvicorn

    class _Uvicorn(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:  # the stop request handles them (and stops the runtime after)
            yield

    async with _local_runtime(options, say) as server:
        app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=HOST)
        log_level = "info" if options.verbose else "warning"
        stop.http = _Uvicorn(uvicorn.Config(app, host=HOST, port=options.port, log_level=log_level, lifespan="on"))
        say(f"memtool mcp: serving http://{HOST}:{options.port}{MCP_PATH} as {options.identity.tenant}/{options.identity.user}")
        await stop.http.serve()


@asynccontextmanager
async def _local_runtime(options: McpOptions, say: Callable[[str], None]) -> AsyncIterator[Server[Any]]:
    """The local runtime (the store, the index feed, AskFlow on moto, the demo warehouse) for the
    server's lifetime, and the MCP server over the tools; the runtime stops however this ends."""
    import anyio
    import anyio.to_thread

    from memtool.runtime.local import LocalRuntime

    # No REST API beside the MCP server: its identity headers would let any local process act as
    # any tenant, while the MCP server acts only for the identity it was started with.
    runtime = LocalRuntime(
        home=options.home,
        port=0,
        verbose=options.verbose,
        store=options.store,
        progress=say,
        serve_api=False,
        tenants_file=options.tenants_file,
    )
    try:
        await anyio.to_thread.run_sync(runtime.start)
        tools = offered_tools(options.identity, say)
        say(f"memtool mcp: tools {', '.join(t.name for t in tools)}")
        yield build_server(executor_for(tools), options.identity)
    finally:
        started = time.perf_counter()
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(runtime.stop)
        say(f"memtool mcp: stopped ({time.perf_counter() - started:.1f} s to finish indexing and close the store)")


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex((HOST, port)) == 0


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
