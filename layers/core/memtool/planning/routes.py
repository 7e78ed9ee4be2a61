"""Which of the four routes a question takes, from its words alone (no LLM, no warehouse).

In order of precedence:

1. ``business_knowledge_qa`` — it asks what something means or how it is calculated (怎么算,
   如何计算, 定义, 口径, 是什么意思, "how is … calculated", "definition of", "what does … mean");
   a bare "X是什么" / "what is X" counts only when the question names no period, value or grouping.
2. ``deep_analysis_workflow`` — it asks for an analysis (异常, 预测, 归因, 聚类, 相关, 为什么, 原因, why,
   anomaly, forecast, attribution, cluster, correlation, driver, root cause). Words the parser read
   as a dimension, a grouping or a value do not count: "原因" in 退款原因分布 / 按原因 names the
   refund-reason dimension, while 净收入下降的原因 still asks why.
3. ``kpi_lookup`` — one number: it names a metric (or a metric-like ambiguous word such as 收入)
   with no grouping, no time grain or trend, and no top-N or ranking.
4. ``nl2sql_query`` — everything else.

A request may force a route; ``parse_forced_route`` validates it.
"""

from __future__ import annotations

import re
from datetime import date
from functools import lru_cache
from typing import cast

from memtool.errors import ValidationFailed
from memtool.planning.plan import ROUTES, Route
from memtool.semantic.catalog import Catalog, load_catalog
from memtool.semantic.entities import EntityIndex
from memtool.semantic.parser import ParsedQuestion, QuestionParser, normalize

_KNOWLEDGE = re.compile(
    r"怎么算|怎么计算|如何计算|如何算|怎样计算|如何定义|怎么定义|计算方法|计算方式|计算公式|计算逻辑|统计口径|口径|定义|是什么意思|什么意思|含义|指的是什么|是指什么|包括哪些|包含哪些|"
    r"\bwhat\s+does\b.*\bmean\b|\bmeaning\s+of\b|\bdefinitions?\b|\bdefined?\b|\bformula\b|"
    r"\bhow\s+(?:is|are|do\s+(?:you|we)|does\s+\w+)\b.*\b(?:calculated|computed|defined|measured|calculate|compute|define|measure|counted)\b",
    re.IGNORECASE,
)
_KNOWLEDGE_WEAK = re.compile(r"是什么|什么是|什么叫|\bwhat\s+is\b|\bwhat's\b|\bwhat\s+are\b|\bexplain\b", re.IGNORECASE)
# "What is the total unemploy?", "what's the average lead time": a statistic asked for is a number, not a definition.
_ASKS_A_VALUE = re.compile(
    r"\bwhat(?:\s+is|'s|\s+are|\s+was|\s+were)\s+(?:the\s+|our\s+|my\s+)?"
    r"(?:total|average|avg|mean|median|sum|number|count|overall|max(?:imum)?|min(?:imum)?|highest|lowest|current|latest)\b",
    re.IGNORECASE,
)
_DEEP = re.compile(
    r"异常|离群|预测|归因|聚类|分群|相关性|相关(?!数据|信息|的数据|内容|资料)|回归|弹性|为什么|为何|原因|驱动因素|驱动|影响因素|突降|骤降|突增|骤增|怎么回事|"
    r"\bwhy\b|anomal|outlier|forecast|predict|projection|attribution|\battribute|\bcluster|segmentation|correlat|regress|elasticity|\bdrivers?\b|"
    r"root\s+cause|what\s+caused|unusual|abnormal",
    re.IGNORECASE,
)
# Routes never depend on the calendar, only on which words are there: without the ask's day, a
# fixed one. With it, the classifier reads the question the planner then reads (one reading).
_CLASSIFY_DAY = date(2026, 1, 15)


@lru_cache(maxsize=1)
def _default_parser() -> QuestionParser:
    catalog = load_catalog()
    return QuestionParser(catalog, EntityIndex.static(catalog))


def classify_route(
    question: str,
    *,
    catalog: Catalog | None = None,
    entities: EntityIndex | None = None,
    parser: QuestionParser | None = None,
    today: date | None = None,
) -> Route:
    """The route a question takes when the request does not force one, read with the tenant's ``parser``
    (on ``today``, the ask's day, so that the ask's later steps share the reading)."""
    text = normalize(question)
    if parser is None:
        parser = _default_parser() if catalog is None else QuestionParser(catalog, entities or EntityIndex.static(catalog))
    parsed = parser.recognise(text, today=today or _CLASSIFY_DAY)
    if _KNOWLEDGE.search(text):
        return "business_knowledge_qa"
    if _DEEP.search(_without_dimension_words(text, parsed)):
        return "deep_analysis_workflow"
    if _KNOWLEDGE_WEAK.search(text) and not _ASKS_A_VALUE.search(text) and _names_only_terms(parsed):
        return "business_knowledge_qa"
    if _is_single_number(parsed):
        return "kpi_lookup"
    return "nl2sql_query"


def _without_dimension_words(text: str, parsed: ParsedQuestion) -> str:
    """The text with the spans the parser read as dimension words or values blanked out."""
    chars = list(text)
    for span in parsed.spans:
        if span.kind in _DIMENSION_SPANS:
            chars[span.start : span.end] = " " * (span.end - span.start)
    return "".join(chars)


_DIMENSION_SPANS = frozenset({"group", "noun", "entity"})


def _names_only_terms(parsed: ParsedQuestion) -> bool:
    """"What is X" asks for a definition when X is a bare term: no period, value, grouping, ranking."""
    return not (parsed.times or parsed.filters or parsed.exclusions or parsed.has_grouping or parsed.top_n or parsed.order)


def _is_single_number(parsed: ParsedQuestion) -> bool:
    names_metric = bool(parsed.metrics or parsed.ambiguous)
    ranked = parsed.top_n is not None or parsed.order is not None
    return names_metric and not parsed.has_grouping and not ranked


def parse_forced_route(value: object) -> Route:
    """A route a request forces, validated: anything outside ROUTES is a 400 on field ``route``."""
    if isinstance(value, str):
        candidate = value.strip().lower()
        if candidate in ROUTES:
            return cast(Route, candidate)
    raise ValidationFailed(f"route must be one of {', '.join(ROUTES)}; got {value!r}", field="route")
