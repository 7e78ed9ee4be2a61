"""Guardrails for generated SQL: one read-only SELECT over allow-listed tables and columns, row-capped.

``check_sql`` parses the text with sqlglot in the Redshift dialect and either refuses it with a
code and a sentence a user can read, or returns the SQL that may run: regenerated from the parsed
tree (so comments and anything sqlglot did not understand never reach the warehouse), with
``SELECT *`` over real tables expanded to the allow-listed columns and a top-level LIMIT no larger
than the policy's row cap.

The column check is name-based on purpose (see ``_check_columns``): the warehouse user's own
grants stay the last line of defence for columns that must never be read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memtool.sql.grants import table_granted

if TYPE_CHECKING:  # sqlglot is imported lazily: a Lambda cold start that never guards SQL skips it
    from sqlglot import exp

    from memtool.semantic.catalog import Catalog
    from memtool.sql.live_schema import LiveSchema

DIALECT = "redshift"
MAX_SQL_CHARS = 20_000

# Redshift and PostgreSQL system relations: catalog views, logs (STL), snapshots (STV), views over
# both (SVL, SVV, SVCS), the SYS monitoring views and the information schema.
SYSTEM_TABLE_PREFIXES = ("pg_", "stl_", "stv_", "svl_", "svv_", "svcs_", "stcs_", "sys_")
SYSTEM_SCHEMAS = frozenset({"pg_catalog", "information_schema", "pg_internal", "pg_automv", "sys"})

# What generated SQL may call is an allow-list, not a deny-list: a function is allowed when sqlglot
# reads it as one of these classes (scalar, conditional, date, string and aggregate functions and
# the window functions), or, for the few it reads as anonymous, when its name is listed for the
# engine's dialect. Everything else is refused: table functions in any position (FROM, LATERAL, a
# subquery, a CTE: query(), read_text(), duckdb_tables(), unnest, generate_series), functions that
# read settings, sessions or the server (current_setting, version, current_user), and any function
# nobody listed, because what nobody listed nobody checked.
ALLOWED_FUNCTION_CLASSES = frozenset(
    {
        # connectives and conditionals
        "And", "Or", "Xor", "Case", "If", "Coalesce", "Nullif", "Nvl2", "Greatest", "Least", "DecodeCase", "Decode",
        # casts
        "Cast", "TryCast",
        # numbers
        "Abs", "Ceil", "Floor", "Round", "Trunc", "Sign", "Sqrt", "Cbrt", "Pow", "Exp", "Ln", "Log", "SafeDivide",
        # text
        "Lower", "Upper", "Initcap", "Trim", "Length", "Substring", "Left", "Right", "Concat", "ConcatWs", "Replace",
        "StrPosition", "SplitPart", "Pad", "Reverse", "Repeat", "Translate", "Chr", "Ascii", "RegexpLike",
        "RegexpReplace", "RegexpExtract", "StartsWith", "EndsWith", "Contains",
        # dates and times
        "CurrentDate", "CurrentTimestamp", "CurrentTime", "Date", "Extract", "DateTrunc", "TimestampTrunc", "DatetimeTrunc",
        "TimeTrunc", "DateAdd", "DateSub", "DateDiff", "TsOrDsAdd", "TsOrDsDiff", "TsOrDsToDate", "AddMonths", "LastDay",
        "MonthsBetween", "Year", "Quarter", "Month", "Week", "WeekOfYear", "Day", "DayOfWeek", "DayOfWeekIso", "DayOfMonth",
        "DayOfYear", "Hour", "Minute", "Second", "TimeToStr", "ToChar", "StrToDate", "StrToTime", "TimeStrToDate",
        "TimestampAdd", "TimestampDiff", "TimestampSub", "DateStrToDate", "TimeToUnix", "ConvertTimezone",
        # aggregates
        "Sum", "Count", "Avg", "Min", "Max", "CountIf", "ApproxDistinct", "Median", "PercentileCont", "PercentileDisc",
        "Stddev", "StddevPop", "StddevSamp", "Variance", "VariancePop", "Corr", "CovarPop", "CovarSamp", "AnyValue",
        "GroupConcat", "LogicalAnd", "LogicalOr", "RegrSlope", "RegrIntercept", "RegrR2", "RegrCount",
        # window functions
        "RowNumber", "Rank", "DenseRank", "PercentRank", "CumeDist", "Ntile", "Lag", "Lead", "FirstValue", "LastValue",
        "NthValue",
        # EXISTS (subquery): its subquery is checked like any other
        "Exists",
    }
)  # fmt: skip
# Functions sqlglot reads as anonymous calls, per engine dialect (the names that engine has).
ALLOWED_ANONYMOUS_FUNCTIONS: Mapping[str, frozenset[str]] = {
    "redshift": frozenset({"isnull", "ratio_to_report", "nvl2"}),
    "postgres": frozenset({"isnull", "getdate", "date_part"}),
    "duckdb": frozenset({"isnull", "date_part", "dateadd", "to_date", "btrim", "now", "getdate"}),
}
# Names refused whatever a dialect's parser makes of them (a second net under the allow-list):
# they sleep, read files, reach other databases, change settings or end sessions.
FORBIDDEN_FUNCTIONS = frozenset(
    {
        "pg_sleep", "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_terminate_backend",
        "pg_cancel_backend", "lo_import", "lo_export", "lo_unlink", "dblink", "dblink_exec", "current_setting",
        "set_config", "sleep", "version", "current_version", "txid_current", "query", "query_table", "read_text",
        "read_blob", "read_csv", "read_csv_auto", "read_parquet", "read_json", "read_json_auto", "glob", "getenv",
    }
)  # fmt: skip
FORBIDDEN_FUNCTION_PREFIXES = ("pg_", "lo_", "dblink", "duckdb_", "pragma_", "sqlite_")
ENGINE_DIALECTS = frozenset(ALLOWED_ANONYMOUS_FUNCTIONS)


@dataclass(frozen=True)
class GuardPolicy:
    """What generated SQL may read: ``allowed`` maps table -> columns (names are case-insensitive).

    A key may be schema-qualified (``"analytics.orders"``); a query then has to name the
    table the same way. A bare key matches only a bare table reference.
    """

    allowed: Mapping[str, Collection[str]]
    max_rows: int = 1000
    timeout_seconds: float = 30
    max_sql_chars: int = MAX_SQL_CHARS
    engine: str = DIALECT  # the dialect the warehouse runs (the SQL is checked in it too): redshift, postgres, duckdb

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_DIALECTS:
            raise ValueError(f"engine must be one of {', '.join(sorted(ENGINE_DIALECTS))}")
        if self.max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        if self.timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        normalized = {table.lower(): tuple(dict.fromkeys(c.lower() for c in cols)) for table, cols in self.allowed.items()}
        object.__setattr__(self, "allowed", normalized)

    @classmethod
    def from_model(
        cls, model: Catalog, *, granted: Collection[str] | None = None, max_rows: int = 1000, timeout_seconds: float = 30
    ) -> GuardPolicy:
        """The tables and columns the semantic model declares (when the live schema cannot be read),
        those the operator granted (``granted`` patterns) only."""
        allowed: dict[str, list[str]] = {}
        for table in model.tables:
            if granted is None or table_granted(table.physical, tuple(granted)):
                allowed.setdefault(table.physical, []).extend(table.columns)
        return cls(allowed, max_rows, timeout_seconds)

    @classmethod
    def for_model(
        cls,
        schema: LiveSchema,
        model: Catalog,
        *,
        foreign_tables: Collection[str] = (),
        granted: Collection[str] | None = None,
        max_rows: int = 1000,
        timeout_seconds: float = 30,
    ) -> GuardPolicy:
        """The live tables the tenant's model reads, with the columns they have now.

        With ``granted`` (what the operator gave the tenant: table patterns), no other table is
        allowed, whatever the model names: a curator writes the model, the operator the grant. When a
        table of the model is gone from the warehouse (renamed under it), the live tables no other
        model claims are allowed too (within the grant), so a diagnosis can try the new name; a table
        of another tenant's model (``foreign_tables``) is never allowed that way.
        """
        patterns = tuple(p.lower() for p in granted) if granted is not None else None
        own = {t.lower() for t in model.physical_tables}
        live = schema.guard_allowlist()
        if patterns is not None:
            own = {t for t in own if table_granted(t, patterns)}
            live = {t: cols for t, cols in live.items() if table_granted(t, patterns)}
        foreign = {t.lower() for t in foreign_tables} - own
        drifted = any(table not in live for table in own)
        allowed = {t: cols for t, cols in live.items() if t in own or (drifted and t not in foreign)}
        return cls(allowed, max_rows, timeout_seconds)

    @classmethod
    def from_live_schema(
        cls, schema: LiveSchema, *, granted: Collection[str] | None = None, max_rows: int = 1000, timeout_seconds: float = 30
    ) -> GuardPolicy:
        """Every table and column the warehouse has now (within the grant), so a drifted name is
        refused before it runs.

        The warehouse user's grants already bound what information_schema shows, so the live
        schema is the widest allow-list that can run at all.
        """
        live = schema.guard_allowlist()
        if granted is not None:
            patterns = tuple(p.lower() for p in granted)
            live = {t: cols for t, cols in live.items() if table_granted(t, patterns)}
        return cls(live, max_rows, timeout_seconds)

    def columns_of(self, table_key: str) -> tuple[str, ...]:
        return tuple(self.allowed[table_key])

    def on_engine(self, engine: str) -> GuardPolicy:
        """The same allow-list, checked in ``engine``'s dialect as well (the warehouse's ``dialect``)."""
        from dataclasses import replace

        return replace(self, engine=engine)


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    sql: str | None  # the rewritten, safe SQL (Redshift dialect) when allowed
    reason: str | None  # why it was refused, in a sentence a user can read
    code: str | None  # e.g. not_select, forbidden_table, system_catalog, parse_error
    tables: list[str] = field(default_factory=list)  # allow-listed tables the query reads
    limit: int = 0  # the top-level LIMIT the rewritten SQL carries

    def as_error(self) -> dict[str, str]:
        return {"error": self.code or "guardrail", "message": self.reason or "The query was refused."}


class _Refusal(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def check_sql(sql: str, policy: GuardPolicy) -> GuardVerdict:
    """Refuse ``sql`` with a code and a reason, or return the row-capped SQL that may run."""
    try:
        return _check(sql, policy)
    except _Refusal as refusal:
        return GuardVerdict(False, None, refusal.reason, refusal.code)
    except Exception as error:  # noqa: BLE001 - fail closed: what the checks cannot follow does not run
        return GuardVerdict(False, None, f"The query could not be verified as safe ({type(error).__name__}).", "unsupported")


def _check(sql: str, policy: GuardPolicy) -> GuardVerdict:
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.errors import ErrorLevel, ParseError, TokenError, UnsupportedError

    if not isinstance(sql, str) or not sql.strip():
        raise _Refusal("parse_error", "The query is empty.")
    if len(sql) > policy.max_sql_chars:
        raise _Refusal("too_long", f"The query is {len(sql):,} characters long; the limit is {policy.max_sql_chars:,}.")

    dialect = Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(sql)
    except TokenError as error:
        raise _Refusal("parse_error", f"The query could not be read: {_first_line(error)}") from error
    _check_comments(tokens)
    try:
        statements = [s for s in dialect.parser().parse(tokens, sql) if s is not None]
    except (ParseError, TokenError) as error:
        raise _Refusal("parse_error", f"The query could not be parsed as Redshift SQL: {_first_line(error)}") from error
    except RecursionError as error:
        raise _Refusal("parse_error", "The query is nested too deeply to check.") from error
    if not statements:
        raise _Refusal("parse_error", "The query is empty.")
    if len(statements) > 1:
        raise _Refusal("multiple_statements", f"Only one statement may run; this text holds {len(statements)}.")

    tree = statements[0]
    _check_read_only(tree)
    tables = _check_tables(tree, policy)
    _check_functions(tree, DIALECT)
    _expand_stars(tree, policy)
    _check_columns(tree, policy)
    limit = _cap_rows(tree, policy.max_rows)
    try:
        safe_sql = tree.sql(dialect=DIALECT, comments=False, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as error:
        raise _Refusal("unsupported", f"The query uses syntax Redshift does not support: {_first_line(error)}") from error
    if policy.engine != DIALECT:
        _check_as_the_engine_reads_it(safe_sql, policy)
    return GuardVerdict(True, safe_sql, None, None, tables=tables, limit=limit)


def _check_as_the_engine_reads_it(safe_sql: str, policy: GuardPolicy) -> None:
    """The warehouse runs the SQL transpiled to its own dialect: read that text back the way the
    engine's tokenizer reads it and check it again, so a literal or comment that two lexers read
    differently cannot turn into a relation or a function the Redshift reading never saw."""
    from sqlglot import parse, transpile
    from sqlglot.errors import ErrorLevel, ParseError, TokenError, UnsupportedError

    try:
        engine_sql = transpile(safe_sql, read=DIALECT, write=policy.engine, unsupported_level=ErrorLevel.RAISE)
        statements = [s for sql in engine_sql for s in parse(sql, read=policy.engine) if s is not None]
    except (ParseError, TokenError, UnsupportedError) as error:
        raise _Refusal("unsupported", f"The query cannot be checked as {policy.engine} runs it: {_first_line(error)}") from error
    if len(statements) != 1:
        raise _Refusal("multiple_statements", f"As {policy.engine} reads it, the query holds {len(statements)} statements.")
    tree = statements[0]
    _check_read_only(tree)
    _check_tables(tree, policy)
    _check_functions(tree, policy.engine)


# --------------------------------------------------------------------------- comments


def _check_comments(tokens: list[Any]) -> None:
    """Comments are dropped from the SQL that runs; refuse the ones that try to smuggle text.

    A ``;`` in a comment, a MySQL-style executable comment (``/*! ... */``) or a nested comment is
    what a hidden second statement or a lexer disagreement looks like; honest comments have none.
    """
    for token in tokens:
        for comment in token.comments or ():
            text = comment.strip()
            if ";" in text:
                raise _Refusal("comment_trick", "A comment contains ';', which can hide a second statement; remove it.")
            if text.startswith("!"):
                raise _Refusal("comment_trick", "Executable comments (/*! ... */) are not allowed.")
            if "/*" in text or "*/" in text:
                raise _Refusal("comment_trick", "Nested comments are not allowed.")


# --------------------------------------------------------------------------- statement kind


def _statement_kind(node: exp.Expr) -> str:
    from sqlglot import exp

    if isinstance(node, exp.Command):
        return str(node.this).upper()
    names = {"TruncateTable": "TRUNCATE", "Transaction": "BEGIN", "Into": "SELECT ... INTO", "Lock": "SELECT ... FOR UPDATE"}
    name = type(node).__name__
    return names.get(name, name.upper())


def _denied_nodes() -> tuple[type, ...]:
    from sqlglot import exp

    names = (
        "DML", "DDL", "Insert", "Update", "Delete", "Merge", "Create", "Drop", "Alter", "TruncateTable",
        "Grant", "Revoke", "Copy", "Command", "Set", "Into", "Lock", "Analyze", "Transaction", "Commit",
        "Rollback", "Use", "Describe", "Show", "Pragma", "Kill", "LoadData", "Cache", "Uncache",
        "Refresh", "Declare", "Execute", "Attach", "Detach", "Summarize", "Comment", "Export",
    )  # fmt: skip
    return tuple(getattr(exp, name) for name in names if isinstance(getattr(exp, name, None), type))


def _check_read_only(tree: exp.Expr) -> None:
    from sqlglot import exp

    query = tree.unnest() if isinstance(tree, exp.Subquery) else tree
    if not isinstance(query, (exp.Select, exp.SetOperation)):
        kind = _statement_kind(query)
        raise _Refusal("not_select", f"Only a read-only SELECT may run, not {kind}.")
    denied = _denied_nodes()
    for node in tree.walk():
        if isinstance(node, denied):
            kind = _statement_kind(node)
            raise _Refusal("not_select", f"Only a read-only SELECT may run; the query also contains {kind}.")


# --------------------------------------------------------------------------- tables


def _is_system(*names: str) -> bool:
    return any(n in SYSTEM_SCHEMAS or n.startswith(SYSTEM_TABLE_PREFIXES) for n in names if n)


def _table_key(table: exp.Table) -> str:
    return ".".join(part.lower() for part in (table.catalog, table.db, table.name) if part)


def _visible_cte(table: exp.Table) -> exp.CTE | None:
    """The CTE an unqualified table name refers to, following SQL scoping.

    A CTE is visible to the body of its WITH and to the CTEs after it (and to itself when the WITH
    is RECURSIVE), never to the CTEs before it: ``WITH users AS (SELECT * FROM users)`` reads the
    real ``users`` table inside the CTE, and the guard must see that.
    """
    from sqlglot import exp

    if table.args.get("db") or table.args.get("catalog"):
        return None
    name = table.name.lower()
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        candidates: list[exp.CTE] = []
        # a CTE under a WITH always has its position in the list (index); without one, no CTE is
        # visible and the name is checked as a real table, the stricter reading
        if isinstance(node, exp.With) and isinstance(child, exp.CTE) and child.index is not None:
            upto = child.index + 1 if node.args.get("recursive") else child.index
            candidates = list(node.expressions[:upto])
        elif isinstance(node, exp.Query):
            with_ = node.args.get("with_") or node.args.get("with")
            if isinstance(with_, exp.With) and child is not with_:
                candidates = list(with_.expressions)
        for cte in reversed(candidates):
            if cte.alias_or_name.lower() == name:
                return cte
        child, node = node, node.parent
    return None


def _real_tables(tree: exp.Expr) -> Iterator[exp.Table]:
    """Every table reference that reads a relation of the warehouse (not a CTE)."""
    from sqlglot import exp

    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and _visible_cte(table) is None:
            yield table


def _check_tables(tree: exp.Expr, policy: GuardPolicy) -> list[str]:
    from sqlglot import exp

    for cte in tree.find_all(exp.CTE):
        if _is_system(cte.alias_or_name.lower()):
            raise _Refusal("system_catalog", f"A CTE may not take the name of a system table ({cte.alias_or_name}).")

    used: list[str] = []
    for table in tree.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            what = table.this.sql(DIALECT) if isinstance(table.this, exp.Expression) else str(table.this)
            raise _Refusal("forbidden_function", f"Table functions are not allowed: {what[:60]}.")
        if _visible_cte(table) is not None:
            continue
        key = _table_key(table)
        if _is_system(table.catalog.lower(), table.db.lower(), table.name.lower()):
            raise _Refusal("system_catalog", f"System catalogs and logs cannot be queried ({key}).")
        if key not in policy.allowed:
            bare = table.name.lower()
            hint = f" Name it without a schema: {bare}." if table.db and bare in policy.allowed else ""
            raise _Refusal("forbidden_table", f"The table {key} is not one the assistant may read.{hint}")
        if key not in used:
            used.append(key)
    return used


# --------------------------------------------------------------------------- functions


def _function_names(node: exp.Func) -> set[str]:
    from sqlglot import exp

    if isinstance(node, exp.Anonymous):
        return {node.name.lower()}
    return {node.sql_name().lower(), type(node).key.lower()}


def function_refusal(tree: exp.Expr, dialect: str = DIALECT) -> str | None:
    """Why ``tree`` calls something generated SQL may not (a table function, a function off the
    allow-list), or None: the guard's own rule, for checks that are not of a whole statement."""
    try:
        _check_functions(tree, dialect)
    except _Refusal as refusal:
        return refusal.reason
    return None


def _check_functions(tree: exp.Expr, dialect: str) -> None:
    """Every call is on the allow-list (``ALLOWED_FUNCTION_CLASSES``, or a listed anonymous name of
    ``dialect``); no table-valued construct appears anywhere in the tree."""
    from sqlglot import exp

    for node in tree.find_all(exp.Dot):
        if isinstance(node.expression, exp.Func):
            call = node.sql(DIALECT)[:60]
            raise _Refusal("forbidden_function", f"Schema-qualified function calls are not allowed ({call}).")
    for table_valued in tree.find_all(exp.UDTF, exp.SessionParameter):
        what = table_valued.sql(DIALECT)[:60]
        raise _Refusal("forbidden_function", f"Table functions, LATERAL, UNNEST and VALUES are not allowed: {what}.")
    anonymous = ALLOWED_ANONYMOUS_FUNCTIONS.get(dialect, frozenset())
    for func in tree.find_all(exp.Func):
        names = _function_names(func)
        for name in names:
            if name in FORBIDDEN_FUNCTIONS or name.startswith(FORBIDDEN_FUNCTION_PREFIXES):
                raise _Refusal("forbidden_function", f"The function {name}() is not allowed in generated SQL.")
        if isinstance(func, exp.Anonymous):
            if func.name.lower() not in anonymous:
                raise _Refusal("forbidden_function", f"The function {func.name.lower()}() is not one generated SQL may call.")
        elif type(func).__name__ not in ALLOWED_FUNCTION_CLASSES:
            shown = func.sql_name().lower() if hasattr(func, "sql_name") else type(func).__name__.lower()
            raise _Refusal("forbidden_function", f"The function {shown}() is not one generated SQL may call.")


# --------------------------------------------------------------------------- sources and columns


@dataclass(frozen=True)
class _Source:
    """One relation in a FROM or JOIN: a real table (``table_key``) or a derived one (``outputs``)."""

    name: str  # alias or table name, lower case; "" for an unnamed derived table
    table_key: str | None = None
    outputs: frozenset[str] | None = None  # derived columns; None when they cannot be known
    merged: frozenset[str] | None = frozenset()  # columns a USING join shares (None: NATURAL, all shared)


def _sources(select: exp.Select, policy: GuardPolicy) -> list[_Source]:
    from sqlglot import exp

    relations: list[tuple[exp.Expr, frozenset[str] | None]] = []
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is not None:
        relations.append((from_.this, frozenset()))
    for join in select.args.get("joins") or ():
        if str(join.args.get("method") or "").upper() == "NATURAL":
            relations.append((join.this, None))
        else:
            relations.append((join.this, frozenset(i.name.lower() for i in join.args.get("using") or ())))
    found = []
    for relation, merged in relations:
        name = relation.alias_or_name.lower()
        if isinstance(relation, exp.Table):
            cte = _visible_cte(relation)
            if cte is not None:
                found.append(_Source(name, outputs=_derived_outputs(cte, policy), merged=merged))
            else:
                found.append(_Source(name, table_key=_table_key(relation), merged=merged))
        else:
            found.append(_Source(name, outputs=_derived_outputs(relation, policy), merged=merged))
    return found


def _derived_outputs(node: exp.Expr, policy: GuardPolicy) -> frozenset[str] | None:
    """Column names a CTE or derived table exposes: its alias column list, else its projections."""
    from sqlglot import exp

    alias = node.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        return frozenset(c.name.lower() for c in alias.columns)
    body = node.this if isinstance(node, (exp.CTE, exp.Subquery)) else node
    return _query_outputs(body, policy)


def _query_outputs(query: exp.Expr, policy: GuardPolicy) -> frozenset[str] | None:
    from sqlglot import exp

    if isinstance(query, exp.Subquery):
        return _derived_outputs(query, policy)
    if isinstance(query, exp.SetOperation):
        return _query_outputs(query.this, policy)
    if not isinstance(query, exp.Select):
        return None
    names: set[str] = set()
    for projection in query.expressions:
        star_of = _star_qualifier(projection)
        if star_of is None:
            if projection.alias_or_name:
                names.add(projection.alias_or_name.lower())
            continue
        for source in _sources(query, policy):
            if star_of in ("", source.name):
                columns = policy.columns_of(source.table_key) if source.table_key else source.outputs
                if columns is None:
                    return None
                names.update(columns)
    return frozenset(names)


def _star_qualifier(projection: exp.Expr) -> str | None:
    """"" for ``*``, the qualifier for ``t.*``, None for any other projection."""
    from sqlglot import exp

    if isinstance(projection, exp.Star):
        return ""
    if isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star):
        return projection.table.lower()
    return None


def _expand_stars(tree: exp.Expr, policy: GuardPolicy) -> None:
    """Replace ``*`` and ``t.*`` over real tables by the allow-listed columns.

    A star would otherwise read every column of the table, including any the policy leaves out.
    Stars over CTEs and derived tables stay: their own projections were checked.
    """
    from sqlglot import exp

    for select in list(tree.find_all(exp.Select)):
        if not any(_star_qualifier(p) is not None for p in select.expressions):
            continue
        sources = _sources(select, policy)
        qualify = len(sources) > 1
        expanded: list[exp.Expr] = []
        for projection in select.expressions:
            star_of = _star_qualifier(projection)
            if star_of is None:
                expanded.append(projection)
                continue
            covered = [s for s in sources if star_of in ("", s.name)]
            if star_of and not covered:
                raise _Refusal("forbidden_column", f"{star_of}.* does not name a table of this query.")
            if not any(s.table_key for s in covered):
                expanded.append(projection)
                continue
            emitted: set[str] = set()
            for source in covered:
                if source.table_key:
                    table = source.name if (qualify or star_of) else None
                    columns = policy.columns_of(source.table_key)
                    if not star_of:  # a bare * shows the columns a USING / NATURAL join merges once
                        columns = tuple(c for c in columns if not _merged_away(c, source, emitted))
                    expanded.extend(exp.column(c, table=table) for c in columns)
                    emitted.update(columns)
                elif source.name:
                    expanded.append(exp.Column(this=exp.Star(), table=exp.to_identifier(source.name)))
                    emitted.update(source.outputs or ())
                else:
                    raise _Refusal("forbidden_column", "Name the columns instead of * when a subquery has no alias.")
        select.set("expressions", expanded)


def _merged_away(column: str, source: _Source, emitted: set[str]) -> bool:
    if column not in emitted:
        return False
    return source.merged is None or column in source.merged


def _check_columns(tree: exp.Expr, policy: GuardPolicy) -> None:
    """Every column must belong to a table or derived relation of the query, or be an alias.

    Names are checked, not full scoping: an unqualified column passes when an allow-listed table
    the query reads has it or when the query defines it (select alias, CTE or subquery column).
    A qualified column (``t.c``) must exist on the relation ``t`` names.
    """
    from sqlglot import exp

    tables = {_table_key(t) for t in _real_tables(tree)}
    table_columns = {c for key in tables for c in policy.columns_of(key)}
    defined: set[str] = set()
    for alias in tree.find_all(exp.Alias):
        defined.add(alias.alias.lower())
    for table_alias in tree.find_all(exp.TableAlias):
        defined.update(c.name.lower() for c in table_alias.columns)
    qualifiers: dict[str, list[_Source]] = {}
    for select in tree.find_all(exp.Select):
        for source in _sources(select, policy):
            if source.outputs is not None:
                defined.update(source.outputs)
            if source.name:
                qualifiers.setdefault(source.name, []).append(source)
    for cte in tree.find_all(exp.CTE):  # ``cte_name.column`` without an alias
        name = cte.alias_or_name.lower()
        qualifiers.setdefault(name, []).append(_Source(name, outputs=_derived_outputs(cte, policy)))
    anything_known = table_columns | defined

    for column in tree.find_all(exp.Column):
        qualifier = column.table.lower()
        if isinstance(column.this, exp.Star):
            if qualifier and qualifier not in qualifiers:
                raise _Refusal("forbidden_column", f"{qualifier}.* does not name a table of this query.")
            continue
        name = column.name.lower()
        if not qualifier:
            if name not in anything_known:
                raise _Refusal("forbidden_column", f"The column {name} is not available in the tables this query reads.")
            continue
        candidates = qualifiers.get(qualifier)
        if not candidates:
            raise _Refusal("forbidden_column", f"{qualifier}.{name}: {qualifier} is not a table or alias of this query.")
        if not any(_source_has(source, name, policy, anything_known) for source in candidates):
            raise _Refusal("forbidden_column", f"The column {qualifier}.{name} is not one the assistant may read.")


def _source_has(source: _Source, name: str, policy: GuardPolicy, anything_known: set[str]) -> bool:
    if source.table_key is not None:
        return name in policy.columns_of(source.table_key)
    if source.outputs is None:
        return name in anything_known
    return name in source.outputs


# --------------------------------------------------------------------------- row cap


def _cap_rows(tree: exp.Expr, max_rows: int) -> int:
    """Add LIMIT max_rows to the top-level query, tighten a larger one, keep a smaller one."""
    from sqlglot import exp

    existing = tree.args.get("limit")
    limit = max_rows
    if isinstance(existing, exp.Limit):
        count = existing.expression
        if isinstance(count, exp.Var) and count.name.upper() == "ALL":
            count = None
        elif not _is_int_literal(count):
            raise _Refusal("invalid_limit", "LIMIT must be a whole number.")
        if count is not None:
            limit = min(int(count.this), max_rows)
    elif isinstance(existing, exp.Fetch):
        count = existing.args.get("count")
        options = existing.args.get("limit_options")
        if options is not None and (options.args.get("percent") or options.args.get("with_ties")):
            raise _Refusal("invalid_limit", "FETCH ... PERCENT or WITH TIES cannot be capped; use LIMIT.")
        if count is not None:
            if not _is_int_literal(count):
                raise _Refusal("invalid_limit", "FETCH FIRST must name a whole number of rows.")
            limit = min(int(count.this), max_rows)
    elif existing is not None:
        raise _Refusal("invalid_limit", "The row limit could not be read.")
    tree.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
    return limit


def _is_int_literal(node: Any) -> bool:
    from sqlglot import exp

    return isinstance(node, exp.Literal) and not node.is_string and str(node.this).isdigit()


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    text = lines[0][:200].rstrip() if lines else type(error).__name__
    return text if text.endswith((".", "?", "!")) else text + "."
