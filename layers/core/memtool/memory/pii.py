"""PII redaction: mask phone numbers, e-mails, Chinese ID numbers and bank cards before memory is stored or indexed.

The redactor is deterministic, pure and never raises on ``str`` input. Matches are
replaced by fixed tokens (``[PHONE]``, ``[EMAIL]``, ``[CN_ID]``, ``[BANK_CARD]``); the
tokens contain no digits and no ``@``, so redacting already redacted text is a no-op.

Passes run in a fixed priority order, each on the output of the previous one:

1. e-mail addresses (so ``13812345678@163.com`` is one e-mail, not a phone);
2. 18-digit resident ID numbers (checksum + birth date validated), before bank
   cards so a valid ID is always counted as ``cn_id``;
3. bank card numbers (issuer prefix + length + Luhn);
4. phone numbers (CN mobile, then ``+``-prefixed international numbers).

Heuristics against false positives (all digit patterns):

* A candidate must not be part of a longer alphanumeric token: it may not touch an
  ASCII digit or letter on either side (hashes, UUIDs, ``order12345...``, digit runs
  such as ``202611291381234567`` never yield a phone). CJK characters and
  punctuation around a number are fine (``电话13812345678谢谢``).
* A candidate may not be the integer or fractional part of a decimal number
  (``13812345678.50`` / ``0.4111111111111111`` are amounts, not PII).
* Order-id context: a bank card or CN mobile candidate immediately preceded by an
  order/reference label (``订单号``, ``订单``, ``单号``, ``流水号``, ``交易号``, ``运单号``,
  ``order``, ``order id``, ``order no.``, ``ref``, ``txn``, ``invoice``, ``tracking``,
  ``#`` ... optionally followed by ``:``/``：``/``=``/``#``/``为``/``是``) is treated as an
  identifier, not PII. A card/phone label directly before the ``#`` (``card #``,
  ``phone #``, ``卡号#``) overrides this. Resident IDs are not subject to the
  order-id heuristic: the checksum + birth-date validation is already strict.
* An 18-digit run that is shaped like a resident ID (valid birth date at positions
  7-14) but fails the ID checksum is not re-interpreted as a bank card.
* Bank cards need a known issuer prefix with a length valid for that issuer (e.g.
  Mastercard is 16 digits only), which keeps date-led order ids (``2026...``),
  timestamps (``17...``) and ``86``/``0086``-prefixed phones out.
* International phones need a leading ``+`` not glued to a letter (``UTC+8`` is an
  offset), 8-15 digits in total (at least 10 when written without separators),
  and must not contain a ``YYYY-MM-DD`` style date.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import Any

__all__ = ["PII_RULES_VERSION", "PiiKind", "Redaction", "TOKENS", "redact", "redact_many", "scrub_fields"]

# Raise this when a rule below changes what is caught: maintenance's pii_rescan then scans every
# stored memory again once (docs/maintenance.md), and redacts what the new rules catch.
PII_RULES_VERSION = 1


class PiiKind(StrEnum):
    """Kinds of personal information the redactor masks."""

    PHONE = "phone"
    EMAIL = "email"
    CN_ID = "cn_id"
    BANK_CARD = "bank_card"


TOKENS: Mapping[PiiKind, str] = {
    PiiKind.PHONE: "[PHONE]",
    PiiKind.EMAIL: "[EMAIL]",
    PiiKind.CN_ID: "[CN_ID]",
    PiiKind.BANK_CARD: "[BANK_CARD]",
}


@dataclass(frozen=True)
class Redaction:
    """The redacted text and how many items of each kind were masked."""

    text: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _zero_counts() -> dict[str, int]:
    return {kind.value: 0 for kind in PiiKind}


# --------------------------------------------------------------------------- regexes

# Not glued to an alphanumeric token, not the fractional part of a decimal number.
_LEFT = r"(?<![0-9A-Za-z])(?<![0-9]\.)"
# Not glued to an alphanumeric token, not the integer part of a decimal number.
_RIGHT = r"(?![0-9A-Za-z])(?!\.[0-9])"

_EMAIL_RE = re.compile(
    r"(?<![A-Za-z0-9._%+\-])"
    r"[A-Za-z0-9._%+\-]+"
    r"@"
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,24}"
)

_CN_ID_RE = re.compile(
    _LEFT
    + r"[1-9][0-9]{5}(?P<sep>[ \-]?)"
    r"(?P<birth>(?:19|20)[0-9]{2}|2100)(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
    r"(?P=sep)[0-9]{3}[0-9Xx]" + _RIGHT
)

_CARD_RE = re.compile(
    r"(?<!\+)" + _LEFT + r"(?:"
    r"[0-9]{13,19}"
    # 4-4-4-(1..4)[-(1..3)] groups, consistent single space or dash.
    r"|[0-9]{4}(?P<s1>[ \-])[0-9]{4}(?P=s1)[0-9]{4}(?P=s1)[0-9]{1,4}(?:(?P=s1)[0-9]{1,3})?"
    # Amex 4-6-5 / Diners 4-6-4.
    r"|[0-9]{4}(?P<s2>[ \-])[0-9]{6}(?P=s2)[0-9]{4,5}"
    r")" + _RIGHT
)

_CN_MOBILE_RE = re.compile(
    r"(?<!\+)" + _LEFT + r"(?:(?:\+|00)?86[ \-]?|\(\+?86\)[ \-]?)?"
    r"1[3-9][0-9](?:[0-9]{8}|[ \-][0-9]{4}[ \-][0-9]{4})" + _RIGHT
)

_INTL_PHONE_RE = re.compile(
    r"(?<![0-9A-Za-z+])\+[1-9](?:[ .\-]?(?:\([0-9]{1,4}\)|[0-9])){6,14}" + _RIGHT
)

_DATE_IN_PHONE_RE = re.compile(r"(?:19|20)[0-9]{2}[\-./](?:0?[1-9]|1[0-2])[\-./]")

_ORDER_CONTEXT_RE = re.compile(
    r"(?:订单编号|订单号码|订单号|订单|交易单号|单号|流水号|交易号|运单号|"
    r"(?<![A-Za-z])(?:order|ref|reference|txn|transaction|tracking|invoice|shipment|waybill)"
    r"(?:[ _\-]*(?:id|no|num|number|code))?\.?"
    r"|#)"
    r"[\s:：=#]*(?:为|是)?[\s:：=#]*$",
    re.IGNORECASE,
)

_PII_LABEL_CONTEXT_RE = re.compile(
    r"(?:(?<![A-Za-z])(?:card|phone|tel|telephone|mobile|cell)(?:[ _\-]*(?:no|num|number))?\.?"
    r"|卡号|卡|手机号码|手机号|手机|电话号码|电话)"
    r"[\s:：=#]*(?:为|是)?[\s:：=#]*$",
    re.IGNORECASE,
)

_CONTEXT_WINDOW = 40
_HAS_CANDIDATE_RE = re.compile(r"[0-9@]")

# --------------------------------------------------------------------------- validators

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK_CHARS = "10X98765432"


def _plausible_birth_date(yyyymmdd: str) -> bool:
    try:
        year, month, day = int(yyyymmdd[:4]), int(yyyymmdd[4:6]), int(yyyymmdd[6:8])
        if not 1900 <= year <= 2100:
            return False
        date(year, month, day)
    except ValueError:
        return False
    return True


def _cn_id_valid(id18: str) -> bool:
    if len(id18) != 18 or not id18[:17].isdigit():
        return False
    if not _plausible_birth_date(id18[6:14]):
        return False
    total = sum(int(ch) * w for ch, w in zip(id18[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK_CHARS[total % 11] == id18[17].upper()


def _luhn_valid(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


# (lowest prefix, highest prefix, allowed lengths); prefixes in a row have equal length.
_ANY = frozenset(range(13, 20))
_16_19 = frozenset(range(16, 20))
_ISSUERS: tuple[tuple[str, str, frozenset[int]], ...] = (
    ("4", "4", frozenset({13, 16, 19})),  # Visa
    ("51", "55", frozenset({16})),  # Mastercard
    ("2221", "2720", frozenset({16})),  # Mastercard 2-series
    ("34", "34", frozenset({15})),  # Amex
    ("37", "37", frozenset({15})),  # Amex
    ("3528", "3589", _16_19),  # JCB
    ("300", "305", frozenset(range(14, 20))),  # Diners Club
    ("36", "36", frozenset(range(14, 20))),  # Diners Club
    ("38", "39", frozenset(range(14, 20))),  # Diners Club
    ("6011", "6011", _16_19),  # Discover
    ("644", "649", _16_19),  # Discover
    ("65", "65", _16_19),  # Discover / RuPay
    ("62", "62", _16_19),  # UnionPay
    ("81", "81", _16_19),  # UnionPay (8-series BINs)
    ("60", "60", _16_19),  # RuPay, legacy CN domestic (e.g. BOC 6013)
    ("508", "508", _16_19),  # RuPay
    ("50", "50", _ANY),  # Maestro
    ("56", "58", _ANY),  # Maestro
    ("6304", "6304", _ANY),  # Maestro
    ("6759", "6759", _ANY),  # Maestro
    ("6761", "6763", _ANY),  # Maestro
    ("9558", "9558", _16_19),  # legacy CN domestic (ICBC)
    ("95595", "95599", _16_19),  # legacy CN domestic (ABC)
)


def _known_issuer(digits: str) -> bool:
    n = len(digits)
    return any(n in lengths and lo <= digits[: len(lo)] <= hi for lo, hi, lengths in _ISSUERS)


def _looks_like_cn_id(digits: str) -> bool:
    return len(digits) == 18 and digits[0] != "0" and _plausible_birth_date(digits[6:14])


def _card_valid(digits: str) -> bool:
    return (
        13 <= len(digits) <= 19
        and _known_issuer(digits)
        and _luhn_valid(digits)
        and not _looks_like_cn_id(digits)
    )


def _order_context(text: str, start: int) -> bool:
    """True when the number at ``start`` is labelled as an order/reference id."""
    window = text[max(0, start - _CONTEXT_WINDOW) : start]
    if not window or _PII_LABEL_CONTEXT_RE.search(window):
        return False
    return _ORDER_CONTEXT_RE.search(window) is not None


# --------------------------------------------------------------------------- passes


def _digits(s: str) -> str:
    return "".join(ch for ch in s if "0" <= ch <= "9")


def _email_repl(m: re.Match[str]) -> str | None:
    return TOKENS[PiiKind.EMAIL]


def _cn_id_repl(m: re.Match[str]) -> str | None:
    raw = m.group(0)
    compact = raw.replace(" ", "").replace("-", "")
    return TOKENS[PiiKind.CN_ID] if _cn_id_valid(compact) else None


def _card_repl(m: re.Match[str]) -> str | None:
    raw = m.group(0)
    if _order_context(m.string, m.start()):
        return None
    if _card_valid(_digits(raw)):
        return TOKENS[PiiKind.BANK_CARD]
    # A grouped number followed by one more short group ("... 1111 2026"): try
    # without the trailing group before giving up.
    sep = m.group("s1") or m.group("s2")
    if sep:
        head, _, tail = raw.rpartition(sep)
        if _card_valid(_digits(head)):
            return TOKENS[PiiKind.BANK_CARD] + sep + tail
    return None


def _cn_mobile_repl(m: re.Match[str]) -> str | None:
    raw = m.group(0)
    if raw[0] not in "+(" and _order_context(m.string, m.start()):
        return None
    return TOKENS[PiiKind.PHONE]


def _intl_phone_repl(m: re.Match[str]) -> str | None:
    raw = m.group(0)
    n = len(_digits(raw))
    compact = raw[1:].isdigit()
    if n > 15 or n < (10 if compact else 8):
        return None
    if _DATE_IN_PHONE_RE.search(raw):
        return None
    return TOKENS[PiiKind.PHONE]


_Repl = Callable[[re.Match[str]], "str | None"]
_PASSES: tuple[tuple[PiiKind, re.Pattern[str], _Repl], ...] = (
    (PiiKind.EMAIL, _EMAIL_RE, _email_repl),
    (PiiKind.CN_ID, _CN_ID_RE, _cn_id_repl),
    (PiiKind.BANK_CARD, _CARD_RE, _card_repl),
    (PiiKind.PHONE, _CN_MOBILE_RE, _cn_mobile_repl),
    (PiiKind.PHONE, _INTL_PHONE_RE, _intl_phone_repl),
)


def _run_pass(text: str, pattern: re.Pattern[str], repl: _Repl) -> tuple[str, int]:
    count = 0

    def _sub(m: re.Match[str]) -> str:
        nonlocal count
        out = repl(m)
        if out is None:
            return m.group(0)
        count += 1
        return out

    return pattern.sub(_sub, text), count


# --------------------------------------------------------------------------- public API


def redact(text: str) -> Redaction:
    """Mask phones, e-mails, resident IDs and bank cards in ``text``.

    Never raises for a ``str``; anything else is a programming error (``TypeError``).
    """
    if not isinstance(text, str):
        raise TypeError(f"redact() expects str, got {type(text).__name__}")
    counts = _zero_counts()
    if not _HAS_CANDIDATE_RE.search(text):
        return Redaction(text=text, counts=counts)
    for kind, pattern, repl in _PASSES:
        if kind is PiiKind.EMAIL and "@" not in text:
            continue
        text, n = _run_pass(text, pattern, repl)
        counts[kind.value] += n
    return Redaction(text=text, counts=counts)


def redact_many(texts: Mapping[str, str | None]) -> tuple[dict[str, str | None], dict[str, int]]:
    """Redact several named fields; ``None`` values pass through, counts are summed."""
    out: dict[str, str | None] = {}
    totals = _zero_counts()
    for key, value in texts.items():
        if value is None:
            out[key] = None
            continue
        r = redact(value)
        out[key] = r.text
        for kind, n in r.counts.items():
            totals[kind] += n
    return out, totals


def scrub_fields(content: str | None, source_text: str | None, value: Any) -> tuple[str | None, str | None, Any, dict[str, int]]:
    """Redact a memory's text fields and every string inside its value; the counts summed."""
    counts = _zero_counts()

    def scrub(text: str) -> str:
        result = redact(text)
        for kind, n in result.counts.items():
            counts[kind] = counts.get(kind, 0) + n
        return result.text

    def walk(node: Any) -> Any:
        if isinstance(node, str):
            return scrub(node)
        if isinstance(node, list):
            return [walk(item) for item in node]
        if isinstance(node, dict):
            return {key: walk(item) for key, item in node.items()}
        return node

    return (
        scrub(content) if content is not None else None,
        scrub(source_text) if source_text is not None else None,
        walk(value),
        counts,
    )
