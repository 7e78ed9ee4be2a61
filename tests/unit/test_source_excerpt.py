"""What a definition answer quotes of a source (memtool.flows.ask.plan.source_excerpt)."""

from __future__ import annotations

from memtool.flows.ask.plan import source_excerpt

POLICY = "退款政策\n\n1. 签收后30天内可全额退款。\n2. 净收入按原订单支付日扣减退款。\n3. Net revenue is reported monthly.\n"


def test_the_lines_naming_the_metric_are_quoted_verbatim():
    assert source_excerpt(POLICY, ("净收入", "net revenue")) == "2. 净收入按原订单支付日扣减退款。 / 3. Net revenue is reported monthly."


def test_without_a_naming_line_the_start_is_quoted_and_long_text_is_cut():
    start = "退款政策 1. 签收后30天内可全额退款。 2. 净收入按原订单支付日扣减退款。 3. Net revenue is reported monthly."
    assert source_excerpt(POLICY, ("GMV",)) == start
    long = source_excerpt("x" * 1000, ())
    assert len(long) == 400 and long.endswith("…")
