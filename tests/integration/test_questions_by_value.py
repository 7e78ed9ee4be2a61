"""Questions answered by value over the demo warehouse: plan -> compile -> run on DuckDB, and the
rows must equal those of a hand-written SQL (written here in DuckDB's dialect, independently of
the compiler, run on a copy of the same file)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from memtool.planning.plan import Plan
from memtool.planning.rule_planner import RulePlanner
from memtool.semantic.catalog import load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.sql.demo_warehouse import build_demo_warehouse
from memtool.sql.duckdb_warehouse import DuckDBWarehouse

ANCHOR = date(2026, 11, 29)

# Paid, non-test order lines: the population every order-line metric reads.
PAID = "NOT l.is_test AND l.paid_at IS NOT NULL"


def paid_in(start: str, end: str) -> str:
    return f"{PAID} AND l.paid_at >= TIMESTAMP '{start}' AND l.paid_at < TIMESTAMP '{end}'"


@dataclass(frozen=True)
class Case:
    question: str
    expected_sql: str
    ordered: bool = False
    covers: frozenset[str] = field(default_factory=frozenset)

    def __str__(self) -> str:  # the test id
        return self.question


def case(question: str, sql: str, *covers: str, ordered: bool = False) -> Case:
    return Case(question, sql, ordered, frozenset(covers))


CASES: list[Case] = [
    # ---- Chinese ---------------------------------------------------------------------------
    case(
        "上个月各渠道净收入是多少",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-10-01", "2026-11-01")}),
             r AS (SELECT l.channel_id, SUM(f.refund_amount) AS refunded
                   FROM fact_refund f JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id GROUP BY 1)
        SELECT c.channel_name, ROUND(SUM(l.gross_amount - l.discount_amount) - COALESCE(MAX(r.refunded), 0), 2)
        FROM l JOIN dim_channel c ON c.channel_id = l.channel_id LEFT JOIN r ON r.channel_id = l.channel_id
        GROUP BY c.channel_name
        """,
        "net_revenue", "channel", "last_month",
    ),
    case(
        "上海上周销售额",
        f"""
        SELECT ROUND(SUM(l.gross_amount), 2) FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
        WHERE {paid_in("2026-11-16", "2026-11-23")} AND g.city = '上海'
        """,
        "gross_revenue", "city", "last_week",
    ),
    case(
        "本月各大区订单数",
        f"""
        SELECT g.region_name, COUNT(DISTINCT l.order_id) FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
        WHERE {paid_in("2026-11-01", "2026-11-30")} GROUP BY 1
        """,
        "order_count", "region", "this_month",
    ),
    case(
        "今年每月退款额",
        f"""
        SELECT CAST(DATE_TRUNC('month', l.paid_at) AS DATE), ROUND(COALESCE(SUM(f.refund_amount), 0), 2)
        FROM fact_order_line l LEFT JOIN fact_refund f ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-01-01", "2026-11-30")} GROUP BY 1 ORDER BY 1
        """,
        "refund_amount", "month", "ytd",
        ordered=True,
    ),
    case(
        "去年各治疗领域销量",
        f"""
        SELECT p.therapeutic_area, SUM(l.qty) FROM fact_order_line l JOIN dim_product p ON p.product_id = l.product_id
        WHERE {paid_in("2025-01-01", "2026-01-01")} GROUP BY 1
        """,
        "units", "therapeutic_area", "last_year",
    ),
    case(
        "本月净收入与去年同期相比",
        f"""
        WITH cur AS (
               SELECT SUM(l.gross_amount - l.discount_amount)
                      - COALESCE((SELECT SUM(f.refund_amount) FROM fact_refund f JOIN fact_order_line l
                                  ON f.order_id = l.order_id AND f.line_id = l.line_id WHERE {paid_in("2026-11-01", "2026-11-30")}), 0) AS v
               FROM fact_order_line l WHERE {paid_in("2026-11-01", "2026-11-30")}),
             prev AS (
               SELECT SUM(l.gross_amount - l.discount_amount)
                      - COALESCE((SELECT SUM(f.refund_amount) FROM fact_refund f JOIN fact_order_line l
                                  ON f.order_id = l.order_id AND f.line_id = l.line_id WHERE {paid_in("2025-11-01", "2025-11-30")}), 0) AS v
               FROM fact_order_line l WHERE {paid_in("2025-11-01", "2025-11-30")})
        SELECT ROUND(cur.v, 2), ROUND(prev.v, 2), ROUND(cur.v - prev.v, 2), ROUND((cur.v - prev.v) / prev.v, 4) FROM cur, prev
        """,
        "net_revenue", "this_month", "yoy", "same_period_last_year",
    ),
    case(
        "今年和去年同期的销售额",
        f"""
        SELECT ROUND(a.v, 2), ROUND(b.v, 2), ROUND(a.v - b.v, 2), ROUND((a.v - b.v) / b.v, 4)
        FROM (SELECT SUM(l.gross_amount) AS v FROM fact_order_line l WHERE {paid_in("2026-01-01", "2026-11-30")}) a,
             (SELECT SUM(l.gross_amount) AS v FROM fact_order_line l WHERE {paid_in("2025-01-01", "2025-11-30")}) b
        """,
        "gross_revenue", "ytd", "same_period_last_year", "yoy",
    ),
    case(
        "最近三个月各品牌客单价",
        f"""
        SELECT p.brand, ROUND(SUM(l.gross_amount) / COUNT(DISTINCT l.order_id), 2)
        FROM fact_order_line l JOIN dim_product p ON p.product_id = l.product_id
        WHERE {paid_in("2026-08-01", "2026-11-01")} GROUP BY 1
        """,
        "avg_order_value", "brand", "last_n_months",
    ),
    case(
        "近90天杭州处方量",
        """
        SELECT SUM(x.qty) FROM fact_prescription x JOIN dim_region g ON g.region_id = x.region_id
        WHERE x.rx_date >= DATE '2026-08-31' AND x.rx_date < DATE '2026-11-29' AND g.city = '杭州'
        """,
        "rx_volume", "city", "last_n_days",
    ),
    case(
        "1月华北净收入",
        f"""
        SELECT ROUND(SUM(l.gross_amount - l.discount_amount) - COALESCE(SUM(f.refunded), 0), 2)
        FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
        LEFT JOIN (SELECT order_id, line_id, SUM(refund_amount) AS refunded FROM fact_refund GROUP BY 1, 2) f
               ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-01-01", "2026-02-01")} AND g.region_name = '华北'
        """,
        "net_revenue", "region", "named_month",
    ),
    case(
        "2026年Q1各产品处方量",
        """
        SELECT p.product_name, SUM(x.qty) FROM fact_prescription x JOIN dim_product p ON p.product_id = x.product_id
        WHERE x.rx_date >= DATE '2026-01-01' AND x.rx_date < DATE '2026-04-01' GROUP BY 1
        """,
        "rx_volume", "product", "named_quarter",
    ),
    case(
        "2025年电商渠道退款率",
        f"""
        SELECT ROUND(CAST((SELECT SUM(f.refund_amount) FROM fact_refund f JOIN fact_order_line l
                             ON f.order_id = l.order_id AND f.line_id = l.line_id JOIN dim_channel c ON c.channel_id = l.channel_id
                            WHERE {paid_in("2025-01-01", "2026-01-01")} AND c.channel_name = '电商') AS DOUBLE)
                     / CAST(SUM(l.gross_amount) AS DOUBLE), 4)
        FROM fact_order_line l JOIN dim_channel c ON c.channel_id = l.channel_id
        WHERE {paid_in("2025-01-01", "2026-01-01")} AND c.channel_name = '电商'
        """,
        "refund_rate", "channel", "named_year",
    ),
    case(
        "2026年3月净收入最高的3个城市",
        f"""
        WITH per_line AS (
          SELECT l.region_id, l.gross_amount - l.discount_amount
                 - COALESCE((SELECT SUM(f.refund_amount) FROM fact_refund f WHERE f.order_id = l.order_id AND f.line_id = l.line_id), 0) AS net
          FROM fact_order_line l WHERE {paid_in("2026-03-01", "2026-04-01")})
        SELECT g.city, ROUND(SUM(net), 2) AS v FROM per_line JOIN dim_region g ON g.region_id = per_line.region_id
        GROUP BY 1 ORDER BY v DESC LIMIT 3
        """,
        "net_revenue", "city", "specific_month", "top_n",
        ordered=True,
    ),
    case(
        "昨天各渠道订单数",
        f"""
        SELECT c.channel_name, COUNT(DISTINCT l.order_id) FROM fact_order_line l JOIN dim_channel c ON c.channel_id = l.channel_id
        WHERE {paid_in("2026-11-28", "2026-11-29")} GROUP BY 1
        """,
        "order_count", "channel", "yesterday",
    ),
    case(
        "本周每天销售额",
        f"""
        SELECT CAST(l.paid_at AS DATE), ROUND(SUM(l.gross_amount), 2) FROM fact_order_line l
        WHERE {paid_in("2026-11-23", "2026-11-30")} GROUP BY 1 ORDER BY 1
        """,
        "gross_revenue", "day", "this_week",
        ordered=True,
    ),
    case(
        "上个月净收入同比",
        f"""
        WITH n AS (
          SELECT CASE WHEN l.paid_at >= TIMESTAMP '2026-10-01' THEN 'cur' ELSE 'prev' END AS period,
                 SUM(l.gross_amount - l.discount_amount) - COALESCE(SUM(f.refunded), 0) AS v
          FROM fact_order_line l
          LEFT JOIN (SELECT order_id, line_id, SUM(refund_amount) AS refunded FROM fact_refund GROUP BY 1, 2) f
                 ON f.order_id = l.order_id AND f.line_id = l.line_id
          WHERE {PAID} AND ((l.paid_at >= TIMESTAMP '2026-10-01' AND l.paid_at < TIMESTAMP '2026-11-01')
                         OR (l.paid_at >= TIMESTAMP '2025-10-01' AND l.paid_at < TIMESTAMP '2025-11-01'))
          GROUP BY 1)
        SELECT ROUND(c.v, 2), ROUND(p.v, 2), ROUND(c.v - p.v, 2), ROUND((c.v - p.v) / p.v, 4)
        FROM n c, n p WHERE c.period = 'cur' AND p.period = 'prev'
        """,
        "net_revenue", "last_month", "yoy",
    ),
    case(
        "上个月各大区销售额环比",
        f"""
        WITH s AS (
          SELECT g.region_name, DATE_TRUNC('month', l.paid_at) AS m, SUM(l.gross_amount) AS v
          FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
          WHERE {paid_in("2026-09-01", "2026-11-01")} GROUP BY 1, 2)
        SELECT c.region_name, ROUND(c.v, 2), ROUND(p.v, 2), ROUND(c.v - p.v, 2), ROUND((c.v - p.v) / p.v, 4)
        FROM s c JOIN s p ON p.region_name = c.region_name AND p.m = TIMESTAMP '2026-09-01'
        WHERE c.m = TIMESTAMP '2026-10-01'
        """,
        "gross_revenue", "region", "last_month", "mom",
    ),
    case(
        "用万元显示今年每季度净收入",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-01-01", "2026-11-30")}),
             r AS (SELECT DATE_TRUNC('quarter', l.paid_at) AS q, SUM(f.refund_amount) AS refunded
                   FROM fact_refund f JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id GROUP BY 1),
             s AS (SELECT DATE_TRUNC('quarter', l.paid_at) AS q, SUM(l.gross_amount - l.discount_amount) AS sold FROM l GROUP BY 1)
        SELECT CAST(s.q AS DATE), ROUND((s.sold - COALESCE(r.refunded, 0)) / 10000, 2) FROM s LEFT JOIN r ON r.q = s.q ORDER BY 1
        """,
        "net_revenue", "quarter", "ytd", "unit_wan",
        ordered=True,
    ),
    case(
        "除了医院以外各渠道上个月销量",
        f"""
        SELECT c.channel_name, SUM(l.qty) FROM fact_order_line l JOIN dim_channel c ON c.channel_id = l.channel_id
        WHERE {paid_in("2026-10-01", "2026-11-01")} AND c.channel_name <> '医院' GROUP BY 1
        """,
        "units", "channel", "last_month", "exclusion",
    ),
    case(
        "Q3和Q2净收入",
        f"""
        WITH per_quarter AS (
          SELECT DATE_TRUNC('quarter', l.paid_at) AS q,
                 SUM(l.gross_amount - l.discount_amount) - COALESCE(SUM(f.refunded), 0) AS v
          FROM fact_order_line l
          LEFT JOIN (SELECT order_id, line_id, SUM(refund_amount) AS refunded FROM fact_refund GROUP BY 1, 2) f
                 ON f.order_id = l.order_id AND f.line_id = l.line_id
          WHERE {paid_in("2026-04-01", "2026-10-01")} GROUP BY 1)
        SELECT ROUND(c.v, 2), ROUND(p.v, 2), ROUND(c.v - p.v, 2), ROUND((c.v - p.v) / p.v, 4)
        FROM per_quarter c, per_quarter p WHERE c.q = TIMESTAMP '2026-07-01' AND p.q = TIMESTAMP '2026-04-01'
        """,
        "net_revenue", "named_quarter", "qoq", "two_windows",
    ),
    # ---- English ---------------------------------------------------------------------------
    case(
        "gross revenue by region last month",
        f"""
        SELECT g.region_name, ROUND(SUM(l.gross_amount), 2) FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
        WHERE {paid_in("2026-10-01", "2026-11-01")} GROUP BY 1
        """,
        "gross_revenue", "region", "last_month",
    ),
    case(
        "Shanghai units last week",
        f"""
        SELECT SUM(l.qty) FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
        WHERE {paid_in("2026-11-16", "2026-11-23")} AND g.city_en = 'Shanghai'
        """,
        "units", "city", "last_week",
    ),
    case(
        "refund rate by channel this month",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-11-01", "2026-11-30")}),
             r AS (SELECT l.channel_id, SUM(f.refund_amount) AS refunded FROM fact_refund f
                   JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id GROUP BY 1)
        SELECT c.channel_name, ROUND(COALESCE(MAX(r.refunded), 0) / SUM(l.gross_amount), 4)
        FROM l JOIN dim_channel c ON c.channel_id = l.channel_id LEFT JOIN r ON r.channel_id = l.channel_id GROUP BY 1
        """,
        "refund_rate", "channel", "this_month",
    ),
    case(
        "monthly net revenue YTD",
        f"""
        WITH per_line AS (
          SELECT DATE_TRUNC('month', l.paid_at) AS m,
                 l.gross_amount - l.discount_amount - COALESCE(SUM(f.refund_amount), 0) AS net
          FROM fact_order_line l LEFT JOIN fact_refund f ON f.order_id = l.order_id AND f.line_id = l.line_id
          WHERE {paid_in("2026-01-01", "2026-11-30")}
          GROUP BY l.order_id, l.line_id, l.paid_at, l.gross_amount, l.discount_amount)
        SELECT CAST(m AS DATE), ROUND(SUM(net), 2) FROM per_line GROUP BY 1 ORDER BY 1
        """,
        "net_revenue", "month", "ytd",
        ordered=True,
    ),
    case(
        "order count by therapeutic area last year",
        f"""
        SELECT p.therapeutic_area, COUNT(DISTINCT l.order_id) FROM fact_order_line l JOIN dim_product p ON p.product_id = l.product_id
        WHERE {paid_in("2025-01-01", "2026-01-01")} GROUP BY 1
        """,
        "order_count", "therapeutic_area", "last_year",
    ),
    case(
        # on its own: the default window (the last full month) a year earlier
        "gross revenue for the same period last year",
        f"SELECT ROUND(SUM(l.gross_amount), 2) FROM fact_order_line l WHERE {paid_in('2025-10-01', '2025-11-01')}",
        "gross_revenue", "same_period_last_year",
    ),
    case(
        "average order value by city over the last 3 months",
        f"""
        SELECT g.city, ROUND(SUM(l.gross_amount) / COUNT(DISTINCT l.order_id), 2)
        FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
        WHERE {paid_in("2026-08-01", "2026-11-01")} GROUP BY 1
        """,
        "avg_order_value", "city", "last_n_months",
    ),
    case(
        "prescription volume by region in the last 90 days",
        """
        SELECT g.region_name, SUM(x.qty) FROM fact_prescription x JOIN dim_region g ON g.region_id = x.region_id
        WHERE x.rx_date BETWEEN DATE '2026-08-31' AND DATE '2026-11-28' GROUP BY 1
        """,
        "rx_volume", "region", "last_n_days",
    ),
    case(
        "e-commerce net revenue in January",
        f"""
        SELECT ROUND(SUM(l.gross_amount - l.discount_amount)
               - COALESCE((SELECT SUM(f.refund_amount) FROM fact_refund f JOIN fact_order_line l ON f.order_id = l.order_id AND f.line_id = l.line_id
                           JOIN dim_channel c ON c.channel_id = l.channel_id
                           WHERE {paid_in("2026-01-01", "2026-02-01")} AND c.channel_en = 'ecommerce'), 0), 2)
        FROM fact_order_line l JOIN dim_channel c ON c.channel_id = l.channel_id
        WHERE {paid_in("2026-01-01", "2026-02-01")} AND c.channel_en = 'ecommerce'
        """,
        "net_revenue", "channel", "named_month",
    ),
    case(
        "units by brand in Q1 2026",
        f"""
        SELECT p.brand, SUM(l.qty) FROM fact_order_line l JOIN dim_product p ON p.product_id = l.product_id
        WHERE {paid_in("2026-01-01", "2026-04-01")} GROUP BY 1
        """,
        "units", "brand", "named_quarter",
    ),
    case(
        "refund amount by product in 2025",
        f"""
        SELECT p.product_name, ROUND(COALESCE(SUM(f.refund_amount), 0), 2)
        FROM fact_order_line l JOIN dim_product p ON p.product_id = l.product_id
        LEFT JOIN fact_refund f ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2025-01-01", "2026-01-01")} GROUP BY 1
        """,
        "refund_amount", "product", "named_year",
    ),
    case(
        "top 5 products by net revenue in March 2026",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-03-01", "2026-04-01")}),
             r AS (SELECT l.product_id, SUM(f.refund_amount) AS refunded FROM fact_refund f
                   JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id GROUP BY 1)
        SELECT p.product_name, ROUND(SUM(l.gross_amount - l.discount_amount) - COALESCE(MAX(r.refunded), 0), 2) AS v
        FROM l JOIN dim_product p ON p.product_id = l.product_id LEFT JOIN r ON r.product_id = l.product_id
        GROUP BY 1 ORDER BY v DESC LIMIT 5
        """,
        "net_revenue", "product", "specific_month", "top_n",
        ordered=True,
    ),
    case(
        "gross revenue yesterday",
        f"SELECT ROUND(SUM(l.gross_amount), 2) FROM fact_order_line l WHERE {paid_in('2026-11-28', '2026-11-29')}",
        "gross_revenue", "yesterday",
    ),
    case(
        "weekly order count over the last 12 weeks",
        f"""
        SELECT CAST(DATE_TRUNC('week', l.paid_at) AS DATE), COUNT(DISTINCT l.order_id) FROM fact_order_line l
        WHERE {paid_in("2026-08-31", "2026-11-23")} GROUP BY 1 ORDER BY 1
        """,
        "order_count", "week", "last_n_weeks",
        ordered=True,
    ),
    case(
        "net revenue year over year by region last month",
        f"""
        WITH net AS (
          SELECT g.region_name, EXTRACT(year FROM l.paid_at) AS y,
                 SUM(l.gross_amount - l.discount_amount) - COALESCE(SUM(f.refunded), 0) AS v
          FROM fact_order_line l JOIN dim_region g ON g.region_id = l.region_id
          LEFT JOIN (SELECT order_id, line_id, SUM(refund_amount) AS refunded FROM fact_refund GROUP BY 1, 2) f
                 ON f.order_id = l.order_id AND f.line_id = l.line_id
          WHERE {PAID} AND l.paid_at >= TIMESTAMP '2025-01-01' AND EXTRACT(month FROM l.paid_at) = 10
                AND l.paid_at < TIMESTAMP '2026-11-01'
          GROUP BY 1, 2)
        SELECT c.region_name, ROUND(c.v, 2), ROUND(p.v, 2), ROUND(c.v - p.v, 2), ROUND((c.v - p.v) / p.v, 4)
        FROM net c JOIN net p ON p.region_name = c.region_name AND p.y = 2025 WHERE c.y = 2026
        """,
        "net_revenue", "region", "last_month", "yoy",
    ),
    case(
        "gross revenue vs last month",
        f"""
        SELECT ROUND(a.v, 2), ROUND(b.v, 2), ROUND(a.v - b.v, 2), ROUND((a.v - b.v) / b.v, 4)
        FROM (SELECT SUM(l.gross_amount) AS v FROM fact_order_line l WHERE {paid_in("2026-10-01", "2026-11-01")}) a,
             (SELECT SUM(l.gross_amount) AS v FROM fact_order_line l WHERE {paid_in("2026-09-01", "2026-10-01")}) b
        """,
        "gross_revenue", "default_window", "mom",
    ),
    case(
        "units by year",
        f"""
        SELECT CAST(DATE_TRUNC('year', l.paid_at) AS DATE), SUM(l.qty) FROM fact_order_line l
        WHERE {paid_in("2025-01-01", "2026-11-30")} GROUP BY 1 ORDER BY 1
        """,
        "units", "year", "default_window",
        ordered=True,
    ),
    case(
        "Atorvastatin units by month this year",
        f"""
        SELECT CAST(DATE_TRUNC('month', l.paid_at) AS DATE), SUM(l.qty)
        FROM fact_order_line l JOIN dim_product p ON p.product_id = l.product_id
        WHERE {paid_in("2026-01-01", "2026-11-30")} AND p.product_en LIKE 'Atorvastatin%' GROUP BY 1 ORDER BY 1
        """,
        "units", "product", "month", "ytd",
        ordered=True,
    ),
    case(
        "which channel had the highest refund rate last month",
        f"""
        SELECT c.channel_name, ROUND(SUM(COALESCE(f.refunded, 0)) / SUM(l.gross_amount), 4) AS rate
        FROM fact_order_line l JOIN dim_channel c ON c.channel_id = l.channel_id
        LEFT JOIN (SELECT order_id, line_id, SUM(refund_amount) AS refunded FROM fact_refund GROUP BY 1, 2) f
               ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-10-01", "2026-11-01")} GROUP BY 1 ORDER BY rate DESC LIMIT 1
        """,
        "refund_rate", "channel", "last_month", "top_n",
        ordered=True,
    ),
    # ---- refund reason: an attribute of the refund, only for refund amount and refund rate -----
    case(
        "上个月各退款原因的退款额",
        f"""
        SELECT f.reason, ROUND(SUM(f.refund_amount), 2)
        FROM fact_refund f JOIN fact_order_line l ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-10-01", "2026-11-01")} GROUP BY 1
        """,
        "refund_amount", "refund_reason", "last_month",
    ),
    case(
        "2026年6月退款原因分布",
        f"""
        SELECT f.reason, SUM(f.refund_amount) AS v
        FROM fact_refund f JOIN fact_order_line l ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-06-01", "2026-07-01")} GROUP BY 1 ORDER BY v DESC
        """,
        "refund_amount", "refund_reason", "specific_month",
        ordered=True,
    ),
    case(
        "质量问题的退款额",
        f"""
        SELECT ROUND(SUM(f.refund_amount), 2)
        FROM fact_refund f JOIN fact_order_line l ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-10-01", "2026-11-01")} AND f.reason = '质量问题'
        """,
        "refund_amount", "refund_reason", "default_window",
    ),
    case(
        # the denominator is the gross of every line of the channel, not only of the refunded ones
        "各渠道质量问题退款率",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-10-01", "2026-11-01")}),
             q AS (SELECT l.channel_id, SUM(f.refund_amount) AS refunded
                   FROM fact_refund f JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id
                   WHERE f.reason = '质量问题' GROUP BY 1)
        SELECT c.channel_name, ROUND(COALESCE(MAX(q.refunded), 0) / SUM(l.gross_amount), 4)
        FROM l JOIN dim_channel c ON c.channel_id = l.channel_id LEFT JOIN q ON q.channel_id = l.channel_id
        GROUP BY 1
        """,
        "refund_rate", "refund_reason", "channel", "default_window",
    ),
    case(
        "上个月各退款原因退款率同比",
        f"""
        WITH l AS (SELECT CASE WHEN l.paid_at >= TIMESTAMP '2026-01-01' THEN 'cur' ELSE 'prev' END AS period, l.*
                   FROM fact_order_line l
                   WHERE {PAID} AND ((l.paid_at >= TIMESTAMP '2026-10-01' AND l.paid_at < TIMESTAMP '2026-11-01')
                                  OR (l.paid_at >= TIMESTAMP '2025-10-01' AND l.paid_at < TIMESTAMP '2025-11-01'))),
             g AS (SELECT period, SUM(gross_amount) AS gross FROM l GROUP BY 1),
             r AS (SELECT l.period, f.reason, SUM(f.refund_amount) AS refunded
                   FROM fact_refund f JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id GROUP BY 1, 2),
             rate AS (SELECT r.period, r.reason, r.refunded / g.gross AS v FROM r JOIN g ON g.period = r.period)
        SELECT c.reason, ROUND(c.v, 4), ROUND(p.v, 4), ROUND(c.v - p.v, 4), ROUND((c.v - p.v) / p.v, 4)
        FROM rate c JOIN rate p ON p.reason = c.reason AND p.period = 'prev' WHERE c.period = 'cur'
        """,
        "refund_rate", "refund_reason", "last_month", "yoy",
    ),
    case(
        "refund rate by reason in June 2026",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-06-01", "2026-07-01")})
        SELECT f.reason, ROUND(SUM(f.refund_amount) / (SELECT SUM(gross_amount) FROM l), 4)
        FROM fact_refund f JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id GROUP BY 1
        """,
        "refund_rate", "refund_reason", "named_month",
    ),
    case(
        "monthly refund amount for quality issues this year",
        f"""
        WITH l AS (SELECT * FROM fact_order_line l WHERE {paid_in("2026-01-01", "2026-11-30")}),
             months AS (SELECT DISTINCT DATE_TRUNC('month', l.paid_at) AS m FROM l),
             q AS (SELECT DATE_TRUNC('month', l.paid_at) AS m, SUM(f.refund_amount) AS refunded
                   FROM fact_refund f JOIN l ON f.order_id = l.order_id AND f.line_id = l.line_id
                   WHERE f.reason = '质量问题' GROUP BY 1)
        SELECT CAST(months.m AS DATE), ROUND(COALESCE(q.refunded, 0), 2) FROM months LEFT JOIN q ON q.m = months.m ORDER BY 1
        """,
        "refund_amount", "refund_reason", "month", "ytd",
        ordered=True,
    ),
    case(
        "refund amount by reason last month excluding quality issues",
        f"""
        SELECT f.reason, ROUND(SUM(f.refund_amount), 2)
        FROM fact_refund f JOIN fact_order_line l ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {paid_in("2026-10-01", "2026-11-01")} AND f.reason <> '质量问题' GROUP BY 1
        """,
        "refund_amount", "refund_reason", "last_month", "exclusion",
    ),
]


@dataclass
class Demo:
    planner: RulePlanner
    warehouse: DuckDBWarehouse
    reference: Any  # a plain DuckDB connection to a copy of the file, for the hand-written SQL


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    import duckdb

    root = tmp_path_factory.mktemp("warehouse")
    path = root / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.05, anchor=ANCHOR)
    copy = root / "reference.duckdb"
    shutil.copyfile(path, copy)
    warehouse = DuckDBWarehouse(path)
    catalog = load_catalog()
    entities = EntityIndex.from_warehouse(warehouse, catalog)
    reference = duckdb.connect(str(copy), read_only=True)
    try:
        yield Demo(RulePlanner(catalog, entities, ANCHOR), warehouse, reference)
    finally:
        reference.close()
        warehouse.close()


def plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return value


def same_value(left: Any, right: Any) -> bool:
    left, right = plain(left), plain(right)
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=0.0051)
    return left == right


def same_rows(actual: list[list[Any]], expected: list[tuple[Any, ...]], *, ordered: bool) -> bool:
    actual_rows = [[plain(v) for v in row] for row in actual]
    expected_rows = [[plain(v) for v in row] for row in expected]
    if not ordered:
        key = lambda row: [str(v) for v in row]  # noqa: E731 - a sort key
        actual_rows, expected_rows = sorted(actual_rows, key=key), sorted(expected_rows, key=key)
    return len(actual_rows) == len(expected_rows) and all(
        len(a) == len(e) and all(same_value(x, y) for x, y in zip(a, e, strict=True)) for a, e in zip(actual_rows, expected_rows, strict=True)
    )


def ask(demo: Demo, question: str) -> tuple[Plan, list[str], list[list[Any]]]:
    plan = demo.planner.plan(question)
    assert plan.status == "planned", f"{question!r}: {plan.clarification or plan.notes}"
    assert plan.sql is not None
    result = demo.warehouse.run(plan.sql, max_rows=5000, timeout_seconds=20)
    assert not result.truncated
    return plan, result.columns, result.rows


@pytest.mark.parametrize("item", CASES, ids=str)
def test_question_rows_equal_the_hand_written_sql(demo: Demo, item: Case) -> None:
    plan, columns, rows = ask(demo, item.question)
    expected = demo.reference.execute(item.expected_sql).fetchall()

    assert rows, f"{item.question!r} returned no rows: the comparison would prove nothing"
    assert expected and all(v is not None for row in expected for v in row)
    assert same_rows(rows, expected, ordered=item.ordered), (
        f"{item.question!r}\nplanned SQL:\n{plan.sql}\ncolumns {columns}\ngot      {rows}\nexpected {expected}"
    )


def test_the_questions_cover_every_metric_dimension_time_family_and_shape() -> None:
    covered = set().union(*(c.covers for c in CASES))
    catalog = load_catalog()
    chinese = [c for c in CASES if any("\u4e00" <= ch <= "\u9fff" for ch in c.question)]

    assert len(CASES) >= 30
    assert len(chinese) >= 15 and len(CASES) - len(chinese) >= 15
    assert {m.name for m in catalog.metrics} <= covered
    assert {d.name for d in catalog.dimensions} <= covered
    families = {
        "last_month", "last_week", "this_month", "this_week", "ytd", "last_year", "same_period_last_year",
        "last_n_months", "last_n_days", "last_n_weeks", "named_month", "named_quarter", "named_year",
        "specific_month", "yesterday", "default_window",
    }  # fmt: skip
    assert families <= covered
    assert {"top_n", "yoy", "mom", "qoq", "two_windows", "unit_wan", "exclusion"} <= covered


def test_result_columns_are_stable_english_names(demo: Demo) -> None:
    _, columns, _ = ask(demo, "上个月各渠道净收入是多少")
    _, wan_columns, _ = ask(demo, "用万元显示今年每季度净收入")
    _, compared, _ = ask(demo, "上个月各大区销售额环比")

    assert columns == ["channel", "net_revenue"]
    assert wan_columns == ["quarter", "net_revenue_10k_yuan"]
    assert compared == ["region", "gross_revenue", "gross_revenue_previous", "gross_revenue_change", "gross_revenue_change_rate"]


def test_chinese_and_english_names_give_the_same_rows(demo: Demo) -> None:
    _, _, zh = ask(demo, "上海上周销售额")
    _, _, en = ask(demo, "Shanghai gross revenue last week")
    _, _, beijing = ask(demo, "北京上周销售额")

    assert zh == en
    assert zh != beijing


def test_net_revenue_counts_a_later_refund_in_the_month_the_line_was_paid(demo: Demo) -> None:
    """A refund made in month M+1 for a line paid in month M lowers M, not M+1."""
    db = demo.reference
    crossing = db.execute(
        f"""
        SELECT f.refund_id, f.refund_amount, DATE_TRUNC('month', l.paid_at) AS paid_month, f.refunded_at
        FROM fact_refund f JOIN fact_order_line l ON f.order_id = l.order_id AND f.line_id = l.line_id
        WHERE {PAID} AND DATE_TRUNC('month', f.refunded_at) = DATE_TRUNC('month', l.paid_at) + INTERVAL 1 MONTH
          AND l.paid_at < TIMESTAMP '2026-11-01'
        ORDER BY (EXTRACT(month FROM l.paid_at) = 1) DESC, f.refund_id
        LIMIT 1
        """
    ).fetchone()
    assert crossing is not None, "the demo data should hold a refund in the month after payment"
    _, refund_amount, paid_month, _ = crossing
    start = paid_month.date()
    end = date(start.year + (start.month == 12), start.month % 12 + 1, 1)

    plan, _, rows = ask(demo, f"{start.year}年{start.month}月净收入")

    by_paid_month = db.execute(
        f"""
        SELECT SUM(l.gross_amount - l.discount_amount)
               - (SELECT COALESCE(SUM(f.refund_amount), 0) FROM fact_refund f JOIN fact_order_line l
                  ON f.order_id = l.order_id AND f.line_id = l.line_id WHERE {paid_in(start.isoformat(), end.isoformat())})
        FROM fact_order_line l WHERE {paid_in(start.isoformat(), end.isoformat())}
        """
    ).fetchone()[0]
    by_refund_month = db.execute(
        f"""
        SELECT SUM(l.gross_amount - l.discount_amount)
               - (SELECT COALESCE(SUM(f.refund_amount), 0) FROM fact_refund f JOIN fact_order_line l
                  ON f.order_id = l.order_id AND f.line_id = l.line_id
                  WHERE {PAID} AND f.refunded_at >= TIMESTAMP '{start}' AND f.refunded_at < TIMESTAMP '{end}')
        FROM fact_order_line l WHERE {paid_in(start.isoformat(), end.isoformat())}
        """
    ).fetchone()[0]
    assert plan.intent is not None and plan.intent.time_window is not None
    assert (plan.intent.time_window.start, plan.intent.time_window.end) == (start, end)
    assert same_value(rows[0][0], by_paid_month)
    # Counting the refund in the month it was refunded would have given other numbers.
    assert not same_value(rows[0][0], by_refund_month)
    assert not same_value(rows[0][0], float(by_paid_month) + float(refund_amount))


def test_the_planners_sql_passes_the_guardrails(demo: Demo) -> None:
    from memtool.sql import guardrails

    policy = guardrails.GuardPolicy.for_model(demo.warehouse.describe(), load_catalog(), max_rows=1000, timeout_seconds=30)
    for item in CASES:
        plan = demo.planner.plan(item.question)
        verdict = guardrails.check_sql(plan.sql or "", policy)
        assert verdict.allowed, f"{item.question!r}: {verdict.reason}\n{plan.sql}"


def test_sql_is_redshift_dialect_that_transpiles(demo: Demo) -> None:
    import sqlglot

    for item in CASES:
        plan = demo.planner.plan(item.question)
        assert len(sqlglot.parse(plan.sql or "", read="redshift")) == 1
        assert sqlglot.transpile(plan.sql or "", read="redshift", write="duckdb")


def test_data_is_where_the_questions_expect_it(demo: Demo) -> None:
    """Guards the suite itself: the windows the questions use hold data in the generated warehouse."""
    first, last = demo.reference.execute("SELECT MIN(paid_at), MAX(paid_at) FROM fact_order_line").fetchone()

    assert first.date() <= date(2025, 1, 1) or first.date() <= date(2024, 12, 31)
    assert last.date() == ANCHOR
    assert Path(demo.warehouse.path).exists()


def test_entities_are_indexed_from_the_warehouse(demo: Demo) -> None:
    entities = demo.planner.entities
    products = demo.reference.execute("SELECT product_name, product_en, brand FROM dim_product ORDER BY product_id").fetchall()

    assert entities.source == "warehouse"
    assert len(entities.of("product")) == len(products) and len(entities.of("brand")) == len({b for _, _, b in products})
    for name, english, brand in products:
        assert [(e.dimension, e.value) for e in entities.lookup(english)] == [("product", name)]
        assert [(e.dimension, e.value) for e in entities.lookup(brand)] == [("brand", brand)]
    assert [(e.dimension, e.value) for e in entities.lookup("阿托伐他汀")] == [("product", "阿托伐他汀钙片")]
    assert [(e.dimension, e.value) for e in entities.lookup("Shanghai")] == [("city", "上海")]


def test_partial_bucket_labels_are_the_labels_the_sql_returns(demo: Demo) -> None:
    from memtool.semantic.periods import partial_buckets

    # Given trends whose last (and first) buckets are partial on the anchor day
    monthly, _, month_rows = ask(demo, "今年每月净收入")
    weekly, _, week_rows = ask(demo, "本月每周订单数")
    assert monthly.intent is not None and weekly.intent is not None

    # When the partial buckets are worked out from the intents
    months = partial_buckets(monthly.intent, ANCHOR)
    weeks = partial_buckets(weekly.intent, ANCHOR)

    # Then they name exactly the first/last rows, in the form the SQL returns them
    labels = lambda rows: [plain(row[0]) for row in rows]  # noqa: E731 - a local helper
    assert [b.label for b in months] == ["2026-11-01"] == labels(month_rows)[-1:]
    assert [b.label for b in weeks] == ["2026-10-26", "2026-11-23"]
    assert [labels(week_rows)[0], labels(week_rows)[-1]] == ["2026-10-26", "2026-11-23"]


def test_refunds_counted_by_refund_date_equal_hand_written_sql(demo_warehouse):
    """The refund-date definition a diagnosis may verify: this window's lines, minus the refunds
    made in this window on any paid line (paid then or earlier), by hand."""
    from dataclasses import replace
    from datetime import date

    from memtool.semantic.compiler import CompileOptions, IntentCompiler
    from memtool.semantic.intent import Filter, Intent, TimeWindow
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    options = replace(CompileOptions(), refunds_by_refund_date=frozenset({"net_revenue", "refund_amount", "refund_rate"}))
    window = TimeWindow(start=date(2026, 10, 1), end=date(2026, 11, 1))
    hand = """
    WITH lines AS (SELECT ol.* FROM fact_order_line ol JOIN dim_region dr ON dr.region_id = ol.region_id
                   WHERE dr.city = '上海' AND ol.is_test = FALSE AND ol.paid_at IS NOT NULL),
    sales AS (SELECT SUM(gross_amount - discount_amount) AS s, SUM(gross_amount) AS g FROM lines
              WHERE paid_at >= '2026-10-01' AND paid_at < '2026-11-01'),
    refs AS (SELECT SUM(r.refund_amount) AS r FROM fact_refund r JOIN lines l ON l.order_id = r.order_id AND l.line_id = r.line_id
             WHERE r.refunded_at >= '2026-10-01' AND r.refunded_at < '2026-11-01')
    SELECT ROUND(s - COALESCE(r, 0), 2), ROUND(COALESCE(r, 0), 2), ROUND(COALESCE(r, 0) / g, 4) FROM sales, refs"""
    warehouse = DuckDBWarehouse(demo_warehouse)
    try:
        [expected] = warehouse.run(hand, max_rows=5, timeout_seconds=10).rows
        got = [
            warehouse.run(
                IntentCompiler(options=options).compile(Intent(metric=m, filters=(Filter(dimension="city", values=("上海",)),), time_window=window)).sql,
                max_rows=5,
                timeout_seconds=10,
            ).rows[0][0]
            for m in ("net_revenue", "refund_amount", "refund_rate")
        ]
    finally:
        warehouse.close()
    assert got == pytest.approx(expected)
