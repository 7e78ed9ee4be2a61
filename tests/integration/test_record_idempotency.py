"""Record is idempotent by execution: Step Functions retries a Record task with the same state,
and the retry adds nothing (on both record stores: SQLite, and DynamoDB on moto).

One episode and no second version of it, the session's turn once (and no new version of the
working memory), the failure's credit counted once on the episode and on the memory it used, and
one diagnose event queued.
"""

from __future__ import annotations

import json

import pytest

from memtool.diagnosis.requests import DiagnoseRequest
from memtool.flows.ask.state import AskInput, AskState, Caller, MemoryUse
from memtool.flows.ask.steps import AskSteps
from memtool.flows.diagnose import DiagnosisService
from memtool.flows.memory_write import MemoryService
from memtool.memory.records import MemoryDraft, MemoryKind
from memtool.memory.slots import SESSION_TURNS, episode_key
from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import MemoryStore, Partition
from memtool.settings import Settings, get_settings

LI = Partition("acme-retry", "li")


class RecordingQueue:
    def __init__(self) -> None:
        self.sent: list[DiagnoseRequest] = []

    def send(self, request: DiagnoseRequest) -> None:
        self.sent.append(request)


def unneeded(what: str):
    def build():
        raise AssertionError(f"Record built the {what}")

    return build


def steps_over(store: MemoryStore, clock, settings: Settings, queue: RecordingQueue) -> AskSteps:
    memories = MemoryService(store, clock, settings)
    diagnosis = DiagnosisService(
        store=store,
        memories=memories,
        clock=clock,
        settings=settings,
        warehouse=unneeded("warehouse"),
        compiler=unneeded("compiler"),
        queue=lambda: queue,
    )
    return AskSteps(
        settings=settings,
        clock=clock,
        memories=memories,
        store=store,
        recall=unneeded("recall"),
        planner=unneeded("planner"),
        warehouse_factory=unneeded("warehouse"),
        sleep=lambda seconds: None,
        diagnosis=lambda: diagnosis,
    )


def failed_state(used: MemoryUse) -> dict:
    """The state Diagnose hands Record after a warehouse error it could not repair."""
    state = AskState(
        episode_id="ep_retried",
        caller=Caller(tenant=LI.tenant, user=LI.owner),
        input=AskInput(question="上个月各渠道的净收入", session_id="s-retry"),
        started_at="2026-11-29T09:00:00+00:00",
        route="nl2sql_query",
        sql="SELECT CAST(region_name AS INT) FROM dim_region",
        plan_status="ready",
        guard_status="passed",
        repair_status="not_repaired",
        repair_attempts=1,
        failure={"class": "type_mismatch", "origin": "execution", "message": "cannot cast", "code": None},
        memories_used=[used],
        timings={"Prepare": 1.0, "Plan": 2.0, "Execute": 3.0, "Diagnose": 4.0},
    )
    raw = state.model_dump(mode="json")
    cause = {"errorType": "WarehouseTypeMismatch", "errorMessage": "cannot cast"}
    raw["error"] = {"Error": "WarehouseTypeMismatch", "Cause": json.dumps(cause)}
    return raw


@pytest.mark.parametrize("step", ["Record", "RecordFailure"])
def test_a_retried_record_writes_the_episode_the_turn_the_credit_and_the_diagnosis_once(store, clock, tmp_path, step):
    # Given a memory the failed answer used, and a session with one earlier turn
    settings = get_settings() if not isinstance(store, SQLiteMemoryStore) else Settings(runtime="local", home=tmp_path)
    now = clock.now()
    used = store.create(LI, MemoryDraft(kind=MemoryKind.KNOWLEDGE, content="净收入按支付月份出账"), now).record
    queue = RecordingQueue()
    steps = steps_over(store, clock, settings, queue)
    earlier = AskState(
        episode_id="ep_earlier",
        caller=Caller(tenant=LI.tenant, user=LI.owner),
        input=AskInput(question="上个月的销售额", session_id="s-retry"),
        started_at="2026-11-29T08:59:00+00:00",
        route="kpi_lookup",
        status="answered",
        sql="SELECT 1",
    )
    steps.run("Record", earlier.model_dump(mode="json"))
    state = failed_state(MemoryUse(id=used.id, version=used.version, kind="knowledge", score=0.5))

    # When Step Functions runs the Record task, and then retries it with the same state
    first = steps.run(step, json.loads(json.dumps(state)))
    again = steps.run(step, json.loads(json.dumps(state)))

    # Then the retry answers as the first attempt did
    assert again["status"] == first["status"] == "failed"
    assert again["error"] == first["error"] and again["notes"] == first["notes"]
    # one episode, one version of it
    episode = store.get_slot(LI, MemoryKind.EPISODIC, episode_key("ep_retried"), now)
    assert episode is not None and episode.version == 1
    assert [r.version for r in store.history(LI, episode.id, now)] == [1]
    episodes = store.list(LI, now, kind=MemoryKind.EPISODIC).items
    assert sorted(r.key for r in episodes) == [episode_key("ep_earlier"), episode_key("ep_retried")]
    # the turn once, in a working memory written once by this episode (version 1 was ep_earlier's)
    working = store.get_slot(LI, MemoryKind.WORKING, SESSION_TURNS.key_for("s-retry"), now)
    assert working is not None
    assert [t["episode_id"] for t in SESSION_TURNS.read(working.value)] == ["ep_earlier", "ep_retried"]
    assert working.version == 2
    # the failure's credit counted once: on the episode and on the memory it used
    for memory_id in (episode.id, used.id):
        credit = store.get(LI, memory_id, now).credit
        assert (credit.uses, credit.failures) == (1, 1), memory_id
        assert [entry.episode_id for entry in credit.recent] == ["ep_retried"]
    # one diagnose event
    assert [(r.episode_id, r.request_id) for r in queue.sent] == [("ep_retried", "ep_retried:failed")]
