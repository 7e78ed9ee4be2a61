"""Maintenance on the local runtime over HTTP (docs/maintenance.md), the flow run from
statemachines/maintenance.asl.json on moto's engine:

- POST /maintenance/run is an admin's (403 otherwise) and answers the report: counts for decay,
  consolidate, conflicts, capacity, reconcile and pii_rescan;
- 60 near-duplicate episodic memories of one user (and 10 unrelated ones) become at most 5
  summaries, that user's active episodic memories drop to at most 15, and a search for their
  common subject ranks a summary first;
- with MEMTOOL_CAPACITY_EPISODIC=100, 150 memories become 100 active: the evicted are the lowest
  scored, and a pinned one (a curator's) survives;
- two corrections of one term with different targets show at GET /conflicts, the newer wins in
  the next ask's recall, and resolving the conflict archives the other;
- maintenance only ever touches the caller's tenant.
"""

from __future__ import annotations

import hashlib
import time
from urllib.parse import urlencode

import pytest

from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow

ADMIN = {"X-Memtool-Roles": "admin"}
CURATOR = {"X-Memtool-Roles": "curator"}
SUBJECT = "East China net revenue by channel"
NEAR = [
    f"Li asked for {SUBJECT} for last month",
    f"Li asked again for {SUBJECT} for last month",
    f"Li asked for the {SUBJECT} last month",
    f"Li wanted {SUBJECT} for last month",
]
UNRELATED = [
    "refund rate of the hospital channel in July",
    "top 5 products by gross margin this year",
    "new customers per week in Shanghai",
    "average order value of online pharmacy orders",
    "inventory days of supply for vaccines",
    "returns by reason code in Q2",
    "sales reps ranked by quota attainment",
    "North China distributor count by province",
    "price changes of the ten best sellers",
    "weekly active pharmacies in Guangdong",
]
STEPS = {"decay", "consolidate", "conflicts", "capacity", "reconcile", "pii_rescan"}


def unlike(n: int) -> str:
    """A text that shares no word with any other (so consolidation leaves it alone)."""
    return " ".join(hashlib.sha256(f"{n}.{i}".encode()).hexdigest()[:10] for i in range(4))


def remember(api: ApiClient, body: dict, headers: dict | None = None) -> dict:
    written = api.call("POST", "/memories", body, headers=headers)
    assert written.status == 201, written.body
    return written.body["memory"]


def active_episodes(api: ApiClient) -> list[dict]:
    found, cursor = [], None
    while True:
        query = {"kind": "episodic", "status": "active", "limit": "100", **({"cursor": cursor} if cursor else {})}
        page = api.call("GET", "/memories?" + urlencode(query))
        assert page.status == 200, page.body
        found += page.body["items"]
        cursor = page.body.get("next_cursor")
        if not cursor:
            return found


def test_maintenance_over_http(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMTOOL_CAPACITY_EPISODIC", "100")
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        li = ApiClient(runtime.api_url, "acme", "li")
        chen = ApiClient(runtime.api_url, "acme", "chen")
        other = ApiClient(runtime.api_url, "beta", "wu")

        # -- only an admin runs it
        refused = li.call("POST", "/maintenance/run", {})
        assert refused.status == 403 and refused.body["field"] == "roles", refused.body
        bad = li.call("POST", "/maintenance/run", {"steps": ["shrink"]}, headers=ADMIN)
        assert bad.status == 400 and bad.body["field"].startswith("steps"), bad.body

        # -- 60 near-duplicates and 10 unrelated episodes of li; another tenant's look-alikes
        for n in range(60):
            remember(li, {"kind": "episodic", "content": f"{NEAR[n % len(NEAR)]} (turn {n})"})
        unrelated = {remember(li, {"kind": "episodic", "content": text})["id"] for text in UNRELATED}
        theirs = [remember(other, {"kind": "episodic", "content": f"{NEAR[0]} (turn {n})"})["id"] for n in range(6)]

        # -- 150 of chen's, one pinned (a curator's to pin: li may not) and the lowest of all by confidence
        pin = {"kind": "episodic", "content": "the board's golden revenue view", "value": {"pinned": True}, "confidence": 0.05}
        assert li.call("POST", "/memories", pin).status == 403
        pinned = remember(chen, pin, headers=CURATOR)["id"]
        weak = [remember(chen, {"kind": "episodic", "content": unlike(n), "confidence": 0.2})["id"] for n in range(49)]
        strong = [remember(chen, {"kind": "episodic", "content": unlike(100 + n)})["id"] for n in range(100)]

        # -- two corrections of one term, written through /memories, with different targets
        older = remember(li, {"kind": "correction", "content": "GMV means net revenue", "value": {"term": "GMV", "maps_to": {"metric": "net_revenue"}}})
        newer = remember(li, {"kind": "correction", "content": "ＧＭＶ means gross revenue", "value": {"term": "ＧＭＶ", "maps_to": {"metric": "gross_revenue"}}})

        run = li.call("POST", "/maintenance/run", {}, headers=ADMIN)

        assert run.status == 200, run.body
        report = run.body["report"]
        assert run.body["status"] == "succeeded" and set(report["steps"]) == STEPS, report
        assert report["steps"]["consolidate"]["summaries"] >= 1 and report["steps"]["capacity"]["evicted"] == 50
        assert report["steps"]["conflicts"]["conflicts"] == 1 and report["steps"]["pii_rescan"]["rules_version"] >= 1
        assert set(report["tenants"]) == {"acme"}  # the caller's tenant only
        assert report["started_at"] and report["finished_at"]

        # -- consolidation: at most 5 summaries, at most 15 active, the unrelated untouched
        mine = active_episodes(li)
        summaries = [m for m in mine if isinstance(m.get("value"), dict) and "summary_of" in m["value"]]
        assert 1 <= len(summaries) <= 5 and len(mine) <= 15, [m["content"] for m in mine]
        assert unrelated <= {m["id"] for m in mine}
        assert sum(len(s["value"]["summary_of"]) for s in summaries) >= 50
        member = li.call("GET", f"/memories/{summaries[0]['value']['summary_of'][0]}").body["memory"]
        assert member["status"] == "archived" and member["status_reason"] == f"consolidated into {summaries[0]['id']}"
        deadline = time.monotonic() + 30
        while runtime.health()["indexer"]["pending"] and time.monotonic() < deadline:  # the summary is indexed
            time.sleep(0.1)
        found = li.call("GET", "/memories/search?" + urlencode({"q": SUBJECT}))
        assert found.status == 200 and found.body["items"], found.body
        assert "summary_of" in (found.body["items"][0]["memory"]["value"] or {}), found.body["items"][0]
        assert all(other.call("GET", f"/memories/{mid}").body["memory"]["status"] == "active" for mid in theirs)

        # -- capacity: 100 active, the 49 weak and the lowest of the strong gone, the pinned kept
        kept = {m["id"] for m in active_episodes(chen)}
        assert len(kept) == 100 and pinned in kept and not kept & set(weak) and len(kept & set(strong)) == 99
        evicted = chen.call("GET", f"/memories/{weak[0]}").body["memory"]
        assert "over the episodic capacity of 100" in evicted["status_reason"]

        # -- the report is kept as the tenant's maintenance.report, for admins
        kept_report = chen.call("GET", "/memories?kind=knowledge&scope=tenant", headers=ADMIN).body["items"]
        assert any(m["key"] == "maintenance.report" and m["value"]["steps"]["capacity"]["evicted"] == 50 for m in kept_report)
        forged = chen.call("POST", "/memories", {"kind": "knowledge", "scope": "tenant", "key": "maintenance.report", "content": "x"}, headers=ADMIN)
        assert forged.status == 403 and forged.body["field"] == "key"

        # -- conflicts: listed for li (and for a curator), the newer wins in recall, resolving archives the other
        listed = li.call("GET", "/conflicts")
        assert listed.status == 200, listed.body
        [conflict] = listed.body["conflicts"]
        assert [m["id"] for m in conflict["memories"]] == [newer["id"], older["id"]] and conflict["winner"] == newer["id"]
        assert [c["id"] for c in chen.call("GET", "/conflicts", headers=CURATOR).body["conflicts"]] == [conflict["id"]]
        assert chen.call("GET", "/conflicts").body["conflicts"] == []  # a plain user sees their own only
        assert other.call("GET", "/conflicts", headers=CURATOR).body["conflicts"] == []  # another tenant's curator

        answer = li.call("POST", "/ask", {"question": "上个月的GMV"}).body
        assert answer["status"] == "answered", answer
        assert [m["id"] for m in answer["memories_used"]] == [newer["id"]] and "gross_revenue" in answer["columns"], answer

        assert chen.call("POST", f"/conflicts/{conflict['id']}/resolve", {"keep": older["id"]}).status == 404  # not chen's
        wrong = li.call("POST", f"/conflicts/{conflict['id']}/resolve", {"keep": strong[0]})
        assert wrong.status == 400 and wrong.body["field"] == "keep", wrong.body
        resolved = li.call("POST", f"/conflicts/{conflict['id']}/resolve", {"keep": older["id"]})
        assert resolved.status == 200 and resolved.body["archived"] == [{"id": newer["id"], "version": 2}], resolved.body
        assert li.call("GET", "/conflicts").body["conflicts"] == []
        archived = li.call("GET", f"/memories/{newer['id']}").body["memory"]
        assert archived["status"] == "archived" and f"kept {older['id']}" in archived["status_reason"]

        # -- a second run changes nothing it already did
        again = li.call("POST", "/maintenance/run", {"steps": ["consolidate", "capacity"]}, headers=ADMIN)
        assert again.status == 200, again.body
        assert set(again.body["report"]["steps"]) == {"consolidate", "capacity"}
        assert again.body["report"]["steps"]["consolidate"].get("summaries", 0) == 0
        assert again.body["report"]["steps"]["capacity"]["evicted"] == 0
