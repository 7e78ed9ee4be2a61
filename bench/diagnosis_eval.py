"""Does memtool diagnose by testing its hypotheses? Schema drift and expected values, over HTTP, by value.

Builds the demo warehouse twice in a temp home (seed 7 at ``--scale``, 24 months ending
MEMTOOL_TODAY=2026-11-29): the normal file and its drifted twin (``drift=True``:
``fact_order_line.gross_amount`` is ``gross_amt`` and ``dim_channel`` is ``dim_sales_channel``,
the rows are the same; the catalog still says the old names). Each stream starts ``memtool serve``
in a child process with ``MEMTOOL_WAREHOUSE_PATH`` on one of them and talks to it over HTTP only:

1. **Drift stream** (the drifted file). User ``drift-1`` asks a question that reads both renamed
   names, then 20 more that read them (销售额/gross revenue, 净收入/net revenue, 退款率/refund rate,
   客单价/average order value, by or for a channel; zh and en; other windows and cities). Counted:
   first-attempt failures (``Diagnose`` in ``timings``, or status failed), verified repairs
   (``repaired`` set), and for the 20: failures, answers citing the lesson (a note naming
   ``memory:<id>@v<n>`` and the lesson in ``memories_used``), and answers whose rows equal the
   normal warehouse's for the same intent. Then ``drift-2`` (same tenant; lessons are per user)
   asks a first question, a curator shares ``drift-1``'s lesson, and ``drift-3`` asks a first
   question that should need no diagnosis.
2. **Expected-value stream** (the normal file). 10 single-value questions, each by its own user,
   whose expected value differs from memtool's by one planted cause (time column, test lines,
   unpaid lines, 销售额 meaning net revenue, a window edge). The user's value is compiled in this
   process from the episode's intent with that one compile option changed; a case whose value
   is within 0.1% of memtool's is replaced (the report says so). ``POST /feedback`` with
   ``rating: -1`` and the expected value queues a diagnosis; once the queue is drained,
   ``GET /episodes/{id}`` shows it. Each user then asks 2 later questions on the same metric,
   checked against the user's variant, and user ``control`` asks the same ones, checked against
   memtool's default.

Truth is memtool's own compiler (``IntentCompiler`` with ``CompileOptions``), run in this process
on the normal file through ``DuckDBWarehouse`` (read-only): the drifted warehouse holds the same
rows, so a repaired answer must equal the normal one.

    python bench/diagnosis_eval.py [--scale 0.2] [--seed 7] [--out bench/results/diagnosis_eval.md] [--keep-home]

The rates are the result: a low one does not fail the script. It exits non-zero only when the
evaluation itself cannot run (a server does not start, the warehouse cannot be built).
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import math
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak import _free_port, start_server  # noqa: E402 - the soak's server start

ROOT = Path(__file__).resolve().parents[1]
TODAY = date(2026, 11, 29)  # last month is October 2026
WAREHOUSE_SEED = 7
DRIFT_TENANT = "diagnosis-drift"
EXPECTED_TENANT = "diagnosis-expected"
PREFLIGHT_TENANT = "diagnosis-preflight"
ROWS_REL_TOL = 1e-6  # drift answers against the normal warehouse: the same SQL on the same rows
VALUE_REL_TOL = 0.001  # expected values: memtool's diagnosis tolerance (0.1%)
QUEUE_TIMEOUT_SECONDS = 120.0

# ---- the drift stream -----------------------------------------------------------------------------

# Reads fact_order_line.gross_amount and dim_channel: one lesson maps both.
DRIFT_FIRST = "上个月各渠道的销售额"
DRIFT_FOLLOWING = [
    "上个月的销售额",
    "2026年9月各城市的销售额",
    "上个月各渠道的净收入",
    "今年每月的净收入",
    "上周北京的净收入",
    "2026年第三季度各大区的退款率",
    "refund rate by channel last month",
    "average order value in Shanghai in October 2026",
    "电商渠道上个月的销售额",
    "gross revenue by channel in September 2026",
    "net revenue by city last month",
    "杭州2026年8月各渠道的销量",
    "order count by channel in Nanjing last month",
    "上个月零售药店渠道各大区的客单价",
    "深圳去年的销售额",
    "2026年10月武汉各渠道的退款率",
    "e-commerce gross revenue last quarter",
    "上季度各渠道的净收入",
    "广州今年的客单价",
    "hospital channel net revenue in Chengdu in August 2026",
]
DRIFT_SECOND_USER = "net revenue by channel in Shanghai last month"
DRIFT_THIRD_USER = "上个月杭州各渠道的净收入"
DRIFTED_NAMES = ("gross_amt", "dim_sales_channel")


# ---- the expected-value stream --------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One cause: what the user means differently from memtool, as one compile option."""

    cause: str  # the diagnosis's cause name
    label: str
    repair: dict[str, str]  # what the verified repair rule must say (a subset of it)
    metric_to: str | None = None  # the user's metric means another one
    end_inclusive: bool = False
    start_exclusive: bool = False
    test_lines: bool = False
    unpaid_lines: bool = False
    time_column: str | None = None
    refunds_by_refund_date: bool = False

    def options(self, metric: str) -> Any:
        from memtool.semantic.compiler import CompileOptions

        options = CompileOptions()
        if self.time_column:
            options = options.with_time_column(metric, self.time_column)
        return dataclasses.replace(
            options,
            include_test_lines=self.test_lines,
            include_unpaid_lines=self.unpaid_lines,
            window_end_inclusive=self.end_inclusive,
            window_start_exclusive=self.start_exclusive,
            refunds_by_refund_date=frozenset({metric}) if self.refunds_by_refund_date else frozenset(),
        )


TIME_COLUMN = Variant("time_column", "order_date instead of paid_at", {"kind": "time_column", "to": "order_date"}, time_column="order_date")
TEST_LINES = Variant("test_lines", "test lines included", {"kind": "include_rows", "rows": "test"}, test_lines=True)
UNPAID_LINES = Variant("unpaid_lines", "unpaid lines included", {"kind": "include_rows", "rows": "unpaid"}, unpaid_lines=True)
NET_REVENUE = Variant("metric_definition", "销售额 means net revenue", {"kind": "metric_definition", "to": "net_revenue"}, metric_to="net_revenue")
END_INCLUSIVE = Variant("window_edges", "window end inclusive", {"kind": "window_edges", "edge": "end_inclusive"}, end_inclusive=True)
REFUND_DATE = Variant(
    "refund_period", "refunds counted when refunded", {"kind": "refund_period", "to": "refund_date"}, refunds_by_refund_date=True
)
START_EXCLUSIVE = Variant("window_edges", "window start exclusive", {"kind": "window_edges", "edge": "start_exclusive"}, start_exclusive=True)
VARIANTS = (TIME_COLUMN, TEST_LINES, UNPAID_LINES, NET_REVENUE, END_INCLUSIVE, START_EXCLUSIVE, REFUND_DATE)


@dataclass(frozen=True)
class Case:
    variant: Variant
    question: str
    later: tuple[str, str]  # the same metric, another city or month
    replacement: Case | None = None  # asked instead when the variant makes no difference here


CASES = [
    Case(TIME_COLUMN, "上个月上海的销售额", ("2026年9月上海的销售额", "上个月北京的销售额")),
    Case(TIME_COLUMN, "gross revenue in Beijing in September 2026", ("gross revenue in Beijing in August 2026", "gross revenue in Tianjin in September 2026")),
    Case(TIME_COLUMN, "2026年8月杭州的销售额", ("2026年7月杭州的销售额", "2026年8月南京的销售额")),
    Case(TEST_LINES, "上个月的销售额", ("上个月北京的销售额", "上个月武汉的销售额")),
    Case(TEST_LINES, "2026年6月广州的销售额", ("去年成都的销售额", "去年重庆的销售额")),
    # A window on paid_at already leaves unpaid lines out, so including them changes nothing on a
    # windowed question (and every question gets a window): these two are replaced.
    Case(
        UNPAID_LINES, "上个月成都的销售额", ("2026年9月成都的销售额", "上个月重庆的销售额"),
        replacement=Case(START_EXCLUSIVE, "2026年9月杭州的客单价", ("2026年9月上海的客单价", "average order value in Beijing last month")),
    ),
    Case(
        UNPAID_LINES, "2026年9月重庆的销售额", ("上个月重庆的销售额", "2026年8月重庆的销售额"),
        replacement=Case(REFUND_DATE, "2026年9月南京的净收入", ("上个月南京的净收入", "上个月北京的净收入")),
    ),
    Case(NET_REVENUE, "上个月南京的销售额", ("2026年9月南京的销售额", "上个月武汉的销售额")),
    Case(NET_REVENUE, "2026年第三季度成都的销售额", ("去年重庆的销售额", "gross revenue in Wuhan in May 2026")),
    Case(END_INCLUSIVE, "上个月深圳的销售额", ("2026年9月深圳的销售额", "上个月广州的销售额")),
]


# ---- talking to memtool -----------------------------------------------------------------------------


def call(port: int, method: str, path: str, body: Any = None, *, tenant: str, user: str, roles: str | None = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=180)
    headers = {"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "Content-Type": "application/json"}
    if roles:
        headers["X-Memtool-Roles"] = roles
    try:
        payload = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        raw = response.read()
        return response.status, (json.loads(raw) if raw else None)
    finally:
        connection.close()


class Client:
    def __init__(self, port: int, tenant: str) -> None:
        self.port, self.tenant = port, tenant

    def ask(self, user: str, question: str) -> dict[str, Any]:
        status, body = call(self.port, "POST", "/ask", {"question": question}, tenant=self.tenant, user=user)
        if status != 200 or not isinstance(body, dict):
            return {"status": f"http {status}", "error": body, "rows": [], "notes": [], "timings": {}}
        return body

    def episode(self, user: str, episode_id: str) -> dict[str, Any]:
        status, body = call(self.port, "GET", f"/episodes/{episode_id}", tenant=self.tenant, user=user)
        return body if status == 200 and isinstance(body, dict) else {"error": body, "http": status}

    def feedback(self, user: str, body: dict[str, Any]) -> tuple[int, Any]:
        return call(self.port, "POST", "/feedback", body, tenant=self.tenant, user=user)

    def share(self, user: str, memory_id: str, roles: str | None, owner: str | None = None) -> tuple[int, Any]:
        body = {"owner": owner} if owner else {}
        return call(self.port, "POST", f"/lessons/{memory_id}/share", body, tenant=self.tenant, user=user, roles=roles)

    def queue(self) -> dict[str, Any]:
        return call(self.port, "GET", "/health", tenant="bench", user="bench")[1].get("diagnosis_queue") or {}

    def drained(self, delivered_before: int, timeout: float = QUEUE_TIMEOUT_SECONDS) -> tuple[bool, float, dict[str, Any]]:
        """Wait until the queue has delivered one more event and nothing is pending or in flight."""
        started = time.monotonic()
        while True:
            stats = self.queue()
            if stats.get("delivered", 0) > delivered_before and not stats.get("pending") and not stats.get("in_flight"):
                return True, time.monotonic() - started, stats
            if time.monotonic() - started > timeout:
                return False, time.monotonic() - started, stats
            time.sleep(0.1)


# ---- truth: memtool's compiler on the normal file -------------------------------------------------


class Truth:
    """The plain compiler (or one option changed) over the normal warehouse, opened read-only."""

    def __init__(self, path: Path) -> None:
        from memtool.semantic.compiler import IntentCompiler
        from memtool.sql.duckdb_warehouse import DuckDBWarehouse

        self._warehouse = DuckDBWarehouse(path)
        self._compiler = IntentCompiler()
        self._cache: dict[str, list[list[Any]]] = {}

    def rows(self, raw_intent: dict[str, Any], variant: Variant | None = None) -> list[list[Any]]:
        from memtool.semantic.intent import Intent

        intent = Intent.model_validate(raw_intent)
        if variant is not None and variant.metric_to:
            intent = intent.model_copy(update={"metric": variant.metric_to})
        options = variant.options(intent.metric) if variant is not None else self._compiler.options
        key = json.dumps([intent.model_dump(mode="json"), repr(options)], sort_keys=True, ensure_ascii=False)
        if key not in self._cache:
            sql = self._compiler.with_options(options).compile(intent).sql
            self._cache[key] = [list(row) for row in self._warehouse.run(sql, max_rows=10_000, timeout_seconds=60).rows]
        return self._cache[key]

    def value(self, raw_intent: dict[str, Any], variant: Variant | None = None) -> float | None:
        rows = self.rows(raw_intent, variant)
        return single_value(rows)


def single_value(rows: list[list[Any]] | None) -> float | None:
    if not rows or len(rows) != 1:
        return None
    cell = rows[0][-1]
    return float(cell) if isinstance(cell, (int, float)) and not isinstance(cell, bool) else None


def _sort_key(row: list[Any]) -> tuple[Any, ...]:
    return tuple((0, c) if isinstance(c, str) else (2, "") if c is None else (1, float(c)) for c in row)


def same_rows(got: list[list[Any]], want: list[list[Any]], rel: float = ROWS_REL_TOL) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(sorted(got, key=_sort_key), sorted(want, key=_sort_key)):
        if len(g) != len(w):
            return False
        for a, b in zip(g, w):
            numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
            if numeric and not math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-9):
                return False
            if not numeric and a != b:
                return False
    return True


def close(a: float | None, b: float | None, rel: float = VALUE_REL_TOL) -> bool:
    return a is not None and b is not None and abs(a - b) <= rel * max(abs(b), 1e-9)


def rel_diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else (a - b) / abs(b)


# ---- one answer, looked at ------------------------------------------------------------------------


@dataclass
class Asked:
    user: str
    question: str
    answer: dict[str, Any]
    intent: dict[str, Any] | None = None
    expected: list[list[Any]] | None = None  # the normal warehouse's rows (drift), or the variant's
    correct: bool = False
    lesson_cite: str | None = None  # memory:<id>@v<n> this answer should cite

    @property
    def status(self) -> str:
        return str(self.answer.get("status"))

    @property
    def diagnosed(self) -> bool:
        return "Diagnose" in (self.answer.get("timings") or {})

    @property
    def failed(self) -> bool:
        return self.status != "answered" or self.diagnosed

    @property
    def repaired(self) -> dict[str, Any] | None:
        return self.answer.get("repaired")

    @property
    def rows(self) -> list[list[Any]]:
        return [list(r) for r in self.answer.get("rows") or []]

    @property
    def value(self) -> float | None:
        return single_value(self.rows)

    def cites(self, cite: str | None = None) -> bool:
        """A note names the lesson and the lesson is among the memories used (kind causal)."""
        cite = cite or self.lesson_cite
        if not cite:
            return False
        memory_id = cite.split(":", 1)[1].split("@", 1)[0]
        noted = any(cite in note for note in self.answer.get("notes") or [])
        used = any(m.get("id") == memory_id and m.get("kind") == "causal" for m in self.answer.get("memories_used") or [])
        return noted and used

    def causal_used(self) -> list[str]:
        return [f"{m.get('id')}@v{m.get('version')}" for m in self.answer.get("memories_used") or [] if m.get("kind") == "causal"]

    def drifted_names_read(self) -> list[str]:
        sql = str(self.answer.get("sql") or "")
        return [name for name in DRIFTED_NAMES if name in sql]


def ask(client: Client, user: str, question: str) -> Asked:
    answer = client.ask(user, question)
    asked = Asked(user, question, answer)
    if answer.get("episode_id"):
        episode = client.episode(user, answer["episode_id"]).get("episode") or {}
        asked.intent = (episode.get("value") or {}).get("intent")
    return asked


# ---- the streams ------------------------------------------------------------------------------------


@dataclass
class DriftResult:
    first: Asked
    first_diagnosis: dict[str, Any] | None
    following: list[Asked]
    second: Asked
    share_attempts: list[tuple[str, int, Any]]  # (who, HTTP status, body)
    shared_cite: str | None
    third: Asked


def judge_drift(asked: Asked, truth: Truth) -> Asked:
    if asked.intent is not None:
        asked.expected = truth.rows(asked.intent)
    asked.correct = asked.status == "answered" and asked.expected is not None and same_rows(asked.rows, asked.expected)
    return asked


def drift_stream(client: Client, truth: Truth, rng: random.Random) -> DriftResult:
    following = list(DRIFT_FOLLOWING)
    rng.shuffle(following)
    print(f"  drift-1: {DRIFT_FIRST}", flush=True)
    first = judge_drift(ask(client, "drift-1", DRIFT_FIRST), truth)
    diagnosis = None
    if first.repaired:
        first.lesson_cite = f"memory:{first.repaired['memory_id']}@v{first.repaired['version']}"
        view = client.episode("drift-1", first.answer["episode_id"])
        diagnosis = next((d for d in view.get("diagnoses") or [] if d.get("id") == first.repaired["memory_id"]), None)
    print(f"    {_drift_line(first)}", flush=True)
    results = []
    for n, question in enumerate(following, start=1):
        asked = judge_drift(ask(client, "drift-1", question), truth)
        asked.lesson_cite = first.lesson_cite
        results.append(asked)
        print(f"  {n:2d}/{len(following)} {question}: {_drift_line(asked)}", flush=True)
    print(f"  drift-2: {DRIFT_SECOND_USER}", flush=True)
    second = judge_drift(ask(client, "drift-2", DRIFT_SECOND_USER), truth)
    if second.repaired:  # its own lesson, kept in the same ask
        second.lesson_cite = f"memory:{second.repaired['memory_id']}@v{second.repaired['version']}"
    print(f"    {_drift_line(second)}", flush=True)
    attempts: list[tuple[str, int, Any]] = []
    shared_cite = None
    if first.repaired:
        # A curator who is not the lesson's owner shares it, naming its owner.
        who, roles = "curator", "curator"
        status, body = client.share(who, first.repaired["memory_id"], roles, owner="drift-1")
        attempts.append((f"{who} (roles {roles}, owner drift-1)", status, body))
        print(f"  POST /lessons/{first.repaired['memory_id']}/share as {who} with role {roles}, owner drift-1: HTTP {status}", flush=True)
        if status == 201 and isinstance(body, dict):
            memory = body.get("memory") or {}
            shared_cite = f"memory:{memory.get('id')}@v{memory.get('version')}"
    print(f"  drift-3: {DRIFT_THIRD_USER}", flush=True)
    third = judge_drift(ask(client, "drift-3", DRIFT_THIRD_USER), truth)
    third.lesson_cite = shared_cite
    print(f"    {_drift_line(third)}", flush=True)
    return DriftResult(first, diagnosis, results, second, attempts, shared_cite, third)


def _drift_line(asked: Asked) -> str:
    return (
        f"status {asked.status}, Diagnose {'yes' if asked.diagnosed else 'no'}, repaired {bool(asked.repaired)}, "
        f"cites lesson {asked.cites()}, rows {'equal' if asked.correct else 'DIFFER'}"
    )


@dataclass
class Later:
    question: str
    mine: Asked
    control: Asked
    want_mine: float | None
    want_default: float | None

    @property
    def right(self) -> bool:
        return close(self.mine.value, self.want_mine)

    @property
    def control_right(self) -> bool:
        return close(self.control.value, self.want_default)

    @property
    def discriminating(self) -> bool:
        return not close(self.want_mine, self.want_default)


@dataclass
class CaseResult:
    case: Case
    user: str
    asked: Asked
    default: float | None
    wanted: float | None
    skipped: list[tuple[Case, Asked, float | None, float | None]] = field(default_factory=list)  # replaced cases
    also_explains: list[str] = field(default_factory=list)  # other variants giving the same value
    feedback_status: int = 0
    feedback: Any = None
    drained: bool = False
    wait_seconds: float = 0.0
    diagnosis: dict[str, Any] | None = None
    diagnoses_seen: int = 0
    later: list[Later] = field(default_factory=list)

    @property
    def value(self) -> dict[str, Any]:
        return (self.diagnosis or {}).get("value") or {}

    @property
    def verified(self) -> bool:
        return self.value.get("verified") is True

    @property
    def found_cause(self) -> str | None:
        return self.value.get("cause")

    @property
    def rules(self) -> list[dict[str, Any]]:
        return list((self.value.get("repair") or {}).get("rules") or [])

    @property
    def matches(self) -> bool:
        wanted = self.case.variant.repair
        return (
            self.verified
            and self.found_cause == self.case.variant.cause
            and any(all(rule.get(k) == v for k, v in wanted.items()) for rule in self.rules)
        )

    @property
    def cite(self) -> str | None:
        if self.diagnosis is None or not self.verified or self.diagnosis.get("status") != "active":
            return None
        return f"memory:{self.diagnosis.get('id')}@v{self.diagnosis.get('version')}"


def expected_stream(client: Client, truth: Truth, rng: random.Random) -> list[CaseResult]:
    cases = list(CASES)
    rng.shuffle(cases)
    results = []
    for n, planted in enumerate(cases, start=1):
        user = f"user-{n:02d}"
        case: Case | None = planted
        skipped: list[tuple[Case, Asked, float | None, float | None]] = []
        while case is not None:
            asked = ask(client, user, case.question)
            default = truth.value(asked.intent) if asked.intent else None
            wanted = truth.value(asked.intent, case.variant) if asked.intent else None
            if asked.status == "answered" and default is not None and wanted is not None and not close(wanted, default):
                break
            skipped.append((case, asked, default, wanted))
            print(f"  {user} {case.question} ({case.variant.label}): no difference ({wanted} vs {default}); replaced", flush=True)
            case, user = case.replacement, f"{user}r"
        if case is None:
            continue
        result = CaseResult(case, user, asked, default, wanted, skipped)
        assert asked.intent is not None
        result.also_explains = [
            v.label for v in VARIANTS if v != case.variant and close(truth.value(asked.intent, v), wanted)
        ]
        delivered = int(client.queue().get("delivered", 0))
        result.feedback_status, result.feedback = client.feedback(
            user, {"episode_id": asked.answer["episode_id"], "rating": -1, "expected": {"value": wanted}}
        )
        result.drained, result.wait_seconds, _ = client.drained(delivered)
        view = client.episode(user, asked.answer["episode_id"])
        diagnoses = view.get("diagnoses") or []
        result.diagnoses_seen = len(diagnoses)
        result.diagnosis = diagnoses[-1] if diagnoses else None
        print(
            f"  {user} {case.question} ({case.variant.label}): memtool {default}, user {wanted}; "
            f"found {result.found_cause or '-'} verified {result.verified} in {result.value.get('executions')} executions"
            f"{' ✓' if result.matches else ' ✗'}",
            flush=True,
        )
        for question in case.later:
            mine = ask(client, user, question)
            mine.lesson_cite = result.cite
            control = ask(client, "control", question)
            later = Later(
                question,
                mine,
                control,
                truth.value(mine.intent, case.variant) if mine.intent else None,
                truth.value(control.intent) if control.intent else None,
            )
            result.later.append(later)
            print(
                f"    later {question}: user {mine.value} (wants {later.want_mine}, cites {mine.cites()}, Diagnose {mine.diagnosed}) "
                f"{'✓' if later.right else '✗'}; control {control.value} (default {later.want_default}) {'✓' if later.control_right else '✗'}",
                flush=True,
            )
        results.append(result)
    return results


def preflight(client: Client) -> list[tuple[str, str]]:
    """Every drift-stream question must answer on the normal warehouse (the rule planner parses it)."""
    problems = []
    for question in [DRIFT_FIRST, *DRIFT_FOLLOWING, DRIFT_SECOND_USER, DRIFT_THIRD_USER]:
        answer = client.ask("preflight", question)
        if answer.get("status") != "answered" or "Diagnose" in (answer.get("timings") or {}):
            problems.append((question, f"{answer.get('status')} {answer.get('error') or answer.get('clarification') or ''}"))
    return problems


# ---- the report ----------------------------------------------------------------------------------------


def machine() -> str:
    import duckdb

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = " with uncommitted changes (other files)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, memtool at {commit}{dirty}"
    )


def _n(items: list[Any], test: Callable[[Any], bool]) -> int:
    return sum(1 for item in items if test(item))


def _frac(k: int, n: int) -> str:
    return f"{k}/{n}" + (f" ({100 * k / n:.0f}%)" if n else "")


def _num(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:,.4f}" if abs(value) < 10 else f"{value:,.2f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:+.3f}%"


def _tests(diagnosis: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """(hypothesis label, test output) for every hypothesis in the diagnosis's trajectory."""
    tests = []
    for step in ((diagnosis or {}).get("value") or {}).get("trajectory") or []:
        if step.get("step") != "test":
            continue
        rules = (step.get("input") or {}).get("repairs") or []
        detail = ",".join(str(r.get("to") or r.get("rows") or r.get("edge") or r.get("join") or "") for r in rules)
        tests.append((f"{(step.get('input') or {}).get('cause')}({detail})", step.get("output") or {}))
    return tests


def _baseline_value(diagnosis: dict[str, Any] | None) -> float | None:
    for step in ((diagnosis or {}).get("value") or {}).get("trajectory") or []:
        if step.get("step") == "baseline":
            return (step.get("output") or {}).get("value")
    return None


def _trajectory(diagnosis: dict[str, Any] | None) -> str:
    tests = _tests(diagnosis)
    shown = [f"{label} {output.get('result')}" for label, output in tests if output.get("result") != "not_tested"]
    untested = sum(1 for _, output in tests if output.get("result") == "not_tested")
    return "; ".join(shown) + (f"; {untested} not tested" if untested else "")


def _escape(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report(
    args: argparse.Namespace,
    command: str,
    warehouse_rows: int,
    problems: list[tuple[str, str]],
    drift: DriftResult,
    cases: list[CaseResult],
    seconds: float,
    phase_seconds: dict[str, float],
) -> tuple[str, list[str]]:
    following = drift.following
    fail_20 = _n(following, lambda a: a.failed)
    cited_20 = _n(following, lambda a: a.cites())
    right_20 = _n(following, lambda a: a.correct)
    first = drift.first
    verified = [c for c in cases if c.verified]
    matched = [c for c in cases if c.matches]
    laters = [later for c in cases for later in c.later]
    right_later = _n(laters, lambda l: l.right)
    control_later = _n(laters, lambda l: l.control_right)
    cited_later = _n([l.mine for l in laters], lambda a: a.cites())
    diagnosed_later = _n([l.mine for l in laters], lambda a: a.diagnosed)
    discriminating = _n(laters, lambda l: l.discriminating)
    executions = [int(c.value.get("executions") or 0) for c in cases if c.diagnosis]
    budget = "/".join(sorted({str(c.value.get("budget")) for c in cases if c.diagnosis})) or "–"
    waits = [c.wait_seconds for c in cases]
    replaced = [(c, s) for c in cases for s in c.skipped]

    figures = [
        f"drift: first question failed on first attempt: {'yes' if first.failed else 'no'} (Diagnose {first.diagnosed}, status {first.status})",
        f"drift: repair verified in the same ask: {'yes' if first.repaired else 'no'}"
        + (f" ({first.repaired['cause']}, {first.lesson_cite})" if first.repaired else "")
        + f"; rows equal the normal warehouse's: {first.correct}",
        f"drift: next {len(following)} questions failed or needed Diagnose: {_frac(fail_20, len(following))}",
        f"drift: next {len(following)} questions citing the lesson: {_frac(cited_20, len(following))}",
        f"drift: next {len(following)} questions with rows equal to the normal warehouse's: {_frac(right_20, len(following))}",
        f"drift: second user's first question repaired in the same ask: {'yes' if drift.second.repaired else 'no'} "
        f"(Diagnose {drift.second.diagnosed}, rows equal {drift.second.correct})",
        "drift: lesson shared by a curator: "
        + ", ".join(f"{who} HTTP {status}" for who, status, _ in drift.share_attempts),
        f"drift: third user's first question after the share needed Diagnose: {'yes' if drift.third.diagnosed else 'no'} "
        f"(cites the shared lesson {drift.third.cites()}, rows equal {drift.third.correct})",
        f"expected: cases diagnosed: {len(cases)} ({len(replaced)} planted cases replaced: no difference on this data)",
        f"expected: diagnoses verified: {_frac(len(verified), len(cases))}",
        f"expected: found cause = planted cause (and repair): {_frac(len(matched), len(cases))}",
        f"expected: executions per diagnosis: median {statistics.median(executions) if executions else '–'}, max {max(executions, default=0)} (budget {budget})",
        f"expected: later questions answered to the user's expectation: {_frac(right_later, len(laters))} "
        f"({discriminating} of them differ from memtool's default)",
        f"expected: later questions citing the user's lesson: {_frac(cited_later, len(laters))}; needing Diagnose: {diagnosed_later}",
        f"expected: the control user's answers equal memtool's default: {_frac(control_later, len(laters))}",
        f"expected: feedback to drained queue: median {statistics.median(waits) if waits else 0:.2f} s, max {max(waits, default=0):.2f} s",
    ]
    lines = [
        "# Does memtool diagnose by testing its hypotheses? Schema drift and expected values, by value",
        "",
        f"`{command}` on {machine()}, {date.today().isoformat()}, {seconds:.0f} s "
        f"(drift stream {phase_seconds.get('drift', 0):.0f} s, expected-value stream {phase_seconds.get('expected', 0):.0f} s, "
        f"server starts and preflight the rest).",
        "",
        "How it was measured: the demo warehouse built twice in a temp home, seed "
        f"{WAREHOUSE_SEED} at scale {args.scale} ({warehouse_rows:,} rows, 24 months ending MEMTOOL_TODAY={TODAY.isoformat()}): "
        "the normal file and its drifted twin (`fact_order_line.gross_amount` → `gross_amt`, `dim_channel` → `dim_sales_channel`, "
        "same rows; the catalog still says the old names). Each stream ran `memtool serve` in a child process (own temp home, SQLite "
        "store, rule planner and rule diagnoser, `MEMTOOL_WAREHOUSE_PATH` on one file, default diagnosis budget of 8 executions and "
        "0.1% tolerance), driven over HTTP only with `X-Memtool-Tenant`/`X-Memtool-User` (and `X-Memtool-Roles: curator` to share). "
        "Truth is memtool's own compiler (`IntentCompiler`, with one `CompileOptions` field changed or the metric swapped for a user's "
        "variant), compiled in the bench process from the episode's resolved intent (`GET /episodes/{id}` → `episode.value.intent`) "
        "and run on the normal file through `DuckDBWarehouse` (read-only). Drift answers are compared as sorted rows, numbers within "
        f"{ROWS_REL_TOL:g} relative; expected values and later answers within {VALUE_REL_TOL:.1%} relative. "
        "A first attempt failed when the answer's `timings` has a `Diagnose` step or its status is not `answered`; an answer cites a "
        "lesson when a note names `memory:<id>@v<n>` and that memory is in `memories_used` with kind `causal`. "
        f"Feedback diagnoses were awaited by polling `GET /health` until `diagnosis_queue.delivered` grew and `pending` and "
        f"`in_flight` were 0 (timeout {QUEUE_TIMEOUT_SECONDS:.0f} s). `--seed {args.seed}` orders the drift questions and the cases.",
        "",
        "## Summary",
        "",
        *[f"- {f}" for f in figures],
        "",
    ]
    if problems:
        lines += ["**Preflight**: these drift-stream questions did not answer on the normal warehouse:", ""]
        lines += [f"- {q}: {why}" for q, why in problems]
        lines.append("")
    else:
        lines += [
            f"Preflight: all {len(DRIFT_FOLLOWING) + 3} drift-stream questions answered on the normal warehouse (user `preflight`, "
            "another tenant) without a diagnosis.",
            "",
        ]
    lines += [
        "## Drift stream",
        "",
        "| stream figure | result |",
        "|---|---|",
        f"| first question (drift-1) failed on the first attempt | {'yes' if first.failed else 'no'} |",
        f"| repair verified in the same ask (`repaired` set) | {'yes' if first.repaired else 'no'} |",
        f"| next {len(following)}: failed or needed Diagnose | {_frac(fail_20, len(following))} |",
        f"| next {len(following)}: cite the lesson | {_frac(cited_20, len(following))} |",
        f"| next {len(following)}: rows equal the normal warehouse's | {_frac(right_20, len(following))} |",
        f"| second user (drift-2), first question repaired in the same ask | {'yes' if drift.second.repaired else 'no'} |",
        f"| third user (drift-3) after the share: needed Diagnose | {'yes' if drift.third.diagnosed else 'no'} |",
        "",
    ]
    if first.repaired:
        value = (drift.first_diagnosis or {}).get("value") or {}
        lines += [
            f"The lesson: `{first.lesson_cite}`, cause `{first.repaired.get('cause')}`, status `{(drift.first_diagnosis or {}).get('status')}`, "
            f"verified {value.get('verified')}, {value.get('executions')} of {value.get('budget')} executions, "
            f"repair rules `{json.dumps((value.get('repair') or {}).get('rules'), ensure_ascii=False)}`. Root cause: {first.repaired.get('root_cause')}",
            "",
        ]
    lines += [
        "| # | user | question | status | Diagnose | repaired | drifted names in the SQL that ran | cites lesson | rows equal normal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [("first", first), *((str(i), a) for i, a in enumerate(following, start=1)), ("2nd user", drift.second), ("3rd user", drift.third)]
    for label, a in rows:
        lines.append(
            f"| {label} | {a.user} | {_escape(a.question)} | {a.status} | {'yes' if a.diagnosed else 'no'} | "
            f"{a.repaired.get('cause') if a.repaired else '–'} | {', '.join(a.drifted_names_read()) or '–'} | "
            f"{'yes' if a.cites() else 'no'}{' (' + a.lesson_cite + ')' if label in ('first', '2nd user', '3rd user') and a.lesson_cite else ''} | "
            f"{'yes' if a.correct else 'no'} |"
        )
    lines += [
        "",
        "Sharing the lesson (`POST /lessons/{id}/share` on drift-1's lesson):",
        "",
    ]
    for who, status, body in drift.share_attempts:
        shown = body if status != 201 else {"memory": {k: (body.get("memory") or {}).get(k) for k in ("id", "owner", "kind", "status", "version")}}
        lines.append(f"- as {who}: HTTP {status} `{json.dumps(shown, ensure_ascii=False)}`")
    lines += [
        "",
        f"drift-2's answer used causal memories {drift.second.causal_used() or 'none'}; drift-3's used {drift.third.causal_used() or 'none'}"
        + (f" (the shared copy is `{drift.shared_cite}`)." if drift.shared_cite else "."),
    ]
    misses = [a for _, a in rows if not a.correct]
    if misses:
        lines += ["", "Answers whose rows differ from the normal warehouse's:", ""]
        for a in misses:
            lines.append(
                f"- 「{a.question}」 ({a.user}): status {a.status}, rows {json.dumps(a.rows[:6], ensure_ascii=False)} vs "
                f"{json.dumps((a.expected or [])[:6], ensure_ascii=False)}; SQL `{_escape(a.answer.get('sql'))}`; error {a.answer.get('error')}"
            )

    lines += [
        "",
        "## Expected-value stream",
        "",
        "| stream figure | result |",
        "|---|---|",
        f"| questions diagnosed after `POST /feedback` (rating −1, expected value) | {len(cases)} |",
        f"| diagnosis queued (`diagnosis_queued: true`) | {_n(cases, lambda c: isinstance(c.feedback, dict) and c.feedback.get('diagnosis_queued') is True)}/{len(cases)} |",
        f"| verified (status `active`) | {_frac(len(verified), len(cases))} |",
        f"| found cause and repair = the planted one | {_frac(len(matched), len(cases))} |",
        f"| executions per diagnosis (budget {budget}, the baseline re-run included) | median {statistics.median(executions) if executions else '–'}, max {max(executions, default=0)} |",
        f"| later questions answered to the user's expectation | {_frac(right_later, len(laters))} |",
        f"| later questions citing the user's lesson / needing Diagnose | {cited_later}/{len(laters)} / {diagnosed_later}/{len(laters)} |",
        f"| the same later questions by user `control`: memtool's default | {_frac(control_later, len(laters))} |",
        f"| later questions where the user's value differs from the default (the check can tell them apart) | {discriminating}/{len(laters)} |",
        "",
    ]
    if replaced:
        lines += ["Replaced planted cases (the variant's value equals memtool's within 0.1% on this data):", ""]
        for c, (case, asked, default, wanted) in replaced:
            lines.append(
                f"- {case.variant.label} on 「{case.question}」: memtool {_num(default)}, variant {_num(wanted)} — replaced by "
                f"{c.case.variant.label} on 「{c.case.question}」. "
                + (
                    "A window on `paid_at` already leaves out lines with no `paid_at`, and every question gets a window "
                    "(none given: the last full month), so including unpaid lines alone changes no answer."
                    if case.variant is UNPAID_LINES
                    else ""
                )
            )
        lines.append("")
    lines += [
        "| user | question | planted cause | memtool | user expected | found cause | verified | executions | hypotheses tested | later questions right (user / control) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        found = c.found_cause or "none"
        rules = ", ".join(
            str(r.get("to") or r.get("rows") or r.get("edge") or r.get("join") or r.get("kind")) for r in c.rules
        )
        lines.append(
            f"| {c.user} | {_escape(c.case.question)} | {c.case.variant.label} | {_num(c.default)} | {_num(c.wanted)} ({_pct(rel_diff(c.wanted, c.default))}) | "
            f"{found}{' (' + rules + ')' if rules else ''} {'✓' if c.matches else '✗'} | {c.verified} ({(c.diagnosis or {}).get('status', 'no diagnosis')}) | "
            f"{c.value.get('executions', '–')}/{c.value.get('budget', '–')} | {_escape(_trajectory(c.diagnosis))} | "
            f"{_n(c.later, lambda l: l.right)}/{len(c.later)} / {_n(c.later, lambda l: l.control_right)}/{len(c.later)} |"
        )
    ambiguous = [c for c in cases if c.also_explains]
    if ambiguous:
        lines += ["", "Cases another single cause would explain as well (within 0.1%):", ""]
        lines += [f"- 「{c.case.question}」 ({c.case.variant.label}): also {', '.join(c.also_explains)}" for c in ambiguous]
    lines += [
        "",
        "### Later questions",
        "",
        "| user | planted cause | later question | user's answer | user's value | cites lesson | Diagnose | right | control's answer | default | right |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cases:
        for l in c.later:
            lines.append(
                f"| {c.user} | {c.case.variant.label} | {_escape(l.question)} | {_num(l.mine.value)} | {_num(l.want_mine)} | "
                f"{'yes' if l.mine.cites() else 'no'} | {'yes' if l.mine.diagnosed else 'no'} | {'✓' if l.right else '✗'} | "
                f"{_num(l.control.value)} | {_num(l.want_default)} | {'✓' if l.control_right else '✗'} |"
            )
    unverified = [c for c in cases if not c.verified]
    if unverified:
        lines += ["", "Diagnoses not verified, with every hypothesis's result:", ""]
        for c in unverified:
            value = c.value
            baseline = _baseline_value(c.diagnosis)
            tests = []
            for label, output in _tests(c.diagnosis):
                same = output.get("executed") and baseline is not None and output.get("value") == baseline
                tests.append(
                    f"{label}: {output.get('result')} ({output.get('detail')}"
                    + ("; the same value as the original query: an execution spent on a repair that changes nothing here" if same else "")
                    + ")"
                )
            lines.append(
                f"- {c.user} 「{c.case.question}」 ({c.case.variant.label}, memtool {_num(baseline)}, expected {_num(c.wanted)}): status "
                f"{(c.diagnosis or {}).get('status')}, {value.get('executions')}/{value.get('budget')} executions (the baseline re-run "
                f"counts), queue drained {c.drained}, diagnoses on the episode {c.diagnoses_seen}. " + "; ".join(tests)
            )
    return "\n".join(lines) + "\n", figures


# ---- main ---------------------------------------------------------------------------------------------


def build_warehouses(home: Path, scale: float) -> tuple[Path, Path, int]:
    from memtool.sql.demo_warehouse import build_demo_warehouse

    normal, drifted = home / "warehouse" / "demo.duckdb", home / "warehouse" / "demo-drift.duckdb"
    summary = build_demo_warehouse(normal, seed=WAREHOUSE_SEED, scale=scale, anchor=TODAY)
    build_demo_warehouse(drifted, seed=WAREHOUSE_SEED, scale=scale, anchor=TODAY, drift=True)
    return normal, drifted, sum(summary.row_counts.values())


def serve(home: Path, warehouse: Path, scale: float) -> tuple[Any, int]:
    port = _free_port()
    env = {
        "MEMTOOL_WAREHOUSE_PATH": str(warehouse),
        "MEMTOOL_WAREHOUSE_SCALE": str(scale),
        "MEMTOOL_TODAY": TODAY.isoformat(),
    }
    print(f"starting memtool serve on port {port} over {warehouse.name} (home {home}) …", flush=True)
    return start_server(home, port, env), port


def stop(server: Any) -> None:
    server.terminate()
    server.wait(timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.2, help="demo warehouse scale")
    parser.add_argument("--seed", type=int, default=7, help="the bench's own RNG: the order of the drift questions and of the cases")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "diagnosis_eval.md")
    parser.add_argument("--keep-home", action="store_true", help="keep the temp home (stores, warehouses) for a look afterwards")
    args = parser.parse_args()
    command = shlex.join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])

    started = time.perf_counter()
    phase: dict[str, float] = {}
    home = Path(tempfile.mkdtemp(prefix="memtool-diagnosis-"))
    rng = random.Random(args.seed)
    try:
        print(f"building the demo warehouse and its drifted twin (scale {args.scale}) …", flush=True)
        normal, drifted, warehouse_rows = build_warehouses(home, args.scale)
        truth = Truth(normal)

        server, port = serve(home / "normal-server", normal, args.scale)
        try:
            print("preflight: the drift-stream questions on the normal warehouse …", flush=True)
            problems = preflight(Client(port, PREFLIGHT_TENANT))
            for question, why in problems:
                print(f"  did not answer: {question}: {why}", flush=True)
            print(f"expected-value stream: {len(CASES)} cases …", flush=True)
            t = time.perf_counter()
            cases = expected_stream(Client(port, EXPECTED_TENANT), truth, rng)
            phase["expected"] = time.perf_counter() - t
        finally:
            stop(server)

        server, port = serve(home / "drift-server", drifted, args.scale)
        try:
            print(f"drift stream: 1 + {len(DRIFT_FOLLOWING)} questions, then a second and a third user …", flush=True)
            t = time.perf_counter()
            drift = drift_stream(Client(port, DRIFT_TENANT), truth, rng)
            phase["drift"] = time.perf_counter() - t
        finally:
            stop(server)
    finally:
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)

    text, figures = report(args, command, warehouse_rows, problems, drift, cases, time.perf_counter() - started, phase)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print("\ndiagnosis eval (by value against memtool's compiler on the normal warehouse)")
    for figure in figures:
        print(figure)
    print(f"report: {args.out} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
