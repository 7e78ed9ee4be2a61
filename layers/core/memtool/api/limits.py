"""What the API accepts, as pydantic types: plain text, bounded JSON values, trimmed questions.

The figures here are the documented limits of the HTTP API (docs/memory.md and docs/asking.md);
the request models use these types so that validation and the OpenAPI document say the same.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, GetJsonSchemaHandler, StrictStr
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from memtool.api.json_body import PLAIN_TEXT_PATTERN, text_problem

VALUE_MAX_DEPTH = 32  # nested objects/arrays; {"a": 1} is 1 deep
VALUE_MAX_KEYS = 1000  # object keys counted across the whole value
VALUE_MAX_BYTES = 16 * 1024  # as compact JSON, UTF-8
QUESTION_MAX_CHARS = 2000  # after trimming surrounding whitespace


class _Documented:
    """Adds JSON Schema keywords to a type's schema without changing how it validates."""

    def __init__(self, **keywords: Any) -> None:
        self.keywords = keywords

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        for keyword, value in self.keywords.items():
            schema.setdefault(keyword, value)  # a field's own constraint (a stricter pattern) wins
        return schema


def _plain(text: str) -> str:
    problem = text_problem(text)
    if problem:
        raise ValueError(problem)
    return text


def _bounded_value(value: Any) -> Any:
    """``value`` stays small and shallow enough to store, index and show."""
    keys = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            depth += 1
            if depth > VALUE_MAX_DEPTH:
                raise ValueError(f"is nested deeper than {VALUE_MAX_DEPTH} levels")
            if isinstance(node, dict):
                keys += len(node)
                if keys > VALUE_MAX_KEYS:
                    raise ValueError(f"has more than {VALUE_MAX_KEYS} keys")
                stack.extend((item, depth) for item in node.values())
            else:
                stack.extend((item, depth) for item in node)
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > VALUE_MAX_BYTES:
        raise ValueError(f"is {size} bytes as JSON; the limit is {VALUE_MAX_BYTES} bytes")
    return value


def _question(text: str) -> str:
    trimmed = text.strip()
    if not trimmed:
        raise ValueError("must not be blank")
    if len(trimmed) > QUESTION_MAX_CHARS:
        raise ValueError(f"is {len(trimmed)} characters; the limit is {QUESTION_MAX_CHARS}")
    _readable_dates(trimmed)
    return trimmed


def _readable_dates(question: str) -> None:
    """A question naming a date memtool cannot read ("between 1900-01-01 and 9999-12-31") is a 400
    on ``question`` quoting the words, as the ask flow's parser would refuse it: never a flow that
    starts only to fail. The same reader on the same text (NFKC, single spaces: the parser's
    ``normalize``); relative windows ("the last 3000 years") count from the data's today."""
    import re
    import unicodedata
    from datetime import UTC, datetime

    # imported here: the time words' patterns load with the first question, not with every handler
    from memtool.errors import ValidationFailed
    from memtool.semantic.time_expressions import time_candidates
    from memtool.settings import get_settings

    text = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", question)).strip()
    try:
        time_candidates(text, get_settings().today or datetime.now(UTC).date())
    except ValidationFailed as refused:
        raise ValueError(refused.message) from refused


# A string without control characters (tab, newline and carriage return are fine) or lone surrogates.
PlainText = Annotated[StrictStr, AfterValidator(_plain), _Documented(pattern=PLAIN_TEXT_PATTERN)]

# Any JSON value within the limits above (numbers and strings were already checked by the parser).
JsonValue = Annotated[
    Any,
    AfterValidator(_bounded_value),
    _Documented(
        description=(
            f"any JSON value: at most {VALUE_MAX_DEPTH} levels deep, {VALUE_MAX_KEYS} object keys in all "
            f"and {VALUE_MAX_BYTES} bytes as compact JSON"
        )
    ),
]

# The question of POST /ask, trimmed; blank questions, and questions naming a date outside
# 1900-01-01 .. 2200-12-31 (semantic.time_expressions' READABLE_FROM .. READABLE_UNTIL), are refused.
Question = Annotated[
    PlainText,
    AfterValidator(_question),
    _Documented(
        minLength=1,
        maxLength=QUESTION_MAX_CHARS,
        description="trimmed; not blank; the dates it names are within 1900-01-01 to 2200-12-31",
    ),
]
