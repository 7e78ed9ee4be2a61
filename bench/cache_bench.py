"""The SQL semantic cache, measured: not a test, a measurement.

Four parts, in-process as ``ask_bench.py`` runs asks (the real ask handler, the real AskFlow ASL on
moto's Step Functions engine, the embedded index, the DuckDB demo warehouse), with one difference:
the record store is SQLite (``memtool serve``'s default), its outbox drained into the indexer after
every ask. moto's DynamoDB copies the whole table on every TransactWriteItems and its memory grows
with it: the first full run on moto reached 24 GB of RSS after about 500 asks, and each ask got
slower as the table grew. ``--store dynamodb`` is there for small runs.

1. **Reference.** Every question once with the cache off (``cache_enabled=False``), each in a fresh
   tenant. A question that is not answered, or not on a cached route, drops its pair (reported).
2. **Pairs** (rule planner, cache on, a fresh tenant per pair): ask A, then B as the same user.
   A paraphrase's B should hit; an entity swap's B must not. A hit is *correct* when its rows
   equal B's reference rows and *false* when they differ.
3. **Latency.** The Bedrock planner over a scripted Converse double that waits ``--delay`` seconds
   and proposes, with ``propose_intent``, the intent the rule planner resolves for the request's
   question. Per paraphrase pair: A (a full plan), then B and A again (hits); p50 of both in the
   same run, and the Converse calls counted.
4. **Zipf stream.** ``--stream`` asks drawn with Zipf(``--zipf-s``) over ``--distinct`` questions
   in one tenant, Bedrock double as in 3: Converse calls made against the calls without the cache
   (every ask on a cached route reaches planning then), and the hit rate.

    python bench/cache_bench.py [--scale 0.05] [--delay 1.2] [--stream 200] [--out bench/results/cache_bench.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TODAY = date(2026, 11, 29)
MODEL_ID = "anthropic.claude-3-5-sonnet-20240620-v1:0"
CACHED_ROUTES = ("nl2sql_query", "kpi_lookup")

# Questions of this bench only (none is a test's question verbatim). Each is meant to be answered
# by the rule planner on the demo warehouse; the reference pass checks it and drops the pair if not.
PARAPHRASES: list[tuple[str, str]] = [
    # zh / zh
    ("上个月每个渠道净收入多少", "上一个月分渠道的净销售额"),
    ("上个月上海的订单量", "上海上月订单数量"),
    ("上季度各大区的销售额", "上一季度每个大区销售金额"),
    ("去年每个月的退款率", "去年按月的退款比例"),
    ("今年以来每月销量", "今年每个月的销售数量"),
    ("上个月净收入排名前3的城市", "上月净收入前三名城市"),
    ("上个月销售额前5的产品", "上月销售金额排名前5的药品"),
    ("上个月不包括电商的净收入", "上月除电商以外的净收入"),
    ("上周医院渠道的订单数", "上个星期医院的订单量"),
    ("上个月客单价是多少", "上月平均订单金额"),
    ("上个月各治疗领域的处方量", "上月按治疗领域的处方数量"),
    ("2026年3月杭州的销售额", "杭州2026年3月份的销售金额"),
    ("2026年Q1各品牌净收入", "2026年第一季度每个品牌的净收入"),
    ("最近三个月每月的订单数", "近3个月按月的订单量"),
    ("上个月每种退款原因的退款额", "上月按原因的退款金额"),
    ("去年华东的销售额", "去年华东地区销售金额"),
    ("上个月零售药店的销量", "上月零售药店销售数量"),
    ("上个月阿托伐他汀的销售额", "上月阿托伐他汀钙片销售金额"),
    ("上个月深圳的净收入", "深圳上月净营收"),
    ("本月各渠道订单数", "这个月每个渠道的订单量"),
    ("上季度每个城市的客单价", "上个季度各城市客单价"),
    ("今年各治疗领域销售额", "今年以来每个治疗领域的销售金额"),
    ("上个月心血管的处方量", "上月心血管领域处方数"),
    ("最近90天每周的净收入", "近90天按周的净收入"),
    ("去年各季度的退款率", "去年每个季度退款率"),
    ("上个月成都的退款额", "成都上个月退款金额"),
    ("上个月诊所渠道的销售额", "上月诊所的销售金额"),
    ("上个月各大区的销量", "上月每个大区的销售量"),
    # en / en
    ("net revenue for each channel last month", "last month's net sales by channel"),
    ("how many orders did Shanghai have last month", "number of orders in Shanghai last month"),
    ("gross revenue by region last quarter", "sales revenue per region in the previous quarter"),
    ("refund rate by month last year", "monthly refund ratio for last year"),
    ("top 3 cities by net sales last month", "the 3 highest cities by net revenue last month"),
    ("top 5 products by gross revenue last month", "last month's top 5 products by total sales"),
    ("net revenue excluding e-commerce last month", "last month net revenue excluding online"),
    ("average order value last month", "AOV last month"),
    ("prescriptions by therapeutic area last month", "rx volume per therapy area last month"),
    ("gross revenue in Hangzhou in March 2026", "Hangzhou sales revenue March 2026"),
    ("units sold by brand in Q1 2026", "unit sales per brand in 2026 Q1"),
    ("monthly order count for the last 3 months", "number of orders by month over the last 3 months"),
    ("refunds by reason last month", "refund amount per refund reason last month"),
    ("East China gross revenue last year", "gross sales in East China last year"),
    ("retail pharmacy units sold last month", "units sold through retail pharmacies last month"),
    ("Shenzhen net revenue last month", "net revenue in Shenzhen last month"),
    ("orders by channel this month", "number of orders per channel this month"),
    ("weekly net revenue over the last 90 days", "net revenue by week for the last 90 days"),
    ("diabetes prescriptions last quarter", "prescription volume in diabetes last quarter"),
    # zh / en
    ("上个月各城市的净收入", "net revenue by city last month"),
    ("北京上个月的销售额", "gross revenue in Beijing last month"),
    ("去年每个季度的订单数", "quarterly order count last year"),
    ("上个月各产品的退款率", "refund rate by product last month"),
    ("上个月肿瘤领域的销售额", "oncology gross revenue last month"),
    ("今年每月的客单价", "monthly average order value this year"),
    ("上季度武汉的销量", "units sold in Wuhan last quarter"),
    ("上个月净收入排名前五的城市", "last month's top 5 cities by net sales"),
    ("上周各渠道的退款额", "refund amount by channel last week"),
    ("上个月华南的处方量", "South China prescriptions last month"),
    # mixed
    ("上个月 net revenue 按渠道", "上月每个渠道的净收入"),
    ("last month 上海的订单数", "上海 orders last month"),
    ("2026年Q1 各品牌的 units sold", "2026年第一季度每个品牌的销量"),
    ("net revenue 上个月 by city", "上月每个城市净收入"),
    ("上个月 e-commerce 的销售额", "上月电商渠道销售额"),
    ("去年 refund rate 按月", "去年每月的退款率"),
    ("上个月 top 3 产品 by 净收入", "上月净收入前3名的产品"),
    ("上个月 AOV", "上月客单价"),
    ("今年 每个大区 gross revenue", "今年各大区的销售额"),
]
SWAPS: list[tuple[str, str, str]] = [  # (A, B, what B changes)
    # the required ones, zh then en
    ("上个月上海订单数", "上个月北京订单数", "city"),
    ("上个月净收入多少", "上上个月净收入多少", "window"),
    ("上个月医院渠道的销售额", "上个月电商渠道的销售额", "channel"),
    ("上个月华东的净收入", "上个月华东的销售额", "metric"),
    ("上月销售额前3的城市", "上月销售额前5的城市", "top_n"),
    ("上个月不含电商的订单数", "上个月电商的订单数", "negation"),
    ("orders in Shanghai last month", "orders in Beijing last month", "city"),
    ("gross revenue last month", "gross revenue the month before last", "window"),
    ("hospital gross revenue last month", "ecommerce gross revenue last month", "channel"),
    ("net revenue by channel last quarter", "gross revenue by channel last quarter", "metric"),
    ("top 3 products by net revenue last month", "top 5 products by net revenue last month", "top_n"),
    ("net revenue excluding ecommerce last quarter", "ecommerce net revenue last quarter", "negation"),
    ("上月上海的销量", "上月北京的销量", "city"),
    ("上个月各渠道的订单数", "上上个月各渠道的订单数", "window"),
    ("上个月医院的客单价", "上个月电商的客单价", "channel"),
    ("上个月各城市的净收入", "上个月各城市的销售额", "metric"),
    ("去年销售额前3的产品", "去年销售额前5的产品", "top_n"),
    ("上季度不含电商的销量", "上季度电商的销量", "negation"),
    ("上海去年的退款率", "北京去年的退款率", "city"),
    ("上个月杭州的处方量", "上上个月杭州的处方量", "window"),
    # other cities, channels, products, windows, metrics, top-N, negations
    ("广州上季度的净收入", "深圳上季度的净收入", "city"),
    ("net revenue in Chengdu last quarter", "net revenue in Chongqing last quarter", "city"),
    ("上个月南京的客单价", "上个月天津的客单价", "city"),
    ("上个月零售药店的订单数", "上个月诊所的订单数", "channel"),
    ("clinic units sold last month", "pharmacy units sold last month", "channel"),
    ("上个月二甲双胍的销量", "上个月达格列净的销量", "product"),
    ("Semaglutide gross revenue last quarter", "Dapagliflozin gross revenue last quarter", "product"),
    ("上个月奥希替尼的处方量", "上个月仑伐替尼的处方量", "product"),
    ("2026年3月的净收入", "2026年4月的净收入", "window"),
    ("net revenue in March 2026", "net revenue in April 2026", "window"),
    ("上季度各大区的订单数", "上上季度各大区的订单数", "window"),
    ("去年各渠道的销售额", "前年各渠道的销售额", "window"),
    ("上周订单量", "上上周订单量", "window"),
    ("units sold last week", "units sold the week before last", "window"),
    ("今年的处方量", "去年的处方量", "window"),
    ("最近三个月的退款率", "最近六个月的退款率", "window"),
    ("上个月上海的订单量", "上个月上海的销量", "metric"),
    ("refunds last month", "refund rate last month", "metric"),
    ("上个月各产品的销售额", "上个月各产品的处方量", "metric"),
    ("units sold by region last month", "orders by region last month", "metric"),
    ("上个月客单价多少", "上个月净收入多少", "metric"),
    ("上季度订单数前3的城市", "上季度订单数前10的城市", "top_n"),
    ("top 3 cities by units sold last quarter", "top 5 cities by units sold last quarter", "top_n"),
    ("上个月销量最高的3个产品", "上个月销量最高的5个产品", "top_n"),
    ("上个月不含医院的销售额", "上个月医院的销售额", "negation"),
    ("gross revenue excluding hospitals last month", "hospital gross revenue last month", "negation"),
    ("去年不含电商的订单数", "去年电商的订单数", "negation"),
    ("上个月除了上海以外的净收入", "上月上海的净收入", "negation"),
    ("上月华东的订单数", "上月华北的订单数", "region"),
    ("gross revenue in South China last year", "gross revenue in Central China last year", "region"),
    ("上个月心血管的销售额", "上个月肿瘤的销售额", "therapeutic_area"),
    ("respiratory prescriptions last month", "diabetes prescriptions last month", "therapeutic_area"),
    ("上个月各渠道的退款额", "上个月各城市的退款额", "dimension"),
    ("net revenue per brand last month", "net revenue per product last month", "dimension"),
    ("今年每月的订单数", "今年每季度的订单数", "grain"),
    ("weekly units sold last quarter", "monthly units sold last quarter", "grain"),
    ("上个月净收入最高的3个城市", "上个月净收入最低的3个城市", "order"),
    ("top 5 products by refund rate last month", "bottom 5 products by refund rate last month", "order"),
    ("上个月销售额同比", "上个月销售额环比", "comparison"),
    ("上个月 Shanghai 的 net revenue", "上个月 Beijing 的 net revenue", "city"),
    ("last month 医院 orders", "last month 电商 orders", "channel"),
    ("上个月 top 3 cities by 销售额", "上个月 top 5 cities by 销售额", "top_n"),
    ("上个月 net revenue 不含电商", "上个月 net revenue 电商", "negation"),
    ("上个月质量问题的退款额", "上个月物流延误的退款额", "refund_reason"),
    ("上个月的销售额是多少万元", "上个月的销售额是多少元", "unit"),
    ("上个月脉立安的销售额", "上个月安平达的销售额", "brand"),
]


# ---- one ask --------------------------------------------------------------------------------


@dataclass
class Asked:
    """One POST /ask: the answer as the API returned it, and the wall time the caller saw."""

    question: str
    tenant: str
    answer: dict[str, Any]
    wall_ms: float

    @property
    def status(self) -> str:
        return str(self.answer.get("status"))

    @property
    def route(self) -> str:
        return str(self.answer.get("route"))

    @property
    def cache(self) -> dict[str, Any]:
        return self.answer.get("cache") or {}

    @property
    def hit(self) -> bool:
        return bool(self.cache.get("hit"))

    @property
    def timings(self) -> dict[str, float]:
        return self.answer.get("timings") or {}

    @property
    def total_ms(self) -> float:
        return float(self.timings.get("total", float("nan")))

    @property
    def planned(self) -> bool:
        """Whether the ask reached the Plan step (a hit skips Recall and Plan)."""
        return "Plan" in self.timings


class Asker:
    """POST /ask through the local API gateway; the store's changes are indexed after every ask."""

    def __init__(self, gateway: Any, drainer: Any, user: str = "analyst") -> None:
        self._gateway = gateway
        self._drainer = drainer
        self._user = user

    def ask(self, tenant: str, question: str) -> Asked:
        headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": self._user, "Content-Type": "application/json"}
        started = time.perf_counter()
        reply = self._gateway.invoke("POST", "/ask", headers=headers, body=json.dumps({"question": question}))
        wall_ms = (time.perf_counter() - started) * 1000
        self._drainer.drain()  # index the episode and the cache entry, as the stream would
        return Asked(question, tenant, reply.json(), wall_ms)


def fresh_tenant(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def result_of(answer: dict[str, Any]) -> tuple[Any, ...]:
    """What a false hit is judged on: columns, row count and the rows as a multiset."""
    rows = sorted((tuple(_cell(v) for v in row) for row in answer.get("rows") or []), key=repr)
    return (tuple(answer.get("columns") or ()), answer.get("row_count"), tuple(rows))


def _cell(value: Any) -> Any:
    if isinstance(value, float | Decimal):
        return float(f"{float(value):.9g}")  # the same SQL may sum floats in another order
    return value


# ---- the Bedrock planner over a scripted Converse double --------------------------------------


class IntentProposer:
    """Answers a Converse request as a model that plans like the rule planner would, after a delay.

    The question and route are read from the request's user turn (it ends ``Route: <r>`` and
    ``Question: <q>``); the answer is one ``propose_intent`` tool call with the rule planner's
    intent, or ``ask_clarification`` when the rules would ask.
    """

    def __init__(self, rules: Any, delay: float, sleep: Callable[[float], None] = time.sleep) -> None:
        self._rules = rules
        self._delay = delay
        self._sleep = sleep
        self.questions: list[str] = []

    def __call__(self, sent: Any) -> Any:
        from tests.contract.bedrock_double import Scripted

        text = sent.user_text
        question = re.findall(r"^Question: (.*)$", text, re.MULTILINE)[-1]
        route = re.findall(r"^Route: (.*)$", text, re.MULTILINE)[-1]
        self.questions.append(question)
        self._sleep(self._delay)
        plan = self._rules.plan(question, route=route)
        if plan.status == "planned" and plan.intent is not None:
            name, payload = "propose_intent", tool_input(plan.intent)
        else:
            asked = plan.clarification.question if plan.clarification is not None else "Which one do you mean?"
            name, payload = "ask_clarification", {"question": asked}
        content = [{"toolUse": {"toolUseId": f"t-{len(self.questions)}", "name": name, "input": payload}}]
        return Scripted(
            200,
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": "tool_use",
                "usage": {"inputTokens": 2000, "outputTokens": 80, "totalTokens": 2080},
                "metrics": {"latencyMs": round(self._delay * 1000)},
            },
        )


def tool_input(intent: Any) -> dict[str, Any]:
    """An Intent as ``propose_intent``'s input (``BedrockPlanner.intent_schema``)."""

    def window(w: Any) -> dict[str, str]:
        return {"start": w.start.isoformat(), "end": w.end.isoformat(), "label": w.label}

    payload: dict[str, Any] = {"metric": intent.metric}
    if intent.dimensions:
        payload["dimensions"] = list(intent.dimensions)
    if intent.filters:
        payload["filters"] = [{"dimension": f.dimension, "op": f.op, "values": list(f.values)} for f in intent.filters]
    if intent.time_window is not None:
        payload["time_window"] = window(intent.time_window)
    if intent.comparison is not None:
        payload["comparison"] = {"kind": intent.comparison.kind, "window": window(intent.comparison.window)}
    if intent.order is not None:
        payload["order"] = intent.order
    if intent.limit is not None:
        payload["limit"] = intent.limit
    if intent.unit is not None:
        payload["unit"] = intent.unit
    return payload


def converse_client(double: Any) -> Any:
    """A real bedrock-runtime client whose Converse requests the double answers (as
    ``tests/contract/bedrock_double.bedrock_runtime_client``), at an endpoint moto does not claim:
    under ``mock_aws`` every before-send handler runs, and moto's would fail Converse as not
    implemented."""
    import boto3
    from botocore.config import Config

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url="https://bedrock-runtime.us-east-1.double.invalid",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )
    client.meta.events.register("before-send.bedrock-runtime.Converse", double.before_send)
    return client


@contextmanager
def bedrock_planner(delay: float) -> Iterator[Any]:
    """The container's planner is a BedrockPlanner over the double while inside; yields the double."""
    from memtool.planning.bedrock_planner import BedrockPlanner
    from memtool.runtime import container
    from tests.contract.bedrock_double import ScriptedBedrock

    rules = container.rule_planner()  # the settings' planner is "rules": the container's RulePlanner
    double = ScriptedBedrock(IntentProposer(rules, delay))
    planner = BedrockPlanner(
        converse_client(double),
        model_id=MODEL_ID,
        catalog=rules.catalog,
        entities=rules.entities,
        today=container.today,
        fallback=rules,
    )
    original = container.planner
    container.planner = lambda: planner  # ask_steps() builds AskSteps with planner=planner() per invocation
    try:
        yield double
    finally:
        container.planner = original


# ---- figures --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[index]


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def language(question: str) -> str:
    has_cjk = any("\u4e00" <= ch <= "\u9fff" for ch in question)
    has_latin = any(ch.isascii() and ch.isalpha() for ch in question)
    return "mixed" if has_cjk and has_latin else "zh" if has_cjk else "en"


def pair_languages(a: str, b: str) -> str:
    return "/".join(sorted((language(a), language(b)), key=["zh", "en", "mixed"].index))


def intent_difference(rules: Any, a: str, b: str) -> str:
    """How the rule planner reads the two questions differently ("" when it resolves the same intent)."""
    from memtool.planning.routes import classify_route

    intents = []
    for question in (a, b):
        plan = rules.plan(question, route=classify_route(question))
        if plan.intent is None:
            return f"{question!r}: {plan.status}"
        intents.append(_without_labels(plan.intent.model_dump(mode="json")))
    first, second = intents
    differ = [name for name in first if first[name] != second[name]]
    return "; ".join(
        f"{name}: {json.dumps(first[name], ensure_ascii=False)} vs {json.dumps(second[name], ensure_ascii=False)}" for name in differ
    )


def _without_labels(intent: dict[str, Any]) -> dict[str, Any]:
    """An intent's JSON without its windows' labels: paraphrases name the same dates in other words."""
    if intent.get("time_window"):
        intent["time_window"].pop("label", None)
    if intent.get("comparison"):
        intent["comparison"]["window"].pop("label", None)
    return intent


def sql_line(sql: str | None) -> str:
    return " ".join((sql or "").split())


def cache_brief(cache: dict[str, Any]) -> str:
    shown = {k: cache.get(k) for k in ("hit", "reason", "key", "similarity", "bound_slots", "entry", "stored") if k in cache}
    return json.dumps(shown, ensure_ascii=False)


def md_escape(text: str) -> str:
    return text.replace("|", "\\|")


# ---- the run --------------------------------------------------------------------------------


@dataclass
class PairOutcome:
    a: str
    b: str
    what: str  # "paraphrase", or what a swap changes
    first: Asked
    second: Asked

    @property
    def stored(self) -> bool:
        return bool(self.first.cache.get("stored"))


@dataclass
class Run:
    reference: dict[str, Asked] = field(default_factory=dict)
    dropped: list[tuple[str, str, str, str]] = field(default_factory=list)  # (set, a, b, why)
    paraphrases: list[PairOutcome] = field(default_factory=list)
    swaps: list[PairOutcome] = field(default_factory=list)
    latency: list[Asked] = field(default_factory=list)
    latency_calls: int = 0
    stream: list[Asked] = field(default_factory=list)
    stream_questions: list[str] = field(default_factory=list)
    stream_calls: int = 0
    stream_seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)


def reference_pass(asker: Asker, questions: Sequence[str], run: Run) -> None:
    for question in dict.fromkeys(questions):
        run.reference[question] = asker.ask(fresh_tenant("ref"), question)


def unusable(asked: Asked) -> str | None:
    if asked.status != "answered":
        detail = (asked.answer.get("clarification") or {}).get("question") or (asked.answer.get("error") or {}).get("message") or ""
        return f"{asked.status}: {detail}".rstrip(": ")
    if asked.route not in CACHED_ROUTES:
        return f"route {asked.route} is not cached"
    return None


def keep_pairs(run: Run, name: str, pairs: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
    kept = []
    for pair in pairs:
        reasons = [f"{q!r}: {why}" for q in pair[:2] if (why := unusable(run.reference[q])) is not None]
        if reasons:
            run.dropped.append((name, pair[0], pair[1], "; ".join(reasons)))
        else:
            kept.append(pair)
    return kept


def pair_pass(asker: Asker, pairs: Sequence[tuple[str, ...]], what: str | None) -> list[PairOutcome]:
    outcomes = []
    for pair in pairs:
        tenant = fresh_tenant("pair")
        first = asker.ask(tenant, pair[0])
        second = asker.ask(tenant, pair[1])
        outcomes.append(PairOutcome(pair[0], pair[1], what or pair[2], first, second))
    return outcomes


def zipf_draws(questions: Sequence[str], count: int, s: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    ranked = list(questions)
    rng.shuffle(ranked)  # rank 1 is whichever question the seed puts first
    weights = [1 / rank**s for rank in range(1, len(ranked) + 1)]
    return rng.choices(ranked, weights=weights, k=count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.05, help="demo warehouse scale")
    parser.add_argument("--delay", type=float, default=1.2, help="seconds the Converse double takes per call")
    parser.add_argument("--latency-pairs", type=int, default=20, help="paraphrase pairs in the latency part")
    parser.add_argument("--stream", type=int, default=200, help="asks in the Zipf stream")
    parser.add_argument("--distinct", type=int, default=30, help="distinct questions in the Zipf stream")
    parser.add_argument("--zipf-s", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--limit", type=int, default=0, help="only the first N pairs of each set (a quick look)")
    parser.add_argument(
        "--store",
        choices=("sqlite", "dynamodb"),
        default="sqlite",
        help="record store: sqlite (memtool serve's default) or moto DynamoDB (see the docstring: small runs only)",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cache_bench.md"))
    args = parser.parse_args()

    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ["POWERTOOLS_LOG_LEVEL"] = "CRITICAL"
    sys.path.insert(0, str(ROOT))
    from moto import mock_aws

    from memtool.runtime import container
    from memtool.runtime.aws import client
    from memtool.runtime.handlers import function_handler
    from memtool.runtime.local_api import LocalApiGateway
    from memtool.runtime.outbox_drain import OutboxDrainer
    from memtool.settings import Settings, use_settings
    from memtool.runtime.stream_drain import StreamDrainer
    from memtool.runtime.tables import create_tables
    from memtool.runtime.template import load_template
    from memtool.sql.demo_warehouse import build_demo_warehouse

    paraphrases: list[tuple[str, ...]] = list(PARAPHRASES[: args.limit or None])
    swaps: list[tuple[str, ...]] = list(SWAPS[: args.limit or None])
    began = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="memtool-cache-bench-"))
    summary = build_demo_warehouse(work / "demo.duckdb", scale=args.scale, anchor=TODAY)
    template = load_template(ROOT / "template.yaml")
    settings = Settings(
        runtime="local",
        store=args.store,
        home=work / "home",
        today=TODAY,
        warehouse_path=summary.path,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    run = Run()
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        use_settings(settings.model_copy(update={"cache_enabled": False}))
        gateway = LocalApiGateway(template, ROOT)
        drainer: Any
        if args.store == "dynamodb":
            create_tables(client("dynamodb", settings), settings, template)
            drainer = StreamDrainer(
                client("dynamodb", settings),
                client("dynamodbstreams", settings),
                settings.memory_table,
                function_handler(ROOT, "indexer"),
            )
        else:  # the local runtime's outbox, drained into the same indexer the stream handler uses
            drainer = OutboxDrainer(store=container.memory_store, indexer=container.memory_indexer, now=lambda: container.clock().now())
        asker = Asker(gateway, drainer)
        for question in ("上周各大区的订单数", "refund rate by channel this year"):  # warm-up: imports, catalog, first state machine
            asker.ask(fresh_tenant("warm"), question)

        started = time.perf_counter()
        reference_pass(asker, [q for pair in [*paraphrases, *swaps] for q in pair[:2]], run)
        run.phase_seconds["reference (cache off)"] = time.perf_counter() - started
        paraphrases = keep_pairs(run, "paraphrase", paraphrases)
        swaps = keep_pairs(run, "swap", swaps)

        use_settings(settings)  # the cache on, with its defaults
        started = time.perf_counter()
        run.paraphrases = pair_pass(asker, paraphrases, "paraphrase")
        run.swaps = pair_pass(asker, swaps, None)
        run.phase_seconds["pairs (rule planner)"] = time.perf_counter() - started
        rules = container.rule_planner()

        started = time.perf_counter()
        with bedrock_planner(args.delay) as double:
            for a, b in paraphrases[: args.latency_pairs]:
                tenant = fresh_tenant("lat")
                run.latency += [asker.ask(tenant, a), asker.ask(tenant, b), asker.ask(tenant, a)]
            run.latency_calls = len(double.requests)
        run.phase_seconds["latency (Bedrock double)"] = time.perf_counter() - started

        distinct = list(dict.fromkeys(q for pair in paraphrases for q in pair))[: args.distinct]
        run.stream_questions = distinct
        draws = zipf_draws(distinct, args.stream, args.zipf_s, args.seed)
        started = time.perf_counter()
        with bedrock_planner(args.delay) as double:
            tenant = fresh_tenant("zipf")
            run.stream = [asker.ask(tenant, question) for question in draws]
            run.stream_calls = len(double.requests)
        run.stream_seconds = time.perf_counter() - started
        run.phase_seconds["Zipf stream (Bedrock double)"] = run.stream_seconds
        signatures = {q: intent_key(rules, q) for q in distinct}
        differences = {(o.a, o.b): intent_difference(rules, o.a, o.b) for o in run.paraphrases if not o.second.hit}
        differences |= {(o.a, o.b): intent_difference(rules, o.a, o.b) for o in run.swaps}
        ttl = settings.cache_ttl_seconds
        container.reset()
        use_settings(None)

    elapsed = time.perf_counter() - began
    text, lines = report(run, args, summary, signatures, differences, ttl, elapsed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    print("\n".join(lines))
    print(f"report: {args.out}")
    return 0


def intent_key(rules: Any, question: str) -> str:
    from memtool.planning.routes import classify_route

    plan = rules.plan(question, route=classify_route(question))
    return "" if plan.intent is None else plan.intent.signature(tenant="-", model_version="-")


# ---- the report -----------------------------------------------------------------------------


def report(
    run: Run,
    args: argparse.Namespace,
    summary: Any,
    signatures: dict[str, str],
    differences: dict[tuple[str, str], str],
    ttl: int,
    elapsed: float,
) -> tuple[str, list[str]]:
    reference = run.reference
    para = run.paraphrases
    para_hits = [o for o in para if o.second.hit]
    para_misses = [o for o in para if not o.second.hit]
    para_false = [o for o in para_hits if result_of(o.second.answer) != result_of(reference[o.b].answer)]
    swaps = run.swaps
    swap_hits = [o for o in swaps if o.second.hit]
    swap_false = [o for o in swap_hits if result_of(o.second.answer) != result_of(reference[o.b].answer)]
    swap_correct = [o for o in swap_hits if o not in swap_false]
    same_to_planner = [o for o in swaps if sql_line(reference[o.a].answer.get("sql")) == sql_line(reference[o.b].answer.get("sql"))]
    not_stored = [o for o in [*para, *swaps] if not o.stored]
    hit_asks = [x for o in [*para, *swaps] for x in (o.second,) if x.hit] + [x for x in [*run.latency, *run.stream] if x.hit]
    misses_changed = [
        x for o in [*para, *swaps] for x in (o.first, o.second) if not x.hit and result_of(x.answer) != result_of(reference[x.question].answer)
    ]
    hits_off_path = [x for x in hit_asks if x.planned or "Recall" in x.timings or "Execute" not in x.timings]

    misses = [x for x in run.latency if not x.hit]
    hits = [x for x in run.latency if x.hit]
    miss_p50, hit_p50 = percentile([x.total_ms for x in misses], 0.5), percentile([x.total_ms for x in hits], 0.5)
    miss_wall, hit_wall = percentile([x.wall_ms for x in misses], 0.5), percentile([x.wall_ms for x in hits], 0.5)
    latency_planned = sum(x.planned for x in run.latency)

    stream = run.stream
    stream_hits = [x for x in stream if x.hit]
    stream_planned = sum(x.planned for x in stream)
    stream_false = [x for x in stream_hits if result_of(x.answer) != result_of(reference[x.question].answer)]
    cold = len({signatures[x.question] for x in stream})  # distinct intents asked: the misses no cache avoids
    calls_per_plan = run.stream_calls / stream_planned if stream_planned else 1.0
    baseline_calls = round(len(stream) * calls_per_plan)  # without the cache every ask on a cached route plans
    by_reason = Counter(str(x.cache.get("reason")) for x in stream)

    headline = [
        f"paraphrase hit rate: {len(para_hits)}/{len(para)} = {pct(len(para_hits), len(para))} (target >= 80%)",
        f"false hits on entity swaps: {len(swap_false)}/{len(swaps)} = {pct(len(swap_false), len(swaps))} (target 0)",
        f"hits on entity swaps with correct rows: {len(swap_correct)}/{len(swaps)}",
        f"false hits on paraphrases: {len(para_false)}/{len(para_hits)} hits",
        f"hit vs full plan (Bedrock double {args.delay:.2f} s/call), p50 ask total: {hit_p50:.0f} ms vs {miss_p50:.0f} ms = {miss_p50 / hit_p50:.1f}x faster",
        f"Zipf stream ({len(stream)} asks, s={args.zipf_s}, {len(run.stream_questions)} questions): hit rate {pct(len(stream_hits), len(stream))}, "
        f"Converse calls {run.stream_calls} vs {baseline_calls} without the cache ({pct(baseline_calls - run.stream_calls, baseline_calls)} saved)",
        f"run time: {elapsed:.0f} s",
    ]

    commit = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--", "layers", "functions", "statemachines", "template.yaml")
    lines = [
        "# SQL semantic cache",
        "",
        f"Generated by `{' '.join(['python', 'bench/cache_bench.py', *sys.argv[1:]])}` on {time.strftime('%Y-%m-%d %H:%M')} in {elapsed:.0f} s.",
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}. "
        f"Code: {commit}" + (f", with uncommitted product changes in {', '.join(sorted({l[3:] for l in dirty.splitlines()}))}" if dirty else "") + ".",
        "",
        "## Figures",
        "",
        *[f"- {line}" for line in headline],
        "",
        "## How it was measured",
        "",
        "In-process, as `ask_bench.py`: POST /ask through the local API gateway and the real ask handler, the",
        "AskFlow ASL on moto's Step Functions engine with the flow steps in-process, "
        + (
            "moto DynamoDB with its stream drained into the indexer after every ask,"
            if args.store == "dynamodb"
            else "the SQLite record store (`memtool serve`'s default) with its outbox drained into the indexer after every ask "
            "(moto DynamoDB copies the whole table on every transaction: a first run on it reached 24 GB of RSS after about 500 asks),"
        ),
        "the embedded index with the hashing embedder, and",
        f"the DuckDB demo warehouse at scale {args.scale} ({summary.row_counts.get('fact_order_line', 0):,} order lines), today = {TODAY}.",
        f"Cache settings are the defaults (TTL {ttl} s, masked similarity 0.92), on the system clock.",
        "",
        f"1. **Reference.** Each of the {len(reference)} distinct questions asked once with `cache_enabled=False`, each in a",
        "   fresh tenant: its status, route, SQL and rows. A pair with a question not answered, or not on a",
        "   cached route, is dropped (listed below).",
        "2. **Pairs.** Rule planner, cache on. Each pair in its own fresh tenant, one user: A, then B.",
        "   A paraphrase's B should hit. A swap's B must not; when it does, its rows (columns, row count, rows",
        "   as a multiset, floats to 9 significant digits) are compared with B's reference: equal is a correct",
        "   hit, different a **false hit**. Paraphrase hits are checked the same way.",
        "3. **Latency.** `container.planner` returns a `BedrockPlanner` over the scripted Converse double of",
        "   `tests/contract/bedrock_double.py` (a real bedrock-runtime client, at an endpoint moto does not claim;",
        f"   the request never leaves the process). The double waits {args.delay} s and answers `propose_intent` with the intent the rule planner",
        "   resolves for the `Question:` line of the request. For the first "
        f"{min(args.latency_pairs, len(para))} kept paraphrase pairs, each in a fresh",
        "   tenant: A (a miss: Recall, Plan with one Converse call), B and A again (hits). `total` is the",
        "   answer's `timings.total` (the execution); `wall` is what the API caller waited (adds the handler",
        "   and the 20 ms status poll).",
        f"4. **Zipf stream.** {len(stream)} asks drawn with weights 1/rank^{args.zipf_s} (seed {args.seed}) over the first",
        f"   {len(run.stream_questions)} distinct questions of the kept paraphrase pairs (so a question's paraphrase may be",
        "   in the stream too), one tenant, one user, the Bedrock double as in 3. Calls without the cache:",
        "   every ask on a cached route reaches Plan, at the calls per plan measured here.",
        f"   The stream took {run.stream_seconds:.0f} s, well inside the {ttl} s TTL, so no entry expired during it.",
        "",
        "Phases: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in run.phase_seconds.items()) + ".",
        "",
        "## Paraphrase pairs",
        "",
        "| languages | pairs | B hit | hit rate |",
        "|---|---:|---:|---:|",
    ]
    for mix in sorted({pair_languages(o.a, o.b) for o in para}):
        group = [o for o in para if pair_languages(o.a, o.b) == mix]
        got = sum(o.second.hit for o in group)
        lines.append(f"| {mix} | {len(group)} | {got} | {pct(got, len(group))} |")
    lines.append(f"| **all** | {len(para)} | {len(para_hits)} | {pct(len(para_hits), len(para))} |")
    lines += [
        "",
        f"Hits by kind: {dict(Counter(str(o.second.cache.get('reason')) for o in para_hits))}. False hits among them: {len(para_false)}. "
        "Every question here is one the rule planner plans, so a hit is an exact-key hit; the masked path (questions",
        "only a model can plan) is not exercised by this set.",
        f"Every A was stored: {'yes' if not [o for o in para if not o.stored] else 'no, see below'}.",
        "",
        "### Paraphrase misses",
        "",
        "B's `cache.reason`, and how the rule planner reads A and B (fields of the resolved intents that differ;",
        "empty when it resolves the same intent, i.e. the miss is the cache's).",
        "",
        "| A | B | B cache.reason | A key = B key | the rule planner's intents differ in |",
        "|---|---|---|---|---|",
    ]
    for o in para_misses:
        same_key = "yes" if o.first.cache.get("key") and o.first.cache.get("key") == o.second.cache.get("key") else "no"
        lines.append(
            f"| {md_escape(o.a)} | {md_escape(o.b)} | {o.second.cache.get('reason')} | {same_key} | {md_escape(differences.get((o.a, o.b), '')) or '(same intent)'} |"
        )
    if not para_misses:
        lines.append("| (none) | | | | |")
    lines += [
        "",
        "## Entity-swap pairs",
        "",
        "| B differs in | pairs | B hit | correct hits | false hits |",
        "|---|---:|---:|---:|---:|",
    ]
    for what in sorted({o.what for o in swaps}):
        group = [o for o in swaps if o.what == what]
        lines.append(
            f"| {what} | {len(group)} | {sum(o.second.hit for o in group)} | {sum(o in swap_correct for o in group)} | {sum(o in swap_false for o in group)} |"
        )
    lines.append(f"| **all** | {len(swaps)} | {len(swap_hits)} | {len(swap_correct)} | {len(swap_false)} |")
    lines += ["", f"B's `cache.reason` on swaps: {dict(Counter(str(o.second.cache.get('reason')) for o in swaps))}.", ""]
    if swap_hits:
        lines += ["### Swap hits", "", "| A | B | correct | A cache | B cache | B SQL (hit) | B SQL (reference, cache off) |", "|---|---|---|---|---|---|---|"]
        for o in swap_hits:
            lines.append(
                f"| {md_escape(o.a)} | {md_escape(o.b)} | {'yes' if o in swap_correct else '**no**'} | `{md_escape(cache_brief(o.first.cache))}` | "
                f"`{md_escape(cache_brief(o.second.cache))}` | `{md_escape(sql_line(o.second.answer.get('sql')))}` | `{md_escape(sql_line(reference[o.b].answer.get('sql')))}` |"
            )
        lines.append("")
    if same_to_planner:
        lines += [
            "### Swaps the planner does not tell apart",
            "",
            "A and B got the same SQL in the reference pass (cache off): whatever the cache does, B's answer is A's.",
            "",
            "| A | B | B differs in | SQL |",
            "|---|---|---|---|",
        ]
        for o in same_to_planner:
            lines.append(f"| {md_escape(o.a)} | {md_escape(o.b)} | {o.what} | `{md_escape(sql_line(reference[o.a].answer.get('sql')))}` |")
        lines.append("")
    lines += [
        "## Latency: a hit against a full plan (Bedrock planner double)",
        "",
        f"{len(run.latency)} asks: {len(misses)} misses, {len(hits)} hits; Converse calls {run.latency_calls}, asks that reached Plan {latency_planned}.",
        "",
        "| | asks | p50 total ms | p95 total ms | p50 wall ms | p50 Plan ms | p50 CacheLookup ms | p50 Execute ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, group in (("miss (full plan)", misses), ("hit", hits)):
        def p50(step: str, group: list[Asked] = group) -> str:
            values = [x.timings[step] for x in group if step in x.timings]
            return f"{percentile(values, 0.5):.1f}" if values else "-"

        lines.append(
            f"| {name} | {len(group)} | {percentile([x.total_ms for x in group], 0.5):.0f} | {percentile([x.total_ms for x in group], 0.95):.0f} | "
            f"{percentile([x.wall_ms for x in group], 0.5):.0f} | {p50('Plan')} | {p50('CacheLookup')} | {p50('Execute')} |"
        )
    lines += [
        "",
        f"Ratio of p50 totals, miss / hit: **{miss_p50 / hit_p50:.1f}x** (wall: {miss_wall / hit_wall:.1f}x). "
        f"Without the {args.delay} s model delay a miss would still pay Recall and Plan; with it, the delay dominates.",
        "",
        "## Zipf stream (Bedrock planner double)",
        "",
        "| asks | distinct questions asked | distinct intents asked | hits | hit rate | possible hits (asks − intents) | Converse calls | without the cache | saved |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(stream)} | {len({x.question for x in stream})} | {cold} | {len(stream_hits)} | {pct(len(stream_hits), len(stream))} | {len(stream) - cold} | "
        f"{run.stream_calls} | {baseline_calls} | {baseline_calls - run.stream_calls} ({pct(baseline_calls - run.stream_calls, baseline_calls)}) |",
        "",
        f"Asks that reached Plan: {stream_planned} (Converse calls per plan {calls_per_plan:.2f}). `cache.reason` over the stream: {dict(by_reason)}.",
        f"False hits on the stream (rows against the question's reference): {len(stream_false)}.",
        f"p50 total: hits {percentile([x.total_ms for x in stream_hits], 0.5):.0f} ms, misses {percentile([x.total_ms for x in stream if not x.hit], 0.5):.0f} ms.",
        "",
        "## Checks",
        "",
        f"- Hits whose `timings` has Recall or Plan, or lacks Execute: {len(hits_off_path)} of {len(hit_asks)}.",
        f"- Pairs whose A was not stored (`cache.stored` missing): {len(not_stored)}"
        + (": " + "; ".join(f"{o.a!r} ({o.first.cache.get('reason')})" for o in not_stored) if not_stored else "."),
        f"- Pair asks that missed and whose rows differ from the reference (the cache did not answer them): {len(misses_changed)}"
        + (": " + "; ".join(repr(x.question) for x in misses_changed) if misses_changed else "."),
        f"- Non-answered asks outside the reference pass: {sum(x.status != 'answered' for o in [*para, *swaps] for x in (o.first, o.second)) + sum(x.status != 'answered' for x in [*run.latency, *stream])}.",
        "",
        "## Dropped pairs",
        "",
    ]
    if run.dropped:
        lines += ["| set | A | B | why |", "|---|---|---|---|"]
        lines += [f"| {name} | {md_escape(a)} | {md_escape(b)} | {md_escape(why)} |" for name, a, b, why in run.dropped]
    else:
        lines.append("None: every question was answered on a cached route.")
    lines += ["", f"Kept: {len(para)} paraphrase pairs, {len(swaps)} swap pairs.", ""]
    return "\n".join(lines), headline


def _git(*argv: str) -> str:
    try:
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


if __name__ == "__main__":
    sys.exit(main())
