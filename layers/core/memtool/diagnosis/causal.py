"""The causal memory unit: what failed, why, what repaired it and the evidence, as one memory.

Shape of ``value`` (kind ``causal``, 180-day TTL, the same store, versions, PII scrubbing and
tenant keys as every memory):

- ``scenario``: the question, the question it answered (a reply's pending one), the resolved intent, the route;
- ``initial_state``: the SQL that failed, the schema facts used, the lessons already applied;
- ``trajectory``: the steps with their inputs and outputs (classify, baseline, each hypothesis test);
- ``feedback``: why it was diagnosed (a failure, a thumbs-down, on demand), the expected value, the comment;
- ``failure``, ``cause``, ``root_cause``, ``repair`` ({rules, sql}), ``repaired_output`` (row count and a sample);
- ``verified`` and ``evidence``; ``lesson``: the sentence a planner is shown.

Verified diagnoses are ``active`` (lessons); the others are ``pending_review`` and never steer
generation. The memory is indexed twice (the scenario and the root cause) and recall fuses both.
"""

from __future__ import annotations

import json
from typing import Any

from memtool.diagnosis.model import DiagnosisReport, Repair

SAMPLE_KEPT = 5


def lesson_sentence(report: DiagnosisReport) -> str:
    repairs = "; ".join(Repair.model_validate(r).describe() for r in report.repairs) or "no repair"
    cause = (report.root_cause or "the cause is unknown").rstrip(". ")
    cause = cause[:1].lower() + cause[1:]
    return f"previously failed ({report.failure.get('class')}) because {cause}; repaired by: {repairs}"


def causal_value(
    report: DiagnosisReport,
    *,
    scenario: dict[str, Any],
    initial_sql: str | None,
    lessons: list[dict[str, Any]],
    feedback: dict[str, Any],
    request_id: str,
    diagnosed_by: str,
) -> dict[str, Any]:
    trajectory: list[dict[str, Any]] = [{"step": "classify", "input": {"episode_id": report.episode_id}, "output": report.failure}]
    if report.baseline is not None:
        trajectory.append({"step": "baseline", "input": {"sql": "the original query"}, "output": report.baseline})
    for test in report.hypotheses:
        trajectory.append(
            {
                "step": "test",
                "input": {"hypothesis": test.id, "source": test.source, "cause": test.cause, "repairs": test.repairs},
                "output": {
                    "result": test.result,
                    "detail": test.detail,
                    "executed": test.executed,
                    "value": test.value,
                    "row_count": test.row_count,
                },
            }
        )
    return {
        "scenario": scenario,
        "initial_state": {"sql": initial_sql, "schema_facts": report.schema_facts, "lessons": lessons},
        "trajectory": trajectory,
        "feedback": feedback,
        "failure": report.failure,
        "cause": report.cause,
        "root_cause": report.root_cause,
        "repair": {"rules": report.repairs, "sql": report.repaired_sql} if report.verified else None,
        "repaired_output": None
        if report.repaired_output is None
        else {
            "columns": report.repaired_output.columns,
            "row_count": report.repaired_output.row_count,
            "sample": report.repaired_output.sample[:SAMPLE_KEPT],
        },
        "verified": report.verified,
        "evidence": report.evidence,
        "executions": report.executions,
        "budget": report.budget,
        "lesson": lesson_sentence(report) if report.verified else None,
        "episode_id": report.episode_id,
        "request_id": request_id,
        "diagnosed_by": diagnosed_by,
    }


def causal_content(report: DiagnosisReport, question: str) -> str:
    """The memory's content: the question and what was found (the scenario key is indexed apart)."""
    headline = report.root_cause if report.verified else f"unverified diagnosis ({report.failure.get('class')})"
    return f"{question} — {headline}"


def fit(value: dict[str, Any], max_bytes: int) -> dict[str, Any]:
    """Drop what can be lost, biggest first, until the value fits: samples, outputs, SQL text."""
    value = json.loads(json.dumps(value, ensure_ascii=False, default=str))
    steps = [
        lambda v: (v.get("repaired_output") or {}).update({"sample": []}),
        lambda v: [step.get("output", {}).pop("detail", None) for step in v.get("trajectory") or []],
        lambda v: (v.get("initial_state") or {}).update({"schema_facts": {}}),
        lambda v: (v.get("initial_state") or {}).update({"sql": clip((v.get("initial_state") or {}).get("sql") or "", 1500)}),
        lambda v: v.update({"trajectory": (v.get("trajectory") or [])[:12]}),
        lambda v: (v.get("repair") or {}).update({"sql": None}) if isinstance(v.get("repair"), dict) else None,
        lambda v: (v.get("initial_state") or {}).update({"sql": None}),
        lambda v: v.update({"trajectory": []}),
    ]
    for step in steps:
        if _size(value) <= max_bytes:
            break
        step(value)
    return value


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8"))


def clip(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", errors="ignore") + "…"
