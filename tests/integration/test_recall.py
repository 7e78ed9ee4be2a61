"""Recall end to end on moto: API writes, the stream into the real indexer, hybrid recall back to
the source, with the embedded index and the hashing embedder."""

from __future__ import annotations

import pytest

from memtool.memory.records import MemoryKind
from memtool.retrieval.index import IndexUnavailable
from memtool.runtime import container
from memtool.settings import use_settings

from tests.support import Api

ROUTES = ("nl2sql_query", "kpi_lookup", "business_knowledge_qa", "deep_analysis_workflow")


def remember(api: Api, content: str, kind: str = "correction", **fields) -> dict:
    reply = api.call("POST", "/memories", {"kind": kind, "content": content, **fields})
    assert reply.status in (200, 201), reply.body
    return reply.json()["memory"]


def search(api: Api, q: str, route: str = "nl2sql_query", as_user=None, tools: str | None = None) -> dict:
    query = {"q": q, "route": route}
    if tools:
        query["tools"] = tools
    reply = api.call("GET", "/memories/search", query=query, as_user=as_user)
    assert reply.status == 200, reply.body
    return reply.json()


def ids(result: dict) -> list[str]:
    return [item["memory"]["id"] for item in result["items"]]


def test_a_written_memory_is_found_after_the_stream_is_drained(api, drain):
    memory = remember(api, "“华东大区”指 region_name = 华东", source_text="华东大区就是华东")
    assert drain.drain() >= 1
    result = search(api, "华东大区的净收入")
    assert ids(result) == [memory["id"]]
    assert result["coverage"]["index_available"] is True
    assert result["items"][0]["cosine"] > 0
    # and the indexer recorded that this version is indexed
    assert api.call("GET", f"/memories/{memory['id']}").json()["memory"]["index_state"] == "indexed"


def test_after_a_patch_recall_returns_the_new_version_even_while_the_index_holds_the_old_text(api, drain):
    memory = remember(api, "净收入 excludes test orders; 口径 v1")
    drain.drain()
    patched = api.call(
        "PATCH", f"/memories/{memory['id']}", {"expected_version": 1, "content": "净收入 excludes test orders and unpaid lines; 口径 v2"}
    )
    assert patched.status == 200
    # Given the index has not seen version 2 yet
    assert container.vector_index().indexed_version(memory["id"], api.tenant) == 1

    result = search(api, "净收入 口径")

    item = result["items"][0]
    assert (item["memory"]["version"], item["memory"]["content"]) == (2, "净收入 excludes test orders and unpaid lines; 口径 v2")
    assert item["refreshed"] is True and result["coverage"]["stale_refreshed"] == 1
    # When the stream catches up, the index holds version 2 and nothing is refreshed any more
    drain.drain()
    assert container.vector_index().indexed_version(memory["id"], api.tenant) == 2
    again = search(api, "净收入 口径")
    assert again["items"][0]["refreshed"] is False and again["items"][0]["memory"]["version"] == 2


def test_with_the_index_down_recall_falls_back_to_lexical_search_and_says_so(api, drain, monkeypatch):
    memory = remember(api, "退款率 = refunds / gross revenue", key="metric.refund_rate")
    remember(api, "默认图表用柱状图", kind="profile", key="display.chart")
    drain.drain()

    class DownIndex:
        def hybrid(self, query):
            raise IndexUnavailable("connection refused by the vector index")

    monkeypatch.setattr(container, "vector_index", lambda: DownIndex())
    result = search(api, "退款率怎么算")

    assert ids(result) == [memory["id"]]
    coverage = result["coverage"]
    assert coverage["index_available"] is False
    assert coverage["fallback"] == "lexical_store_scan"
    assert "connection refused" in coverage["reason"]


def test_with_no_index_configured_recall_still_answers_and_reports_it(api, aws):
    memory = remember(api, "退款率 = refunds / gross revenue")
    use_settings(aws.model_copy(update={"vector_index": "none"}))
    result = search(api, "退款率")
    assert ids(result) == [memory["id"]]
    assert result["coverage"]["index_available"] is False and result["coverage"]["reason"]


@pytest.mark.parametrize("route", ROUTES)
def test_tenant_isolation_holds_through_recall_in_every_route(api, drain, route):
    text = "华东大区 净收入 口径: exclude test lines"
    mine = remember(api, text)
    profile = remember(api, "华东大区 净收入 默认用万元", kind="profile")
    others = []
    for who in (("tenant-b", "li"), ("tenant-b", "wang"), (api.tenant, "wang")):
        reply = api.call("POST", "/memories", {"kind": "correction", "content": text}, as_user=who)
        others.append(reply.json()["memory"]["id"])
        reply = api.call("POST", "/memories", {"kind": "profile", "content": "华东大区 净收入 默认用万元"}, as_user=who)
        others.append(reply.json()["memory"]["id"])
    drain.drain()

    seen = set(ids(search(api, "华东大区 净收入", route=route)))

    assert seen <= {mine["id"], profile["id"]}
    assert seen  # the caller's own memories are found
    assert not seen & set(others)
    # and tenant B sees only its own
    theirs = set(ids(search(api, "华东大区 净收入", route=route, as_user=("tenant-b", "li"))))
    assert theirs and theirs <= set(others) and not theirs & {mine["id"], profile["id"]}


def test_a_forged_index_entry_pointing_at_another_tenant_is_dropped_at_the_source(api, drain):
    from memtool.retrieval.documents import index_document
    from memtool.retrieval.embedders import HashingEmbedder

    theirs = api.call("POST", "/memories", {"kind": "correction", "content": "secret 净收入 rule"}, as_user=("tenant-b", "li"))
    drain.drain()
    record = container.memory_store().get_many("tenant-b", [("li", theirs.json()["memory"]["id"])])
    forged = next(iter(record.values())).model_copy(update={"tenant": api.tenant})
    vector = HashingEmbedder().embed(["secret 净收入 rule"])[0]
    container.vector_index().upsert([index_document(forged, vector, container.embedder().id)])

    result = search(api, "secret 净收入 rule")

    assert ids(result) == []
    assert result["coverage"]["dropped"] == {"missing": 1}


def test_archived_and_expired_memories_are_never_returned(api, drain, clock):
    archived = remember(api, "旧口径: 净收入 includes test lines")
    working = remember(api, "这次 净收入 用分", kind="working", session_id="s-1")
    kept = remember(api, "净收入 口径 excludes test lines")
    drain.drain()
    api.call("PATCH", f"/memories/{archived['id']}", {"expected_version": 1, "status": "archived"})

    # Before the index sees the archive, the source check drops it
    before = search(api, "净收入 口径 test lines", route="deep_analysis_workflow")
    assert archived["id"] not in ids(before)
    assert before["coverage"]["dropped"].get("inactive") == 1
    # After, the index filter keeps it out altogether
    drain.drain()
    after = search(api, "净收入 口径 test lines", route="deep_analysis_workflow")
    assert archived["id"] not in ids(after) and "inactive" not in after["coverage"]["dropped"]
    assert kept["id"] in ids(after)

    # Working memory is not recalled by kind budget; an expired correction is dropped as expired
    clock.advance(days=181)
    late = search(api, "净收入 口径 test lines", route="deep_analysis_workflow")
    assert ids(late) == [] and late["coverage"]["dropped"]["expired"] >= 1
    assert working["id"] not in ids(before)


def test_route_budgets_cap_each_kind(api, drain):
    # Distinct memories: near duplicates would collapse into one before the budget applies
    for preference in ("默认按月", "用万元", "按大区拆分", "排除测试订单", "用柱状图", "同比上年", "只看线上渠道"):
        remember(api, f"偏好: 净收入 报表 {preference}", kind="profile")
    for rule in ("不含测试订单", "含税", "按支付日期"):
        remember(api, f"纠正: 净收入 报表 口径 {rule}", kind="correction")
    drain.drain()

    kpi = search(api, "净收入 报表", route="kpi_lookup")
    nl2sql = search(api, "净收入 报表", route="nl2sql_query")

    def kinds(result):
        counts = {}
        for item in result["items"]:
            counts[item["memory"]["kind"]] = counts.get(item["memory"]["kind"], 0) + 1
        return counts

    assert kinds(kpi) == {"profile": 2, "correction": 1}
    assert kinds(nl2sql) == {"profile": 5, "correction": 3}
    assert kpi["coverage"]["budgets"] == {"profile": 2, "correction": 1, "knowledge": 1, "causal": 1}


def test_tool_match_ranks_a_memory_whose_trajectory_used_the_tool_higher(api, drain):
    plain = remember(api, "episode: 上月净收入 by channel", kind="episodic")
    with_tool = remember(
        api,
        "episode: 上月净收入 by sales channel",  # not identical, or the two would collapse into one
        kind="episodic",
        value={"trajectory": [{"tool": "anomaly_detection"}]},
    )
    drain.drain()
    result = search(api, "上月净收入 by channel", route="deep_analysis_workflow", tools="anomaly_detection")
    assert ids(result)[:2] == [with_tool["id"], plain["id"]]
    assert result["items"][0]["parts"]["tool_match"] > result["items"][1]["parts"]["tool_match"]


def test_search_results_are_in_score_order_whatever_the_kind(api, drain):
    # Given memories of three kinds that recall keeps kind by kind (profile, episodic, correction
    # for nl2sql), the correction naming the question's term scoring highest
    chart = remember(api, "channel tables: 单子数 by channel shown as a bar chart", kind="profile", key="display.chart", value={"chart": "bar"})
    episode = remember(api, "episode: 单子数 by channel last month", kind="episodic")
    term = remember(api, "单子数 means orders", value={"term": "单子数", "maps_to": {"metric": "order_count"}})
    drain.drain()

    result = search(api, "单子数 by channel")

    assert ids(result) == [term["id"], chart["id"], episode["id"]]
    scores = [item["score"] for item in result["items"]]
    assert scores == sorted(scores, reverse=True) and scores[0] == 1.0


def test_episodic_memories_decay_with_age(api, drain, clock):
    old = remember(api, "episode: 华南 退款率 analysis", kind="episodic")
    clock.advance(days=30)
    new = remember(api, "episode: 华南 退款率 weekly analysis", kind="episodic")  # not a duplicate of the old one
    drain.drain()
    result = search(api, "华南 退款率", route="deep_analysis_workflow")
    assert ids(result) == [new["id"], old["id"]]
    assert result["items"][1]["parts"]["decay"] == pytest.approx(1 - 0.02 * 30)


def test_forget_purges_the_index_through_the_stream(api, drain):
    memory = remember(api, "净收入 口径 v1")
    drain.drain()
    assert container.vector_index().indexed_version(memory["id"], api.tenant) == 1
    api.call("DELETE", f"/memories/{memory['id']}")
    drain.drain()
    assert container.vector_index().indexed_version(memory["id"], api.tenant) is None
    assert ids(search(api, "净收入 口径")) == []


def test_bad_search_queries_name_the_field(api, aws):
    assert api.call("GET", "/memories/search", query={"route": "kpi_lookup"}).json()["field"] == "q"
    bad_route = api.call("GET", "/memories/search", query={"q": "x", "route": "guess"})
    assert bad_route.status == 400 and bad_route.json()["field"] == "route"


def test_kinds_missing_from_a_budget_are_not_recalled(api, drain):
    remember(api, "episode: 净收入 by channel", kind="episodic")
    drain.drain()
    # kpi_lookup's budget has no episodic memories
    assert search(api, "净收入 by channel", route="kpi_lookup")["items"] == []
    assert MemoryKind.EPISODIC.value not in search(api, "x", route="kpi_lookup")["coverage"]["budgets"]


def test_an_index_that_cannot_be_built_degrades_recall_with_the_reason(api, aws):
    memory = remember(api, "退款率 = refunds / gross revenue")
    use_settings(aws.model_copy(update={"vector_index": "embedded", "home": aws.home / "index-is-a-file"}))
    (aws.home).mkdir(parents=True, exist_ok=True)
    (aws.home / "index-is-a-file").write_text("not a folder")  # EmbeddedIndex cannot create its folder here

    result = search(api, "退款率")

    assert ids(result) == [memory["id"]]
    assert result["coverage"]["index_available"] is False
    assert result["coverage"]["reason"].startswith("vector index unavailable:")


# ---- the relevance floor, near duplicates, negative examples, term corrections -------------------

UNRELATED = "zzz qqq unrelated words"


def rate(api: Api, memory_id: str, *, feedback_score: float = 0.0, successes: int = 0, failures: int = 0) -> None:
    """Give a stored memory a credit, as the feedback loop would (through the store's credit write)."""
    from memtool.memory.records import Credit
    from memtool.memory.store import Partition

    now = container.clock().now()
    credit = Credit(uses=successes + failures, successes=successes, failures=failures, feedback_score=feedback_score)
    container.memory_store().update_credit(Partition(api.tenant, api.user), memory_id, lambda _head: credit, now, now)


def everyday_memories(api: Api) -> dict[str, dict]:
    return {
        "profile": remember(api, "默认图表用柱状图", kind="profile", key="display.chart"),
        "episode": remember(api, "episode: 上月净收入 by channel", kind="episodic", value={"outcome": "answered"}),
        "correction": remember(api, "退款率 = refunds / gross revenue", key="metric.refund_rate"),
        "filler": remember(api, "use plain words in chart titles", kind="profile"),  # shares only a filler word
    }


def test_unrelated_words_recall_nothing_from_the_index_and_coverage_counts_the_drops(api, drain):
    memories = everyday_memories(api)
    drain.drain()

    result = search(api, UNRELATED, route="deep_analysis_workflow")

    assert result["items"] == []
    coverage = result["coverage"]
    assert coverage["index_available"] is True
    assert coverage["candidates_seen"] == 4
    assert coverage["dropped"] == {"below_floor": 4}
    # and a relevant question still finds its memory, past the same floor
    relevant = search(api, "上月净收入 by channel", route="deep_analysis_workflow")
    assert memories["episode"]["id"] in ids(relevant)
    assert memories["profile"]["id"] not in ids(relevant)


def test_unrelated_words_recall_nothing_on_the_lexical_fallback(api, drain, monkeypatch):
    memories = everyday_memories(api)
    drain.drain()

    class DownIndex:
        def hybrid(self, query):
            raise IndexUnavailable("connection refused by the vector index")

    monkeypatch.setattr(container, "vector_index", lambda: DownIndex())
    result = search(api, UNRELATED, route="deep_analysis_workflow")

    assert result["items"] == []
    coverage = result["coverage"]
    assert coverage["fallback"] == "lexical_store_scan"
    # BM25 matched the filler word "words"; the key-term rule does not count it
    assert coverage["candidates_seen"] == 1 and coverage["dropped"] == {"below_floor": 1}
    assert ids(search(api, "退款率怎么算", route="deep_analysis_workflow")) == [memories["correction"]["id"]]


def test_near_duplicates_collapse_into_the_best_one(api, drain):
    first = remember(api, "净收入 口径: 不含测试订单")
    same_words = remember(api, "净收入 口径 —— 不含测试订单!")  # other punctuation: cosine 1.0
    identical = remember(api, "净收入 口径: 不含测试订单", key="rule.net_revenue_scope")  # same content, other slot
    other = remember(api, "净收入 口径: 含税")
    drain.drain()

    result = search(api, "净收入 口径")

    returned = ids(result)
    assert len(returned) == 2 and other["id"] in returned
    assert len(set(returned) & {first["id"], same_words["id"], identical["id"]}) == 1
    assert result["coverage"]["dropped"] == {"near_duplicate": 2}


def test_failed_and_thumbs_down_episodes_are_never_recalled_as_examples(api, drain):
    answered = remember(api, "episode: 华南 退款率 by week", kind="episodic", value={"outcome": "answered"})
    failed = remember(api, "episode: 华南 退款率 by week", kind="episodic", value={"outcome": "failed"})
    unclear = remember(api, "episode: 华南 退款率 by week", kind="episodic", value={"outcome": "needs_clarification"})
    thumbs_down = remember(api, "episode: 华南 退款率 by week", kind="episodic", value={"outcome": "answered"})
    often_wrong = remember(api, "episode: 华南 退款率 by week", kind="episodic", value={"outcome": "answered"})
    rate(api, thumbs_down["id"], feedback_score=-0.5, successes=1)
    rate(api, often_wrong["id"], successes=1, failures=2)
    drain.drain()

    result = search(api, "华南 退款率 by week", route="deep_analysis_workflow")

    assert ids(result) == [answered["id"]]
    assert result["coverage"]["dropped"] == {"negative_example": 4}
    for bad in (failed, unclear, thumbs_down, often_wrong):
        assert bad["id"] not in ids(result)


def gmv_correction(api: Api, maps_to: str = "gross_revenue", **fields) -> dict:
    return remember(api, f"毛销售额口径 = {maps_to}", value={"term": "GMV", "maps_to": {"metric": maps_to}}, **fields)


def test_a_term_correction_is_found_by_its_term_among_many_corrections_even_when_the_index_misses_it(
    api, drain, monkeypatch
):
    gmv = gmv_correction(api)
    for n in range(30):  # unrelated terms
        region = ("华东", "华北", "华南", "西南", "华中")[n % 5]
        remember(api, f"代号{n} 指 region {region}", value={"term": f"代号{n}", "dimension": "region", "value": region})
    for rule in ("按渠道 口径: 渠道 = channel_name", "上月 按渠道 排除测试渠道", "按渠道 上月 口径 含线上"):
        remember(api, rule)  # match the question's words better than the GMV correction does
    drain.drain()
    real_index = container.vector_index()

    class MissingGmv:  # the index ranks the GMV correction nowhere
        def hybrid(self, query):
            return [hit for hit in real_index.hybrid(query) if hit.memory_id != gmv["id"]]

    monkeypatch.setattr(container, "vector_index", lambda: MissingGmv())

    kpi = search(api, "上月 gmv 按渠道", route="kpi_lookup")  # a budget of one correction, and the term match on top
    nl2sql = search(api, "上月GMV按渠道")

    kpi_ids = ids(kpi)
    assert kpi_ids[0] == gmv["id"] and len(kpi_ids) == 2 and kpi["coverage"]["index_available"] is True
    corrections = [item["memory"]["id"] for item in nl2sql["items"] if item["memory"]["kind"] == "correction"]
    assert corrections[0] == gmv["id"] and len(corrections) <= 5 + 1
    assert not any(item["memory"]["value"] and item["memory"]["value"].get("term", "").startswith("代号") for item in nl2sql["items"])
    # a term on word boundaries: "gmvx" is not "GMV"
    assert gmv["id"] not in ids(search(api, "上月 gmvx 按渠道", route="kpi_lookup"))


def unkeyed_gmv_correction(api: Api, maps_to: str, confidence: float) -> dict:
    """A correction of GMV as POST /memories stored one before corrections were keyed by their term."""
    from memtool.memory.records import MemoryDraft
    from memtool.memory.store import Partition

    draft = MemoryDraft(
        kind=MemoryKind.CORRECTION,
        content=f"毛销售额口径 = {maps_to}",
        value={"term": "GMV", "maps_to": {"metric": maps_to}},
        confidence=confidence,
    )
    record = container.memory_store().create(Partition(api.tenant, api.user), draft, container.clock().now()).record
    assert record.key is None and record.status.value == "active"
    return record.model_dump(mode="json")


def test_the_users_correction_of_a_term_overrides_the_tenants_then_the_newer_then_the_more_confident(api, drain, clock):
    reply = api.call(
        "POST",
        "/memories",
        {"kind": "correction", "content": "GMV = gross_revenue (tenant)", "scope": "tenant", "value": {"term": "GMV", "maps_to": {"metric": "gross_revenue"}}},
        roles="curator",
    )
    assert reply.status == 201
    tenant_wide = reply.json()["memory"]
    # Two of the caller's own, both active: POST /memories keeps one correction per term (a second
    # supersedes the first), so these are records kept before it did, with no key
    unsure = unkeyed_gmv_correction(api, "gross_revenue", confidence=0.6)
    sure = unkeyed_gmv_correction(api, "net_revenue", confidence=0.9)  # written at the same instant (frozen clock)
    drain.drain()

    both = search(api, "GMV 上月")
    assert [i["memory"]["id"] for i in both["items"] if i["memory"]["kind"] == "correction"] == [sure["id"]]
    assert both["coverage"]["dropped"]["overridden"] == 2
    assert tenant_wide["id"] not in ids(both)

    clock.advance(days=1)
    newer = gmv_correction(api, "units", confidence=0.5)
    drain.drain()
    assert [i["memory"]["id"] for i in search(api, "GMV 上月")["items"] if i["memory"]["kind"] == "correction"] == [newer["id"]]

    # a colleague sees the tenant's, since none of ours are theirs
    theirs = search(api, "GMV 上月", as_user=(api.tenant, "wang"))
    assert ids(theirs) == [tenant_wide["id"]]


def test_the_floor_is_set_per_kind(api, aws, drain):
    from memtool.retrieval.embedders import HashingEmbedder

    weak_profile = remember(api, "wordsmith style for headings", kind="profile")
    weak_episode = remember(api, "wordsmith tone in episode notes", kind="episodic")
    refund = remember(api, "退款率 = refunds / gross revenue")
    drain.drain()
    # Given: both are weakly similar to the question, and neither names a key term of it
    embedder = HashingEmbedder(aws.hashing_dimensions)
    question, profile_vec, episode_vec = embedder.embed([UNRELATED, weak_profile["content"], weak_episode["content"]])
    for vector in (profile_vec, episode_vec):
        assert 0 < sum(a * b for a, b in zip(question, vector, strict=True)) < 0.5
    assert search(api, UNRELATED, route="deep_analysis_workflow")["items"] == []

    floors = dict(aws.recall_min_cosine, profile=0.0)
    use_settings(aws.model_copy(update={"recall_min_cosine": floors}))
    lowered = search(api, UNRELATED, route="deep_analysis_workflow")

    assert ids(lowered) == [weak_profile["id"]]  # the episode's floor did not move
    assert lowered["coverage"]["dropped"]["below_floor"] >= 2

    # and a kind's score floor: a correction must now score 0.99
    use_settings(aws.model_copy(update={"recall_min_score": dict(aws.recall_min_score, correction=0.99)}))
    strict = search(api, "退款率怎么算", route="deep_analysis_workflow")
    assert refund["id"] not in ids(strict) and strict["coverage"]["dropped"]["low_score"] == 1


def test_recall_defaults_are_the_settings_defaults():
    from memtool.retrieval import recall
    from memtool.settings import Settings

    fields = Settings.model_fields
    assert dict(recall.DEFAULT_MIN_COSINES) == fields["recall_min_cosine"].default_factory()
    assert dict(recall.DEFAULT_MIN_SCORES) == fields["recall_min_score"].default_factory()
    assert recall.DEFAULT_DUPLICATE_COSINE == fields["recall_duplicate_cosine"].default


def _causal(api: Api, *, question: str, root_cause: str, verified: bool) -> dict:
    """A causal memory as diagnosis writes it (the API refuses them to callers)."""
    from memtool.identity import Identity
    from memtool.memory.commands import NewMemory
    from memtool.memory.records import MemoryStatus

    body = NewMemory(
        kind=MemoryKind.CAUSAL,
        content=f"{question} — {root_cause}",
        source_text=question,
        value={"scenario": {"question": question, "asked": question}, "root_cause": root_cause, "lesson": f"repaired: {root_cause}", "verified": verified},
    )
    status = MemoryStatus.ACTIVE if verified else MemoryStatus.PENDING_REVIEW
    record = container.memory_service().remember(Identity(api.tenant, api.user, frozenset()), body, system=True, status=status).record
    return record.model_dump(mode="json")


def test_a_causal_memory_is_found_by_its_scenario_or_its_root_cause_as_one_memory(api, drain):
    lesson = _causal(api, question="上个月上海的销售额", root_cause="gross revenue counted by order_date instead of paid_at", verified=True)
    pending = _causal(api, question="上个月北京的销售额", root_cause="gross revenue counted by order_date instead of paid_at", verified=False)
    drain.drain()
    # both keys are in the index, under the memory and its cause facet
    index = container.vector_index()
    assert index.indexed_version(lesson["id"], api.tenant) == 1
    assert index.indexed_version(f"{lesson['id']}#cause", api.tenant) == 1

    by_scenario = search(api, "上个月上海的销售额")
    by_cause = search(api, "counted by order_date instead of paid_at")

    assert ids(by_scenario).count(lesson["id"]) == 1 and ids(by_cause).count(lesson["id"]) == 1  # one memory, not two
    assert pending["id"] not in ids(by_scenario) + ids(by_cause)  # pending review never steers a plan
    api.call("DELETE", f"/memories/{lesson['id']}")
    drain.drain()
    assert index.indexed_version(f"{lesson['id']}#cause", api.tenant) is None  # forgetting removes both keys
