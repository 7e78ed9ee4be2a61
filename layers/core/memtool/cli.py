"""The memtool command line: serve the local runtime, run the demo, check the AWS deployment."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from memtool import __version__


def _home(value: str | None) -> Path:
    from memtool.settings import Settings

    return Path(value) if value else Settings(runtime="local").home


def serve(args: argparse.Namespace) -> int:
    from memtool.runtime.local import LocalRuntime

    runtime = LocalRuntime(
        home=_home(args.home),
        port=args.port,
        verbose=args.verbose,
        store=args.store,
        workers=args.workers,
        progress=lambda line: print(line, flush=True),
        tenants_file=Path(args.tenants) if args.tenants else None,
    )
    from memtool.errors import MemtoolError

    try:
        runtime.start()
    except (OSError, MemtoolError) as exc:
        # A port in use, a bad tenants file, a state folder that cannot be written or a damaged
        # state database: one line naming it and what to do, never a traceback.
        print(f"memtool serve: {_one_line(exc)}", file=sys.stderr)
        runtime.stop()
        return 2
    assert runtime.settings is not None
    print(f"memtool {__version__} local runtime")
    print(f"  API        {runtime.api_url}   (GET /health, GET /openapi.json)")
    if runtime.store_kind == "sqlite":
        pending = runtime.loaded.get("pending_changes", 0)
        print(f"  store      SQLite at {runtime.settings.sqlite_path.resolve()}   ({pending} changes to index)")
    else:
        restored = sum(runtime.loaded.values())
        print(f"  store      DynamoDB on moto (loopback only)   ({restored} items restored from {runtime.state_dir.resolve()})")
    if runtime.warehouse is not None:
        print(f"  warehouse  {runtime.warehouse.path}   (DuckDB, {sum(runtime.warehouse.row_counts.values()):,} rows)")
    elif runtime.settings.warehouse == "duckdb" and runtime.settings.warehouse_path is not None:
        print(f"  warehouse  {runtime.settings.warehouse_path}   (DuckDB, MEMTOOL_WAREHOUSE_PATH)")
    for tenant, entry in runtime.tenants.items():
        print(f"  tenant     {tenant}: {entry.warehouse}   (model {entry.model})")
    print("  identity   send X-Memtool-Tenant and X-Memtool-User headers")
    print(
        f"  try        curl -s -X POST {runtime.api_url}/ask -H 'X-Memtool-Tenant: acme' -H 'X-Memtool-User: li' "
        '-d \'{"question": "上个月各渠道的净收入"}\''
    )
    print("Press Ctrl-C to stop" + ("; every request is logged." if args.verbose else "; --verbose logs every request."), flush=True)
    stop = threading.Event()

    def on_signal(*_: object) -> None:
        if stop.is_set():  # a second Ctrl-C: leave now (every acknowledged write is committed)
            print("\nstopping at once; undelivered index changes are delivered at the next start", flush=True)
            os._exit(130)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    stop.wait()
    print("\nstopping: finishing requests in flight and indexing what is pending …", flush=True)
    runtime.stop()
    if runtime.saved:
        print(f"saved {sum(runtime.saved.values())} items to {runtime.state_dir.resolve()}")
    print("stopped.")
    return 0


def demo(args: argparse.Namespace) -> int:
    from memtool.demo import run_demo
    from memtool.errors import MemtoolError

    try:
        return run_demo(home=_home(args.home), url=args.url, port=args.port)
    except (OSError, MemtoolError) as exc:
        # The runtime refused to start (its --port is in use, its state folder cannot be written,
        # a state database is damaged): one line naming it and what to do, as serve says it, not a
        # traceback.
        print(f"memtool demo: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(error: BaseException) -> str:
    """An error's message on one line (SQLite's and the OS's words may span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def seed_warehouse(args: argparse.Namespace) -> int:
    from memtool.sql.seeding import seed_warehouse_command

    return seed_warehouse_command(args)


def mcp(args: argparse.Namespace) -> int:
    """The MCP server for one identity: from the options, else MEMTOOL_MCP_* (never from a tool call)."""
    import re

    from memtool.api.identity import IDENTIFIER_PATTERN, Identity
    from memtool.mcp.server import McpOptions
    from memtool.mcp.server import serve as serve_mcp
    from memtool.settings import Settings

    settings = Settings()
    tenant, user = args.tenant or settings.mcp_tenant, args.user or settings.mcp_user
    roles = frozenset(args.role if args.role is not None else settings.mcp_roles)
    for option, variable, value in (("--tenant", "MEMTOOL_MCP_TENANT", tenant), ("--user", "MEMTOOL_MCP_USER", user)):
        if not value:
            args.parser.error(f"{option} is required (or set {variable}): the MCP server acts for one tenant and user")
        if not re.fullmatch(IDENTIFIER_PATTERN, str(value)):
            args.parser.error(f"{option} {value!r} is not an identifier (letters, digits, '_', '.', '@', ':', '-'; at most 128)")
    assert tenant and user  # parser.error exits above otherwise
    options = McpOptions(
        identity=Identity(tenant=tenant, user=user, roles=roles),
        transport=args.transport,
        port=args.port if args.port is not None else settings.mcp_port,
        home=_home(args.home),
        store=args.store,
        verbose=args.verbose,
        tenants_file=Path(args.tenants) if args.tenants else None,
    )
    return serve_mcp(options)


def _project_template() -> Path:
    from memtool.runtime.template import project_root

    return project_root() / "template.yaml"


def aws_check(args: argparse.Namespace) -> int:
    """A deploy rehearsal: the template as CloudFormation would deploy it, against Lambda's limits."""
    try:
        from memtool.deploy.check import parse_overrides, render, run_check
    except ImportError as exc:  # the SAM translator and packaging come with the `deploy` extra
        print(f"memtool aws check needs the deploy tools: pip install -e '.[deploy]' ({exc})", file=sys.stderr)
        return 2
    try:
        overrides = parse_overrides(args.parameter_overrides or [])
        template = Path(args.template) if args.template else _project_template()
        report = run_check(template, overrides, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (OSError, ValueError) as exc:
        print(f"memtool aws check: {exc}", file=sys.stderr)
        return 2
    print(render(report), end="")
    return 0 if report.ok else 1


def aws_console(args: argparse.Namespace) -> int:
    """Publish the console's build to a stack deployed with CognitoDomain (docs/deploying.md)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, ProfileNotFound

    from memtool.deploy.console import ConsoleNotDeployed, publish, read_stack, render_publish

    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        session = boto3.Session(profile_name=args.profile, region_name=args.region)
        say(f"reading the outputs of stack {args.stack} ...")
        stack = read_stack(session.client("cloudformation"), args.stack)
        report = publish(stack, session.client("s3"), session.client("cloudfront"), progress=say)
    except ConsoleNotDeployed as exc:
        print(f"memtool aws console: {exc}", file=sys.stderr)
        return 2
    except NoRegionError:
        print("memtool aws console: no AWS Region: pass --region (the stack's) or set AWS_REGION", file=sys.stderr)
        return 2
    except (NoCredentialsError, ProfileNotFound) as exc:
        print(f"memtool aws console: no AWS credentials to call with ({exc}): configure them or pass --profile", file=sys.stderr)
        return 2
    except ClientError as exc:
        print(f"memtool aws console: AWS refused a call: {exc} (the caller needs the stack's ConsoleDeployPolicyArn)", file=sys.stderr)
        return 1
    except BotoCoreError as exc:  # the network, an endpoint
        print(f"memtool aws console: the call did not reach AWS: {exc}", file=sys.stderr)
        return 1
    print(render_publish(stack, report), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memtool", description="memory-and-tool layer for data agents")
    parser.add_argument("--version", action="version", version=f"memtool {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    p_serve = commands.add_parser("serve", help="run the local runtime: the API on 127.0.0.1 over embedded stores")
    p_serve.add_argument("--port", type=int, default=3000, help="API port (default 3000)")
    p_serve.add_argument("--home", help="state folder (default .memtool or MEMTOOL_HOME)")
    p_serve.add_argument(
        "--store",
        choices=("sqlite", "dynamodb"),
        help="record store: sqlite (default; durable) or dynamodb (the AWS adapter on moto, for fidelity); default MEMTOOL_STORE or sqlite",
    )
    p_serve.add_argument("--workers", type=int, default=16, help="API worker threads (default 16)")
    p_serve.add_argument(
        "--tenants",
        metavar="FILE",
        help="YAML mapping each tenant id to {warehouse: URL, model: PATH} (examples/tpch/tenants.yaml); "
        "other tenants keep the demo warehouse and model",
    )
    p_serve.add_argument("--verbose", action="store_true", help="log every request and memtool warnings")
    p_serve.set_defaults(func=serve)

    p_seed = commands.add_parser(
        "seed-warehouse",
        help="build a warehouse dataset (DuckDB), optionally loading it into PostgreSQL",
    )
    p_seed.add_argument("--home", help="state folder (default .memtool or MEMTOOL_HOME)")
    p_seed.add_argument(
        "--dataset",
        choices=("demo", "tpch"),
        default="demo",
        help="demo (the deterministic demo shop, default) or tpch (TPC-H, generated by tpchgen-cli)",
    )
    p_seed.add_argument(
        "--path", "--out", dest="path",
        help="DuckDB file (default <home>/warehouse/demo.duckdb, demo-drift.duckdb with --drift, tpch.duckdb "
        "for tpch; with --target, a temporary file unless given)",
    )  # fmt: skip
    p_seed.add_argument(
        "--drift",
        action="store_true",
        help="the same rows under drifted table and column names (DRIFT_RENAMES in memtool.sql.demo_warehouse), "
        "as a warehouse drifts under a semantic layer (demo only)",
    )
    p_seed.add_argument("--seed", type=int, default=7, help="random seed of the demo dataset (default 7)")
    p_seed.add_argument(
        "--scale",
        type=float,
        default=None,
        help="demo: 1.0 (default) is about 300k order lines; tpch: the TPC-H scale factor (default 0.1)",
    )
    p_seed.add_argument("--today", help="anchor date YYYY-MM-DD of the demo dataset (default MEMTOOL_TODAY or today)")
    p_seed.add_argument(
        "--target",
        help="also load every table into this PostgreSQL database (postgresql://user[:password]@host:port/db), "
        "replacing tables of the same names",
    )
    p_seed.set_defaults(func=seed_warehouse)

    p_demo = commands.add_parser("demo", help="run a scripted scenario against the local runtime")
    p_demo.add_argument("--home", help="state folder (default .memtool or MEMTOOL_HOME)")
    where = p_demo.add_mutually_exclusive_group()
    where.add_argument("--url", help="use an already running `memtool serve` at this URL")
    where.add_argument("--port", type=int, default=0, help="port of the demo's own local runtime on 127.0.0.1 (default: a free one)")
    p_demo.set_defaults(func=demo)

    p_mcp = commands.add_parser(
        "mcp",
        help="serve memtool's tools over MCP (stdio, or streamable HTTP on 127.0.0.1) on the local runtime",
        description="An MCP server offering ask, recall, feedback, remember, forget (and the ML tools when installed) "
        "for one tenant and user. Logs go to stderr; on stdio, stdout is the protocol channel.",
    )
    p_mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="stdio (default) or http (streamable HTTP)")
    p_mcp.add_argument("--port", type=int, help="HTTP port on 127.0.0.1 (default MEMTOOL_MCP_PORT or 3001)")
    p_mcp.add_argument("--tenant", help="the tenant the server acts for (or MEMTOOL_MCP_TENANT)")
    p_mcp.add_argument("--user", help="the user the server acts for (or MEMTOOL_MCP_USER)")
    p_mcp.add_argument("--role", action="append", help="a role of that user, e.g. curator (repeatable; or MEMTOOL_MCP_ROLES=a,b)")
    p_mcp.add_argument("--home", help="state folder (default .memtool or MEMTOOL_HOME)")
    p_mcp.add_argument("--store", choices=("sqlite", "dynamodb"), help="record store (default MEMTOOL_STORE or sqlite)")
    p_mcp.add_argument(
        "--tenants", help="YAML mapping each tenant id to {warehouse, model, tables} (as memtool serve --tenants; MEMTOOL_TENANTS_FILE)"
    )
    p_mcp.add_argument("--verbose", action="store_true", help="log tool failures and memtool warnings (to stderr)")
    p_mcp.set_defaults(func=mcp, parser=p_mcp)

    p_aws = commands.add_parser("aws", help="the AWS deployment: an offline check of template.yaml, and publishing the console")
    aws_commands = p_aws.add_subparsers(dest="aws_command", required=True)
    p_check = aws_commands.add_parser(
        "check",
        help="a deploy rehearsal: per function its unzipped size, timeout chain and permissions; exit 1 on a broken limit",
        description="Translates template.yaml with the SAM translator for the given parameters (defaults otherwise) and "
        "checks every function that would be deployed against Lambda's limits: 250 MB unzipped (code and layers), "
        "5 layers, 4 KB of environment, 128..10240 MB, 900 s, and the timeout chain from API Gateway's 29 s down to "
        "each flow step. Exit codes: 0 within limits, 1 a limit broken, 2 the check could not run.",
    )
    p_check.add_argument("--template", help="the SAM template (default: template.yaml of the project folder)")
    p_check.add_argument(
        "--parameter-overrides",
        nargs="+",
        metavar="Key=Value",
        help="template parameters, as sam deploy takes them (e.g. OpenSearchEndpoint=https://... RedshiftSecretArn=arn:...)",
    )
    p_check.set_defaults(func=aws_check)
    p_console = aws_commands.add_parser(
        "console",
        help="publish the console to a deployed stack: its files to the console bucket, its config.json, a CloudFront invalidation",
        description="Uploads the committed console build (no Node.js needed) to the bucket of a stack deployed with "
        "CognitoDomain, writes the config.json that makes the page sign in through Cognito, deletes files an older build "
        "left, and invalidates /console/* on the distribution. Run it after each deploy. The caller needs the stack's "
        "ConsoleDeployPolicyArn. Exit codes: 0 published, 1 AWS refused a call or could not be reached, 2 no such stack, "
        "no console in it, or no Region or credentials to call with.",
    )
    p_console.add_argument("--stack", required=True, help="the stack's name (sam deploy --stack-name)")
    p_console.add_argument("--region", help="the stack's Region (default: the AWS configuration's)")
    p_console.add_argument("--profile", help="the AWS profile to use (default: the AWS configuration's)")
    p_console.set_defaults(func=aws_console)
    p_model = commands.add_parser(
        "model", help="semantic models: draft one from a warehouse (init), check it (validate), store and read a tenant's"
    )
    model_subparsers = p_model.add_subparsers(dest="model_command", required=True)
    from memtool.commands import model_local

    model_local.register(model_subparsers)
    from memtool.commands import model_remote

    model_remote.register(model_subparsers)
    from memtool.commands import maintain

    maintain.register(commands)
    from memtool.commands import knowledge_remote

    knowledge_remote.register(commands)

    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
