"""The demo warehouse: a deterministic generator of 24 months of pharma commercial data in DuckDB.

The same (seed, scale, anchor) always gives the same table contents: every random draw comes from
one numpy ``Generator`` in a fixed order, and rows are inserted in key order. The data carries the
shapes an analyst expects to find (Chinese New Year dip, 双十一 e-commerce spike, product launches
and growth, winter respiratory season) and two planted anomalies, recorded in the summary and in
``<path>.meta.json`` so evaluations know what the analysis should discover.

``drift=True`` writes the same rows under drifted names (``DRIFT_RENAMES``), the way a real
warehouse moves away from its contract under a semantic layer; it goes to its own file
(``demo-drift.duckdb``) and its summary says so, so it never stands in for the normal one.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy and duckdb load lazily: the Lambda cold path never builds a warehouse
    import duckdb
    import numpy as np

from memtool.sql.demo_generator import (
    CHANNELS,
    CNY_DATES,
    REFUND_REASONS,
    THERAPEUTIC_AREAS,
    Calendar,
    PlantedAnomaly,
    city_rows,
    generate_orders,
    generate_prescriptions,
    generate_refunds,
    plan_anomalies,
    product_rows,
)

# What the generator defines and this module's callers read from here.
__all__ = [
    "CHANNELS",
    "DEMO_FILE_NAME",
    "DRIFT_FILE_NAME",
    "DRIFT_RENAMES",
    "GENERATOR_VERSION",
    "REFUND_REASONS",
    "THERAPEUTIC_AREAS",
    "WAREHOUSE_SCHEMA",
    "PlantedAnomaly",
    "SchemaDrift",
    "WarehouseSummary",
    "build_demo_warehouse",
    "drifted_path",
    "ensure_demo_warehouse",
    "meta_path",
    "read_warehouse_summary",
]

# The demo schema: the generator writes it and demo_model.yaml (next to this module) describes it.
# table -> column -> type (DuckDB / Redshift spelling)
WAREHOUSE_SCHEMA: dict[str, dict[str, str]] = {
    "dim_region": {"region_id": "INT", "region_name": "VARCHAR", "city": "VARCHAR", "city_en": "VARCHAR"},
    "dim_channel": {"channel_id": "INT", "channel_name": "VARCHAR", "channel_en": "VARCHAR"},
    "dim_product": {
        "product_id": "INT",
        "product_name": "VARCHAR",
        "product_en": "VARCHAR",
        "brand": "VARCHAR",
        "therapeutic_area": "VARCHAR",
        "launch_date": "DATE",
    },
    "fact_order_line": {
        "order_id": "BIGINT",
        "line_id": "INT",
        "order_date": "DATE",
        "paid_at": "TIMESTAMP",
        "product_id": "INT",
        "region_id": "INT",
        "channel_id": "INT",
        "qty": "INT",
        "gross_amount": "DECIMAL(12,2)",
        "discount_amount": "DECIMAL(12,2)",
        "is_test": "BOOLEAN",
    },
    "fact_refund": {
        "refund_id": "BIGINT",
        "order_id": "BIGINT",
        "line_id": "INT",
        "refunded_at": "TIMESTAMP",
        "refund_amount": "DECIMAL(12,2)",
        "reason": "VARCHAR",
    },
    "fact_prescription": {
        "rx_id": "BIGINT",
        "rx_date": "DATE",
        "product_id": "INT",
        "region_id": "INT",
        "hospital_id": "INT",
        "qty": "INT",
    },
}

# Bump when the generated contents change, so ensure_demo_warehouse rebuilds stale files.
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class SchemaDrift:
    """Names that moved away from the contract in ``memtool.sql.schema``; the data did not move.

    Column keys are ``"table.column"`` in contract names; values are the new column name.
    """

    renamed_columns: Mapping[str, str]
    renamed_tables: Mapping[str, str]

    def table_name(self, table: str) -> str:
        """What the contract's ``table`` is called in the drifted warehouse."""
        return self.renamed_tables.get(table, table)

    def column_name(self, table: str, column: str) -> str:
        """What the contract's ``table.column`` is called in the drifted warehouse."""
        return self.renamed_columns.get(f"{table}.{column}", column)

    def as_dict(self) -> dict[str, dict[str, str]]:
        """The JSON shape the summary and ``<path>.meta.json`` record."""
        return {"renamed_columns": dict(self.renamed_columns), "renamed_tables": dict(self.renamed_tables)}

    def statements(self) -> list[str]:
        """The ALTERs that apply the drift: columns first, while their tables keep contract names.

        RENAME leaves no view or alias behind, which is the point: a query on an old name fails.
        """
        alters = []
        for key, new_name in self.renamed_columns.items():
            table, column = key.split(".", 1)
            alters.append(f"ALTER TABLE {table} RENAME COLUMN {column} TO {new_name}")
        alters.extend(f"ALTER TABLE {old} RENAME TO {new}" for old, new in self.renamed_tables.items())
        return alters


# The drift ``build_demo_warehouse(..., drift=True)`` writes.
DRIFT_RENAMES = SchemaDrift(
    renamed_columns=MappingProxyType({"fact_order_line.gross_amount": "gross_amt"}),
    renamed_tables=MappingProxyType({"dim_channel": "dim_sales_channel"}),
)
DEMO_FILE_NAME = "demo.duckdb"
DRIFT_FILE_NAME = "demo-drift.duckdb"


def drifted_path(path: Path) -> Path:
    """Where the drifted twin of the warehouse at ``path`` goes: ``demo.duckdb`` -> ``demo-drift.duckdb``."""
    path = Path(path)
    return path.with_name(f"{path.stem}-drift{path.suffix}")


@dataclass(frozen=True)
class WarehouseSummary:
    path: Path
    seed: int
    scale: float
    anchor: date
    start_date: date  # first day of the first month
    end_date: date  # the anchor day: the last day with orders
    months: tuple[str, ...]  # YYYY-MM, oldest first
    row_counts: dict[str, int]
    planted_anomalies: tuple[PlantedAnomaly, ...]
    build_seconds: float
    generator_version: int = GENERATOR_VERSION
    cny_dates: tuple[str, ...] = field(default_factory=tuple)  # the holidays inside the window
    drift: bool = False  # names moved away from the contract, as ``renames`` says
    renames: dict[str, dict[str, str]] = field(default_factory=dict)  # SchemaDrift.as_dict(); {} without drift

    def to_meta(self) -> dict[str, Any]:
        meta = asdict(self)
        meta["path"] = str(self.path)
        for key in ("anchor", "start_date", "end_date"):
            meta[key] = getattr(self, key).isoformat()
        meta["months"] = list(self.months)
        meta["cny_dates"] = list(self.cny_dates)
        meta["planted_anomalies"] = [asdict(a) for a in self.planted_anomalies]
        return meta

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> WarehouseSummary:
        return cls(
            path=Path(meta["path"]),
            seed=int(meta["seed"]),
            scale=float(meta["scale"]),
            anchor=date.fromisoformat(meta["anchor"]),
            start_date=date.fromisoformat(meta["start_date"]),
            end_date=date.fromisoformat(meta["end_date"]),
            months=tuple(meta["months"]),
            row_counts={k: int(v) for k, v in meta["row_counts"].items()},
            planted_anomalies=tuple(PlantedAnomaly(**a) for a in meta["planted_anomalies"]),
            build_seconds=float(meta["build_seconds"]),
            generator_version=int(meta["generator_version"]),
            cny_dates=tuple(meta.get("cny_dates", ())),
            drift=bool(meta.get("drift", False)),
            renames={str(k): {str(a): str(b) for a, b in v.items()} for k, v in meta.get("renames", {}).items()},
        )


def meta_path(path: Path) -> Path:
    """Where the summary of the warehouse at ``path`` lives: ``<path>.meta.json``."""
    return path.with_name(path.name + ".meta.json")


def read_warehouse_summary(path: Path) -> WarehouseSummary | None:
    """The summary written next to a demo warehouse, or None when missing or unreadable."""
    try:
        return WarehouseSummary.from_meta(json.loads(meta_path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def ensure_demo_warehouse(home: Path, anchor: date, *, seed: int = 7, scale: float = 1.0, drift: bool = False) -> Path:
    """``<home>/warehouse/demo.duckdb`` (``demo-drift.duckdb`` with drift), built only when missing
    or built for other inputs.

    A file built for the same seed, scale and anchor month is kept even if the anchor day moved
    on within the month. A file whose drift differs is rebuilt, never reused.
    """
    path = Path(home) / "warehouse" / (DRIFT_FILE_NAME if drift else DEMO_FILE_NAME)
    current = read_warehouse_summary(path) if path.exists() else None
    if (
        current is None
        or current.generator_version != GENERATOR_VERSION
        or current.seed != seed
        or current.scale != float(scale)
        or (current.anchor.year, current.anchor.month) != (anchor.year, anchor.month)
        or current.drift != drift
    ):
        build_demo_warehouse(path, seed=seed, scale=scale, anchor=anchor, drift=drift)
    return path


def build_demo_warehouse(
    path: Path, *, seed: int = 7, scale: float = 1.0, anchor: date, drift: bool = False
) -> WarehouseSummary:
    """Write the demo warehouse to ``path`` (atomically) and its summary to ``<path>.meta.json``.

    With ``drift`` the rows are the same (same seed, same draws) but ``DRIFT_RENAMES`` is applied
    before the file is closed, so an answer on it equals the normal one once names are mapped.
    """
    import duckdb
    import numpy as np

    if scale <= 0:
        raise ValueError("scale must be positive")
    started = time.perf_counter()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    calendar = Calendar.ending(anchor)
    products = product_rows(calendar.start)
    anomalies_plan = plan_anomalies(rng, calendar, products)

    orders = generate_orders(rng, calendar, products, anomalies_plan, scale)
    refunds = generate_refunds(rng, calendar, orders, anomalies_plan)
    prescriptions = generate_prescriptions(rng, calendar, products, scale)

    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        con = duckdb.connect(str(tmp))
        try:
            _create_tables(con)
            _load_dimensions(con, products)
            _load_facts(con, calendar, orders, refunds, prescriptions)
            tables = list(WAREHOUSE_SCHEMA)
            if drift:
                for alter in DRIFT_RENAMES.statements():
                    con.execute(alter)
                tables = [DRIFT_RENAMES.table_name(table) for table in tables]
            row_counts = {table: _row_count(con, table) for table in tables}
            con.execute("CHECKPOINT")
        finally:
            con.close()
        Path(str(path) + ".wal").unlink(missing_ok=True)  # a stale WAL would be replayed onto the new file
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        Path(str(tmp) + ".wal").unlink(missing_ok=True)

    summary = WarehouseSummary(
        path=path,
        seed=seed,
        scale=float(scale),
        anchor=anchor,
        start_date=calendar.start,
        end_date=anchor,
        months=tuple(calendar.month_labels),
        row_counts=row_counts,
        planted_anomalies=tuple(a.describe(products) for a in anomalies_plan),
        build_seconds=round(time.perf_counter() - started, 3),
        cny_dates=tuple(d.isoformat() for d in CNY_DATES.values() if calendar.start <= d <= anchor),
        drift=drift,
        renames=DRIFT_RENAMES.as_dict() if drift else {},
    )
    _write_json_atomically(meta_path(path), summary.to_meta())
    return summary


def _row_count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    assert row is not None  # an aggregate without GROUP BY returns exactly one row
    return int(row[0])


# --- loading ----------------------------------------------------------------------------------


def _create_tables(con: Any) -> None:
    for table, columns in WAREHOUSE_SCHEMA.items():
        body = ", ".join(f"{name} {sql_type}" for name, sql_type in columns.items())
        con.execute(f"CREATE TABLE {table} ({body})")


def _load_dimensions(con: Any, products: list[dict[str, Any]]) -> None:
    con.executemany("INSERT INTO dim_region VALUES (?, ?, ?, ?)", [list(c) for c in city_rows()])
    con.executemany(
        "INSERT INTO dim_channel VALUES (?, ?, ?)", [[i, name, en] for i, (name, en) in enumerate(CHANNELS, start=1)]
    )
    assert {p["spec"].area for p in products} == set(THERAPEUTIC_AREAS)
    con.executemany(
        "INSERT INTO dim_product VALUES (?, ?, ?, ?, ?, ?)",
        [
            [p["product_id"], p["spec"].name, p["spec"].name_en, p["spec"].brand, p["spec"].area, p["launch_date"]]
            for p in products
        ],
    )


def _load_facts(
    con: Any,
    calendar: Calendar,
    orders: dict[str, np.ndarray],
    refunds: dict[str, np.ndarray],
    prescriptions: dict[str, np.ndarray],
) -> None:
    start = calendar.start  # bound as a parameter (a DATE), never formatted into the text
    cents = "(CAST({} AS DECIMAL(18,0)) * 0.01)::DECIMAL(12,2)"
    con.register("order_arrays", orders)
    con.execute(
        f"""
        INSERT INTO fact_order_line
        SELECT order_id, line_id,
               CAST($1 AS DATE) + order_day,
               CASE WHEN paid_at < 0 THEN NULL ELSE CAST($1 AS TIMESTAMP) + to_seconds(paid_at) END,
               product_id, region_id, channel_id, qty,
               {cents.format("gross_cents")}, {cents.format("discount_cents")}, is_test
        FROM order_arrays ORDER BY order_id, line_id
        """,
        [start],
    )
    con.unregister("order_arrays")
    con.register("refund_arrays", refunds)
    con.execute(
        f"""
        INSERT INTO fact_refund
        SELECT refund_id, order_id, line_id, CAST($1 AS TIMESTAMP) + to_seconds(refunded_at),
               {cents.format("refund_cents")}, ($2::VARCHAR[])[reason_code + 1]
        FROM refund_arrays ORDER BY refund_id
        """,
        [start, list(REFUND_REASONS)],
    )
    con.unregister("refund_arrays")
    con.register("rx_arrays", prescriptions)
    con.execute(
        """
        INSERT INTO fact_prescription
        SELECT rx_id, CAST($1 AS DATE) + rx_day, product_id, region_id, hospital_id, qty
        FROM rx_arrays ORDER BY rx_id
        """,
        [start],
    )
    con.unregister("rx_arrays")


def _write_json_atomically(target: Path, payload: dict[str, Any]) -> None:
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps(payload, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)

