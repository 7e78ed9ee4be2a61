"""The rule-based question parser: Chinese or English question -> Intent, or a clarification.

No segmenter: every known phrase (metric synonyms, dimension words, entity names, time
expressions, comparison, top-N and unit phrases, and terms taught by corrections) is looked for
in the text, overlapping finds are settled longest-first (a correction wins a tie), and whatever
is left must be filler ("帮我查一下", "what was the"). A leftover word the catalog does not know,
an ambiguous one ("收入", "revenue", "GMV") or a value the warehouse does not hold ("西安") makes
the parser ask instead of guess.

Defaults when the question names no window (``default_window``): the last full month for a
single number or a breakdown; for a time grain, the last 12 full months (month), 12 full weeks
(week), 30 full days (day), 4 full quarters (quarter) or last year plus this year to date (year).
Deep-analysis questions get a month grain when they have none, over the last 12 full months; a
window shorter than three months ("为什么9月净收入下降") is widened to the 12 months ending with it,
so the analysis sees the month in context. A trend word (趋势/走势/trend/over time) means a month grain unless another grain is named.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from typing import Any, Literal

from memtool.semantic.catalog import Catalog, DimensionSpec, Lang
from memtool.semantic.entities import EntityIndex, EntityValue, role_siblings
from memtool.semantic.followup import (
    FOLLOW_UP_PATTERNS,
    ChoiceTarget,
    drop_patterns,
    is_follow_up,
    mark_incompatible,
    merge_previous,
    shifted_year_back,
)
from memtool.semantic.intent import Comparison, Filter, Intent, TimeWindow
from memtool.semantic.parsed import MappingTarget, ParsedQuestion, Span, TermMapping
from memtool.semantic.time_expressions import (
    EN_NUMBER,
    ZH_NUMBER,
    ComparisonKind,
    TimeMatch,
    add_months,
    last_full_days,
    last_full_months,
    last_full_quarters,
    last_full_weeks,
    month_start,
    parse_number,
    previous_window,
    time_candidates,
)

Unit = Literal["元", "万元", "分"]
ParseRoute = Literal["nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow"]


@dataclass(frozen=True)
class ClarificationNeed:
    """The parser's question back to the user (the planner wraps it in a plan.Clarification)."""

    question: str
    term: str | None
    options: list[str]
    reason: str  # unknown_metric | ambiguous_metric | unsupported_metric | unknown_term | outside_value | ...
    targets: list[ChoiceTarget] = field(default_factory=list)  # what each option means, in order


@dataclass
class ParseResult:
    parsed: ParsedQuestion
    intent: Intent | None = None
    clarification: ClarificationNeed | None = None
    notes: list[str] = field(default_factory=list)
    carried_over: list[str] = field(default_factory=list)  # what a follow-up took from the previous turn


@dataclass(frozen=True)
class Choice:
    """A reply to a clarification: the option chosen for the pending question's term."""

    reason: str
    term: str | None
    target: ChoiceTarget


# ---- fixed phrases ----------------------------------------------------------------------------

_NUM = rf"(?:\d+|{ZH_NUMBER}|{EN_NUMBER})"
_B = r"(?<![A-Za-z0-9])"
_E = r"(?![A-Za-z0-9])"

_COMPARISONS: list[tuple[str, str]] = [
    (
        "yoy",
        r"同比(?:增长|下降|变化|增速)?|较去年同期|比去年同期|与去年同期相比|和去年同期相比|与去年同期比|和去年同期比|对比去年同期|"
        r"相比去年同期|跟去年同期比",
    ),
    (
        "yoy",
        rf"{_B}(?:yoy|y/y|year[\s-]+over[\s-]+year|(?:vs\.?|versus|compared\s+(?:to|with)|against|"
        rf"relative\s+to)\s+(?:the\s+)?(?:same\s+period\s+(?:of\s+|in\s+)?)?last\s+year|(?:vs\.?|versus|compared\s+(?:to|"
        rf"with))\s+(?:the\s+)?(?:prior|previous)\s+year){_E}",
    ),
    ("mom", r"月环比|比上月|比上个月|较上月|较上个月|与上月相比|和上月相比|与上个月相比|和上个月相比|对比上月|对比上个月"),
    (
        "mom",
        rf"{_B}(?:mom|m/m|month[\s-]+over[\s-]+month|(?:vs\.?|versus|compared\s+(?:to|with)|against|relative\s+to)\s+(?:the\s+)?(?:last|"
        rf"previous|prior)\s+month){_E}",
    ),
    ("wow", r"周环比|比上周|较上周|与上周相比|和上周相比|对比上周"),
    (
        "wow",
        rf"{_B}(?:wow|w/w|week[\s-]+over[\s-]+week|(?:vs\.?|versus|compared\s+(?:to|with)|against)\s+(?:the\s+)?(?:last|previous|"
        rf"prior)\s+week){_E}",
    ),
    ("qoq", r"季环比|季度环比|比上季度|较上季度|与上季度相比|和上季度相比"),
    (
        "qoq",
        rf"{_B}(?:qoq|q/q|quarter[\s-]+over[\s-]+quarter|(?:vs\.?|versus|compared\s+(?:to|with)|against)\s+(?:the\s+)?(?:last|previous|"
        rf"prior)\s+quarter){_E}",
    ),
    ("previous", r"环比(?:增长|下降|变化|增速)?"),
    (
        "previous",
        rf"{_B}(?:period[\s-]+over[\s-]+period|pop|(?:vs\.?|versus|compared\s+(?:to|with))\s+(?:the\s+)?(?:previous|prior)\s+period){_E}",
    ),
]

_UNIT_WORDS = {
    "万元": "万元", "元": "元", "分": "分",
    "10k yuan": "万元", "10,000 yuan": "万元", "10000 yuan": "万元", "ten thousand yuan": "万元", "wan yuan": "万元", "wan": "万元",
    "yuan": "元", "rmb": "元", "cny": "元", "fen": "分", "cents": "分", "cent": "分",
}  # fmt: skip
_UNITS: list[str] = [
    r"(?:单位\s*[:：为是用]?\s*|以|用|换算成|换算为|折合成?)\s*(?P<u>万元|元|分)(?:\s*(?:为单位|计算|计|表示|显示|展示))?",
    r"[(（\[]\s*(?P<u>万元|元|分)\s*[)）\]]",
    r"(?P<u>万元)",
    rf"{_B}(?:in|as|using|expressed\s+in|shown\s+in|in\s+units\s+of)\s+(?P<u>10k\s+yuan|10,000\s+yuan|10000\s+yuan|ten\s+thousand\s+yuan|wan\s+yuan|wan|yuan|rmb|cny|fen|cents?){_E}",
]

_TOP_N: list[tuple[str, str]] = [
    ("desc", rf"(?:排名|排行)?前\s*(?P<n>{_NUM})\s*(?:名|个|位|家|大|款|种|强)?"),
    ("asc", rf"(?:倒数|末|后)\s*(?P<n>{_NUM})\s*(?:名|个|位|家|款|种)?"),
    ("word", rf"(?P<o>最高|最大|最多|最好|最强|最低|最小|最少|最差|最弱)\s*的?\s*(?P<n>{_NUM})\s*(?:个|名|位|家|款|种)?"),
    ("desc", rf"{_B}top[\s-]*(?P<n>{_NUM}){_E}"),
    ("asc", rf"{_B}bottom[\s-]*(?P<n>{_NUM}){_E}"),
    ("word", rf"{_B}(?:the\s+)?(?P<o>highest|largest|biggest|best|lowest|smallest|worst)[\s-]+(?P<n>{_NUM}){_E}"),
    ("word", rf"{_B}(?:the\s+)?(?P<n>\d+|{EN_NUMBER})\s+(?P<o>highest|largest|biggest|best|top|lowest|smallest|worst|bottom){_E}"),
    ("which", rf"{_B}which\s+(?P<n>\d+|{EN_NUMBER}){_E}"),  # "which 3 nations had the lowest ...": the order word follows
    ("which", rf"哪\s*(?P<n>{_NUM})\s*(?:个|名|位|家|款|种)"),
]
_ORDER_WORDS: list[tuple[str, str, bool]] = [  # (order, pattern, superlative)
    ("desc", r"最高|最大|最多|最好|最强|第一名|排第一", True),
    ("asc", r"最低|最小|最少|最差|最弱|垫底", True),
    ("desc", r"排名|排行|排序|从高到低|由高到低|降序", False),
    ("asc", r"从低到高|由低到高|升序", False),
    ("desc", rf"{_B}(?:highest|largest|biggest|most|best|greatest){_E}", True),
    ("asc", rf"{_B}(?:lowest|smallest|least|worst|fewest){_E}", True),
    ("top", rf"{_B}top{_E}", False),
    ("desc", rf"{_B}(?:rank|ranks|ranking|ranked|sorted|sort|descending){_E}", False),
    ("asc", rf"{_B}ascending{_E}", False),
]
_DEFAULT_TOP = 10  # "top products" with no number

_GROUP_PREFIX_ZH = r"(?:各个|各|按照|按|分|每个|每一个|每|不同|逐个)\s*的?\s*"
_GROUP_SUFFIX_ZH = r"\s*(?:分布|排名|排行|占比|构成|维度|拆分|明细|之间)"
_GROUP_PREFIX_EN = (
    r"(?:by|per|for\s+each|for\s+every|each|every|across(?:\s+all)?(?:\s+the)?|broken\s+down\s+by|split\s+by|grouped\s+by|group\s+by|"
    r"breakdown\s+by|by\s+each)\s+"
)
_GROUP_SUFFIX_EN = r"\s+(?:breakdown|ranking|rankings|split|mix|share|shares|level)"
_TREND = r"变化趋势|趋势|走势|时间序列|" + rf"{_B}(?:trends?|over\s+time|time\s+series|trajectory){_E}"
# Words that ask for several values of one dimension together, as one number.
_TOGETHER = re.compile(
    r"合计|一共|共计|总共|加起来|合起来|加总|总和|总计|合并|"
    r"(?<![A-Za-z0-9])(?:in\s+total|combined|altogether|together|sum\s+of|total\s+of|added\s+up)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SHARE = r"占比|份额|比重|构成|百分比|所占比例|" + (
    rf"{_B}(?:share|shares|proportion|percentage\s+of\s+total|percentage|percent\s+of|fraction\s+of|mix){_E}"
)
_NEGATION = (
    r"除了|除去|除(?=\S{1,12}?(?:以外|之外|外))|不含|不包括|不包含|排除|去掉|不看|不要看|不算|不计|剔除|"
    rf"{_B}(?:excluding|except(?:\s+for)?|other\s+than|not\s+including|without){_E}"
)
_PLURAL_ZH = r"哪些|哪几个|哪几家|几个|那些"
# A standing preference ("以后默认用万元") or a this-time condition ("这次用分"), and chart names.
_LASTING = (
    r"以后都|以后|今后|往后|从现在起|从现在开始|从今以后|从此|默认|一律|总是|每次都|"
    rf"{_B}(?:always|from\s+now\s+on|by\s+default|going\s+forward|in\s+(?:the\s+)?future|default\s+to|as\s+(?:the|my)\s+default){_E}"
)
_THIS_TIME = (
    r"这次|本次|这一次|仅这次|只这次|这回|"
    rf"{_B}(?:just\s+this\s+once|this\s+time|for\s+now|just\s+for\s+this\s+(?:one|question)){_E}"
)
_CHARTS: list[tuple[str, str]] = [
    ("bar", rf"柱状图|柱形图|条形图|{_B}bar\s*(?:charts?|graphs?){_E}"),
    ("line", rf"折线图|曲线图|{_B}line\s*(?:charts?|graphs?){_E}"),
    ("pie", rf"饼图|饼状图|{_B}pie\s*(?:charts?){_E}"),
    ("kpi_card", rf"指标卡|KPI\s*卡片?|{_B}kpi\s*cards?{_E}"),
    ("table", rf"(?<!图)表格|{_B}tables?{_E}"),
]

# Filler: what a question may contain besides the recognised phrases. Chinese fragments are cut
# out of leftover runs (longest first); two or more characters that survive are an unknown term.
_FILLER_ZH = sorted(
    set(
        """
请问 请 帮我 帮忙 帮 麻烦 查询 查一下 查看 查 看一下 看看 看 给我 给出 给 列出 列一下 列 显示 展示 统计 计算 算一下 算
一下 我想知道 想知道 想看 想要 想 我们 我 你 您 告诉 知道 了解 一共
的 地 得 是 为 是多少 多少 有多少 几 是否 有没有 有 了 吗 呢 吧 啊 呀 么 嘛 哦
和 与 及 以及 以外 之外 以上 以下 外 跟 同 还有 或 或者 对 对于 关于 在 于 中 里 内 之内 期间 时 时候 时期 以来 截至 截止 到 至 从 起
目前 现在 当前 整体 总体 全部 所有 全 总 总共 合计 共计 共 总计 累计 总和 汇总 分别 各自 分 按 各 每 个 名 位 家 款 种 大
情况 表现 数据 数字 数值 指标 结果 报表 报告 明细 列表 清单 金额 数量 总额 值 单位 水平 规模 部分
哪个 哪些 哪家 哪一个 哪几个 哪 什么 怎样 怎么样 如何 怎么 多 少 高 低 最 谁 第一 靠前 靠后
排名 排行 排序 前 后 倒数 从 由 到
增长 增长率 增速 增幅 下降 下滑 上升 提升 减少 增加 变动 变化 波动 趋势 走势 对比 比较 相比 比 较 同比 环比 vs 相对 差异 差距 涨 跌
异常 异常值 异动 预测 归因 聚类 相关 相关性 为什么 原因 驱动 驱动因素 因素 分析 检测 找出 找到 识别 解释 未来 可能 影响 关系 之间
模式 规律 分群 细分 回归 离群 离群点 突增 突降 骤降 骤增 怎么回事 下跌 上涨 预计 估计 建模
怎么算 如何计算 计算方法 计算公式 公式 定义 口径 意思 含义 指 指的是 什么意思 是什么意思 说明 解释一下 包括 包含 算法 逻辑 规则 构成 组成
维度
最近 近 过去 本 上 下 这 当 该 此 其 年 月 日 周 天 季度 号 份 整年 全年 时间 日期 期 阶段
占比 份额 比重 分布 构成 前面 一些 一点 情况下 怎样的 如何的 表格 图表 图 画 画出 绘制 折线图 柱状图 饼图
        """.split()
    ),
    key=len,
    reverse=True,
)
_FILLER_EN = frozenset(
    """
a an the of in on at for to from by per with without and or vs versus than as is are was were be been being do does did done
what whats what's which who whom whose how much many show me give tell list get find display report please can could would will
you i we our us my it its this that these those there their them each every all any total overall sum amount number value values
over across during between within since until till up down so far compared compare comparison against change changes growth grow
grew rate trend trends breakdown split mix share shares level data figure figures numbers metric metrics kpi kpis result results
top bottom highest lowest largest smallest biggest best worst most least greatest fewest rank ranking rankings ranked sorted sort order
ascending descending last past previous prior next this current same period year years month months week weeks day days quarter
quarters date dates today yesterday ytd mtd qtd wtd why anomaly anomalies anomalous forecast forecasts forecasting predict prediction
predicted projection project attribution attribute attributed cluster clusters clustering segment segments correlation correlations
correlate correlated driver drivers drive driven explain explanation analyze analyse analysis detect find spot identify outlier
outliers root cause causes cause reason reasons drop dropped drops decline declined declining fall fell falling rise rose rising
increase increased increasing decrease decreased decreasing spike spikes spiked fluctuation fluctuations unusual abnormal happen
happened happening going definition define defined mean means meaning calculated calculate calculation calculations computed compute
formula formulas how's where when s want know see look like need into out off only just also then more less versus respectively
respective along broken
grouped group yuan rmb cny fen cents wan thousand ten k so far ever recent recently latest full whole entire calendar has have had
been get got give shown chart table plot graph line bar pie versus vs. q1 q2 q3 q4 did does it's there's per-cent percent percentage
rate-of difference differ different between among amongst versus under above below high low same than their total-of sales-wise
business company our overall explain meaning mean measure measured counted count counts should would could may might must shall
        """.split()
)


# Roles by preposition: when one table plays two roles (origin and destination airport), the words
# around a value say which. A dimension without role words of its own takes the common pair its
# name or nouns call for (``role_words``).
_ORIGIN_KEYS = frozenset({"origin", "origins", "source", "sources", "departure", "departures", "depart", "orig", "src"})
_DEST_KEYS = frozenset({"destination", "destinations", "dest", "target", "targets", "arrival", "arrivals", "arrive"})
_ORIGIN_KEYS_ZH = ("出发", "始发", "起飞", "起点", "来源", "发货地", "出发地")
_DEST_KEYS_ZH = ("目的地", "目的", "到达", "抵达", "终点", "降落")
_ORIGIN_WORDS = (("从", "出发", "始发", "起飞"), ("from", "out of", "departing from", "departing", "leaving", "leaving from"))
_DEST_WORDS = (
    ("到", "飞往", "去", "前往", "到达", "抵达", "飞抵", "开往", "去往"),
    ("to", "into", "bound for", "arriving at", "arriving in", "flying to", "going to"),
)
# What may stand between a role word and its value: "from the JFK", "从 EWR", "EWR的".
_ROLE_GAP = re.compile(r"[\s的]*(?:the\s+)?", re.IGNORECASE)
_VALUE_STOP = re.compile(r"[,，。?？!！;；:：、()（）\[\]\"“”]")
# Two values joined ("from JFK and LGA", "从EWR和JFK出发"): the second takes the first's role.
_COORDINATED = re.compile(r"\s*(?:,|、|和|与|及|或|(?<![A-Za-z])(?:and|or)(?![A-Za-z]))\s*(?:the\s+)?", re.IGNORECASE)
# Where a value the index does not hold may be, next to a role word or noun: one run of ASCII words
# ("JFK", "New York") or of Chinese characters (纽约; 的 ends it).
_VALUE_CHUNK = re.compile(r"[A-Za-z0-9]+(?:[\s'&.\-]+[A-Za-z0-9]+)*|(?:(?!的)[\u4e00-\u9fff])+")
_VALUE_WORD = re.compile(r"[A-Za-z0-9]+(?:['&.\-][A-Za-z0-9]+)*")
# A name as written: capitalised words (or upper case and digits), a few in a row ("Public Policy Polling").
_NAME_RUN = re.compile(r"(?<![A-Za-z0-9])(?:[A-Z][A-Za-z0-9&'.\-]*)(?:\s+[A-Z][A-Za-z0-9&'.\-]*){0,3}(?![A-Za-z0-9])")
_MAX_PROBES = 24  # warehouse look-ups one question may make for values not in the index


def role_words(dimension: DimensionSpec) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The words (Chinese, English) next to a value that make it this dimension's: the model's own
    (``role_words_zh``/``role_words_en``), else the common pair by the dimension's name and nouns:
    origin/source/departure take from/out of/从/出发/始发, destination/target/arrival take
    to/into/到/飞往/去. Other dimensions have none."""
    if dimension.role_words_zh or dimension.role_words_en:
        return dimension.role_words_zh, dimension.role_words_en
    name = set(re.split(r"[_\-]+", dimension.name.lower()))  # from_airport, to_city
    words = {w for phrase in (dimension.en, *dimension.nouns_en) for w in re.split(r"[\s_\-]+", phrase.lower()) if w} | name
    chinese = [phrase for phrase in (dimension.zh, *dimension.nouns_zh) if not phrase.isascii()]
    origin = bool(words & _ORIGIN_KEYS or "from" in name) or any(k in p for p in chinese for k in _ORIGIN_KEYS_ZH)
    dest = bool(words & _DEST_KEYS or "to" in name) or any(k in p for p in chinese for k in _DEST_KEYS_ZH)
    if origin == dest:
        return (), ()
    return _ORIGIN_WORDS if origin else _DEST_WORDS


_DATE_SUFFIX = re.compile(r"^(?P<head>[a-z]{2,}?)(?P<tail>date|time|day|at|on)$")


def date_words(column: str) -> tuple[str, ...]:
    """The words a question may name a date column by: ``enddate``, ``end date``, ``end_date``; a
    column with a short table prefix (TPC-H's ``l_receiptdate``) by its name without it too."""
    bare = column.rpartition(".")[2].lower()
    words: set[str] = set()
    for name in dict.fromkeys((bare, re.sub(r"^[a-z]{1,2}_(?=[a-z]{4})", "", bare))):
        words |= {name, name.replace("_", " ")}
        split = _DATE_SUFFIX.match(name)
        if split is not None and "_" not in name:
            words.add(f"{split.group('head')} {split.group('tail')}")
    return tuple(sorted(w for w in words if len(w) >= 3))


def normalize(text: str) -> str:
    """NFKC (full-width digits and punctuation to ASCII) and single spaces."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"\s+", " ", text).strip()


def language_of(text: str) -> Lang:
    return "zh" if re.search(r"[\u4e00-\u9fff]", text) else "en"


def term_pattern(term: str) -> re.Pattern[str]:
    """A pattern for one term: English words get boundaries, a plural and flexible separators."""
    term = normalize(term)
    if re.search(r"[A-Za-z]", term):
        body = r"[\s\-_]*".join(re.escape(part) for part in re.split(r"[\s\-_]+", term) if part)
        plural = "(?:s|es)?" if term[-1].isalpha() else ""
        return re.compile(rf"(?<![A-Za-z0-9]){body}{plural}(?![A-Za-z0-9])", re.IGNORECASE)
    return re.compile(re.escape(term), re.IGNORECASE)


# Statistics a question may ask for that no metric of the model computes unless it says so.
_STATISTIC_EN = frozenset({"average", "avg", "mean", "median", "maximum", "minimum", "max", "min", "percentile", "variance", "stddev"})
_STATISTIC_ZH = frozenset({"平均", "平均值", "均值", "中位数", "最大值", "最小值", "方差"})
# "by <word>", "per <word> <word>": the words a grouping names (the recognised ones are masked out by then).
_AFTER_GROUP_WORD = re.compile(r"(?<![A-Za-z])(?:by|per|each|every)\s+(?:[A-Za-z'\-]+\s+){0,2}$", re.IGNORECASE)


def _probe(term: str) -> str:
    """A literal every match of ``term_pattern(term)`` contains (lower case): its longest part."""
    term = normalize(term).lower()
    if re.search(r"[a-z]", term):
        return max((part for part in re.split(r"[\s\-_]+", term) if part), key=len, default=term)
    return term


def _find(pattern: re.Pattern[str], text: str) -> Iterable[re.Match[str]]:
    return (m for m in pattern.finditer(text) if m.end() > m.start())


class QuestionParser:
    """Parses questions against one catalog and one entity index (patterns compiled once)."""

    def __init__(self, catalog: Catalog, entities: EntityIndex) -> None:
        self.catalog = catalog
        self.entities = entities
        self._metric_terms = [(term_pattern(t), m.name) for m in catalog.metrics for t in {*m.synonyms_zh, *m.synonyms_en, m.zh, m.en}]
        self._ambiguous = [(term_pattern(a.term), a.term, a.candidates) for a in catalog.ambiguous_terms]
        self._unsupported = [(term_pattern(t), t) for t in catalog.unsupported_terms]
        # Entity names can be many (every customer's): each is tried only when its longest literal part
        # is in the question, and its pattern is compiled on first use.
        self._entity_terms = [(_probe(name), name) for name in {n for e in entities.values for n in e.names}]
        self._entity_patterns: dict[str, re.Pattern[str]] = {}
        self._outside = [(term_pattern(o.name), o) for o in entities.outside]
        nouns: list[tuple[str, str]] = []
        for dim in catalog.attribute_dimensions:
            nouns.extend((noun, dim.name) for noun in {*dim.nouns_zh, *dim.nouns_en})
        self._nouns = [(term_pattern(noun), noun, dim) for noun, dim in nouns]
        # Role words ("from", "飞往") and the dimensions each says a value is of; dimensions over one column.
        self._siblings = role_siblings(catalog)
        role_terms: dict[str, set[str]] = {}
        for dim in catalog.attribute_dimensions:
            zh_words, en_words = role_words(dim)
            for word in (*zh_words, *en_words):
                if normalize(word):
                    role_terms.setdefault(normalize(word).lower(), set()).add(dim.name)
        self._role_terms = [(term_pattern(word), frozenset(dims)) for word, dims in role_terms.items()]
        self._role_bearing = frozenset(dim for dims in role_terms.values() for dim in dims)
        self._role_words_of = {d: frozenset(w for w, dims in role_terms.items() if d in dims) for d in self._role_bearing}
        noun_alt_zh = "|".join(re.escape(n) for n, _ in sorted(nouns, key=lambda p: -len(p[0])) if not n.isascii())
        noun_alt_en = "|".join(
            r"[\s\-]+".join(re.escape(w) for w in n.split()) for n, _ in sorted(nouns, key=lambda p: -len(p[0])) if n.isascii()
        )
        # A model without nouns in one language (an unedited draft has no Chinese ones) must match
        # nothing there, never the empty noun.
        noun_alt_zh, noun_alt_en = noun_alt_zh or r"(?!x)x", noun_alt_en or r"(?!x)x"
        self._noun_dim = {noun.lower(): dim for noun, dim in nouns}
        self._group_patterns = [
            re.compile(rf"{_GROUP_PREFIX_ZH}(?P<noun>{noun_alt_zh})"),
            re.compile(rf"(?P<noun>{noun_alt_zh}){_GROUP_SUFFIX_ZH}"),
            re.compile(rf"{_B}{_GROUP_PREFIX_EN}(?:the\s+)?(?P<noun>{noun_alt_en}){_E}", re.IGNORECASE),
            re.compile(rf"{_B}(?P<noun>{noun_alt_en}){_GROUP_SUFFIX_EN}{_E}", re.IGNORECASE),
        ]
        self._grain_terms = [
            (term_pattern(t), dim.name) for dim in catalog.time_dimensions for t in {*dim.group_terms_zh, *dim.group_terms_en}
        ]
        # Group-only words of attribute dimensions ("按原因", "by reason"): the bare noun stays filler.
        self._attribute_group_terms = [
            (term_pattern(t), dim.name) for dim in catalog.attribute_dimensions for t in {*dim.group_terms_zh, *dim.group_terms_en}
        ]
        self._comparisons = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in _COMPARISONS]
        self._units = [re.compile(p, re.IGNORECASE) for p in _UNITS]
        self._top_n = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in _TOP_N]
        self._order_words = [(order, re.compile(p, re.IGNORECASE), sup) for order, p, sup in _ORDER_WORDS]
        self._trend = re.compile(_TREND, re.IGNORECASE)
        self._share = re.compile(_SHARE, re.IGNORECASE)
        self._negation = re.compile(_NEGATION, re.IGNORECASE)
        self._plural_zh = re.compile(_PLURAL_ZH)
        self._follow_up = [(kind, re.compile(p, re.IGNORECASE)) for kind, p in FOLLOW_UP_PATTERNS]
        self._drops = [re.compile(p, re.IGNORECASE) for p in drop_patterns(noun_alt_zh, noun_alt_en)]
        self._lasting = re.compile(_LASTING, re.IGNORECASE)
        self._this_time = re.compile(_THIS_TIME, re.IGNORECASE)
        self._charts = [(chart, re.compile(p, re.IGNORECASE)) for chart, p in _CHARTS]
        # The dates a period may read where a source has several ("by enddate", "end date"): each choice's words.
        self._date_terms = [
            (term_pattern(word), column)
            for source in catalog.sources
            if source.other_time_columns
            for column in (source.time_column, *source.other_time_columns)
            if column
            for word in date_words(column)
        ]
        # The model's own nouns left over once its phrases are read ("华东大区": the value, then 大区) name nothing more.
        model_words = [*catalog.filler_words, *(n for d in catalog.dimensions for n in (*d.nouns_zh, *d.nouns_en))]
        extra_zh = [w for w in model_words if not w.isascii()]
        self._filler_zh = re.compile("|".join(re.escape(f) for f in sorted({*_FILLER_ZH, *extra_zh}, key=len, reverse=True)))
        self._filler_en = _FILLER_EN | {part.lower() for w in model_words if w.isascii() for part in w.split()}
        self._noun_needs_marker = frozenset(d.name for d in catalog.attribute_dimensions if not d.bare_noun_groups)
        def words_of(phrases: Iterable[str]) -> frozenset[str]:
            return frozenset(
                w
                for phrase in phrases
                if phrase.isascii() and " " in phrase.strip()
                for w in re.findall(r"[a-z][a-z'\-]+", phrase.lower())
                if w not in self._filler_en and len(w) >= 4
            )

        # The words of the model's multi-word phrases, per metric and for the rest (nouns, aliases).
        self._metric_words = {m.name: words_of((*m.synonyms_en, m.en)) for m in catalog.metrics}
        self._phrase_words = words_of(
            [*(n for d in catalog.dimensions for n in d.nouns_en), *(a for e in catalog.entity_aliases for a in e.aliases)]
        )
        self._grain_noun = {n.lower(): d.name for d in catalog.time_dimensions for n in (*d.nouns_zh, *d.nouns_en, d.zh, d.en)}
        grain_alt = "|".join(re.escape(n) for n in sorted(self._grain_noun, key=len, reverse=True)) or r"(?!x)x"
        self._grain_after_group = re.compile(
            rf"\s*(?:and|&|,|和|与|及|、)\s*(?:the\s+|by\s+|按)?(?P<noun>{grain_alt})(?![A-Za-z])", re.IGNORECASE
        )

    def states_lasting(self, question: str) -> bool:
        """Whether the question has a word of a standing preference ("以后", "from now on")."""
        return self._lasting.search(normalize(question)) is not None

    # ---- recognition --------------------------------------------------------------------

    def recognise(self, question: str, *, today: date, corrections: Sequence[TermMapping] = ()) -> ParsedQuestion:
        text = normalize(question)
        parsed = ParsedQuestion(text=text, lang=language_of(text))
        spans = self._with_probed_values(text, self._select(self._candidates(text, today, corrections)))
        parsed.spans = spans
        self._interpret(parsed, spans)
        self._leftovers(parsed, spans)
        return parsed

    def _candidates(self, text: str, today: date, corrections: Sequence[TermMapping]) -> list[Span]:
        spans: list[Span] = []

        def add(match: re.Match[str], kind: str, payload: Any, priority: int) -> None:
            spans.append(Span(match.start(), match.end(), kind, match.group(0), payload, priority))

        for mapping in corrections:
            for m in _find(term_pattern(mapping.term), text):
                add(m, "correction", mapping, 0)
        for kind, pattern in self._comparisons:
            for m in _find(pattern, text):
                add(m, "compare", kind, 1)
        for pattern in self._units:
            for m in _find(pattern, text):
                add(m, "unit", _UNIT_WORDS[re.sub(r"\s+", " ", m.group("u").lower())], 1)
        for found in time_candidates(text, today):
            spans.append(Span(found.start, found.end, "time", found.text, found, 2))
        for kind, pattern in self._top_n:
            for m in _find(pattern, text):
                n = parse_number(m.group("n"))
                if n is None or not 1 <= n <= 10_000:
                    continue
                order = kind if kind in ("asc", "desc") else (None if kind == "which" else _word_order(m.group("o")))
                add(m, "top_n", (order, n), 2)
        for pattern in self._group_patterns:
            for m in _find(pattern, text):
                add(m, "group", self._noun_dim[re.sub(r"[\s\-]+", " ", m.group("noun").lower())], 3)
        for pattern, dim in self._attribute_group_terms:
            for m in _find(pattern, text):
                add(m, "group", dim, 3)
        for pattern, dim in self._grain_terms:
            for m in _find(pattern, text):
                add(m, "grain", dim, 3)
        for pattern, metric in self._metric_terms:
            for m in _find(pattern, text):
                add(m, "metric", metric, 4)
        lowered = text.lower()
        for probe, name in self._entity_terms:
            if probe not in lowered:
                continue
            compiled = self._entity_patterns.get(name)
            pattern = compiled if compiled is not None else self._entity_patterns.setdefault(name, term_pattern(name))
            for m in _find(pattern, text):
                add(m, "entity", self.entities.lookup(name), 4)
        for pattern, term, candidates in self._ambiguous:
            for m in _find(pattern, text):
                add(m, "ambiguous", (term, candidates), 5)
        for pattern, term in self._unsupported:
            for m in _find(pattern, text):
                add(m, "unsupported", term, 5)
        for pattern, outside in self._outside:
            for m in _find(pattern, text):
                add(m, "outside", outside, 5)
        for pattern, _noun, dim in self._nouns:
            for m in _find(pattern, text):
                add(m, "noun", dim, 6)
        for pattern, dims in self._role_terms:
            for m in _find(pattern, text):
                add(m, "role", dims, 8)
        for order, pattern, superlative in self._order_words:
            for m in _find(pattern, text):
                add(m, "order", (order, superlative), 6)
        for m in _find(self._trend, text):
            add(m, "trend", True, 6)
        for m in _find(self._share, text):
            add(m, "share", True, 7)
        for m in _find(self._negation, text):
            add(m, "negation", True, 6)
        for m in _find(self._plural_zh, text):
            add(m, "plural", True, 7)
        for kind, pattern in self._follow_up:
            for m in _find(pattern, text):
                add(m, "follow_up", kind, 7)
        for pattern in self._drops:
            for m in _find(pattern, text):
                add(m, "drop", self._noun_dim[re.sub(r"[\s\-]+", " ", m.group("noun").lower())], 1)
        for m in _find(self._lasting, text):
            add(m, "lasting", m.group(0), 6)
        for m in _find(self._this_time, text):
            add(m, "this_time", True, 6)
        for chart, pattern in self._charts:
            for m in _find(pattern, text):
                add(m, "chart", chart, 5)
        for pattern, column in self._date_terms:
            for m in _find(pattern, text):
                add(m, "date_column", column, 3)
        return spans

    @staticmethod
    def _select(candidates: list[Span]) -> list[Span]:
        chosen: list[Span] = []
        taken = bytearray(max((s.end for s in candidates), default=0) + 1)
        for span in sorted(candidates, key=lambda s: (-(s.end - s.start), s.priority, s.start)):
            if any(taken[span.start : span.end]):
                continue
            taken[span.start : span.end] = b"\x01" * (span.end - span.start)
            chosen.append(span)
        return sorted(chosen, key=lambda s: s.start)

    def _interpret(self, parsed: ParsedQuestion, spans: list[Span]) -> None:
        negate_until = -1
        previous_entity_dim: tuple[int, str] | None = None  # (end, dimension) of the last entity
        resolved: dict[int, str] = {}  # span index -> the dimension its value was read as
        for index, span in enumerate(spans):
            kind = span.kind
            if kind == "correction":
                mapping: TermMapping = span.payload
                parsed.corrections_used.append(mapping)
                target = mapping.maps_to
                if target.metric is not None:
                    _add_unique(parsed.metrics, target.metric)
                elif target.value is not None and target.dimension is not None:
                    entity = self.entities.resolve(target.dimension, target.value)
                    value = entity.value if entity else target.value
                    bucket = parsed.exclusions if span.start < negate_until else parsed.filters
                    _add_unique(bucket.setdefault(target.dimension, []), value)
                    previous_entity_dim = (span.end, target.dimension)
                elif target.dimension is not None:
                    if self.catalog.has_dimension(target.dimension) and self.catalog.dimension(target.dimension).kind == "time":
                        parsed.grain = target.dimension
                    else:
                        _add_unique(parsed.group_dims, target.dimension)
            elif kind == "metric":
                _add_unique(parsed.metrics, span.payload)
            elif kind == "ambiguous":
                parsed.ambiguous.append(span.payload)
            elif kind == "unsupported":
                parsed.unsupported.append(span.payload)
            elif kind == "outside":
                parsed.outside.append((span.text, span.payload.dimension))
            elif kind == "entity":
                values: list[EntityValue] = span.payload
                if len({v.dimension for v in values}) == 1:
                    role = self._in_another_role(parsed.text, spans, index, values[0].dimension)
                    if role is not None:
                        parsed.outside.append((span.text, role))
                        continue
                else:
                    values = self._by_neighbour(parsed.text, spans, index, values)
                if len({v.dimension for v in values}) > 1:
                    values = self._by_role(parsed.text, spans, index, values, resolved)
                if len({v.dimension for v in values}) > 1:
                    parsed.entity_conflicts.append((span.text, values))
                    continue
                if values != span.payload:  # what it was read as: masking and follow-ups see one dimension
                    spans[index] = replace(span, payload=values)
                entity = values[0]
                resolved[index] = entity.dimension
                bucket = parsed.exclusions if span.start < negate_until else parsed.filters
                _add_unique(bucket.setdefault(entity.dimension, []), entity.value)
                previous_entity_dim = (span.end, entity.dimension)
            elif kind == "negation":
                negate_until = self._extend_negation(parsed.text, spans, index)
            elif kind == "group":
                _add_unique(parsed.group_dims, span.payload)
                grain = self._coordinated_grain(parsed.text, span.end)
                if grain is not None:
                    parsed.grain = parsed.grain or grain
            elif kind == "grain":
                parsed.grain = parsed.grain or span.payload
            elif kind == "noun":
                if span.payload in self._noun_needs_marker and not self._after_top_n(parsed.text, spans, index):
                    continue  # "customers in GERMANY" names the customers' nation, not a grouping by customer
                follows_own_value = (
                    previous_entity_dim is not None
                    and previous_entity_dim[1] == span.payload
                    and not parsed.text[previous_entity_dim[0] : span.start].strip(" 的")
                )
                if not follows_own_value:
                    _add_unique(parsed.group_dims, span.payload)
                    if parsed.lang == "en" and re.search(r"(?:s|es)$", span.text, re.IGNORECASE):
                        parsed.plural = True
            elif kind == "time":
                parsed.times.append(span.payload)
            elif kind == "compare":
                parsed.comparison = parsed.comparison or span.payload
            elif kind == "unit":
                parsed.unit = span.payload
            elif kind == "top_n":
                order, n = span.payload
                parsed.order, parsed.top_n = order or parsed.order, n
            elif kind == "order":
                order, superlative = span.payload
                if order == "top":
                    parsed.order = parsed.order or "desc"
                    parsed.top_n = parsed.top_n or _DEFAULT_TOP
                else:
                    parsed.order = parsed.order or order
                    parsed.superlative = parsed.superlative or superlative
            elif kind == "trend":
                parsed.trend = True
            elif kind == "share":
                parsed.share = True
            elif kind == "plural":
                parsed.plural = True
            elif kind == "follow_up":
                _add_unique(parsed.follow_up_markers, span.payload)
            elif kind == "drop":
                _add_unique(parsed.dropped_dims, span.payload)
            elif kind == "lasting":
                _add_unique(parsed.lasting, span.payload)
            elif kind == "this_time":
                parsed.this_time = True
            elif kind == "chart":
                parsed.chart = parsed.chart or span.payload
            elif kind == "date_column":
                _add_unique(parsed.date_columns, span.payload)
        mark_incompatible(parsed, self.catalog)

    def _by_neighbour(self, text: str, spans: list[Span], index: int, values: list[EntityValue]) -> list[EntityValue]:
        """A value two dimensions hold (GERMANY: the customer's nation, the supplier's), read by the
        dimension named right next to it ("德国供应商", "customers in GERMANY"): the one reached
        through that dimension's table. Unchanged when no neighbour tells them apart."""
        neighbours = []
        for other in (index - 1, index + 1):  # "customers in FRANCE by supplier nation": the nearer description first
            if 0 <= other < len(spans) and spans[other].kind in ("noun", "group"):
                start, end = sorted((spans[index].end, spans[other].start) if other > index else (spans[other].end, spans[index].start))
                if re.fullmatch(r"[\s的]*(?:in|from|of|at)?[\s的]*", text[start:end], re.IGNORECASE):
                    neighbours.append(spans[other].payload)
        for name in neighbours:
            if not self.catalog.has_dimension(name) or self.catalog.dimension(name).table is None:
                continue
            table = self.catalog.dimension(name).table
            assert table is not None
            chosen = [v for v in values if self.catalog.has_dimension(v.dimension) and self.catalog.reached_through(v.dimension, table)]
            if chosen and len({v.dimension for v in chosen}) == 1:
                return chosen
        return values

    @staticmethod
    def _role_named(text: str, spans: list[Span], index: int) -> set[str]:
        """The dimensions the role words next to span ``index`` name: one right before it ("from
        JFK", "飞往LAX"), or one right after it ("EWR出发") unless that one is right before the next
        value ("EWR到LAX": 到 is LAX's)."""
        named: set[str] = set()
        before, after = index - 1, index + 1
        if before >= 0 and spans[before].kind == "role" and _ROLE_GAP.fullmatch(text[spans[before].end : spans[index].start]):
            named |= spans[before].payload
        if after < len(spans) and spans[after].kind == "role" and _ROLE_GAP.fullmatch(text[spans[index].end : spans[after].start]):
            following = after + 1
            forward = (
                following < len(spans)
                and spans[following].kind == "entity"
                and _ROLE_GAP.fullmatch(text[spans[after].end : spans[following].start]) is not None
            )
            if not forward:
                named |= spans[after].payload
        return named

    def _by_role(
        self, text: str, spans: list[Span], index: int, values: list[EntityValue], resolved: dict[int, str]
    ) -> list[EntityValue]:
        """A value of a table in two roles read by the role word next to it: "from JFK", "从EWR出发"
        (origin), "to LAX", "飞往LAX" (destination). A value joined to the one before ("from JFK
        and LGA") takes its role. Unchanged otherwise: a value named with no role word is asked about."""
        named = self._role_named(text, spans, index)
        chosen = [v for v in values if v.dimension in named]
        if chosen and len({v.dimension for v in chosen}) == 1:
            return chosen
        before = index - 1
        if not named and before in resolved and _COORDINATED.fullmatch(text[spans[before].end : spans[index].start]):
            chosen = [v for v in values if v.dimension == resolved[before]]
            if chosen:
                return chosen
        return values

    def _in_another_role(self, text: str, spans: list[Span], index: int, dimension: str) -> str | None:
        """The role a role word gives a value that only another role holds ("from JFK", JFK only a
        destination): that role's dimension, asked about, never read as the other role."""
        if dimension not in self._role_bearing:
            return None
        named = self._role_named(text, spans, index)
        if not named or dimension in named:
            return None
        return next(d.name for d in self.catalog.attribute_dimensions if d.name in named)

    def _with_probed_values(self, text: str, spans: list[Span]) -> list[Span]:
        """Values the index cannot hold (a dimension with more values than its cap, or one not
        indexed), looked up in the warehouse where the question names the dimension: the words
        right after or before one of its role words or nouns ("from JFK", "从EWR出发", "JFK
        airport"), as written, in upper case and in title case. A word the warehouse holds is a
        value (an entity span); one it does not hold stays a word, asked about. The look-up is a
        bound, cached ``SELECT 1 ... LIMIT 1`` (``EntityIndex.holds``), at most ``_MAX_PROBES`` a question."""
        if self.entities.probe is None:
            return spans
        taken = bytearray(len(text) + 1)
        for span in spans:
            taken[span.start : span.end] = b"\x01" * (span.end - span.start)
        found: list[Span] = []
        budget = [_MAX_PROBES]
        spans = list(spans)
        for index, span in enumerate(spans):
            counterparts = self._counterparts(span)
            if counterparts:  # "flights at JFK", JFK indexed as an origin: is it a destination past the cap too?
                spans[index] = self._with_roles_held(span, counterparts, budget)
        for index, span in enumerate(spans):
            if span.kind == "role":
                named: Iterable[str] = span.payload
            elif span.kind == "noun":
                named = (span.payload,)
            else:
                continue
            groups = list(dict.fromkeys(self._siblings.get(name, (name,)) for name in named))
            groups = [g for g in groups if all(self.entities.needs_probe(d) for d in g)]
            if not groups:
                continue
            if span.kind == "role":  # "from JFK", JFK indexed as a destination only: is it an origin past the cap?
                for other in (index - 1, index + 1):
                    if 0 <= other < len(spans) and spans[other].kind == "entity":
                        gap = text[spans[other].end : span.start] if other < index else text[span.end : spans[other].start]
                        if _ROLE_GAP.fullmatch(gap):
                            spans[other] = self._with_roles_held(spans[other], groups, budget)
            after: int | None = span.end
            before: int | None = span.start
            while after is not None or before is not None:
                candidates = self._value_candidates(text, taken, after, before)
                after = before = None
                for start, end in candidates:
                    probed = self._probed_span(text, start, end, groups, budget, taken)
                    if probed is not None:
                        found.append(probed)
                        joined = _COORDINATED.match(text, end)  # "from JFK and LGA": LGA is looked up too
                        if joined is not None and joined.end() > end:
                            after = joined.end()
                        break
        found += self._bare_values(text, taken, budget)
        return sorted([*spans, *found], key=lambda s: s.start) if found else spans

    def _bare_values(self, text: str, taken: bytearray, budget: list[int]) -> list[Span]:
        """Names written as names ("did Ipsos conduct", "Ipsos做了"), with no noun or role word to
        say whose, looked up in every dimension past its cap (or not indexed): a name one dimension
        holds is its value; one that several hold is asked about (an entity conflict); one none
        holds stays a word. English words count from the second word on, so the capital of a
        sentence's first word is not read as a name."""
        groups = list(
            dict.fromkeys(
                self._siblings.get(d.name, (d.name,))
                for d in self.catalog.attribute_dimensions
                if self.entities.needs_probe(d.name)
            )
        )
        groups = [g for g in groups if all(self.entities.needs_probe(d) for d in g)]
        if not groups:
            return []
        english = language_of(text) == "en"
        first_word = re.match(r"\s*[A-Za-z0-9]+", text)
        out: list[Span] = []
        for match in _NAME_RUN.finditer(text):
            start, end = match.span()
            if any(taken[start:end]) or (english and first_word is not None and start < first_word.end()):
                continue
            if match.group(0).lower() in self._filler_en or budget[0] <= 0:
                continue
            probed = self._probed_span(text, start, end, groups, budget, taken)
            if probed is not None:
                out.append(probed)
        return out

    def _probed_span(
        self, text: str, start: int, end: int, groups: list[tuple[str, ...]], budget: list[int], taken: bytearray
    ) -> Span | None:
        """``text[start:end]`` as an entity span of every dimension group the warehouse holds it in
        (marking it taken), or None when none does."""
        words = text[start:end]
        values = [
            EntityValue(dimension, value, None, (words,))
            for group in groups
            if (value := self._probe_value(words, group[0], budget)) is not None
            for dimension in group
        ]
        if not values:
            return None
        taken[start:end] = b"\x01" * (end - start)
        return Span(start, end, "entity", words, values, 4)

    def _counterparts(self, span: Span) -> list[tuple[str, ...]]:
        """For an indexed value of a dimension with role words, the dimensions of the other roles
        (other role words) whose values are not all indexed: the value may be theirs too."""
        if span.kind != "entity":
            return []
        dims = {v.dimension for v in span.payload}
        if not dims <= self._role_bearing:
            return []
        words = {self._role_words_of[d] for d in dims}
        others = [d for d in self._role_bearing if d not in dims and self._role_words_of[d] not in words]
        groups = dict.fromkeys(self._siblings.get(d, (d,)) for d in sorted(others))
        return [g for g in groups if not dims & set(g) and all(self.entities.needs_probe(d) for d in g)]

    def _with_roles_held(self, span: Span, groups: list[tuple[str, ...]], budget: list[int]) -> Span:
        """An indexed value next to a role word of a dimension past its cap: that dimension's too when the warehouse holds it."""
        values: list[EntityValue] = list(span.payload)
        for group in groups:
            if any(v.dimension in group for v in values):
                continue
            for value in dict.fromkeys(v.value for v in span.payload):
                if budget[0] <= 0:
                    break
                budget[0] -= 1
                if self.entities.holds(group[0], value):
                    first = next(v for v in span.payload if v.value == value)
                    values.extend(EntityValue(d, value, first.label_en, first.names) for d in group)
                    break
        return span if len(values) == len(span.payload) else replace(span, payload=values)

    def _probe_value(self, words: str, dimension: str, budget: list[int]) -> str | None:
        for variant in dict.fromkeys((words, words.upper(), words.title())):
            if budget[0] <= 0:
                return None
            budget[0] -= 1
            if self.entities.holds(dimension, variant):
                return variant
        return None

    def _value_candidates(self, text: str, taken: bytearray, after: int | None, before: int | None) -> list[tuple[int, int]]:
        """Where a value may be: the words not yet read right after position ``after``, then right
        before ``before``, longest first (at most four English words, or two to eight characters)."""
        out: list[tuple[int, int]] = []
        if after is not None:
            gap = _ROLE_GAP.match(text, after)
            start = end = gap.end() if gap else after
            while end < len(text) and not taken[end] and not _VALUE_STOP.match(text, end):
                end += 1
            out.extend(self._value_pieces(text, start, end, forward=True))
        if before is not None:
            end = before
            while end > 0 and text[end - 1] in " 的":
                end -= 1
            start = end
            while start > 0 and not taken[start - 1] and not _VALUE_STOP.match(text, start - 1):
                start -= 1
            out.extend(self._value_pieces(text, start, end, forward=False))
        return out

    def _value_pieces(self, text: str, start: int, end: int, *, forward: bool) -> list[tuple[int, int]]:
        chunks = [(m.start() + start, m.end() + start) for m in _VALUE_CHUNK.finditer(text[start:end])]
        if not chunks:
            return []
        chunk_start, chunk_end = chunks[0] if forward else chunks[-1]
        piece = text[chunk_start:chunk_end]
        if not piece.isascii():
            sizes = range(min(8, chunk_end - chunk_start), 1, -1)
            return [(chunk_start, chunk_start + n) if forward else (chunk_end - n, chunk_end) for n in sizes]
        words = [(m.start() + chunk_start, m.end() + chunk_start) for m in _VALUE_WORD.finditer(piece)]
        out: list[tuple[int, int]] = []
        for n in range(min(4, len(words)), 0, -1):
            chosen = words[:n] if forward else words[-n:]
            edge_start, edge_end = chosen[-1] if forward else chosen[0]
            edge = text[edge_start:edge_end]
            if edge.lower() in self._filler_en and not edge.isupper():
                continue  # "JFK in", "the": a value does not end (or start) with a filler word
            out.append((chosen[0][0], chosen[-1][1]))
        return out

    @staticmethod
    def _after_top_n(text: str, spans: list[Span], index: int) -> bool:
        """Whether span ``index`` directly follows a top-N ("top 5 customers", "最高的5个客户")."""
        if index == 0 or spans[index - 1].kind != "top_n":
            return False
        return re.fullmatch(r"[\s个位名家的]*", text[spans[index - 1].end : spans[index].start]) is not None

    def _coordinated_grain(self, text: str, end: int) -> str | None:
        """The time grain joined to a grouping by and/和 ("by priority and quarter", "按优先级和季度")."""
        match = self._grain_after_group.match(text, end)
        return self._grain_noun[match.group("noun").lower()] if match else None

    @staticmethod
    def _extend_negation(text: str, spans: list[Span], index: int) -> int:
        """A negation covers the entities right after it, joined by 和/、/and/or/commas."""
        end = spans[index].end
        for span in spans[index + 1 :]:
            gap = text[end : span.start]
            if span.kind in ("entity", "correction") and re.fullmatch(r"[\s,、和与及或]*(?:and|or)?[\s,]*", gap, re.IGNORECASE):
                end = span.end
                continue
            break
        return end + 1

    def _leftovers(self, parsed: ParsedQuestion, spans: list[Span]) -> None:
        chars = list(parsed.text)
        for span in spans:
            for i in range(span.start, span.end):
                chars[i] = "|"
        residual = "".join(chars)
        for run in re.findall(r"[\u4e00-\u9fff]+", residual):
            for piece in self._filler_zh.sub("|", run).split("|"):
                if len(piece) >= 2:
                    _add_unique(parsed.unknown_terms, piece)
        tokens = list(re.finditer(r"[A-Za-z][A-Za-z'\-]*", residual))
        for match in tokens:
            word = match.group(0).strip("'-")
            lower = word.lower()
            if lower in self._filler_en or lower.rstrip("s") in self._filler_en or len(word) < 2:
                continue
            before = parsed.text[: match.start()].rstrip()
            sentence_start = not before or before[-1] in ".?!。？！:：\"'“"
            if (word.isupper() and len(word) >= 2) or (word[0].isupper() and not sentence_start):
                _add_unique(parsed.unknown_terms, word)
            elif self._changes_the_answer(lower, residual[: match.start()], parsed):
                _add_unique(parsed.unknown_terms, word)  # asked about, never dropped: it would change the number
            else:
                _add_unique(parsed.ignored_words, lower)

    def _changes_the_answer(self, word: str, before: str, parsed: ParsedQuestion) -> bool:
        """An English word memtool does not know that would change the answer if dropped: a statistic
        ("average"), a word right after by/per/each (what to group by), or a word of one of the model's
        own phrases that the question did not say whole ("returned" of "revenue lost to returned items"),
        unless it belongs to a metric the question names or may mean ("gross or net? revenue")."""
        if word in _STATISTIC_EN or word.rstrip("s") in _STATISTIC_EN:
            return True
        if _AFTER_GROUP_WORD.search(before):
            return True
        named = {*parsed.metrics, *(c for _, candidates in parsed.ambiguous for c in candidates)}
        words = set(self._phrase_words).union(*(w for m, w in self._metric_words.items() if m not in named))
        words -= set().union(*(self._metric_words.get(m, frozenset()) for m in named))
        return word in words or word.rstrip("s") in words

    # ---- intent ---------------------------------------------------------------------------

    def parse(
        self,
        question: str,
        *,
        today: date,
        route: ParseRoute | None = None,
        corrections: Sequence[TermMapping] = (),
        previous: Intent | None = None,
        choice: Choice | Sequence[Choice] | None = None,
    ) -> ParseResult:
        """The intent of ``question``; with ``previous`` (the session's last intent) a follow-up
        is read against it, and with ``choice`` (one, or every reply so far) the question is a
        pending one, now clarified."""
        parsed = self.recognise(question, today=today, corrections=corrections)
        result = ParseResult(parsed)
        for mapping in parsed.corrections_used:
            result.notes.append(f"correction {mapping.term!r} -> {_describe(mapping.maps_to)} ({mapping.source})")
        for made in [choice] if isinstance(choice, Choice) else list(choice or ()):
            self._apply_choice(parsed, made)
            result.notes.append(f"clarified: {made.term or made.reason} -> {_describe_target(made.target)}")
        if previous is not None and is_follow_up(parsed):
            result.carried_over = merge_previous(parsed, previous, self.catalog)
            if result.carried_over:
                result.notes.append("carried over from the previous question: " + "; ".join(result.carried_over))
        if route == "deep_analysis_workflow" and len(parsed.metrics) > 1:
            # "各城市净收入和订单数相关吗": an analysis reads several measures at once; the series
            # is the first one's, and the analysis takes the others from the question itself.
            named = list(parsed.metrics)
            parsed.metrics = named[:1]
            result.notes.append("deep analysis: several measures named (" + ", ".join(named) + "); the series is " + named[0] + "'s")
        need = self._clarification(parsed)
        if need is not None:
            result.clarification = need
            return result
        metric = parsed.metric
        assert metric is not None
        window, comparison, need = self._window(parsed, today, route, result.notes)
        if need is not None:
            result.clarification = need
            return result
        grain = parsed.grain or ("month" if parsed.trend else None)
        time_column, need = self._date_asked(parsed, metric, grain)
        if need is not None:
            result.clarification = need
            return result
        if grain is None and route == "deep_analysis_workflow":
            grain = "month"
            result.notes.append("deep analysis: added a month grain so the analysis gets a series")
            if window is not None and comparison is None and window.end <= add_months(month_start(window.start), 3):
                # Two years: the same month a year earlier is what a seasonal baseline compares with.
                window = TimeWindow(
                    start=add_months(month_start(window.start), -23),
                    end=window.end,
                    label=f"24 months to {window.label}",
                )
                result.notes.append(f"deep analysis: widened the window to [{window.start}, {window.end}) for context")
        dimensions = tuple(([grain] if grain else []) + [d for d in parsed.group_dims if d != grain])
        # "北京和上海每月的净收入对比", "compare Beijing and Shanghai": two or more values of one
        # dimension are each a series of their own, unless the question asks for them together.
        compared = [d for d, values in parsed.filters.items() if len(values) > 1 and d not in dimensions]
        if compared and not _TOGETHER.search(parsed.text):
            dimensions = (*dimensions, *compared)
            for dim in compared:
                result.notes.append(f"compared: {dim} {' / '.join(parsed.filters[dim])}, one series each")
        order, limit = parsed.order, parsed.top_n
        if limit is None and parsed.superlative and parsed.group_dims and not parsed.plural:
            limit = 1
        if (order or limit) and not dimensions:
            order, limit = None, None  # a single number has nothing to rank
        filters = [Filter(dimension=d, values=tuple(v)) for d, v in parsed.filters.items()]
        filters += [Filter(dimension=d, op="not_in", values=tuple(v)) for d, v in parsed.exclusions.items()]
        share: str | None = None
        if parsed.share:
            share, need = self._share_asked(parsed, metric, dimensions, comparison)
            if need is not None:
                result.clarification = need
                return result
        result.intent = Intent(
            metric=metric,
            dimensions=dimensions,
            filters=tuple(filters),
            time_window=window,
            comparison=comparison,
            order=order,
            limit=limit,
            unit=parsed.unit if self.catalog.metric(metric).kind == "money" else None,
            share=share,
            time_column=time_column,
        )
        if time_column is not None:
            result.notes.append(f"dated by {time_column}, as the question says")
        if parsed.unit is not None and self.catalog.metric(metric).kind == "money":
            result.notes.append(f"unit {parsed.unit} from the question")
        elif parsed.unit is not None:
            result.notes.append(f"unit {parsed.unit} ignored: {metric} is not an amount of money")
        if share == "groups":
            result.notes.append("share: each group's share of the total over the question's scope")
        elif share is not None:
            result.notes.append(f"share: the {share} named, as a share of every {share} in the question's scope")
        if parsed.ignored_words:
            result.notes.append("ignored words: " + ", ".join(parsed.ignored_words))
        return result

    def _date_asked(self, parsed: ParsedQuestion, metric: str, grain: str | None) -> tuple[str | None, ClarificationNeed | None]:
        """Which date a period reads when the metric's rows have several (``other_time_columns``):
        the one the question names (None for the default), or a question back when it names a
        period or a grain and no date. Reading the period on the wrong date is a wrong answer."""
        choices = self.catalog.time_column_choices(metric)
        if len(choices) < 2:
            return None, None
        named = [c for c in parsed.date_columns if c in choices]
        if len(named) == 1:
            return (None if named[0] == choices[0] else named[0]), None
        if not named and not (parsed.times or parsed.carried_window is not None or grain is not None):
            return None, None  # the default window: as the model's header says, by its time column
        options = [c.rpartition(".")[2] for c in choices]
        label = self.catalog.metric(metric).label(parsed.lang)
        question = (
            f"「{label}」的每一行有几个日期（{'、'.join(options)}）。时间范围按哪个日期算？"
            if parsed.lang == "zh"
            else f"Each row of {label} has several dates ({', '.join(options)}). Which date should the period be read on?"
        )
        targets = [ChoiceTarget(time_column=c) for c in choices]
        return None, ClarificationNeed(question, None, options, "which_date", targets)

    def _share_asked(
        self, parsed: ParsedQuestion, metric: str, dimensions: tuple[str, ...], comparison: Comparison | None
    ) -> tuple[str | None, ClarificationNeed | None]:
        """What a share word (占比, share, percentage of) asks for, or why it must be asked about.

        Grouped, each group's share of the total; filtered by one dimension, that filter's part of
        the whole without it. A share of an average or a ratio, of a comparison, or of nothing named
        is asked about: the plain metric is never answered in its place."""
        spec = self.catalog.metric(metric)
        zh = parsed.lang == "zh"
        label = spec.label(parsed.lang)
        if spec.kind == "ratio" or not spec.additive:
            question = (
                f"「{label}」是比率或平均值，不能算占比。要看各组的{label}，还是换一个可以加总的指标？"
                if zh
                else f"{label} is a rate or an average, so it has no share of a total. Do you want {label} by group, or another metric?"
            )
            return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_of_ratio")
        if comparison is not None:
            question = "占比和同比/环比要分开问：先看哪一个？" if zh else "Ask for the share and the change separately: which one first?"
            return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_with_comparison")
        if any(self.catalog.dimension(d).kind != "time" for d in dimensions):
            return "groups", None
        named = [d for d in parsed.filters if d not in dimensions]
        if len(named) == 1:
            return named[0], None
        if not named:
            question = (
                "占哪部分的比例？请说出要看的部分（如某个渠道）或按什么分组。"
                if zh
                else "A share of what? Name the part (a channel, a city) or a grouping."
            )
            return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_of_what")
        labels = [self.catalog.dimension(d).label(parsed.lang) for d in named]
        question = (
            f"占比是哪一部分占哪个整体？{'、'.join(labels)}都被限定了，请只保留作为整体的条件再问。"
            if zh
            else f"A share of which whole? The question narrows {', '.join(labels)}: keep only the whole's conditions and ask again."
        )
        return None, ClarificationNeed(question, "占比" if zh else "share", [], "share_of_which")

    def _apply_choice(self, parsed: ParsedQuestion, choice: Choice) -> None:
        """The pending question as the user clarified it: the chosen meaning replaces the term."""
        target, term = choice.target, choice.term
        if term is not None:
            parsed.unknown_terms = [t for t in parsed.unknown_terms if t != term]
            parsed.ignored_words = [w for w in parsed.ignored_words if w != term.lower()]
            parsed.ambiguous = [a for a in parsed.ambiguous if a[0] != term]
            parsed.unsupported = [u for u in parsed.unsupported if u != term]
            parsed.outside = [o for o in parsed.outside if o[0] != term]
            parsed.entity_conflicts = [c for c in parsed.entity_conflicts if c[0] != term]
        if target.metric is not None:
            if choice.reason in ("several_metrics", "incompatible_dimension", "unknown_metric") or term is None:
                parsed.metrics = [target.metric]
            else:
                _add_unique(parsed.metrics, target.metric)
        elif target.dimension is not None and target.value is not None:
            _add_unique(parsed.filters.setdefault(target.dimension, []), target.value)
        elif target.dimension is not None:
            _add_unique(parsed.group_dims, target.dimension)
        elif target.window is not None:
            parsed.times = [t for t in parsed.times if t.window.label == target.window] or parsed.times[:1]
        elif target.time_column is not None:
            parsed.date_columns = [target.time_column]
        mark_incompatible(parsed, self.catalog)

    def _clarification(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        need = self._clarification_need(parsed)
        if need is None or need.targets:
            return need
        return ClarificationNeed(need.question, need.term, need.options, need.reason, self._targets(need, parsed))

    def _targets(self, need: ClarificationNeed, parsed: ParsedQuestion) -> list[ChoiceTarget]:
        """What each option means, so a reply that names or numbers one can be applied."""
        lang = parsed.lang
        by_metric_label = {m.label(lang): m.name for m in self.catalog.metrics}
        by_dimension_label = {d.label(lang): d.name for d in self.catalog.dimensions}
        targets: list[ChoiceTarget] = []
        for option in need.options:
            if option in by_metric_label:
                targets.append(ChoiceTarget(metric=by_metric_label[option]))
                continue
            if need.reason == "several_windows":
                targets.append(ChoiceTarget(window=option))
                continue
            if need.reason == "top_n_without_dimension" and option in by_dimension_label:
                targets.append(ChoiceTarget(dimension=by_dimension_label[option]))
                continue
            label = re.sub(r"\s*[(（][^)）]*[)）]\s*$", "", option).strip()
            values = self.entities.lookup(label)
            if need.reason == "ambiguous_value":
                dim_label = option[len(label):].strip(" ()（）")
                values = [v for v in values if self.catalog.dimension(v.dimension).label(lang) == dim_label] or values
            if values:
                targets.append(ChoiceTarget(dimension=values[0].dimension, value=values[0].value))
            else:
                targets.append(ChoiceTarget(window=option) if need.reason == "several_windows" else ChoiceTarget())
        return targets

    def _clarification_need(self, parsed: ParsedQuestion) -> ClarificationNeed | None:
        zh = parsed.lang == "zh"
        metric_options = [m.label(parsed.lang) for m in self.catalog.metrics]
        if parsed.outside:
            name, dimension = parsed.outside[0]
            options = self.entities.labels(dimension, parsed.lang)
            dim_label = self.catalog.dimension(dimension).label(parsed.lang)
            question = (
                f"数据中没有「{name}」这个{dim_label}。你想看哪个{dim_label}？"
                if zh
                else f"The data has no {dim_label} called '{name}'. Which {dim_label} do you mean?"
            )
            targets = [ChoiceTarget(dimension=dimension, value=e.value) for e in self.entities.of(dimension)]
            return ClarificationNeed(question, name, options, "outside_value", targets)
        if parsed.entity_conflicts:
            term, values = parsed.entity_conflicts[0]
            options = [f"{v.label(parsed.lang)} ({self.catalog.dimension(v.dimension).label(parsed.lang)})" for v in values]
            question = f"「{term}」指的是哪一个？" if zh else f"Which '{term}' do you mean?"
            targets = [ChoiceTarget(dimension=v.dimension, value=v.value) for v in values]  # a looked-up value is not in the index
            return ClarificationNeed(question, term, options, "ambiguous_value", targets)
        if parsed.unsupported:
            term = parsed.unsupported[0]
            question = (
                f"指标目录里没有「{term}」。你想看哪个指标？"
                if zh
                else f"'{term}' is not a metric in the catalog. Which metric do you mean?"
            )
            return ClarificationNeed(question, term, metric_options, "unsupported_metric")
        if parsed.ambiguous:
            term, candidates = parsed.ambiguous[0]
            options = [self.catalog.metric(c).label(parsed.lang) for c in candidates]
            question = f"「{term}」是指哪个指标？" if zh else f"Which metric do you mean by '{term}'?"
            return ClarificationNeed(question, term, options, "ambiguous_metric")
        if parsed.unknown_terms:
            # With no metric, ask about the word most likely to be the metric: Chinese puts it last
            # ("魔都上个月的单子数"), English first; the other word is asked about next.
            term = parsed.unknown_terms[-1] if zh and not parsed.metrics else parsed.unknown_terms[0]
            if parsed.metrics and (term.lower() in _STATISTIC_EN or term in _STATISTIC_ZH):
                metric = self.catalog.metric(parsed.metrics[0])
                question = (
                    f"指标目录里没有「{metric.zh}」的{term}。你想看哪个指标？"
                    if zh
                    else f"The catalog has no {term.lower()} of {metric.en}. Which metric do you mean?"
                )
                return ClarificationNeed(question, term, metric_options, "unknown_term")
            if parsed.metrics:
                offered = [self.catalog.dimension(name) for name in self.catalog.clarify_dimensions]
                options = [label for dim in offered for label in self.entities.labels(dim.name, parsed.lang)]
                names_zh = [d.zh for d in offered] or ["取值"]
                kinds_zh = "、".join(names_zh[:-1]) + ("或" if len(names_zh) > 1 else "") + names_zh[-1]
                plurals = [next((n for n in d.nouns_en if n.endswith("s")), d.en) for d in offered] or ["values"]
                kinds_en = f"{', '.join(plurals[:-1])} or {plurals[-1]}" if len(plurals) > 1 else plurals[0]
                question = (
                    f"我不认识「{term}」。它是指某个{kinds_zh}吗？也可以去掉它再问。"
                    if zh
                    else f"I don't know '{term}'. Is it one of these {kinds_en}? You can also ask without it."
                )
            else:
                options = metric_options
                question = f"我不认识「{term}」。你想看哪个指标？" if zh else f"I don't know '{term}'. Which metric do you mean?"
            return ClarificationNeed(question, term, options, "unknown_term")
        if not parsed.metrics and parsed.ignored_words:
            # An English word memtool does not know, in a question without a metric: likely the metric.
            term = parsed.ignored_words[0]
            question = f"I don't know '{term}'. Which metric do you mean?" if not zh else f"我不认识「{term}」。你想看哪个指标？"
            return ClarificationNeed(question, term, metric_options, "unknown_term")
        if not parsed.metrics:
            question = "你想看哪个指标？" if zh else "Which metric do you want to see?"
            return ClarificationNeed(question, None, metric_options, "unknown_metric")
        shares = {m for m in parsed.metrics if self.catalog.metric(m).share_of in parsed.metrics}
        if shares:  # "收入中…的占比": the share of the revenue, not the revenue and a share
            parsed.metrics = [m for m in parsed.metrics if m in shares or not any(self.catalog.metric(s).share_of == m for s in shares)]
        if len(parsed.metrics) > 1:
            options = [self.catalog.metric(m).label(parsed.lang) for m in parsed.metrics]
            question = "一次只能查一个指标，先看哪一个？" if zh else "I can answer one metric at a time. Which one first?"
            return ClarificationNeed(question, None, options, "several_metrics")
        metric = self.catalog.metric(parsed.metrics[0])
        if parsed.incompatible:
            dim = self.catalog.dimension(parsed.incompatible[0])
            options = [m.label(parsed.lang) for m in self.catalog.metrics if dim.name in m.dimensions]
            question = (
                f"{metric.zh}没有「{dim.zh}」维度。要换成下面哪个指标？"
                if zh
                else f"{metric.en} has no {dim.en} dimension. Which of these metrics do you want instead?"
            )
            return ClarificationNeed(question, dim.label(parsed.lang), options, "incompatible_dimension")
        if parsed.top_n is not None and not parsed.group_dims and parsed.grain is None:
            attributes = [self.catalog.dimension(d) for d in metric.dimensions if self.catalog.dimension(d).kind == "attribute"]
            options = [dimension.label(parsed.lang) for dimension in attributes]
            question = f"前 {parsed.top_n} 名按什么排？" if zh else f"Top {parsed.top_n} of what?"
            return ClarificationNeed(question, None, options, "top_n_without_dimension")
        return None

    def _window(
        self, parsed: ParsedQuestion, today: date, route: ParseRoute | None, notes: list[str]
    ) -> tuple[TimeWindow | None, Comparison | None, ClarificationNeed | None]:
        grain = parsed.grain or ("month" if parsed.trend else None)
        same_period = [t for t in parsed.times if t.family == "same_period_last_year"]
        explicit = [t for t in parsed.times if t.family != "same_period_last_year"]
        comparison_kind = parsed.comparison
        if same_period and explicit:
            comparison_kind = comparison_kind or "yoy"  # "今年 vs 去年同期": a yoy of the other window
        elif same_period:
            # "去年同期" on its own: the window this question would otherwise have (the previous
            # turn's, or the default one), a year earlier; not a comparison and not one day.
            base = parsed.carried_window or default_window(today, grain=grain, route=route)
            window = shifted_year_back(base, f"{same_period[0].window.label} ({base.label})")
            notes.append(f"{same_period[0].text}: {base.label} a year earlier, [{window.start}, {window.end})")
            if comparison_kind is not None and comparison_kind != "yoy":
                kind2, previous_w = previous_window(window, None if comparison_kind == "previous" else comparison_kind, grain=grain)
                return window, Comparison(kind=kind2, window=previous_w), None
            return window, None, None
        future = [t for t in explicit if t.window.start > today]
        if future and route == "deep_analysis_workflow":
            notes.append(f"forecast horizon {future[0].window.label}: [{future[0].window.start}, {future[0].window.end}); history below")
            explicit = [t for t in explicit if t.window.start <= today]
        if len(explicit) > 2:
            return None, None, self._too_many_windows(parsed, explicit)
        comparison: Comparison | None = None
        if len(explicit) == 2:
            first, second = sorted((t.window for t in explicit), key=lambda w: w.start, reverse=True)
            kind = _comparison_kind_between(first, second)
            if kind is None:
                return None, None, self._too_many_windows(parsed, explicit)
            window = first
            comparison = Comparison(kind=kind, window=second)
            notes.append(f"two windows compared: {first.label} vs {second.label} ({kind})")
            return window, comparison, None
        if explicit:
            window = explicit[0].window
        elif parsed.carried_window is not None:
            window = parsed.carried_window
        elif self.catalog.default_window == "all" and comparison_kind is None:
            notes.append("no period named: every row of the data set (the model's default_window is all)")
            return None, None, None
        else:
            window = default_window(today, grain=grain, route=route)
            notes.append(f"default window {window.label}: [{window.start}, {window.end})")
        if comparison_kind is not None:
            kind_or_none = None if comparison_kind == "previous" else comparison_kind
            kind2, previous = previous_window(window, kind_or_none, grain=grain)
            comparison = Comparison(kind=kind2, window=previous)
        return window, comparison, None

    def _too_many_windows(self, parsed: ParsedQuestion, found: list[TimeMatch]) -> ClarificationNeed:
        labels = [t.window.label for t in found]
        if parsed.lang == "zh":
            return ClarificationNeed(f"问题里有多个时间（{'、'.join(labels)}），要看哪一个？", None, labels, "several_windows")
        return ClarificationNeed(f"The question names several periods ({', '.join(labels)}). Which one?", None, labels, "several_windows")


def default_window(today: date, *, grain: str | None, route: ParseRoute | None = None) -> TimeWindow:
    """The window used when a question names none (see the module docstring)."""
    if grain == "week":
        return last_full_weeks(today, 12, "last 12 full weeks")
    if grain == "day":
        return last_full_days(today, 30, "last 30 full days")
    if grain == "quarter":
        return last_full_quarters(today, 4, "last 4 full quarters")
    if grain == "year":
        return TimeWindow(start=date(today.year - 1, 1, 1), end=today + timedelta(days=1), label="last year and this year to date")
    if route == "deep_analysis_workflow":  # two seasons: an analysis compares each month with a year earlier
        return last_full_months(today, 24, "last 24 full months")
    if grain == "month":
        return last_full_months(today, 12, "last 12 full months")
    return last_full_months(today, 1, "last full month")


def _comparison_kind_between(current: TimeWindow, earlier: TimeWindow) -> ComparisonKind | None:
    """Two named windows compare when the earlier starts one year, quarter, month or week before
    ("本月 vs 上月" compares month to date with the whole of last month, as asked)."""
    if current.start == add_months(earlier.start, 12):
        return "yoy"
    if current.start == add_months(earlier.start, 3) and current.start.day == 1 and current.start.month in (1, 4, 7, 10):
        return "qoq"
    if current.start == add_months(earlier.start, 1) and current.start.day == 1:
        return "mom"
    if (current.start - earlier.start).days == 7 and current.start.weekday() == 0:
        return "wow"
    return None


def _word_order(word: str) -> Literal["asc", "desc"]:
    return "asc" if word.lower() in {"最低", "最小", "最少", "最差", "最弱", "lowest", "smallest", "worst", "bottom"} else "desc"


def _add_unique(items: list[Any], item: Any) -> None:
    if item not in items:
        items.append(item)


def _describe_target(target: ChoiceTarget) -> str:
    if target.metric is not None:
        return f"metric {target.metric}"
    if target.value is not None:
        return f"{target.dimension} = {target.value}"
    if target.dimension is not None:
        return f"group by {target.dimension}"
    if target.time_column is not None:
        return f"date {target.time_column}"
    return f"window {target.window}"


def _describe(target: MappingTarget) -> str:
    if target.metric is not None:
        return f"metric {target.metric}"
    if target.value is not None:
        return f"{target.dimension} = {target.value}"
    return f"group by {target.dimension}"
