"""Binding a new question's slot values into cached SQL, on the parsed tree (sqlglot), never by text.

A cached SQL came from a question whose slots (masking) held values: an entity's warehouse value,
a window's dates, a top-N number. Each value became literals in the SQL. Binding replaces exactly
those literal nodes with the new question's values. It refuses (``BindError`` with a reason)
rather than guess: a value the SQL does not hold, two slots that would rewrite the same literal
differently, or a slot (the unit) that changes more than a literal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

DIALECT = "redshift"


class BindError(ValueError):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def bind_sql(
    sql: str,
    old_slots: Sequence[dict[str, Any]],
    new_slots: Sequence[dict[str, Any]],
    *,
    old_intent: dict[str, Any] | None = None,
    new_intent: Any = None,
) -> str:
    import sqlglot

    strings, numbers = _literal_rewrites(old_slots, new_slots, old_intent=old_intent, new_intent=new_intent)
    tree = sqlglot.parse_one(sql, read=DIALECT)
    found = _replace_literals(tree, strings, numbers)
    missing = [old for old, new in strings.items() if ("s", old) not in found and old != new]
    missing += [str(old) for old, new in numbers.items() if ("n", old) not in found and old != new]
    if missing:
        raise BindError("unbound_slot", f"the cached SQL does not hold {', '.join(missing)}")
    return tree.sql(dialect=DIALECT, pretty=True)


def _literal_rewrites(
    old_slots: Sequence[dict[str, Any]],
    new_slots: Sequence[dict[str, Any]],
    *,
    old_intent: dict[str, Any] | None,
    new_intent: Any,
) -> tuple[dict[str, str], dict[int, int]]:
    """What each old literal becomes: string literals (entity values, window dates) and LIMIT numbers."""
    if len(old_slots) != len(new_slots):
        raise BindError("slot_set")
    strings: dict[str, str] = {}
    numbers: dict[int, int] = {}
    for old, new in zip(old_slots, new_slots, strict=True):
        _slot_rewrite(old, new, strings, numbers)
    old_comparison = (old_intent or {}).get("comparison") if isinstance(old_intent, dict) else None
    new_comparison = getattr(new_intent, "comparison", None)
    if old_comparison and new_comparison is not None:
        _rewrite(strings, str(old_comparison["window"]["start"]), new_comparison.window.start.isoformat())
        _rewrite(strings, str(old_comparison["window"]["end"]), new_comparison.window.end.isoformat())
    return strings, numbers


def _slot_rewrite(old: dict[str, Any], new: dict[str, Any], strings: dict[str, str], numbers: dict[int, int]) -> None:
    """The literals one slot rewrites; a slot of another kind, name or negation is another slot set."""
    if (old.get("kind"), old.get("name"), old.get("negated")) != (new.get("kind"), new.get("name"), new.get("negated")):
        raise BindError("slot_set")
    kind = old.get("kind")
    if kind == "entity":
        _rewrite(strings, str(old["value"]), str(new["value"]))
    elif kind == "window":
        _rewrite(strings, old["value"]["start"], new["value"]["start"])
        _rewrite(strings, old["value"]["end"], new["value"]["end"])
    elif kind == "n":
        _rewrite(numbers, int(old["value"]), int(new["value"]))
    elif kind == "unit":
        if old.get("value") != new.get("value"):
            raise BindError("unit", "another unit changes the SQL's arithmetic and column names, not a literal")
    else:
        raise BindError("slot_set", f"unknown slot kind {kind!r}")


def _rewrite(table: dict, old: Any, new: Any) -> None:
    """Record ``old -> new``; one literal that two slots would rewrite differently is ambiguous."""
    if old in table and table[old] != new:
        raise BindError("ambiguous", f"{old!r} would become both {table[old]!r} and {new!r}")
    table[old] = new


def _replace_literals(tree: Any, strings: dict[str, str], numbers: dict[int, int]) -> set[Any]:
    """Replace the string literals and LIMIT numbers to rewrite in ``tree``; what was found, as ("s"|"n", old)."""
    from sqlglot import exp

    found: set[Any] = set()
    for literal in list(tree.find_all(exp.Literal)):
        if literal.is_string and literal.this in strings:
            found.add(("s", literal.this))
            literal.replace(exp.Literal.string(strings[literal.this]))
        elif not literal.is_string and isinstance(literal.parent, exp.Limit):
            try:
                number = int(literal.this)
            except ValueError:
                continue
            if number in numbers:
                found.add(("n", number))
                literal.replace(exp.Literal.number(numbers[number]))
    return found


def same_sql(a: str, b: str) -> bool:
    """Two statements equal once parsed and printed the same way."""
    import sqlglot

    try:
        return sqlglot.parse_one(a, read=DIALECT).sql(dialect=DIALECT) == sqlglot.parse_one(b, read=DIALECT).sql(dialect=DIALECT)
    except Exception:  # noqa: BLE001 - what cannot be parsed is not the same
        return False
