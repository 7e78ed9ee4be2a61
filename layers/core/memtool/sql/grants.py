"""What an operator granted a tenant: the warehouse tables it may read, as patterns.

A semantic model is what a curator writes; a grant is what the operator configured (a tenants-file
entry's ``tables:``, ``MEMTOOL_TENANT_TABLES``, a tenant's own Redshift secret). Where one warehouse
serves several tenants, the grant is the wall: ``PUT /model`` refuses a model naming a table outside
it, and the guardrails allow no table outside it whatever the model says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_PART = re.compile(r"[A-Za-z0-9_*?]+")


def table_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a table pattern (a name or ``schema.name``, each part with * and ?), or None."""
    parts = pattern.split(".") if isinstance(pattern, str) else []
    if not 1 <= len(parts) <= 3 or not all(_PART.fullmatch(part) for part in parts):
        return f"{pattern!r} is not a table name or pattern (letters, digits, _, * and ?, optionally schema.table)"
    return None


def table_granted(table: str, patterns: tuple[str, ...]) -> bool:
    """Whether the warehouse table ``table`` (as the model or the query names it) is one ``patterns`` grant.

    Each part is matched on its own, so a ``*`` never crosses a ``.``: ``sales_*`` grants
    ``sales_orders``, not ``sales_stage.payroll`` (another schema, or another database's catalog,
    whose name happens to start the same way). ``*`` grants every table of the default schema."""
    from fnmatch import fnmatchcase

    parts = table.lower().split(".")
    for pattern in patterns:
        wanted = pattern.lower().split(".")
        if len(wanted) == len(parts) and all(fnmatchcase(part, want) for part, want in zip(parts, wanted, strict=True)):
            return True
    return False


def normalized_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """Checked, lower-cased patterns; ValueError naming the first bad one."""
    out = []
    for pattern in patterns:
        problem = table_pattern_problem(pattern)
        if problem:
            raise ValueError(problem)
        out.append(pattern.lower())
    return tuple(out)


__all__ = ["normalized_patterns", "table_granted", "table_pattern_problem"]
