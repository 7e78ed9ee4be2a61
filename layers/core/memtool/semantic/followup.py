"""Conversation state for the rule parser: follow-up questions and replies to a clarification.

A **follow-up** ("那按渠道拆分呢", "只看华东", "换成处方量", "and in September?", "只要前3",
"不限渠道") is read against the intent of the session's previous turn: the parts the new question
names replace (or, with 再/也/also, extend) the previous ones; the rest is carried over and the
answer says what was. A question is a follow-up when it carries a strong marker (换成/改成/
instead, 只看/only, 再/also, 不限/regardless of, 去年同期 on its own), or names no metric of its
own; a weak marker (那/呢/"what about"/a leading "and") makes a question that names only a metric
a follow-up too ("那销售额呢"). A question with its own metric and its own scope stands alone.

A **clarification reply** names one of the pending clarification's options: exactly, by a
synonym the catalog knows, or by position ("第二个", "the first"). The pending question is then
parsed again with that choice, everything else it had parsed kept.

The unit is never carried over: "这次用分" applies to its own question only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from memtool.semantic.intent import Intent, TimeWindow
from memtool.semantic.time_expressions import ZH_NUMBER, parse_number

if TYPE_CHECKING:
    from memtool.semantic.catalog import Catalog
    from memtool.semantic.parsed import ParsedQuestion

MarkerKind = Literal["replace", "extend", "narrow", "weak"]

_B = r"(?<![A-Za-z0-9])"
_E = r"(?![A-Za-z0-9])"

# Words that say "this question continues the last one"; recognised as spans so they are never
# read as unknown terms.
FOLLOW_UP_PATTERNS: list[tuple[MarkerKind, str]] = [
    ("replace", r"换成|换为|换到|改成|改为|改看|切换到|切换成"),
    ("replace", rf"{_B}(?:instead(?:\s+of)?|rather\s+than|switch\s+to|change\s+(?:it\s+)?to){_E}"),
    ("extend", r"再按|也按|同时按|再加上|加上|另外再|再细分|再拆分|也看|也要看|还要看|还想看|再看看|顺便看"),
    ("extend", rf"{_B}(?:also|too|as\s+well|additionally|in\s+addition){_E}"),
    ("narrow", r"只看|仅看|只要|仅要|只需要|单看|只查|只算|只保留|仅限|只限"),
    ("narrow", rf"{_B}(?:only|just){_E}"),
    ("weak", r"^(?:那么|那)|呢\s*[?？。!！]*\s*$|怎么样\s*[?？]*\s*$"),
    ("weak", rf"^\s*(?:and|what\s+about|how\s+about|now|then|ok(?:ay)?,?)\s*{_E}"),
]


def drop_patterns(nouns_zh: str, nouns_en: str) -> list[str]:
    """"不限渠道", "regardless of channel", "drop the channel filter": the dimension's filter
    (and grouping) goes. ``nouns_*`` are regex alternations of the dimension nouns."""
    patterns = [rf"(?:不限|不分|不区分|不管|取消)\s*(?P<noun>{nouns_zh})(?:\s*(?:筛选|过滤|条件|限制))?"] if nouns_zh else []
    if nouns_en:
        patterns += [
            rf"{_B}(?:regardless\s+of|any|for\s+all|across\s+all)\s+(?:the\s+)?(?P<noun>{nouns_en}){_E}",
            rf"{_B}(?:remove|drop|clear|without)\s+the\s+(?P<noun>{nouns_en})\s+(?:filter|condition){_E}",
        ]
    return patterns


# Position words in a clarification reply.
_ORDINALS_ZH = re.compile(rf"^(?:选|就|要|是)?\s*第\s*(?P<n>\d+|{ZH_NUMBER})\s*(?:个|项|种|条)?(?:吧|的|啊)?$")
_ORDINALS_EN = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "1st": 1, "2nd": 2, "3rd": 3, "4th": 4, "5th": 5, "last": -1,
}  # fmt: skip
_ORDINAL_EN = re.compile(
    r"^(?:the\s+)?(?:option\s+|number\s+|#\s*)?(?P<n>\d+|first|second|third|fourth|fifth|sixth|seventh|eighth|1st|2nd|3rd|4th|5th|last)"
    r"(?:\s+(?:one|option))?(?:\s+please)?$",
    re.IGNORECASE,
)
_REPLY_FILLER = re.compile(
    r"^(?:就是|就|是|选|要|用|看|指的是|指|我说的是|i\s+mean|i\s+meant|use|the)\s*|\s*(?:吧|啊|呀|的|就行|即可|please)\s*$", re.IGNORECASE
)
_PUNCTUATION = re.compile(r"[\s,，。.!！?？、:：;；\"'“”‘’()（）]+")


# Replies that take every option or none: "都要", "两个都不要", "全要", "都可以吧", "neither".
_NO_CHOICE = re.compile(
    r"^(?:两个|全部|所有)?(?:都要|全要|全都要|都行|都可以|都不是|都不要|都不对|都不)(?:吧|啊|呀)?$"
    r"|^(?:both(?:\s+of\s+them)?|all\s+of\s+them|neither(?:\s+of\s+them)?|none(?:\s+of\s+them)?)$",
    re.IGNORECASE,
)


def declines_to_choose(reply: str, count: int) -> bool:
    """A reply that answers the clarification without picking one option: "都要", "neither",
    or a position there is no option for ("第三个" of two)."""
    text = _PUNCTUATION.sub(" ", reply).strip()
    if _NO_CHOICE.match(text.replace(" ", "") if not text.isascii() else text):
        return True
    return ordinal_position(reply) is not None and ordinal_choice(reply, count) is None


def usable_term(term: str) -> bool:
    """Whether a word can be taught a meaning: two or more letters or characters, nothing
    invisible, no odd spaces, and not a position or a refusal ("第二", "都不要")."""
    import unicodedata

    if sum(1 for ch in term if ch.isalnum()) < 2:
        return False
    if any(unicodedata.category(ch) in ("Cf", "Cc", "Co", "Cn") or (ch.isspace() and ch != " ") for ch in term):
        return False
    if re.search(r"[\u4e00-\u9fff]\s+[\u4e00-\u9fff]", term):
        return False
    return not (re.fullmatch(rf"第\s*(?:\d+|{ZH_NUMBER})\s*(?:个|项|种|条|名)?", term) or _NO_CHOICE.match(term.replace(" ", "")))


def ordinal_position(reply: str) -> int | None:
    """The position a reply names ("第三个" -> 3, "the last" -> -1), whether or not it exists."""
    text = _PUNCTUATION.sub(" ", reply).strip()
    match = _ORDINALS_ZH.match(text.replace(" ", ""))
    if match:
        return parse_number(match.group("n"))
    match = _ORDINAL_EN.match(text)
    if match:
        word = match.group("n").lower()
        return int(word) if word.isdigit() else _ORDINALS_EN.get(word)
    return None


def ordinal_choice(reply: str, count: int) -> int | None:
    """The 0-based option a reply picks by position ("第二个", "the first", "2"), or None."""
    text = _PUNCTUATION.sub(" ", reply).strip()
    n: int | None = None
    match = _ORDINALS_ZH.match(text.replace(" ", ""))
    if match:
        n = parse_number(match.group("n"))
    else:
        match = _ORDINAL_EN.match(text)
        if match:
            word = match.group("n").lower()
            n = int(word) if word.isdigit() else _ORDINALS_EN.get(word)
    if n is None:
        return None
    if n == -1:
        return count - 1 if count else None
    return n - 1 if 1 <= n <= count else None


def plain_reply(reply: str) -> str:
    """The reply without polite filler and punctuation, for an exact comparison with an option."""
    text = _PUNCTUATION.sub(" ", reply).strip()
    for _ in range(3):
        stripped = _REPLY_FILLER.sub("", text).strip()
        if stripped == text:
            break
        text = stripped
    return text.lower()


def option_label(option: str) -> str:
    """"华东 (大区)" -> "华东": an option as the user would type it."""
    return re.sub(r"\s*[(（][^)）]*[)）]\s*$", "", option).strip()


@dataclass(frozen=True)
class ChoiceTarget:
    """What one clarification option means: a metric, a dimension value, a grouping or a window."""

    metric: str | None = None
    dimension: str | None = None
    value: str | None = None
    window: str | None = None  # the label of one of several windows
    time_column: str | None = None  # one of the dates a period may read (Catalog.time_column_choices)

    @classmethod
    def from_json(cls, data: Any) -> ChoiceTarget | None:
        if not isinstance(data, dict):
            return None
        fields = {k: data.get(k) for k in ("metric", "dimension", "value", "window", "time_column")}
        if not any(isinstance(v, str) and v for v in fields.values()):
            return None
        return cls(**{k: v if isinstance(v, str) and v else None for k, v in fields.items()})

    def as_json(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v is not None}


def is_follow_up(parsed: ParsedQuestion) -> bool:
    strong = {"replace", "extend", "narrow"} & set(parsed.follow_up_markers)
    if strong or parsed.dropped_dims:
        return True
    if parsed.times and all(t.family == "same_period_last_year" for t in parsed.times):
        return True  # "去年同期呢": the previous question, a year earlier
    has_metric = bool(parsed.metrics or parsed.ambiguous or parsed.unsupported)
    own_scope = bool(parsed.has_grouping or parsed.times or parsed.filters or parsed.exclusions)
    if not has_metric and (parsed.unknown_terms or parsed.ignored_words):
        return False  # "今年各品牌的动销", "takings by region": the unknown word is likely its metric: ask
    if not has_metric:
        return bool(own_scope or parsed.follow_up_markers or parsed.top_n is not None or parsed.unit is not None)
    # "那订单数按大区呢", "那上个月的订单数呢", "what about order count by city?": another metric in
    # the same context (what the question names replaces the previous parts).
    return "weak" in parsed.follow_up_markers


def merge_previous(parsed: ParsedQuestion, previous: Intent, catalog: Catalog) -> list[str]:
    """Fill what the follow-up leaves out from the previous intent; returns what was carried.

    Mutates ``parsed``: metrics, groupings, filters, the window and the ranking the question does
    not name come from ``previous``.
    """
    carried: list[str] = []
    own = {*parsed.group_dims, *parsed.filters, *parsed.exclusions}  # what the question names itself
    if not (parsed.metrics or parsed.ambiguous or parsed.unsupported):
        parsed.metrics = [previous.metric]
        carried.append(f"metric {previous.metric}")
    dropped = set(parsed.dropped_dims)
    _carry_grouping(parsed, previous, catalog, dropped, carried)
    _carry_filters(parsed, previous, catalog, dropped, carried)
    _carry_window(parsed, previous, carried)
    _carry_date_column(parsed, previous, catalog, carried)
    _carry_ranking(parsed, previous, carried)
    for dim in dropped:
        parsed.group_dims = [d for d in parsed.group_dims if d != dim]
    mark_incompatible(parsed, catalog)  # what the merged metric cannot be grouped or filtered by
    return _drop_incompatible(parsed, catalog, own, carried)


def _carry_grouping(parsed: ParsedQuestion, previous: Intent, catalog: Catalog, dropped: set[str], carried: list[str]) -> None:
    """The previous groupings (not dropped) when the question names none, or before its own with
    再/also; the previous grain unless the question names one, a trend, or regroups "instead"."""
    time_dims = {d.name for d in catalog.time_dimensions}
    previous_grain = next((d for d in previous.dimensions if d in time_dims), None)
    previous_groups = [d for d in previous.dimensions if d not in time_dims]
    if parsed.group_dims and "extend" in parsed.follow_up_markers:
        parsed.group_dims = [d for d in previous_groups if d not in dropped] + [d for d in parsed.group_dims if d not in previous_groups]
        if previous_groups:
            carried.append("grouping " + ", ".join(previous_groups))
    elif not parsed.group_dims:
        kept = [d for d in previous_groups if d not in dropped]
        parsed.group_dims = kept
        if kept:
            carried.append("grouping " + ", ".join(kept))
    regroup = "replace" in parsed.follow_up_markers and bool(parsed.group_dims)  # "by city instead": the grain goes too
    if parsed.grain is None and not parsed.trend and previous_grain is not None and not regroup:
        parsed.grain = previous_grain
        carried.append(f"grain {previous_grain}")


def _carry_filters(parsed: ParsedQuestion, previous: Intent, catalog: Catalog, dropped: set[str], carried: list[str]) -> None:
    """The previous filters, minus dropped dimensions and the ones the question replaces: a new
    place replaces the old one, city or region ("那北京呢" after 华东, "换成杭州" after 上海);
    with 再/also the values of the same dimension add up ("also Beijing")."""
    named = set(parsed.filters) | set(parsed.exclusions)
    if "extend" in parsed.follow_up_markers:
        for item in previous.filters:
            if item.op == "in" and item.dimension in parsed.filters:
                parsed.filters[item.dimension] = list(dict.fromkeys([*item.values, *parsed.filters[item.dimension]]))
    families = {_filter_family(catalog, d) for d in named}
    named |= {f.dimension for f in previous.filters if _filter_family(catalog, f.dimension) in families}
    kept_filters: list[str] = []
    for item in previous.filters:
        if item.dimension in dropped or item.dimension in named:
            continue
        bucket = parsed.filters if item.op == "in" else parsed.exclusions
        bucket.setdefault(item.dimension, list(item.values))
        kept_filters.append(f"{item.dimension} {'=' if item.op == 'in' else '≠'} {'/'.join(item.values)}")
    if kept_filters:
        carried.append("filter " + ", ".join(kept_filters))


def _carry_window(parsed: ParsedQuestion, previous: Intent, carried: list[str]) -> None:
    """The previous window (and its comparison) when the question names no period of its own
    (去年同期 alone shifts the previous window, so it carries it too)."""
    explicit = [t for t in parsed.times if t.family != "same_period_last_year"]
    if not explicit and previous.time_window is not None:
        parsed.carried_window = previous.time_window
        if not parsed.times:
            carried.append(f"window {previous.time_window.label or previous.time_window.start}")
        if previous.comparison is not None and parsed.comparison is None:
            parsed.comparison = previous.comparison.kind
            carried.append(f"comparison {previous.comparison.kind}")


def _carry_date_column(parsed: ParsedQuestion, previous: Intent, catalog: Catalog, carried: list[str]) -> None:
    """The date the previous period read, when the question names none and its metric can read it."""
    if previous.time_column is not None and not parsed.date_columns and previous.time_column in catalog.time_column_choices(
        parsed.metrics[0] if len(parsed.metrics) == 1 and catalog.has_metric(parsed.metrics[0]) else previous.metric
    ):
        parsed.date_columns = [previous.time_column]
        carried.append(f"date {previous.time_column}")


def _carry_ranking(parsed: ParsedQuestion, previous: Intent, carried: list[str]) -> None:
    """The previous top-N, or its order alone, for a grouped question that names none."""
    if parsed.top_n is None and previous.limit is not None and parsed.group_dims:
        parsed.top_n, parsed.order = previous.limit, previous.order
        carried.append(f"top {previous.limit}")
    elif parsed.order is None and previous.order is not None and parsed.group_dims and parsed.top_n is None:
        parsed.order = previous.order


def _drop_incompatible(parsed: ParsedQuestion, catalog: Catalog, own: set[str], carried: list[str]) -> list[str]:
    """What was carried, without the groupings and filters the new metric lacks: those carried over
    are dropped, with a word ("换成处方量" after a channel grouping); one the question names itself
    still gets the clarification."""
    dropped_here = [d for d in parsed.incompatible if d not in own]
    for dim in dropped_here:
        parsed.group_dims = [d for d in parsed.group_dims if d != dim]
        parsed.filters.pop(dim, None)
        parsed.exclusions.pop(dim, None)
        carried.append(f"not {dim}: {'/'.join(parsed.metrics)} has no {dim} dimension")
    if dropped_here:
        mark_incompatible(parsed, catalog)
        carried = without_notes_about(carried, set(dropped_here))
    return carried


def without_notes_about(carried: list[str], gone: set[str]) -> list[str]:
    """The carried notes, less the grouping and filter notes that name a dimension in ``gone`` (by
    name: dropping ``region`` keeps a note about ``region_city``, or a filter value that spells it)."""

    def named(note: str) -> set[str]:
        kind, _, rest = note.partition(" ")
        items = rest.split(", ")
        return set(items) if kind == "grouping" else {item.split(" ", 1)[0] for item in items}

    return [c for c in carried if not (c.startswith(("grouping ", "filter ")) and named(c) & gone)]


def mark_incompatible(parsed: ParsedQuestion, catalog: Catalog) -> None:
    """List afresh the dimensions a question names that its metric has not."""
    parsed.incompatible = []
    for metric in parsed.metrics:
        if catalog.has_metric(metric):
            spec = catalog.metric(metric)
            for dim in [*parsed.group_dims, *parsed.filters, *parsed.exclusions]:
                if dim not in spec.dimensions and dim not in parsed.incompatible:
                    parsed.incompatible.append(dim)


def _filter_family(catalog: Catalog, dimension: str) -> str:
    """Dimensions on one table narrow the same thing (region and city): a place replaces a place."""
    if catalog.has_dimension(dimension):
        return catalog.dimension(dimension).table or dimension
    return dimension


def shifted_year_back(window: TimeWindow, label: str) -> TimeWindow:
    from memtool.semantic.time_expressions import add_months

    return TimeWindow(start=add_months(window.start, -12), end=add_months(window.end, -12), label=label)


__all__ = [
    "ChoiceTarget",
    "FOLLOW_UP_PATTERNS",
    "declines_to_choose",
    "usable_term",
    "drop_patterns",
    "is_follow_up",
    "mark_incompatible",
    "merge_previous",
    "option_label",
    "ordinal_choice",
    "plain_reply",
    "shifted_year_back",
]
