"""Plain-language summaries of analysis results, in the question's language.

A summary reads only the result (an ML tool's output or a templated script's ``result.json``, the
same JSON shape) and the labels the caller gives: every number it states comes from the result,
so it cannot report a figure the analysis did not produce.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from memtool.analysis.kinds import AnalysisKind

Lang = Literal["zh", "en"]

_MINUS = "−"  # U+2212: a typographic minus reads better than a hyphen in prose
_EN_UNITS = {"元": "yuan", "万元": "10k yuan", "亿元": "100m yuan"}
_TOP_MEMBERS = 3
_TOP_ANOMALIES = 3
_ALPHA = 0.05


def _number(value: float, *, digits: int = 2) -> str:
    text = f"{abs(value):,.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return (_MINUS if value < 0 else "") + text


def _digits(magnitude: float, unit: str | None) -> int:
    """Decimals to show: none from 100, two from 1; below 1 without a unit (a ratio: 0.0312, a
    refund rate) three significant digits (to eight decimals), so a rate and its change stay readable."""
    if magnitude >= 100:
        return 0
    if magnitude >= 1 or magnitude == 0 or unit is not None:
        return 2
    return min(8, max(2, 2 - math.floor(math.log10(magnitude))))


def format_amount(value: float, *, lang: Lang, unit: str | None) -> str:
    """An amount the way a reader of ``lang`` expects: 万/亿 in Chinese (when the unit is 元 or
    none), thousands separators in English; a ratio (no unit, below 1) with three significant
    digits ("0.0312")."""
    sign = _MINUS if value < 0 else ""
    magnitude = abs(value)
    if lang == "zh" and unit in (None, "元"):
        suffix = unit or ""
        if magnitude >= 1e8:
            return f"{sign}{magnitude / 1e8:.2f} 亿{suffix}"
        if magnitude >= 1e4:
            return f"{sign}{magnitude / 1e4:.1f} 万{suffix}"
        return f"{sign}{_number(magnitude, digits=_digits(magnitude, unit))} {suffix}".rstrip()
    if lang == "zh":
        return f"{sign}{_number(magnitude)} {unit}"
    shown = _EN_UNITS.get(unit or "", unit)
    return f"{sign}{_number(magnitude, digits=_digits(magnitude, unit))}" + (f" {shown}" if shown else "")


def _signed(value: float, *, lang: Lang, unit: str | None) -> str:
    text = format_amount(value, lang=lang, unit=unit)
    return text if value < 0 else "+" + text


def _percent(value: float) -> str:
    return f"{_number(value * 100, digits=1) if abs(value) < 10 else _number(value * 100, digits=0)}%"


def _p(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def summarize_analysis(
    kind: AnalysisKind,
    result: Mapping[str, Any],
    *,
    lang: Lang,
    metric_label: str,
    unit: str | None,
    dimension_labels: Mapping[str, str] | None = None,
) -> str:
    """One paragraph on ``result`` for the user; ``dimension_labels`` names dimension columns
    (``{"product_name": "产品"}``)."""
    writers: dict[AnalysisKind, Callable[[Mapping[str, Any], Lang, str, str | None, Mapping[str, str]], str]] = {
        "anomaly": _anomaly,
        "forecast": _forecast,
        "attribution": _attribution,
        "clustering": _clustering,
        "correlation": _correlation,
        "regression": _regression,
    }
    if kind not in writers:
        raise ValueError(f"no summary for analysis kind {kind!r}")
    return writers[kind](result, lang, metric_label, unit, dimension_labels or {})


def _anomaly(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, _: Mapping[str, str]) -> str:
    points: Sequence[Mapping[str, Any]] = result["points"]
    flagged = sorted((p for p in points if p["flagged_by"]), key=lambda p: -abs(p["z"]))
    threshold = result["threshold"]
    if not flagged:
        first, last = points[0]["label"], points[-1]["label"]
        if lang == "zh":
            return f"{first}–{last} 的{metric}没有异常点（稳健 z 的绝对值都低于 {_number(threshold)}）。"
        return f"{metric} shows no anomaly from {first} to {last} (every |robust z| is below {_number(threshold)})."
    sentences = []
    for p in flagged[:_TOP_ANOMALIES]:
        value = format_amount(p["value"], lang=lang, unit=unit)
        expected = format_amount(p["expected"], lang=lang, unit=unit)
        change = (p["value"] - p["expected"]) / abs(p["expected"]) if p["expected"] else None
        both = "robust_z" in p["flagged_by"] and "isolation_forest" in p["flagged_by"]
        if lang == "zh":
            direction = "" if change is None else f"{'高' if change >= 0 else '低'} {_percent(abs(change))}"
            body = f"{p['label']} 的{metric}为 {value}，比预期（{expected}）{direction}（稳健 z = {_number(p['z'], digits=1)}）"
            if "robust_z" in p["flagged_by"]:
                sentences.append(body + "，是异常点" + ("；孤立森林也标记了这一点。" if both else "。"))
            else:
                sentences.append(body + f"，未达阈值 {_number(threshold)}，但孤立森林将其标为异常。")
        else:
            direction = "" if change is None else f"{_percent(abs(change))} {'above' if change >= 0 else 'below'} "
            body = f"In {p['label']}, {metric} was {value}, {direction}the expected {expected} (robust z = {_number(p['z'], digits=1)})"
            if "robust_z" in p["flagged_by"]:
                sentences.append(body + ": an anomaly" + (", also flagged by the isolation forest." if both else "."))
            else:
                sentences.append(body + f", under the {_number(threshold)} threshold, but the isolation forest flags it.")
    return "".join(sentences) if lang == "zh" else " ".join(sentences)


_LOOSE_MAPE = 30.0  # percent: above this the forecast's own backtest says it is rough


def _forecast(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, _: Mapping[str, str]) -> str:
    sentences = []
    for series in result["series"]:
        group = series["group"]
        points = []
        for f in series["forecast"]:
            point = format_amount(f["point"], lang=lang, unit=unit)
            low = format_amount(f["lower_95"], lang=lang, unit=unit)
            high = format_amount(f["upper_95"], lang=lang, unit=unit)
            if lang == "zh":
                points.append(f"{f['label']} 为 {point}（95% 区间 {low}–{high}）")
            else:
                points.append(f"{point} in {f['label']} (95% interval {low} to {high})")
        mape = series["backtest_mape"]
        if lang == "zh":
            subject = f"{group}的{metric}" if group else metric
            tail = f"回测 MAPE {mape:.1f}%" if mape is not None else "无法计算回测 MAPE"
            if mape is not None and mape > _LOOSE_MAPE:
                tail += "（回测误差大，预测仅供参考）"
            sentences.append(f"预计{subject}：" + "，".join(points) + f"；{tail}。")
        else:
            subject = f"{metric} for {group}" if group else metric
            tail = f"backtest MAPE {mape:.1f}%" if mape is not None else "no backtest MAPE"
            if mape is not None and mape > _LOOSE_MAPE:
                tail += " (a large backtest error: read this forecast as rough)"
            sentences.append(f"Forecast {subject}: " + "; ".join(points) + f"; {tail}.")
    return "".join(sentences) if lang == "zh" else " ".join(sentences)


def _attribution(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, labels: Mapping[str, str]) -> str:
    if result.get("method") == "rate_mix":
        return _rate_attribution(result, lang, metric, unit, labels)
    before, after, change = result["before_total"], result["after_total"], result["total_change"]
    b, a = result["before_period"], result["after_period"]
    fmt = lambda v: format_amount(v, lang=lang, unit=unit)  # noqa: E731
    if lang == "zh":
        verb = "升到" if change > 0 else "降到" if change < 0 else "持平于"
        head = f"{metric}从 {b} 的 {fmt(before)} {verb} {a} 的 {fmt(after)}（{_signed(change, lang=lang, unit=unit)}）。"
    else:
        verb = "rose" if change > 0 else "fell" if change < 0 else "held"
        head = f"{metric} {verb} from {fmt(before)} in {b} to {fmt(after)} in {a} ({_signed(change, lang=lang, unit=unit)})."
    parts = [head]
    for dimension in result["dimensions"]:
        name = labels.get(dimension["dimension"], dimension["dimension"])
        movers = [c for c in dimension["contributions"] if c["delta"] != 0][:_TOP_MEMBERS]
        if not movers:
            continue
        said = []
        for c in movers:
            delta = _signed(c["delta"], lang=lang, unit=unit)
            if lang == "zh":
                share = f"（占 {_percent(c['share'])}）" if c["share"] is not None else ""
                said.append(f"{c['member']} 贡献了 {delta}{share}")
            else:
                share = f" ({_percent(c['share'])} of the change)" if c["share"] is not None else ""
                said.append(f"{c['member']} contributed {delta}{share}")
        parts.append(f"按{name}看，" + "，".join(said) + "。" if lang == "zh" else f"By {name}, " + ", ".join(said) + ".")
    return "".join(parts) if lang == "zh" else " ".join(parts)


_Say = Callable[[float], str]  # a number as the summary states it (formatted, or signed)


def _rate_headline(result: Mapping[str, Any], zh: bool, metric: str, fmt: _Say, sig: _Say) -> str:
    """The whole ratio's move between the two periods."""
    before, after, change = result["before_total"], result["after_total"], result["total_change"]
    b, a = result["before_period"], result["after_period"]
    if zh:
        verb = "升到" if change > 0 else "降到" if change < 0 else "持平于"
        return f"{metric}从 {b} 的 {fmt(before)} {verb} {a} 的 {fmt(after)}（{sig(change)}）。"
    verb = "rose" if change > 0 else "fell" if change < 0 else "held"
    return f"{metric} {verb} from {fmt(before)} in {b} to {fmt(after)} in {a} ({sig(change)})."


def _rate_biggest_part(top: Mapping[str, Any], zh: bool, metric: str, base: str, labels: Mapping[str, str], sig: _Say) -> str:
    """The single biggest rate or mix effect, with its share of the change."""
    name = labels.get(top["dimension"], top["dimension"])
    if zh:
        share = f"（占变化的 {_percent(top['share'])}）" if top.get("share") is not None else ""
        who = f"{name}「{top['member']}」"
        what = f"{who}自身{metric}的变化" if top["effect"] == "rate" else f"{who}在{base}中占比的变化（结构效应）"
        return f"最大的一项是{what}：{sig(top['value'])}{share}。"
    share = f" ({_percent(top['share'])} of the change)" if top.get("share") is not None else ""
    what = f"{name} {top['member']}'s own {metric}" if top["effect"] == "rate" else f"the mix: {name} {top['member']}'s share of {base}"
    return f"The biggest part is {what}, {sig(top['value'])}{share}."


def _rate_member(c: Mapping[str, Any], *, shared: bool, zh: bool, fmt: _Say, sig: _Say) -> str:
    """One member's part: its change with its ratios (over a shared denominator) or its rate and mix effects."""
    ratios = f"{fmt(c['before'])}→{fmt(c['after'])}" if c["before"] is not None and c["after"] is not None else ""
    if shared:
        return f"{c['member']} {sig(c['delta'])}" + (f"（{ratios}）" if zh and ratios else f" ({ratios})" if ratios else "")
    if zh:
        return f"{c['member']} {sig(c['delta'])}（自身 {sig(c['rate_effect'])}，结构 {sig(c['mix_effect'])}）"
    return f"{c['member']} {sig(c['delta'])} (rate {sig(c['rate_effect'])}, mix {sig(c['mix_effect'])})"


def _rate_dimension(
    dimension: Mapping[str, Any], zh: bool, metric: str, base: str, labels: Mapping[str, str], fmt: _Say, sig: _Say
) -> str | None:
    """One dimension's rate and mix totals with its top members (None when no member moved)."""
    name = labels.get(dimension["dimension"], dimension["dimension"])
    movers = [c for c in dimension["contributions"] if c["delta"] != 0][:_TOP_MEMBERS]
    if not movers:
        return None
    shared = dimension.get("denominators") == "shared"
    said = [_rate_member(c, shared=shared, zh=zh, fmt=fmt, sig=sig) for c in movers]
    if zh and shared:
        return f"按{name}看（分母都是全部{base}，没有结构效应），" + "，".join(said) + "。"
    if zh:
        overlap = f"（各{name}的{base}有重叠，结构按占全部{base}的比例计）" if dimension.get("denominators") == "overlapping" else ""
        return (
            f"按{name}看，各{name}自身{metric}的变化合计 {sig(dimension['rate_effect'])}，"
            f"{name}结构（{base}占比）的变化合计 {sig(dimension['mix_effect'])}{overlap}：" + "，".join(said) + "。"
        )
    if shared:
        return f"By {name} (each over all {base}: no mix), " + ", ".join(said) + "."
    overlapping = dimension.get("denominators") == "overlapping"
    overlap = f" (the members' {base} overlap; the mix reads their shares of the whole's)" if overlapping else ""
    return (
        f"By {name}, the members' own {metric} moved it {sig(dimension['rate_effect'])} and their mix "
        f"(shares of {base}) {sig(dimension['mix_effect'])}{overlap}: " + ", ".join(said) + "."
    )


def _rate_attribution(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, labels: Mapping[str, str]) -> str:
    """A ratio's change in its rate and mix parts: the whole, the biggest part, then each dimension's
    rate and mix totals with its top members."""
    fmt = lambda v: format_amount(v, lang=lang, unit=unit)  # noqa: E731
    sig = lambda v: _signed(v, lang=lang, unit=unit)  # noqa: E731
    zh = lang == "zh"
    parts = [_rate_headline(result, zh, metric, fmt, sig)]
    base = labels.get(result["denominator"]["column"], result["denominator"]["column"])
    top = result.get("biggest_part")
    if top:
        parts.append(_rate_biggest_part(top, zh, metric, base, labels, sig))
    for dimension in result["dimensions"]:
        sentence = _rate_dimension(dimension, zh, metric, base, labels, fmt, sig)
        if sentence is not None:
            parts.append(sentence)
    return "".join(parts) if zh else " ".join(parts)


def _clustering(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, labels: Mapping[str, str]) -> str:
    features = [labels.get(f, f) for f in result["features"]]
    total = sum(c["size"] for c in result["clusters"])
    if lang == "zh":
        parts = [f"按 {'、'.join(features)} 把 {total} 个对象分为 {result['k']} 类（轮廓系数 {result['silhouette']:.2f}）。"]
    else:
        parts = [f"{total} items fall into {result['k']} clusters on {', '.join(features)} (silhouette {result['silhouette']:.2f})."]
    for c in result["clusters"]:
        members = c["members"][:5]
        more = len(c["members"]) - len(members)
        means = [f"{labels.get(f, f)} {_number(v)}" for f, v in c["means"].items()]
        if lang == "zh":
            listed = "、".join(members) + (f" 等 {len(c['members'])} 个" if more else "")
            parts.append(f"第 {c['cluster'] + 1} 类 {c['size']} 个（{listed}），均值：{'，'.join(means)}。")
        else:
            listed = ", ".join(members) + (f" and {more} more" if more else "")
            parts.append(f"Cluster {c['cluster'] + 1} has {c['size']} ({listed}); means: {', '.join(means)}.")
    return "".join(parts) if lang == "zh" else " ".join(parts)


def _correlation(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, labels: Mapping[str, str]) -> str:
    parts = []
    for pair in result["pairs"][:_TOP_MEMBERS]:
        pair = {**pair, "x": labels.get(pair["x"], pair["x"]), "y": labels.get(pair["y"], pair["y"])}
        significant = pair["pearson_p"] < _ALPHA
        if lang == "zh":
            verdict = "显著" if significant else "不显著"
            parts.append(
                f"{pair['x']} 与 {pair['y']}：Pearson r = {pair['pearson_r']:.2f}（{_p(pair['pearson_p'])}，{verdict}），"
                f"Spearman ρ = {pair['spearman_rho']:.2f}（{_p(pair['spearman_p'])}）。"
            )
        else:
            verdict = "significant" if significant else "not significant"
            parts.append(
                f"{pair['x']} and {pair['y']}: Pearson r = {pair['pearson_r']:.2f} ({_p(pair['pearson_p'])}, {verdict}), "
                f"Spearman rho = {pair['spearman_rho']:.2f} ({_p(pair['spearman_p'])})."
            )
    head = f"共 {result['n_rows']} 行。" if lang == "zh" else f"{result['n_rows']} rows."
    return head + ("".join(parts) if lang == "zh" else " " + " ".join(parts)) + _few(result["n_rows"], lang)


def _regression(result: Mapping[str, Any], lang: Lang, metric: str, unit: str | None, labels: Mapping[str, str]) -> str:
    target = metric or result["target"]
    checks = result["residual_checks"]
    slopes = [{**c, "name": labels.get(c["name"], c["name"])} for c in result["coefficients"] if c["name"] != "const"]
    result = {**result, "features": [labels.get(f, f) for f in result["features"]]}
    if lang == "zh":
        terms = "；".join(f"{c['name']} 每增加 1，{target} 变化 {_number(c['estimate'], digits=3)}（{_p(c['p'])}）" for c in slopes)
        tests = _residual_tests(checks, dw_sign=" = ")
        return (
            f"{target} 对 {'、'.join(result['features'])} 的线性回归（n = {result['n']}）R² = {result['r_squared']:.3f}。"
            f"{terms}。残差检验：{'，'.join(tests)}。"
        ) + _few(result["n"], lang)
    terms = "; ".join(f"each unit of {c['name']} moves {target} by {_number(c['estimate'], digits=3)} ({_p(c['p'])})" for c in slopes)
    tests = _residual_tests(checks, dw_sign=" ")
    return (
        f"OLS of {target} on {', '.join(result['features'])} (n = {result['n']}): R² = {result['r_squared']:.3f}; "
        f"{terms}. Residual checks: {', '.join(tests)}."
    ) + _few(result["n"], lang)


def _residual_tests(checks: Mapping[str, Any], *, dw_sign: str) -> list[str]:
    """The residual checks the result holds, in the order a reader expects (Shapiro only where scipy ran)."""
    tests = [f"Jarque-Bera {_p(checks['jarque_bera_p'])}", f"Durbin-Watson{dw_sign}{checks['durbin_watson']:.2f}"]
    if checks["shapiro_p"] is not None:
        tests.insert(0, f"Shapiro-Wilk {_p(checks['shapiro_p'])}")
    if checks["breusch_pagan_p"] is not None:
        tests.append(f"Breusch-Pagan {_p(checks['breusch_pagan_p'])}")
    return tests


_FEW = 20  # below this many observations a correlation or a fit says little


def _few(n: int, lang: str) -> str:
    """A caution when the sample is small (ten cities that all scale with their size correlate)."""
    if n >= _FEW:
        return ""
    return f"（只有 {n} 个样本，结论仅供参考。）" if lang == "zh" else f" (only {n} observations: read this as indicative.)"


# ---- the sentences around the analyses' own: the period asked about, segments, scope ----------

_ASKED_UP = re.compile(
    r"(?:升高|上升|上涨|增长|增加|变高|提高|涨)"
    r"|\b(?:rose|rise|rising|risen|increase[sd]?|increasing|went up|go up|grew|grow|growing|higher|jump(?:ed)?|spike[sd]?)\b",
    re.IGNORECASE,
)
_ASKED_DOWN = re.compile(
    r"(?:下降|下跌|降低|减少|变低|跌|下滑)"
    r"|\b(?:fell|fall|falling|fallen|drop(?:ped|s)?|decline[sd]?|declining|decrease[sd]?|went down|go down|lower|shrank|dip(?:ped)?)\b",
    re.IGNORECASE,
)


def premise_sentence(question: str, result: Mapping[str, Any], lang: str, metric: str) -> str:
    """When a why-question says which way the metric moved and the data moved the other way ("为什么7月
    退款率升高" when it fell): a sentence that says so, before the attribution, so the answer never
    reads as if the premise held (English ends with a space before the next sentence). Empty when
    the question names no direction or the data agrees."""
    change = result.get("total_change")
    if not isinstance(change, (int, float)) or change == 0 or not math.isfinite(change):
        return ""
    up, down = bool(_ASKED_UP.search(question)), bool(_ASKED_DOWN.search(question))
    if up == down or (up and change > 0) or (down and change < 0):
        return ""
    if lang == "zh":
        return f"注意：问题说{metric}{'升高' if up else '下降'}了，但数据里它是{'下降' if change < 0 else '上升'}的。"
    return f"Note: the question says {metric} {'rose' if up else 'fell'}, but in the data it {'fell' if change < 0 else 'rose'}. "


def focus_sentence(result: dict[str, Any], focus: list[str], lang: str, group: str | None, *, total: bool = False) -> str:
    """What the anomaly scan says about the period the question asked about, first (``total``:
    a segment scan follows, so this sentence speaks of the total only)."""
    flagged = [label for label in result.get("anomalies") or [] if label in focus]
    span = focus[0] if len(focus) == 1 else f"{focus[0]}–{focus[-1]}" if lang == "en" else f"{focus[0]} 至 {focus[-1]}"
    who = f"{group}: " if group else ""
    if lang == "zh":
        whole = "总量" if total else ""
        return f"{who}{whole}在所问期间（{span}）" + (f"有异常：{'、'.join(flagged)}。" if flagged else "没有异常点。")
    whole = " the total" if total else ""
    found = f"shows anomalies: {', '.join(flagged)}. " if flagged else "shows no anomaly. "
    return f"{who}In the period asked about ({span}){whole} " + found


def reported_part(kind: str, result: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """The part of a result the summary speaks of: a forecast's periods asked about (the steps
    before them stay in the result)."""
    wanted = set(context.get("report_periods") or [])
    if kind != "forecast" or not wanted:
        return result
    series = [
        {**s, "forecast": [p for p in s.get("forecast") or [] if p.get("label") in wanted] or s.get("forecast") or []}
        for s in result.get("series") or []
    ]
    return {**result, "series": series}


def segment_sentence(hits: list[dict[str, Any]], scanned: list[dict[str, Any]], lang: str, labels: Mapping[str, str]) -> str:
    """Which members are anomalous in the month asked about, strongest first."""

    def dimension(name: str) -> str:
        return labels.get(name, name)

    if not hits:
        count = len(scanned)
        if lang == "zh":
            return f"逐项检查的 {count} 个细分在所问月份都没有异常。"
        return f"None of the {count} segments checked is anomalous in the month asked about."
    hits = sorted(hits, key=lambda h: abs(h["z"]), reverse=True)
    if lang == "zh":
        parts = [
            f"{dimension(h['dimension'])}「{h['member']}」{h['label']} 为 {h['value']:,.0f}，"
            f"预期约 {h['expected']:,.0f}（稳健 z = {h['z']:.1f}）"
            for h in hits
        ]
        return "按细分看，异常集中在：" + "；".join(parts) + "。"
    parts = [
        f"{dimension(h['dimension'])} '{h['member']}' in {h['label']}: {h['value']:,.0f} "
        f"against about {h['expected']:,.0f} expected (robust z = {h['z']:.1f})"
        for h in hits
    ]
    return "By segment, the anomaly sits in: " + "; ".join(parts) + "."


def catalog_labels(catalog: Any, lang: str) -> dict[str, str]:
    """Names of dimensions and measures in the question's language (a profile's features are measures)."""
    labels = {m.name: m.label(lang) for m in catalog.metrics}
    return {**labels, **{d.name: d.label(lang) for d in catalog.dimensions}}


def scope_prefix(intent: dict[str, Any] | None, lang: str) -> str:
    """The filters the question named, as the summary's first words ("武汉 · 医院：")."""
    filters = [f for f in (intent or {}).get("filters") or [] if f.get("op", "in") == "in"]
    values = [v for f in filters for v in f.get("values") or []]
    if not values:
        return ""
    return " · ".join(values) + ("：" if lang == "zh" else ": ")
