"""POST /charts/choice over HTTP (docs/console.md): a chart picked among an answer's candidates is
the caller's chart for that shape of data; the next answer of that shape draws it and cites it,
another user's answers do not, a chart that cannot draw the shape is refused naming chart_type, and
a stored choice that names no fitting chart is ignored with a note."""

from __future__ import annotations


def ask(api, question: str, **kwargs):
    reply = api.call("POST", "/ask", {"question": question}, **kwargs)
    assert reply.status == 200, reply.body
    return reply.json()


def test_a_chosen_chart_is_used_and_cited_by_the_next_answer_of_the_same_shape(api):
    first = ask(api, "上个月各大区净收入")
    assert first["chart"]["shape"] == "ranking" and first["chart"]["type"] == "horizontal_bar"
    chosen = api.call("POST", "/charts/choice", {"episode_id": first["episode_id"], "chart_type": "bar"})
    assert chosen.status == 200, chosen.body
    body = chosen.json()
    assert (body["shape"], body["chart_type"], body["replaced"]) == ("ranking", "bar", False)
    assert body["memory"]["key"] == "display.chart_for.ranking" and body["memory"]["kind"] == "profile"

    second = ask(api, "上个月各渠道净收入")
    assert second["chart"]["type"] == "bar" and second["chart"]["option"]["xAxis"]["type"] == "category"
    cite = f"memory:{body['memory']['id']}@v1"
    assert {"source": cite, "text": "chart for a ranking: bar"} in [{k: c[k] for k in ("source", "text")} for c in second["citations"]]
    assert f"the chart is bar: your choice for a ranking ({cite})" in second["notes"]

    trend = ask(api, "今年每月净收入")  # another shape: the choice does not apply
    assert trend["chart"]["shape"] == "time_series" and trend["chart"]["type"] == "line"
    other = ask(api, "上个月各渠道净收入", as_user=(api.tenant, "someone-else"))
    assert other["chart"]["type"] == "horizontal_bar"


def test_a_chart_that_cannot_draw_the_shape_or_an_episode_not_yours_is_refused(api):
    trend = ask(api, "今年每月净收入")
    pie = api.call("POST", "/charts/choice", {"episode_id": trend["episode_id"], "chart_type": "pie"})
    assert pie.status == 400 and pie.json()["field"] == "chart_type", pie.body
    unknown = api.call("POST", "/charts/choice", {"episode_id": trend["episode_id"], "chart_type": "radar"})
    assert unknown.status == 400 and unknown.json()["field"] == "chart_type"
    theirs = api.call("POST", "/charts/choice", {"episode_id": trend["episode_id"], "chart_type": "bar"}, as_user=(api.tenant, "mallory"))
    assert theirs.status == 404 and theirs.json()["field"] == "episode_id"
    listing = api.call("GET", "/memories", query={"kind": "profile"}).json()
    assert [m["key"] for m in listing["items"] if (m["key"] or "").startswith("display.chart_for.")] == []


def test_a_stored_choice_naming_no_fitting_chart_is_ignored_with_a_note(api):
    forged = api.call(
        "POST",
        "/memories",
        {"kind": "profile", "key": "display.chart_for.ranking", "content": "x", "value": {"chart": "<img src=x onerror=alert(1)>"}},
    )
    assert forged.status == 201, forged.body
    answer = ask(api, "上个月各大区净收入")
    assert answer["chart"]["type"] == "horizontal_bar"
    assert any("was ignored: it names no chart that can draw a ranking" in n for n in answer["notes"]), answer["notes"]
