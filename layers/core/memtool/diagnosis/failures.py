"""Which kind of failure an episode had: from the warehouse's error code, the guard's refusal, or
what the user reported about an answer that ran."""

from __future__ import annotations

import json
import re
from typing import Any, cast, get_args

from memtool.diagnosis.model import Failure, FailureClass
from memtool.sql.errors import CODE_OF_ERROR_TYPE, ERROR_FOR_CODE


def _failure_class(code: str) -> FailureClass:
    if code not in get_args(FailureClass):
        raise AssertionError(f"the warehouse code {code!r} has no failure class in memtool.diagnosis.model")
    return cast(FailureClass, code)


# WarehouseError.code -> failure class (codes the adapters set from SQLSTATEs and engine errors): the
# case memtool.sql.errors types the code as, so read_only is a permission failure.
_EXECUTION_CODES: dict[str, FailureClass] = {code: _failure_class(cls.CODE) for code, cls in ERROR_FOR_CODE.items()}
# Messages of a generic database_error that still say which case it is (DuckDB, PostgreSQL/Redshift).
_BY_MESSAGE: tuple[tuple[re.Pattern[str], FailureClass], ...] = (
    (re.compile(r"division by zero|divide by zero|\[SQLSTATE 22012\]", re.I), "division_by_zero"),
    (
        re.compile(
            r"Conversion Error|Could not convert|cannot be cast|invalid input syntax|operator does not exist|"
            r"No function matches|type mismatch|\[SQLSTATE (42804|22P02|42883)\]",
            re.I,
        ),
        "type_mismatch",
    ),
)
# Guard refusals that mean "this name is not in the warehouse" when the allow-list is the live schema.
_GUARD_NAMES: dict[str, FailureClass] = {"forbidden_table": "undefined_table", "forbidden_column": "undefined_column"}


def execution_failure(code: str | None, message: str) -> Failure:
    kind = _EXECUTION_CODES.get(code or "")
    if kind is None:
        kind = next((k for pattern, k in _BY_MESSAGE if pattern.search(message)), None) or "database_error"
    return Failure(kind=kind, origin="execution", message=message, code=code)


def guard_failure(code: str | None, reason: str | None) -> Failure:
    """A guard refusal; an unknown table or column is classified as what it is, found by the guard."""
    kind = _GUARD_NAMES.get(code or "", "guard_rejection")
    return Failure(kind=kind, origin="guard", message=reason or "", code=code)


def logical_failure(*, expected: bool, row_count: int | None) -> Failure:
    if expected:
        return Failure(kind="expected_value", origin="logical", message="the user gave the value they expected")
    if row_count == 0:
        return Failure(kind="empty_result", origin="logical", message="the answer had no rows")
    return Failure(kind="reported_wrong", origin="logical", message="the user said the answer is wrong")


# Lambda errorType names the ask flow's Execute step raises, per warehouse error code (memtool.sql.errors).
ERROR_TYPE_CODES = CODE_OF_ERROR_TYPE


def from_step_error(raw: Any) -> Failure | None:
    """The failure in a Catch's ``$.error`` ({Error, Cause}) when it came from the warehouse."""
    if not isinstance(raw, dict):
        return None
    error_type = str(raw.get("Error") or "")
    if error_type not in ERROR_TYPE_CODES:
        return None
    message = ""
    cause = raw.get("Cause")
    if isinstance(cause, str):
        try:
            parsed = json.loads(cause)
        except ValueError:
            parsed = None
        message = str(parsed.get("errorMessage") or "") if isinstance(parsed, dict) else cause
    return execution_failure(ERROR_TYPE_CODES[error_type], message)
