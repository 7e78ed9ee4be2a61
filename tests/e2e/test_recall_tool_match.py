"""AskFlow's Recall passes the tools the route will use (SQL execution, the chart, the analyses the
question asks for), so a memory whose episode used those tools ranks higher (docs/memory.md,
Recall: tool match ×1.25); and every episode records the tools it used, for later asks to match."""

from __future__ import annotations

from tests.support import Api


def remember(api: Api, content: str, **fields) -> dict:
    reply = api.call("POST", "/memories", {"kind": "episodic", "content": content, **fields})
    assert reply.status == 201, reply.body
    return reply.json()["memory"]


QUESTION = "预测下个季度的净收入"


def test_the_ask_ranks_a_memory_that_used_the_routes_tools_first(api, drain):
    plain = remember(api, "预测下个季度的净收入")  # the question's very words, no tools
    forecasted = remember(api, "预测下个季度的净收入走势", value={"tools": ["sql_execute", "ml_forecast"]})
    drain.drain()

    # Without the tools, the plain memory is the closer one
    searched = api.call("GET", "/memories/search", query={"q": QUESTION, "route": "deep_analysis_workflow"}).json()
    order = [item["memory"]["id"] for item in searched["items"] if item["memory"]["id"] in (plain["id"], forecasted["id"])]
    assert order == [plain["id"], forecasted["id"]], searched

    reply = api.call("POST", "/ask", {"question": QUESTION})
    assert reply.status == 200, reply.body
    answer = reply.json()
    assert answer["route"] == "deep_analysis_workflow", answer
    recalled = [m["id"] for m in answer["memories_recalled"] if m["id"] in (plain["id"], forecasted["id"])]
    assert recalled == [forecasted["id"], plain["id"]], answer["memories_recalled"]

    # the ask's own episode keeps the tools it used
    episode = api.call("GET", f"/episodes/{answer['episode_id']}").json()["episode"]
    tools = episode["value"]["tools"]
    assert tools[:2] == ["sql_execute", "chart"] and ("ml_forecast" in tools or "code_interpreter" in tools), tools
