"""The fixed phrases of the question parser, and the small text helpers every part of it shares.

Fixed phrases are the words no model defines: comparisons (同比, "vs last year"), units (万元,
"in 10k yuan"), top-N and order words, grouping prefixes and suffixes, trend, share, negation,
a standing preference or a this-time condition, chart names, and the filler a question may hold
besides what it asks for ("帮我查一下", "what was the"). The role words ("from", "飞往") and the
patterns around a value the warehouse is asked about live here too, with ``normalize``,
``language_of`` and ``term_pattern``, the way every phrase is matched.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Any, Literal

from memtool.semantic.catalog import DimensionSpec, Lang
from memtool.semantic.time_expressions import EN_NUMBER, ZH_NUMBER

_NUM = rf"(?:\d+|{ZH_NUMBER}|{EN_NUMBER})"
_B = r"(?<![A-Za-z0-9])"
_E = r"(?![A-Za-z0-9])"
WORD_START, WORD_END = _B, _E  # an English word's edges, for the model's own phrases

COMPARISONS: list[tuple[str, str]] = [
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

UNIT_WORDS = {
    "万元": "万元", "元": "元", "分": "分",
    "10k yuan": "万元", "10,000 yuan": "万元", "10000 yuan": "万元", "ten thousand yuan": "万元", "wan yuan": "万元", "wan": "万元",
    "yuan": "元", "rmb": "元", "cny": "元", "fen": "分", "cents": "分", "cent": "分",
}  # fmt: skip
UNITS: list[str] = [
    r"(?:单位\s*[:：为是用]?\s*|以|用|换算成|换算为|折合成?)\s*(?P<u>万元|元|分)(?:\s*(?:为单位|计算|计|表示|显示|展示))?",
    r"[(（\[]\s*(?P<u>万元|元|分)\s*[)）\]]",
    r"(?P<u>万元)",
    rf"{_B}(?:in|as|using|expressed\s+in|shown\s+in|in\s+units\s+of)\s+(?P<u>10k\s+yuan|10,000\s+yuan|10000\s+yuan|ten\s+thousand\s+yuan|wan\s+yuan|wan|yuan|rmb|cny|fen|cents?){_E}",
]

TOP_N: list[tuple[str, str]] = [
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
ORDER_WORDS: list[tuple[str, str, bool]] = [  # (order, pattern, superlative)
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
DEFAULT_TOP = 10  # "top products" with no number

GROUP_PREFIX_ZH = r"(?:各个|各|按照|按|分|每个|每一个|每|不同|逐个)\s*的?\s*"
GROUP_SUFFIX_ZH = r"\s*(?:分布|排名|排行|占比|构成|维度|拆分|明细|之间)"
GROUP_PREFIX_EN = (
    r"(?:by|per|for\s+each|for\s+every|each|every|across(?:\s+all)?(?:\s+the)?|broken\s+down\s+by|split\s+by|grouped\s+by|group\s+by|"
    r"breakdown\s+by|by\s+each)\s+"
)
GROUP_SUFFIX_EN = r"\s+(?:breakdown|ranking|rankings|split|mix|share|shares|level)"
TREND = r"变化趋势|趋势|走势|时间序列|" + rf"{_B}(?:trends?|over\s+time|time\s+series|trajectory){_E}"
# Words that ask for several values of one dimension together, as one number.
TOGETHER = re.compile(
    r"合计|一共|共计|总共|加起来|合起来|加总|总和|总计|合并|"
    r"(?<![A-Za-z0-9])(?:in\s+total|combined|altogether|together|sum\s+of|total\s+of|added\s+up)(?![A-Za-z0-9])",
    re.IGNORECASE,
)
SHARE = r"占比|份额|比重|构成|百分比|所占比例|" + (
    rf"{_B}(?:share|shares|proportion|percentage\s+of\s+total|percentage|percent\s+of|fraction\s+of|mix){_E}"
)
NEGATION = (
    r"除了|除去|除(?=\S{1,12}?(?:以外|之外|外))|不含|不包括|不包含|排除|去掉|不看|不要看|不算|不计|剔除|"
    rf"{_B}(?:excluding|except(?:\s+for)?|other\s+than|not\s+including|without){_E}"
)
PLURAL_ZH = r"哪些|哪几个|哪几家|几个|那些"
# A standing preference ("以后默认用万元") or a this-time condition ("这次用分"), and chart names.
LASTING = (
    r"以后都|以后|今后|往后|从现在起|从现在开始|从今以后|从此|默认|一律|总是|每次都|"
    rf"{_B}(?:always|from\s+now\s+on|by\s+default|going\s+forward|in\s+(?:the\s+)?future|default\s+to|as\s+(?:the|my)\s+default){_E}"
)
THIS_TIME = (
    r"这次|本次|这一次|仅这次|只这次|这回|"
    rf"{_B}(?:just\s+this\s+once|this\s+time|for\s+now|just\s+for\s+this\s+(?:one|question)){_E}"
)
CHARTS: list[tuple[str, str]] = [
    ("bar", rf"柱状图|柱形图|条形图|{_B}bar\s*(?:charts?|graphs?){_E}"),
    ("line", rf"折线图|曲线图|{_B}line\s*(?:charts?|graphs?){_E}"),
    ("pie", rf"饼图|饼状图|{_B}pie\s*(?:charts?){_E}"),
    ("kpi_card", rf"指标卡|KPI\s*卡片?|{_B}kpi\s*cards?{_E}"),
    ("table", rf"(?<!图)表格|{_B}tables?{_E}"),
]

# Filler: what a question may contain besides the recognised phrases. Chinese fragments are cut
# out of leftover runs (longest first); two or more characters that survive are an unknown term.
FILLER_ZH = sorted(
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
FILLER_EN = frozenset(
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
ROLE_GAP = re.compile(r"[\s的]*(?:the\s+)?", re.IGNORECASE)
VALUE_STOP = re.compile(r"[,，。?？!！;；:：、()（）\[\]\"“”]")
# Two values joined ("from JFK and LGA", "从EWR和JFK出发"): the second takes the first's role.
COORDINATED = re.compile(r"\s*(?:,|、|和|与|及|或|(?<![A-Za-z])(?:and|or)(?![A-Za-z]))\s*(?:the\s+)?", re.IGNORECASE)
# Where a value the index does not hold may be, next to a role word or noun: one run of ASCII words
# ("JFK", "New York") or of Chinese characters (纽约; 的 ends it).
VALUE_CHUNK = re.compile(r"[A-Za-z0-9]+(?:[\s'&.\-]+[A-Za-z0-9]+)*|(?:(?!的)[\u4e00-\u9fff])+")
VALUE_WORD = re.compile(r"[A-Za-z0-9]+(?:['&.\-][A-Za-z0-9]+)*")
# A name as written: capitalised words (or upper case and digits), a few in a row ("Public Policy Polling").
NAME_RUN = re.compile(r"(?<![A-Za-z0-9])(?:[A-Z][A-Za-z0-9&'.\-]*)(?:\s+[A-Z][A-Za-z0-9&'.\-]*){0,3}(?![A-Za-z0-9])")
MAX_PROBES = 24  # warehouse look-ups one question may make for values not in the index


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


def term_pattern(term: str, *, plural: bool = True) -> re.Pattern[str]:
    """A pattern for one term: English words get boundaries, a plural and flexible separators."""
    term = normalize(term)
    if re.search(r"[A-Za-z]", term):
        body = r"[\s\-_]*".join(re.escape(part) for part in re.split(r"[\s\-_]+", term) if part)
        ending = "(?:s|es)?" if plural and term[-1].isalpha() else ""
        return re.compile(rf"(?<![A-Za-z0-9]){body}{ending}(?![A-Za-z0-9])", re.IGNORECASE)
    return re.compile(re.escape(term), re.IGNORECASE)


# Statistics a question may ask for that no metric of the model computes unless it says so.
STATISTIC_EN = frozenset({"average", "avg", "mean", "median", "maximum", "minimum", "max", "min", "percentile", "variance", "stddev"})
STATISTIC_ZH = frozenset({"平均", "平均值", "均值", "中位数", "最大值", "最小值", "方差"})
# "by <word>", "per <word> <word>": the words a grouping names (the recognised ones are masked out by then).
AFTER_GROUP_WORD = re.compile(r"(?<![A-Za-z])(?:by|per|each|every)\s+(?:[A-Za-z'\-]+\s+){0,2}$", re.IGNORECASE)


# The calendar's grouping words, for every time dimension of a grain, whatever its model says
# besides: without them "by month" in a model that lists none would be dropped, and the number
# answered would be the whole period's.
CALENDAR_GROUP_TERMS: dict[str, tuple[str, ...]] = {
    "day": ("每天", "每日", "按天", "按日", "逐日", "哪天", "哪一天", "daily", "per day", "by day", "each day", "by date", "which day"),
    "week": ("每周", "按周", "逐周", "哪周", "哪一周", "weekly", "per week", "by week", "each week", "which week"),
    "month": ("每月", "每个月", "按月", "逐月", "哪个月", "哪一个月", "monthly", "per month", "by month", "each month", "which month"),
    "quarter": ("每季度", "每个季度", "按季度", "哪个季度", "quarterly", "per quarter", "by quarter", "each quarter", "which quarter"),
    "year": ("每年", "按年", "逐年", "哪年", "哪一年", "yearly", "per year", "by year", "each year", "annually", "which year"),
}

# English words a question is made of. A warehouse value spelled as one (the country code "and",
# the room type "i") is read as that value only when the question names its dimension beside it.
FUNCTION_WORDS_EN = frozenset(
    "a an the and or nor but if of to in on at by for from with into onto as is are was were be been being am do does did "
    "has have had it its this that these those there here what which who whom whose when where why how not no yes all any "
    "each every per than then so such can could will would shall should may might must me my we our you your he him his "
    "she her they them their up down out over under off vs via".split()
)


def weak_value(name: str, written: str) -> bool:
    """Whether a value's match in a question may just be an English word: one or two Latin letters,
    or a function word, unless written in capitals as the value itself is ("AA", "UA")."""
    plain = normalize(name)
    if not re.fullmatch(r"[A-Za-z]+", plain):
        return False
    if written == plain and plain.isupper():
        return False
    return len(plain) <= 2 or plain.lower() in FUNCTION_WORDS_EN


def probe_literal(term: str) -> str:
    """A literal every match of ``term_pattern(term)`` contains (lower case): its longest part."""
    term = normalize(term).lower()
    if re.search(r"[a-z]", term):
        return max((part for part in re.split(r"[\s\-_]+", term) if part), key=len, default=term)
    return term


def find_all(pattern: re.Pattern[str], text: str) -> Iterable[re.Match[str]]:
    return (m for m in pattern.finditer(text) if m.end() > m.start())


def word_order(word: str) -> Literal["asc", "desc"]:
    return "asc" if word.lower() in {"最低", "最小", "最少", "最差", "最弱", "lowest", "smallest", "worst", "bottom"} else "desc"


def add_unique(items: list[Any], item: Any) -> None:
    if item not in items:
        items.append(item)
