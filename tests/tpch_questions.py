"""The TPC-H question set: business questions in English and Chinese, each with reference SQL.

Data only. Every shape is asked once in English and once in Chinese with the same meaning and the
same ``expected_sql``, written by hand in DuckDB's dialect over the tables of
``memtool.datasets.tpch`` (independent of any compiler). Time windows are absolute and inside the
data (orders are dated 1992-01-01 .. 1998-08-02).

Definitions the SQL uses (every line-item measure is dated by ``orders.o_orderdate``):

- revenue = SUM(l_extendedprice * (1 - l_discount)); returned (lost) revenue: the same over
  l_returnflag = 'R'; gross sales = SUM(l_extendedprice); quantity = SUM(l_quantity);
  average discount = AVG(l_discount)
- order count = COUNT(*) of orders; order value = SUM(o_totalprice); average order value =
  SUM(o_totalprice) / COUNT(*); customers = COUNT(DISTINCT o_custkey)
- customer nation: orders -> customer -> nation (customer region: nation -> region); supplier
  nation: lineitem -> supplier -> nation
- share = a group's revenue / the revenue of the whole filtered set

Output: the grouping columns (values as stored; a year, quarter or month is the DATE of its first
day, ``CAST(DATE_TRUNC(...) AS DATE)``), then the measures. Money is rounded to 2 decimals
(average order value included), average discount, share and change rate to 4; counts and
quantities are not rounded. A year-over-year answer has the columns group, current, previous,
change, change_rate. ``ordered`` is True only for top-N and bottom-N, whose Nth and (N+1)th values
differ at scales 0.01 and 0.1 (no tie at the cut).

The Chinese words the questions use for stored values (aliases to curate in the semantic model):

- GERMANY (n_name): 德国
- FRANCE (n_name): 法国
- ASIA (r_name): 亚洲
- AMERICA (r_name): 美洲
- AIR (l_shipmode): 空运
- BUILDING (c_mktsegment): 建筑业
- 1-URGENT (o_orderpriority): 紧急
- ECONOMY ANODIZED STEEL (p_type): kept in English in the Chinese question

and for the dimensions: customer nation 客户国家 / 各国客户, customer region 地区 / 客户地区,
supplier nation 供应商国家, market segment 细分市场, order priority 订单优先级, ship mode 运输方式,
customer 客户; measures: revenue 收入, gross sales 销售总额, quantity 销量, order count 订单数,
order value 订单总金额, average order value 平均订单金额, average discount 平均折扣, returned
revenue 退货损失收入, customers 客户数, share 占比, year over year 同比.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class TpchQuestion:
    id: str
    shape: str
    lang: Literal["en", "zh"]
    question: str
    expected_sql: str
    ordered: bool = False

    def __str__(self) -> str:  # the test id
        return self.id


def _both(shape: str, en: str, zh: str, sql: str, *, ordered: bool = False) -> list[TpchQuestion]:
    """One shape asked in English and in Chinese, answered by the same SQL."""
    return [
        TpchQuestion(f"{shape}-en", shape, "en", en, sql, ordered),
        TpchQuestion(f"{shape}-zh", shape, "zh", zh, sql, ordered),
    ]


# Line items with their order: the population of every line-item measure.
LINES = "lineitem l JOIN orders o ON o.o_orderkey = l.l_orderkey"
REVENUE = "SUM(l.l_extendedprice * (1 - l.l_discount))"
CUSTOMER_NATION = "JOIN customer c ON c.c_custkey = o.o_custkey JOIN nation n ON n.n_nationkey = c.c_nationkey"
CUSTOMER_REGION = f"{CUSTOMER_NATION} JOIN region r ON r.r_regionkey = n.n_regionkey"


def ordered_in(start: str, end: str) -> str:
    """Orders dated in [start, end)."""
    return f"o.o_orderdate >= DATE '{start}' AND o.o_orderdate < DATE '{end}'"


QUESTIONS: list[TpchQuestion] = [
    *_both(
        "total_in_year",
        "What was the total revenue in 1995?",
        "1995年的总收入是多少？",
        f"SELECT ROUND({REVENUE}, 2) AS revenue FROM {LINES} WHERE {ordered_in('1995-01-01', '1996-01-01')}",
    ),
    *_both(
        "by_segment",
        "Revenue by customer market segment in 1996",
        "1996年各客户细分市场的收入",
        f"""
        SELECT c.c_mktsegment AS segment, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} JOIN customer c ON c.c_custkey = o.o_custkey
        WHERE {ordered_in('1996-01-01', '1997-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "by_month",
        "Monthly revenue in 1997",
        "1997年每个月的收入",
        f"""
        SELECT CAST(DATE_TRUNC('month', o.o_orderdate) AS DATE) AS month, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} WHERE {ordered_in('1997-01-01', '1998-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "by_quarter",
        "Gross sales by quarter in 1996",
        "1996年各季度的销售总额",
        f"""
        SELECT CAST(DATE_TRUNC('quarter', o.o_orderdate) AS DATE) AS quarter, ROUND(SUM(l.l_extendedprice), 2) AS gross_sales
        FROM {LINES} WHERE {ordered_in('1996-01-01', '1997-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "by_year",
        "Number of orders by year",
        "每年的订单数",
        """
        SELECT CAST(DATE_TRUNC('year', o.o_orderdate) AS DATE) AS year, COUNT(*) AS orders
        FROM orders o GROUP BY 1
        """,
    ),
    *_both(
        "two_dims_priority_quarter",
        "Order counts by order priority and quarter in 1995",
        "1995年按订单优先级和季度统计的订单数",
        f"""
        SELECT o.o_orderpriority AS priority, CAST(DATE_TRUNC('quarter', o.o_orderdate) AS DATE) AS quarter, COUNT(*) AS orders
        FROM orders o WHERE {ordered_in('1995-01-01', '1996-01-01')}
        GROUP BY 1, 2
        """,
    ),
    *_both(
        "two_dims_region_year",
        "Revenue by customer region and year",
        "各客户地区每年的收入",
        f"""
        SELECT r.r_name AS region, CAST(DATE_TRUNC('year', o.o_orderdate) AS DATE) AS year, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} {CUSTOMER_REGION}
        GROUP BY 1, 2
        """,
    ),
    *_both(
        "top_n_customers",
        "Top 5 customers by revenue in 1996",
        "1996年收入最高的5个客户",
        f"""
        SELECT c.c_name AS customer, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} JOIN customer c ON c.c_custkey = o.o_custkey
        WHERE {ordered_in('1996-01-01', '1997-01-01')}
        GROUP BY 1 ORDER BY revenue DESC LIMIT 5
        """,
        ordered=True,
    ),
    *_both(
        "bottom_n_nations",
        "Which 3 customer nations had the lowest revenue in 1993?",
        "1993年收入最低的3个客户国家",
        f"""
        SELECT n.n_name AS nation, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} {CUSTOMER_NATION}
        WHERE {ordered_in('1993-01-01', '1994-01-01')}
        GROUP BY 1 ORDER BY revenue ASC LIMIT 3
        """,
        ordered=True,
    ),
    *_both(
        "top_n_returned",
        "Top 10 customers by revenue lost to returned items in Q4 1993",
        "1993年第四季度因退货损失收入最多的10个客户",
        f"""
        SELECT c.c_name AS customer, ROUND({REVENUE}, 2) AS returned_revenue
        FROM {LINES} JOIN customer c ON c.c_custkey = o.o_custkey
        WHERE {ordered_in('1993-10-01', '1994-01-01')} AND l.l_returnflag = 'R'
        GROUP BY 1 ORDER BY returned_revenue DESC LIMIT 10
        """,
        ordered=True,
    ),
    *_both(
        "filter_nation",
        "Revenue from customers in GERMANY in 1995",
        "1995年德国客户的收入",
        f"""
        SELECT ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} {CUSTOMER_NATION}
        WHERE {ordered_in('1995-01-01', '1996-01-01')} AND n.n_name = 'GERMANY'
        """,
    ),
    *_both(
        "filter_region_by_nation",
        "Revenue by customer nation in ASIA in 1994",
        "1994年亚洲各国客户的收入",
        f"""
        SELECT n.n_name AS nation, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} {CUSTOMER_REGION}
        WHERE {ordered_in('1994-01-01', '1995-01-01')} AND r.r_name = 'ASIA'
        GROUP BY 1
        """,
    ),
    *_both(
        "filter_ship_mode",
        "Quantity shipped by AIR in March 1997",
        "1997年3月空运的销量",
        f"""
        SELECT SUM(l.l_quantity) AS quantity
        FROM {LINES} WHERE {ordered_in('1997-03-01', '1997-04-01')} AND l.l_shipmode = 'AIR'
        """,
    ),
    *_both(
        "avg_discount_by_ship_mode",
        "Average discount by ship mode in 1995",
        "1995年各运输方式的平均折扣",
        f"""
        SELECT l.l_shipmode AS ship_mode, ROUND(AVG(l.l_discount), 4) AS avg_discount
        FROM {LINES} WHERE {ordered_in('1995-01-01', '1996-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "filter_segment",
        "Number of orders from BUILDING segment customers in Q1 1996",
        "1996年第一季度建筑业客户的订单数",
        f"""
        SELECT COUNT(*) AS orders
        FROM orders o JOIN customer c ON c.c_custkey = o.o_custkey
        WHERE {ordered_in('1996-01-01', '1996-04-01')} AND c.c_mktsegment = 'BUILDING'
        """,
    ),
    *_both(
        "filter_priority",
        "Total order value of 1-URGENT orders in 1994",
        "1994年紧急订单的订单总金额",
        f"""
        SELECT ROUND(SUM(o.o_totalprice), 2) AS order_value
        FROM orders o WHERE {ordered_in('1994-01-01', '1995-01-01')} AND o.o_orderpriority = '1-URGENT'
        """,
    ),
    *_both(
        "yoy_by_region",
        "Revenue by customer region in 1996 compared with the previous year",
        "1996年各地区收入同比",
        f"""
        WITH per_year AS (
          SELECT r.r_name AS region,
                 SUM(CASE WHEN o.o_orderdate >= DATE '1996-01-01' THEN l.l_extendedprice * (1 - l.l_discount) END) AS cur,
                 SUM(CASE WHEN o.o_orderdate < DATE '1996-01-01' THEN l.l_extendedprice * (1 - l.l_discount) END) AS prev
          FROM {LINES} {CUSTOMER_REGION}
          WHERE {ordered_in('1995-01-01', '1997-01-01')}
          GROUP BY 1)
        SELECT region, ROUND(cur, 2) AS current, ROUND(prev, 2) AS previous, ROUND(cur - prev, 2) AS change,
               ROUND((cur - prev) / prev, 4) AS change_rate
        FROM per_year
        """,
    ),
    *_both(
        "avg_order_value_by_segment",
        "Average order value by customer market segment in 1997",
        "1997年各细分市场的平均订单金额",
        f"""
        SELECT c.c_mktsegment AS segment, ROUND(SUM(o.o_totalprice) / COUNT(*), 2) AS avg_order_value
        FROM orders o JOIN customer c ON c.c_custkey = o.o_custkey
        WHERE {ordered_in('1997-01-01', '1998-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "returned_revenue_by_region",
        "Revenue lost to returned items by customer region in 1994",
        "1994年各客户地区的退货损失收入",
        f"""
        SELECT r.r_name AS region, ROUND({REVENUE}, 2) AS returned_revenue
        FROM {LINES} {CUSTOMER_REGION}
        WHERE {ordered_in('1994-01-01', '1995-01-01')} AND l.l_returnflag = 'R'
        GROUP BY 1
        """,
    ),
    *_both(
        "customer_count_by_segment",
        "How many customers placed orders in each market segment in 1995?",
        "1995年各细分市场下过单的客户数",
        f"""
        SELECT c.c_mktsegment AS segment, COUNT(DISTINCT o.o_custkey) AS customers
        FROM orders o JOIN customer c ON c.c_custkey = o.o_custkey
        WHERE {ordered_in('1995-01-01', '1996-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "by_supplier_nation",
        "Revenue by supplier nation in 1997",
        "1997年各供应商国家的收入",
        f"""
        SELECT sn.n_name AS supplier_nation, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} JOIN supplier s ON s.s_suppkey = l.l_suppkey JOIN nation sn ON sn.n_nationkey = s.s_nationkey
        WHERE {ordered_in('1997-01-01', '1998-01-01')}
        GROUP BY 1
        """,
    ),
    *_both(
        "supplier_nation_for_customer_nation",
        "Revenue from customers in FRANCE by supplier nation in 1995",
        "1995年法国客户的收入，按供应商国家划分",
        f"""
        SELECT sn.n_name AS supplier_nation, ROUND({REVENUE}, 2) AS revenue
        FROM {LINES} {CUSTOMER_NATION}
        JOIN supplier s ON s.s_suppkey = l.l_suppkey JOIN nation sn ON sn.n_nationkey = s.s_nationkey
        WHERE {ordered_in('1995-01-01', '1996-01-01')} AND n.n_name = 'FRANCE'
        GROUP BY 1
        """,
    ),
    *_both(
        "share_by_supplier_nation",
        "In 1995, what share of the revenue from ECONOMY ANODIZED STEEL parts sold to customers in AMERICA "
        "did each supplier nation have?",
        "1995年美洲客户购买的ECONOMY ANODIZED STEEL零件收入中，各供应商国家的占比",
        f"""
        WITH filtered AS (
          SELECT sn.n_name AS supplier_nation, l.l_extendedprice * (1 - l.l_discount) AS revenue
          FROM {LINES} {CUSTOMER_REGION}
          JOIN part p ON p.p_partkey = l.l_partkey
          JOIN supplier s ON s.s_suppkey = l.l_suppkey JOIN nation sn ON sn.n_nationkey = s.s_nationkey
          WHERE {ordered_in('1995-01-01', '1996-01-01')} AND r.r_name = 'AMERICA' AND p.p_type = 'ECONOMY ANODIZED STEEL')
        SELECT supplier_nation, ROUND(SUM(revenue) / (SELECT SUM(revenue) FROM filtered), 4) AS share
        FROM filtered GROUP BY 1
        """,
    ),
]
