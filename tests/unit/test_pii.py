"""Unit tests for memtool.memory.pii (PII redaction before storage/indexing)."""

from __future__ import annotations

import random
import time

import pytest

from memtool.memory.pii import PiiKind, Redaction, redact, redact_many

ALL_KINDS = {"phone", "email", "cn_id", "bank_card"}

# --------------------------------------------------------------------------- helpers

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def cn_id(region: str, birth: str, seq: str) -> str:
    """Build a checksum-valid 18-char ID from a 6-digit region, YYYYMMDD and 3-digit seq."""
    body = region + birth + seq
    assert len(body) == 17 and body.isdigit()
    return body + _ID_CHECK[sum(int(c) * w for c, w in zip(body, _ID_WEIGHTS)) % 11]


def bad_cn_id(valid: str) -> str:
    """Same ID with a wrong check character."""
    wrong = next(c for c in _ID_CHECK if c != valid[-1].upper())
    return valid[:-1] + wrong


def luhn_check_digit(partial: str) -> str:
    total = 0
    for i, ch in enumerate(reversed(partial)):
        d = int(ch)
        if i % 2 == 0:  # these positions get doubled once the check digit is appended
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return str((10 - total % 10) % 10)


def luhn_ok(number: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(number)):
        d = int(ch)
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def card(partial: str) -> str:
    """Append a Luhn check digit."""
    number = partial + luhn_check_digit(partial)
    assert luhn_ok(number)
    return number


def bad_card(valid: str) -> str:
    last = (int(valid[-1]) + 1) % 10
    number = valid[:-1] + str(last)
    assert not luhn_ok(number)
    return number


def group4(number: str, sep: str = " ") -> str:
    return sep.join(number[i : i + 4] for i in range(0, len(number), 4))


def only(counts: dict[str, int], **expected: int) -> bool:
    return counts == {k: expected.get(k, 0) for k in ALL_KINDS}


ID_A = cn_id("110105", "19491231", "002")
ID_B = cn_id("440305", "19900307", "123")
ID_C = cn_id("620102", "20000229", "456")  # Gansu region "62" looks like a UnionPay prefix
ID_X = next(
    cn_id("310101", f"1985{m:02d}{d:02d}", "33" + str(s))
    for m in range(1, 13)
    for d in range(1, 29)
    for s in range(10)
    if cn_id("310101", f"1985{m:02d}{d:02d}", "33" + str(s)).endswith("X")
)

VISA16 = card("411111111111111")
UNIONPAY19 = card("622202123456789012")
UNIONPAY16 = card("622848001234567")
MASTER = card("545454545454545")
MASTER2 = card("222100000000000")
AMEX = card("37828224631000")
JCB = card("353011133330000")


# --------------------------------------------------------------------------- helpers sanity


def test_helpers_produce_valid_numbers():
    # Well-known reference values.
    assert cn_id("110105", "19491231", "002") == "11010519491231002X"
    assert card("411111111111111") == "4111111111111111"
    assert card("37828224631000") == "378282246310005"
    assert ID_X.endswith("X")
    assert len(UNIONPAY19) == 19 and len(AMEX) == 15


# --------------------------------------------------------------------------- API shape


def test_kinds_and_result_shape():
    assert [k.value for k in PiiKind] == ["phone", "email", "cn_id", "bank_card"]
    r = redact("nothing to see here")
    assert isinstance(r, Redaction)
    assert r.text == "nothing to see here"
    assert set(r.counts) == ALL_KINDS and r.total == 0
    with pytest.raises(AttributeError):
        r.text = "x"  # type: ignore[misc]


def test_empty_string():
    r = redact("")
    assert r.text == "" and r.total == 0 and set(r.counts) == ALL_KINDS


# --------------------------------------------------------------------------- e-mail


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail me at john.doe@example.com please", "mail me at [EMAIL] please"),
        ("联系我zhang.san@example.com谢谢", "联系我[EMAIL]谢谢"),
        ("邮箱：li_si+tag@mail.company.com.cn。", "邮箱：[EMAIL]。"),
        ("<a.b-c@sub-domain.example.org>", "<[EMAIL]>"),
        ("13812345678@163.com", "[EMAIL]"),
        ("X@Y.IO,", "[EMAIL],"),
    ],
)
def test_email_positive(text, expected):
    r = redact(text)
    assert r.text == expected
    assert only(r.counts, email=1)


@pytest.mark.parametrize("text", ["user@localhost", "@handle", "a@b", "price 5@3.99"])
def test_email_negative(text):
    assert redact(text).text == text


# --------------------------------------------------------------------------- phone


@pytest.mark.parametrize(
    "phone",
    [
        "13812345678",
        "19987654321",
        "138 1234 5678",
        "138-1234-5678",
        "+8613812345678",
        "+86 13812345678",
        "+86-138-1234-5678",
        "86 13812345678",
        "8613812345678",
        "008613812345678",
        "0086 138 1234 5678",
        "(+86) 138 1234 5678",
        "+1 415 555 2671",
        "+1-415-555-2671",
        "+1 (415) 555-2671",
        "+44 20 7946 0958",
        "+44 (0)20 7946 0958",
        "+33 1 23 45 67 89",
        "+14155552671",
    ],
)
@pytest.mark.parametrize(
    "template",
    ["{}", "电话{}谢谢", "请拨打 {}。", "call me on {}, thanks", "手机号：{}", "(tel: {})"],
)
def test_phone_positive(phone, template):
    text = template.format(phone)
    r = redact(text)
    assert r.text == template.format("[PHONE]")
    assert only(r.counts, phone=1)


@pytest.mark.parametrize(
    "text",
    [
        "order id 202611291381234567",  # mobile-looking digits inside a longer run
        "流水 202611291381234567 已完成",
        "x13812345678",  # glued to an alphanumeric token
        "13812345678abc",
        "hash e3b0c4429813812345678bd",
        "12345678901",  # does not start with 1[3-9]
        "12812345678",
        "1381234567",  # 10 digits
        "138123456789",  # 12 digits
        "13812345678.50",  # an amount
        "0.13812345678",
        "订单号 13812345678",  # order-id context
        "order #13812345678",
        "UTC+8 2026-11-29 12:00",  # tz offset, not an international number
        "GMT+8 20261129",
        "+0800",
        "+12345",
        "+12345678",  # too short without separators
        "+8 2026-11-29",
    ],
)
def test_phone_negative(text):
    r = redact(text)
    assert r.text == text, r.text
    assert r.total == 0


def test_phone_label_overrides_hash_context():
    r = redact("Phone #: 13812345678")
    assert r.text == "Phone #: [PHONE]"
    r = redact("订单联系电话 13812345678")
    assert r.text == "订单联系电话 [PHONE]"


# --------------------------------------------------------------------------- Chinese resident ID


@pytest.mark.parametrize("ident", [ID_A, ID_B, ID_C, ID_X, ID_X.lower()])
@pytest.mark.parametrize(
    "template", ["{}", "身份证号{}，请核对", "身份证：{}。", "ID number {} on file", "({})"]
)
def test_cn_id_positive(ident, template):
    r = redact(template.format(ident))
    assert r.text == template.format("[CN_ID]")
    assert only(r.counts, cn_id=1)


def test_cn_id_grouped():
    grouped = f"{ID_B[:6]} {ID_B[6:14]} {ID_B[14:]}"
    r = redact(f"证件 {grouped} end")
    assert r.text == "证件 [CN_ID] end"
    assert only(r.counts, cn_id=1)


def test_cn_id_with_unionpay_like_prefix_is_counted_as_id():
    # ID_C starts with 62 (Gansu); if it also happens to pass Luhn it must still be an ID.
    r = redact(f"身份证{ID_C}")
    assert r.text == "身份证[CN_ID]"
    assert only(r.counts, cn_id=1)


def test_cn_id_luhn_valid_is_still_id():
    # Find a valid ID that is also Luhn-valid with a card-like prefix: it must be cn_id.
    ident = next(
        i
        for s in range(1000)
        if (i := cn_id("620102", "19880808", f"{s:03d}"))[-1].isdigit() and luhn_ok(i)
    )
    r = redact(ident)
    assert only(r.counts, cn_id=1)


@pytest.mark.parametrize(
    "text",
    [
        bad_cn_id(ID_A),
        bad_cn_id(ID_B),
        f"身份证号{bad_cn_id(ID_C)}",  # 62-prefixed, wrong checksum: neither ID nor card
        cn_id("110105", "19491231", "002")[:-1],  # 17 chars
        "1" + ID_B,  # embedded in a longer run
        ID_B + "7",
        cn_id("110105", "18991231", "002"),  # year out of range
    ],
)
def test_cn_id_negative(text):
    r = redact(text)
    assert r.counts["cn_id"] == 0
    assert r.counts["bank_card"] == 0
    assert r.text == text


def test_id_shaped_number_with_bad_checksum_is_not_a_card():
    # 62-prefixed (UnionPay-like), Luhn-valid, plausible birth date, wrong ID checksum.
    number = next(
        n
        for s in range(10000)
        if luhn_ok(n := f"62010219880808{s:04d}")
        and n != cn_id(n[:6], n[6:14], n[14:17])
    )
    r = redact(f"证件号 {number}")
    assert r.text == f"证件号 {number}"
    assert r.total == 0


def test_cn_id_impossible_date_rejected():
    # 1990-02-30 never existed; build the checksum anyway.
    bogus = cn_id("440305", "19900230", "123")
    assert redact(bogus).text == bogus


# --------------------------------------------------------------------------- bank card


@pytest.mark.parametrize("number", [VISA16, UNIONPAY19, UNIONPAY16, MASTER, MASTER2, AMEX, JCB])
@pytest.mark.parametrize(
    "template", ["{}", "卡号{}", "银行卡号：{}，户名张三", "card number {} exp 12/29", "({})"]
)
def test_card_positive_contiguous(number, template):
    r = redact(template.format(number))
    assert r.text == template.format("[BANK_CARD]")
    assert only(r.counts, bank_card=1)


@pytest.mark.parametrize("sep", [" ", "-"])
@pytest.mark.parametrize("number", [VISA16, UNIONPAY19, UNIONPAY16, MASTER])
def test_card_positive_grouped(number, sep):
    text = f"卡号 {group4(number, sep)} 已绑定"
    r = redact(text)
    assert r.text == "卡号 [BANK_CARD] 已绑定"
    assert only(r.counts, bank_card=1)


def test_card_example_from_spec():
    assert luhn_ok("6222021234567890128")
    r = redact("6222 0212 3456 7890 128")
    assert r.text == "[BANK_CARD]"


def test_card_amex_grouping():
    grouped = f"{AMEX[:4]} {AMEX[4:10]} {AMEX[10:]}"
    assert redact(f"Amex {grouped}").text == "Amex [BANK_CARD]"


def test_grouped_card_followed_by_short_number():
    r = redact(f"{group4(VISA16)} 2026")
    assert r.text == "[BANK_CARD] 2026"


def test_card_hash_label_is_card():
    assert redact(f"Card #: {VISA16}").text == "Card #: [BANK_CARD]"
    assert redact(f"卡号#{VISA16}").text == "卡号#[BANK_CARD]"


@pytest.mark.parametrize(
    "text",
    [
        bad_card(VISA16),  # Luhn-invalid 16 digits
        bad_card(UNIONPAY19),
        group4(bad_card(UNIONPAY16)),
        card("123456789012345"),  # Luhn-valid but no known issuer prefix
        card("999999999999999"),
        card("41111111111111"),  # Visa prefix but 15 digits
        card("2026112900012345"[:15]),  # date-led order id, Luhn-valid
        "x" + VISA16,  # glued to a token
        "1" + VISA16,  # part of a longer run
        VISA16 + ".00",  # an amount
        "+" + VISA16,
    ],
)
def test_card_negative(text):
    r = redact(text)
    assert r.counts["bank_card"] == 0
    assert r.text == text


@pytest.mark.parametrize(
    "template",
    [
        "订单号 {}",
        "订单号：{}",
        "订单{}",
        "单号: {}",
        "快递单号为{}",
        "流水号 {}",
        "order {}",
        "Order ID: {}",
        "order no. {}",
        "order #{}",
        "ORDER# {}",
        "ref {}",
        "#{}",
    ],
)
def test_order_id_context_is_not_a_card(template):
    # A 16-digit order id starting with 4 that happens to pass Luhn.
    order_id = card("402611290001234")
    assert redact(order_id).text == "[BANK_CARD]"  # without the label it would be a card
    text = template.format(order_id)
    r = redact(text)
    assert r.text == text
    assert r.total == 0


def test_order_context_only_applies_to_adjacent_number():
    text = f"订单号 {VISA16}，支付卡号 {VISA16}"
    r = redact(text)
    assert r.text == f"订单号 {VISA16}，支付卡号 [BANK_CARD]"
    assert only(r.counts, bank_card=1)


def test_order_word_must_be_a_word():
    # "border" ends in "order" but is not an order label.
    assert redact(f"border {VISA16}").text == "border [BANK_CARD]"


# --------------------------------------------------------------------------- general negatives


@pytest.mark.parametrize(
    "text",
    [
        "订单号 202611290001234",
        "order #1029384756",
        "2026-11-29",
        "20261129",
        "2026年11月29日 14:30:00",
        "2026-11-29T14:30:00+08:00",
        "2026-11-29 14:30:00.123456",
        "ts=1732867200 ms=1732867200000 us=1732867200000000",
        "¥12,345.67",
        "$1,234,567.89",
        "1234567.89",
        "金额 98765432101234.56 元",
        "the year 1999 and 2026",
        "SELECT * FROM t WHERE region_id = 13812345",
        "WHERE order_id IN (202611290001234, 202611290001235)",
        "uuid 550e8400-e29b-41d4-a716-446655440000",
        "sha 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "version 1.13.8 build 12345",
        "IP 192.168.100.200",
    ],
)
def test_no_false_positives(text):
    r = redact(text)
    assert r.text == text, r.text
    assert r.total == 0


# --------------------------------------------------------------------------- counts


def test_counts_with_multiple_occurrences_of_every_kind():
    text = (
        f"张三 13812345678 / 139-8765-4321，邮箱 a@x.com 和 b.c@y.cn，"
        f"身份证 {ID_A} 与 {ID_B} 与 {ID_X}，卡号 {VISA16}、{group4(UNIONPAY19)}；"
        f"Bob: +1 415 555 2671, bob@example.org, card {MASTER}."
    )
    r = redact(text)
    assert r.counts == {"phone": 3, "email": 3, "cn_id": 3, "bank_card": 3}
    assert r.total == 12
    assert r.text == (
        "张三 [PHONE] / [PHONE]，邮箱 [EMAIL] 和 [EMAIL]，"
        "身份证 [CN_ID] 与 [CN_ID] 与 [CN_ID]，卡号 [BANK_CARD]、[BANK_CARD]；"
        "Bob: [PHONE], [EMAIL], card [BANK_CARD]."
    )


def test_adjacent_phones_comma_separated():
    r = redact("13812345678,13987654321;15011112222")
    assert r.text == "[PHONE],[PHONE];[PHONE]"
    assert only(r.counts, phone=3)


# --------------------------------------------------------------------------- redact_many


def test_redact_many_sums_counts_and_keeps_none():
    fields = {
        "question": "我的手机 13812345678，邮箱 a@b.com",
        "answer": None,
        "sql": "SELECT 1",
        "note": f"身份证 {ID_B}，手机 15011112222",
    }
    out, counts = redact_many(fields)
    assert list(out) == list(fields)
    assert out["question"] == "我的手机 [PHONE]，邮箱 [EMAIL]"
    assert out["answer"] is None
    assert out["sql"] == "SELECT 1"
    assert out["note"] == "身份证 [CN_ID]，手机 [PHONE]"
    assert counts == {"phone": 2, "email": 1, "cn_id": 1, "bank_card": 0}


def test_redact_many_empty():
    out, counts = redact_many({})
    assert out == {} and counts == {k: 0 for k in ALL_KINDS}


# --------------------------------------------------------------------------- idempotence / robustness

SAMPLES = [
    "联系我zhang.san@example.com谢谢，电话 +86 138-1234-5678",
    f"身份证{ID_A}卡号{VISA16}",
    f"{group4(UNIONPAY19, '-')} / +44 (0)20 7946 0958 / {ID_X.lower()}",
    "订单号 202611290001234 on 2026-11-29, total ¥12,345.67",
    "[PHONE] [EMAIL] [CN_ID] [BANK_CARD]",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_idempotent(text):
    once = redact(text)
    twice = redact(once.text)
    assert twice.text == once.text
    assert twice.total == 0


def test_deterministic():
    assert redact(SAMPLES[0]) == redact(SAMPLES[0])


def test_never_raises_on_random_input():
    rng = random.Random(20261129)
    alphabet = "0123456789 -+@._#()（）:：Xx订单号卡身份证电话abcZ\n\t\u00a0\ud800€¥,，。"
    for _ in range(2000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        r = redact(s)
        assert isinstance(r.text, str)
        assert redact(r.text).text == r.text  # idempotent on arbitrary input


def test_non_str_rejected():
    with pytest.raises(TypeError):
        redact(None)  # type: ignore[arg-type]


def test_large_input_is_fast():
    chunk = f"用户 13812345678 邮箱 a@b.com 订单号 202611290001234 金额 ¥12,345.67 卡 {VISA16}\n"
    text = chunk * 5000 + "9" * 100_000 + "a" * 100_000 + "@" + "b." * 50_000
    start = time.perf_counter()
    r = redact(text)
    assert time.perf_counter() - start < 5.0
    assert r.counts["phone"] == 5000 and r.counts["bank_card"] == 5000
