"""The TPC-H warehouse: tpchgen-cli's tables loaded into a new DuckDB file, typed as the spec says.

tpchgen-cli (``pip install tpchgen-cli``, a Rust port of dbgen) writes the eight tables as Parquet;
its output depends only on the scale factor, so the same scale always gives the same rows. They are
copied in key order into tables declared here (DATE dates, DECIMAL(15,2) money, quantities and
rates, integer keys, primary keys), so the warehouse does not depend on the types Parquet carried.
The file is written beside ``path`` and renamed into place: a failed build leaves no file behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from memtool.errors import MemtoolError, ValidationFailed

if TYPE_CHECKING:  # duckdb loads lazily, as in the demo warehouse
    import duckdb

GENERATOR = "tpchgen-cli"

# Table -> (column declarations separated by ";", primary key), in the spec's order (TPC-H 2.x, clause 1.4). Keys of
# the tables that grow with the scale are BIGINT (orders reach 6e9 at scale 1000); TPC-H's fixed
# text types (CHAR(n), VARCHAR(n)) are VARCHAR, which DuckDB stores the same way.
_SCHEMA: dict[str, tuple[str, str]] = {
    "region": ("r_regionkey INTEGER NOT NULL; r_name VARCHAR NOT NULL; r_comment VARCHAR", "r_regionkey"),
    "nation": (
        "n_nationkey INTEGER NOT NULL; n_name VARCHAR NOT NULL; n_regionkey INTEGER NOT NULL; n_comment VARCHAR",
        "n_nationkey",
    ),
    "supplier": (
        "s_suppkey BIGINT NOT NULL; s_name VARCHAR NOT NULL; s_address VARCHAR NOT NULL; s_nationkey INTEGER NOT NULL;"
        " s_phone VARCHAR NOT NULL; s_acctbal DECIMAL(15,2) NOT NULL; s_comment VARCHAR",
        "s_suppkey",
    ),
    "customer": (
        "c_custkey BIGINT NOT NULL; c_name VARCHAR NOT NULL; c_address VARCHAR NOT NULL; c_nationkey INTEGER NOT NULL;"
        " c_phone VARCHAR NOT NULL; c_acctbal DECIMAL(15,2) NOT NULL; c_mktsegment VARCHAR NOT NULL; c_comment VARCHAR",
        "c_custkey",
    ),
    "part": (
        "p_partkey BIGINT NOT NULL; p_name VARCHAR NOT NULL; p_mfgr VARCHAR NOT NULL; p_brand VARCHAR NOT NULL;"
        " p_type VARCHAR NOT NULL; p_size INTEGER NOT NULL; p_container VARCHAR NOT NULL;"
        " p_retailprice DECIMAL(15,2) NOT NULL; p_comment VARCHAR",
        "p_partkey",
    ),
    "partsupp": (
        "ps_partkey BIGINT NOT NULL; ps_suppkey BIGINT NOT NULL; ps_availqty INTEGER NOT NULL;"
        " ps_supplycost DECIMAL(15,2) NOT NULL; ps_comment VARCHAR",
        "ps_partkey, ps_suppkey",
    ),
    "orders": (
        "o_orderkey BIGINT NOT NULL; o_custkey BIGINT NOT NULL; o_orderstatus VARCHAR NOT NULL;"
        " o_totalprice DECIMAL(15,2) NOT NULL; o_orderdate DATE NOT NULL; o_orderpriority VARCHAR NOT NULL;"
        " o_clerk VARCHAR NOT NULL; o_shippriority INTEGER NOT NULL; o_comment VARCHAR",
        "o_orderkey",
    ),
    "lineitem": (
        "l_orderkey BIGINT NOT NULL; l_partkey BIGINT NOT NULL; l_suppkey BIGINT NOT NULL; l_linenumber INTEGER NOT NULL;"
        " l_quantity DECIMAL(15,2) NOT NULL; l_extendedprice DECIMAL(15,2) NOT NULL; l_discount DECIMAL(15,2) NOT NULL;"
        " l_tax DECIMAL(15,2) NOT NULL; l_returnflag VARCHAR NOT NULL; l_linestatus VARCHAR NOT NULL;"
        " l_shipdate DATE NOT NULL; l_commitdate DATE NOT NULL; l_receiptdate DATE NOT NULL;"
        " l_shipinstruct VARCHAR NOT NULL; l_shipmode VARCHAR NOT NULL; l_comment VARCHAR",
        "l_orderkey, l_linenumber",
    ),
}

TPCH_TABLES: tuple[str, ...] = tuple(_SCHEMA)


class TpchGeneratorMissing(MemtoolError):
    """tpchgen-cli is neither beside this Python nor on PATH."""

    code = "tpch_generator_missing"


class TpchGeneratorFailed(MemtoolError):
    """tpchgen-cli ran and failed (its stderr is in the message)."""

    code = "tpch_generator_failed"


def find_generator() -> Path:
    """tpchgen-cli from this interpreter's environment first (a venv's bin), then from PATH."""
    name = GENERATOR + (".exe" if os.name == "nt" else "")
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(GENERATOR)
    if found is None:
        raise TpchGeneratorMissing(
            f"{GENERATOR} was not found beside {sys.executable} nor on PATH: `pip install tpchgen-cli` (the `local` extra) installs it"
        )
    return Path(found)


def build_tpch_warehouse(path: Path, *, scale: float, progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Write the TPC-H tables at ``scale`` to a new DuckDB file at ``path``; return each table's row count.

    An existing file is replaced only when it is a TPC-H warehouse (its tables are exactly
    :data:`TPCH_TABLES`); anything else at ``path`` is refused with :class:`ValidationFailed`.
    """
    import duckdb

    if not scale > 0:
        raise ValidationFailed(f"scale must be positive, got {scale}", field="scale")
    say = progress or (lambda _message: None)
    path = Path(path)
    if path.exists():
        _refuse_unless_tpch(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    generator = find_generator()
    tmp = path.with_suffix(".tmp")
    wal = Path(f"{tmp}.wal")
    started = time.perf_counter()
    try:
        # beside the target, not in /tmp: at large scales the Parquet files take gigabytes
        with tempfile.TemporaryDirectory(prefix=".tpchgen-", dir=path.parent) as parquet_dir:
            say(f"generating TPC-H scale {scale:g} with {generator}")
            _generate(generator, scale, Path(parquet_dir))
            say(f"generated in {time.perf_counter() - started:.1f}s; loading into {path.name}")
            tmp.unlink(missing_ok=True)  # a crashed build's leftovers
            wal.unlink(missing_ok=True)
            con = duckdb.connect(str(tmp))
            try:
                counts = {table: _load(con, table, Path(parquet_dir) / f"{table}.parquet") for table in TPCH_TABLES}
                for table, rows in counts.items():
                    say(f"  {table}: {rows:,} rows")
                con.execute("CHECKPOINT")
            finally:
                con.close()
        Path(f"{path}.wal").unlink(missing_ok=True)  # a stale WAL would be replayed onto the new file
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        wal.unlink(missing_ok=True)
    say(f"TPC-H scale {scale:g} written to {path} in {time.perf_counter() - started:.1f}s")
    return counts


def _refuse_unless_tpch(path: Path) -> None:
    import duckdb

    problem = None
    if not path.is_file():
        problem = "it is not a file"
    else:
        try:
            con = duckdb.connect(str(path), read_only=True)
        except duckdb.Error as exc:
            problem = f"it is not a DuckDB file ({exc})"
        else:
            try:
                tables = {row[0] for row in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
            finally:
                con.close()
            if tables != set(TPCH_TABLES):
                problem = f"its tables are not TPC-H's ({', '.join(sorted(tables)) or 'none'})"
    if problem is not None:
        raise ValidationFailed(f"refusing to overwrite {path}: {problem}; choose another path", field="path")


def _generate(generator: Path, scale: float, out: Path) -> None:
    command = [str(generator), "parquet", "--scale-factor", f"{scale:g}", "--output-dir", str(out), "--quiet"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TpchGeneratorMissing(f"{generator} could not run ({exc}): `pip install tpchgen-cli` installs it") from exc
    if done.returncode != 0:
        raise TpchGeneratorFailed(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    missing = [table for table in TPCH_TABLES if not (out / f"{table}.parquet").is_file()]
    if missing:
        raise TpchGeneratorFailed(f"{GENERATOR} wrote no file for {', '.join(missing)} in {out}")


def _load(con: duckdb.DuckDBPyConnection, table: str, parquet: Path) -> int:
    columns, key = _SCHEMA[table]
    declarations = [declaration.strip() for declaration in columns.split(";")]
    con.execute(f"CREATE TABLE {table} ({', '.join(declarations)}, PRIMARY KEY ({key}))")
    names = ", ".join(declaration.split()[0] for declaration in declarations)
    # casts to the declared types; key order makes the file's row order as fixed as its contents
    con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM read_parquet(?) ORDER BY {key}", [str(parquet)])
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])
