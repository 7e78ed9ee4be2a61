"""`memtool model init`: draft a semantic model from a live warehouse, for a curator to finish.

Reads the warehouse a URL names (memtool.sql.urls), drafts the model (memtool.semantic.introspect),
checks that it validates, and prints the YAML to stdout or writes it to ``-o FILE``. Progress goes
to stderr. A URL of no known form, an unreachable server or a missing file is one line on stderr
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

_PROG = "memtool model init"


def register(model_subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``init`` to the subcommands of ``memtool model``."""
    p_init = model_subparsers.add_parser(
        "init",
        help="draft a semantic model (YAML) from a warehouse's live schema",
        description="Reads the warehouse's tables, columns, declared keys, row counts, value ranges and text values, "
        "and drafts a model: a row count per fact table, numeric columns as SUM or AVG measures (never keys, codes or "
        "calendar parts), text columns as dimensions (values past --max-values looked up in the warehouse), dates as "
        "time columns (a data set that ended long ago is read as of its end), joins from declared keys or from columns "
        "named as another table's key. The draft validates and compiles; curate its names, synonyms and definitions "
        "before use. Exit codes: 0 drafted, 2 the warehouse could not be read.",
    )
    p_init.add_argument(
        "--warehouse", required=True, metavar="URL", help="duckdb:///path.duckdb or postgresql://user[:password]@host[:port]/db"
    )
    p_init.add_argument("--schema", help="the schema to read (default: the connection's current schema)")
    p_init.add_argument(
        "--max-values",
        type=int,
        default=50,
        help="a dimension's values kept in the draft; a dimension with more keeps this many, the others are looked up "
        "in the warehouse when a question names them (default 50)",
    )
    p_init.add_argument("--name", help="the model's name (default: the schema, or the database or file name)")
    p_init.add_argument("-o", "--output", metavar="FILE", help="write the YAML here instead of stdout (never over an existing file)")
    p_init.add_argument("--force", action="store_true", help="with -o: replace FILE if it exists (a curated model would be lost)")
    p_init.set_defaults(func=model_init_command)

    p_validate = model_subparsers.add_parser(
        "validate",
        help="check a YAML model: its format, and that every metric and dimension compiles and runs on the warehouse",
        description="Reads FILE, checks it against the model format (every reference names something), then compiles "
        "every metric alone and by its dimensions and runs each query on the warehouse with LIMIT 0. Each failure is "
        "printed as FILE:LINE: place: message. Exit codes: 0 valid, 1 problems found, 2 the file or warehouse could "
        "not be read (YAML that does not parse, or is nested deeper than a model can be, included).",
    )
    p_validate.add_argument("file", metavar="FILE", help="the model (YAML)")
    p_validate.add_argument(
        "--warehouse", metavar="URL", help="duckdb:///path.duckdb or postgresql://…; without it only the format is checked"
    )
    p_validate.set_defaults(func=model_validate_command)


def model_init_command(args: argparse.Namespace) -> int:
    from memtool.semantic.catalog import Catalog
    from memtool.semantic.introspect import draft_model, read_catalog_facts, to_yaml
    from memtool.sql.urls import open_warehouse, redact_url
    from memtool.sql.warehouse import WarehouseError

    def progress(line: str) -> None:
        print(f"{_PROG}: {line}", file=sys.stderr, flush=True)

    if args.max_values < 1:
        print(f"{_PROG}: --max-values must be at least 1", file=sys.stderr)
        return 2
    if args.output and Path(args.output).exists() and not args.force:
        print(f"{_PROG}: {args.output} exists; a draft would replace what was curated there (add --force to replace it)", file=sys.stderr)
        return 2
    started = time.perf_counter()
    warehouse = None
    try:
        warehouse = open_warehouse(args.warehouse)
        progress(f"reading {redact_url(args.warehouse)}")
        facts = read_catalog_facts(warehouse, schema=args.schema, distinct_cap=args.max_values, progress=progress)
    except (ValueError, OSError, WarehouseError) as error:
        print(f"{_PROG}: cannot read the warehouse {redact_url(args.warehouse)}: {_one_line(str(error))}", file=sys.stderr)
        return 2
    finally:
        close = getattr(warehouse, "close", None)  # the port has no close; the adapters do
        if callable(close):
            close()
    if not facts.tables:
        where = f"schema {args.schema}" if args.schema else "the current schema"
        print(f"{_PROG}: no tables in {where} of {redact_url(args.warehouse)}", file=sys.stderr)
        return 2
    name = args.name or default_name(args.warehouse, args.schema)
    document = draft_model(facts, name=name, max_values=args.max_values)
    Catalog.model_validate(document)  # a draft that does not validate is a bug of the drafter, not the user's
    text = to_yaml(document)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    progress(
        f"drafted {len(document['metrics'])} metrics, {len(document['dimensions'])} dimensions and "
        f"{len(document['joins'])} joins over {len(document['tables'])} tables in {time.perf_counter() - started:.1f} s"
        + (f"; written to {args.output}" if args.output else "")
    )
    if not document["metrics"]:
        progress(
            "no metrics: a fact table needs a date (of its own, or of a header table it joins), and none has one, "
            "so every question will ask. Add a date column, or curate a source with a time_column by hand "
            "(docs/semantic-model.md); the draft's description lists the tables left out."
        )
    return 0


def model_validate_command(args: argparse.Namespace) -> int:
    import yaml

    from memtool.semantic.validation import parse_for_checks, warehouse_problems, with_lines, yaml_depth_problem
    from memtool.sql.urls import open_warehouse, redact_url
    from memtool.sql.warehouse import WarehouseError

    prog = "memtool model validate"
    try:
        text = Path(args.file).read_text(encoding="utf-8")
        # Before loading: PyYAML recurses once per level and would end in a RecursionError traceback.
        too_deep = yaml_depth_problem(text)
        if too_deep is not None:
            where = f"{args.file}:{too_deep.line}" if too_deep.line else args.file
            print(f"{where}: {too_deep.message}", file=sys.stderr)
            return 2
        document = yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{prog}: {args.file}: cannot read it ({exc})", file=sys.stderr)
        return 2
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{args.file}:{mark.line + 1}" if mark is not None else args.file
        print(f"{where}: YAML syntax error: {getattr(exc, 'problem', None) or exc}", file=sys.stderr)
        return 2
    model, problems = parse_for_checks(document)
    checked = "the format"
    if model is not None and not problems and args.warehouse:
        try:
            warehouse = open_warehouse(args.warehouse)
            live = warehouse.describe()  # reachable at all: else one line and exit 2, not a problem per metric
            missing = [t for t in model.physical_tables if t not in live.tables]
            if missing:
                print(f"{args.file}: the warehouse {redact_url(args.warehouse)} has no table {', '.join(missing)} that the model reads")
                return 1
            print(f"{prog}: running every metric and dimension on {redact_url(args.warehouse)} (LIMIT 0)", file=sys.stderr)
            problems = warehouse_problems(model, warehouse)
            checked = "the format and the warehouse"
        except (ValueError, WarehouseError) as exc:
            print(f"{prog}: {redact_url(args.warehouse)}: {_one_line(str(exc))}", file=sys.stderr)
            return 2
    for problem in with_lines(problems, text):
        where = f"{args.file}:{problem.line}" if problem.line else args.file
        print(f"{where}: {problem.path}: {problem.message}")
    if problems:
        print(f"{prog}: {len(problems)} problem(s); {checked} checked", file=sys.stderr)
        return 1
    assert model is not None
    print(f"{args.file}: valid ({len(model.metrics)} metrics, {len(model.dimensions)} dimensions; {checked} checked)")
    return 0


def default_name(url: str, schema: str | None) -> str:
    """The schema, else the database (``postgresql://…/shop``) or the file's stem (``duckdb:///x/tpch.duckdb``)."""
    raw = schema or Path(urlsplit(url).path).stem or "warehouse"
    cleaned = re.sub(r"[^A-Za-z0-9_]+", "_", raw).strip("_")
    return cleaned or "warehouse"


def _one_line(text: str) -> str:
    return " ".join(text.split())
