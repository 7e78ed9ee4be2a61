"""`memtool demo`: a scripted scenario against the local runtime, printed step by step."""

from __future__ import annotations

import json
import time
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TENANT = "demo-pharma"


@dataclass
class Reply:
    status: int
    body: Any


class ApiClient:
    def __init__(self, base_url: str, tenant: str, user: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.user = user
        self.headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={**self.headers, **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read().decode("utf-8")
                return Reply(response.status, json.loads(raw) if raw else None)
        except urllib.error.HTTPError as error:
            raw = error.read().decode("utf-8")
            return Reply(error.code, json.loads(raw) if raw else None)


def _step(number: int, title: str) -> None:
    print(f"\n[{number}] {title}")


def _show(reply: Reply, line: str) -> None:
    print(f"    HTTP {reply.status}  {line}")


def scenario(api: ApiClient) -> None:
    key = "display.currency_unit"

    _step(1, "Li says 以后默认用元 — a profile preference in slot display.currency_unit")
    first = api.call(
        "POST",
        "/memories",
        {"kind": "profile", "key": key, "content": "金额默认用元", "value": {"unit": "元"}, "source_text": "以后默认用元"},
        headers={"Idempotency-Key": f"demo-{uuid.uuid4().hex}"},
    )
    memory = first.body["memory"]
    memory_id = memory["id"]
    _show(first, f"{memory_id} v{memory['version']} unit={memory['value']['unit']} expires {memory['expires_at'][:10]}")

    _step(2, "Later Li says 以后都用分 — same slot, so it supersedes the old value")
    second = api.call(
        "POST",
        "/memories",
        {"kind": "profile", "key": key, "content": "金额默认用分", "value": {"unit": "分"}, "source_text": "以后都用分"},
    )
    current = second.body["memory"]
    superseded = second.body["superseded"]
    _show(second, f"{current['id']} now v{current['version']} unit={current['value']['unit']} (v{superseded['version']} kept as history)")

    _step(3, "Read the history")
    history = api.call("GET", f"/memories/{memory_id}?history=true")
    for version in history.body["history"]:
        print(f"    v{version['version']:<2} {version['status']:<11} unit={version['value']['unit']}  “{version['source_text']}”")
    old = api.call("GET", f"/memories/{memory_id}?version=1")
    _show(old, f"GET ?version=1 → unit={old.body['memory']['value']['unit']}")

    _step(4, "A stale edit (expected_version=1) is a conflict, never a silent overwrite")
    stale = api.call("PATCH", f"/memories/{memory_id}", {"expected_version": 1, "content": "金额默认用万元"})
    _show(stale, f"{stale.body['error']}: {stale.body['message']}")

    _step(5, "A correction that mentions a phone number and an e-mail: PII is redacted before storage")
    note = api.call(
        "POST",
        "/memories",
        {
            "kind": "correction",
            "content": "“华东大区”指 region_name=华东；有疑问联系王经理 13812345678 或 wang.jing@example.com",
            "source_text": "华东大区就是华东，问王经理 13812345678",
        },
    )
    _show(note, f"stored: {note.body['memory']['content']}")
    counts = {k: v for k, v in note.body["redactions"].items() if v}
    print(f"    redacted: {counts}")

    _step(6, "Recall: the indexer feed indexes the correction, and a question finds it (hybrid BM25 + vector)")
    correction_id = note.body["memory"]["id"]
    state = _wait_until_indexed(api, correction_id)
    print(f"    index_state={state}")
    found = api.call("GET", "/memories/search?" + urllib.parse.urlencode({"q": "华东大区上个月的净收入", "route": "nl2sql_query"}))
    for item in found.body["items"]:
        print(f"    score {item['score']:.3f}  {item['memory']['kind']:<10} {item['memory']['content'][:40]}")
    coverage = found.body["coverage"]
    print(
        f"    coverage: {coverage['candidates_seen']} candidates, {coverage['returned']} returned, "
        f"index {'up' if coverage['index_available'] else 'DOWN (lexical fallback)'}, embedder {coverage['embedder']}"
    )

    _step(7, "Bad input gets a 4xx naming the field; nothing is written")
    bad = api.call("POST", "/memories", {"kind": "favourite", "content": "x"})
    _show(bad, f"field={bad.body['field']}: {bad.body['message']}")

    _step(8, "Another tenant cannot see Li's memory (404, so existence does not leak)")
    other = ApiClient(api.base_url, "another-tenant", api.user).call("GET", f"/memories/{memory_id}")
    _show(other, f"{other.body['error']}")

    _step(9, "Ask questions: route, recall, plan, guard, run on the demo warehouse, chart (AskFlow)")
    ask_questions(api)

    _step(10, "Forget both memories: every version goes")
    for mid in (memory_id, note.body["memory"]["id"]):
        gone = api.call("DELETE", f"/memories/{mid}")
        after = api.call("GET", f"/memories/{mid}?version=1")
        _show(gone, f"DELETE {mid} → then GET ?version=1 gives HTTP {after.status}")


DEMO_QUESTIONS = (
    "上个月各渠道的净收入",
    "top 5 cities by net revenue last month",
    "今年每月的退款率",
    "上个月净收入是多少",
    "净收入怎么算？",
    "上个月西安的GMV",
)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 1 else f"{value:,.2f}"
    return "" if value is None else str(value)


def _width(text: str) -> int:
    """Terminal columns: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int, *, right: bool) -> str:
    fill = " " * max(0, width - _width(text))
    return fill + text if right else text + fill


def _table(columns: list[str], rows: list[list[Any]], limit: int = 8) -> list[str]:
    shown = [[_cell(v) for v in row] for row in rows[:limit]]
    widths = [max([_width(c)] + [_width(r[i]) for r in shown]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows[:limit]) for i in range(len(columns))]
    lines = ["  ".join(_pad(c, w, right=n) for c, w, n in zip(columns, widths, numeric, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(_pad(v, w, right=n) for v, w, n in zip(row, widths, numeric, strict=True)) for row in shown)
    if len(rows) > limit:
        lines.append(f"… {len(rows) - limit} more rows")
    return lines


def ask_questions(api: ApiClient, questions: tuple[str, ...] = DEMO_QUESTIONS) -> None:
    """Ask through POST /ask (AskFlow on the local Step Functions engine) and show the answers."""
    for question in questions:
        print(f"\n  Q: {question}")
        reply = api.call("POST", "/ask", {"question": question, "session_id": "demo-session"})
        if reply.status != 200:
            print(f"    HTTP {reply.status}  {reply.body}")
            continue
        answer = reply.body
        timing = answer["timings"].get("total", 0.0)
        print(f"    route {answer['route']}, status {answer['status']}, {timing:.0f} ms")
        if answer["status"] == "answered" and answer["columns"]:
            chart = answer["chart"] or {}
            print(f"    chart {chart.get('type')} (confidence {chart.get('confidence')}, {chart.get('checkpoint_status')})")
            for line in _table(answer["columns"], answer["rows"]):
                print(f"    {line}")
        elif answer["status"] == "answered" and answer["answer"]:
            print("    " + answer["answer"].replace("\n", "\n    ")[:600])
            for citation in answer["citations"][:3]:
                print(f"    [{citation['source']}]")
        elif answer["status"] == "needs_clarification":
            clarification = answer["clarification"] or {}
            print(f"    clarify: {clarification.get('question')}")
            if clarification.get("options"):
                print(f"    options: {', '.join(clarification['options'])}")
        else:
            print(f"    {answer.get('error') or answer.get('notes')}")


def _wait_until_indexed(api: ApiClient, memory_id: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    state = "pending"
    while time.monotonic() < deadline:
        state = api.call("GET", f"/memories/{memory_id}").body["memory"]["index_state"]
        if state == "indexed":
            break
        time.sleep(0.1)
    return state


def run_demo(home: Path, url: str | None = None, port: int = 0) -> int:
    """The scenario against ``url``, or against a local runtime of its own on ``port`` (0: a free one)."""
    # A fresh user per run, so every run tells the same story whatever the saved state holds.
    user = f"analyst-li-{uuid.uuid4().hex[:4]}"
    print(f"tenant {TENANT}, user {user}")
    if url:
        print(f"memtool demo against {url}")
        scenario(ApiClient(url, TENANT, user))
        return 0
    from memtool.runtime.local import LocalRuntime

    print("memtool demo: starting the local runtime (SQLite store, local API, AskFlow on moto's engine)…", flush=True)
    with LocalRuntime(home=home, port=port, progress=lambda line: print(f"    {line}", flush=True)) as runtime:
        print(f"    API at {runtime.api_url}, state in {runtime.state_dir.resolve()}")
        scenario(ApiClient(runtime.api_url or "", TENANT, user))
    print(f"\nDone. State saved under {runtime.state_dir.resolve()}.")
    print("Next: `memtool serve`, then open http://127.0.0.1:3000/console/ (docs/console.md) or call the API yourself (docs/memory.md).")
    return 0
