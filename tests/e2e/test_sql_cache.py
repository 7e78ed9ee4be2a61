"""The SQL semantic cache end to end: the real AskFlow on moto's engine, the flow-steps handler,
the record store and the embedded index, the DuckDB demo warehouse."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from memtool.runtime import container
from memtool.settings import get_settings, use_settings

from tests.support import Api


def ask(api: Api, question: str, **body: Any) -> dict:
    reply = api.call("POST", "/ask", {"question": question, **body})
    assert reply.status == 200, reply.body
    answer = reply.json()
    assert answer["status"] == "answered", (answer["status"], answer.get("error"), answer.get("cache"), answer.get("timings"))
    return answer


SWAPS = [
    ("上个月上海的净收入", "上个月北京的净收入"),
    ("上个月的净收入", "上上个月的净收入"),
    ("上个月医院渠道的净收入", "上个月电商渠道的净收入"),
    ("上个月各渠道的净收入", "上个月各渠道的销售额"),
    ("上个月净收入前3的城市", "上个月净收入前5的城市"),
    ("上个月不含电商的净收入", "上个月电商的净收入"),
    ("net revenue in Shanghai last month", "net revenue in Beijing last month"),
    ("net revenue last month", "net revenue the month before last"),
    ("net revenue from hospitals last month", "net revenue from e-commerce last month"),
    ("net revenue by channel last month", "gross revenue by channel last month"),
    ("top 3 cities by net revenue last month", "top 5 cities by net revenue last month"),
]


@pytest.mark.parametrize(("first", "second"), SWAPS)
def test_an_entity_swap_is_never_a_hit(api, aws, first, second):
    a = ask(api, first)
    b = ask(api, second)
    assert a["cache"]["stored"] and b["cache"]["hit"] is False, (a["cache"], b["cache"])
    assert b["sql"] != a["sql"] and "Plan" in b["timings"]


PARAPHRASES = [
    ("上个月各渠道的净收入", "上月各个渠道净收入是多少"),
    ("net revenue by channel last month", "上个月各渠道的净收入"),
    ("上个月上海的销售额", "gross revenue in Shanghai last month"),
]


@pytest.mark.parametrize(("first", "second"), PARAPHRASES)
def test_a_paraphrase_is_a_hit_that_skips_recall_and_planning_and_runs_again(api, aws, first, second):
    a = ask(api, first)
    b = ask(api, second)
    assert b["cache"]["hit"] is True and b["cache"]["reason"] == "exact" and b["cache"]["key"] == a["cache"]["key"]
    assert "Recall" not in b["timings"] and "Plan" not in b["timings"] and "Execute" in b["timings"]
    assert b["rows"] == a["rows"] and b["cache"]["entry"] == a["cache"]["stored"]


@pytest.fixture
def own_warehouse(aws, demo_warehouse: Path, tmp_path: Path) -> Path:
    """A copy of the demo warehouse this test may change."""
    path = tmp_path / "warehouse.duckdb"
    shutil.copy(demo_warehouse, path)
    use_settings(get_settings().model_copy(update={"warehouse_path": path}))
    return path


def _double_everything(path: Path) -> None:
    import duckdb

    container.warehouse().close()  # memtool's read-only connection reopens on the next query
    connection = duckdb.connect(str(path))
    try:
        connection.execute("UPDATE fact_order_line SET gross_amount = gross_amount * 2, discount_amount = discount_amount * 2")
        connection.execute("UPDATE fact_refund SET refund_amount = refund_amount * 2")
    finally:
        connection.close()


def test_a_hit_makes_no_converse_call_and_runs_the_sql_again(api, own_warehouse, monkeypatch):
    """With the Bedrock planner: the first ask is planned by the model (one Converse call); the
    warehouse then changes; the paraphrase is a hit, makes no call, and shows the new number."""
    from memtool.planning.bedrock_planner import BedrockPlanner

    from tests.contract.test_bedrock_planner import LAST_MONTH, tool_use

    class Converse:
        """The Bedrock runtime's Converse as the planner calls it (its wire format is contract-tested
        in tests/contract/test_bedrock_planner.py): one scripted answer, and every call counted."""

        def __init__(self) -> None:
            self.calls: list[dict[str, Any]] = []

        def converse(self, **request: Any) -> dict[str, Any]:
            self.calls.append(request)
            assert len(self.calls) == 1, "a cache hit must not call the model"
            return tool_use("propose_intent", {"metric": "net_revenue", "time_window": LAST_MONTH}).payload

    double = Converse()
    rules = container.rule_planner()
    bedrock = BedrockPlanner(
        double,
        model_id="anthropic.claude-3-5-sonnet-20240620-v1:0",
        catalog=rules.parser.catalog,
        entities=rules.parser.entities,
        today=container.today,
        fallback=rules,
    )
    monkeypatch.setattr(container, "planner", lambda tenant=None: bedrock)

    first = ask(api, "上个月的净收入是多少")
    assert first["cache"]["hit"] is False and len(double.calls) == 1 and first["cache"]["stored"]
    _double_everything(own_warehouse)
    second = ask(api, "上个月净收入")

    assert second["cache"]["hit"] is True and len(double.calls) == 1  # no second Converse call
    assert second["rows"][0][-1] == pytest.approx(first["rows"][0][-1] * 2, rel=1e-6)


def test_entries_expire_after_their_ttl_and_on_a_model_version_change(api, aws, clock, monkeypatch):
    ask(api, "上个月各渠道的净收入")
    clock.advance(seconds=get_settings().cache_ttl_seconds - 1)
    assert ask(api, "上个月各渠道的净收入")["cache"]["hit"] is True
    clock.advance(seconds=2)
    expired = ask(api, "上个月各渠道的净收入")
    assert expired["cache"]["hit"] is False and expired["cache"]["reason"] == "no_entry"
    assert ask(api, "上个月各渠道的净收入")["cache"]["hit"] is True  # stored again

    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    rules = container.rule_planner()
    catalog = rules.parser.catalog.model_copy(update={"model_version": "2"})
    newer = RulePlanner(catalog, EntityIndex.static(catalog), today=container.today)
    monkeypatch.setattr(container, "planner", lambda tenant=None: newer)
    changed = ask(api, "上个月各渠道的净收入")
    assert changed["cache"]["hit"] is False and changed["cache"]["key"] != expired["cache"]["key"]


def test_another_tenants_or_users_entry_is_never_served(api, aws, demo_warehouse):
    # Two tenants mean different things by one word: each gets its own SQL, never the other's.
    acme, globex = api, Api(api.gateway, tenant=api.tenant + "-globex", user="li")
    for who, means in ((acme, "销售额"), (globex, "净收入")):
        reply = who.call("POST", "/feedback", {"episode_id": ask(who, "上个月的订单数")["episode_id"], "correction": {"term": "营收", "means": means, "scope": "tenant"}}, roles="curator")
        assert reply.status == 200, reply.body
    a = ask(acme, "上个月的营收")
    b = ask(globex, "上个月的营收")
    assert b["cache"]["hit"] is False and "gross_revenue" in a["columns"] and "net_revenue" in b["columns"]
    assert ask(globex, "上个月的营收")["cache"]["hit"] is True  # its own entry

    # A user's lesson makes the entry theirs: another user of the tenant never gets it.
    from memtool.semantic.compiler import CompileOptions, compile_intent
    from memtool.semantic.intent import Intent
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    first = ask(acme, "上个月上海的销售额")
    intent = acme.call("GET", f"/episodes/{first['episode_id']}").json()["episode"]["value"]["intent"]
    warehouse = DuckDBWarehouse(demo_warehouse)
    try:
        by_order_date = warehouse.run(compile_intent(Intent.model_validate(intent), options=CompileOptions().with_time_column("gross_revenue", "order_date")).sql, max_rows=5, timeout_seconds=10).rows[0][-1]
    finally:
        warehouse.close()
    report = acme.call("POST", "/diagnose", {"episode_id": first["episode_id"], "expected": {"value": by_order_date}}).json()
    assert report["verified"], (report["hypotheses"], report["notes"], by_order_date)
    li = ask(acme, "上个月上海的销售额")
    assert li["cache"]["hit"] is False and "order_date" in li["sql"]  # a new lesson: a new key
    assert ask(acme, "上个月上海的销售额")["cache"]["hit"] is True
    wang = ask(Api(api.gateway, tenant=api.tenant, user="wang"), "上个月上海的销售额")
    assert "order_date" not in wang["sql"] and wang["cache"]["key"] != li["cache"]["key"]
    assert wang["cache"]["entry"] != li["cache"]["entry"] or wang["cache"]["hit"] is False


def test_a_follow_up_is_never_served_from_the_cache(api, aws):
    ask(api, "上个月北京的净收入")
    ask(api, "上个月上海的净收入", session_id="s-1")
    follow = ask(api, "那北京呢", session_id="s-1")
    assert follow["cache"]["hit"] is False and follow["cache"]["reason"] == "follow_up"


def test_health_and_the_answer_show_the_cache(api, aws):
    from memtool.cache.sql_cache import STATS

    before = STATS.snapshot()
    ask(api, "上个月各渠道的净收入")
    ask(api, "上月各个渠道净收入是多少")
    after = STATS.snapshot()
    assert after["hits"] == before["hits"] + 1 and after["stored"] >= before["stored"] + 1
    assert after["misses_by_reason"].get("no_entry", 0) >= before["misses_by_reason"].get("no_entry", 0) + 1


class _Model:
    """Converse as the Bedrock planner calls it: 动销 (a word the catalog lacks) read as units, the
    city from the question; every call counted. The wire format is contract-tested elsewhere."""

    CITIES = {"上海": "上海", "北京": "北京", "杭州": "杭州"}

    def __init__(self) -> None:
        self.calls: list[str] = []

    def converse(self, **request: Any) -> dict[str, Any]:
        from tests.contract.test_bedrock_planner import LAST_MONTH, tool_use

        text = "\n".join(block["text"] for block in request["messages"][0]["content"] if "text" in block)
        question = text.rsplit("Question:", 1)[1].strip()
        self.calls.append(question)
        city = next(c for c in self.CITIES if c in question)
        op = "not_in" if "不含" in question else "in"
        return tool_use(
            "propose_intent", {"metric": "units", "filters": [{"dimension": "city", "op": op, "values": [city]}], "time_window": LAST_MONTH}
        ).payload


@pytest.fixture
def model(aws, monkeypatch) -> _Model:
    from memtool.planning.bedrock_planner import BedrockPlanner

    double = _Model()
    rules = container.rule_planner()
    bedrock = BedrockPlanner(
        double, model_id="anthropic.claude-3-5-sonnet-20240620-v1:0", catalog=rules.parser.catalog, entities=rules.parser.entities, today=container.today, fallback=rules
    )
    monkeypatch.setattr(container, "planner", lambda tenant=None: bedrock)
    return double


def test_a_question_only_a_model_can_plan_is_matched_by_shape_and_its_values_bound_in(api, model, drain):
    first = ask(api, "上个月上海的动销")
    assert first["cache"]["reason"] == "no_candidate" and first["cache"]["stored"] and model.calls == ["上个月上海的动销"]
    drain.drain()  # the entry's masked text reaches the vector index

    second = ask(api, "上个月北京的动销")

    assert second["cache"]["hit"] is True and second["cache"]["reason"] == "masked", second["cache"]
    assert second["cache"]["similarity"] >= 0.92
    assert second["cache"]["bound_slots"] == [{"slot": "window", "from": "上个月", "to": "上个月"}, {"slot": "city", "from": "上海", "to": "北京"}]
    assert model.calls == ["上个月上海的动销"]  # no Converse call for the hit
    assert "'北京'" in second["sql"] and "'上海'" not in second["sql"]
    fresh = ask(Api(api.gateway, tenant=api.tenant + "-fresh", user="li"), "上个月北京的动销")
    assert second["rows"] == fresh["rows"]  # the bound SQL is the one the model's intent compiles to


@pytest.mark.parametrize("other", ["上个月北京的GMV", "上个月不含北京的动销"])
def test_a_shape_with_another_term_or_a_negation_is_refused(api, model, drain, other):
    ask(api, "上个月上海的动销")
    drain.drain()
    answer = ask(api, other) if "GMV" not in other else api.call("POST", "/ask", {"question": other}).json()
    assert answer["cache"]["hit"] is False, answer["cache"]


def test_entries_keep_no_pii_name_no_one_and_are_read_by_admins_only(api, aws):
    answer = ask(api, "上个月上海各渠道的净收入 请发到 zhang.san@example.com")
    entry_id = answer["cache"]["stored"].removeprefix("memory:").split("@")[0]
    other = Api(api.gateway, tenant=api.tenant, user="zhang")
    assert other.call("GET", f"/memories/{entry_id}").status in (403, 404)
    assert other.call("GET", "/memories", query={"kind": "cache", "scope": "tenant"}).status == 403
    assert all(m["kind"] != "cache" for m in other.call("GET", "/memories", query={"scope": "tenant"}).json()["items"])
    entry = api.call("GET", f"/memories/{entry_id}", roles="admin").json()["memory"]
    assert "zhang.san@example.com" not in str(entry["value"]) + entry["content"]
    assert entry["provenance"]["author"] is None and entry["provenance"]["episode_id"] is None


def test_a_question_that_states_a_preference_is_never_served_or_kept(api, aws):
    first = ask(api, "以后默认用万元，上个月各渠道的净收入")
    assert first["cache"]["hit"] is False and first["cache"]["reason"] == "preference" and "stored" not in first["cache"]
    other = Api(api.gateway, tenant=api.tenant, user="wang")
    second = ask(other, "以后默认用万元，上个月各渠道的净收入")
    assert second["cache"]["hit"] is False
    assert other.call("GET", "/memories", query={"kind": "profile"}).json()["items"], "wang's preference was remembered"


def test_a_thumbs_down_drops_the_cached_sql_and_empty_answers_are_not_kept(api, aws):
    ask(api, "上个月各渠道的净收入")
    hit = ask(api, "上月各个渠道净收入是多少")
    assert hit["cache"]["hit"] is True
    reply = api.call("POST", "/feedback", {"episode_id": hit["episode_id"], "rating": -1})
    assert any("cached SQL of this answer" in note for note in reply.json()["notes"])
    assert ask(Api(api.gateway, tenant=api.tenant, user="wang"), "上个月各渠道的净收入")["cache"]["hit"] is False
    empty = api.call("POST", "/ask", {"question": "2030年各渠道的净收入"}).json()
    assert empty["status"] == "no_data" and "stored" not in empty["cache"], empty  # a period outside the data is never kept


def test_an_entry_planned_from_a_few_shot_is_stale_once_the_few_shot_is_gone(api, aws, drain):
    """A few-shot is no part of the key (it is found by the question's shape), so a hit checks that
    every memory that shaped the entry is still there at its version."""
    session = {"session_id": "s-1"}
    asked = api.call("POST", "/ask", {"question": "上个月华东的动销", **session}).json()
    assert asked["status"] == "needs_clarification", asked
    reply = ask(api, "销量", **session)
    api.call("POST", "/feedback", {"episode_id": reply["episode_id"], "rating": 1})
    [candidate] = api.call("GET", "/fewshots", roles="admin", as_user=(api.tenant, "boss")).json()["items"]
    assert api.call("POST", f"/fewshots/{candidate['id']}/approve", roles="admin", as_user=(api.tenant, "boss")).status == 200
    drain.drain()
    zhang = Api(api.gateway, tenant=api.tenant, user="zhang")
    templated = ask(zhang, "上个月华北的动销")
    assert any(m["kind"] == "fewshot" for m in templated["memories_used"]) and templated["cache"]["stored"]
    drain.drain()
    assert api.call("DELETE", f"/memories/{candidate['id']}", roles="admin", as_user=(api.tenant, "boss")).status == 204
    sun = Api(api.gateway, tenant=api.tenant, user="sun")
    later = sun.call("POST", "/ask", {"question": "上个月华中的动销"}).json()
    assert later["cache"]["hit"] is False and later["status"] == "needs_clarification", later["cache"]
