"""What an operator granted a tenant: the warehouse tables it may read, as patterns.

A semantic model is what a curator writes; a grant is what the operator configured (a tenants-file
entry's ``tables:``, ``MEMTOOL_TENANT_TABLES``, a tenant's own Redshift secret). Where one warehouse
serves several tenants, the grant is the wall: ``PUT /model`` refuses a model naming a table outside
it, and the guardrails allow no table outside it whatever the model says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_PATTERN = re.compile(r"^[A-Za-z0-9_*?]+(?:\.[A-Za-z0-9_*?]+){0,2}$")


def table_pattern_problem(pattern: str) -> str | None:
    """Why ``pattern`` is not a table pattern (a name, ``schema.name``, with * and ?), or None."""
    if not isinstance(pattern, str) or not _PATTERN.match(pattern):
        return f"{pattern!r} is not a table name or pattern (letters, digits, _, * and ?, optionally schema.table)"
    if pattern.strip("*?.") == "":
        return f"{pattern!r} would grant every table: name the tables (or a prefix such as dim_*)"
    return None


def table_granted(table: str, patterns: tuple[str, ...]) -> bool:
    """Whether the warehouse table ``table`` (as the model or the query names it) is one ``patterns`` grant."""
    from fnmatch import fnmatchcase

    name = table.lower()
    return any(fnmatchcase(name, p) for p in patterns)


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
