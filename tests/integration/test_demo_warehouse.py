"""The demo warehouse generator: the schema contract, realistic shapes, planted anomalies, determinism."""

from __future__ import annotations

import json
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

import pytest

from memtool.sql.demo_warehouse import (
    REFUND_REASONS,
    THERAPEUTIC_AREAS,
    WAREHOUSE_SCHEMA,
    WarehouseSummary,
    build_demo_warehouse,
    ensure_demo_warehouse,
    meta_path,
    read_warehouse_summary,
)

duckdb = pytest.importorskip("duckdb")

ANCHOR = date(2026, 11, 29)
SCALE = 0.05
NET = "(gross_amount - discount_amount)"
REAL_SALES = "paid_at IS NOT NULL AND NOT is_test"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> WarehouseSummary:
    return build_demo_warehouse(tmp_path_factory.mktemp("demo") / "demo.duckdb", seed=7, scale=SCALE, anchor=ANCHOR)


@pytest.fixture(scope="module")
def db(built: WarehouseSummary) -> Any:
    connection = duckdb.connect(str(built.path), read_only=True)
    yield connection
    connection.close()


def scalar(db: Any, sql: str, params: list[Any] | None = None) -> Any:
    return db.execute(sql, params or []).fetchone()[0]


def by_month(db: Any, sql: str, params: list[Any] | None = None) -> dict[str, float]:
    return {month: float(value or 0) for month, value in db.execute(sql, params or []).fetchall()}


def checksums(path: Path) -> dict[str, str]:
    connection = duckdb.connect(str(path), read_only=True)
    try:
        return {
            table: scalar(connection, f"SELECT md5(string_agg(CAST(t AS VARCHAR), '|' ORDER BY t)) FROM {table} t")
            for table in WAREHOUSE_SCHEMA
        }
    finally:
        connection.close()


# --- the contract -----------------------------------------------------------------------------


def test_tables_and_columns_match_the_schema_contract_exactly(db: Any) -> None:
    spelled = {"INT": "INTEGER"}  # DuckDB reports INT as its canonical INTEGER
    tables = {row[0] for row in db.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert tables == set(WAREHOUSE_SCHEMA)
    for table, columns in WAREHOUSE_SCHEMA.items():
        described = [(row[0], row[1]) for row in db.execute(f"DESCRIBE {table}").fetchall()]
        assert described == [(name, spelled.get(sql_type, sql_type)) for name, sql_type in columns.items()], table


def test_covers_24_months_ending_on_the_anchor_day(db: Any, built: WarehouseSummary) -> None:
    months = [row[0] for row in db.execute(
        "SELECT DISTINCT strftime(order_date, '%Y-%m') AS m FROM fact_order_line ORDER BY m"
    ).fetchall()]
    assert len(months) == 24
    assert months[0] == "2024-12" and months[-1] == "2026-11"
    assert list(built.months) == months
    assert scalar(db, "SELECT min(order_date) FROM fact_order_line") == date(2024, 12, 1)
    assert scalar(db, "SELECT max(order_date) FROM fact_order_line") == ANCHOR
    end_of_anchor = datetime.combine(ANCHOR + timedelta(days=1), time())
    assert scalar(db, "SELECT max(paid_at) FROM fact_order_line") < end_of_anchor  # nothing from the future
    assert scalar(db, "SELECT max(refunded_at) FROM fact_refund") < end_of_anchor
    assert scalar(db, "SELECT max(rx_date) FROM fact_prescription") <= ANCHOR


def test_products_span_the_areas_and_some_launch_inside_the_window(db: Any) -> None:
    products = db.execute(
        "SELECT product_id, product_name, product_en, brand, therapeutic_area, launch_date FROM dim_product"
    ).fetchall()
    assert len(products) >= 12
    assert {p[4] for p in products} == set(THERAPEUTIC_AREAS)
    assert all(p[1] and p[2] and p[3] for p in products)
    launched_inside = [p for p in products if p[5] > date(2024, 12, 1)]
    assert len(launched_inside) >= 2
    # Nothing sells before its launch, and a launch grows: its last quarter beats its first.
    early = "SELECT count(*) FROM fact_order_line JOIN dim_product USING (product_id) WHERE order_date < launch_date"
    assert scalar(db, early) == 0
    for product_id, *_, launch in launched_inside:
        lines = by_month(
            db,
            "SELECT strftime(order_date, '%Y-%m'), count(*) FROM fact_order_line WHERE product_id = ? GROUP BY 1 ORDER BY 1",
            [product_id],
        )
        counts = list(lines.values())
        assert sum(counts[-3:]) > 2 * sum(counts[:3]), product_id


# --- fact_order_line --------------------------------------------------------------------------


def test_order_lines_are_unique_and_mostly_paid_within_two_days(db: Any) -> None:
    total, distinct = db.execute("SELECT count(*), count(DISTINCT (order_id, line_id)) FROM fact_order_line").fetchone()
    assert total == distinct
    assert 0.8 * 300_000 * SCALE < total < 1.2 * 300_000 * SCALE
    unpaid = scalar(db, "SELECT avg(CASE WHEN paid_at IS NULL THEN 1.0 ELSE 0 END) FROM fact_order_line")
    test = scalar(db, "SELECT avg(CASE WHEN is_test THEN 1.0 ELSE 0 END) FROM fact_order_line")
    assert 0.015 < unpaid < 0.05
    assert 0.003 < test < 0.025
    late, early = db.execute(
        "SELECT count(*) FILTER (WHERE paid_at >= order_date + 3), count(*) FILTER (WHERE paid_at < order_date)"
        " FROM fact_order_line"
    ).fetchone()
    assert (late, early) == (0, 0)
    paid_next_month = "date_trunc('month', paid_at) > date_trunc('month', order_date)"
    assert scalar(db, f"SELECT count(*) FROM fact_order_line WHERE {paid_next_month}") > 0
    assert scalar(db, "SELECT count(*) FROM fact_order_line WHERE discount_amount > gross_amount OR gross_amount <= 0") == 0


def test_every_line_points_at_existing_dimensions(db: Any) -> None:
    orphans = scalar(db, """
        SELECT count(*) FROM fact_order_line l
        LEFT JOIN dim_product p USING (product_id) LEFT JOIN dim_region r USING (region_id)
        LEFT JOIN dim_channel c USING (channel_id)
        WHERE p.product_id IS NULL OR r.region_id IS NULL OR c.channel_id IS NULL
    """)
    assert orphans == 0


# --- fact_refund ------------------------------------------------------------------------------


def test_refunds_reference_real_paid_lines_and_never_exceed_the_net(db: Any) -> None:
    refunds, unmatched, over, unpaid_or_test, before_payment, distinct_lines = db.execute(f"""
        SELECT count(*),
               count(*) FILTER (WHERE l.order_id IS NULL),
               count(*) FILTER (WHERE r.refund_amount > {NET} OR r.refund_amount <= 0),
               count(*) FILTER (WHERE l.paid_at IS NULL OR l.is_test),
               count(*) FILTER (WHERE r.refunded_at < l.paid_at),
               count(DISTINCT (r.order_id, r.line_id))
        FROM fact_refund r LEFT JOIN fact_order_line l USING (order_id, line_id)
    """).fetchone()
    assert refunds > 100
    assert (unmatched, over, unpaid_or_test, before_payment) == (0, 0, 0, 0)
    assert distinct_lines == refunds
    reasons = {row[0] for row in db.execute("SELECT DISTINCT reason FROM fact_refund").fetchall()}
    assert reasons == set(REFUND_REASONS)


def test_some_refunds_land_in_the_month_after_payment(db: Any) -> None:
    later = scalar(db, """
        SELECT count(*) FROM fact_refund r JOIN fact_order_line l USING (order_id, line_id)
        WHERE date_trunc('month', r.refunded_at) > date_trunc('month', l.paid_at)
    """)
    assert later > 10


# --- fact_prescription ------------------------------------------------------------------------


def test_prescriptions_come_from_hospitals_in_known_regions(db: Any) -> None:
    rows, hospitals, orphans, nulls = db.execute("""
        SELECT count(*), count(DISTINCT hospital_id),
               count(*) FILTER (WHERE r.region_id IS NULL OR p.product_id IS NULL),
               count(*) FILTER (WHERE hospital_id IS NULL OR qty IS NULL OR qty <= 0)
        FROM fact_prescription x LEFT JOIN dim_region r USING (region_id) LEFT JOIN dim_product p USING (product_id)
    """).fetchone()
    assert rows > 1000 and hospitals >= 50 and orphans == 0 and nulls == 0
    # A hospital belongs to one city.
    cities_per_hospital = "SELECT count(DISTINCT region_id) AS n FROM fact_prescription GROUP BY hospital_id"
    assert scalar(db, f"SELECT max(n) FROM ({cities_per_hospital})") == 1


# --- shapes -----------------------------------------------------------------------------------


def monthly_net(db: Any, where: str = "TRUE", params: list[Any] | None = None) -> dict[str, float]:
    return by_month(
        db,
        f"SELECT strftime(order_date, '%Y-%m'), sum({NET}) FROM fact_order_line"
        f" WHERE {REAL_SALES} AND {where} GROUP BY 1",
        params,
    )


def test_november_ecommerce_beats_october(db: Any) -> None:
    ecommerce = "channel_id = (SELECT channel_id FROM dim_channel WHERE channel_en = 'ecommerce')"
    net = monthly_net(db, ecommerce)
    orders = by_month(
        db,
        f"SELECT strftime(order_date, '%Y-%m'), count(DISTINCT order_id) FROM fact_order_line WHERE {ecommerce} GROUP BY 1",
    )
    for november, october in (("2025-11", "2025-10"), ("2026-11", "2026-10")):  # 2026-11 stops at the 29th
        assert orders[november] > 1.3 * orders[october]
        assert net[november] > 1.1 * net[october]  # deeper 双十一 discounts eat part of the volume


def test_chinese_new_year_month_dips(db: Any) -> None:
    net = monthly_net(db)
    assert net["2026-02"] < 0.85 * min(net["2026-01"], net["2026-03"])  # 春节 2026-02-17


# --- planted anomalies ------------------------------------------------------------------------


def test_summary_records_both_planted_anomalies(built: WarehouseSummary) -> None:
    kinds = {a.kind: a for a in built.planted_anomalies}
    assert set(kinds) == {"refund_spike", "regional_drop"}
    spike, drop = kinds["refund_spike"], kinds["regional_drop"]
    assert spike.reason == "质量问题" and spike.product_id and spike.product_name
    assert drop.city and drop.region_id
    assert spike.month in built.months[12:] and drop.month in built.months[12:]
    assert spike.month != drop.month


def test_refund_spike_is_visible_in_quality_refunds(db: Any, built: WarehouseSummary) -> None:
    spike = next(a for a in built.planted_anomalies if a.kind == "refund_spike")
    quality = by_month(db, """
        SELECT strftime(r.refunded_at, '%Y-%m'), count(*)
        FROM fact_refund r JOIN fact_order_line l USING (order_id, line_id)
        WHERE r.reason = '质量问题' AND l.product_id = ? GROUP BY 1
    """, [spike.product_id])
    others = [n for month, n in quality.items() if month != spike.month]
    assert quality[spike.month] >= 10
    assert quality[spike.month] > 4 * max(others)
    all_products = by_month(
        db, "SELECT strftime(refunded_at, '%Y-%m'), count(*) FROM fact_refund WHERE reason = '质量问题' GROUP BY 1"
    )
    other_months = sorted(n for m, n in all_products.items() if m != spike.month)
    assert all_products[spike.month] > max(other_months)
    assert all_products[spike.month] > 3 * other_months[len(other_months) // 2]


def test_regional_drop_is_visible_in_the_city_revenue(db: Any, built: WarehouseSummary) -> None:
    drop = next(a for a in built.planted_anomalies if a.kind == "regional_drop")
    city = monthly_net(db, "region_id = ?", [drop.region_id])
    index = built.months.index(drop.month)
    before, after = city[built.months[index - 1]], city[built.months[index + 1]]
    assert city[drop.month] < 0.5 * min(before, after)
    # Other cities carry on as usual that month.
    others = monthly_net(db, "region_id <> ?", [drop.region_id])
    assert others[drop.month] > 0.8 * min(others[built.months[index - 1]], others[built.months[index + 1]])


# --- determinism, meta, ensure ----------------------------------------------------------------


def test_same_inputs_give_identical_tables_and_another_seed_differs(built: WarehouseSummary, tmp_path: Path) -> None:
    again = build_demo_warehouse(tmp_path / "again.duckdb", seed=7, scale=SCALE, anchor=ANCHOR)
    other = build_demo_warehouse(tmp_path / "other.duckdb", seed=8, scale=SCALE, anchor=ANCHOR)
    first = checksums(built.path)
    assert checksums(again.path) == first
    assert again.row_counts == built.row_counts
    assert again.planted_anomalies == built.planted_anomalies
    differing = checksums(other.path)
    assert differing["fact_order_line"] != first["fact_order_line"]
    assert differing["dim_product"] == first["dim_product"]  # the catalogue is fixed; the draws are not


def test_meta_json_sits_next_to_the_database(built: WarehouseSummary, db: Any) -> None:
    meta = json.loads(meta_path(built.path).read_text(encoding="utf-8"))
    assert meta_path(built.path).name == "demo.duckdb.meta.json"
    assert (meta["seed"], meta["scale"], meta["anchor"]) == (7, SCALE, "2026-11-29")
    for table in WAREHOUSE_SCHEMA:
        assert meta["row_counts"][table] == scalar(db, f"SELECT count(*) FROM {table}")
    assert {a["kind"] for a in meta["planted_anomalies"]} == {"refund_spike", "regional_drop"}
    assert read_warehouse_summary(built.path) == WarehouseSummary.from_meta(meta)
    assert not list(built.path.parent.glob("*.tmp"))


def test_ensure_builds_once_and_rebuilds_only_when_inputs_change(tmp_path: Path) -> None:
    path = ensure_demo_warehouse(tmp_path, ANCHOR, seed=3, scale=0.01)
    assert path == tmp_path / "warehouse" / "demo.duckdb"
    first = path.stat()

    same_month = ensure_demo_warehouse(tmp_path, ANCHOR - timedelta(days=3), seed=3, scale=0.01)
    assert same_month == path
    assert (path.stat().st_ino, path.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)

    ensure_demo_warehouse(tmp_path, date(2026, 12, 2), seed=3, scale=0.01)
    rebuilt = read_warehouse_summary(path)
    assert rebuilt is not None and rebuilt.anchor == date(2026, 12, 2)
    assert path.stat().st_ino != first.st_ino

    meta_path(path).unlink()
    ensure_demo_warehouse(tmp_path, date(2026, 12, 2), seed=3, scale=0.01)
    assert read_warehouse_summary(path) is not None


def test_scale_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="scale"):
        build_demo_warehouse(tmp_path / "x.duckdb", scale=0, anchor=ANCHOR)
    assert not (tmp_path / "x.duckdb").exists()
