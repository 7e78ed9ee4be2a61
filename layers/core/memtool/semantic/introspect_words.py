"""The words a draft model gets that are language, not the warehouse's: the calendar's grains in
English and Chinese (labels, nouns, grouping words), and how people say a column's words with a
number-and-unit qualifier in them ("viewers_7day": "7-day viewers"). memtool.semantic.introspect uses them.
"""

from __future__ import annotations

import re
from typing import Any

_QUALIFIER = re.compile(r"^(\d+)(day|week|month|year|hour|minute|d|w|m|h|y)s?$")
_QUALIFIER_UNITS = {"d": "day", "w": "week", "m": "month", "h": "hour", "y": "year"}


def spoken_variants(words: str) -> list[str]:
    """How people say a column's words with a number-and-unit qualifier in them ("viewers 7day" ->
    "7-day viewers", "7 day viewers"): the qualifier first, hyphenated and spaced. Nothing else."""
    tokens = words.split(" ")
    found = next(((i, m) for i, token in enumerate(tokens) if (m := _QUALIFIER.match(token))), None)
    if found is None:
        return []
    index, match = found
    unit = _QUALIFIER_UNITS.get(match.group(2), match.group(2))
    rest = " ".join(tokens[:index] + tokens[index + 1 :])
    spaced = " ".join([*tokens[:index], f"{match.group(1)} {unit}", *tokens[index + 1 :]])
    variants = [f"{match.group(1)}-{unit} {rest}", f"{match.group(1)} {unit} {rest}", spaced]
    return [v.strip() for v in dict.fromkeys(variants) if v.strip() != words]


# The words of the calendar, in both languages: language, not the warehouse's terms, so a draft has
# them ("by month", "monthly", 每月, 按月) as a curated model does.
_GRAIN_WORDS: dict[str, tuple[str, list[str], list[str], list[str], list[str]]] = {
    # grain: (zh label, nouns_zh, nouns_en, group_terms_zh, group_terms_en)
    "day": ("日", ["日", "天", "日期"], ["day", "days", "daily", "date"], ["每天", "每日", "按天", "按日", "逐日", "各天"],
            ["daily", "per day", "by day", "each day", "by date", "per date"]),
    "week": ("周", ["周", "星期"], ["week", "weeks", "weekly"], ["每周", "按周", "逐周", "各周"],
             ["weekly", "per week", "by week", "each week"]),
    "month": ("月", ["月", "月份"], ["month", "months", "monthly"], ["每月", "每个月", "按月", "逐月", "各月"],
              ["monthly", "per month", "by month", "each month"]),
    "quarter": ("季度", ["季度"], ["quarter", "quarters", "quarterly"], ["每季度", "每个季度", "按季度", "各季度"],
                ["quarterly", "per quarter", "by quarter", "each quarter"]),
    "year": ("年", ["年", "年份", "年度"], ["year", "years", "yearly", "annual"], ["每年", "按年", "各年", "逐年"],
             ["yearly", "per year", "by year", "each year", "annually"]),
}  # fmt: skip


def time_dimension(grain: str) -> dict[str, Any]:
    zh, nouns_zh, nouns_en, groups_zh, groups_en = _GRAIN_WORDS[grain]
    return {"name": grain, "kind": "time", "zh": zh, "en": grain, "grain": grain,
            "nouns_zh": nouns_zh, "nouns_en": nouns_en, "group_terms_zh": groups_zh, "group_terms_en": groups_en,
            "definition_zh": f"Draft: the {grain} of each metric's time column",
            "definition_en": f"Draft: the {grain} of each metric's time column"}  # fmt: skip


__all__ = ["spoken_variants", "time_dimension"]
