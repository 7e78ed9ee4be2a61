"""MaintenanceFlow's one real step, ReconcileIndex, and how its failure is seen.

- On both record stores: heads the stream indexer left ``pending`` past the grace period are
  indexed and marked; fresh ones are left to the stream; a second run finds nothing.
- A record that cannot be indexed fails the step after the others were tried.
- The real maintenance handler, on the real MaintenanceFlow definition on the local Step Functions
  engine: an index that fails makes the execution FAILED with the step's error, and the template's
  MaintenanceFlowFailuresAlarm, evaluated on the metric a failed Standard execution emits
  (AWS/States ExecutionsFailed by StateMachineArn), goes to ALARM; a clean run leaves it OK.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from memtool.clock import FrozenClock
from memtool.flows.indexing import MemoryIndexer
from memtool.flows.maintenance import IndexReconciler, MaintenanceStepFailed
from memtool.memory.records import IndexState, MemoryDraft, MemoryKind
from memtool.memory.store import MemoryStore, Partition
from memtool.retrieval.embedded_index import EmbeddedIndex
from memtool.retrieval.embedders import HashingEmbedder
from memtool.retrieval.index import IndexDocument, UpsertReport
from memtool.runtime import container

LI = Partition("acme", "li")
WANG = Partition("beta", "wang")


@pytest.fixture
def index(tmp_path: Path) -> EmbeddedIndex:
    built = EmbeddedIndex(tmp_path / "index")
    built.ensure()
    return built


def indexer_over(store: MemoryStore, index: Any) -> MemoryIndexer:
    return MemoryIndexer(store, index, HashingEmbedder(256))  # type: ignore[arg-type]


class FailingFor:
    """An index that refuses the documents of some memories (an outage for those writes)."""

    def __init__(self, inner: EmbeddedIndex, refused: set[str]) -> None:
        self.inner = inner
        self.refused = refused

    def ensure(self) -> None:
        self.inner.ensure()

    def upsert(self, documents: Sequence[IndexDocument]) -> UpsertReport:
        if any(document.memory_id in self.refused for document in documents):
            raise ConnectionError("OpenSearch refused the bulk request")
        return self.inner.upsert(documents)

    def delete(self, refs: Sequence[Any]) -> int:
        return self.inner.delete(refs)

    def indexed_version(self, memory_id: str, tenant: str) -> int | None:
        return self.inner.indexed_version(memory_id, tenant)


def write(store: MemoryStore, where: Partition, content: str, clock: FrozenClock) -> str:
    return store.create(where, MemoryDraft(kind=MemoryKind.PROFILE, content=content, key=f"note.{content}"), clock.now()).record.id


def test_reconcile_indexes_what_the_stream_missed_and_leaves_fresh_writes_to_the_stream(
    store: MemoryStore, clock: FrozenClock, index: EmbeddedIndex
) -> None:
    indexer = indexer_over(store, index)
    missed = [write(store, LI, "金额默认用元", clock), write(store, WANG, "prefers bar charts", clock)]
    done = write(store, LI, "默认看华东", clock)
    indexer.index(store.get(LI, done, clock.now()))  # the stream indexed this one
    clock.advance(minutes=20)
    fresh = write(store, LI, "以后都用分", clock)  # written a moment ago: the stream's job still

    report = IndexReconciler(store, indexer, clock, grace=timedelta(minutes=15)).run()

    assert (report.checked, report.indexed, report.failed) == (2, 2, [])
    assert index.indexed_version(missed[0], "acme") == 1 and index.indexed_version(missed[1], "beta") == 1
    assert store.get(LI, missed[0], clock.now()).index_state == IndexState.INDEXED
    assert store.get(WANG, missed[1], clock.now()).index_state == IndexState.INDEXED
    assert index.indexed_version(fresh, "acme") is None
    assert store.get(LI, fresh, clock.now()).index_state == IndexState.PENDING

    again = IndexReconciler(store, indexer, clock, grace=timedelta(minutes=15)).run()
    assert again.checked == 0  # nothing left behind


def test_a_memory_that_cannot_be_indexed_fails_the_step_after_the_others_were_indexed(
    store: MemoryStore, clock: FrozenClock, index: EmbeddedIndex
) -> None:
    inner = index
    good = write(store, LI, "金额默认用元", clock)
    bad = write(store, LI, "默认看华东", clock)
    indexer = indexer_over(store, FailingFor(inner, {bad}))
    clock.advance(hours=1)

    with pytest.raises(MaintenanceStepFailed, match="could not index 1 of 2 memories.*ConnectionError"):
        IndexReconciler(store, indexer, clock).run()

    assert inner.indexed_version(good, "acme") == 1
    assert store.get(LI, good, clock.now()).index_state == IndexState.INDEXED
    assert store.get(LI, bad, clock.now()).index_state == IndexState.PENDING  # tried again tomorrow


# ---------------------------------------------------------------------- the flow and its alarm


def evaluate_alarm(alarm: dict[str, Any], refs: dict[str, str], datapoints: list[dict[str, Any]]) -> str:
    """CloudWatch's verdict for one evaluation period of a static-threshold alarm: the datapoints
    of the alarm's metric (namespace, name, every dimension) summed by its statistic and compared
    with its threshold; no data is treated as the alarm says (TreatMissingData)."""
    props = alarm["Properties"]
    dimensions = {d["Name"]: refs[d["Value"]["Ref"]] if isinstance(d["Value"], dict) else d["Value"] for d in props["Dimensions"]}
    values = [
        p["Value"]
        for p in datapoints
        if p["Namespace"] == props["Namespace"] and p["MetricName"] == props["MetricName"] and p["Dimensions"] == dimensions
    ]
    if not values:
        return {"notBreaching": "OK", "breaching": "ALARM"}.get(props.get("TreatMissingData", "missing"), "INSUFFICIENT_DATA")
    statistic = {"Sum": sum, "Maximum": max, "Minimum": min}[props["Statistic"]](values)
    compare = {
        "GreaterThanOrEqualToThreshold": statistic >= props["Threshold"],
        "GreaterThanThreshold": statistic > props["Threshold"],
    }[props["ComparisonOperator"]]
    return "ALARM" if compare else "OK"


def execution_metrics(arn: str, status: str) -> list[dict[str, Any]]:
    """What Step Functions publishes for one finished execution (AWS/States, by StateMachineArn)."""
    name = {
        "SUCCEEDED": "ExecutionsSucceeded",
        "FAILED": "ExecutionsFailed",
        "TIMED_OUT": "ExecutionsTimedOut",
        "ABORTED": "ExecutionsAborted",
    }
    return [{"Namespace": "AWS/States", "MetricName": name[status], "Dimensions": {"StateMachineArn": arn}, "Value": 1.0}]


def run_maintenance(monkeypatch: pytest.MonkeyPatch, index: Any) -> tuple[Any, str]:
    monkeypatch.setattr(container, "vector_index", lambda: index)
    runner = container.flow_runner()
    execution = runner.run("MaintenanceFlow", {"trigger": "schedule"}, timeout_seconds=60)
    return execution, runner.arn("MaintenanceFlow")


@pytest.mark.slow
def test_the_maintenance_alarm_fires_when_a_maintenance_step_fails(
    aws: Any, clock: FrozenClock, template: dict[str, Any], monkeypatch: pytest.MonkeyPatch, index: EmbeddedIndex
) -> None:
    alarm = template["Resources"]["MaintenanceFlowFailuresAlarm"]
    store = container.memory_store()
    inner = index
    bad = write(store, LI, "金额默认用元", clock)
    clock.advance(hours=1)

    failed, arn = run_maintenance(monkeypatch, FailingFor(inner, {bad}))

    assert failed.status == "FAILED", failed
    assert failed.error == "MaintenanceStepFailed" and "could not index 1 of 1" in (failed.cause or "")
    assert evaluate_alarm(alarm, {"MaintenanceFlow": arn}, execution_metrics(arn, failed.status)) == "ALARM"

    # The outage is over: the next run indexes the memory, succeeds, and the alarm is OK again.
    fixed, arn = run_maintenance(monkeypatch, inner)
    assert fixed.status == "SUCCEEDED", fixed
    assert fixed.output["reconcile"]["report"]["indexed"] == 1
    assert fixed.output["maintenance"]["report"]["steps"]["reconcile"]["indexed"] == 1
    assert store.get(LI, bad, clock.now()).index_state == IndexState.INDEXED
    assert evaluate_alarm(alarm, {"MaintenanceFlow": arn}, execution_metrics(arn, fixed.status)) == "OK"


def test_reconcile_goes_on_batch_after_batch_until_nothing_is_left(
    store: MemoryStore, clock: FrozenClock, index: EmbeddedIndex
) -> None:
    indexer = indexer_over(store, index)
    ids = [write(store, LI, f"note {n}", clock) for n in range(7)]
    clock.advance(hours=1)

    report = IndexReconciler(store, indexer, clock, limit=3).run()  # three batches of at most 3

    assert (report.checked, report.indexed) == (7, 7)
    assert all(index.indexed_version(memory_id, "acme") == 1 for memory_id in ids)


def test_reconcile_that_runs_out_of_time_with_work_left_fails(
    store: MemoryStore, clock: FrozenClock, index: EmbeddedIndex
) -> None:
    indexer = indexer_over(store, index)
    for n in range(4):
        write(store, LI, f"note {n}", clock)
    clock.advance(hours=1)

    with pytest.raises(MaintenanceStepFailed, match="ran out of its 0 s with memories still not indexed"):
        IndexReconciler(store, indexer, clock, limit=2, time_budget_seconds=0.0).run()


def test_reconcile_indexes_again_a_head_marked_indexed_whose_document_is_gone(
    store: MemoryStore, clock: FrozenClock, index: EmbeddedIndex
) -> None:
    """An index restored from an older backup, a document deleted by hand: the store says
    indexed, the index has nothing. The verification looks it up and indexes it again."""
    from memtool.retrieval.index import DeleteRef

    indexer = indexer_over(store, index)
    kept = write(store, LI, "金额默认用元", clock)
    lost = write(store, WANG, "prefers bar charts", clock)
    for where, memory_id in ((LI, kept), (WANG, lost)):
        indexer.index(store.get(where, memory_id, clock.now()))
    index.delete([DeleteRef(memory_id=lost, tenant="beta", version=1)])
    assert index.indexed_version(lost, "beta") is None and store.get(WANG, lost, clock.now()).index_state == IndexState.INDEXED

    report = IndexReconciler(store, indexer, clock).run()

    assert (report.verified, report.missing, report.indexed) == (2, 1, 1)
    assert index.indexed_version(lost, "beta") == 1 and index.indexed_version(kept, "acme") == 1
    again = IndexReconciler(store, indexer, clock).run()
    assert (again.verified, again.missing) == (2, 0)
