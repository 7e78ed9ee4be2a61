"""shared_lesson: what the tenant's copy of a lesson keeps of its author's causal memory."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memtool.diagnosis.lessons import lesson_of, shared_lesson
from memtool.memory.records import MemoryKind, MemoryRecord, MemoryScope, MemoryStatus

NOW = datetime(2025, 6, 1, tzinfo=UTC)
QUESTION = "上个月上海的销售额"
RULE = {"kind": "time_column", "metric": "gross_revenue", "to": "order_date"}


def _lesson(**extra: object) -> MemoryRecord:
    value = {
        "scenario": {"question": QUESTION, "asked": QUESTION, "intent": {"metric": "gross_revenue"}, "route": "sql"},
        "initial_state": {"sql": "SELECT SUM(x) FROM t WHERE paid_at >= '2025-05-01'", "schema_facts": {}, "lessons": []},
        "trajectory": [
            {"step": "classify", "input": {"episode_id": "e1"}, "output": {"class": "expected_value"}},
            {
                "step": "test",
                "input": {"hypothesis": "h1", "cause": "refunds"},
                "output": {"result": "refuted", "detail": "the repaired value 98.0000 differs from the expected 1,234.5000", "value": 98.0},
            },
            {
                "step": "test",
                "input": {"hypothesis": "h2", "cause": "time_column"},
                "output": {
                    "result": "verified",
                    "detail": "the repaired value 1,234.4000 matches the expected 1,234.5000 within 0.10%",
                    "value": 1234.4,
                },
            },
        ],
        "feedback": {"reason": "thumbs_down", "expected": {"value": 1234.5}, "comment": "my boss checked this number"},
        "failure": {"class": "expected_value", "origin": "logical"},
        "cause": "time_column",
        "root_cause": "gross_revenue counts by paid_at where order_date was meant",
        "repair": {"rules": [RULE], "sql": "SELECT SUM(x) FROM t WHERE order_date >= '2025-05-01'"},
        "repaired_output": {"columns": ["v"], "row_count": 1, "sample": [[1234.4]]},
        "verified": True,
        "evidence": "h2: the repaired value 1,234.4000 matches the expected 1,234.5000 within 0.10%",
        "executions": 3,
        "budget": 8,
        "lesson": "previously failed (expected_value) because ...; repaired by: ...",
        "episode_id": "e1",
        "request_id": "e1:feedback:abc123",
        "diagnosed_by": "queue",
        **extra,
    }
    return MemoryRecord(
        id="m1",
        tenant="acme",
        owner="li",
        kind=MemoryKind.CAUSAL,
        content=f"{QUESTION} — {value['root_cause']}",
        source_text=QUESTION,
        value=value,
        scope=MemoryScope.USER,
        status=MemoryStatus.ACTIVE,
        version=1,
        created_at=NOW,
        updated_at=NOW,
    )


def test_the_copy_drops_the_authors_question_comment_and_expected_value():
    record = _lesson()
    shared = shared_lesson(record)
    text = json.dumps([shared.content, shared.source_text, shared.value], ensure_ascii=False)
    for private in (QUESTION, "my boss", "1,234.5000", "1234.5", "e1:feedback"):
        assert private not in text, private
    assert shared.source_text is None and shared.content == record.value["root_cause"]
    assert shared.value["scenario"] == {"intent": {"metric": "gross_revenue"}, "route": "sql"}
    assert shared.value["feedback"] == {"reason": "thumbs_down"}
    assert shared.value["evidence"] == "h2: the repaired value 1,234.4000 matches the expected value within 0.10%"
    details = [step["output"].get("detail") for step in shared.value["trajectory"]]
    assert details == [
        None,
        "the repaired value 98.0000 differs from the expected value",
        "the repaired value 1,234.4000 matches the expected value within 0.10%",
    ]


def test_the_copy_keeps_the_cause_the_repair_and_the_evidence_and_stays_a_lesson():
    record = _lesson()
    value = shared_lesson(record).value
    for part in ("initial_state", "failure", "cause", "root_cause", "repair", "repaired_output", "verified", "executions", "lesson"):
        assert value[part] == record.value[part], part
    assert [s["output"]["result"] for s in value["trajectory"][1:]] == ["refuted", "verified"]
    assert [s["output"]["value"] for s in value["trajectory"][1:]] == [98.0, 1234.4]
    copy = record.model_copy(update={"value": value, "owner": "_tenant", "scope": MemoryScope.TENANT})
    assert lesson_of(copy, NOW) is not None and lesson_of(copy, NOW).repairs == lesson_of(record, NOW).repairs


def test_a_part_the_copy_does_not_name_stays_the_authors():
    value = shared_lesson(_lesson(asker_note="a new private part")).value
    assert "asker_note" not in value and "request_id" not in value


def test_with_the_authors_consent_the_copy_keeps_everything_and_leaves_the_original_alone():
    record = _lesson()
    before = json.dumps(record.value, sort_keys=True)
    shared = shared_lesson(record, include_context=True)
    assert shared.value == record.value and shared.content == record.content and shared.source_text == QUESTION
    shared_lesson(record).value["feedback"].clear()
    shared.value["scenario"].clear()
    assert json.dumps(record.value, sort_keys=True) == before  # the copy is a copy
