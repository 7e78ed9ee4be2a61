"""`memtool knowledge add|sources|prefill|suggestions`: governed knowledge over the HTTP API.

``add FILE --kind ddl|etl_sql|document`` stores a file as a source (its next version when the
text changed); ``prefill --sources ID…`` runs a pre-fill task over those sources and prints each
suggestion's outcome; ``suggestions`` lists what pre-fill suggested, with the human value where
one overrides it. Identity and the API's URL are as for `memtool model push`
(``--url``, ``--tenant/--user/--roles``).

Exit codes: 0 done, 1 refused or not found, 2 usage, file or connection error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memtool.commands.model_remote import DEFAULT_URL, OK, REFUSED, USAGE, _Client, _client, _Reply, _Stop


def register(commands: Any) -> None:
    """Add ``knowledge`` and its subcommands to the CLI's ``add_subparsers()`` object."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=DEFAULT_URL, help=f"the memtool API (default {DEFAULT_URL}, `memtool serve`)")
    common.add_argument("--tenant", help="your tenant (or MEMTOOL_MCP_TENANT); local header identity")
    common.add_argument("--user", help="your user id (or MEMTOOL_MCP_USER)")
    common.add_argument("--roles", help="your roles, comma-separated, e.g. curator (or MEMTOOL_MCP_ROLES)")

    knowledge = commands.add_parser("knowledge", help="governed knowledge: sources, pre-fill suggestions (docs/knowledge.md)")
    sub = knowledge.add_subparsers(dest="knowledge_command", required=True)
    add = sub.add_parser("add", parents=[common], help="store a file as a source, or as its next version (curators)")
    add.add_argument("file", help="the text: DDL, ETL SQL or a document (UTF-8, up to 2 MiB)")
    add.add_argument("--kind", required=True, choices=["ddl", "etl_sql", "document"])
    add.add_argument("--name", help="the source's name (default: the file's name)")
    add.set_defaults(func=_run(_add))
    listing = sub.add_parser("sources", parents=[common], help="the tenant's sources, each at its newest version")
    listing.set_defaults(func=_run(_sources))
    prefill = sub.add_parser(
        "prefill", parents=[common], help="suggest definitions from sources (lineage from ETL SQL, comments from DDL; curators)",
        description="Freezes the sources at their versions now and writes a suggestion per column; a suggestion whose "
        "target a human changed since is superseded, and a human override is never replaced.",
    )  # fmt: skip
    prefill.add_argument("--sources", nargs="+", required=True, metavar="ID", help="source ids (see `memtool knowledge sources`)")
    prefill.set_defaults(func=_run(_prefill))
    suggestions = sub.add_parser("suggestions", parents=[common], help="what pre-fill suggested, with the value in effect")
    suggestions.add_argument("--review-state", choices=["unverified", "needs_review", "reviewed"])
    suggestions.set_defaults(func=_run(_suggestions))


def _run(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args, _client(args)))
        except _Stop as stop:
            print(f"memtool knowledge: {stop.message}", file=sys.stderr)
            return stop.code

    return run


def _add(args: argparse.Namespace, api: _Client) -> int:
    path = Path(args.file)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _Stop(USAGE, f"cannot read {path} as UTF-8 text: {error}") from None
    reply = api.call("POST", "/sources", {"name": args.name or path.name, "kind": args.kind, "text": text})
    if reply.status not in (200, 201):
        return _refused(reply)
    body = reply.body
    source = body["source"]
    what = "unchanged (the same text)" if body["unchanged"] else f"stored as version {source['version']}"
    print(f"{path}: {source['name']} {what}; id {source['id']}, {source['chars']:,} characters, sha256 {source['sha256'][:12]}")
    return OK


def _sources(args: argparse.Namespace, api: _Client) -> int:
    reply = api.call("GET", "/sources", query={"limit": "100"})
    if reply.status != 200:
        return _refused(reply)
    for source in reply.body["items"]:
        print(f"{source['id']}  v{source['version']}  {source['kind']:<8} {source['name']} ({source['chars']:,} characters)")
    if not reply.body["items"]:
        print("no sources yet: add one with `memtool knowledge add FILE --kind ddl|etl_sql|document`")
    return OK


def _prefill(args: argparse.Namespace, api: _Client) -> int:
    reply = api.call("POST", "/prefill", {"source_ids": args.sources})
    if reply.status != 201:
        return _refused(reply)
    task = reply.body
    inputs = ", ".join(f"{s['name']} v{s['version']}" for s in task["sources"])
    print(f"pre-fill {task['id']} over {inputs} (input {task['input_fingerprint'][:12]})")
    for target in task["targets"]:
        print(f"  {target['outcome']:<14} {target['target']}")
    for gap in task["gaps"]:
        print(f"  gap: {gap}")
    return OK


def _suggestions(args: argparse.Namespace, api: _Client) -> int:
    query = {"limit": "100", **({"review_state": args.review_state} if args.review_state else {})}
    reply = api.call("GET", "/suggestions", query=query)
    if reply.status != 200:
        return _refused(reply)
    for item in reply.body["items"]:
        who = f"override by {item['human_override']['by']}" if item["human_override"] else "suggested"
        print(f"{item['id']}  v{item['version']}  {item['review_state']:<12} {who}: {item['effective_value']}")
    return OK


def _refused(reply: _Reply) -> int:
    body = reply.body if isinstance(reply.body, dict) else {}
    field = f" ({body['field']})" if body.get("field") else ""
    print(f"memtool knowledge: {reply.status} {body.get('error', 'error')}{field}: {body.get('message', '')}", file=sys.stderr)
    return REFUSED
