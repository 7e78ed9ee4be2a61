"""Soak the learning loop: a team using `memtool serve` for a long time, measured and checked.

Starts `memtool serve` as a child process, as ``bench/soak.py`` does (a temp home, the default
SQLite store, the demo warehouse at ``--scale``, MEMTOOL_TODAY=2026-11-29), then for ``--minutes``:

1. **A team at work.** ``--clients`` simulated users (three tenants, user names shared across
   tenants so that isolation is tested, one client per tenant and user) each run sessions in a
   loop: an opening question, 2-4 follow-ups (那按渠道拆分呢, 只看华东, 换成杭州, and in
   September?, 去年同期呢, 换成处方量, 只要前3, 不限渠道, by product instead, only Shanghai), now
   and then a question with a term the catalog does not know or finds ambiguous (单子数, 动销,
   魔都, takings, 开方量, 营收, GMV, 江浙沪), answered by a clarification reply (a label, a
   synonym, 第二个, the first) or taught with ``POST /feedback`` and a correction in free text
   (单子数就是订单数); feedback on a share of the answers (ratings +1/-1/0, re-ratings, implicit
   signals, a comment, a correction the catalog cannot resolve); 以后默认用万元 / 这次用分; reads
   of its memories; ``DELETE /sessions/{id}`` at the end of some sessions. An admin (``lead``,
   role ``admin``, in every tenant) asks now and then, thumbs its answers up, and periodically
   reviews ``GET /fewshots?status=pending_review``, approving or rejecting some (never its own).
   Every choice comes from a seeded RNG per client, so the mix is reproducible; the server's
   answers (a clarification or not) steer the branches, so request counts vary a little.
2. **Measured per minute and overall.** Requests by route and status code (every 5xx listed with
   its request and body; every status a step does not expect listed too), p50/p95 latency per
   route, RSS of the server process (``/proc/<pid>/status``) at start, every minute and at the end,
   and its growth per 1,000 asks (least-squares slope over the minute samples), the SQLite file
   (with its WAL), and the outbox backlog and dead letters from ``GET /health``.
3. **Invariants read back through the API at the end** (the outbox settled first):
   credit (for a sample of the memories feedback credited: ``credit.uses`` is the number of
   distinct episodes in ``credit.recent`` when that ledger holds fewer than 50, successes and
   failures match its rewards, and no credit the clients were told about is missing); isolation
   (GETs of one tenant's memories by another's users and admin, feedback on another tenant's
   episode, recall and the review queue across tenants: all 404 or absent); few-shots (every
   candidate nobody reviewed or withdrew is ``pending_review``, the review queue holds only
   ``pending_review``, no reviewer reviewed their own); sessions (the working memory of every
   ended session is gone, and ending it again is a 404).

    python bench/learning_soak.py [--minutes 20 --clients 6 --scale 0.2 --seed 20261129] [--out bench/results/learning_soak.md]

Not a test: figures vary with the machine. Exits non-zero only when the soak itself breaks or an
invariant fails (the report names it).
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from learning_eval import machine  # noqa: E402 - the eval's description of the machine and commit
from soak import _free_port, request, rss_mb, settle, start_server  # noqa: E402 - the soak's client and server start

ROOT = Path(__file__).resolve().parents[1]
TODAY = "2026-11-29"
TENANTS = ("acme", "globex", "initech")
# User names repeat across tenants (li in acme and globex, wang in acme and initech): a key that
# forgot the tenant would show up as a session, memory or credit crossing over.
TENANT_USERS = {"acme": ("li", "wang"), "globex": ("li", "zhao"), "initech": ("wang", "chen")}
ADMIN = "lead"
ROUTES = ("/ask", "/feedback", "/fewshots", "/memories", "/sessions", "/health")
LEDGER_KEPT = 50  # credit.recent keeps the last 50 episodes

# ---- what the team says ------------------------------------------------------------------------

OPENINGS = [
    "上个月各渠道的净收入",
    "net revenue by channel last month",
    "2026年9月各大区的销售额",
    "top 5 cities by net revenue last month",
    "今年每月的退款率",
    "units by region in October 2026",
    "上个月上海的订单数",
    "今年零售药店渠道各产品的销量",
    "order count by channel in Nanjing last month",
    "refund rate by channel last month",
    "今年每个季度的退款额",
    "2026年8月南京各产品的销量",
    "上个月零售药店渠道各大区的客单价",
    "gross revenue by month in 2025",
    "上个月华东各城市的销售额",
    "上季度各治疗领域的处方量",
]
FOLLOW_UPS = [
    "那按渠道拆分呢",
    "只看华东",
    "换成杭州",
    "and in September?",
    "去年同期呢",
    "换成处方量",
    "只要前3",
    "不限渠道",
    "by product instead",
    "only Shanghai",
]
PREFERENCES = ["以后默认用万元", "以后默认用元"]
THIS_TIME = "这次用分"
REFUSED_CORRECTION = "利润率就是毛利"  # 毛利 is nothing the catalog has: a 400 on correction
SIGNALS = [
    {"copied": True},
    {"follow_up_related": True},
    {"rephrased": True},
    {"abandoned": True},
    {"dwell_ms": 20_000},
    {"dwell_ms": 900, "copied": True},
]


@dataclass(frozen=True)
class Term:
    """A word the catalog does not know (or finds ambiguous), what the team means by it, and how
    a user says so: by replying to the clarification, or by a correction on its episode."""

    term: str
    target: dict[str, str]  # the clarification target that means it
    questions: tuple[str, ...]  # questions that use it
    synonym: str | None = None  # a reply in the user's words
    correction: str | dict[str, str] | None = None  # None: the catalog finds it ambiguous, so only a reply teaches it


TERMS = [
    Term("单子数", {"metric": "order_count"}, ("上周各大区的单子数", "2026年10月各渠道的单子数", "北京今年每月的单子数"), "订单数", "单子数就是订单数"),
    Term("动销", {"metric": "units"}, ("今年各品牌的动销", "上周各渠道的动销", "动销 by brand in October 2026"), "销量", "动销就是销量"),
    Term("魔都", {"dimension": "city", "value": "上海"}, ("魔都上周的销售额", "魔都今年每月的销量"), "上海", "魔都指的是上海"),
    Term("takings", {"metric": "net_revenue"}, ("takings by city in October 2026", "takings by region in September 2026"), "net sales",
         "by takings I mean net revenue"),
    Term("开方量", {"metric": "rx_volume"}, ("上个月各大区的开方量", "2025年各治疗领域的开方量"), "处方量", {"term": "开方量", "means": "处方量"}),
    Term("营收", {"metric": "net_revenue"}, ("上个月各渠道的营收", "今年每月的营收", "去年华南的营收"), "净收入"),
    Term("GMV", {"metric": "gross_revenue"}, ("GMV by city last week", "上季度各大区的GMV"), "gross revenue"),
    Term("江浙沪", {"dimension": "region", "value": "华东"}, ("上个月江浙沪各渠道的销售额", "江浙沪各城市今年的订单数"), "华东地区"),
]
BY_TERM = {t.term: t for t in TERMS}
ORDINALS_ZH = "一二三四五六七八九十"
ORDINALS_EN = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
REMEMBERED = re.compile(r"remembered: (.+?) -> .*\(memory:([A-Za-z0-9_]+)@v\d+\)")
WITHDRAWN = re.compile(r"few-shot candidate ([A-Za-z0-9_]+) withdrawn")


# ---- talking to memtool --------------------------------------------------------------------------


def request_with_roles(port: int, method: str, path: str, body: Any = None, *, tenant: str, user: str, roles: str) -> tuple[int, Any, float]:
    """``soak.request`` with ``X-Memtool-Roles`` (the soak's client sends no roles)."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "X-Memtool-Roles": roles, "Content-Type": "application/json"}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None), (time.perf_counter() - started) * 1000
    finally:
        connection.close()


def route_of(path: str) -> str:
    top = "/" + path.split("?", 1)[0].strip("/").split("/", 1)[0]
    return top if top in ROUTES else "other"


@dataclass
class Call:
    route: str
    method: str
    status: int | None  # None: the connection failed
    ms: float
    at: float  # seconds since the load started
    phase: str  # load | check


@dataclass
class Exchange:
    """A request and what came back, kept for the report when something looked wrong."""

    tenant: str
    user: str
    method: str
    path: str
    body: Any
    status: int | None
    answer: Any
    why: str

    def markdown(self) -> str:
        sent = "" if self.body is None else " " + json.dumps(self.body, ensure_ascii=False)
        answer = self.answer if isinstance(self.answer, str) else json.dumps(_compact(self.answer), ensure_ascii=False)
        if len(answer) > 2000:
            answer = answer[:2000] + " …"
        return f"- {self.why}: `{self.method} {self.path}`{sent} as `{self.tenant}/{self.user}` → **{self.status}** `{answer}`"


def _compact(answer: Any) -> Any:
    """An /ask answer without what does not explain it (chart, timings, recall coverage); rows cut to 5."""
    if not (isinstance(answer, dict) and "episode_id" in answer and "status" in answer):
        return answer
    kept = {k: answer.get(k) for k in ("episode_id", "status", "route", "sql", "row_count", "memories_used", "carried_over", "notes", "error")}
    kept["rows"] = (answer.get("rows") or [])[:5]
    clarification = answer.get("clarification")
    if isinstance(clarification, dict):
        kept["clarification"] = {k: clarification.get(k) for k in ("question", "term", "options", "reason")}
    return kept


class Traffic:
    """Every request the soak sent: route, status, latency, when; and the exchanges worth a look."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.t0 = time.perf_counter()
        self.calls: list[Call] = []
        self.server_errors: list[Exchange] = []
        self.connection_errors: list[Exchange] = []
        self.unexpected: list[Exchange] = []
        self.unexpected_count: Counter[str] = Counter()
        self.anomalies: list[Exchange] = []
        self.anomaly_count: Counter[str] = Counter()
        self.phase = "load"
        self._lock = threading.Lock()

    def send(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        tenant: str,
        user: str,
        expect: tuple[int, ...],
        roles: str | None = None,
    ) -> tuple[int | None, Any]:
        started = time.perf_counter()
        try:
            if roles is None:
                status, answer, ms = request(self.port, method, path, body, tenant=tenant, user=user)
            else:
                status, answer, ms = request_with_roles(self.port, method, path, body, tenant=tenant, user=user, roles=roles)
        except OSError as exc:
            status, answer, ms = None, f"{type(exc).__name__}: {exc}", (time.perf_counter() - started) * 1000
        except ValueError as exc:  # a body that is not JSON
            status, answer, ms = -1, f"not JSON: {exc}", (time.perf_counter() - started) * 1000
        exchange = Exchange(tenant, user, method, path, body, status, answer, "")
        with self._lock:
            self.calls.append(Call(route_of(path), method, status, ms, started - self.t0, self.phase))
            if status is None:
                exchange.why = "connection error"
                self.connection_errors.append(exchange)
            elif status >= 500 or status < 0:
                exchange.why = f"HTTP {status}"
                self.server_errors.append(exchange)
            elif status not in expect:
                key = f"{method} {route_of(path)} {status}"
                self.unexpected_count[key] += 1
                if self.unexpected_count[key] <= 5:
                    exchange.why = f"unexpected {status} (expected {'/'.join(map(str, expect))})"
                    self.unexpected.append(exchange)
        return status, answer

    def anomaly(self, kind: str, tenant: str, user: str, method: str, path: str, body: Any, status: int | None, answer: Any) -> None:
        """A 2xx whose content looked wrong: kept (the first 5 of each kind) for the report."""
        with self._lock:
            self.anomaly_count[kind] += 1
            if self.anomaly_count[kind] <= 5:
                self.anomalies.append(Exchange(tenant, user, method, path, body, status, answer, kind))

    def now(self) -> float:
        return time.perf_counter() - self.t0


# ---- what the simulation remembers, to check against the server at the end ----------------------


@dataclass
class Ledger:
    """What the clients were told: credits, few-shot events, ended and live sessions, memory ids."""

    credited: dict[tuple[str, str, str], set[str]] = field(default_factory=lambda: defaultdict(set))  # (tenant, user, memory) -> episodes
    credited_kind: dict[tuple[str, str, str], str] = field(default_factory=dict)
    fewshot_events: dict[tuple[str, str], list[tuple[float, float, str, str]]] = field(default_factory=lambda: defaultdict(list))
    ended: set[tuple[str, str, str]] = field(default_factory=set)
    live: set[tuple[str, str, str]] = field(default_factory=set)
    episodes: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))  # tenant -> (user, episode_id)
    memories: dict[str, set[tuple[str, str]]] = field(default_factory=lambda: defaultdict(set))  # tenant -> (user, memory id)
    questions: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    counts: Counter[str] = field(default_factory=Counter)
    ignored: Counter[str] = field(default_factory=Counter)  # answered questions whose notes say words were ignored
    step_ms: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # (at, the answer's timings per AskFlow step)
    ask_outcomes: list[tuple[float, str, bool]] = field(default_factory=list)  # (at, status, applied memories)
    taught_asks: list[tuple[float, bool]] = field(default_factory=list)  # a taught term asked again: answered without asking?
    untaught_asks: list[tuple[float, bool]] = field(default_factory=list)  # an untaught term: clarification asked?
    lock: threading.Lock = field(default_factory=threading.Lock)

    def credit(self, tenant: str, user: str, episode_id: str, credited: list[dict[str, Any]]) -> None:
        with self.lock:
            for entry in credited:
                owner = ADMIN if entry["kind"] == "fewshot" else user  # a few-shot is read back by an admin
                self.credited[(tenant, owner, entry["id"])].add(episode_id)
                self.credited_kind[(tenant, owner, entry["id"])] = entry["kind"]
                self.memories[tenant].add((user, entry["id"]))

    def fewshot(self, tenant: str, candidate: str, started: float, ended: float, status: str, source: str) -> None:
        with self.lock:
            self.fewshot_events[(tenant, candidate)].append((started, ended, status, source))

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n


class Team:
    """Shared by every client: the server, the traffic, the ledger and the deadline."""

    def __init__(self, traffic: Traffic, ledger: Ledger, deadline: float, think: float) -> None:
        self.traffic, self.ledger, self.deadline, self.think = traffic, ledger, deadline, think

    def over(self) -> bool:
        return time.monotonic() >= self.deadline


class Stop(Exception):
    """The soak's time is up: the client stops where it is."""


class Member:
    """One simulated user (tenant, user) running sessions in a loop."""

    def __init__(self, team: Team, tenant: str, user: str, seed: int, roles: str | None = None) -> None:
        self.team, self.tenant, self.user, self.roles = team, tenant, user, roles
        self.rng = random.Random(seed)
        self.sessions = 0
        self.taught: dict[str, str] = {}  # term -> its correction memory id
        self.rated: list[tuple[str, int | None]] = []  # (episode, last rating)
        self.episode_memories: list[str] = []
        self.meaning: Term | None = None  # the term the current question is about, while ask_term runs

    # ---- one request ------------------------------------------------------------------------

    def send(self, method: str, path: str, body: Any = None, *, expect: tuple[int, ...]) -> tuple[int | None, Any]:
        if self.team.over():
            raise Stop
        if self.team.think:
            time.sleep(self.rng.uniform(0, 2 * self.team.think))
        return self.team.traffic.send(method, path, body, tenant=self.tenant, user=self.user, expect=expect, roles=self.roles)

    def ask(self, session: str, question: str) -> dict[str, Any]:
        status, answer = self.send("POST", "/ask", {"question": question, "session_id": session}, expect=(200,))
        if status != 200 or not isinstance(answer, dict):
            return {}
        ledger = self.team.ledger
        with ledger.lock:
            ledger.ask_outcomes.append((self.team.traffic.now(), str(answer.get("status")), bool(answer.get("memories_used"))))
            timings = answer.get("timings")
            if isinstance(timings, dict):
                ledger.step_ms.append((self.team.traffic.now(), {k: v for k, v in timings.items() if isinstance(v, (int, float))}))
            ledger.live.add((self.tenant, self.user, session))
            ledger.questions[self.tenant].append(question)
            if answer.get("episode_id"):
                ledger.episodes[self.tenant].append((self.user, answer["episode_id"]))
        for note in answer.get("notes") or []:
            if answer.get("status") == "answered" and note.startswith("ignored words:"):
                with ledger.lock:
                    ledger.ignored[f"「{question}」: {note}"] += 1
                self.team.traffic.anomaly(
                    "answered with words ignored", self.tenant, self.user, "POST", "/ask", {"question": question, "session_id": session}, 200, answer
                )
        if answer.get("status") == "failed":
            self.team.traffic.anomaly("ask failed", self.tenant, self.user, "POST", "/ask", {"question": question, "session_id": session}, status, answer)
        for note in answer.get("notes") or []:
            taught = REMEMBERED.search(note)
            if taught and taught.group(1) in BY_TERM:
                self.taught[taught.group(1)] = taught.group(2)
                self.team.ledger.count("terms taught by a clarification reply")
        return answer

    # ---- a session ----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                self.session()
        except Stop:
            return

    def session(self) -> None:
        rng = self.rng
        self.sessions += 1
        session = f"{self.user}-s{self.sessions:04d}"
        if rng.random() < 0.05:
            self.converse(session, rng.choice(PREFERENCES))
        if rng.random() < 0.35:
            term = rng.choice(TERMS)
            self.ask_term(session, term, rng.choice(term.questions))
        else:
            self.converse(session, rng.choice(OPENINGS))
        for _ in range(rng.randint(2, 4)):
            self.converse(session, rng.choice(FOLLOW_UPS))
        if rng.random() < 0.1:
            self.converse(session, THIS_TIME)
        if rng.random() < 0.25:  # an ambiguous or unknown term later in the session
            term = rng.choice(TERMS)
            self.ask_term(session, term, rng.choice(term.questions))
        if rng.random() < 0.1:
            self.send("GET", "/memories?kind=correction&limit=20", expect=(200,))
        if rng.random() < 0.1 and self.episode_memories:
            self.send("GET", f"/memories/{rng.choice(self.episode_memories)}", expect=(200,))
        if rng.random() < 0.25:
            status, _ = self.send("DELETE", f"/sessions/{session}", expect=(204,))
            if status == 204:
                with self.team.ledger.lock:
                    self.team.ledger.ended.add((self.tenant, self.user, session))
                    self.team.ledger.live.discard((self.tenant, self.user, session))

    def converse(self, session: str, question: str) -> dict[str, Any]:
        """Ask, give feedback now and then, and answer up to two clarifications."""
        answer = self.ask(session, question)
        self.maybe_feedback(answer)
        for _ in range(2):
            if answer.get("status") != "needs_clarification":
                break
            reply = self.reply_to(answer.get("clarification") or {}, session, question, answer)
            if reply is None:
                self.team.ledger.count("clarifications left unanswered")
                break
            answer = self.ask(session, reply)
            self.maybe_feedback(answer)
        return answer

    def ask_term(self, session: str, term: Term, question: str) -> None:
        """A question with a term the catalog lacks: asked about until this user has taught it."""
        self.meaning = term
        try:
            self._ask_term(session, term, question)
        finally:
            self.meaning = None

    def _ask_term(self, session: str, term: Term, question: str) -> None:
        taught_before = term.term in self.taught
        answer = self.ask(session, question)
        asked = answer.get("status") == "needs_clarification"
        ledger = self.team.ledger
        with ledger.lock:
            (ledger.taught_asks if taught_before else ledger.untaught_asks).append((self.team.traffic.now(), asked if not taught_before else not asked))
        if taught_before and (asked or answer.get("status") != "answered"):
            self.team.traffic.anomaly(
                "a taught term asked about again", self.tenant, self.user, "POST", "/ask", {"question": question, "session_id": session}, 200, answer
            )
        if not taught_before and not asked and answer:
            self.team.traffic.anomaly(
                "a term this user never taught answered without a clarification", self.tenant, self.user, "POST", "/ask",
                {"question": question, "session_id": session}, 200, answer,
            )
        if not asked:
            self.maybe_feedback(answer)
            return
        clarification = answer.get("clarification") or {}
        if clarification.get("term") == term.term and term.correction is not None and self.rng.random() < 0.5:
            status, body = self.send("POST", "/feedback", {"episode_id": answer["episode_id"], "correction": term.correction}, expect=(200,))
            if status == 200 and isinstance(body, dict):
                self.after_feedback(answer["episode_id"], None, body)
                if body.get("correction"):
                    self.taught[term.term] = body["correction"]["id"]
                    ledger.count("terms taught by a feedback correction")
            self.converse(session, question)  # asked again
            return
        self.maybe_feedback(answer)
        reply = self.reply_to(clarification, session, question, answer)
        if reply is None:
            ledger.count("clarifications left unanswered")
            return
        answer = self.ask(session, reply)
        self.maybe_feedback(answer)

    def reply_to(self, clarification: dict[str, Any], session: str, question: str, answer: dict[str, Any]) -> str | None:
        """What a user who knows what they meant says: the option's label, a synonym, or its position."""
        rng = self.rng
        options = clarification.get("options") or []
        targets = clarification.get("targets") or []
        if not options:
            return None
        known = BY_TERM.get(clarification.get("term") or "")
        if known is None and not clarification.get("term") and self.meaning is not None and "metric" in self.meaning.target:
            known = self.meaning  # "Which metric do you want to see?" about a question with a metric term: the user picks its meaning
        if known is not None:
            index = next((i for i, t in enumerate(targets) if all(t.get(k) == v for k, v in known.target.items())), None)
            if index is None:
                self.team.traffic.anomaly(
                    "a clarification about a term offers no option that means it", self.tenant, self.user, "POST", "/ask", {"question": question, "session_id": session}, 200, answer
                )
                return None
            style = rng.choice(["label", "ordinal-zh", "ordinal-en", "synonym"])
        else:
            if clarification.get("reason") in ("unknown_term", "ambiguous_metric"):  # a word this script never used as a term
                self.team.traffic.anomaly(
                    "clarification about a word the team never used as a term", self.tenant, self.user, "POST", "/ask",
                    {"question": question, "session_id": session}, 200, answer,
                )
            index = rng.randrange(len(options))
            style = rng.choice(["label", "ordinal-zh"])
        if style == "ordinal-zh" and index < len(ORDINALS_ZH):
            return f"第{ORDINALS_ZH[index]}个"
        if style == "ordinal-en" and index < len(ORDINALS_EN):
            return f"the {ORDINALS_EN[index]}"
        if style == "synonym" and known is not None and known.synonym:
            return known.synonym
        return options[index]

    # ---- feedback -------------------------------------------------------------------------------

    def maybe_feedback(self, answer: dict[str, Any]) -> None:
        rng = self.rng
        episode = answer.get("episode_id")
        if rng.random() < 0.08 and self.rated:  # a re-rating of an earlier answer
            earlier, _ = rng.choice(self.rated)
            self.feedback(earlier, {"episode_id": earlier, "rating": rng.choice([-1, 0, 1])})
        if not episode or rng.random() >= 0.35:
            return
        pick = rng.random()
        if pick < 0.45:
            body: dict[str, Any] = {"episode_id": episode, "rating": 1}
        elif pick < 0.65:
            body = {"episode_id": episode, "rating": -1, "comment": "数字不对"}
        elif pick < 0.8:
            body = {"episode_id": episode, "rating": 0}
        elif pick < 0.95:
            body = {"episode_id": episode, "signals": rng.choice(SIGNALS)}
        elif pick < 0.98:
            body = {"episode_id": episode, "comment": "看一下这个"}
        else:
            status, refused = self.send("POST", "/feedback", {"episode_id": episode, "correction": REFUSED_CORRECTION}, expect=(400,))
            if status == 400 and (refused or {}).get("field") != "correction":
                self.team.traffic.anomaly("refused correction names another field", self.tenant, self.user, "POST", "/feedback", None, status, refused)
            return
        self.feedback(episode, body)

    def feedback(self, episode: str, body: dict[str, Any]) -> None:
        status, answer = self.send("POST", "/feedback", body, expect=(200,))
        if status == 200 and isinstance(answer, dict):
            self.after_feedback(episode, body.get("rating"), answer)

    def after_feedback(self, episode: str, rating: int | None, answer: dict[str, Any]) -> None:
        ledger, traffic = self.team.ledger, self.team.traffic
        self.rated = [(e, r) for e, r in self.rated if e != episode] + [(episode, rating)]
        credited = answer.get("credited") or []
        ledger.credit(self.tenant, self.user, episode, credited)
        for entry in credited:
            if entry.get("role") == "episode" and entry["id"] not in self.episode_memories:
                self.episode_memories.append(entry["id"])
            if entry.get("retired"):
                ledger.count(f"memories retired by feedback ({entry['kind']})")
                for term, memory in list(self.taught.items()):
                    if memory == entry["id"]:
                        del self.taught[term]  # retired: the term is unknown again
        if answer.get("replaced"):
            ledger.count("re-ratings")
        candidate = answer.get("fewshot_candidate")
        now = traffic.now()
        if candidate:
            ledger.fewshot(self.tenant, candidate["id"], now, now, candidate["status"], f"thumbs-up by {self.user}")
            ledger.count("thumbs-up that returned a few-shot candidate")
        for note in answer.get("notes") or []:
            withdrawn = WITHDRAWN.search(note)
            if withdrawn:
                ledger.fewshot(self.tenant, withdrawn.group(1), now, now, "archived", f"withdrawn by {self.user}")
                ledger.count("few-shot candidates withdrawn by a re-rating")


class Admin(Member):
    """``lead`` in every tenant, role admin: asks now and then, and reviews the few-shot queue."""

    def __init__(self, team: Team, seed: int, every: float) -> None:
        super().__init__(team, TENANTS[0], ADMIN, seed, roles="admin")
        self.every = every

    def run(self) -> None:
        try:
            turn = 0
            while True:
                pause = self.rng.uniform(0.5 * self.every, 1.5 * self.every)
                end = time.monotonic() + pause
                while time.monotonic() < end:
                    if self.team.over():
                        return
                    time.sleep(0.25)
                self.tenant = TENANTS[turn % len(TENANTS)]
                turn += 1
                if self.rng.random() < 0.6:  # the admin asks too, and likes the answer: its own candidates
                    self.sessions += 1
                    session = f"{ADMIN}-s{self.sessions:04d}"
                    answer = self.ask(session, self.rng.choice(OPENINGS))
                    if answer.get("status") == "answered":
                        self.feedback(answer["episode_id"], {"episode_id": answer["episode_id"], "rating": 1})
                self.review()
        except Stop:
            return

    def review(self) -> None:
        status, page = self.send("GET", "/fewshots?status=pending_review&limit=50", expect=(200,))
        if status != 200 or not isinstance(page, dict):
            return
        for item in page.get("items", []):
            if item.get("status") != "pending_review":
                self.team.traffic.anomaly("review queue holds a few-shot not pending", self.tenant, ADMIN, "GET", "/fewshots?status=pending_review", None, status, item)
            if item.get("author") == ADMIN:
                self.team.ledger.count("own candidates left alone by the admin")
                continue
            pick = self.rng.random()
            if pick >= 0.6:
                continue
            verb = "approve" if pick < 0.4 else "reject"
            started = self.team.traffic.now()
            code, body = self.send("POST", f"/fewshots/{item['id']}/{verb}", {"reason": f"soak review: {verb}"}, expect=(200, 409))
            if code == 200 and isinstance(body, dict):
                self.team.ledger.fewshot(self.tenant, item["id"], started, self.team.traffic.now(), body["status"], f"{verb}d by {ADMIN}")
                self.team.ledger.count(f"few-shots {body['status']} by the admin")
            elif code == 409:
                self.team.ledger.count(f"few-shot {verb} refused with 409 (no longer pending)")


# ---- samples over time -------------------------------------------------------------------------


@dataclass
class Sample:
    minute: int
    at: float
    rss: float
    sqlite_bytes: int
    wal_bytes: int
    health: dict[str, Any]
    asks: int
    load: float  # the machine's 1-minute load average: other work on it shows here


def store_files(home: Path) -> tuple[int, int]:
    state = home / "state"
    size = lambda p: p.stat().st_size if p.exists() else 0  # noqa: E731
    return size(state / "memtool.sqlite3"), size(state / "memtool.sqlite3-wal")


def sample(traffic: Traffic, pid: int, home: Path, minute: int) -> Sample:
    _, health = traffic.send("GET", "/health", tenant="bench", user="bench", expect=(200,))
    db, wal = store_files(home)
    asks = sum(1 for c in traffic.calls if c.route == "/ask" and c.phase == "load")
    return Sample(minute, traffic.now(), rss_mb(pid), db, wal, health if isinstance(health, dict) else {}, asks, os.getloadavg()[0])


# ---- invariants ---------------------------------------------------------------------------------


@dataclass
class Invariant:
    name: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def fail(self, message: str) -> None:
        self.failures.append(message)


def read_all(traffic: Traffic, path: str, *, tenant: str, user: str, roles: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        sep = "&" if "?" in path else "?"
        status, page = traffic.send(
            "GET", path + (f"{sep}cursor={cursor}" if cursor else ""), tenant=tenant, user=user, expect=(200,), roles=roles
        )
        if status != 200 or not isinstance(page, dict):
            raise RuntimeError(f"GET {path} as {tenant}/{user}: {status} {page}")
        items += page.get("items", [])
        cursor = page.get("next_cursor")
        if not cursor:
            return items


def check_credit(traffic: Traffic, ledger: Ledger, rng: random.Random, size: int) -> tuple[Invariant, Invariant, dict[str, Any]]:
    """uses = distinct episodes in a ledger under 50; successes and failures match its rewards;
    every credit a feedback answer reported is in the ledger."""
    counted = Invariant("credit.uses = distinct episodes in credit.recent (ledger < 50); successes/failures match its rewards")
    kept = Invariant("every credit a /feedback answer reported is in the memory's credit.recent (ledger < 50)")
    keys = sorted(ledger.credited)
    sample_keys = rng.sample(keys, min(size, len(keys)))
    figures: Counter[str] = Counter()
    for tenant, owner, memory in sample_keys:
        roles = "admin" if owner == ADMIN else None
        status, body = traffic.send("GET", f"/memories/{memory}", tenant=tenant, user=owner, expect=(200, 404), roles=roles)
        if status == 404:
            figures["gone (404)"] += 1
            continue
        if status != 200:
            counted.fail(f"GET /memories/{memory} as {tenant}/{owner}: {status} {body}")
            continue
        record = body["memory"]
        credit = record["credit"]
        recent = credit["recent"]
        figures[f"read back ({record['kind']})"] += 1
        if len(recent) >= LEDGER_KEPT:
            figures["ledger full (50): not checked"] += 1
            continue
        counted.checked += 1
        episodes = {e["episode_id"] for e in recent}
        successes = sum(1 for e in recent if e["reward"] > 0)
        failures = sum(1 for e in recent if e["reward"] < 0)
        if credit["uses"] != len(episodes) or credit["successes"] != successes or credit["failures"] != failures:
            counted.fail(
                f"{tenant}/{owner} {memory} ({record['kind']}): uses {credit['uses']}, successes {credit['successes']}, "
                f"failures {credit['failures']}; ledger: {len(episodes)} distinct episodes of {len(recent)} entries, "
                f"{successes} positive, {failures} negative"
            )
        kept.checked += 1
        missing = ledger.credited[(tenant, owner, memory)] - episodes
        if missing:
            kept.fail(f"{tenant}/{owner} {memory} ({record['kind']}): credited for {sorted(missing)} but its ledger lacks them")
    return counted, kept, dict(figures)


def check_isolation(traffic: Traffic, ledger: Ledger, rng: random.Random, per_tenant: int) -> Invariant:
    invariant = Invariant("no memory, episode or few-shot of one tenant is visible to another (all 404 / absent)")
    ids_by_tenant: dict[str, set[str]] = {}
    for tenant in TENANTS:
        ids: set[str] = set()
        for user in {*TENANT_USERS[tenant], ADMIN}:
            roles = "admin" if user == ADMIN else None
            ids |= {m["id"] for m in read_all(traffic, "/memories?limit=100", tenant=tenant, user=user, roles=roles)}
        ids |= {m["id"] for m in read_all(traffic, "/memories?scope=tenant&limit=100", tenant=tenant, user=ADMIN, roles="admin")}
        ids_by_tenant[tenant] = ids
    for tenant in TENANTS:
        own = sorted({m for _, m in ledger.memories[tenant]} | ids_by_tenant[tenant])
        others = [t for t in TENANTS if t != tenant]
        for memory in rng.sample(own, min(per_tenant, len(own))):
            for other in others:
                for user, roles in [*((u, None) for u in TENANT_USERS[other]), (ADMIN, "admin")]:
                    for path in (f"/memories/{memory}", f"/memories/{memory}?history=true"):
                        invariant.checked += 1
                        status, body = traffic.send("GET", path, tenant=other, user=user, expect=(404,), roles=roles)
                        if status != 404:
                            invariant.fail(f"GET {path} ({tenant}'s) as {other}/{user}: {status} {json.dumps(body, ensure_ascii=False)[:300]}")
        episodes = ledger.episodes[tenant]
        for user, episode in rng.sample(episodes, min(per_tenant // 4 or 1, len(episodes))):
            other = rng.choice(others)
            invariant.checked += 1
            status, body = traffic.send("POST", "/feedback", {"episode_id": episode, "rating": 1}, tenant=other, user=user, expect=(404,))
            if status != 404:
                invariant.fail(f"POST /feedback on {tenant}/{user}'s {episode} as {other}/{user}: {status} {json.dumps(body, ensure_ascii=False)[:300]}")
        for other in others:  # recall and the review queue stay inside the tenant
            for user in TENANT_USERS[other]:
                for question in rng.sample(ledger.questions[tenant], min(3, len(ledger.questions[tenant]))):
                    invariant.checked += 1
                    status, body = traffic.send("GET", f"/memories/search?q={_quote(question)}", tenant=other, user=user, expect=(200,))
                    leaked = [i["memory"]["id"] for i in (body or {}).get("items", []) if i["memory"]["tenant"] != other or i["memory"]["id"] in ids_by_tenant[tenant]]
                    if status != 200 or leaked:
                        invariant.fail(f"GET /memories/search?q={question} as {other}/{user}: {status}, other tenants' memories {leaked}")
            for fewshot_status in ("pending_review", "approved", "rejected", "archived"):
                invariant.checked += 1
                items = read_all(traffic, f"/fewshots?status={fewshot_status}&limit=100", tenant=other, user=ADMIN, roles="admin")
                leaked = [i["id"] for i in items if i["id"] in ids_by_tenant[tenant]]
                if leaked:
                    invariant.fail(f"GET /fewshots?status={fewshot_status} as {other}/{ADMIN} lists {tenant}'s {leaked}")
    return invariant


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def check_fewshots(traffic: Traffic, ledger: Ledger) -> tuple[Invariant, dict[str, Any]]:
    invariant = Invariant("every few-shot candidate nobody reviewed or withdrew is pending_review; the queue holds only pending_review; nobody reviewed their own")
    figures: Counter[str] = Counter()
    for tenant in TENANTS:
        status_of: dict[str, dict[str, Any]] = {}
        for listed in ("pending_review", "approved", "rejected", "archived"):
            for item in read_all(traffic, f"/fewshots?status={listed}&limit=100", tenant=tenant, user=ADMIN, roles="admin"):
                invariant.checked += 1
                figures[f"listed {listed}"] += 1
                if item["status"] != listed:
                    invariant.fail(f"{tenant}: {item['id']} listed under {listed} has status {item['status']}")
                if item["id"] in status_of:
                    invariant.fail(f"{tenant}: {item['id']} listed under {status_of[item['id']]['status']} and {listed}")
                status_of[item["id"]] = item
                if item.get("reviewed_by") and item["reviewed_by"] == item.get("author"):
                    invariant.fail(f"{tenant}: {item['id']} was reviewed by its author {item['author']}")
                if listed == "pending_review" and item.get("reviewed_by"):
                    invariant.fail(f"{tenant}: {item['id']} is pending_review but reviewed by {item['reviewed_by']}")
        for (events_tenant, candidate), events in sorted(ledger.fewshot_events.items()):
            if events_tenant != tenant:
                continue
            invariant.checked += 1
            item = status_of.get(candidate)
            if item is None:
                invariant.fail(f"{tenant}: candidate {candidate} ({events[-1][3]}) is in no listing")
                continue
            last = max(events, key=lambda e: e[1])
            # Events whose requests overlapped the last one may have landed in either order.
            allowed = {e[2] for e in events if e[1] >= last[0]}
            if item["status"] not in allowed:
                history = "; ".join(f"{e[3]} → {e[2]} at {e[1]:.1f} s" for e in sorted(events, key=lambda e: e[1]))
                invariant.fail(f"{tenant}: candidate {candidate} is {item['status']}, expected {'/'.join(sorted(allowed))} after: {history}")
            figures[f"tracked, ended {item['status']}"] += 1
    return invariant, dict(figures)


def check_sessions(traffic: Traffic, ledger: Ledger, rng: random.Random, again: int) -> tuple[Invariant, dict[str, Any]]:
    invariant = Invariant("the working memory of every ended session is gone (and ending it again is a 404)")
    figures: Counter[str] = Counter()
    users = {(t, u) for t, u, _ in ledger.ended | ledger.live}
    for tenant, user in sorted(users):
        roles = "admin" if user == ADMIN else None
        working = read_all(traffic, "/memories?kind=working&limit=100", tenant=tenant, user=user, roles=roles)
        held = {m.get("session_id"): m for m in working}
        for session in sorted(s for t, u, s in ledger.ended if (t, u) == (tenant, user)):
            invariant.checked += 1
            if session in held:
                invariant.fail(f"{tenant}/{user} session {session} was ended (204) but still has working memory {held[session]['id']}")
        for t, u, session in ledger.live:
            if (t, u) == (tenant, user):
                figures["live sessions"] += 1
                if session in held:
                    figures["live sessions with working memory"] += 1
                    turns = len(((held[session].get("value") or {}).get("turns")) or [])
                    figures["most turns kept in one session"] = max(figures["most turns kept in one session"], turns)
                else:
                    traffic.anomaly("a live session has no working memory", tenant, user, "GET", "/memories?kind=working", None, 200, session)
    for tenant, user, session in rng.sample(sorted(ledger.ended), min(again, len(ledger.ended))):
        invariant.checked += 1
        status, body = traffic.send("DELETE", f"/sessions/{session}", tenant=tenant, user=user, expect=(404,), roles="admin" if user == ADMIN else None)
        if status != 404:
            invariant.fail(f"DELETE /sessions/{session} again as {tenant}/{user}: {status} {body}")
    figures["ended sessions"] = len(ledger.ended)
    return invariant, dict(figures)


# ---- the report ---------------------------------------------------------------------------------


def pct(values: list[float], q: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def mb(n: int) -> str:
    return f"{n / 1024 / 1024:.2f}"


def step_table(ledger: Ledger, samples: list[Sample]) -> list[str]:
    """Where an ask's time goes as the store grows: each AskFlow step's p50 (from the answers'
    ``timings``) in the first, the middle and the last minute."""
    if not samples or not ledger.step_ms:
        return []
    minutes = sorted({1, (len(samples) + 1) // 2, len(samples)})
    seen = set().union(*(t for _, t in ledger.step_ms))  # every step any answer timed, in AskFlow's order
    order = ["Prepare", "Recall", "Plan", "Guard", "Execute", "Diagnose", "Analyze", "Visualize", "Record"]
    steps = [k for k in order if k in seen] + sorted(seen - {*order, "flow_overhead", "total"}) + ["flow_overhead", "total"]
    lines = [
        "",
        "AskFlow steps, p50 ms of the answers' `timings` (the server's own clock), by minute:",
        "",
        "| step | " + " | ".join(f"minute {m}" for m in minutes) + " |",
        "|---|" + "---|" * len(minutes),
    ]
    for step in steps:
        cells = []
        for m in minutes:
            values = [t[step] for at, t in ledger.step_ms if m - 1 <= at / 60 < m and step in t]
            cells.append(ms(pct(values, 50)))
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def report(
    args: argparse.Namespace,
    traffic: Traffic,
    ledger: Ledger,
    samples: list[Sample],
    start: Sample,
    end_of_load: Sample,
    settled: Sample,
    invariants: list[Invariant],
    figures: dict[str, dict[str, Any]],
    load_seconds: float,
    settle_seconds: float,
    warehouse_rows: str,
) -> str:
    load = [c for c in traffic.calls if c.phase == "load"]
    asks = sum(1 for c in load if c.route == "/ask")
    by_status = Counter(s for _, s, _ in ledger.ask_outcomes)
    points = [(s.asks, s.rss) for s in [start, *samples, end_of_load]]
    slope = statistics.linear_regression([p[0] for p in points], [p[1] for p in points]).slope * 1000 if len(points) > 2 else math.nan
    warm = samples[0] if samples else start
    growth_warm = (end_of_load.rss - warm.rss) / max(1, end_of_load.asks - warm.asks) * 1000
    server_5xx = [c for c in traffic.calls if c.status is not None and (c.status >= 500 or c.status < 0)]
    health = settled.health
    indexer = health.get("indexer", {})
    taught_ok = sum(ok for _, ok in ledger.taught_asks)
    untaught_asked = sum(ok for _, ok in ledger.untaught_asks)
    lines = [
        "# Learning soak: a team on the local runtime for a long time",
        "",
        f"`python bench/learning_soak.py --minutes {args.minutes:g} --clients {args.clients} --scale {args.scale} --seed {args.seed}` "
        f"on {args.machine} (the code the server started with), {date.today().isoformat()}; load {load_seconds:.0f} s, then the outbox settled in {settle_seconds:.0f} s and the invariants were read back.",
        "",
        "How it was measured: `memtool serve` in a child process (temp home, default SQLite store, rule planner, demo warehouse "
        f"seed 7 at scale {args.scale}{warehouse_rows}, MEMTOOL_TODAY={TODAY}), driven over HTTP only. "
        f"{args.clients} clients, one per tenant and user (tenants {', '.join(TENANTS)}; user names shared across tenants), run sessions "
        "in a loop: an opening question (35 %: one with a term the catalog lacks or finds ambiguous), 2-4 follow-ups, sometimes "
        "这次用分, 以后默认用万元/元, another term question, a read of their memories; clarifications answered by label, synonym or "
        "position (第二个, the first), or taught by `POST /feedback` with a correction; feedback on 35 % of the answers (+1 45 %, -1 "
        "20 %, 0 15 %, signals 15 %, a comment, a refused correction), a re-rating of an earlier answer on 8 % of turns; "
        "`DELETE /sessions/{id}` after 25 % of sessions. An admin (`lead`, role admin, in each tenant in turn) asks and thumbs up now "
        f"and then and reviews the pending queue every ~{args.review_every:g} s, approving 40 % and rejecting 20 % of the candidates "
        f"it did not author. Think time uniform 0-{2 * args.think:g} s before each request; a seeded RNG per client (seed {args.seed}). "
        "Latency is the client's wall time per request (a new connection each), RSS from `/proc/<pid>/status`, the SQLite file "
        "and its WAL from their sizes on disk, the outbox from `GET /health`.",
        "",
        "## Overall",
        "",
        "| figure | value | target |",
        "|---|---|---|",
        f"| requests during the load | {len(load):,} in {load_seconds:.0f} s ({len(load) / load_seconds:.1f}/s); {asks:,} asks | |",
        f"| asks by outcome | {', '.join(f'{k} {v:,}' for k, v in by_status.most_common())} | no `failed` |",
        f"| asks that applied a memory (memories_used) | {sum(1 for *_, u in ledger.ask_outcomes if u):,} of {len(ledger.ask_outcomes):,} | |",
        f"| a term the user had taught, asked again: answered without a clarification | {taught_ok:,} / {len(ledger.taught_asks):,} | all |",
        f"| a term the user had not taught: clarification asked | {untaught_asked:,} / {len(ledger.untaught_asks):,} | all |",
        f"| 5xx answers / connection errors (whole run, checks included) | {len(server_5xx)} / {len(traffic.connection_errors)} | 0 / 0 |",
        f"| server's own count of 5xx (`GET /health` requests.server_errors) | {health.get('requests', {}).get('server_errors')} | 0 |",
        f"| statuses the steps did not expect (load and checks) | {sum(traffic.unexpected_count.values())} | 0 |",
        f"| RSS at start / after minute 1 / end of load / after checks | {start.rss:.0f} / {warm.rss:.0f} / {end_of_load.rss:.0f} / {settled.rss:.0f} MB | |",
        f"| RSS growth per 1,000 asks (least squares over the minute samples / minute 1 to end) | {slope:.1f} MB / {growth_warm:.1f} MB | |",
        f"| SQLite file + WAL at start / end of load / after checks | {mb(start.sqlite_bytes)} + {mb(start.wal_bytes)} / "
        f"{mb(end_of_load.sqlite_bytes)} + {mb(end_of_load.wal_bytes)} / {mb(settled.sqlite_bytes)} + {mb(settled.wal_bytes)} MB | |",
        f"| outbox at the end of the load | pending {end_of_load.health.get('indexer', {}).get('pending')}, lag {end_of_load.health.get('indexer', {}).get('lag_seconds')} s | |",
        f"| outbox after settling (`GET /health`) | status {health.get('status')}, pending {indexer.get('pending')}, dead letters {indexer.get('dead_letters')}, "
        f"delivered {indexer.get('delivered'):,}, failed attempts {indexer.get('failed_attempts')}, drain errors {indexer.get('drain_errors')} | 0 pending, 0 dead |",
        "",
        "## Requests by route (the load)",
        "",
        "| route | requests | statuses | p50 ms | p95 ms | max ms |",
        "|---|---|---|---|---|---|",
    ]
    for route in (*ROUTES, "other"):
        calls = [c for c in load if c.route == route]
        if not calls:
            continue
        latencies = [c.ms for c in calls]
        statuses = Counter("conn" if c.status is None else str(c.status) for c in calls)
        shown = ", ".join(f"{k}: {v:,}" for k, v in sorted(statuses.items()))
        lines.append(f"| {route} | {len(calls):,} | {shown} | {ms(pct(latencies, 50))} | {ms(pct(latencies, 95))} | {ms(max(latencies))} |")
    lines += [
        "",
        "## Per minute",
        "",
        "Requests in the minute they started; RSS, SQLite and the outbox sampled at the minute's end.",
        "",
        "| min | asks | clarif. | applied memory | taught term answered | Recall step p50 ms | /feedback | /fewshots | /memories | /sessions | 4xx | 5xx | /ask p50/p95 ms | /feedback p50/p95 | "
        "/fewshots p50/p95 | /memories p50/p95 | RSS MB | SQLite+WAL MB | outbox pending |",
        "|" + "---|" * 19,
    ]
    for s in samples:
        window = [c for c in load if s.minute - 1 <= c.at / 60 < s.minute]
        outcomes = [o for o in ledger.ask_outcomes if s.minute - 1 <= o[0] / 60 < s.minute]

        def of(route: str, calls: list[Call] = window) -> list[Call]:
            return [c for c in calls if c.route == route]

        def p(route: str) -> str:
            latencies = [c.ms for c in of(route)]
            return f"{ms(pct(latencies, 50))}/{ms(pct(latencies, 95))}" if latencies else ""

        n_asks = len(of("/ask"))
        clar = sum(1 for o in outcomes if o[1] == "needs_clarification")
        applied = sum(1 for o in outcomes if o[2])
        taught = [ok for at, ok in ledger.taught_asks if s.minute - 1 <= at / 60 < s.minute]
        recall = [t["Recall"] for at, t in ledger.step_ms if s.minute - 1 <= at / 60 < s.minute and "Recall" in t]
        lines.append(
            f"| {s.minute} | {n_asks:,} | {clar / max(1, len(outcomes)):.0%} | {applied / max(1, len(outcomes)):.0%} | {sum(taught)}/{len(taught)} | "
            f"{ms(pct(recall, 50))} | {len(of('/feedback')):,} | "
            f"{len(of('/fewshots')):,} | {len(of('/memories')):,} | {len(of('/sessions')):,} | "
            f"{sum(1 for c in window if c.status is not None and 400 <= c.status < 500):,} | "
            f"{sum(1 for c in window if c.status is not None and (c.status >= 500 or c.status < 0))} | "
            f"{p('/ask')} | {p('/feedback')} | {p('/fewshots')} | {p('/memories')} | {s.rss:.0f} | "
            f"{(s.sqlite_bytes + s.wal_bytes) / 1024 / 1024:.1f} | {s.health.get('indexer', {}).get('pending')} |"
        )
    lines += step_table(ledger, samples)
    lines += ["", "## Invariants (read back through the API after the load)", "", "| invariant | checked | result |", "|---|---|---|"]
    for inv in invariants:
        lines.append(f"| {inv.name} | {inv.checked:,} | {'holds' if inv.ok else f'**FAILS** ({len(inv.failures)})'} |")
    for inv in invariants:
        if inv.failures:
            lines += ["", f"**{inv.name}** fails:", ""] + [f"- {f}" for f in inv.failures[:30]]
            if len(inv.failures) > 30:
                lines.append(f"- … and {len(inv.failures) - 30} more")
    lines += ["", "## The learning loop in figures", "", "| figure | count |", "|---|---|"]
    for name, count in sorted(ledger.counts.items()):
        lines.append(f"| {name} | {count:,} |")
    for title, values in figures.items():
        for name, count in values.items():
            lines.append(f"| {title}: {name} | {count:,} |")
    if ledger.ignored:
        lines += ["", "Answered questions whose notes say words were ignored (question: note → times):", ""]
        lines += [f"- {text} → {n}" for text, n in ledger.ignored.most_common(30)]
    lines += ["", "## What looked wrong", ""]
    wrong = False
    if traffic.server_errors:
        wrong = True
        lines += ["5xx answers, with their bodies:", ""] + [e.markdown() for e in traffic.server_errors[:50]] + [""]
    if traffic.connection_errors:
        wrong = True
        lines += ["Connection errors:", ""] + [e.markdown() for e in traffic.connection_errors[:20]] + [""]
    if traffic.unexpected:
        wrong = True
        lines += [
            "Statuses a step did not expect (counts: " + ", ".join(f"`{k}` {v}" for k, v in traffic.unexpected_count.most_common()) + "; the first 5 of each):",
            "",
            *[e.markdown() for e in traffic.unexpected],
            "",
        ]
    if traffic.anomalies:
        wrong = True
        lines += [
            "2xx answers whose content looked wrong (counts: " + ", ".join(f"{k} {v}" for k, v in traffic.anomaly_count.most_common()) + "; the first 5 of each):",
            "",
            *[e.markdown() for e in traffic.anomalies],
            "",
        ]
    if not wrong:
        lines.append("Nothing: no 5xx, no connection error, no unexpected status, no answer flagged.")
    lines += [
        "",
        "RSS samples (minute → MB): " + ", ".join(f"{s.minute}→{s.rss:.0f}" for s in samples),
        "",
        f"Machine load average (1 min) before the load and at each minute ({os.cpu_count()} cores): {start.load:.2f}, "
        + ", ".join(f"{s.load:.2f}" for s in samples),
        "",
    ]
    return "\n".join(lines)


# ---- main ---------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--scale", type=float, default=0.2, help="demo warehouse scale")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--think", type=float, default=0.1, help="mean think time before each request, seconds")
    parser.add_argument("--review-every", type=float, default=30, help="mean pause between the admin's reviews, seconds")
    parser.add_argument("--credit-sample", type=int, default=400, help="memories whose credit is read back")
    parser.add_argument("--isolation-sample", type=int, default=25, help="memories per tenant tried from the other tenants")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning_soak.md")
    parser.add_argument("--keep-home", action="store_true", help="keep the temp home (store, warehouse) for a look afterwards")
    args = parser.parse_args()
    if args.clients < 1 or args.minutes <= 0:
        parser.error("--clients and --minutes must be positive")

    # The commit is read before the server starts: the tree may move on during a 20-minute run,
    # and the server keeps running the code it imported.
    args.machine = machine()
    home = Path(tempfile.mkdtemp(prefix="memtool-learning-soak-"))
    port = int(os.environ.get("LEARNING_SOAK_PORT", "0")) or _free_port()
    env = {"MEMTOOL_WAREHOUSE_SCALE": str(args.scale), "MEMTOOL_TODAY": TODAY}
    print(f"starting memtool serve on port {port} (home {home}) …", flush=True)
    server = start_server(home, port, env)
    try:
        traffic = Traffic(port)
        ledger = Ledger()
        start = sample(traffic, server.pid, home, 0)
        load_started = time.monotonic()
        team = Team(traffic, ledger, load_started + args.minutes * 60, args.think)
        members: list[Member] = []
        for i in range(args.clients):
            tenant = TENANTS[i % len(TENANTS)]
            names = TENANT_USERS[tenant]
            name = names[(i // len(TENANTS)) % len(names)]
            rounds = i // (len(TENANTS) * len(names))
            members.append(Member(team, tenant, name if rounds == 0 else f"{name}{rounds + 1}", args.seed * 1000 + i))
        members.append(Admin(team, args.seed * 1000 + 999, args.review_every))
        threads = [threading.Thread(target=m.run, name=f"{m.tenant}/{m.user}", daemon=True) for m in members]
        for thread in threads:
            thread.start()
        samples: list[Sample] = []
        for minute in range(1, math.ceil(args.minutes) + 1):
            wake = load_started + min(minute * 60, args.minutes * 60)
            while time.monotonic() < wake:
                time.sleep(min(1.0, wake - time.monotonic()))
            samples.append(sample(traffic, server.pid, home, minute))
            last = samples[-1]
            print(
                f"  minute {minute}: {last.asks:,} asks, RSS {last.rss:.0f} MB, SQLite {(last.sqlite_bytes + last.wal_bytes) / 1e6:.1f} MB, "
                f"outbox pending {last.health.get('indexer', {}).get('pending')}, 5xx {len(traffic.server_errors)}",
                flush=True,
            )
        for thread in threads:
            thread.join(timeout=180)
        load_seconds = time.monotonic() - load_started
        traffic.phase = "check"
        end_of_load = sample(traffic, server.pid, home, len(samples))
        settle_started = time.monotonic()
        settle(port)
        settle_seconds = time.monotonic() - settle_started

        print("reading state back: credit, isolation, few-shots, sessions …", flush=True)
        rng = random.Random(args.seed)
        counted, kept, credit_figures = check_credit(traffic, ledger, rng, args.credit_sample)
        isolation = check_isolation(traffic, ledger, rng, args.isolation_sample)
        fewshots, fewshot_figures = check_fewshots(traffic, ledger)
        sessions, session_figures = check_sessions(traffic, ledger, rng, 30)
        settle(port)
        settled = sample(traffic, server.pid, home, len(samples))
    finally:
        server.terminate()
        server.wait(timeout=120)

    warehouse_rows = _warehouse_rows(home)
    if not args.keep_home:
        shutil.rmtree(home, ignore_errors=True)
    invariants = [counted, kept, isolation, fewshots, sessions]
    text = report(
        args, traffic, ledger, samples, start, end_of_load, settled, invariants,
        {"credit read-back": credit_figures, "few-shots": fewshot_figures, "sessions": session_figures},
        load_seconds, settle_seconds, warehouse_rows,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)
    print(f"report: {args.out}" + (f" (home kept at {home})" if args.keep_home else ""))
    failed = [inv.name for inv in invariants if not inv.ok]
    for name in failed:
        print(f"INVARIANT FAILS: {name}", file=sys.stderr)
    return 1 if failed else 0


def _warehouse_rows(home: Path) -> str:
    from memtool.sql.demo_warehouse import read_warehouse_summary

    summary = read_warehouse_summary(home / "warehouse" / "demo.duckdb")
    return f": {sum(summary.row_counts.values()):,} rows" if summary is not None else ""


if __name__ == "__main__":
    sys.exit(main())
