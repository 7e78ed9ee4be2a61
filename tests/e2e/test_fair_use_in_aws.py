"""Fair use in AWS: each tenant's request budget, spent by POST /ask and POST /feedback, over the real
Lambda handlers (MEMTOOL_RUNTIME=aws, identity from the authorizer's claims) on moto's DynamoDB.

- A tenant over its budget gets a 429 rate_limited with a Retry-After header (whole seconds) and a
  body naming the budget, before any flow starts; the bucket refills at its rate.
- One tenant's exhaustion does not refuse another tenant.
- An Idempotency-Key replay answers the first answer without spending the budget again.
- POST /feedback spends the same budget.
- The budget lives in the memory table, in one item per tenant outside every memory partition.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from memtool.clock import FrozenClock
from memtool.flows.runner import FlowExecution
from memtool.runtime import container
from memtool.runtime.aws import client
from memtool.runtime.handlers import function_handler
from memtool.runtime.lambda_context import LocalLambdaContext
from memtool.runtime.tables import create_tables
from memtool.settings import Settings, use_settings
from tests.support import ROOT, load_event, table_items

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:memtool-AskFlow"
BURST = 3
PER_MINUTE = 60  # one request a second once the burst is spent


class CountingFlow:
    """A FlowRunner that answers every execution at once and counts them."""

    def __init__(self) -> None:
        self.inputs: list[dict[str, Any]] = []

    def run(self, machine: str, execution_input: dict[str, Any]) -> FlowExecution:
        self.inputs.append(execution_input)
        final = {
            **execution_input,
            "route": "kpi_lookup",
            "status": "answered",
            "plan": {"status": "answered", "route": "kpi_lookup", "answer": f"answer {len(self.inputs)}"},
        }
        return FlowExecution(status="SUCCEEDED", output=final, elapsed_ms=5.0)


@pytest.fixture
def budgeted(template: dict[str, Any], clock: FrozenClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Settings, CountingFlow]]:
    """The AWS settings the template gives the ask and feedback functions, with a small budget."""
    from moto import mock_aws

    suffix = uuid.uuid4().hex[:8]
    settings = Settings(
        runtime="aws",
        region="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        ask_state_machine_arn=ARN,
        warehouse="redshift",
        redshift_secret_arn="arn:aws:secretsmanager:us-east-1:123456789012:secret:memtool-redshift",
        vector_index="none",
        memory_table=f"memory-{suffix}",
        idempotency_table=f"idempotency-{suffix}",
        tenant_requests_per_minute=PER_MINUTE,
        tenant_request_burst=BURST,
    )
    flows = CountingFlow()
    with mock_aws():
        use_settings(settings)
        create_tables(client("dynamodb", settings), settings, template)
        monkeypatch.setattr(container, "flow_runner", lambda: flows)
        yield settings, flows
        container.reset()


def event_for(name: str, body: dict[str, Any], *, tenant: str = "acme-pharma", headers: dict[str, str] | None = None) -> dict[str, Any]:
    event = copy.deepcopy(load_event(name))
    event["body"] = json.dumps(body, ensure_ascii=False)
    event["headers"] = {**event["headers"], **(headers or {})}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    event["requestContext"]["requestId"] = str(uuid.uuid4())
    event["requestContext"]["authorizer"]["claims"]["custom:tenant_id"] = tenant
    return event


def invoke(function: str, event: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    response = function_handler(ROOT, function)(event, LocalLambdaContext(function_name=f"memtool-{function}", timeout_seconds=28))
    headers = {k.lower(): str(v) for k, v in (response.get("headers") or {}).items()}
    for name, values in (response.get("multiValueHeaders") or {}).items():
        headers[name.lower()] = ", ".join(str(v) for v in values)
    return response["statusCode"], headers, json.loads(response["body"] or "null")


def ask(tenant: str = "acme-pharma", headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    return invoke("ask", event_for("ask.json", {"question": "上个月净收入"}, tenant=tenant, headers=headers))


def bucket(settings: Settings, tenant: str) -> dict[str, Any]:
    (item,) = [i for i in table_items(settings) if i["pk"]["S"] == f"B#{tenant}"]
    return item


def test_a_tenant_over_its_budget_gets_429_with_retry_after_and_no_flow(budgeted, clock: FrozenClock) -> None:
    settings, flows = budgeted
    answers = [ask() for _ in range(BURST)]
    assert [status for status, _, _ in answers] == [200] * BURST
    assert len(flows.inputs) == BURST

    status, headers, body = ask()

    assert status == 429
    assert headers["retry-after"] == "1"  # one request a second: the next one fits in a second
    assert headers["content-type"].startswith("application/json")
    assert body["error"] == "rate_limited"
    assert body["retry_after_seconds"] == 1
    assert body["budget"] == {"name": "tenant_requests", "per_minute": PER_MINUTE, "burst": BURST}
    assert "acme-pharma" in body["message"] and "request budget" in body["message"] and "retry after 1 s" in body["message"]
    assert len(flows.inputs) == BURST  # refused before any flow started
    # The stored bucket: the burst spent at one instant, its item outside every memory partition.
    item = bucket(settings, "acme-pharma")
    assert item["sk"]["S"] == "budget#tenant_requests" and "item_type" not in item
    assert int(item["spent"]["N"]) == BURST
    now_us = int(clock.now().timestamp() * 1_000_000)
    assert int(item["tat"]["N"]) == now_us + BURST * 1_000_000
    assert int(item["expires_at"]["N"]) > clock.now().timestamp()  # the table's TTL removes an idle bucket

    # The bucket refills at its rate: a second later one more request is accepted, and only one.
    clock.advance(seconds=1)
    assert ask()[0] == 200
    status, headers, _ = ask()
    assert (status, headers["retry-after"]) == (429, "1")
    clock.advance(seconds=30)
    assert [ask()[0] for _ in range(BURST + 1)] == [200] * BURST + [429]  # full again, never more than the burst


def test_one_tenants_exhaustion_does_not_refuse_another_tenant(budgeted) -> None:
    settings, flows = budgeted
    for _ in range(BURST):
        assert ask("acme-pharma")[0] == 200
    assert ask("acme-pharma")[0] == 429

    assert [ask("initech")[0] for _ in range(BURST)] == [200] * BURST
    assert ask("initech")[0] == 429
    assert int(bucket(settings, "acme-pharma")["spent"]["N"]) == int(bucket(settings, "initech")["spent"]["N"]) == BURST
    assert len(flows.inputs) == 2 * BURST


def test_an_idempotent_replay_spends_nothing_and_feedback_spends_the_same_budget(budgeted) -> None:
    settings, flows = budgeted
    key = {"Idempotency-Key": "fair-use-replay-0001"}
    first = ask(headers=key)
    replays = [ask(headers=key) for _ in range(BURST + 2)]
    assert first[0] == 200 and all(r[0] == 200 and r[2] == first[2] for r in replays)
    assert len(flows.inputs) == 1
    assert int(bucket(settings, "acme-pharma")["spent"]["N"]) == 1

    feedback = load_event("feedback.json")
    body = json.loads(feedback["body"])
    statuses = [invoke("feedback", event_for("feedback.json", body))[0] for _ in range(BURST - 1)]
    assert 429 not in statuses  # spent, then answered as feedback on this episode would be
    status, headers, refused = invoke("feedback", event_for("feedback.json", body))
    assert (status, refused["error"], headers["retry-after"]) == (429, "rate_limited", "1")
    assert ask()[0] == 429  # the ask shares the budget feedback spent
    assert int(bucket(settings, "acme-pharma")["spent"]["N"]) == BURST


def test_without_a_budget_nothing_is_spent_or_stored(budgeted) -> None:
    settings, flows = budgeted
    use_settings(settings.model_copy(update={"tenant_requests_per_minute": 0}))
    assert [ask()[0] for _ in range(BURST + 2)] == [200] * (BURST + 2)
    assert [i for i in table_items(settings) if i["pk"]["S"].startswith("B#")] == []
