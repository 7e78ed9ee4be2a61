"""The warehouse's error vocabulary: one typed error per case, and the code each one carries.

An adapter raises ``WarehouseError`` with a ``code`` taken from the SQLSTATE or the engine's
error (``undefined_column``, ``timeout``, ...). AskFlow's Execute step re-raises it under the
type that names its case (``typed``), because a Lambda error keeps only the type name and the
message: after the Catch, the type name (the Lambda ``errorType``) is all that says which failure
it was. ``CODE_OF_ERROR_TYPE`` reads it back. The other tables derive from these two: the public
error of an ask (memtool.flows.ask.state) and the failure class diagnosis works on
(memtool.diagnosis.failures).
"""

from __future__ import annotations

from typing import ClassVar

from memtool.sql.warehouse import WarehouseError


class TypedWarehouseError(WarehouseError):
    """A WarehouseError whose type names its case; ``CODE`` is the code it stands for."""

    CODE: ClassVar[str]


class WarehouseUndefinedColumn(TypedWarehouseError):
    CODE = "undefined_column"


class WarehouseUndefinedTable(TypedWarehouseError):
    CODE = "undefined_table"


class WarehouseSyntaxError(TypedWarehouseError):
    CODE = "syntax_error"


class WarehouseTypeMismatch(TypedWarehouseError):
    CODE = "type_mismatch"


class WarehouseDivisionByZero(TypedWarehouseError):
    CODE = "division_by_zero"


class WarehouseTimeout(TypedWarehouseError):
    """The query ran past the statement timeout."""

    CODE = "timeout"


class WarehousePermission(TypedWarehouseError):
    CODE = "permission"


class WarehouseUndefinedFunction(TypedWarehouseError):
    CODE = "undefined_function"


class WarehouseUnavailable(TypedWarehouseError):
    """The warehouse could not be opened or reached (its Lambda errorType names the case)."""

    CODE = "unavailable"


TYPED_ERRORS: tuple[type[TypedWarehouseError], ...] = (
    WarehouseUndefinedColumn,
    WarehouseUndefinedTable,
    WarehouseSyntaxError,
    WarehouseTypeMismatch,
    WarehouseDivisionByZero,
    WarehouseTimeout,
    WarehousePermission,
    WarehouseUndefinedFunction,
    WarehouseUnavailable,
)
# Codes that are another case under a second name: a read-only refusal is a permission failure.
CODE_ALIASES: dict[str, str] = {"read_only": "permission"}
# A WarehouseError that is none of the typed cases (an engine error no SQLSTATE names).
GENERIC_CODE = "database_error"

# WarehouseError.code -> the type the Execute step raises it as.
ERROR_FOR_CODE: dict[str, type[TypedWarehouseError]] = {cls.CODE: cls for cls in TYPED_ERRORS}
ERROR_FOR_CODE.update({alias: ERROR_FOR_CODE[code] for alias, code in CODE_ALIASES.items()})

# The Lambda errorType of a warehouse failure -> its code (the generic WarehouseError included).
CODE_OF_ERROR_TYPE: dict[str, str] = {cls.__name__: cls.CODE for cls in TYPED_ERRORS} | {WarehouseError.__name__: GENERIC_CODE}


def typed(exc: WarehouseError) -> WarehouseError:
    """The same failure under a type that says which case it is (a Lambda error keeps only the
    type name and the message, so the code would be lost otherwise); a code with no case, or an
    error already of its type, is returned as it is."""
    cls = ERROR_FOR_CODE.get(exc.code)
    if cls is None or isinstance(exc, cls):
        return exc
    return cls(str(exc), code=exc.code, sql=exc.sql)


__all__ = [
    "CODE_ALIASES",
    "CODE_OF_ERROR_TYPE",
    "ERROR_FOR_CODE",
    "GENERIC_CODE",
    "TYPED_ERRORS",
    "TypedWarehouseError",
    "WarehouseDivisionByZero",
    "WarehouseError",
    "WarehousePermission",
    "WarehouseSyntaxError",
    "WarehouseTimeout",
    "WarehouseTypeMismatch",
    "WarehouseUnavailable",
    "WarehouseUndefinedColumn",
    "WarehouseUndefinedFunction",
    "WarehouseUndefinedTable",
    "typed",
]
