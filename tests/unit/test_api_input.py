"""What the API accepts: strict JSON, plain text, bounded values, one value per identity header."""

from __future__ import annotations

import base64
import json
import re

import pytest
from pydantic import ValidationError

from memtool.api.ask import AskAnswer, AskBody, AskError
from memtool.api.http import ErrorBody, validation_failed
from memtool.api.identity import single_header
from memtool.api.json_body import MAX_BODY_BYTES, PLAIN_TEXT_PATTERN, parse_json, read_body, text_problem
from memtool.api.limits import QUESTION_MAX_CHARS, VALUE_MAX_BYTES
from memtool.api.memories import CreateMemoryBody, PatchMemoryBody
from memtool.errors import ValidationFailed

# ---- strict JSON -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        ('{"n": %s}' % ("9" * 4301), "n", "2^53"),
        ('{"n": 9007199254740992}', "n", "2^53"),
        ('{"n": -9007199254740992}', "n", "2^53"),
        ('{"a": {"b": NaN}}', "a.b", "finite"),
        ('{"a": [0, Infinity]}', "a.1", "finite"),
        ('{"a": -Infinity}', "a", "finite"),
        ('{"a": 1e400}', "a", "infinity"),
        ('{"a": -1e309}', "a", "infinity"),
        ('{"a": 1e126}', "a", "storable range"),
        ('{"a": 1e-131}', "a", "storable range"),
        ("[" * 10_000 + "]" * 10_000, "body", "nested deeper"),
        ('{"a": ' + "[" * 40 + "]" * 40 + "}", "body", "nested deeper"),
        ('{"a": 1, "a": 2}', "body", "repeats the key 'a'"),
        ('{"a": {"b": 1, "b": 1}}', "a", "repeats the key 'b'"),
        ('{"a": "x\\u0000"}', "a", "U+0000"),
        ('{"a": ["ok", "\\u001b[31m"]}', "a.1", "U+001B"),
        ('{"a": {"k\\u0000": 1}}', "a", "a key contains"),
        ('{"a": "\\udc00"}', "a", "unpaired surrogate"),
        ('{"a": ', "body", "not valid JSON"),
    ],
)
def test_strict_parsing_names_the_path_of_what_it_refuses(text, field, words):
    with pytest.raises(ValidationFailed) as refused:
        parse_json(text)
    assert refused.value.field == field
    assert words in refused.value.message


@pytest.mark.parametrize(
    "text",
    [
        '{"n": 9007199254740991, "m": -9007199254740991}',
        '{"x": 1.5, "y": -0.0, "z": 0, "w": 1e125, "v": 1e-130, "u": 0.0}',
        '{"t": "tab\\tnew\\nline\\r", "r": "\\ufffd", "e": "😀", "d": "\\ud83d\\ude00"}',
        '{"a": ' + "[" * 38 + "]" * 38 + "}",
        '{"a": null, "b": true, "c": [], "d": {}}',
    ],
)
def test_strict_parsing_keeps_what_json_can_carry(text):
    assert parse_json(text) == json.loads(text)


def test_the_replacement_character_is_ordinary_text():
    assert text_problem("金额\ufffd") is None
    assert parse_json('{"c": "\ufffd\ufffd"}') == {"c": "\ufffd\ufffd"}


def test_read_body_wants_one_json_object():
    assert read_body(None) is None
    assert read_body("  \n") is None
    assert read_body('{"a": 1}') == {"a": 1}
    for body in ("[1]", '"text"', "1", "null"):
        with pytest.raises(ValidationFailed) as refused:
            read_body(body)
        assert refused.value.field == "body"


def test_read_body_checks_size_base64_and_utf8():
    with pytest.raises(ValidationFailed, match="larger than"):
        read_body('{"a": "%s"}' % ("x" * MAX_BODY_BYTES))
    assert read_body(base64.b64encode(b'{"a": "\xe5\x85\x83"}').decode(), base64_encoded=True) == {"a": "元"}
    with pytest.raises(ValidationFailed, match="UTF-8"):
        read_body(base64.b64encode(b'{"a": "\xff"}').decode(), base64_encoded=True)
    with pytest.raises(ValidationFailed, match="base64"):
        read_body("not base64!", base64_encoded=True)


def test_the_documented_pattern_and_the_check_agree_on_every_latin1_character():
    pattern = re.compile(PLAIN_TEXT_PATTERN)
    for code in range(0x100):
        char = chr(code)
        assert (text_problem(char) is None) == bool(pattern.match(char)), hex(code)
    assert all(text_problem(c) is None for c in "\t\n\r")


# ---- field rules (pydantic) ------------------------------------------------------------------


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def test_value_limits_sit_exactly_at_the_documented_figures():
    CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "value": _nested(32)})
    CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "value": {f"k{n}": 0 for n in range(1000)}})
    at_limit = "x" * (VALUE_MAX_BYTES - len('{"s":""}'))
    CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "value": {"s": at_limit}})
    for value in (_nested(33), {f"k{n}": 0 for n in range(1001)}, {"s": at_limit + "x"}):
        with pytest.raises(ValidationError) as refused:
            CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "value": value})
        assert refused.value.errors()[0]["loc"] == ("value",)


def test_keys_across_nested_objects_count_together():
    value = {f"a{n}": {f"b{m}": 0 for m in range(9)} for n in range(100)}  # 100 + 900 keys
    CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "value": value})
    value["one_more"] = 0
    with pytest.raises(ValidationError):
        CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "value": value})


@pytest.mark.parametrize("field", ["content", "tags", "status", "confidence"])
def test_patch_null_is_not_keep(field):
    with pytest.raises(ValidationError) as refused:
        PatchMemoryBody.model_validate({"expected_version": 1, field: None})
    assert refused.value.errors()[0]["loc"][0] == field


def test_patch_omission_keeps_and_null_clears_value_and_source_text():
    body = PatchMemoryBody.model_validate({"expected_version": 2, "value": None, "source_text": None})
    assert body.model_dump(exclude_unset=True) == {"expected_version": 2, "value": None, "source_text": None}
    assert PatchMemoryBody.model_validate({"expected_version": 2, "content": "x"}).model_dump(exclude_unset=True) == {
        "expected_version": 2,
        "content": "x",
    }


def test_confidence_is_a_number_not_a_numeric_string():
    for bad in ("0.5", True):
        with pytest.raises(ValidationError):
            CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "confidence": bad})
    assert CreateMemoryBody.model_validate({"kind": "profile", "content": "x", "confidence": 1}).confidence == 1.0


@pytest.mark.parametrize("question", ["", " ", " \n\t\u3000 "])
def test_a_blank_question_is_refused(question):
    with pytest.raises(ValidationError) as refused:
        AskBody.model_validate({"question": question})
    assert refused.value.errors()[0]["loc"] == ("question",)


def test_the_question_is_trimmed_and_its_limit_counts_after_trimming():
    padded = "  " + "问" * QUESTION_MAX_CHARS + "\n"
    assert AskBody.model_validate({"question": padded}).question == "问" * QUESTION_MAX_CHARS
    with pytest.raises(ValidationError, match=str(QUESTION_MAX_CHARS)):
        AskBody.model_validate({"question": "问" * (QUESTION_MAX_CHARS + 1)})


def test_a_failed_answer_carries_a_typed_error_without_internals():
    answer = AskAnswer(
        episode_id="ep_1", route=None, status="failed", question="q", error={"error": "step_failed", "message": "m"}
    )
    assert answer.model_dump(mode="json")["error"] == {"error": "step_failed", "message": "m", "step": None}
    assert set(AskError.model_fields) == {"error", "message", "step"}


# ---- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "field", "message"),
    [
        ({"loc": ("body", "content"), "type": "string_type", "msg": "Input should be a valid string"}, "content", "valid string"),
        ({"loc": ("body", "tags", 1), "type": "value_error", "msg": "Value error, bad", "ctx": {"error": "bad"}}, "tags.1", "bad"),
        ({"loc": ("query", "limit"), "type": "less_than_equal", "msg": "Input should be <= 100"}, "limit", "<= 100"),
        ({"loc": ("path", "id"), "type": "string_pattern_mismatch", "msg": "String should match"}, "id", "match"),
        ({"loc": ("body",), "type": "missing", "msg": "Field required"}, "body", "request body is required"),
        ({"loc": ("body", "kind"), "type": "missing", "msg": "Field required"}, "kind", "field required"),
        ({"loc": ("body", "owner"), "type": "extra_forbidden", "msg": "Extra inputs"}, "owner", "unknown field"),
    ],
)
def test_validation_errors_become_a_400_body_on_the_field(error, field, message):
    failed = validation_failed([error])
    assert failed.field == field and message in failed.message
    assert ErrorBody.model_validate(failed.to_body()).error == "validation_error"


# ---- identity headers ------------------------------------------------------------------------


def test_a_header_sent_twice_in_any_case_is_refused():
    event = {"multiValueHeaders": {"X-Memtool-Tenant": ["acme"], "x-memtool-tenant": ["evil"]}}
    with pytest.raises(ValidationFailed) as refused:
        single_header(event, "x-memtool-tenant", "X-Memtool-Tenant")
    assert refused.value.field == "X-Memtool-Tenant"
    with pytest.raises(ValidationFailed):
        single_header({"multiValueHeaders": {"X-Memtool-User": ["a", "b"]}}, "x-memtool-user", "X-Memtool-User")


def test_a_header_sent_once_is_read_from_either_field():
    assert single_header({"multiValueHeaders": {"X-Memtool-User": ["li"]}, "headers": {"X-Memtool-User": "li"}}, "x-memtool-user", "U") == "li"
    assert single_header({"headers": {"x-memtool-user": "li"}}, "x-memtool-user", "U") == "li"
    assert single_header({"headers": None, "multiValueHeaders": None}, "x-memtool-user", "U") is None


# ---- through the handlers: refused at the edge, before any flow runs or anything is stored ----


def _stored(settings) -> list[dict]:
    from tests.support import table_items

    return [i for i in table_items(settings) if i.get("item_type", {}).get("S") in ("head", "version", "slot")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"question": "   \n\t "}, "question"),
        ({"question": ""}, "question"),
        ({"question": "问" * (QUESTION_MAX_CHARS + 1)}, "question"),
        ({"question": "上个月\x00净收入"}, "question"),
        ({"question": "上个月净收入", "session_id": "s\x001"}, "session_id"),
        ({"question": "上个月净收入", "session_id": "has space"}, "session_id"),
        ({"question": "上个月净收入", "route": "sql_injection"}, "route"),
        ({"question": "上个月净收入", "conditions": {"unit": "美元"}}, "conditions.unit"),
    ],
)
def test_ask_refuses_bad_input_before_running_the_flow(api, aws, body, field):
    reply = api.call("POST", "/ask", body)

    assert reply.status == 400, reply.body
    assert reply.json()["field"] == field, reply.json()
    assert _stored(aws) == []


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"question": "上个月净收入", "conditions": {"unit": NaN}}', "conditions.unit"),
        ('{"question": "上个月净收入", "question": "另一个问题"}', "body"),
        ("[" * 10_000 + "]" * 10_000, "body"),
    ],
)
def test_ask_parses_its_body_strictly(api, aws, raw, field):
    reply = api.call("POST", "/ask", raw=raw)
    assert reply.status == 400 and reply.json()["field"] == field, reply.body
    assert _stored(aws) == []


def test_diagnose_parses_its_body_strictly(api, aws):
    assert api.call("POST", "/diagnose", raw='{"episode_id": "ep_1", "expected": {"value": NaN}}').json()["field"] == "expected.value"
    assert api.call("POST", "/diagnose", raw="[1]").json()["field"] == "body"
    assert api.call("POST", "/diagnose", raw='{"episode_id": "ep_1", "episode_id": "ep_2"}').status == 400
    assert api.call("POST", "/diagnose").status == 400
    extra = api.call("POST", "/diagnose", {"episode_id": "ep_1", "rating": 1})
    assert extra.status == 400 and extra.json()["field"] == "rating"
    unit = api.call("POST", "/diagnose", {"episode_id": "ep_1", "expected": {"value": 1, "unit": "USD"}})
    assert unit.status == 400 and unit.json()["field"] == "expected.unit"
    huge = api.call("POST", "/diagnose", {"episode_id": "ep_1", "expected": {"value": 1e300}})
    assert huge.status == 400 and huge.json()["field"] == "expected.value"
    unknown = api.call("POST", "/diagnose", {"episode_id": "ep_1"})
    assert unknown.status == 404 and unknown.json()["field"] == "episode_id"
    assert _stored(aws) == []


def test_feedback_parses_its_body_strictly(api, aws):
    assert api.call("POST", "/feedback", raw='{"episode_id": "ep_1", "rating": NaN}').json()["field"] == "rating"
    assert api.call("POST", "/feedback", raw="[1]").json()["field"] == "body"
    assert api.call("POST", "/feedback", raw='{"episode_id": "ep_1", "rating": 1, "rating": -1}').status == 400
    assert api.call("POST", "/feedback").status == 400
    unknown = api.call("POST", "/feedback", {"episode_id": "ep_1", "rating": 1})
    assert unknown.status == 404 and unknown.json()["field"] == "episode_id"


@pytest.mark.parametrize("tenant", ["acme\n", "acme\x00", "ac#me", ""])
def test_identifiers_are_matched_whole(tenant):
    from memtool.api.identity import identity_from_event
    from memtool.errors import Unauthenticated
    from memtool.settings import Settings

    event = {"requestContext": {"authorizer": {"claims": {"custom:tenant_id": tenant, "sub": "li"}}}}
    with pytest.raises(Unauthenticated):
        identity_from_event(event, Settings(runtime="aws"))


def test_a_comment_over_its_limit_is_counted_in_characters(api, aws):
    reply = api.call("POST", "/diagnose", {"episode_id": "ep_1", "comment": "x" * 2001})
    assert reply.status == 400 and reply.json()["field"] == "comment"
    assert reply.json()["message"] == "should have at most 2000 characters"
