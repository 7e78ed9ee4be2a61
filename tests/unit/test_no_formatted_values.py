"""No code path puts a value into SQL by string formatting (issue 21; docs/architecture.md, "Tenant walls").

A value reaches the warehouse as a bound parameter (``%s`` through the adapter) or as a literal
sqlglot builds and renders for the dialect (``memtool.sql.literals``). This test reads every module
of the library and the functions with ``ast`` and finds the shapes a formatted value takes in SQL:

- an f-string whose SQL text puts a placeholder between quotes: ``f"... = '{value}'"``;
- ``"... '%s' ..." % value`` and ``"... '{}' ...".format(value)`` in SQL text;
- quoting by hand: ``.replace("'", "''")``.

A control plants each shape in a file of its own and proves the scan finds it, so the scan cannot
pass by finding nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.support import ROOT

SOURCES = [ROOT / "layers" / "core" / "memtool", ROOT / "functions"]
SQL_WORDS = re.compile(r"\b(?:SELECT|FROM|WHERE|AND|OR|IN|NOT|LIKE|CAST|VALUES|JOIN|ON|HAVING|CASE|WHEN|THEN|ELSE|LIMIT|SET)\b")
QUOTED_FORMAT = re.compile(r"'(?:%s|%r|%d|\{[^{}]*\})'")


def formatted_values(source: str, name: str = "<planted>") -> list[str]:
    """Each place in ``source`` where a value is formatted between SQL quotes: ``name:line: what``."""
    found: list[str] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "{}" for part in node.values)
            if SQL_WORDS.search(text) and "'{}'" in text:
                found.append(f"{name}:{node.lineno}: f-string puts a value between quotes: {text[:80]!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _sql_text(node.left):
            found.append(f"{name}:{node.lineno}: %-formatting puts a value between quotes")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            if method == "format" and _sql_text(owner):
                found.append(f"{name}:{node.lineno}: str.format puts a value between quotes")
            if method == "replace" and [_constant(a) for a in node.args[:2]] == ["'", "''"]:
                found.append(f"{name}:{node.lineno}: quotes a value by hand (.replace(\"'\", \"''\"))")
    return found


def _constant(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _sql_text(node: ast.AST) -> bool:
    text = _constant(node)
    return isinstance(text, str) and bool(SQL_WORDS.search(text)) and bool(QUOTED_FORMAT.search(text))


def library_files() -> list[Path]:
    return sorted(path for folder in SOURCES for path in folder.rglob("*.py") if "__pycache__" not in path.parts)


def test_no_module_formats_a_value_into_sql() -> None:
    files = library_files()
    assert len(files) > 100  # the scan reads the whole library, not an empty folder
    found = [hit for path in files for hit in formatted_values(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert found == []


@pytest.mark.parametrize(
    "planted",
    [
        "sql = f\"SELECT * FROM t WHERE city = '{city}'\"",
        "sql = f\"WHERE d >= CAST('{start.isoformat()}' AS DATE)\"",
        "sql = \"SELECT 1 FROM t WHERE a IN ('%s')\" % value",
        "sql = \"SELECT 1 FROM t WHERE a = '{}'\".format(value)",
        "literal = \"'\" + str(value).replace(\"'\", \"''\") + \"'\"",
    ],
)
def test_the_scan_finds_a_planted_formatted_value(planted: str) -> None:
    assert len(formatted_values(planted)) == 1


@pytest.mark.parametrize(
    "honest",
    [
        "sql = f\"SELECT 1 FROM {table} WHERE {column} = %s LIMIT 1\"",  # a bound parameter
        "message = f\"There is no {name} '{value}' in the data.\"",  # a sentence, not SQL
        "sql = f\"WHERE {column} IN ({in_list(values)})\"",  # literals rendered by sqlglot
    ],
)
def test_the_scan_leaves_bound_parameters_and_sentences_alone(honest: str) -> None:
    assert formatted_values(honest) == []
