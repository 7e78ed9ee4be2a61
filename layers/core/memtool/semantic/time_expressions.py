"""Time expressions in Chinese and English, resolved against a given ``today`` into [start, end).

Every window is half-open on calendar dates. The choices, so answers are predictable:

- Full periods: 上个月/last month, 上上个月/the month before last (and weeks, quarters the same
  way), 上周/last week (Monday–Sunday), 上季度/last quarter, 去年/last
  year, 前年, a named month/quarter/year ("2026年3月", "Q1 2026", "2025年"), 昨天/yesterday.
- To-date periods include today: 本月/this month/MTD = [1st of this month, today + 1 day), 本周/this
  week, 本季度/QTD, 今年/this year/YTD, 今天/today.
- "Last N" periods are the N *full* periods before the current one: 最近三个月/近3个月/the last 3
  months = the three calendar months before this month (on 2026-11-29: Aug, Sep, Oct 2026); the
  same for weeks, quarters and years (近一年/the past year = the 12 full months before this one).
  最近90天/the last 90 days = the 90 full days before today: [today − 90, today).
- A bare month or quarter (1月, January, Q1, 第一季度) is the most recent one that has started:
  on 2026-11-29 "1月" is January 2026 and "12月" is December 2025; the current month counts.
- 去年同期/same period last year on its own is this month to date, one year back; next to another
  window the parser reads it as a year-over-year comparison of that window.
- Future windows (下个月/next month, 明年, 未来三个月/the next 3 months) resolve too; the planner
  uses them as forecast horizons.
- Dates are read from 1900-01-01 to 2200-12-31 (``READABLE_FROM`` .. ``READABLE_UNTIL``). A named
  day, month or quarter outside them ("9999-12-31", "2300年3月"), or a relative window that would
  reach before year 1 ("the last 3000 years"), is refused (``date_out_of_range``: a ValidationFailed on ``question``) quoting the words:
  never an ``OverflowError`` from the date arithmetic, nor a question answered for another period.
  Only "2300-03" and "2300/03" (a year and a month in digits alone, as product codes are written)
  are left unread rather than refused.

``find_time_expressions`` returns every expression found, with its span, for the parser;
``resolve_time_expression`` returns the first window (or None when nothing is recognised).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Literal

from memtool.errors import ValidationFailed
from memtool.semantic.intent import TimeWindow

ComparisonKind = Literal["yoy", "mom", "wow", "qoq"]

# The dates a question may name: the years the named-month, quarter and year patterns accept.
# Every window the parser builds from them, and every comparison window one step back from
# those, stays far inside what ``datetime.date`` can represent (years 1 to 9999).
READABLE_FROM = date(1900, 1, 1)
READABLE_UNTIL = date(2200, 12, 31)


def date_out_of_range(words: str) -> ValidationFailed:
    """The refusal of a question naming a date memtool cannot read: the message quotes the words,
    on ``question``. A ValidationFailed itself, not a subclass: the ask flow knows a step's refusal
    by that name and answers it as ``validation_error``, like any other refused question."""
    return ValidationFailed(
        f'"{words}" is outside the dates memtool can read ({READABLE_FROM.isoformat()} to '
        f"{READABLE_UNTIL.isoformat()}): ask about a period inside them",
        field="question",
    )

# ---- calendar arithmetic ------------------------------------------------------------------


def month_start(day: date) -> date:
    return day.replace(day=1)


def add_months(day: date, months: int) -> date:
    """``day`` moved by whole months, the day clamped to the target month's length."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    month += 1
    return date(year, month, min(day.day, calendar.monthrange(year, month)[1]))


def add_years(day: date, years: int) -> date:
    return add_months(day, 12 * years)


def week_start(day: date) -> date:
    return day - timedelta(days=day.weekday())


def quarter_start(day: date) -> date:
    return date(day.year, 3 * ((day.month - 1) // 3) + 1, 1)


def shift_window(window: TimeWindow, *, months: int = 0, days: int = 0, label: str | None = None) -> TimeWindow:
    """The window moved by whole months (day-clamped) and/or days; the label says where it came from."""
    start, end = window.start, window.end
    if months:
        start, end = add_months(start, months), add_months(end, months)
    if days:
        start, end = start + timedelta(days=days), end + timedelta(days=days)
    return TimeWindow(start=start, end=end, label=window.label if label is None else label)


def _months_between(start: date, end: date) -> int:
    return (end.year - start.year) * 12 + end.month - start.month


def previous_window(window: TimeWindow, kind: ComparisonKind | None, *, grain: str | None = None) -> tuple[ComparisonKind, TimeWindow]:
    """The window a comparison is made against.

    ``yoy`` is the same dates one year back. ``mom``/``wow``/``qoq`` are one month, week or quarter
    back. ``None`` (a bare 环比 / "period over period") picks by shape: with a time grain it steps
    back one grain; a month-aligned window steps back by its own number of months (a calendar
    quarter is ``qoq``); a Monday-aligned whole-week window steps back by its weeks (``wow``);
    anything else steps back by its own length in days (reported as ``mom``, the generic
    "previous period").
    """
    if kind == "yoy":
        return "yoy", shift_window(window, months=-12, label=f"{window.label} (previous year)")
    if kind == "mom":
        return "mom", shift_window(window, months=-1, label=f"{window.label} (previous month)")
    if kind == "qoq":
        return "qoq", shift_window(window, months=-3, label=f"{window.label} (previous quarter)")
    if kind == "wow":
        return "wow", shift_window(window, days=-7, label=f"{window.label} (previous week)")
    if grain in ("month", "quarter", "year"):
        months = {"month": 1, "quarter": 3, "year": 12}[grain]
        chosen: ComparisonKind = "qoq" if grain == "quarter" else ("yoy" if grain == "year" else "mom")
        return chosen, shift_window(window, months=-months, label=f"{window.label} (previous {grain})")
    if grain == "week":
        return "wow", shift_window(window, days=-7, label=f"{window.label} (previous week)")
    if grain == "day":
        return "mom", shift_window(window, days=-1, label=f"{window.label} (previous day)")
    if window.start.day == 1:
        months = _months_between(window.start, window.end)
        if window.end.day != 1:
            months += 1  # a month-to-date window steps back one whole month
        months = max(months, 1)
        is_quarter = months == 3 and window.start.month in (1, 4, 7, 10) and window.end == add_months(window.start, 3)
        chosen = "qoq" if is_quarter else "mom"
        return chosen, shift_window(window, months=-months, label=f"{window.label} (previous period)")
    length = (window.end - window.start).days
    if window.start.weekday() == 0 and (length % 7 == 0 or length < 7):
        weeks = max(1, -(-length // 7))
        return "wow", shift_window(window, days=-7 * weeks, label=f"{window.label} (previous period)")
    return "mom", shift_window(window, days=-length, label=f"{window.label} (previous period)")


def window_offset(current: TimeWindow, previous: TimeWindow) -> tuple[Literal["year", "month", "day"], int]:
    """How far ``previous`` sits before ``current``, in the coarsest unit that maps one onto the other."""
    for months in range(1, 121):
        if (add_months(previous.start, months), add_months(previous.end, months)) == (current.start, current.end):
            return ("year", months // 12) if months % 12 == 0 else ("month", months)
    for months in range(1, 121):  # windows of different lengths ("本月 vs 上月") align on their starts
        if add_months(previous.start, months) == current.start and current.start.day == 1:
            return ("year", months // 12) if months % 12 == 0 else ("month", months)
    return "day", (current.start - previous.start).days


# ---- numbers in words -----------------------------------------------------------------------

_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "sixty": 60, "ninety": 90,
}  # fmt: skip
ZH_NUMBER = r"[零〇一二两三四五六七八九十百]+"
EN_NUMBER = (
    r"(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|"
    r"twenty|thirty|sixty|ninety)"
)


def parse_number(text: str) -> int | None:
    """An integer from digits, Chinese numerals (三, 十二, 九十, 一百八十) or English words."""
    text = text.strip().lower()
    if not text:
        return None
    if text.isdigit():
        return int(text)
    if text in _EN_NUMBERS:
        return _EN_NUMBERS[text]
    if text == "半":
        return None
    total, current = 0, 0
    for char in text:
        if char in _ZH_DIGITS:
            current = _ZH_DIGITS[char]
        elif char == "十":
            total += (current or 1) * 10
            current = 0
        elif char == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return total + current


# ---- patterns -------------------------------------------------------------------------------

_MONTHS_EN = {
    "january": 1, "jan": 1, "february": 2, "feb": 2, "march": 3, "mar": 3, "april": 4, "apr": 4, "may": 5,
    "june": 6, "jun": 6, "july": 7, "jul": 7, "august": 8, "aug": 8, "september": 9, "sept": 9, "sep": 9,
    "october": 10, "oct": 10, "november": 11, "nov": 11, "december": 12, "dec": 12,
}  # fmt: skip
_MONTH_EN = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|"
    r"nov|dec)"
)
_MONTH_ZH = r"(?:1[0-2]|0?[1-9]|十[一二]|[一二三四五六七八九十])"
_QUARTER_ZH = r"(?:[1-4一二三四])"
_ORDINAL_QUARTER = {"first": 1, "1st": 1, "second": 2, "2nd": 2, "third": 3, "3rd": 3, "fourth": 4, "4th": 4}
_RECENT_ZH = r"(?:最近的?|近|过去的?|前面的?)"
_RECENT_EN = r"(?:(?:in|over|during|for)\s+)?(?:the\s+)?(?:last|past|previous|trailing|prior)"
_B = r"(?<![A-Za-z0-9])"  # an English word boundary that treats "_" and CJK as boundaries
_E = r"(?![A-Za-z0-9])"


@dataclass(frozen=True)
class TimeMatch:
    start: int  # span in the (normalised) text
    end: int
    text: str
    window: TimeWindow
    family: str  # e.g. "last_month", "named_month", "same_period_last_year"


Builder = Callable[[re.Match[str], date], TimeWindow | None]


_LEADING_PREPOSITION = re.compile(r"^(?:in|for|during|over|of)\s+", re.IGNORECASE)


def _w(start: date, end: date, match: re.Match[str]) -> TimeWindow:
    return TimeWindow(start=start, end=end, label=_LEADING_PREPOSITION.sub("", match.group(0).strip()))


def _readable_year(year: int) -> bool:
    return READABLE_FROM.year <= year <= READABLE_UNTIL.year


def _words(match: re.Match[str]) -> str:
    """The words of a match as a refusal quotes them: as its label reads ("December 9999", not "in December 9999")."""
    return _LEADING_PREPOSITION.sub("", " ".join(match.group(0).split()))


# "2300-03" or "2300/03" alone: as often a code (SKU 3000-12) as a month, so an unreadable year there
# leaves the words unread instead of refusing the question.
_DIGITS_ONLY_MONTH = re.compile(r"\d{4}\s*[-/]\s*\d{1,2}")


def _month_window(year: int, month: int, match: re.Match[str]) -> TimeWindow | None:
    if not 1 <= month <= 12:
        return None
    if not _readable_year(year):
        if _DIGITS_ONLY_MONTH.fullmatch(match.group(0).strip()):
            return None
        raise date_out_of_range(_words(match))
    start = date(year, month, 1)
    return _w(start, add_months(start, 1), match)


def _quarter_window(year: int, quarter: int, match: re.Match[str]) -> TimeWindow | None:
    if not 1 <= quarter <= 4:
        return None
    if not _readable_year(year):
        raise date_out_of_range(_words(match))
    start = date(year, 3 * (quarter - 1) + 1, 1)
    return _w(start, add_months(start, 3), match)


def _year_window(year: int, match: re.Match[str]) -> TimeWindow | None:
    if not _readable_year(year):  # the patterns take 19xx and 20xx only; kept for a pattern that does not
        raise date_out_of_range(_words(match))
    return _w(date(year, 1, 1), date(year + 1, 1, 1), match)


def _zh_month(text: str) -> int | None:
    return int(text) if text.isdigit() else parse_number(text)


def _quarter_number(text: str) -> int | None:
    value = int(text) if text.isdigit() else parse_number(text)
    return value if value is not None and 1 <= value <= 4 else None


def _recent_month(month: int, today: date) -> date:
    """The most recent first-of-``month`` that is not after today."""
    year = today.year if month <= today.month else today.year - 1
    return date(year, month, 1)


def _named_month_en(match: re.Match[str], today: date) -> TimeWindow | None:
    name = match.group("m")
    if name.lower() == "may" and not name.startswith("M") and not match.group(0).lower().startswith("in"):
        return None  # the modal verb, not the month
    month = _MONTHS_EN[name.lower().rstrip(".")]
    start = _recent_month(month, today)
    return _w(start, add_months(start, 1), match)


def _named_month_zh(match: re.Match[str], today: date) -> TimeWindow | None:
    month = _zh_month(match.group("m"))
    if month is None or not 1 <= month <= 12:
        return None
    start = _recent_month(month, today)
    return _w(start, add_months(start, 1), match)


def _named_quarter(match: re.Match[str], today: date) -> TimeWindow | None:
    quarter = _quarter_number(match.group("q"))
    if quarter is None:
        return None
    start = date(today.year, 3 * (quarter - 1) + 1, 1)
    if start > today:
        start = date(today.year - 1, start.month, 1)
    return _w(start, add_months(start, 3), match)


def _relative_year(word: str, today: date) -> int | None:
    word = word.lower()
    offsets = {"今年": 0, "本年": 0, "去年": -1, "上年": -1, "前年": -2, "明年": 1, "this": 0, "last": -1, "next": 1}
    return today.year + offsets[word] if word in offsets else None


def _last_n(unit: str, n: int | None, today: date, match: re.Match[str]) -> TimeWindow | None:
    if n is None or n <= 0 or n > 3660:
        return None
    if unit == "day":
        return _w(today - timedelta(days=n), today, match)
    if unit == "week":
        this_week = week_start(today)
        return _w(this_week - timedelta(days=7 * n), this_week, match)
    if unit == "quarter":
        this_quarter = quarter_start(today)
        return _w(add_months(this_quarter, -3 * n), this_quarter, match)
    months = n * 12 if unit == "year" else n
    this_month = month_start(today)
    return _w(add_months(this_month, -months), this_month, match)


def _next_n(unit: str, n: int | None, today: date, match: re.Match[str]) -> TimeWindow | None:
    if n is None or n <= 0 or n > 3660:
        return None
    if unit == "day":
        return _w(today + timedelta(days=1), today + timedelta(days=1 + n), match)
    if unit == "week":
        next_week = week_start(today) + timedelta(days=7)
        return _w(next_week, next_week + timedelta(days=7 * n), match)
    months = n * 12 if unit == "year" else (n * 3 if unit == "quarter" else n)
    next_month = add_months(month_start(today), 1)
    return _w(next_month, add_months(next_month, months), match)


def _unit_of(word: str) -> str:
    word = word.lower()
    if word in ("天", "日") or word.startswith("day"):
        return "day"
    if word in ("周", "星期", "礼拜") or word.startswith("week"):
        return "week"
    if "季" in word or word.startswith("quarter"):
        return "quarter"
    if word == "年" or word.startswith("year"):
        return "year"
    return "month"


def _n(text: str | None) -> int | None:
    if text is None:
        return 1
    if text == "半":
        return None
    return parse_number(text)


def _fixed(family_start: Callable[[date], tuple[date, date]]) -> Builder:
    def build(match: re.Match[str], today: date) -> TimeWindow:
        start, end = family_start(today)
        return _w(start, end, match)

    return build


def _last_month(today: date) -> tuple[date, date]:
    this_month = month_start(today)
    return add_months(this_month, -1), this_month


def _month_before_last(today: date) -> tuple[date, date]:
    this_month = month_start(today)
    return add_months(this_month, -2), add_months(this_month, -1)


def _week_before_last(today: date) -> tuple[date, date]:
    this_week = week_start(today)
    return this_week - timedelta(days=14), this_week - timedelta(days=7)


def _quarter_before_last(today: date) -> tuple[date, date]:
    this_quarter = quarter_start(today)
    return add_months(this_quarter, -6), add_months(this_quarter, -3)


def _three_years_ago(today: date) -> tuple[date, date]:
    return date(today.year - 3, 1, 1), date(today.year - 2, 1, 1)


def _this_month(today: date) -> tuple[date, date]:
    return month_start(today), today + timedelta(days=1)


def _last_week(today: date) -> tuple[date, date]:
    this_week = week_start(today)
    return this_week - timedelta(days=7), this_week


def _this_week(today: date) -> tuple[date, date]:
    return week_start(today), today + timedelta(days=1)


def _last_quarter(today: date) -> tuple[date, date]:
    this_quarter = quarter_start(today)
    return add_months(this_quarter, -3), this_quarter


def _this_quarter(today: date) -> tuple[date, date]:
    return quarter_start(today), today + timedelta(days=1)


def _ytd(today: date) -> tuple[date, date]:
    return date(today.year, 1, 1), today + timedelta(days=1)


def _last_year(today: date) -> tuple[date, date]:
    return date(today.year - 1, 1, 1), date(today.year, 1, 1)


def _year_before_last(today: date) -> tuple[date, date]:
    return date(today.year - 2, 1, 1), date(today.year - 1, 1, 1)


def _yesterday(today: date) -> tuple[date, date]:
    return today - timedelta(days=1), today


def _today(today: date) -> tuple[date, date]:
    return today, today + timedelta(days=1)


def _next_month(today: date) -> tuple[date, date]:
    start = add_months(month_start(today), 1)
    return start, add_months(start, 1)


def _next_week(today: date) -> tuple[date, date]:
    start = week_start(today) + timedelta(days=7)
    return start, start + timedelta(days=7)


def _next_quarter(today: date) -> tuple[date, date]:
    start = add_months(quarter_start(today), 3)
    return start, add_months(start, 3)


def _next_year(today: date) -> tuple[date, date]:
    return date(today.year + 1, 1, 1), date(today.year + 2, 1, 1)


def _same_period_last_year(today: date) -> tuple[date, date]:
    start, end = _this_month(today)
    return add_years(start, -1), add_years(end, -1)


def _day_abs(match: re.Match[str], today: date) -> TimeWindow | None:
    try:
        day = date(int(match.group("y")), int(match.group("m")), int(match.group("d")))
    except ValueError:  # not a day of the calendar (2026-02-30, year 0000): not a date at all
        return None
    if not READABLE_FROM <= day <= READABLE_UNTIL:  # 9999-12-31: its end, the next day, is no date
        raise date_out_of_range(_words(match))
    return _w(day, day + timedelta(days=1), match)


def _month_abs(match: re.Match[str], today: date) -> TimeWindow | None:
    month_text = match.group("m")
    month = _MONTHS_EN.get(month_text.lower().rstrip(".")) if month_text[0].isalpha() else _zh_month(month_text)
    if month is None:
        return None
    return _month_window(int(match.group("y")), month, match)


def _quarter_abs(match: re.Match[str], today: date) -> TimeWindow | None:
    text = match.group("q").lower()
    quarter = _ORDINAL_QUARTER.get(text) or _quarter_number(text)
    if quarter is None:
        return None
    two_digits = match.groupdict().get("yy")
    year = 2000 + int(two_digits) if two_digits else int(match.group("y"))
    return _quarter_window(year, quarter, match)


def _year_abs(match: re.Match[str], today: date) -> TimeWindow | None:
    return _year_window(int(match.group("y")), match)


def _relative_year_month(match: re.Match[str], today: date) -> TimeWindow | None:
    year = _relative_year(match.group("r"), today)
    text = match.group("m")
    month = _MONTHS_EN.get(text.lower().rstrip(".")) if text[0].isalpha() else _zh_month(text)
    if year is None or month is None:
        return None
    return _month_window(year, month, match)


def _relative_year_quarter(match: re.Match[str], today: date) -> TimeWindow | None:
    year = _relative_year(match.group("r"), today)
    quarter = _quarter_number(match.group("q"))
    if year is None or quarter is None:
        return None
    return _quarter_window(year, quarter, match)


def _relative_year_quarter_any(match: re.Match[str], today: date) -> TimeWindow | None:
    year = _relative_year(match.group("r"), today)
    quarter = _quarter_number(match.group("q") or match.group("q2") or "")
    if year is None or quarter is None:
        return None
    return _quarter_window(year, quarter, match)


def _last_n_builder(match: re.Match[str], today: date) -> TimeWindow | None:
    text = match.group("n")
    n = 6 if text == "半" and _unit_of(match.group("u")) == "year" else _n(text)
    unit = "month" if text == "半" else _unit_of(match.group("u"))
    return _last_n(unit, n, today, match)


def _next_n_builder(match: re.Match[str], today: date) -> TimeWindow | None:
    return _next_n(_unit_of(match.group("u")), _n(match.group("n")), today, match)


_PATTERNS: list[tuple[str, str, Builder]] = [
    # absolute days, months, quarters, years
    ("named_day", r"(?<!\d)(?P<y>\d{4})\s*(?:[-/.]|年)\s*(?P<m>\d{1,2})\s*(?:[-/.]|月)\s*(?P<d>\d{1,2})\s*[日号]?(?!\d)", _day_abs),
    ("named_month", rf"(?<!\d)(?P<y>\d{{4}})\s*年\s*(?P<m>{_MONTH_ZH})\s*月份?", _month_abs),
    ("named_month", r"(?<!\d)(?P<y>\d{4})\s*[-/]\s*(?P<m>1[0-2]|0?[1-9])(?![\d\-/])", _month_abs),
    ("named_month", rf"{_B}(?:in\s+)?(?P<m>{_MONTH_EN})\.?,?\s+(?P<y>\d{{4}}){_E}", _month_abs),
    ("named_quarter", rf"(?<!\d)(?P<y>\d{{4}})\s*年?\s*[-\s]?\s*[Qq](?P<q>[1-4]){_E}", _quarter_abs),
    ("named_quarter", rf"{_B}(?:in\s+)?[Qq](?P<q>[1-4])\s*(?:of\s+)?(?:'(?P<yy>\d{{2}})|(?P<y>\d{{4}})){_E}", _quarter_abs),
    ("named_quarter", rf"(?<!\d)(?P<y>\d{{4}})\s*年\s*的?\s*第?(?P<q>{_QUARTER_ZH})\s*季度", _quarter_abs),
    (
        "named_quarter",
        rf"{_B}(?:in\s+)?(?:the\s+)?(?P<q>first|second|third|fourth|1st|2nd|3rd|4th)\s+quarter\s+(?:of\s+)?(?P<y>\d{{4}}){_E}",
        _quarter_abs,
    ),
    ("named_year", r"(?<!\d)(?P<y>(?:19|20)\d{2})\s*(?:年(?:全年|度|一整年)?|全年)", _year_abs),
    (
        "named_year",
        rf"{_B}(?:(?:in|for|during|of)\s+)?(?:the\s+year\s+)?(?P<y>(?:19|20)\d{{2}})(?![\d年\-/])(?:\s+full\s+year)?",
        _year_abs,
    ),
    # months and quarters qualified by a relative year
    ("named_month", rf"(?P<r>今年|去年|前年|明年|本年|上年)\s*的?\s*(?P<m>{_MONTH_ZH})\s*月份?", _relative_year_month),
    ("named_month", rf"{_B}(?:in\s+)?(?P<m>{_MONTH_EN})\.?\s+(?:of\s+)?(?P<r>this|last|next)\s+year{_E}", _relative_year_month),
    ("named_month", rf"{_B}(?P<r>this|last|next)\s+year'?s\s+(?P<m>{_MONTH_EN}){_E}", _relative_year_month),
    (
        "named_quarter",
        rf"(?P<r>今年|去年|前年|明年|本年|上年)\s*的?\s*(?:[Qq](?P<q>[1-4])|第?(?P<q2>{_QUARTER_ZH})\s*季度)",
        _relative_year_quarter_any,
    ),
    ("named_quarter", rf"{_B}(?:in\s+)?[Qq](?P<q>[1-4])\s+(?:of\s+)?(?P<r>this|last|next)\s+year{_E}", _relative_year_quarter),
    ("named_quarter", rf"{_B}(?P<r>this|last|next)\s+year'?s\s+[Qq](?P<q>[1-4]){_E}", _relative_year_quarter),
    # bare months and quarters: the most recent that has started
    ("named_month", rf"(?<![\d年个上下本这当近每按分各前后第十])(?P<m>{_MONTH_ZH})\s*月份?(?![\d日号])", _named_month_zh),
    ("named_month", rf"{_B}(?:in\s+)?(?P<m>{_MONTH_EN}){_E}\.?", _named_month_en),
    ("named_quarter", rf"(?<![A-Za-z0-9年])(?:in\s+)?[Qq](?P<q>[1-4]){_E}", _named_quarter),
    ("named_quarter", rf"(?<![\d年上下本这当近每按分各])第?(?P<q>{_QUARTER_ZH})\s*季度", _named_quarter),
    # relative periods ("上上个月" is the month before last: longer, so it wins over "上个月" inside it)
    ("month_before_last", r"上上个月|上上一个月|上上月", _fixed(_month_before_last)),
    ("month_before_last", rf"{_B}(?:(?:in|for|during)\s+)?the\s+month\s+before\s+last{_E}", _fixed(_month_before_last)),
    ("week_before_last", r"上上个星期|上上星期|上上周|上上个礼拜|上上礼拜", _fixed(_week_before_last)),
    ("week_before_last", rf"{_B}(?:(?:in|for|during)\s+)?the\s+week\s+before\s+last{_E}", _fixed(_week_before_last)),
    ("quarter_before_last", r"上上个季度|上上季度|上上季", _fixed(_quarter_before_last)),
    ("quarter_before_last", rf"{_B}(?:(?:in|for|during)\s+)?the\s+quarter\s+before\s+last{_E}", _fixed(_quarter_before_last)),
    ("three_years_ago", r"大前年", _fixed(_three_years_ago)),
    ("last_month", r"上个月|上一个月|上一月|上月", _fixed(_last_month)),
    (
        "last_month",
        rf"{_B}(?:(?:in|for|during|over)\s+)?(?:the\s+)?(?:last|previous|prior)\s+(?:calendar\s+)?month{_E}",
        _fixed(_last_month),
    ),
    ("this_month", r"本月至今|本月到目前为止|本月以来|本月|这个月|这月|当月|月初至今|月初到现在", _fixed(_this_month)),
    (
        "this_month",
        rf"{_B}(?:(?:in|for|during)\s+)?(?:this|the\s+current|current)\s+month(?:\s+to\s+date|\s+so\s+far)?{_E}|"
        rf"{_B}month[\s-]+to[\s-]+date{_E}|{_B}MTD{_E}",
        _fixed(_this_month),
    ),
    ("last_week", r"上个星期|上一个星期|上星期|上一周|上个周|上周|上个礼拜|上礼拜", _fixed(_last_week)),
    ("last_week", rf"{_B}(?:(?:in|for|during|over)\s+)?(?:the\s+)?(?:last|previous|prior)\s+(?:calendar\s+)?week{_E}", _fixed(_last_week)),
    ("this_week", r"本周至今|本周|这周|这个星期|本星期|这星期|这个礼拜|这礼拜", _fixed(_this_week)),
    (
        "this_week",
        rf"{_B}(?:(?:in|for|during)\s+)?(?:this|the\s+current|current)\s+week(?:\s+to\s+date|\s+so\s+far)?{_E}|"
        rf"{_B}week[\s-]+to[\s-]+date{_E}|{_B}WTD{_E}",
        _fixed(_this_week),
    ),
    ("last_quarter", r"上个季度|上一个季度|上一季度|上季度|上季", _fixed(_last_quarter)),
    ("last_quarter", rf"{_B}(?:(?:in|for|during|over)\s+)?(?:the\s+)?(?:last|previous|prior)\s+quarter{_E}", _fixed(_last_quarter)),
    ("this_quarter", r"本季度至今|本季度|这个季度|这季度|本季|当季", _fixed(_this_quarter)),
    (
        "this_quarter",
        rf"{_B}(?:(?:in|for|during)\s+)?(?:this|the\s+current|current)\s+quarter(?:\s+to\s+date|\s+so\s+far)?{_E}|"
        rf"{_B}quarter[\s-]+to[\s-]+date{_E}|{_B}QTD{_E}",
        _fixed(_this_quarter),
    ),
    ("ytd", r"今年以来|今年至今|今年到目前为止|年初至今|年初到现在|年初以来|本年度|今年|本年", _fixed(_ytd)),
    (
        "ytd",
        rf"{_B}(?:(?:in|for|during)\s+)?(?:this|the\s+current|current)\s+year(?:\s+to\s+date|\s+so\s+far)?{_E}|"
        rf"{_B}year[\s-]+to[\s-]+date{_E}|{_B}YTD{_E}",
        _fixed(_ytd),
    ),
    ("last_year", r"去年全年|去年一整年|去年|上一年|上年", _fixed(_last_year)),
    ("last_year", rf"{_B}(?:(?:in|for|during|over)\s+)?(?:the\s+)?(?:last|previous|prior)\s+(?:calendar\s+)?year{_E}", _fixed(_last_year)),
    ("year_before_last", r"前年", _fixed(_year_before_last)),
    ("year_before_last", rf"{_B}(?:in\s+)?the\s+year\s+before\s+last{_E}", _fixed(_year_before_last)),
    ("same_period_last_year", r"去年同期|上年同期|同期", _fixed(_same_period_last_year)),
    (
        "same_period_last_year",
        rf"{_B}(?:(?:in|for|during)\s+)?(?:the\s+)?same\s+(?:period|time)\s+(?:of\s+|in\s+)?last\s+year{_E}",
        _fixed(_same_period_last_year),
    ),
    ("yesterday", r"昨天|昨日", _fixed(_yesterday)),
    ("yesterday", rf"{_B}yesterday{_E}", _fixed(_yesterday)),
    ("today", r"今天|今日", _fixed(_today)),
    ("today", rf"{_B}today{_E}", _fixed(_today)),
    # the last / next N units (full units)
    ("last_n", rf"{_RECENT_ZH}\s*(?P<n>\d+|{ZH_NUMBER}|半)?\s*(?:个)?\s*(?P<u>月|天|日|周|星期|礼拜|季度|年)(?!度|份)", _last_n_builder),
    ("last_n", rf"{_B}{_RECENT_EN}\s+(?P<n>\d+|{EN_NUMBER})\s+(?P<u>days?|weeks?|months?|quarters?|years?){_E}", _last_n_builder),
    (
        "last_n",
        rf"{_B}(?:(?:in|over|during|for)\s+)?(?:the\s+)?past\s+(?P<u>month|quarter|year|week){_E}",
        lambda m, t: _last_n(_unit_of(m.group("u")), 1, t, m),
    ),
    (
        "next_n",
        rf"(?:未来|接下来的?|之后的?)\s*(?P<n>\d+|{ZH_NUMBER})?\s*(?:个)?\s*(?P<u>月|天|日|周|星期|季度|年)(?!度|份)",
        _next_n_builder,
    ),
    (
        "next_n",
        rf"{_B}(?:(?:in|over|during|for)\s+)?(?:the\s+)?next\s+(?P<n>\d+|{EN_NUMBER})\s+(?P<u>days?|weeks?|months?|quarters?|years?){_E}",
        _next_n_builder,
    ),
    ("next_month", r"下个月|下一个月|下月", _fixed(_next_month)),
    ("next_month", rf"{_B}(?:(?:in|for|during)\s+)?next\s+month{_E}", _fixed(_next_month)),
    ("next_week", r"下个星期|下星期|下一周|下周", _fixed(_next_week)),
    ("next_week", rf"{_B}(?:(?:in|for|during)\s+)?next\s+week{_E}", _fixed(_next_week)),
    ("next_quarter", r"下个季度|下一季度|下季度", _fixed(_next_quarter)),
    ("next_quarter", rf"{_B}(?:(?:in|for|during)\s+)?next\s+quarter{_E}", _fixed(_next_quarter)),
    ("next_year", r"明年", _fixed(_next_year)),
    ("next_year", rf"{_B}(?:(?:in|for|during)\s+)?next\s+year{_E}", _fixed(_next_year)),
]


_COMPILED = [(family, re.compile(pattern, re.IGNORECASE), build) for family, pattern, build in _PATTERNS]


def time_candidates(text: str, today: date) -> list[TimeMatch]:
    """Every time expression any pattern finds in ``text``, overlapping ones included.

    Raises ``date_out_of_range`` for the first one naming a date outside ``READABLE_FROM`` ..
    ``READABLE_UNTIL`` (or a window the calendar cannot hold), quoting its words.
    """
    found: list[TimeMatch] = []
    for family, pattern, build in _COMPILED:
        for match in pattern.finditer(text):
            if not match.group(0).strip():
                continue
            try:
                window = build(match, today)
            except (OverflowError, ValueError) as exc:  # a relative window past year 1 or 9999
                raise date_out_of_range(_words(match)) from exc
            if window is None or window.end <= window.start:
                continue
            start = match.start() + (len(match.group(0)) - len(match.group(0).lstrip()))
            end = match.end() - (len(match.group(0)) - len(match.group(0).rstrip()))
            found.append(TimeMatch(start, end, text[start:end], window, family))
    return found


def select_longest(matches: list[TimeMatch]) -> list[TimeMatch]:
    """Non-overlapping matches, longest first, returned in text order."""
    chosen: list[TimeMatch] = []
    for match in sorted(matches, key=lambda m: (-(m.end - m.start), m.start)):
        if all(match.end <= other.start or match.start >= other.end for other in chosen):
            chosen.append(match)
    return sorted(chosen, key=lambda m: m.start)


def find_time_expressions(text: str, today: date) -> list[TimeMatch]:
    """The time expressions in ``text`` (longest wins where they overlap), in text order."""
    return select_longest(time_candidates(text, today))


def resolve_time_expression(text: str, today: date) -> TimeWindow | None:
    """The first time window ``text`` names, resolved against ``today``; None if there is none."""
    found = find_time_expressions(text, today)
    return found[0].window if found else None


def last_full_months(today: date, months: int, label: str) -> TimeWindow:
    this_month = month_start(today)
    return TimeWindow(start=add_months(this_month, -months), end=this_month, label=label)


def last_full_weeks(today: date, weeks: int, label: str) -> TimeWindow:
    this_week = week_start(today)
    return TimeWindow(start=this_week - timedelta(days=7 * weeks), end=this_week, label=label)


def last_full_days(today: date, days: int, label: str) -> TimeWindow:
    return TimeWindow(start=today - timedelta(days=days), end=today, label=label)


def last_full_quarters(today: date, quarters: int, label: str) -> TimeWindow:
    this_quarter = quarter_start(today)
    return TimeWindow(start=add_months(this_quarter, -3 * quarters), end=this_quarter, label=label)


def last_full_years(today: date, years: int, label: str) -> TimeWindow:
    return TimeWindow(start=date(today.year - years, 1, 1), end=date(today.year, 1, 1), label=label)
