"""Warehouse URLs: open the adapter a URL names, and print a URL without its password.

``duckdb:///abs/path.duckdb`` (or ``duckdb://relative/path.duckdb``) opens the embedded DuckDB
adapter; ``postgresql://user[:password]@host[:port]/database[?options]`` (or ``postgres://``) the
PostgreSQL one. Neither duckdb nor psycopg is imported here: the adapters import them on first use.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from memtool.sql.warehouse import Warehouse

ACCEPTED_FORMS = (
    "duckdb:///absolute/path.duckdb",
    "duckdb://relative/path.duckdb",
    "postgresql://user[:password]@host[:port]/database[?options]",
    "postgres://user[:password]@host[:port]/database[?options]",
)
POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})
_SECRET_QUERY_KEYS = frozenset({"password", "passfile", "sslpassword"})
_HIDDEN = "***"


def open_warehouse(url: str) -> Warehouse:
    """The warehouse adapter ``url`` names; a ValueError listing the accepted forms for anything else."""
    scheme, separator, rest = url.partition("://")
    scheme = scheme.lower()
    if separator and scheme == "duckdb" and rest.strip("/"):
        from memtool.sql.duckdb_warehouse import DuckDBWarehouse

        # duckdb:///abs/path -> /abs/path; duckdb://relative/path -> relative/path
        return DuckDBWarehouse(Path(rest))
    if separator and scheme in POSTGRES_SCHEMES:
        from memtool.sql.postgres_warehouse import PostgresWarehouse

        return PostgresWarehouse.from_url(url)
    raise ValueError(f"not a warehouse URL: {redact_url(url)!r}; use one of: " + ", ".join(ACCEPTED_FORMS))


def redact_url(url: str) -> str:
    """``url`` with any password (in the user part or a ``password=`` option) replaced by ***, for printing."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _HIDDEN  # unparseable: printing it could leak what it holds
    netloc, changed = parts.netloc, False
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        if has_password:
            netloc, changed = f"{user}:{_HIDDEN}@{hostport}", True
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
            query, changed = urlencode([(k, _HIDDEN if k.lower() in _SECRET_QUERY_KEYS else v) for k, v in pairs], safe="*"), True
    if not changed:
        return url  # as given: urlunsplit would drop the empty host of duckdb:///path
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
