"""Does memtool learn? Teach terms, then ask held-out questions and follow-ups, checked by value.

Starts `memtool serve` as a child process, as ``bench/soak.py`` does (a temp home, the default
SQLite store, the demo warehouse at ``--scale``, MEMTOOL_TODAY fixed at 2026-11-29 so every
window and every figure is reproducible), and talks to it over HTTP only:

1. **Teaching.** User ``taught`` asks one question for each of 8 terms the catalog does not know
   or finds ambiguous (each must come back ``needs_clarification``: that is the check that the
   term really is unknown). Four are taught by replying to the clarification (by label, by a
   synonym, by position in zh and en); four by ``POST /feedback`` with a correction on the
   clarification's episode (free text zh twice, en once, and one structured), then asked again.
2. **Held-out questions.** 36 questions that use the taught terms in new contexts (other windows,
   groupings, places, languages, two taught terms at once), asked by ``taught`` and by
   ``untaught`` (same tenant, never taught). A question is correct when its rows equal, by value,
   those of SQL written by hand below, run on the same DuckDB file opened read-only: rows are
   compared sorted, labels in English mapped to the warehouse's Chinese names, numbers within a
   cent (amounts) or 0.0001 (ratios; memtool rounds to 2 and 4 decimals). A clarification is
   not an answer. Turns to an answer are measured apart, afterwards, so that no reply teaches a
   later scored question: each clarification is answered with the option that means the term
   (the untaught arm with a fresh user per question).
3. **Follow-ups.** 10 sessions, 40 follow-up turns, zh and en, every follow-up pattern of the
   issue; every turn checked by value against hand-written SQL for the question in full.

    python bench/learning_eval.py [--scale 0.2] [--out bench/results/learning_eval.md] [--keep-home]

The rates are the result: a low one does not fail the script. It exits non-zero only when the
evaluation itself cannot run (the server does not start, a hand-written query is broken).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak import _free_port, request, settle, start_server  # noqa: E402 - the soak's HTTP client and server start

ROOT = Path(__file__).resolve().parents[1]
TODAY = date(2026, 11, 29)  # a Sunday: last week is 11-16..11-22, last month October, last quarter Q3
TENANT = "learning-eval"
MAX_TURNS = 4

# ---- hand-written SQL: the populations the catalog defines ----------------------------------

# Order-line metrics read paid, non-test lines, bucketed by paid_at.
PAID = "NOT l.is_test AND l.paid_at IS NOT NULL"
LINES = "fact_order_line l"
REGION = "JOIN dim_region g ON g.region_id = l.region_id"
CHANNEL = "JOIN dim_channel c ON c.channel_id = l.channel_id"
PRODUCT = "JOIN dim_product p ON p.product_id = l.product_id"
# A line's refunds (any time, any reason): they count in the period of the line's paid_at.
LINE_REFUND = "COALESCE((SELECT SUM(f.refund_amount) FROM fact_refund f WHERE f.order_id = l.order_id AND f.line_id = l.line_id), 0)"
NET = f"SUM(l.gross_amount - l.discount_amount - {LINE_REFUND})"
GROSS = "SUM(l.gross_amount)"
UNITS = "SUM(l.qty)"
ORDERS = "COUNT(DISTINCT l.order_id)"
AOV = "SUM(l.gross_amount) / COUNT(DISTINCT l.order_id)"
REFUND_RATE = f"SUM({LINE_REFUND}) / SUM(l.gross_amount)"
REFUNDS = f"SUM({LINE_REFUND})"
MONTH = "CAST(DATE_TRUNC('month', l.paid_at) AS DATE)"
QUARTER = "CAST(DATE_TRUNC('quarter', l.paid_at) AS DATE)"
# Prescriptions: fact_prescription by rx_date, no channel.
RX = "fact_prescription x"
RX_REGION = "JOIN dim_region g ON g.region_id = x.region_id"
RX_PRODUCT = "JOIN dim_product p ON p.product_id = x.product_id"
RX_QUARTER = "CAST(DATE_TRUNC('quarter', x.rx_date) AS DATE)"


def paid(start: str, end: str) -> str:
    """Paid, non-test lines with paid_at in [start, end)."""
    return f"{PAID} AND l.paid_at >= TIMESTAMP '{start}' AND l.paid_at < TIMESTAMP '{end}'"


def rx(start: str, end: str) -> str:
    return f"x.rx_date >= DATE '{start}' AND x.rx_date < DATE '{end}'"


# Windows, as of TODAY.
LAST_MONTH = ("2026-10-01", "2026-11-01")
LAST_WEEK = ("2026-11-16", "2026-11-23")
YESTERDAY = ("2026-11-28", "2026-11-29")
THIS_YEAR = ("2026-01-01", "2027-01-01")  # the data ends on TODAY
LAST_YEAR = ("2025-01-01", "2026-01-01")
YTD_LAST_YEAR = ("2025-01-01", "2025-11-30")  # the same period last year: 1 January to 29 November
LAST_QUARTER = ("2026-07-01", "2026-10-01")
Q1, Q2, Q3 = ("2026-01-01", "2026-04-01"), ("2026-04-01", "2026-07-01"), ("2026-07-01", "2026-10-01")
AUG, SEP, OCT = ("2026-08-01", "2026-09-01"), ("2026-09-01", "2026-10-01"), ("2026-10-01", "2026-11-01")
AUG_2025, SEP_2025, OCT_2025 = ("2025-08-01", "2025-09-01"), ("2025-09-01", "2025-10-01"), ("2025-10-01", "2025-11-01")


# ---- what is taught ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Meaning:
    """What a term means: a metric, or a value of a dimension (the clarification's target shape)."""

    metric: str | None = None
    dimension: str | None = None
    value: str | None = None

    def matches(self, target: dict[str, Any] | None) -> bool:
        return bool(target) and all(target.get(k) == v for k, v in vars(self).items() if v is not None)


TERMS: dict[str, Meaning] = {
    "营收": Meaning(metric="net_revenue"),  # ambiguous: gross or net
    "动销": Meaning(metric="units"),
    "江浙沪": Meaning(dimension="region", value="华东"),  # 上海, 杭州, 南京: the demo's 华东 exactly
    "GMV": Meaning(metric="gross_revenue"),  # ambiguous
    "单子数": Meaning(metric="order_count"),
    "takings": Meaning(metric="net_revenue"),
    "开方量": Meaning(metric="rx_volume"),
    "魔都": Meaning(dimension="city", value="上海"),
}


@dataclass(frozen=True)
class Lesson:
    term: str
    question: str  # asked first; must come back needs_clarification
    sql: str  # the question's answer once the term is known
    how: Literal["reply", "feedback"]
    reply: str | None = None  # a label or synonym; "ordinal-zh"/"ordinal-en": by the option's position
    correction: str | dict[str, str] | None = None


LESSONS: list[Lesson] = [
    Lesson(
        "营收", "上个月华北各城市的营收",
        f"SELECT g.city, {NET} FROM {LINES} {REGION} WHERE {paid(*LAST_MONTH)} AND g.region_name = '华北' GROUP BY 1",
        "reply", reply="ordinal-zh",
    ),
    Lesson(
        "动销", "今年各品牌的动销",
        f"SELECT p.brand, {UNITS} FROM {LINES} {PRODUCT} WHERE {paid(*THIS_YEAR)} GROUP BY 1",
        "reply", reply="销量",
    ),
    Lesson(
        "江浙沪", "上个月江浙沪各渠道的销售额",
        f"SELECT c.channel_name, {GROSS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.region_name = '华东' GROUP BY 1",
        "reply", reply="华东地区",  # a synonym of the option 华东
    ),
    Lesson(
        "GMV", "GMV by therapeutic area last month",
        f"SELECT p.therapeutic_area, {GROSS} FROM {LINES} {PRODUCT} WHERE {paid(*LAST_MONTH)} GROUP BY 1",
        "reply", reply="ordinal-en",
    ),
    Lesson(
        "单子数", "上周各大区的单子数",
        f"SELECT g.region_name, {ORDERS} FROM {LINES} {REGION} WHERE {paid(*LAST_WEEK)} GROUP BY 1",
        "feedback", correction="单子数就是订单数",
    ),
    Lesson(
        "takings", "takings by city in October 2026",
        f"SELECT g.city, {NET} FROM {LINES} {REGION} WHERE {paid(*OCT)} GROUP BY 1",
        "feedback", correction="by takings I mean net revenue",
    ),
    Lesson(
        "开方量", "上个月各大区的开方量",
        f"SELECT g.region_name, SUM(x.qty) FROM {RX} {RX_REGION} WHERE {rx(*LAST_MONTH)} GROUP BY 1",
        "feedback", correction={"term": "开方量", "means": "处方量"},
    ),
    Lesson(
        "魔都", "魔都上周的销售额",
        f"SELECT {GROSS} FROM {LINES} {REGION} WHERE {paid(*LAST_WEEK)} AND g.city = '上海'",
        "feedback", correction="魔都指的是上海",
    ),
]
# A correction whose meaning the catalog lacks: refused with a 400, nothing stored.
REFUSED_CORRECTION = "利润率就是毛利"


# ---- held-out questions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    text: str
    sql: str
    terms: tuple[str, ...] = ()  # the taught terms it uses
    pattern: str = ""  # follow-ups: which pattern the turn exercises


def held_out(text: str, terms: str, sql: str) -> Question:
    return Question(text, sql, tuple(terms.split()))


HELD_OUT: list[Question] = [
    # 营收 -> net revenue
    held_out("2026年第三季度各城市的营收", "营收", f"SELECT g.city, {NET} FROM {LINES} {REGION} WHERE {paid(*Q3)} GROUP BY 1"),
    held_out("今年每月的营收", "营收", f"SELECT {MONTH}, {NET} FROM {LINES} WHERE {paid(*THIS_YEAR)} GROUP BY 1"),
    held_out("去年华南的营收", "营收", f"SELECT {NET} FROM {LINES} {REGION} WHERE {paid(*LAST_YEAR)} AND g.region_name = '华南'"),
    held_out("营收 by channel in August 2026", "营收", f"SELECT c.channel_name, {NET} FROM {LINES} {CHANNEL} WHERE {paid(*AUG)} GROUP BY 1"),
    held_out(
        "上个月营收最高的5个产品", "营收",
        f"SELECT p.product_name, {NET} AS v FROM {LINES} {PRODUCT} WHERE {paid(*LAST_MONTH)} GROUP BY 1 ORDER BY v DESC LIMIT 5",
    ),
    # 动销 -> units
    held_out("上周各渠道的动销", "动销", f"SELECT c.channel_name, {UNITS} FROM {LINES} {CHANNEL} WHERE {paid(*LAST_WEEK)} GROUP BY 1"),
    held_out("2026年Q2各治疗领域的动销", "动销", f"SELECT p.therapeutic_area, {UNITS} FROM {LINES} {PRODUCT} WHERE {paid(*Q2)} GROUP BY 1"),
    held_out("深圳去年的动销", "动销", f"SELECT {UNITS} FROM {LINES} {REGION} WHERE {paid(*LAST_YEAR)} AND g.city = '深圳'"),
    held_out("动销 by brand in October 2026", "动销", f"SELECT p.brand, {UNITS} FROM {LINES} {PRODUCT} WHERE {paid(*OCT)} GROUP BY 1"),
    # 江浙沪 -> region 华东
    held_out("上个月江浙沪的销售额", "江浙沪", f"SELECT {GROSS} FROM {LINES} {REGION} WHERE {paid(*LAST_MONTH)} AND g.region_name = '华东'"),
    held_out(
        "江浙沪各城市今年的订单数", "江浙沪",
        f"SELECT g.city, {ORDERS} FROM {LINES} {REGION} WHERE {paid(*THIS_YEAR)} AND g.region_name = '华东' GROUP BY 1",
    ),
    held_out(
        "units sold in 江浙沪 by channel in September", "江浙沪",
        f"SELECT c.channel_name, {UNITS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*SEP)} AND g.region_name = '华东' GROUP BY 1",
    ),
    held_out(
        "江浙沪上个月各产品的处方量", "江浙沪",
        f"SELECT p.product_name, SUM(x.qty) FROM {RX} {RX_PRODUCT} {RX_REGION} WHERE {rx(*LAST_MONTH)} AND g.region_name = '华东' GROUP BY 1",
    ),
    held_out("江浙沪9月的营收", "江浙沪 营收", f"SELECT {NET} FROM {LINES} {REGION} WHERE {paid(*SEP)} AND g.region_name = '华东'"),
    # GMV -> gross revenue
    held_out("上季度各大区的GMV", "GMV", f"SELECT g.region_name, {GROSS} FROM {LINES} {REGION} WHERE {paid(*LAST_QUARTER)} GROUP BY 1"),
    held_out("GMV by city last week", "GMV", f"SELECT g.city, {GROSS} FROM {LINES} {REGION} WHERE {paid(*LAST_WEEK)} GROUP BY 1"),
    held_out(
        "今年电商渠道每月的GMV", "GMV",
        f"SELECT {MONTH}, {GROSS} FROM {LINES} {CHANNEL} WHERE {paid(*THIS_YEAR)} AND c.channel_name = '电商' GROUP BY 1",
    ),
    held_out(
        "top 3 therapeutic areas by GMV in 2025", "GMV",
        f"SELECT p.therapeutic_area, {GROSS} AS v FROM {LINES} {PRODUCT} WHERE {paid(*LAST_YEAR)} GROUP BY 1 ORDER BY v DESC LIMIT 3",
    ),
    # 单子数 -> order count
    held_out("昨天各城市的单子数", "单子数", f"SELECT g.city, {ORDERS} FROM {LINES} {REGION} WHERE {paid(*YESTERDAY)} GROUP BY 1"),
    held_out("2026年10月各渠道的单子数", "单子数", f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} WHERE {paid(*OCT)} GROUP BY 1"),
    held_out("单子数 by region in Q1 2026", "单子数", f"SELECT g.region_name, {ORDERS} FROM {LINES} {REGION} WHERE {paid(*Q1)} GROUP BY 1"),
    held_out(
        "北京今年每月的单子数", "单子数",
        f"SELECT {MONTH}, {ORDERS} FROM {LINES} {REGION} WHERE {paid(*THIS_YEAR)} AND g.city = '北京' GROUP BY 1",
    ),
    held_out("魔都上个月的单子数", "魔都 单子数", f"SELECT {ORDERS} FROM {LINES} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '上海'"),
    # takings -> net revenue
    held_out("takings by region in September 2026", "takings", f"SELECT g.region_name, {NET} FROM {LINES} {REGION} WHERE {paid(*SEP)} GROUP BY 1"),
    held_out(
        "monthly takings in Shanghai this year", "takings",
        f"SELECT {MONTH}, {NET} FROM {LINES} {REGION} WHERE {paid(*THIS_YEAR)} AND g.city = '上海' GROUP BY 1",
    ),
    held_out(
        "takings for e-commerce last quarter", "takings",
        f"SELECT {NET} FROM {LINES} {CHANNEL} WHERE {paid(*LAST_QUARTER)} AND c.channel_name = '电商'",
    ),
    held_out(
        "top 3 products by takings last month", "takings",
        f"SELECT p.product_name, {NET} AS v FROM {LINES} {PRODUCT} WHERE {paid(*LAST_MONTH)} GROUP BY 1 ORDER BY v DESC LIMIT 3",
    ),
    held_out("上个月各渠道的takings", "takings", f"SELECT c.channel_name, {NET} FROM {LINES} {CHANNEL} WHERE {paid(*LAST_MONTH)} GROUP BY 1"),
    # 开方量 -> prescription volume
    held_out("上个月各城市的开方量", "开方量", f"SELECT g.city, SUM(x.qty) FROM {RX} {RX_REGION} WHERE {rx(*LAST_MONTH)} GROUP BY 1"),
    held_out("2025年各治疗领域的开方量", "开方量", f"SELECT p.therapeutic_area, SUM(x.qty) FROM {RX} {RX_PRODUCT} WHERE {rx(*LAST_YEAR)} GROUP BY 1"),
    held_out("开方量 by product in Q2 2026", "开方量", f"SELECT p.product_name, SUM(x.qty) FROM {RX} {RX_PRODUCT} WHERE {rx(*Q2)} GROUP BY 1"),
    held_out(
        "今年华北每季度的开方量", "开方量",
        f"SELECT {RX_QUARTER}, SUM(x.qty) FROM {RX} {RX_REGION} WHERE {rx(*THIS_YEAR)} AND g.region_name = '华北' GROUP BY 1",
    ),
    # 魔都 -> city 上海
    held_out(
        "魔都上个月各渠道的净收入", "魔都",
        f"SELECT c.channel_name, {NET} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '上海' GROUP BY 1",
    ),
    held_out("魔都今年每月的销量", "魔都", f"SELECT {MONTH}, {UNITS} FROM {LINES} {REGION} WHERE {paid(*THIS_YEAR)} AND g.city = '上海' GROUP BY 1"),
    held_out(
        "魔都 refund rate by channel in 2025", "魔都",
        f"SELECT c.channel_name, {REFUND_RATE} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_YEAR)} AND g.city = '上海' GROUP BY 1",
    ),
    held_out("魔都9月的开方量", "魔都 开方量", f"SELECT SUM(x.qty) FROM {RX} {RX_REGION} WHERE {rx(*SEP)} AND g.city = '上海'"),
]


# ---- follow-up sessions --------------------------------------------------------------------------


@dataclass(frozen=True)
class Conversation:
    user: str
    opening: Question
    turns: list[Question]


def turn(text: str, pattern: str, sql: str) -> Question:
    return Question(text, sql, pattern=pattern)


def opening(text: str, sql: str) -> Question:
    return Question(text, sql, pattern="opening")


CONVERSATIONS: list[Conversation] = [
    Conversation(
        "analyst",
        opening("2026年9月各大区的销售额", f"SELECT g.region_name, {GROSS} FROM {LINES} {REGION} WHERE {paid(*SEP)} GROUP BY 1"),
        [
            turn("那按渠道拆分呢", "regroup (那按渠道拆分呢)", f"SELECT c.channel_name, {GROSS} FROM {LINES} {CHANNEL} WHERE {paid(*SEP)} GROUP BY 1"),
            turn("去年同期呢", "same period last year (去年同期呢)", f"SELECT c.channel_name, {GROSS} FROM {LINES} {CHANNEL} WHERE {paid(*SEP_2025)} GROUP BY 1"),
            turn(
                "只看华东", "narrow to a region (只看华东)",
                f"SELECT c.channel_name, {GROSS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*SEP_2025)} AND g.region_name = '华东' GROUP BY 1",
            ),
            turn(
                "只要前3", "top N (只要前3)",
                f"SELECT c.channel_name, {GROSS} AS v FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*SEP_2025)} AND g.region_name = '华东' "
                "GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening("2026年8月南京各产品的销量", f"SELECT p.product_name, {UNITS} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*AUG)} AND g.city = '南京' GROUP BY 1"),
        [
            turn(
                "改成杭州", "replace the city (换成杭州)",
                f"SELECT p.product_name, {UNITS} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*AUG)} AND g.city = '杭州' GROUP BY 1",
            ),
            turn(
                "换成处方量", "replace the metric (换成处方量)",
                f"SELECT p.product_name, SUM(x.qty) FROM {RX} {RX_PRODUCT} {RX_REGION} WHERE {rx(*AUG)} AND g.city = '杭州' GROUP BY 1",
            ),
            turn(
                "那去年同期呢", "same period last year (去年同期呢)",
                f"SELECT p.product_name, SUM(x.qty) FROM {RX} {RX_PRODUCT} {RX_REGION} WHERE {rx(*AUG_2025)} AND g.city = '杭州' GROUP BY 1",
            ),
            turn(
                "只看前三名", "top N (只要前3)",
                f"SELECT p.product_name, SUM(x.qty) AS v FROM {RX} {RX_PRODUCT} {RX_REGION} WHERE {rx(*AUG_2025)} AND g.city = '杭州' "
                "GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening("units by region in October 2026", f"SELECT g.region_name, {UNITS} FROM {LINES} {REGION} WHERE {paid(*OCT)} GROUP BY 1"),
        [
            turn("by product instead", "regroup (by product instead)", f"SELECT p.product_name, {UNITS} FROM {LINES} {PRODUCT} WHERE {paid(*OCT)} GROUP BY 1"),
            turn(
                "only Shanghai", "narrow to a city (only Shanghai)",
                f"SELECT p.product_name, {UNITS} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*OCT)} AND g.city = '上海' GROUP BY 1",
            ),
            turn(
                "and in September?", "another window (and in September?)",
                f"SELECT p.product_name, {UNITS} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*SEP)} AND g.city = '上海' GROUP BY 1",
            ),
            turn(
                "only the top 3", "top N (en)",
                f"SELECT p.product_name, {UNITS} AS v FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*SEP)} AND g.city = '上海' "
                "GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening(
            "今年零售药店渠道各产品的销量",
            f"SELECT p.product_name, {UNITS} FROM {LINES} {PRODUCT} {CHANNEL} WHERE {paid(*THIS_YEAR)} AND c.channel_name = '零售药店' GROUP BY 1",
        ),
        [
            turn(
                "只要前三个", "top N (只要前3)",
                f"SELECT p.product_name, {UNITS} AS v FROM {LINES} {PRODUCT} {CHANNEL} WHERE {paid(*THIS_YEAR)} AND c.channel_name = '零售药店' "
                "GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
            turn(
                "不限渠道", "drop a filter (不限渠道)",
                f"SELECT p.product_name, {UNITS} AS v FROM {LINES} {PRODUCT} WHERE {paid(*THIS_YEAR)} GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
            turn(
                "换成净收入", "replace the metric (换成净收入)",
                f"SELECT p.product_name, {NET} AS v FROM {LINES} {PRODUCT} WHERE {paid(*THIS_YEAR)} GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
            turn(
                "只看华南", "narrow to a region (只看华南)",
                f"SELECT p.product_name, {NET} AS v FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*THIS_YEAR)} AND g.region_name = '华南' "
                "GROUP BY 1 ORDER BY v DESC LIMIT 3",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening(
            "order count by channel in Nanjing last month",
            f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '南京' GROUP BY 1",
        ),
        [
            turn(
                "only hospitals", "narrow to a channel (only ...)",
                f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '南京' "
                "AND c.channel_name = '医院' GROUP BY 1",
            ),
            turn(
                "Wuhan instead", "replace the city (en)",
                f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '武汉' "
                "AND c.channel_name = '医院' GROUP BY 1",
            ),
            turn(
                "what about September?", "another window (and in September?)",
                f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*SEP)} AND g.city = '武汉' "
                "AND c.channel_name = '医院' GROUP BY 1",
            ),
            turn(
                "split by product instead", "regroup (by product instead)",
                f"SELECT p.product_name, {ORDERS} FROM {LINES} {PRODUCT} {CHANNEL} {REGION} WHERE {paid(*SEP)} AND g.city = '武汉' "
                "AND c.channel_name = '医院' GROUP BY 1",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening(
            "上个月零售药店渠道各大区的客单价",
            f"SELECT g.region_name, {AOV} FROM {LINES} {REGION} {CHANNEL} WHERE {paid(*LAST_MONTH)} AND c.channel_name = '零售药店' GROUP BY 1",
        ),
        [
            turn("不分渠道", "drop a filter (不限渠道)", f"SELECT g.region_name, {AOV} FROM {LINES} {REGION} WHERE {paid(*LAST_MONTH)} GROUP BY 1"),
            turn(
                "只看华北", "narrow to a region (只看华北)",
                f"SELECT g.region_name, {AOV} FROM {LINES} {REGION} WHERE {paid(*LAST_MONTH)} AND g.region_name = '华北' GROUP BY 1",
            ),
            turn(
                "换成天津", "replace the place (换成天津)",
                f"SELECT g.region_name, {AOV} FROM {LINES} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '天津' GROUP BY 1",
            ),
            turn(
                "去年同期怎么样", "same period last year (去年同期呢)",
                f"SELECT g.region_name, {AOV} FROM {LINES} {REGION} WHERE {paid(*OCT_2025)} AND g.city = '天津' GROUP BY 1",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening("refund rate by channel last month", f"SELECT c.channel_name, {REFUND_RATE} FROM {LINES} {CHANNEL} WHERE {paid(*LAST_MONTH)} GROUP BY 1"),
        [
            turn("and for September?", "another window (and in September?)", f"SELECT c.channel_name, {REFUND_RATE} FROM {LINES} {CHANNEL} WHERE {paid(*SEP)} GROUP BY 1"),
            turn(
                "just Shanghai", "narrow to a city (only Shanghai)",
                f"SELECT c.channel_name, {REFUND_RATE} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*SEP)} AND g.city = '上海' GROUP BY 1",
            ),
            turn(
                "by therapeutic area instead", "regroup (by ... instead)",
                f"SELECT p.therapeutic_area, {REFUND_RATE} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*SEP)} AND g.city = '上海' GROUP BY 1",
            ),
            turn(
                "regardless of city", "drop a filter (en)",
                f"SELECT p.therapeutic_area, {REFUND_RATE} FROM {LINES} {PRODUCT} WHERE {paid(*SEP)} GROUP BY 1",
            ),
        ],
    ),
    Conversation(
        "analyst",
        opening("今年每个季度的退款额", f"SELECT {QUARTER}, {REFUNDS} FROM {LINES} WHERE {paid(*THIS_YEAR)} GROUP BY 1"),
        [
            turn(
                "只看肿瘤", "narrow to an area (只看...)",
                f"SELECT {QUARTER}, {REFUNDS} FROM {LINES} {PRODUCT} WHERE {paid(*THIS_YEAR)} AND p.therapeutic_area = '肿瘤' GROUP BY 1",
            ),
            turn(
                "换成呼吸", "replace the area (换成...)",
                f"SELECT {QUARTER}, {REFUNDS} FROM {LINES} {PRODUCT} WHERE {paid(*THIS_YEAR)} AND p.therapeutic_area = '呼吸' GROUP BY 1",
            ),
            turn(
                "换成销售额", "replace the metric (换成销售额)",
                f"SELECT {QUARTER}, {GROSS} FROM {LINES} {PRODUCT} WHERE {paid(*THIS_YEAR)} AND p.therapeutic_area = '呼吸' GROUP BY 1",
            ),
            turn(
                "去年同期呢", "same period last year (去年同期呢)",
                f"SELECT {QUARTER}, {GROSS} FROM {LINES} {PRODUCT} WHERE {paid(*YTD_LAST_YEAR)} AND p.therapeutic_area = '呼吸' GROUP BY 1",
            ),
        ],
    ),
    # The taught user, in the taught words.
    Conversation(
        "taught",
        opening(
            "上个月魔都各渠道的动销",
            f"SELECT c.channel_name, {UNITS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '上海' GROUP BY 1",
        ),
        [
            turn(
                "换成杭州", "replace the city (换成杭州)",
                f"SELECT c.channel_name, {UNITS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '杭州' GROUP BY 1",
            ),
            turn(
                "换成单子数", "replace the metric by a taught term (换成单子数)",
                f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*LAST_MONTH)} AND g.city = '杭州' GROUP BY 1",
            ),
            turn(
                "那去年同期的呢", "same period last year (去年同期呢)",
                f"SELECT c.channel_name, {ORDERS} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*OCT_2025)} AND g.city = '杭州' GROUP BY 1",
            ),
            turn(
                "那按产品拆分呢", "regroup (那按产品拆分呢)",
                f"SELECT p.product_name, {ORDERS} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*OCT_2025)} AND g.city = '杭州' GROUP BY 1",
            ),
        ],
    ),
    Conversation(
        "taught",
        opening("last month's takings by channel", f"SELECT c.channel_name, {NET} FROM {LINES} {CHANNEL} WHERE {paid(*LAST_MONTH)} GROUP BY 1"),
        [
            turn("how about September?", "another window (and in September?)", f"SELECT c.channel_name, {NET} FROM {LINES} {CHANNEL} WHERE {paid(*SEP)} GROUP BY 1"),
            turn(
                "only 江浙沪", "narrow to a taught place (only ...)",
                f"SELECT c.channel_name, {NET} FROM {LINES} {CHANNEL} {REGION} WHERE {paid(*SEP)} AND g.region_name = '华东' GROUP BY 1",
            ),
            turn(
                "break it down by product instead", "regroup (by product instead)",
                f"SELECT p.product_name, {NET} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*SEP)} AND g.region_name = '华东' GROUP BY 1",
            ),
            turn(
                "GMV instead", "replace the metric by a taught term (en)",
                f"SELECT p.product_name, {GROSS} FROM {LINES} {PRODUCT} {REGION} WHERE {paid(*SEP)} AND g.region_name = '华东' GROUP BY 1",
            ),
        ],
    ),
]


# ---- checking by value ---------------------------------------------------------------------------


class Truth:
    """The hand-written SQL, run on the server's own DuckDB file, opened read-only."""

    def __init__(self, path: Path) -> None:
        import duckdb

        self._con = duckdb.connect(str(path), read_only=True)
        # English labels an answer may carry -> the warehouse's names.
        self.labels: dict[str, str] = {}
        for sql in (
            "SELECT city_en, city FROM dim_region",
            "SELECT channel_en, channel_name FROM dim_channel",
            "SELECT product_en, product_name FROM dim_product",
        ):
            self.labels.update({en.lower(): zh for en, zh in self._con.execute(sql).fetchall()})
        self._cache: dict[str, list[tuple[Any, ...]]] = {}

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if sql not in self._cache:
            self._cache[sql] = [tuple(self.cell(v) for v in row) for row in self._con.execute(sql).fetchall()]
        return self._cache[sql]

    def cell(self, value: Any) -> str | float | None:
        if value is None:
            return None
        if isinstance(value, bool):
            return str(value)
        if isinstance(value, (int, float, Decimal)):
            return float(value)
        if isinstance(value, datetime):
            return value.date().isoformat() if value.time() == datetime.min.time() else value.isoformat()
        if isinstance(value, date):
            return value.isoformat()
        text = str(value)
        return self.labels.get(text.lower(), text)

    def close(self) -> None:
        self._con.close()


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((0, c) if isinstance(c, str) else (1, "") if c is None else (2, round(c, 2)) for c in row)


def same_cell(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, float):
        # a cent on amounts, 0.0001 on ratios: memtool rounds them to 2 and 4 decimals
        tolerance = 0.006 if max(abs(got), abs(want)) >= 1 else 0.00006
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=tolerance)
    return got == want


def same_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]]) -> bool:
    if len(got) != len(want):
        return False
    return all(
        len(g) == len(w) and all(same_cell(a, b) for a, b in zip(g, w))
        for g, w in zip(sorted(got, key=_sort_key), sorted(want, key=_sort_key))
    )


# ---- talking to memtool -------------------------------------------------------------------------


@dataclass
class Outcome:
    """One question's fate: every turn it took, and whether the final answer was right by value."""

    question: Question
    arm: str
    answers: list[dict[str, Any]] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    correct: bool = False
    expected: list[tuple[Any, ...]] = field(default_factory=list)
    got: list[tuple[Any, ...]] = field(default_factory=list)
    note: str = ""

    @property
    def last(self) -> dict[str, Any]:
        return self.answers[-1] if self.answers else {}

    @property
    def turns(self) -> int:
        return len(self.answers)

    @property
    def clarifications(self) -> int:
        return sum(1 for a in self.answers if a.get("status") == "needs_clarification")


class Client:
    def __init__(self, port: int, run: str) -> None:
        self.port, self.run, self._sessions = port, run, 0

    def session(self) -> str:
        self._sessions += 1
        return f"{self.run}-s{self._sessions:03d}"

    def ask(self, user: str, question: str, session: str) -> dict[str, Any]:
        status, body, _ = request(self.port, "POST", "/ask", {"question": question, "session_id": session}, tenant=TENANT, user=user)
        if status != 200 or not isinstance(body, dict):
            return {"status": f"http {status}", "error": body, "rows": [], "notes": []}
        return body

    def feedback(self, user: str, body: dict[str, Any]) -> tuple[int, Any]:
        status, answer, _ = request(self.port, "POST", "/feedback", body, tenant=TENANT, user=user)
        return status, answer

    def memories(self, user: str, kind: str) -> list[dict[str, Any]]:
        items, cursor = [], None
        while True:
            path = f"/memories?kind={kind}&limit=100" + (f"&cursor={cursor}" if cursor else "")
            status, page, _ = request(self.port, "GET", path, tenant=TENANT, user=user)
            if status != 200:
                return items
            items += page.get("items", [])
            cursor = page.get("next_cursor")
            if not cursor:
                return items


def option_for(clarification: dict[str, Any], meaning: Meaning, style: str | None) -> str | None:
    """What a user who knows what they meant replies to a clarification: the option's label, or
    its position ("第二个", "the first"), or the given words."""
    targets = clarification.get("targets") or []
    options = clarification.get("options") or []
    index = next((i for i, target in enumerate(targets) if meaning.matches(target)), None)
    if style in (None, "label", "ordinal-zh", "ordinal-en") and index is None:
        return None
    if style == "ordinal-zh":
        return f"第{'一二三四五六七八九十'[index]}个" if index < 10 else f"第{index + 1}个"
    if style == "ordinal-en":
        return f"the {['first', 'second', 'third', 'fourth', 'fifth', 'sixth', 'seventh', 'eighth'][index]}" if index < 8 else str(index + 1)
    if style in (None, "label"):
        return options[index] if index < len(options) else None
    return style  # the user's own words (a label or a synonym)


def meaning_asked(clarification: dict[str, Any], terms: tuple[str, ...]) -> Meaning | None:
    """Which of the question's terms a clarification is about (by its term; else the metric term)."""
    term = clarification.get("term")
    if term in terms:
        return TERMS[term]
    if not term:  # "Which metric do you want to see?": the question's metric term
        metric_terms = [t for t in terms if TERMS[t].metric]
        if len(metric_terms) == 1:
            return TERMS[metric_terms[0]]
    return None


def answer_rows(answer: dict[str, Any], truth: Truth) -> list[tuple[Any, ...]]:
    return [tuple(truth.cell(v) for v in row) for row in answer.get("rows") or []]


def judge(outcome: Outcome, truth: Truth) -> Outcome:
    outcome.expected = truth.rows(outcome.question.sql)
    answer = outcome.last
    if answer.get("status") != "answered":
        return outcome
    outcome.got = answer_rows(answer, truth)
    outcome.correct = same_rows(outcome.got, outcome.expected)
    if answer.get("truncated"):
        outcome.note = "answer truncated"
    return outcome


def ask_once(client: Client, user: str, question: Question, arm: str, truth: Truth) -> Outcome:
    """The scored turn: the question alone, in a fresh session; a clarification is not an answer."""
    outcome = Outcome(question, arm)
    outcome.answers.append(client.ask(user, question.text, client.session()))
    return judge(outcome, truth)


def ask_until_answered(client: Client, user: str, question: Question, arm: str, truth: Truth) -> Outcome:
    """Turns to an answer: every clarification about a taught term is answered with its option."""
    outcome = Outcome(question, arm)
    session = client.session()
    outcome.answers.append(client.ask(user, question.text, session))
    while outcome.last.get("status") == "needs_clarification" and outcome.turns < MAX_TURNS:
        clarification = outcome.last.get("clarification") or {}
        meaning = meaning_asked(clarification, question.terms)
        reply = option_for(clarification, meaning, "label") if meaning else None
        if reply is None:
            outcome.note = f"no scripted reply to a clarification about {clarification.get('term')!r}"
            break
        outcome.replies.append(reply)
        outcome.answers.append(client.ask(user, reply, session))
    return judge(outcome, truth)


# ---- the phases -------------------------------------------------------------------------------------


@dataclass
class LessonResult:
    lesson: Lesson
    check: dict[str, Any]  # the first answer: must be needs_clarification
    taught_by: str  # the reply sent, or the feedback's status
    feedback: Any = None
    outcome: Outcome | None = None  # the answer after the reply, or the question asked again
    stored: list[dict[str, Any]] = field(default_factory=list)  # the user's correction memories for the term

    @property
    def unknown_first(self) -> bool:
        return self.check.get("status") == "needs_clarification"


def teach(client: Client, truth: Truth, user: str) -> tuple[list[LessonResult], tuple[int, Any]]:
    results = []
    refused: tuple[int, Any] = (0, None)
    for lesson in LESSONS:
        session = client.session()
        check = client.ask(user, lesson.question, session)
        clarification = check.get("clarification") or {}
        outcome = Outcome(Question(lesson.question, lesson.sql, (lesson.term,)), "teaching", answers=[check])
        if lesson.how == "reply":
            reply = option_for(clarification, TERMS[lesson.term], lesson.reply) if clarification else None
            taught_by = f"reply {reply!r}" if reply else "no option means the term: not taught"
            if reply:
                outcome.replies.append(reply)
                outcome.answers.append(client.ask(user, reply, session))
            result = LessonResult(lesson, check, taught_by, outcome=judge(outcome, truth))
        else:
            body = {"episode_id": check.get("episode_id"), "rating": 0, "correction": lesson.correction}
            status, answer = client.feedback(user, body)
            taught_by = f"POST /feedback {status}"
            if not refused[0] and check.get("episode_id"):
                refused = client.feedback(user, {"episode_id": check["episode_id"], "correction": REFUSED_CORRECTION})
            outcome.answers.append(client.ask(user, lesson.question, client.session()))  # asked again
            result = LessonResult(lesson, check, taught_by, feedback=answer, outcome=judge(outcome, truth))
        results.append(result)
    settle(client.port)  # the index has every correction before the held-out questions
    corrections = client.memories(user, "correction")
    for result in results:
        result.stored = [m for m in corrections if (m.get("value") or {}).get("term") == result.lesson.term]
    return results, refused


def converse(client: Client, truth: Truth, conversation: Conversation) -> list[Outcome]:
    session = client.session()
    outcomes = []
    for question in [conversation.opening, *conversation.turns]:
        outcome = Outcome(question, "follow-up" if question.pattern != "opening" else "opening")
        outcome.answers.append(client.ask(conversation.user, question.text, session))
        outcomes.append(judge(outcome, truth))
    return outcomes


# ---- the report ---------------------------------------------------------------------------------------


def rate(outcomes: list[Outcome]) -> str:
    right = sum(o.correct for o in outcomes)
    return f"{right}/{len(outcomes)} ({100 * right / len(outcomes):.0f}%)" if outcomes else "n/a"


def mean_turns(outcomes: list[Outcome]) -> str:
    answered = [o for o in outcomes if o.last.get("status") == "answered"]
    if not answered:
        return "n/a"
    mean = sum(o.turns for o in answered) / len(answered)
    return f"{mean:.2f} over {len(answered)}/{len(outcomes)} answered ({sum(o.correct for o in answered)} correct)"


def _asked(answer: dict[str, Any]) -> str:
    clarification = answer.get("clarification") or {}
    options = clarification.get("options") or []
    shown = ", ".join(options[:4]) + (", …" if len(options) > 4 else "")
    return (
        f"asked 「{clarification.get('question')}」 (term `{clarification.get('term')}`, reason `{clarification.get('reason')}`, "
        f"options {shown})"
    )


def what_came_back(outcome: Outcome) -> str:
    parts = []
    for answer, reply in zip(outcome.answers, outcome.replies):  # the clarifications replied to, in order
        parts.append(f"{_asked(answer)}, replied `{reply}`")
    answer = outcome.last
    status = answer.get("status")
    parts.append(f"status `{status}`")
    if status == "needs_clarification":
        parts.append(_asked(answer))
    elif status == "answered":
        parts.append(f"rows {_preview(outcome.got)} vs expected {_preview(outcome.expected)}")
        if answer.get("sql"):
            parts.append(f"SQL `{answer['sql']}`")
    else:
        parts.append(f"error {answer.get('error')}")
    if answer.get("carried_over"):
        parts.append("carried over: " + "; ".join(answer["carried_over"]))
    notes = [n for n in answer.get("notes") or [] if not n.startswith("model_version")]
    if notes:
        parts.append("notes: " + "; ".join(notes))
    if outcome.note:
        parts.append(outcome.note)
    return "; ".join(parts)


def _preview(rows: list[tuple[Any, ...]], limit: int = 6) -> str:
    shown = ", ".join("(" + ", ".join(_fmt(c) for c in row) + ")" for row in sorted(rows, key=_sort_key)[:limit])
    return f"[{shown}{', …' if len(rows) > limit else ''}] ({len(rows)} rows)"


def _fmt(cell: Any) -> str:
    return f"{cell:.4f}".rstrip("0").rstrip(".") if isinstance(cell, float) else str(cell)


def _mark(outcome: Outcome) -> str:
    status = outcome.last.get("status")
    if outcome.correct:
        return "✓"
    return "clarification" if status == "needs_clarification" else "✗ wrong rows" if status == "answered" else f"✗ {status}"


def machine() -> str:
    import duckdb

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = " with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, memtool at {commit}{dirty}"
    )


def report(
    args: argparse.Namespace,
    warehouse_rows: int,
    lessons: list[LessonResult],
    refused: tuple[int, Any],
    taught: list[Outcome],
    untaught: list[Outcome],
    taught_turns: list[Outcome],
    untaught_turns: list[Outcome],
    conversations: list[list[Outcome]],
    seconds: float,
) -> tuple[str, str]:
    follow_ups = [o for c in conversations for o in c if o.arm == "follow-up"]
    openings = [o for c in conversations for o in c if o.arm == "opening"]
    n_reply = sum(1 for r in lessons if r.lesson.how == "reply")
    summary = [
        "| arm | correct by value | clarifications asked (first turn) | turns to an answer, clarifications replied | target |",
        "|---|---|---|---|---|",
        f"| taught user, {len(taught)} held-out questions | {rate(taught)} | {sum(o.clarifications for o in taught)} | "
        f"{mean_turns(taught_turns)}, {sum(o.clarifications for o in taught_turns)} clarifications | ≥ 90% |",
        f"| untaught user, same questions | {rate(untaught)} | {sum(o.clarifications for o in untaught)} | "
        f"{mean_turns(untaught_turns)}, {sum(o.clarifications for o in untaught_turns)} clarifications | ≤ 20% |",
        f"| follow-ups, {len(conversations)} sessions | {rate(follow_ups)} | {sum(o.clarifications for o in follow_ups)} | 1 turn each | ≥ 90% |",
        f"| (opening questions of the sessions) | {rate(openings)} | {sum(o.clarifications for o in openings)} | | |",
        f"| teaching: answer after the reply / the question asked again | {rate([r.outcome for r in lessons if r.outcome])} | "
        f"{sum(r.unknown_first for r in lessons)}/{len(lessons)} terms asked about first | "
        f"2 turns ({n_reply} replies) / ask + feedback + ask ({len(lessons) - n_reply}) | |",
    ]
    lines = [
        "# Does memtool learn? Teaching, held-out questions and follow-ups, by value",
        "",
        f"`python bench/learning_eval.py --scale {args.scale}` on {machine()}, {date.today().isoformat()}, {seconds:.0f} s.",
        "",
        "How it was measured: `memtool serve` in a child process (temp home, SQLite store, rule planner, demo warehouse "
        f"seed 7 at scale {args.scale}: {warehouse_rows:,} rows, 24 months ending MEMTOOL_TODAY={TODAY.isoformat()}), "
        f"driven over HTTP with `X-Memtool-Tenant: {TENANT}` and users `taught`, `untaught` and `analyst`. "
        "Every answer is checked by value against SQL written by hand in `bench/learning_eval.py` (not by memtool's compiler), "
        "run on the same DuckDB file opened read-only: rows compared sorted, English labels mapped to the warehouse's names, "
        "numbers within a cent (amounts) or 0.0001 (ratios). A clarification counts as not answered. "
        "Turns to an answer were measured after the scored pass, so no reply taught a scored question: each clarification "
        "about a taught term was answered with the option meaning it (the untaught arm with a fresh user per question).",
        "",
        *summary,
        "",
        "## Teaching",
        "",
        f"Each term was asked about first by user `taught` (the check that the catalog does not know it); {n_reply} were taught by "
        "replying to the clarification in the same session, the others by `POST /feedback` with a correction on the "
        "clarification's episode, and the question was then asked again in a new session.",
        "",
        "| term | means | first answer | taught by | answer after teaching | correction memory stored |",
        "|---|---|---|---|---|---|",
    ]
    for r in lessons:
        stored = "; ".join(
            f"`{m['value'].get('maps_to')}` ({m.get('provenance', {}).get('trigger')}, confidence {m.get('confidence')})" for m in r.stored
        ) or "none"
        correction = r.lesson.correction if r.lesson.how == "feedback" else None
        taught_by = r.taught_by + (f" `{correction}`" if correction else "")
        lines.append(
            f"| {r.lesson.term} | {_meaning(TERMS[r.lesson.term])} | {r.check.get('status')} to 「{r.lesson.question}」 | "
            f"{taught_by} | {_mark(r.outcome) if r.outcome else ''} | {stored} |"
        )
    lines += [
        "",
        f"A correction naming nothing the catalog has (`{REFUSED_CORRECTION}`): HTTP {refused[0]}"
        + (f", `{refused[1].get('error')}` on `{refused[1].get('field')}`" if isinstance(refused[1], dict) else "")
        + " (expected 400).",
        "",
        "## Held-out questions",
        "",
        "| # | question | taught terms | taught user | untaught user | taught turns | untaught turns |",
        "|---|---|---|---|---|---|---|",
    ]
    by_text_t = {o.question.text: o for o in taught_turns}
    by_text_u = {o.question.text: o for o in untaught_turns}
    for i, (t, u) in enumerate(zip(taught, untaught), start=1):
        tt, ut = by_text_t.get(t.question.text), by_text_u.get(u.question.text)
        lines.append(
            f"| {i} | {t.question.text} | {' '.join(t.question.terms)} | {_mark(t)} | {_mark(u)} | "
            f"{_turns(tt)} | {_turns(ut)} |"
        )
    lines += ["", "## Follow-ups", "", "| session | user | turn | pattern | result |", "|---|---|---|---|---|"]
    for n, outcomes in enumerate(conversations, start=1):
        for o in outcomes:
            lines.append(f"| {n} | {CONVERSATIONS[n - 1].user} | {o.question.text} | {o.question.pattern} | {_mark(o)} |")
    failures = [
        ("teaching", r.outcome) for r in lessons if r.outcome and not r.outcome.correct
    ] + [("taught", o) for o in taught if not o.correct] + [("follow-up", o) for o in follow_ups if not o.correct] + [
        ("opening", o) for o in openings if not o.correct
    ]
    lines += ["", "## Every failed question, with what came back", ""]
    if not failures:
        lines.append("None.")
    for arm, o in failures:
        lines.append(f"- **{arm}** 「{o.question.text}」: {what_came_back(o)}")
    unfinished = [("taught", o) for o in taught_turns if o.turns > 1 and not o.correct]
    unfinished += [("untaught", o) for o in untaught_turns if not o.correct]
    lines += [
        "",
        "## Turns to an answer: conversations that did not end in a correct answer",
        "",
        "Clarifications replied to with the option that means the taught term (the untaught arm: a fresh user per question).",
        "",
    ]
    if not unfinished:
        lines.append("None.")
    for arm, o in unfinished:
        lines.append(f"- **{arm}** 「{o.question.text}」: {what_came_back(o)}")
    lines += [
        "",
        f"Untaught arm: {sum(not o.correct for o in untaught)} of {len(untaught)} not answered correctly on the first turn "
        f"({sum(o.clarifications for o in untaught)} clarifications); "
        + (
            "the ones answered without a clarification: "
            + "; ".join(f"「{o.question.text}」 {_mark(o)}" for o in untaught if o.last.get("status") != "needs_clarification")
            if any(o.last.get("status") != "needs_clarification" for o in untaught)
            else "every one was a clarification."
        ),
    ]
    stdout = "\n".join(["", "learning eval (by value against hand-written SQL)", *summary, ""])
    return "\n".join(lines) + "\n", stdout


def _meaning(meaning: Meaning) -> str:
    return meaning.metric or f"{meaning.dimension} = {meaning.value}"


def _turns(outcome: Outcome | None) -> str:
    if outcome is None:
        return "1"
    if outcome.last.get("status") != "answered":
        return f"no answer ({outcome.turns})"
    return f"{outcome.turns}{'' if outcome.correct else ' (wrong rows)'}"


# ---- main ---------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.2, help="demo warehouse scale")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning_eval.md")
    parser.add_argument("--keep-home", action="store_true", help="keep the temp home (store, warehouse) for a look afterwards")
    args = parser.parse_args()

    started = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="memtool-learning-"))
    port = int(os.environ.get("LEARNING_EVAL_PORT", "0")) or _free_port()
    env = {"MEMTOOL_WAREHOUSE_SCALE": str(args.scale), "MEMTOOL_TODAY": TODAY.isoformat()}
    print(f"starting memtool serve on port {port} (home {home}) …", flush=True)
    server = start_server(home, port, env)
    truth: Truth | None = None
    try:
        truth = Truth(home / "warehouse" / "demo.duckdb")
        warehouse_rows = sum(
            truth.rows(f"SELECT COUNT(*) FROM {t}")[0][0]
            for t in ("dim_region", "dim_channel", "dim_product", "fact_order_line", "fact_refund", "fact_prescription")
        )
        client = Client(port, uuid.uuid4().hex[:6])

        print("teaching …", flush=True)
        lessons, refused = teach(client, truth, "taught")

        print(f"held-out questions: {len(HELD_OUT)} × 2 users …", flush=True)
        taught = [ask_once(client, "taught", q, "taught", truth) for q in HELD_OUT]
        untaught = [ask_once(client, "untaught", q, "untaught", truth) for q in HELD_OUT]
        # Turns to an answer, after the scored pass: replies teach, so none may precede a scored turn.
        taught_turns = [
            ask_until_answered(client, "taught", o.question, "taught", truth) if o.last.get("status") == "needs_clarification" else o
            for o in taught
        ]
        untaught_turns = [
            ask_until_answered(client, f"untaught-{i:02d}", q, "untaught", truth) for i, q in enumerate(HELD_OUT, start=1)
        ]

        print(f"follow-ups: {len(CONVERSATIONS)} sessions …", flush=True)
        conversations = [converse(client, truth, c) for c in CONVERSATIONS]
    finally:
        if truth is not None:
            truth.close()
        server.terminate()
        server.wait(timeout=120)
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)

    text, stdout = report(
        args, int(warehouse_rows), lessons, refused, taught, untaught, taught_turns, untaught_turns, conversations,
        time.perf_counter() - started,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(stdout)
    print(f"report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
