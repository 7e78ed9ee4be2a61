"""Request bodies as strict JSON: the one parser and the one walk every handler with a body uses.

``json.loads`` on its own accepts NaN and Infinity, turns 1e400 into inf, raises ValueError on an
integer over 4,300 digits, RecursionError on deep nesting, and lets a later duplicate key win.
Each of those is a 500 or a stored value that another JSON reader cannot read back. Here each is
a 400 that names the field, before any model or service sees the body.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from typing import Any

from memtool.errors import ValidationFailed

# Every route's body limit but the ones named in ``body_limit``.
MAX_BODY_BYTES = 64 * 1024
# Containers inside containers, counted from the body object (1). ``value`` has its own, lower
# limit (api/limits.py); this one keeps the walk and pydantic away from pathological nesting.
MAX_BODY_DEPTH = 40
# I-JSON (RFC 7493): integers every JSON reader (JavaScript included) reads back exactly.
MAX_SAFE_INTEGER = 2**53 - 1
# Non-integers: finite doubles inside DynamoDB's number range (1E-130 .. 9.99E+125); zero is fine.
MIN_FLOAT_MAGNITUDE = 1e-130
MAX_FLOAT_MAGNITUDE = 1e126

# C0 and C1 control characters except tab, newline and carriage return, plus lone surrogates
# (a JSON "\ud800" escape decodes to one, and nothing can encode it as UTF-8 afterwards).
_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
# The same rule as a JSON Schema (ECMA 262) pattern for the OpenAPI document.
PLAIN_TEXT_PATTERN = r"^[^\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]*$"


class BodyTooLarge(ValidationFailed):
    """A body over its route's limit: a 413, from the local server before the body is read and from
    the handler in Lambda (API Gateway's own limit is 10 MB, so there the handler is the check)."""

    code = "payload_too_large"

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"request body is larger than {limit:,} bytes (it is {size:,} bytes)", field="body")
        self.limit = limit


def body_limit(method: str, resource: str) -> int:
    """The largest body ``method`` on ``resource`` (the template's path: /memories/{id}) takes.

    PUT /model carries a semantic model, which may be up to ``MODEL_MAX_BYTES`` as stored (compact
    JSON, non-ASCII escaped); its body gets that plus the 64 KiB any body gets, for the envelope
    (``expected_version``) and the spaces a client's JSON puts where the stored form has none. The
    model's own size check runs on the parsed document, so this limit only keeps bodies bounded.
    """
    if method.upper() == "POST" and resource == "/sources":
        # A source's text (2 MiB of UTF-8) may grow in JSON: a quote or a newline is two bytes as an
        # escape, a CJK character three as UTF-8 and six as \uXXXX. Twice the text keeps the body
        # under Lambda's 6 MB request limit.
        from memtool.knowledge.sources import SOURCE_MAX_BYTES

        return 2 * SOURCE_MAX_BYTES + MAX_BODY_BYTES
    if method.upper() == "PUT" and resource == "/model":
        # imported here: only this route pays for the semantic package at a cold start
        from memtool.semantic.validation import MODEL_MAX_BYTES

        return MODEL_MAX_BYTES + MAX_BODY_BYTES
    return MAX_BODY_BYTES


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as plain text, or None when it can."""
    found = _FORBIDDEN.search(text)
    if found is None:
        return None
    char = found.group()
    if "\ud800" <= char <= "\udfff":
        return f"contains an unpaired surrogate (U+{ord(char):04X} at position {found.start()})"
    return (
        f"contains a control character (U+{ord(char):04X} at position {found.start()}); "
        "only tab, newline and carriage return are allowed"
    )


class _Refused:
    """A number literal the parser will not turn into a value; the walk reports it with its path."""

    __slots__ = ("literal", "reason")

    def __init__(self, literal: str, reason: str) -> None:
        self.literal = literal
        self.reason = reason


class _Object(dict[str, Any]):
    """A JSON object whose text repeated a key (the walk reports it with its path)."""

    duplicates: list[str]


def _parse_int(literal: str) -> int | _Refused:
    digits = literal.lstrip("-")
    # Decide on the digit count before int() can raise ValueError or burn CPU on 4,300+ digits.
    if len(digits) > len(str(MAX_SAFE_INTEGER)) or abs(number := int(literal)) > MAX_SAFE_INTEGER:
        return _Refused(_short(literal), f"integers must be within ±{MAX_SAFE_INTEGER} (2^53 - 1)")
    return number


def _parse_float(literal: str) -> float | _Refused:
    number = float(literal)
    if not math.isfinite(number):
        return _Refused(_short(literal), "overflows to infinity; numbers must be finite")
    if number != 0.0 and not MIN_FLOAT_MAGNITUDE <= abs(number) < MAX_FLOAT_MAGNITUDE:
        return _Refused(_short(literal), "is outside the storable range 1e-130 .. 1e126")
    return number


def _parse_constant(name: str) -> _Refused:
    return _Refused(name, "is not JSON; numbers must be finite")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) == len(pairs):
        return result
    marked = _Object(result)
    seen: set[str] = set()
    marked.duplicates = [k for k, _ in pairs if k in seen or seen.add(k)]  # type: ignore[func-returns-value]
    return marked


def _short(literal: str, limit: int = 40) -> str:
    return literal if len(literal) <= limit else f"{literal[:20]}…({len(literal)} characters)"


def parse_json(text: str) -> Any:
    """Parse ``text`` strictly and check every key, string and number in it; return the value."""
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
            object_pairs_hook=_pairs,
        )
    except json.JSONDecodeError as exc:
        message = f"request body is not valid JSON: {exc.msg} at position {exc.pos}"
        raise ValidationFailed(message, field="body") from exc
    except RecursionError as exc:
        raise ValidationFailed(f"request body is nested deeper than {MAX_BODY_DEPTH} levels", field="body") from exc
    check_tree(value)
    return value


def check_tree(value: Any, root: tuple[str, ...] = ()) -> None:
    """Walk a parsed body without recursion; the first problem raises ValidationFailed on its path."""
    stack: list[tuple[Any, tuple[str, ...], int]] = [(value, root, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth + 1 > MAX_BODY_DEPTH:
                raise ValidationFailed(f"request body is nested deeper than {MAX_BODY_DEPTH} levels", field="body")
            if isinstance(node, _Object) and node.duplicates:
                raise ValidationFailed(f"repeats the key {node.duplicates[0]!r}", field=_field(path))
            for key in node:
                problem = text_problem(key)
                if problem:
                    raise ValidationFailed(f"a key {problem}", field=_field(path))
            # Pushed in reverse so the walk, and so the error reported, follows the document order.
            stack.extend((node[key], (*path, key), depth + 1) for key in reversed(node))
        elif isinstance(node, list):
            if depth + 1 > MAX_BODY_DEPTH:
                raise ValidationFailed(f"request body is nested deeper than {MAX_BODY_DEPTH} levels", field="body")
            stack.extend((node[i], (*path, str(i)), depth + 1) for i in reversed(range(len(node))))
        elif isinstance(node, str):
            problem = text_problem(node)
            if problem:
                raise ValidationFailed(problem, field=_field(path))
        elif isinstance(node, _Refused):
            raise ValidationFailed(f"{node.literal} {node.reason}", field=_field(path))


def _field(path: tuple[str, ...]) -> str:
    return ".".join(path) or "body"


def read_body(body: str | None, *, base64_encoded: bool = False, max_bytes: int = MAX_BODY_BYTES) -> Any:
    """An API Gateway proxy body as a JSON object, or None when the request has no body.

    The body is JSON whatever the Content-Type says (``curl -d`` sends form encoding by default).
    ``max_bytes`` is the route's limit (``body_limit``); over it is ``BodyTooLarge``, a 413.
    """
    if body is None:
        return None
    if base64_encoded:
        try:
            raw = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValidationFailed("request body is not valid base64", field="body") from exc
        if len(raw) > max_bytes:
            raise BodyTooLarge(len(raw), max_bytes)
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationFailed(f"request body is not valid UTF-8 (byte {exc.start})", field="body") from exc
    elif (size := len(body.encode("utf-8", "surrogatepass"))) > max_bytes:
        raise BodyTooLarge(size, max_bytes)
    if body.strip() == "":
        return None
    value = parse_json(body)
    if not isinstance(value, dict):
        raise ValidationFailed("must be a JSON object", field="body")
    return value
