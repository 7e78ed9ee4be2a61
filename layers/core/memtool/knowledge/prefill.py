"""Pre-fill: definitions suggested from DDL and ETL SQL, each with the quotes it rests on.

Rules only, no model (docs/knowledge.md, Pre-fill):

- **DDL** (``CREATE TABLE``, ``COMMENT ON COLUMN``): every table's columns with their types,
  primary keys, and comments (``-- …`` on the column's line, ``COMMENT '…'``, ``COMMENT ON``).
- **ETL SQL** (``INSERT INTO t (cols) SELECT …``, ``CREATE TABLE t AS SELECT …``): for each
  target column, the source columns that feed it (sqlglot's lineage, through CTEs and subqueries,
  resolved to table names), its expression, and the filters the statement applies (its WHERE
  conditions and its CTEs').

Each suggestion carries ``facts``: lines of the source texts, verbatim, that say what the
suggestion says (the projection's line, the WHERE lines, the column's DDL line). What the input
does not cover is a ``gap``: a target column no source column feeds, a table read with no DDL
among the sources, a column with neither comment nor lineage, a statement that does not parse.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memtool.memory.slots import SUGGESTION_KEY_PREFIX

MAX_SUGGESTIONS = 300  # per pre-fill task
MAX_STATEMENT_CHARS = 20_000  # one statement read at most (a 300-line ETL INSERT is about 15,000)
READ_SECONDS = 6.0  # reading the sources, per suggest() (POST /prefill reads them twice: planning and running; Lambda: 28 s)
_DIALECT = "postgres"  # how DDL and ETL SQL are read and expressions written back (Redshift's family)
_KEY_PART = re.compile(r"[^A-Za-z0-9_.-]+")
_CLAUSE_END = re.compile(r"^\s*(GROUP\s+BY|ORDER\s+BY|HAVING|LIMIT|UNION|WINDOW|QUALIFY|\)|;)", re.IGNORECASE)


@dataclass(frozen=True)
class SourceText:
    """One frozen source version, as a pre-fill reads it."""

    id: str
    version: int
    name: str
    kind: str  # ddl | etl_sql | document
    text: str


@dataclass(frozen=True)
class Fact:
    source_id: str
    version: int
    quote: str


@dataclass(frozen=True)
class ColumnInfo:
    table: str
    column: str
    type: str
    comment: str | None
    primary_key: bool
    fact: Fact | None  # the column's line in the DDL


@dataclass(frozen=True)
class ColumnLineage:
    table: str
    column: str
    expression: str
    inputs: tuple[str, ...]  # table.column, resolved through aliases and CTEs
    filters: tuple[str, ...]  # the outer query's WHERE conditions
    facts: tuple[Fact, ...]
    groups: tuple[str, ...] = ()  # its HAVING conditions


@dataclass(frozen=True)
class Suggestion:
    key: str  # suggestion.<table>.<column>
    target: str  # <table>.<column>
    text: str
    lineage: dict[str, Any]
    facts: tuple[Fact, ...]
    gaps: tuple[str, ...] = ()


@dataclass
class Reading:
    deadline: float  # time.monotonic() past which no more statements are read (without limits)
    limits: dict[str, int] | None = None  # source id -> statements to read, exactly
    read: dict[str, int] = field(default_factory=dict)  # source id -> statements read
    columns: dict[str, ColumnInfo] = field(default_factory=dict)  # "table.column" -> info
    tables: set[str] = field(default_factory=set)
    lineage: list[ColumnLineage] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)


def suggestion_key(target: str) -> str:
    return SUGGESTION_KEY_PREFIX + _KEY_PART.sub("_", target.lower())[:180]


def quote_found(text: str, quote: str) -> bool:
    """A fact holds only when its quote is in the cited version's text, verbatim."""
    return bool(quote.strip()) and quote in text


def suggest(
    sources: Sequence[SourceText], *, seconds: float = READ_SECONDS, statements: Mapping[str, int] | None = None
) -> tuple[list[Suggestion], list[str], dict[str, int]]:
    """Suggestions from every DDL and ETL SQL source, what the input did not cover, and how many
    statements of each source were read. Statements are read for at most ``seconds`` (sqlglot's
    lineage is about 10 ms a statement), and what is left is a gap, so a task fits a request;
    given ``statements`` (source id -> count, as a first reading returned), exactly that many are
    read, so running a task suggests what planning it did, however long it takes."""
    reading = Reading(deadline=time.monotonic() + seconds, limits=dict(statements) if statements is not None else None)
    for source in sources:
        if source.kind == "ddl":
            _read_ddl(source, reading)
    for source in sources:
        if source.kind == "etl_sql":
            _read_etl(source, reading)
        elif source.kind == "document":
            reading.gaps.append(f"{source.name}: a document; pre-fill reads DDL and ETL SQL only")
    suggestions: list[Suggestion] = []
    fed: set[str] = set()
    for item in reading.lineage:
        target = f"{item.table}.{item.column}"
        fed.add(target)
        suggestions.append(_from_lineage(item, reading))
    for target, info in reading.columns.items():
        if target in fed:
            continue
        if info.comment:
            suggestions.append(_from_comment(info))
        elif not info.primary_key:
            reading.gaps.append(f"{target}: no comment in its DDL and no ETL among the sources feeds it")
    suggestions = _distinct_keys(suggestions)
    for made in suggestions:
        if not made.facts:
            reading.gaps.append(f"{made.target}: no line of the sources could be quoted for it")
    if len(suggestions) > MAX_SUGGESTIONS:
        reading.gaps.append(f"{len(suggestions) - MAX_SUGGESTIONS} more suggestions were left out (at most {MAX_SUGGESTIONS} a task)")
        suggestions = suggestions[:MAX_SUGGESTIONS]
    return suggestions, _unique(reading.gaps), dict(reading.read)


# ---- DDL ---------------------------------------------------------------------------------------


def _read_ddl(source: SourceText, reading: Reading) -> None:
    from sqlglot import exp

    for statement, piece in _statements(source, reading):
        if isinstance(statement, exp.Create) and statement.kind == "TABLE" and isinstance(statement.this, exp.Schema):
            _table_columns(source, statement.this, reading, piece)
        elif isinstance(statement, exp.Comment) and str(statement.args.get("kind", "")).upper() == "COLUMN":
            column = statement.this
            if isinstance(column, exp.Column) and column.table:
                table = f"{column.db}.{column.table}" if column.db else column.table
                key = f"{table}.{column.name}".lower()
                text = statement.expression.name if isinstance(statement.expression, exp.Literal) else None
                line = _line_with(piece, rf"COMMENT\s+ON\s+COLUMN\s+[\w.\"]*{re.escape(column.name)}\b")
                known = reading.columns.get(key)
                if known is not None and text:
                    fact = Fact(source.id, source.version, line) if line else known.fact
                    reading.columns[key] = ColumnInfo(known.table, known.column, known.type, text, known.primary_key, fact)


def _table_columns(source: SourceText, schema, reading: Reading, piece: str) -> None:
    """A CREATE TABLE's columns, each quoted from its own line of this statement: a line that
    defines two columns gives neither its comment (whose would it be?), and says so."""
    from sqlglot import exp

    table = _table_name(schema.this)
    reading.tables.add(table)
    keys: set[str] = set()
    for item in schema.expressions:
        if isinstance(item, exp.PrimaryKey):
            keys.update(_identifier(e) for e in item.expressions)
    columns = [item for item in schema.expressions if isinstance(item, exp.ColumnDef)]
    lines = [line for line in piece.splitlines() if line.strip()]
    for item in columns:
        info = _column_info(source, table, item, columns, lines, keys, reading)
        reading.columns[f"{table}.{info.column}"] = info


def _column_info(source: SourceText, table: str, item, columns: list, lines: list[str], keys: set[str], reading: Reading) -> ColumnInfo:
    from sqlglot import exp

    name = _identifier(item)
    constraints = item.args.get("constraints") or []
    primary = name in keys or any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in constraints)
    comment = next(
        (c.kind.this.name for c in constraints if isinstance(c.kind, exp.CommentColumnConstraint) and c.kind.this is not None),
        None,
    )
    line = next((raw.strip() for raw in lines if _defines(raw, item.name)), None)
    if line is not None and sum(_defines(line, other.name) for other in columns) > 1:
        if comment is None and "--" in line:
            reading.gaps.append(f"{table}.{name}: its line defines several columns; the line's comment is not taken for it")
        line = None if comment is None else line
    elif comment is None and line and "--" in line:
        comment = line.split("--", 1)[1].strip() or None
    kind = item.args.get("kind")
    typed = _written_type(line, item.name) or (kind.sql(dialect=_DIALECT) if kind is not None else "")
    return ColumnInfo(table, name, typed, comment, primary, Fact(source.id, source.version, line) if line else None)


def _identifier(node) -> str:
    """A column's name: as written when quoted ("Full Name", "ID"), else folded to lower case."""
    this = node.this if hasattr(node, "this") else None
    quoted = bool(getattr(this, "args", {}).get("quoted")) if this is not None else False
    return node.name if quoted else node.name.lower()


def _defines(line: str, name: str) -> bool:
    """Whether ``line`` (its code, before a ``--`` comment) defines the column ``name``."""
    code = line.split("--", 1)[0]
    return re.search(rf'(?:^|,|\()\s*"?{re.escape(name)}"?\s+[A-Za-z]', code, re.IGNORECASE if name == name.lower() else 0) is not None


_CONSTRAINT = r"(?:NOT\s+NULL|NULL|PRIMARY\s+KEY|REFERENCES|DEFAULT|COMMENT|CONSTRAINT|UNIQUE|CHECK|GENERATED|IDENTITY)\b"


def _written_type(line: str | None, name: str) -> str | None:
    """The column's type as the DDL writes it (NUMBER(38,0), TIMESTAMP_NTZ), from its own line."""
    if not line:
        return None
    code = line.split("--", 1)[0]
    found = re.search(rf'(?:^|,|\()\s*"?{re.escape(name)}"?\s+(.+?)\s*(?:{_CONSTRAINT}.*)?,?\s*$', code, re.IGNORECASE)
    if found is None:
        return None
    written = found.group(1).strip().rstrip(",").strip()
    return written if written and "," not in written.replace(" ", "").split(")")[-1] else None


# ---- ETL SQL -----------------------------------------------------------------------------------


def _read_etl(source: SourceText, reading: Reading) -> None:
    from sqlglot import exp

    for statement, text in _statements(source, reading):
        if len(reading.lineage) >= MAX_SUGGESTIONS:
            reading.gaps.append(f"{source.name}: not read to its end ({MAX_SUGGESTIONS} suggestions is a task's limit)")
            return
        target_columns: list[str] = []
        if isinstance(statement, exp.Insert):
            into = statement.this
            if isinstance(into, exp.Schema):
                target = _table_name(into.this)
                target_columns = [c.name.lower() for c in into.expressions]
            else:
                target = _table_name(into)
            query = statement.expression
        elif isinstance(statement, exp.Create) and statement.kind in ("TABLE", "VIEW") and isinstance(statement.expression, exp.Query):
            target, query = _table_name(statement.this), statement.expression
        else:
            continue
        if not isinstance(query, exp.Select):
            reading.gaps.append(f"{source.name}: the query loading {target} is not a plain SELECT; its lineage was not read")
            continue
        names = [p.alias_or_name.lower() for p in query.selects]
        if target_columns and len(target_columns) != len(names):
            reading.gaps.append(f"{source.name}: INSERT INTO {target} names {len(target_columns)} columns for {len(names)} values")
            continue
        filters = tuple(_filters(query))
        groups = tuple(_filters(query, "having"))
        filter_facts = tuple(Fact(source.id, source.version, q) for q in _where_lines(text))
        outer = "\n".join(raw for raw, depth in _outer_lines(text) if depth == 0)
        graph = _lineage(query, source, reading)
        for position, projection in enumerate(query.selects):
            column = target_columns[position] if target_columns else names[position]
            inputs = graph.get(projection.alias_or_name, ())
            line = _line_with(outer, rf"\bAS\s+\"?{re.escape(projection.alias_or_name)}\"?\s*,?\s*(--.*)?$") or _line_with(
                outer, re.escape(projection.sql(dialect=_DIALECT)[:60])
            )
            facts = ((Fact(source.id, source.version, line),) if line else ()) + filter_facts
            expression = (projection.unalias() if isinstance(projection, exp.Alias) else projection).sql(dialect=_DIALECT)
            reading.lineage.append(ColumnLineage(target, column, expression, inputs, filters, facts, groups))
            if not inputs:
                reading.gaps.append(f"{target}.{column}: no source column feeds it ({expression})")
            for name in inputs:
                table = name.rsplit(".", 1)[0]
                if table not in reading.tables:
                    reading.gaps.append(f"{table}: read by {source.name} but no DDL among the sources describes it")
                elif name not in reading.columns:
                    reading.gaps.append(f"{name}: read by {source.name} but not in {table}'s DDL")


def _lineage(query, source: SourceText, reading: Reading) -> dict[str, tuple[str, ...]]:
    """Each projection's source columns (table.column), from one lineage walk of the statement."""
    from sqlglot import exp
    from sqlglot.lineage import lineage

    try:
        nodes = lineage(None, query, schema={}, dialect=_DIALECT)
    except Exception as error:  # noqa: BLE001 - sqlglot raises many kinds; each is a gap, not a failure
        reading.gaps.append(f"{source.name}: the lineage of a statement could not be read ({type(error).__name__})")
        return {}
    graph: dict[str, tuple[str, ...]] = {}
    for column, node in nodes.items():
        found = {
            f"{_table_name(item.source)}.{item.name.rsplit('.', 1)[-1].lower()}"
            for item in node.walk()
            if not item.downstream and isinstance(item.source, exp.Table)
        }
        graph[column] = tuple(sorted(found))  # sqlglot walks its lineage graph in no fixed order
    return graph


def _statement_texts(text: str) -> list[str]:
    """The text split after each line that ends with ';': a statement each, as SQL files are written."""
    pieces, current = [], []
    for line in text.splitlines():
        current.append(line)
        if line.rstrip().endswith(";"):
            pieces.append("\n".join(current))
            current = []
    if any(line.strip() and not line.strip().startswith("--") for line in current):
        pieces.append("\n".join(current))
    return pieces


def _filters(query, clause: str = "where") -> Iterable[str]:
    """The outer query's own conditions (its WHERE, or HAVING), split at its top-level ANDs: the
    conditions of a subquery (NOT EXISTS …) or a CTE are that query's, not the target rows'."""
    from sqlglot import exp

    found = query.args.get(clause)
    if found is None:
        return
    stack = [found.this]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.And):
            stack.extend([node.expression, node.this])
        else:
            yield node.sql(dialect=_DIALECT)


def _outer_lines(text: str) -> list[tuple[str, int]]:
    """Each line of a statement with the parenthesis depth at its start (strings and ``--``
    comments skipped): the outer query's lines are at depth 0, a CTE's or a subquery's deeper."""
    depth, out, quote = 0, [], None
    for raw in text.splitlines():
        out.append((raw, depth))
        i = 0
        while i < len(raw):
            char = raw[i]
            if quote:
                if char == quote:
                    quote = None
            elif char in "'\"":
                quote = char
            elif raw.startswith("--", i):
                break
            elif char == "(":
                depth += 1
            elif char == ")":
                depth = max(0, depth - 1)
            i += 1
    return out


def _where_lines(text: str) -> list[str]:
    """The lines of the outer query's WHERE clause, verbatim: from the depth-0 line whose code
    says WHERE to the clause's end (GROUP BY, ORDER BY, HAVING, LIMIT, ';' or a deeper line's end)."""
    lines, inside = [], False
    for raw, depth in _outer_lines(text):
        code = raw.split("--", 1)[0]
        if depth == 0 and re.search(r"\bWHERE\b", code, re.IGNORECASE):
            inside = True
        elif inside and depth == 0 and _CLAUSE_END.match(code):
            inside = False
        if inside and raw.strip() and depth == 0:
            lines.append(raw.strip())
        if inside and code.rstrip().endswith(";"):
            inside = False
    return lines


# ---- suggestions -------------------------------------------------------------------------------


def _from_lineage(item: ColumnLineage, reading: Reading) -> Suggestion:
    target = f"{item.table}.{item.column}"
    text = f"{target} = {item.expression}"
    if item.inputs:
        text += f", from {', '.join(item.inputs)}"
    if item.filters:
        text += f"; rows where {' AND '.join(item.filters)}"
    if item.groups:
        text += f"; groups where {' AND '.join(item.groups)}"
    described = reading.columns.get(target)
    facts = list(item.facts)
    if described is not None and described.comment:
        text += f" ({described.comment})"
        if described.fact:
            facts.append(described.fact)
    lineage = {"inputs": list(item.inputs), "expression": item.expression, "filters": list(item.filters), "having": list(item.groups)}
    gaps = () if item.inputs else (f"{target}: no source column feeds it",)
    return Suggestion(suggestion_key(target), target, text, lineage, tuple(facts), gaps)


def _from_comment(info: ColumnInfo) -> Suggestion:
    target = f"{info.table}.{info.column}"
    text = f"{target} ({info.type}): {info.comment}" if info.type else f"{target}: {info.comment}"
    facts = (info.fact,) if info.fact else ()
    return Suggestion(suggestion_key(target), target, text, {"inputs": [], "expression": None, "filters": [], "having": []}, facts)


# ---- helpers -----------------------------------------------------------------------------------


def _statements(source: SourceText, reading: Reading) -> Iterator[tuple[Any, str]]:
    """Each statement with the text it was parsed from (its quotes come from there), piece by
    piece, until the task's reading time is spent (then a gap says how far it got)."""
    import sqlglot
    from sqlglot.errors import SqlglotError

    pieces = _statement_texts(source.text)
    limit = reading.limits.get(source.id, len(pieces)) if reading.limits is not None else None
    for index, piece in enumerate(pieces):
        reading.read[source.id] = index
        if (limit is not None and index >= limit) or (limit is None and time.monotonic() > reading.deadline):
            reading.gaps.append(f"{source.name}: read {index} of its {len(pieces)} statements (a task's reading time is spent)")
            return
        line = source.text[: source.text.find(piece)].count("\n") + 1 if piece in source.text else None
        where = f" at line {line}" if line else ""
        if len(piece) > MAX_STATEMENT_CHARS:  # sqlglot's time grows with one statement's size: not read
            reading.gaps.append(f"{source.name}: a statement{where} is longer than {MAX_STATEMENT_CHARS:,} characters; not read")
            continue
        try:
            parsed = [s for s in sqlglot.parse(piece, read=_DIALECT) if s is not None]
        except (SqlglotError, RecursionError, ValueError) as error:  # nesting too deep is a RecursionError
            reason = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
            reading.gaps.append(f"{source.name}: a statement{where} does not parse as SQL ({reason})")
            continue
        for statement in parsed:
            yield statement, piece
    reading.read[source.id] = len(pieces)


def _table_name(table) -> str:
    name = table.name.lower()
    db = table.args.get("db")
    return f"{db.name.lower()}.{name}" if db is not None and db.name else name


def _line_with(text: str, pattern: str) -> str | None:
    """The first line of ``text`` matching ``pattern``, stripped: a verbatim quote."""
    compiled = re.compile(pattern, re.IGNORECASE)
    for raw in text.splitlines():
        if compiled.search(raw):
            return raw.strip()
    return None


def _distinct_keys(suggestions: list[Suggestion]) -> list[Suggestion]:
    """Targets whose slot keys collide ("Full Name" and full_name) get a key each, by a digest of
    the exact target, so no suggestion overwrites another's."""
    import hashlib
    from collections import Counter
    from dataclasses import replace

    seen = Counter(s.key for s in suggestions)
    return [
        replace(s, key=f"{s.key[:170]}~{hashlib.sha256(s.target.encode('utf-8')).hexdigest()[:8]}") if seen[s.key] > 1 else s
        for s in suggestions
    ]


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


__all__ = ["Fact", "SUGGESTION_KEY_PREFIX", "SourceText", "Suggestion", "quote_found", "suggest", "suggestion_key"]
