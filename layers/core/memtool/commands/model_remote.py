"""`memtool model push|pull|diff|history`: the tenant's stored semantic model, over the HTTP API.

The API takes JSON; these commands read and write YAML. ``push`` parses the file here (a YAML
syntax error is reported with its line before anything is sent) and prints a refusal's problems
each at its line of the file (``model.yaml:41: metrics[2].expression: …``). Identity is the local
runtime's header identity: ``--tenant/--user/--roles``, else MEMTOOL_MCP_TENANT/_USER/_ROLES.

Exit codes: 0 done (``diff``: no difference), 1 refused or not found (``diff``: they differ),
2 usage, file or connection error.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:3000"  # `memtool serve`'s default port
OK, REFUSED, USAGE = 0, 1, 2


class _Stop(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class _Reply:
    status: int
    body: Any


@dataclass(frozen=True)
class _Client:
    url: str
    headers: dict[str, str]

    def call(self, method: str, path: str, body: Any = None, query: dict[str, str] | None = None) -> _Reply:
        target = self.url.rstrip("/") + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(target, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw = response.read().decode("utf-8")
                return _Reply(response.status, json.loads(raw) if raw else None)
        except urllib.error.HTTPError as error:
            raw = error.read().decode("utf-8", "replace")
            try:
                return _Reply(error.code, json.loads(raw) if raw else None)
            except json.JSONDecodeError:
                return _Reply(error.code, {"message": raw[:500]})
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            message = f"cannot reach the memtool API at {self.url} ({reason}); start it with `memtool serve` or pass --url"
            raise _Stop(USAGE, message) from error


def register(model_subparsers: Any) -> None:
    """Add push, pull, diff and history to the ``add_subparsers()`` object of a ``model`` command."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=DEFAULT_URL, help=f"the memtool API (default {DEFAULT_URL}, `memtool serve`)")
    common.add_argument("--tenant", help="your tenant (or MEMTOOL_MCP_TENANT); local header identity")
    common.add_argument("--user", help="your user id (or MEMTOOL_MCP_USER)")
    common.add_argument("--roles", help="your roles, comma-separated, e.g. curator (or MEMTOOL_MCP_ROLES)")

    push = model_subparsers.add_parser(
        "push", parents=[common], help="store a YAML model as the tenant's next version (curators)",
        description="Checks the model (structure, and every metric on the tenant's warehouse) and stores it as the next "
        "version; a refused model prints each problem at its line of FILE and the version in force stays.",
    )  # fmt: skip
    push.add_argument("file", help="the model, YAML (or JSON)")
    push.add_argument(
        "--expected-version", type=int, help="the stored version this replaces (see `memtool model history`); omit for the first"
    )
    push.set_defaults(func=_run(_push))

    pull = model_subparsers.add_parser("pull", parents=[common], help="write the stored model as YAML")
    pull.add_argument("--version", type=int, help="a past stored version (default: the one in force)")
    pull.add_argument("-o", "--output", help="write to this file (default: stdout)")
    pull.set_defaults(func=_run(_pull))

    diff = model_subparsers.add_parser(
        "diff", parents=[common], help="unified diff of the stored model against FILE (exit 1 when they differ)"
    )
    diff.add_argument("file", help="the model, YAML (or JSON)")
    diff.add_argument("--version", type=int, help="a past stored version (default: the one in force)")
    diff.set_defaults(func=_run(_diff))

    history = model_subparsers.add_parser("history", parents=[common], help="every stored version, oldest first")
    history.set_defaults(func=_run(_history))


def _run(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args, _client(args)))
        except _Stop as stop:
            print(f"memtool model: {stop.message}", file=sys.stderr)
            return stop.code

    return run


def _client(args: argparse.Namespace) -> _Client:
    from memtool.settings import get_settings

    settings = get_settings()
    tenant, user = args.tenant or settings.mcp_tenant, args.user or settings.mcp_user
    roles = args.roles if args.roles is not None else ",".join(settings.mcp_roles)
    if not tenant or not user:
        raise _Stop(USAGE, "--tenant and --user are required (or MEMTOOL_MCP_TENANT and MEMTOOL_MCP_USER)")
    headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "Content-Type": "application/json"}
    if roles:
        headers["X-Memtool-Roles"] = roles
    return _Client(args.url, headers)


# ---- the commands ---------------------------------------------------------------------------


def _push(args: argparse.Namespace, api: _Client) -> int:
    from memtool.semantic.validation import ModelProblem, with_lines

    text, document = _read_model(args.file)
    reply = api.call("PUT", "/model", {"model": document, "expected_version": args.expected_version})
    body = reply.body or {}
    if reply.status in (200, 201):
        checked = "checked on the warehouse" if body.get("warehouse_checked") else "structure checked (no warehouse to check on)"
        print(f"{args.file}: stored as version {body['version']} (model_version {body['model_version']}; {checked})")
        return OK
    if reply.status == 422 and "problems" in body:
        problems = [ModelProblem(p.get("path", ""), p.get("message", "")) for p in body["problems"]]
        print(f"{args.file}: refused; the version in force stays ({len(problems)} problem{'s' * (len(problems) != 1)}):", file=sys.stderr)
        for problem in with_lines(problems, text):
            where = f"{args.file}:{problem.line}" if problem.line else args.file
            print(f"{where}: {problem}", file=sys.stderr)
        return REFUSED
    if reply.status == 409 and body.get("current_version") is not None:
        print(f"{args.file}: {body.get('message')}", file=sys.stderr)
        who = " ".join(f"--{k} {v}" for k, v in (("tenant", args.tenant), ("user", args.user)) if v)
        print(f"  stored version is {body['current_version']}: check `memtool model diff {args.file}{' ' + who if who else ''}`, "
              f"then push with --expected-version {body['current_version']}", file=sys.stderr)  # fmt: skip
        return REFUSED
    return _refused(reply)


def _pull(args: argparse.Namespace, api: _Client) -> int:
    reply = _get_model(api, args.version)
    if reply.status != 200:
        return _refused(reply)
    text = _yaml(reply.body["model"])
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{args.output}: version {reply.body['version']} (model_version {reply.body['model_version']})", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return OK


def _diff(args: argparse.Namespace, api: _Client) -> int:
    _, document = _read_model(args.file)
    reply = _get_model(api, args.version)
    if reply.status != 200:
        return _refused(reply)
    stored, local = _yaml(reply.body["model"]), _yaml(document)
    lines = list(
        difflib.unified_diff(
            stored.splitlines(keepends=True),
            local.splitlines(keepends=True),
            fromfile=f"stored v{reply.body['version']} ({reply.body['model_version']})",
            tofile=args.file,
        )
    )
    sys.stdout.writelines(lines)
    if not lines:
        print(f"no differences: {args.file} is stored v{reply.body['version']} ({reply.body['model_version']})")
    return REFUSED if lines else OK


def _history(args: argparse.Namespace, api: _Client) -> int:
    reply = api.call("GET", "/model/history")
    if reply.status != 200:
        return _refused(reply)
    for item in reply.body["items"]:
        print(f"v{item['version']}\t{item['model_version']}\t{item['updated_at']}\t{item['updated_by']}\t{item['summary']}")
    return OK


# ---- helpers ------------------------------------------------------------------------------------


def _get_model(api: _Client, version: int | None) -> _Reply:
    return api.call("GET", "/model", query={"version": str(version)} if version is not None else None)


def _refused(reply: _Reply) -> int:
    body = reply.body if isinstance(reply.body, dict) else {}
    print(f"memtool model: HTTP {reply.status} {body.get('error', '')}: {body.get('message', reply.body)}", file=sys.stderr)
    return REFUSED if 400 <= reply.status < 500 else USAGE


def _read_model(file: str) -> tuple[str, dict[str, Any]]:
    import yaml

    try:
        text = Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _Stop(USAGE, f"{file}: cannot read it ({exc})") from exc
    from memtool.semantic.validation import yaml_depth_problem

    too_deep = yaml_depth_problem(text)  # before PyYAML recurses into it (a RecursionError traceback)
    if too_deep is not None:
        raise _Stop(USAGE, f"{file}:{too_deep.line}: {too_deep.message}" if too_deep.line else f"{file}: {too_deep.message}")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark is not None else file
        problem = getattr(exc, "problem", None) or str(exc)
        raise _Stop(USAGE, f"{where}: YAML syntax error: {problem}") from exc
    if not isinstance(document, dict):
        raise _Stop(USAGE, f"{file}: a semantic model is a mapping, not {type(document).__name__}")
    from pydantic_core import to_jsonable_python

    return text, to_jsonable_python(document)  # YAML dates and the like as the JSON the API takes


def _yaml(document: Any) -> str:
    import yaml

    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False, width=120)
