"""The warehouse's error vocabulary lives in memtool/sql/errors.py; the other maps derive from it.

Three readers: the Execute step raises a failure under the type of its case (memtool.flows.ask.steps),
the ask's public error comes from the type name (memtool.flows.ask.state), and diagnosis reads the
failure class from the code or the type name (memtool.diagnosis.failures). Each case is followed
here from the adapter's code to all three; a typed error class, or a table keyed by the type names
or by the codes, written anywhere else in the library fails the last tests.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from memtool.diagnosis.failures import ERROR_TYPE_CODES, execution_failure, from_step_error
from memtool.flows.ask.state import classify_failure
from memtool.sql import errors
from memtool.sql.errors import CODE_ALIASES, CODE_OF_ERROR_TYPE, ERROR_FOR_CODE, GENERIC_CODE, TYPED_ERRORS, typed
from memtool.sql.warehouse import WarehouseError

LIBRARY = Path(__file__).resolve().parents[2] / "layers" / "core" / "memtool"
CODES = [cls.CODE for cls in TYPED_ERRORS]
PUBLIC = {"unavailable": "warehouse_unavailable", "timeout": "warehouse_timeout"}


def test_the_cases_and_their_codes():
    assert CODES == [
        "undefined_column",
        "undefined_table",
        "syntax_error",
        "type_mismatch",
        "division_by_zero",
        "timeout",
        "permission",
        "undefined_function",
        "unavailable",
    ]
    assert all(issubclass(cls, WarehouseError) and cls.__name__.startswith("Warehouse") for cls in TYPED_ERRORS)
    assert len({cls.__name__ for cls in TYPED_ERRORS}) == len(TYPED_ERRORS)
    assert set(ERROR_FOR_CODE) == {*CODES, *CODE_ALIASES}
    assert {**{cls.__name__: cls.CODE for cls in TYPED_ERRORS}, "WarehouseError": GENERIC_CODE} == CODE_OF_ERROR_TYPE
    assert WarehouseError("x").code == GENERIC_CODE


@pytest.mark.parametrize("code", [*CODES, *CODE_ALIASES, GENERIC_CODE, "multiple_statements"])
def test_a_code_reaches_the_same_case_in_every_reader(code):
    case = CODE_ALIASES.get(code, code)
    raised = typed(WarehouseError("it failed", code=code, sql="SELECT 1"))
    assert raised.code == code and raised.sql == "SELECT 1" and str(raised) == "it failed"

    error_type = type(raised).__name__  # all a Lambda error keeps, with the message
    cause = json.dumps({"errorType": error_type, "errorMessage": "it failed"})
    if code in ERROR_FOR_CODE:
        assert case == type(raised).CODE
        assert CODE_OF_ERROR_TYPE[error_type] == case
        assert execution_failure(code, "it failed").kind == case
        failure = from_step_error({"Error": error_type, "Cause": cause})
        assert failure is not None and failure.kind == case
    else:  # no case of its own: the generic type, which diagnosis reads by its message
        assert type(raised) is WarehouseError
    public = classify_failure(error_type, cause, step="Execute")
    assert public.error == PUBLIC.get(case, "warehouse_error")


def test_an_error_already_of_its_type_is_raised_as_it_is():
    error = errors.WarehouseTimeout("slow", code="timeout")
    assert typed(error) is error


def test_diagnosis_reads_the_one_table():
    assert ERROR_TYPE_CODES is CODE_OF_ERROR_TYPE


WAREHOUSE_BASES = {"WarehouseError", "TypedWarehouseError"}


def second_copies(source: str) -> list[str]:
    """Typed warehouse errors, and strings naming them, and tables keyed by four or more codes."""
    names = {cls.__name__ for cls in TYPED_ERRORS}
    codes = {*CODES, *CODE_ALIASES}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id in WAREHOUSE_BASES for b in node.bases):
            found.append(f"class {node.name}")
        elif isinstance(node, ast.Constant) and node.value in names:
            found.append(f"{node.value!r}")
        elif isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(keys & codes) >= 4:
                found.append(f"a table keyed by codes at line {node.lineno}")
    return found


def test_the_vocabulary_is_written_only_in_sql_errors():
    found = {}
    for path in sorted(LIBRARY.rglob("*.py")):
        name = str(path.relative_to(LIBRARY))
        copies = second_copies(path.read_text(encoding="utf-8"))
        if copies and name != "sql/errors.py":
            found[name] = copies
    assert found == {}, f"the warehouse error vocabulary written again beside memtool/sql/errors.py: {found}"
    assert second_copies((LIBRARY / "sql" / "errors.py").read_text(encoding="utf-8"))  # the check sees the one home


def test_the_check_catches_a_second_copy():
    assert second_copies("class WarehouseTimeout(WarehouseError):\n    pass\n") == ["class WarehouseTimeout"]
    assert second_copies('CODES = {"WarehouseTimeout": "warehouse_timeout"}\n') == ["'WarehouseTimeout'"]
    table = 'T = {"undefined_column": 1, "undefined_table": 2, "syntax_error": 3, "timeout": 4}\n'
    assert second_copies(table) == ["a table keyed by codes at line 1"]
    assert second_copies('if code == "timeout":\n    pass\n') == []
