"""Diagnoses a person confirms (docs/diagnosis.md, Review): GET /diagnoses lists what waits as
pending_review (a curator's view is the tenant's, a user's their own); confirming runs the repair
once more and makes the diagnosis an active lesson that the next ask cites; rejecting archives it
with the reason; another user's, or the tenant's, are a curator's to review. A verified repair that
changes a metric's definition waits for a person too."""

from __future__ import annotations

from typing import Any

from memtool.diagnosis.model import DiagnosisReport
from tests.support import Api

QUESTION = "上个月上海的销售额"


def ask(api: Api, question: str) -> dict:
    reply = api.call("POST", "/ask", {"question": question})
    assert reply.status == 200, reply.body
    return reply.json()


def pending_diagnosis(api: Api, question: str) -> tuple[dict, dict]:
    answer = ask(api, question)
    reply = api.call("POST", "/diagnose", {"episode_id": answer["episode_id"], "comment": "这个数不对"})
    assert reply.status == 200, reply.body
    report = reply.json()
    assert report["status"] == "pending_review" and any(h["result"] == "ran" for h in report["hypotheses"]), report
    return answer, report


def listed(api: Api, **kwargs: Any) -> list[str]:
    reply = api.call("GET", "/diagnoses", query={"status": "pending_review"}, **kwargs)
    assert reply.status == 200, reply.body
    return [item["id"] for item in reply.json()["items"]]


def test_a_confirmed_diagnosis_is_re_verified_and_becomes_the_lesson_the_next_ask_cites(api, aws):
    before, report = pending_diagnosis(api, QUESTION)
    diagnosis = report["memory_id"]

    # who sees it: li, and a curator of the tenant; not another user, not another tenant's curator
    assert listed(api) == [diagnosis]
    assert listed(api, as_user=(api.tenant, "wang")) == []
    assert listed(api, as_user=(api.tenant, "chen"), roles="curator") == [diagnosis]
    assert listed(api, as_user=("beta", "chen"), roles="curator") == []

    # who may confirm it: li, or a curator naming li; not wang, and the tenant's lessons are a curator's
    refused = api.call("POST", f"/diagnoses/{diagnosis}/confirm", {"owner": "li"}, as_user=(api.tenant, "wang"))
    assert refused.status == 403 and refused.body and '"owner"' in refused.body
    tenant_lesson = api.call("POST", f"/diagnoses/{diagnosis}/confirm", {"owner": "_tenant"})
    assert tenant_lesson.status == 400 and '"owner"' in tenant_lesson.body  # the tenant's partition is no user a body can name
    unknown = api.call("POST", f"/diagnoses/{diagnosis}/confirm", {"hypothesis": "h99"})
    assert unknown.status == 400 and '"hypothesis"' in unknown.body

    confirmed = api.call("POST", f"/diagnoses/{diagnosis}/confirm", {})
    assert confirmed.status == 200, confirmed.body
    lesson = confirmed.json()["memory"]
    assert lesson["status"] == "active" and lesson["status_reason"] == "confirmed by li"
    assert lesson["value"]["verified"] is True and lesson["value"]["confirmed"]["by"] == "li"
    assert lesson["value"]["repair"]["sql"] and lesson["value"]["repair"]["rules"]
    assert lesson["value"]["repaired_output"]["row_count"] >= 1  # it ran again
    assert listed(api) == []

    after = ask(api, QUESTION)
    assert after["sql"] != before["sql"], after
    assert any(c["source"] == f"memory:{diagnosis}@v{lesson['version']}" for c in after["citations"]), after["citations"]

    again = api.call("POST", f"/diagnoses/{diagnosis}/confirm", {})
    assert again.status == 400 and "only one pending_review" in again.body


def test_a_rejected_diagnosis_is_archived_with_the_reason_and_never_steers(api, aws):
    before, report = pending_diagnosis(api, "上个月北京的销售额")
    diagnosis = report["memory_id"]

    # a curator rejects li's diagnosis
    rejected = api.call(
        "POST", f"/diagnoses/{diagnosis}/reject", {"owner": "li", "reason": "按付款日算是对的"}, as_user=(api.tenant, "chen"), roles="curator"
    )
    assert rejected.status == 200, rejected.body
    archived = rejected.json()["memory"]
    assert archived["status"] == "archived" and archived["status_reason"] == "rejected by chen: 按付款日算是对的"
    assert listed(api) == []
    after = ask(api, "上个月北京的销售额")
    assert after["sql"] == before["sql"]
    assert api.call("GET", f"/memories/{diagnosis}").json()["memory"]["status"] == "archived"


def test_a_verified_repair_that_changes_a_metric_definition_waits_for_a_person(api, aws, monkeypatch):
    from memtool.diagnosis.engine import Diagnoser

    real = Diagnoser.diagnose

    def as_if_a_definition_repair_verified(self, *args, **kwargs) -> DiagnosisReport:
        report = real(self, *args, **kwargs)
        report.verified, report.cause = True, "metric_definition"
        report.repairs = [{"kind": "metric_definition", "metric": "gross_revenue", "to": "net_revenue"}]
        report.repaired_sql = "SELECT 1"
        return report

    monkeypatch.setattr(Diagnoser, "diagnose", as_if_a_definition_repair_verified)
    answer = ask(api, QUESTION)
    reply = api.call("POST", "/diagnose", {"episode_id": answer["episode_id"], "expected": {"value": 1.0}})
    assert reply.status == 200, reply.body
    report = reply.json()
    assert report["verified"] is True and report["status"] == "pending_review", report
    assert any("waits for a person" in note for note in report["notes"])
    assert listed(api) == [report["memory_id"]]
