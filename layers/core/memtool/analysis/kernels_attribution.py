"""The analysis kernels' attribution: a change split exactly into each member's additive part, and
the rate/mix attribution of a ratio's change (each segment's own rate against the mix).

Shipped into the sandbox after ``kernels_tables`` and before ``kernels`` (see
``memtool.analysis.kernels``): the standard library and numpy only, and its sibling by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction
from typing import Any

from memtool.analysis.kernels_tables import _CENT, KernelInputError, as_float, period_label, table_column

# ---------------------------------------------------------------------------------------------
# Additive attribution
# ---------------------------------------------------------------------------------------------


def _decimal(value: float | int | Decimal | str) -> Decimal:
    # repr of a float is its shortest round-tripping decimal, so 0.1 stays 0.1 and not 0.1000…055
    return value if isinstance(value, Decimal) else Decimal(repr(value) if isinstance(value, float) else str(value))


def _cents(value: Decimal) -> Decimal:
    return value.quantize(_CENT, rounding=ROUND_HALF_EVEN)


def additive_attribution(before: Mapping[str, float | Decimal], after: Mapping[str, float | Decimal]) -> list[dict[str, Any]]:
    """Each member's change between two periods, in cents, summing exactly to the total change.

    Deltas are rounded to cents; the rounding remainder (a few cents at most) goes to the member
    with the largest absolute change, where it distorts the least. Members are ordered by the size
    of their change. ``share`` is the member's part of the total change (None when it is zero).
    """
    members = list(dict.fromkeys([*before, *after]))
    b = {m: _decimal(before.get(m, 0)) for m in members}
    a = {m: _decimal(after.get(m, 0)) for m in members}
    total = _cents(sum(a.values(), Decimal(0)) - sum(b.values(), Decimal(0)))
    deltas = {m: _cents(a[m] - b[m]) for m in members}
    remainder = total - sum(deltas.values(), Decimal(0))
    if members and remainder:
        largest = max(members, key=lambda m: (abs(deltas[m]), m))
        deltas[largest] += remainder
    ordered = sorted(members, key=lambda m: (-abs(deltas[m]), m))
    return [
        {
            "member": m,
            "before": float(_cents(b[m])),
            "after": float(_cents(a[m])),
            "delta": float(deltas[m]),
            "share": float(deltas[m] / total) if total else None,
        }
        for m in ordered
    ]


def _largest_moves(contributions: Sequence[Mapping[str, Any]]) -> tuple[Any, Any]:
    """The members with the largest increase and the largest decrease (None where none moved so)."""
    rising = [c for c in contributions if c["delta"] > 0]
    falling = [c for c in contributions if c["delta"] < 0]
    largest_increase = max(rising, key=lambda c: c["delta"])["member"] if rising else None
    largest_decrease = min(falling, key=lambda c: c["delta"])["member"] if falling else None
    return largest_increase, largest_decrease


def _attribution_periods(known: Sequence[str], before_period: str | None, after_period: str | None) -> tuple[str, str]:
    """The two periods compared, the last two in the data unless named; each must have rows."""
    if before_period is None or after_period is None:
        if len(known) < 2:
            raise KernelInputError(f"attribution needs two periods; the data has {known}", field="period_column")
        before_period, after_period = before_period or known[-2], after_period or known[-1]
    before_period, after_period = period_label(before_period), period_label(after_period)
    for name, chosen in (("before_period", before_period), ("after_period", after_period)):
        if chosen not in known:
            raise KernelInputError(f"{name}: no rows for period {chosen!r}; the periods are {known}", unanswerable=True, field=name)
    return before_period, after_period


def _dimension_attribution(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    dimension: str,
    periods: Sequence[str],
    values: Sequence[Decimal],
    before_period: str,
    after_period: str,
) -> dict[str, Any]:
    """One dimension's part of the ``AttributionResult``: its members' contributions."""
    members = [str(m) for m in table_column(columns, rows, dimension, field="dimensions")]
    before: dict[str, Decimal] = {}
    after: dict[str, Decimal] = {}
    for member, period, value in zip(members, periods, values, strict=True):
        if period == before_period:
            before[member] = before.get(member, Decimal(0)) + value
        elif period == after_period:
            after[member] = after.get(member, Decimal(0)) + value
    contributions = additive_attribution(before, after)
    largest_increase, largest_decrease = _largest_moves(contributions)
    return {
        "dimension": dimension,
        "contributions": contributions,
        "largest_increase": largest_increase,
        "largest_decrease": largest_decrease,
    }


def attribution_report(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    period_column: str,
    value_column: str,
    dimensions: Sequence[str],
    before_period: str | None = None,
    after_period: str | None = None,
) -> dict[str, Any]:
    """The ``AttributionResult`` shape: per dimension, its members' contributions between two
    periods, every dimension's parts summing exactly to the same total change.

    The periods default to the last two in the data.
    """
    if not dimensions:
        raise KernelInputError("name at least one dimension column", field="dimensions")
    periods = [period_label(v) for v in table_column(columns, rows, period_column, field="period_column")]
    raw_values = table_column(columns, rows, value_column, field="value_column")
    values = [_decimal(as_float(v, field=f"value_column ({value_column})") if not isinstance(v, Decimal) else v) for v in raw_values]
    before_period, after_period = _attribution_periods(sorted(set(periods)), before_period, after_period)
    before_total = sum((v for v, p in zip(values, periods, strict=True) if p == before_period), Decimal(0))
    after_total = sum((v for v, p in zip(values, periods, strict=True) if p == after_period), Decimal(0))
    parts = [_dimension_attribution(columns, rows, dimension, periods, values, before_period, after_period) for dimension in dimensions]
    return {
        "before_period": before_period,
        "after_period": after_period,
        "before_total": float(_cents(before_total)),
        "after_total": float(_cents(after_total)),
        "total_change": float(_cents(after_total) - _cents(before_total)),
        "dimensions": parts,
    }


# ---------------------------------------------------------------------------------------------
# Rate/mix attribution: the change of a ratio split into each segment's own rate and the mix
# ---------------------------------------------------------------------------------------------


def _exact(value: Any, *, field: str) -> Fraction:
    """A JSON cell as an exact rational: a Decimal or a numeric string as written, a float as its
    shortest round-tripping decimal (so 12345.67 is 1234567/100, not the binary neighbour)."""
    if isinstance(value, bool) or value is None:
        raise KernelInputError(f"{field}: {value!r} is not a number", field=field)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise KernelInputError(f"{field}: {value!r} is not a finite number", field=field)
        return Fraction(value)
    as_float(value, field=field)  # a word, NaN or infinity is refused here
    try:
        return Fraction(_decimal(value if isinstance(value, float) else str(value).strip()))
    except (ArithmeticError, ValueError):
        raise KernelInputError(f"{field}: {value!r} is not a number", field=field) from None


def rate_mix_parts(
    before: Mapping[str, tuple[Fraction, Fraction]],
    after: Mapping[str, tuple[Fraction, Fraction]],
    before_total: tuple[Fraction, Fraction],
    after_total: tuple[Fraction, Fraction],
    *,
    rounding: Fraction = Fraction(0),
) -> list[dict[str, Any]]:
    """The symmetric (Shapley) rate/mix decomposition of a ratio's change, in exact rationals.

    The whole's ratio is R = N / D, each segment's r_i = n_i / d_i with weight w_i = d_i / D, so
    R = Σ w_i r_i whenever the segments' numerators add up to N. Between two periods each
    segment's w_i r_i changes by exactly rate_i + mix_i, where rate_i = w̄_i Δr_i (its own ratio
    moved, at its average weight) and mix_i = r̄_i Δw_i (its weight moved, at its average ratio),
    bars being the two periods' mean; so the parts sum exactly to ΔR. A segment absent in one
    period (d_i = 0) keeps the other period's ratio there: it enters or leaves as pure mix.

    The weights need not sum to 1: where every segment's denominator is the whole's (refunds by
    reason over all sales) they are all 1 and the change is all rate; where segments overlap (an
    order in several products) they sum to more, and the parts still sum to ΔR. Segments whose
    numerators do not add up to the whole's are refused (KernelInputError): their parts would not.
    ``rounding`` is how far one segment's numerator may be off from its query's rounding (half a
    cent for money rounded to cents): within it, the remainder goes to the largest segment.
    """
    (n0, d0), (n1, d1) = before_total, after_total
    if d0 == 0 or d1 == 0:
        raise KernelInputError("the whole's denominator is 0 in a period: its ratio is undefined", field="totals", unanswerable=True)
    zero = (Fraction(0), Fraction(0))
    members = list(dict.fromkeys([*before, *after]))
    before, after = dict(before), dict(after)
    for label, segments, whole in (("before", before, n0), ("after", after, n1)):
        summed = sum((segments[m][0] for m in segments), Fraction(0))
        slack = rounding * len(segments) + abs(whole) / 10**12
        if abs(summed - whole) > slack:
            raise KernelInputError(
                f"the segments' numerators add up to {float(summed)!r} {label}, not the whole's {float(whole)!r}: "
                "they do not partition it",
                field="rows",
                unanswerable=True,
            )
        if summed != whole:  # the queries' own rounding: the remainder goes where it distorts least
            largest = max(segments, key=lambda m: (abs(segments[m][0]), m))
            n, d = segments[largest]
            segments[largest] = (n + whole - summed, d)
    parts = []
    for m in members:
        (a0, b0), (a1, b1) = before.get(m, zero), after.get(m, zero)
        for n, d, label in ((a0, b0, "before"), (a1, b1, "after")):
            if d < 0 or (d == 0 and n != 0):
                raise KernelInputError(
                    f"segment {m!r} has numerator {float(n)!r} over denominator {float(d)!r} {label}", field="rows", unanswerable=True
                )
        if b0 == 0 and b1 == 0:
            continue  # in neither period: no part
        r0 = a0 / b0 if b0 else a1 / b1
        r1 = a1 / b1 if b1 else r0
        w0, w1 = b0 / d0, b1 / d1
        rate = (w0 + w1) / 2 * (r1 - r0)
        mix = (r0 + r1) / 2 * (w1 - w0)
        parts.append(
            {
                "member": m,
                "numerator": (a0, a1),
                "denominator": (b0, b1),
                "ratio": (a0 / b0 if b0 else None, a1 / b1 if b1 else None),
                "weight": (w0, w1),
                "rate_effect": rate,
                "mix_effect": mix,
                "delta": rate + mix,
            }
        )
    return parts


def _maybe(value: Fraction | None) -> float | None:
    return None if value is None else float(value)


_RatePair = tuple[Fraction, Fraction]  # (numerator, denominator)


def _rate_rows(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    period_column: str,
    dimension_column: str,
    member_column: str,
    numerator_column: str,
    denominator_column: str,
) -> list[tuple[str, str, str, Fraction, Fraction]]:
    """Each row's (dimension, member, period, numerator, denominator), the numbers exact."""
    periods = [period_label(v) for v in table_column(columns, rows, period_column, field="period_column")]
    dimensions = [str(v) for v in table_column(columns, rows, dimension_column, field="dimension_column")]
    members = ["(none)" if v is None else str(v) for v in table_column(columns, rows, member_column, field="member_column")]
    numerators = [_exact(v, field="numerator_column") for v in table_column(columns, rows, numerator_column, field="numerator_column")]
    denominators = [
        _exact(v, field="denominator_column") for v in table_column(columns, rows, denominator_column, field="denominator_column")
    ]
    return list(zip(dimensions, members, periods, numerators, denominators, strict=True))


def _rate_totals(totals: Mapping[str, Sequence[Any]], before_period: str, after_period: str) -> dict[str, _RatePair]:
    """The whole's exact (numerator, denominator) in each of the two periods; both denominators non-zero."""
    whole: dict[str, _RatePair] = {}
    for name, chosen in (("before_period", before_period), ("after_period", after_period)):
        pair = totals.get(chosen)
        if pair is None or len(pair) != 2:
            raise KernelInputError(f"{name}: no [numerator, denominator] total for period {chosen!r}", field="totals")
        whole[chosen] = (_exact(pair[0], field="totals"), _exact(pair[1], field="totals"))
    if whole[before_period][1] == 0 or whole[after_period][1] == 0:
        raise KernelInputError("the whole's denominator is 0 in a period: its ratio is undefined", field="totals", unanswerable=True)
    return whole


def _rate_sides(
    records: Sequence[tuple[str, str, str, Fraction, Fraction]], before_period: str, after_period: str, shared_denominator: Sequence[str]
) -> dict[str, dict[str, dict[str, _RatePair]]]:
    """Per dimension and period, each member's summed (numerator, denominator); a dimension in
    ``shared_denominator`` keeps the whole's denominator rather than summing it."""
    grouped: dict[str, dict[str, dict[str, _RatePair]]] = {}
    for dimension, member, period, n, d in records:
        if period not in (before_period, after_period):
            continue
        side = grouped.setdefault(dimension, {before_period: {}, after_period: {}})[period]
        old_n, old_d = side.get(member, (Fraction(0), Fraction(0)))
        side[member] = (old_n + n, d if dimension in shared_denominator else old_d + d)
    return grouped


def _denominators_kind(
    dimension: str, parts: Sequence[Mapping[str, Any]], shared_denominator: Sequence[str], d0: Fraction, d1: Fraction
) -> str:
    """How a dimension's denominators relate to the whole's: shared, partition, overlapping or partial."""
    weights = [sum((p["denominator"][i] for p in parts), Fraction(0)) for i in (0, 1)]
    if dimension in shared_denominator:
        return "shared"
    if weights == [d0, d1]:
        return "partition"
    return "overlapping" if weights[0] > d0 or weights[1] > d1 else "partial"


def _rate_contribution(p: Mapping[str, Any], change: Fraction) -> dict[str, Any]:
    """One member's entry of the rate/mix ``contributions``, in floats."""
    return {
        "member": p["member"],
        "before": _maybe(p["ratio"][0]),
        "after": _maybe(p["ratio"][1]),
        "delta": float(p["delta"]),
        "share": float(p["delta"] / change) if change else None,
        "rate_effect": float(p["rate_effect"]),
        "mix_effect": float(p["mix_effect"]),
        "weight_before": float(p["weight"][0]),
        "weight_after": float(p["weight"][1]),
        "numerator_before": float(p["numerator"][0]),
        "numerator_after": float(p["numerator"][1]),
        "denominator_before": float(p["denominator"][0]),
        "denominator_after": float(p["denominator"][1]),
    }


def _rate_dimension(dimension: str, parts: Sequence[Mapping[str, Any]], change: Fraction, denominators_are: str) -> dict[str, Any]:
    """One dimension's part of the rate/mix report: its contributions and its summed effects."""
    contributions = [_rate_contribution(p, change) for p in parts]
    largest_increase, largest_decrease = _largest_moves(contributions)
    return {
        "dimension": dimension,
        "contributions": contributions,
        "largest_increase": largest_increase,
        "largest_decrease": largest_decrease,
        "rate_effect": float(sum((p["rate_effect"] for p in parts), Fraction(0))),
        "mix_effect": float(sum((p["mix_effect"] for p in parts), Fraction(0))),
        "denominators": denominators_are,
    }


def _biggest_rate_part(parts_out: Sequence[Mapping[str, Any]], change: Fraction) -> dict[str, Any] | None:
    """The largest single rate or mix effect of any member (rate first on a tie), with its share."""
    candidates = [
        {"dimension": d["dimension"], "member": c["member"], "effect": effect, "value": c[f"{effect}_effect"]}
        for d in parts_out
        for c in d["contributions"]
        for effect in ("rate", "mix")
        if c[f"{effect}_effect"] != 0
    ]
    biggest = max(candidates, key=lambda p: (abs(p["value"]), p["effect"] == "rate"), default=None)
    if biggest is not None:
        biggest["share"] = biggest["value"] / float(change) if change else None
    return biggest


def rate_attribution_report(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    period_column: str,
    dimension_column: str,
    member_column: str,
    numerator_column: str,
    denominator_column: str,
    totals: Mapping[str, Sequence[Any]],
    before_period: str,
    after_period: str,
    shared_denominator: Sequence[str] = (),
    rounding: float = 0.0,
) -> dict[str, Any]:
    """The attribution of a ratio's change (refund rate, conversion, average order value): per
    dimension, each member's rate effect and mix effect (``rate_mix_parts``), which sum to the
    total change; the ``AttributionResult`` shape (each member's ``before``/``after`` are its
    ratios and ``delta`` its rate + mix), with ``method: "rate_mix"`` and the parts besides.

    ``rows`` hold one row per (period, dimension, member) with the member's numerator and
    denominator; ``totals`` the whole's ``[numerator, denominator]`` per period. A dimension in
    ``shared_denominator`` has the whole's denominator for every member (refunds by reason over all
    sales). A dimension whose parts cannot sum to the change is listed under ``skipped`` with the
    reason; with none left the report is refused. ``rounding`` (see ``rate_mix_parts``) is how far
    a member's numerator may be off from the rounding of the query that read it.
    """
    records = _rate_rows(
        columns,
        rows,
        period_column=period_column,
        dimension_column=dimension_column,
        member_column=member_column,
        numerator_column=numerator_column,
        denominator_column=denominator_column,
    )
    before_period, after_period = period_label(before_period), period_label(after_period)
    whole = _rate_totals(totals, before_period, after_period)
    (n0, d0), (n1, d1) = whole[before_period], whole[after_period]
    r0, r1 = n0 / d0, n1 / d1
    change = r1 - r0
    slack = _exact(rounding, field="rounding")
    parts_out: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for dimension, sides in _rate_sides(records, before_period, after_period, shared_denominator).items():
        try:
            parts = rate_mix_parts(
                sides[before_period], sides[after_period], whole[before_period], whole[after_period], rounding=slack
            )
        except KernelInputError as error:
            skipped.append({"dimension": dimension, "reason": str(error)})
            continue
        parts.sort(key=lambda p: (-abs(p["delta"]), p["member"]))
        parts_out.append(_rate_dimension(dimension, parts, change, _denominators_kind(dimension, parts, shared_denominator, d0, d1)))
    if not parts_out:
        reasons = "; ".join(f"{s['dimension']}: {s['reason']}" for s in skipped) or "no dimension has rows for the two periods"
        raise KernelInputError(f"no dimension splits the change into parts that add up ({reasons})", field="rows", unanswerable=True)
    return {
        "method": "rate_mix",
        "before_period": before_period,
        "after_period": after_period,
        "before_total": float(r0),
        "after_total": float(r1),
        "total_change": float(change),
        "numerator": {"column": numerator_column, "before": float(n0), "after": float(n1)},
        "denominator": {"column": denominator_column, "before": float(d0), "after": float(d1)},
        "dimensions": parts_out,
        "biggest_part": _biggest_rate_part(parts_out, change),
        "skipped": skipped,
    }
