"""Recall benchmark: EmbeddedIndex against exact brute force and ChromaDB on the same memories.

Not a test. It generates a deterministic corpus of memory-like texts (Chinese and English),
embeds them once with HashingEmbedder(256) (embedding time is excluded from every query
timing), loads them into EmbeddedIndex and into an embedded ChromaDB collection, and measures
per size: build time, knn and hybrid latency (p50/p95 after a warm-up, time.perf_counter),
recall@10 against exact filtered brute force, and process RSS.

    python bench/recall_bench.py [--sizes 1000,10000,100000] [--queries 200] [--out bench/results/recall.md]

ChromaDB is the optional ``bench`` extra (``pip install chromadb``); without it the Chroma
columns say so and the rest still runs.
"""

from __future__ import annotations

import argparse
import gc
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memtool.retrieval.embedded_index import EmbeddedIndex
from memtool.retrieval.embedders import HashingEmbedder
from memtool.retrieval.index import IndexDocument, IndexFilter, IndexQuery

TENANT = "acme"
TENANT_OWNER = "_tenant"  # the store's owner for tenant-wide memories
K = 10
EMBEDDER = HashingEmbedder(256)

# ---- the synthetic corpus ---------------------------------------------------------------

METRICS = [
    ("净收入", "net revenue", "sum(net_amount)"),
    ("销售额", "sales", "sum(gross_amount)"),
    ("退款率", "refund rate", "sum(refund_amount)/sum(gross_amount)"),
    ("毛利率", "gross margin", "(sum(net_amount)-sum(cost))/sum(net_amount)"),
    ("订单量", "order count", "count(distinct order_id)"),
    ("客单价", "average order value", "sum(net_amount)/count(distinct order_id)"),
    ("复购率", "repurchase rate", "count(repeat_buyer)/count(buyer)"),
    ("活跃用户", "active users", "count(distinct user_id)"),
    ("转化率", "conversion rate", "count(order_id)/count(session_id)"),
    ("广告花费", "ad spend", "sum(ad_cost)"),
    ("库存周转", "inventory turnover", "sum(cogs)/avg(inventory_value)"),
    ("退货量", "return count", "count(return_id)"),
]
CITIES = [
    ("上海", "shanghai", "华东"), ("北京", "beijing", "华北"), ("广州", "guangzhou", "华南"),
    ("深圳", "shenzhen", "华南"), ("杭州", "hangzhou", "华东"), ("成都", "chengdu", "西南"),
    ("武汉", "wuhan", "华中"), ("南京", "nanjing", "华东"), ("西安", "xian", "西北"),
    ("重庆", "chongqing", "西南"), ("天津", "tianjin", "华北"), ("苏州", "suzhou", "华东"),
]
CHANNELS = [
    ("天猫", "tmall"), ("京东", "jd"), ("抖音", "douyin"), ("线下门店", "offline stores"),
    ("小程序", "mini program"), ("官网", "web store"), ("批发", "wholesale"),
]
UNITS = [("元", "yuan"), ("万元", "ten thousand yuan"), ("百万元", "million yuan")]
CHARTS = [("折线图", "line chart"), ("柱状图", "bar chart"), ("饼图", "pie chart"), ("表格", "table")]
PERIODS = [("上月", "last month"), ("本季度", "this quarter"), ("上周", "last week"), ("今年", "this year")]
EXCLUSIONS = [("运费", "shipping fees"), ("优惠券", "coupons"), ("测试订单", "test orders"), ("退款", "refunds")]


def _month(rng: random.Random) -> str:
    return f"{rng.randint(2023, 2026)}-{rng.randint(1, 12):02d}"


def _profile(rng: random.Random) -> str:
    metric, city, channel = rng.choice(METRICS), rng.choice(CITIES), rng.choice(CHANNELS)
    unit, chart = rng.choice(UNITS), rng.choice(CHARTS)
    return rng.choice([
        f"以后默认用{unit[0]}显示{metric[0]}",
        f"prefers {metric[1]} in {unit[1]}, shown as a {chart[1]}",
        f"常看{city[0]}{channel[0]}的{metric[0]}，喜欢{chart[0]}",
        f"favourite metric: {metric[1]} for {city[1]} by channel",
        f"负责{city[2]}区域，关注{metric[0]}和{rng.choice(METRICS)[0]}",
        f"display.currency_unit = {unit[1]}; {metric[1]} rounded to {rng.randint(0, 2)} decimals",
    ])


def _episodic(rng: random.Random) -> str:
    metric, city, channel, period = rng.choice(METRICS), rng.choice(CITIES), rng.choice(CHANNELS), rng.choice(PERIODS)
    month = _month(rng)
    outcome = rng.choice(["成功，用户点赞", "成功", "失败：列名错误，已修复", "user copied the answer", "abandoned"])
    return rng.choice([
        f"问：{period[0]}{city[0]}{channel[0]}{metric[0]}是多少 → SELECT {metric[2]} FROM sales "
        f"WHERE city = '{city[1]}' AND channel = '{channel[1]}' AND month = '{month}' → {outcome}",
        f"asked {metric[1]} by channel in {city[1]} for {month}; route nl2sql_query; "
        f"{rng.randint(3, 40)} rows; {outcome}",
        f"{month}{city[2]}各渠道{metric[0]}对比，{channel[0]}最高，约{rng.randint(10, 9999)}{rng.choice(UNITS)[0]}",
        f"deep analysis: {metric[1]} anomaly in {city[1]} {channel[1]} around {month}, "
        f"cause {rng.choice(EXCLUSIONS)[1]}",
    ])


def _correction(rng: random.Random) -> str:
    metric, other, city, excl = rng.choice(METRICS), rng.choice(METRICS), rng.choice(CITIES), rng.choice(EXCLUSIONS)
    return rng.choice([
        f"“{metric[0][:2]}”指的是{metric[0]}（{metric[2]}），不是{other[0]}",
        f"{metric[1]} should exclude {excl[1]}",
        f"修正：{city[0]}的{metric[0]}要扣除{excl[0]}",
        f"column {metric[1].replace(' ', '_')} is named {metric[2].split('(')[-1].rstrip(')')} in table sales_{city[1]}",
        f"'{city[1]}' means city code {rng.randint(100, 999)} in the dim_city table",
    ])


def _knowledge(rng: random.Random) -> str:
    metric = rng.choice(METRICS)
    return rng.choice([
        f"{metric[0]}定义：{metric[2]}，口径版本v{rng.randint(1, 9)}",
        f"{metric[1]} is defined as {metric[2]} since {_month(rng)}",
        f"业务规则：{rng.choice(CHANNELS)[0]}订单在签收后{rng.randint(3, 15)}天计入{metric[0]}",
    ])


def _fewshot(rng: random.Random) -> str:
    metric, city, period = rng.choice(METRICS), rng.choice(CITIES), rng.choice(PERIODS)
    return (
        f"Q: {period[1]} {metric[1]} in {city[1]} / {period[0]}{city[0]}{metric[0]} "
        f"SQL: SELECT {metric[2]} FROM sales WHERE city = '{city[1]}'"
    )


def _working(rng: random.Random) -> str:
    return rng.choice([f"这次用{rng.choice(UNITS)[0]}", f"this time only {rng.choice(CHANNELS)[1]}", "这次不含退款"])


USER_KINDS = [("profile", _profile, 0.2), ("episodic", _episodic, 0.55), ("correction", _correction, 0.15),
              ("working", _working, 0.1)]
SHARED_KINDS = [("knowledge", _knowledge, 0.45), ("fewshot", _fewshot, 0.25), ("correction", _correction, 0.3)]
SHARED_SHARE = 0.2  # of all memories: tenant-wide knowledge, few-shots and shared corrections
USERS = 20  # the rest is split among users with Zipf-like weights (a few heavy users)
# What recall asks for, per route (kinds with a budget), as in DESIGN §4.
ROUTE_KINDS = [
    ("profile", "episodic", "correction"),
    ("profile", "correction"),
    ("profile", "episodic", "correction", "knowledge"),
]
LIVE = ("active", "approved")


@dataclass(frozen=True)
class Memory:
    memory_id: str
    owner: str
    kind: str
    status: str
    text: str


def user_weights() -> list[float]:
    raw = [1.0 / (rank ** 0.8) for rank in range(1, USERS + 1)]
    return [w / sum(raw) for w in raw]


def corpus(size: int, seed: int = 7) -> list[Memory]:
    rng = random.Random(seed)
    users = [f"u{i:03d}" for i in range(USERS)]
    weights = user_weights()
    out = []
    for i in range(size):
        if rng.random() < SHARED_SHARE:
            owner = TENANT_OWNER
            kind, make, _ = rng.choices(SHARED_KINDS, weights=[w for *_, w in SHARED_KINDS])[0]
        else:
            owner = rng.choices(users, weights=weights)[0]
            kind, make, _ = rng.choices(USER_KINDS, weights=[w for *_, w in USER_KINDS])[0]
        status = rng.choices(["active", "approved", "superseded", "archived"], weights=[0.8, 0.08, 0.08, 0.04])[0]
        # A ticket-like suffix keeps texts distinct, as real memories are.
        text = f"{make(rng)} #{rng.randint(1, 10**6)}"
        out.append(Memory(f"m{i:07d}", owner, kind, status, text))
    return out


def query_texts(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    makers = [_episodic, _profile, _correction, _knowledge]
    questions = []
    for _ in range(count):
        metric, city, channel, period = rng.choice(METRICS), rng.choice(CITIES), rng.choice(CHANNELS), rng.choice(PERIODS)
        questions.append(rng.choice([
            f"{period[0]}{city[0]}{channel[0]}{metric[0]}",
            f"{period[1]} {metric[1]} by channel in {city[1]}",
            f"{city[0]}各渠道{metric[0]}",
            rng.choice(makers)(rng),
        ]))
    return questions


# ---- the workload -------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    memories: list[Memory]
    vectors: np.ndarray  # unit float32 rows, one per memory (embedded once, outside every timing)
    queries: list[IndexQuery]  # k = K, filtered by tenant + owners + kinds + statuses as recall does
    unfiltered: list[IndexQuery]  # the same questions with a filter every memory passes (context only)

    def allowed(self, size: int, flt: IndexFilter) -> np.ndarray:
        """Which of the first ``size`` memories pass a filter (the exact reference's mask)."""
        owners, kinds, statuses = set(flt.owners), set(flt.kinds or ()), set(flt.statuses or ())
        return np.fromiter(
            (m.owner in owners and m.kind in kinds and m.status in statuses for m in self.memories[:size]),
            dtype=bool,
            count=size,
        )


def workload(size: int, count: int) -> Workload:
    memories = corpus(size)
    vectors = np.empty((size, EMBEDDER.dimension), dtype=np.float32)
    for start in range(0, size, 1000):  # in chunks, so the embedder's float lists never pile up
        vectors[start : start + 1000] = EMBEDDER.embed([m.text for m in memories[start : start + 1000]])
    texts = query_texts(count)
    query_vectors = EMBEDDER.embed(texts)
    rng = random.Random(13)
    users, weights = [f"u{i:03d}" for i in range(USERS)], user_weights()
    queries = [
        IndexQuery(
            filter=IndexFilter(
                tenant=TENANT,
                owners=(rng.choices(users, weights=weights)[0], TENANT_OWNER),  # busy users ask more
                embedder=EMBEDDER.id,
                kinds=rng.choice(ROUTE_KINDS),
                statuses=LIVE,
            ),
            k=K,
            text=text,
            vector=vector,
        )
        for text, vector in zip(texts, query_vectors, strict=True)
    ]
    everything = IndexFilter(
        tenant=TENANT,
        owners=(TENANT_OWNER, *users),
        embedder=EMBEDDER.id,
        kinds=tuple({kind for kind, *_ in USER_KINDS + SHARED_KINDS}),
        statuses=("active", "approved", "superseded", "archived"),
    )
    unfiltered = [IndexQuery(filter=everything, k=K, text=q.text, vector=q.vector) for q in queries]
    return Workload(memories, vectors, queries, unfiltered)


def documents(work: Workload, size: int) -> list[IndexDocument]:
    return [
        IndexDocument(
            memory_id=m.memory_id,
            version=1,
            tenant=TENANT,
            owner=m.owner,
            kind=m.kind,
            status=m.status,
            scope="tenant" if m.owner == TENANT_OWNER else "user",
            text=m.text,
            vector=work.vectors[i],
            embedder=EMBEDDER.id,
        )
        for i, m in enumerate(work.memories[:size])
    ]


# ---- measuring ----------------------------------------------------------------------------


@dataclass
class Measured:
    engine: str
    mode: str
    filtered: bool
    build_seconds: float | None = None
    rss_growth_mb: float | None = None
    knn: tuple[float, float] | None = None  # p50, p95 in ms
    hybrid: tuple[float, float] | None = None
    knn_recall: float | None = None
    hybrid_recall: float | None = None


def settle() -> None:
    """Collect garbage and hand freed heap back to the OS, so RSS deltas measure what stays."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(run: Callable[[IndexQuery], object], queries: Sequence[IndexQuery], warmup: int = 20) -> tuple[tuple[float, float], list]:
    for q in queries[:warmup]:
        run(q)
    results, seconds = [], []
    for q in queries:
        start = time.perf_counter()
        results.append(run(q))
        seconds.append(time.perf_counter() - start)
    ms = np.asarray(seconds) * 1000
    return (float(np.percentile(ms, 50)), float(np.percentile(ms, 95))), results


class Reference:
    """Exact filtered brute force in numpy, independent of the index: the recall yardstick."""

    def __init__(self, work: Workload, size: int) -> None:
        self.work, self.size = work, size
        self.matrix = work.vectors[:size]
        self.ids = [m.memory_id for m in work.memories[:size]]
        self.position = {memory_id: i for i, memory_id in enumerate(self.ids)}

    def scores(self, q: IndexQuery) -> np.ndarray:
        vector = np.asarray(q.vector, dtype=np.float32)
        scores = self.matrix @ (vector / np.linalg.norm(vector))
        scores[~self.work.allowed(self.size, q.filter)] = -np.inf
        return scores

    def top(self, q: IndexQuery, k: int) -> list[str]:
        scores = self.scores(q)
        k = min(k, int(np.isfinite(scores).sum()))
        best = np.argpartition(-scores, k - 1)[:k] if k else np.empty(0, dtype=np.int64)
        return [self.ids[i] for i in best[np.argsort(-scores[best], kind="stable")]]

    def recall(self, q: IndexQuery, found: Sequence[str], k: int = K) -> float:
        """Share of the true top-k found; a hit tied with the k-th true score counts as true."""
        scores = self.scores(q)
        passing = int(np.isfinite(scores).sum())
        if not passing:
            return 1.0
        want = min(k, passing)
        cut = np.partition(scores, len(scores) - want)[len(scores) - want] - 1e-6
        good = sum(1 for memory_id in found[:k] if scores[self.position[memory_id]] >= cut)
        return good / want


def measure_ours(work: Workload, size: int, reference: Reference, folder: Path, batch: int) -> list[Measured]:
    settle()
    before = rss_mb()
    docs = documents(work, size)
    start = time.perf_counter()
    index = EmbeddedIndex(folder)
    index.ensure()
    for offset in range(0, size, batch):  # as the indexer would: batches off the stream
        index.upsert(docs[offset : offset + batch])
    build = time.perf_counter() - start
    del docs
    settle()
    grown = rss_mb() - before
    stats = next(iter(index.stats().values()))
    mode = f"IVF, {stats['lists']} lists" if stats["approximate"] else "exact"

    knn_latency, knn_hits = timed(index.knn, work.queries)
    hybrid_latency, hybrid_hits = timed(index.hybrid, work.queries)
    exact_latency, exact_hits = timed(index.exact_knn, work.queries)
    exact_hybrid_latency, exact_hybrid_hits = timed(index.exact_hybrid, work.queries)
    open_latency, open_hits = timed(index.knn, work.unfiltered)
    open_recall = statistics.fmean(
        reference.recall(q, [h.memory_id for h in hits]) for q, hits in zip(work.unfiltered, open_hits, strict=True)
    )

    knn_recall = statistics.fmean(
        reference.recall(q, [h.memory_id for h in hits]) for q, hits in zip(work.queries, knn_hits, strict=True)
    )
    exact_recall = statistics.fmean(
        reference.recall(q, [h.memory_id for h in hits]) for q, hits in zip(work.queries, exact_hits, strict=True)
    )
    hybrid_recall = statistics.fmean(
        len({h.memory_id for h in hits} & {h.memory_id for h in exact}) / max(1, len(exact))
        for hits, exact in zip(hybrid_hits, exact_hybrid_hits, strict=True)
    )
    index.close()
    return [
        Measured("EmbeddedIndex", mode, True, build, grown, knn_latency, hybrid_latency, knn_recall, hybrid_recall),
        Measured("EmbeddedIndex", "exact path (brute force)", True, None, None, exact_latency, exact_hybrid_latency, exact_recall, 1.0),
        Measured("EmbeddedIndex", mode, False, None, None, open_latency, None, open_recall),
    ]


def measure_chroma(work: Workload, size: int, reference: Reference, folder: Path) -> list[Measured] | str:
    try:
        import chromadb
    except ImportError:
        return "chromadb is not installed (pip install chromadb, or the bench extra)"
    settle()
    before = rss_mb()
    start = time.perf_counter()
    client = chromadb.PersistentClient(path=str(folder))
    collection = client.create_collection(
        name=f"memories_{size}", metadata={"hnsw:space": "cosine"}, embedding_function=None
    )
    step = client.get_max_batch_size()
    for offset in range(0, size, step):
        members = work.memories[offset : min(size, offset + step)]
        collection.add(
            ids=[m.memory_id for m in members],
            embeddings=work.vectors[offset : offset + len(members)],
            metadatas=[{"tenant": TENANT, "owner": m.owner, "kind": m.kind, "status": m.status} for m in members],
            documents=[m.text for m in members],
        )
    build = time.perf_counter() - start
    settle()
    grown = rss_mb() - before

    def where(flt: IndexFilter) -> dict:
        return {
            "$and": [
                {"tenant": flt.tenant},
                {"owner": {"$in": list(flt.owners)}},
                {"kind": {"$in": list(flt.kinds or ())}},
                {"status": {"$in": list(flt.statuses or ())}},
            ]
        }

    def knn(q: IndexQuery, filtered: bool = True) -> list[str]:
        found = collection.query(
            query_embeddings=[np.asarray(q.vector, dtype=np.float32)],
            n_results=q.k,
            where=where(q.filter) if filtered else None,
            include=["distances"],
        )
        return found["ids"][0]

    latency, hits = timed(knn, work.queries)
    recall = statistics.fmean(reference.recall(q, ids) for q, ids in zip(work.queries, hits, strict=True))
    open_latency, open_hits = timed(lambda q: knn(q, filtered=False), work.unfiltered)
    open_recall = statistics.fmean(reference.recall(q, ids) for q, ids in zip(work.unfiltered, open_hits, strict=True))
    del collection, client
    mode = f"HNSW cosine, chromadb {chromadb.__version__}"
    return [
        Measured("ChromaDB", mode, True, build, grown, latency, None, recall),
        Measured("ChromaDB", mode + ", no `where`", False, None, None, open_latency, None, open_recall),
    ]


# ---- reporting ----------------------------------------------------------------------------


def machine() -> dict[str, str]:
    import os

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import chromadb

        chroma = chromadb.__version__
    except ImportError:
        chroma = "not installed"
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "chromadb": chroma,
        "platform": platform.platform(),
    }


def fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def render(rows: list[tuple[int, float, list[Measured], list[Measured] | str]], info: dict[str, str], args: argparse.Namespace) -> str:
    lines = [
        "# Recall benchmark: EmbeddedIndex vs exact brute force vs ChromaDB",
        "",
        f"Generated by `python bench/recall_bench.py --sizes {args.sizes} --queries {args.queries}` "
        f"on {time.strftime('%Y-%m-%d %H:%M')}.",
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in info.items()),
        "",
        "Workload: one tenant holding N synthetic memories (Chinese and English templates: metrics,",
        f"cities, channels, months, preferences, corrections), {int(SHARED_SHARE * 100)}% tenant-wide, the rest split",
        f"over {USERS} users (Zipf-like); embedded with HashingEmbedder(256), once, outside every timing.",
        f"{args.queries} queries, k={K}, filtered like recall filters: tenant, owners = (a user, `_tenant`),",
        "the kinds of a route's budget, statuses active/approved (\"filter\" gives the mean share of the",
        "tenant's memories that pass). Latency is per query, one thread, after 20 warm-up queries",
        "(time.perf_counter); knn and hybrid exclude embedding but include tokenizing the question for",
        "BM25. Recall@10 is against exact filtered brute force in numpy (a hit tied with the 10th true",
        "cosine counts); hybrid recall is the overlap with the same fusion over exact k-NN (the exact",
        "path's hybrid row).",
        "ChromaDB gets the same ids, vectors and metadata (PersistentClient in a temp dir, `hnsw:space`",
        "cosine, embedding_function=None) and a `where` on tenant/owner/kind/status; its embedded client",
        "has no BM25 hybrid, so its hybrid columns are empty. Rows with filter \"none\" are context only:",
        "the same questions with no filter (Chroma without `where`), which recall never sends.",
        "RSS growth: the process's resident memory after the build minus before it.",
        "",
        "| N | engine | mode | filter | build s | RSS growth MB | knn p50 ms | knn p95 ms | hybrid p50 ms "
        "| hybrid p95 ms | recall@10 knn | recall@10 hybrid |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = []
    for size, passing, ours, chroma in rows:
        entries = list(ours) + (list(chroma) if isinstance(chroma, list) else [])
        for m in sorted(entries, key=lambda m: not m.filtered):
            p50, p95 = m.knn if m.knn else (None, None)
            h50, h95 = m.hybrid if m.hybrid else (None, None)
            lines.append(
                f"| {size:,} | {m.engine} | {m.mode} | {f'{passing:.1%}' if m.filtered else 'none'} "
                f"| {fmt(m.build_seconds, 1)} | {fmt(m.rss_growth_mb, 0)} | {fmt(p50)} | {fmt(p95)} "
                f"| {fmt(h50)} | {fmt(h95)} | {fmt(m.knn_recall, 3)} | {fmt(m.hybrid_recall, 3)} |"
            )
        if isinstance(chroma, str):
            lines.append(f"| {size:,} | ChromaDB | {chroma} | | | | | | | | | |")
            continue
        for label, mine, theirs in (("recall filter", ours[0], chroma[0]), ("none", ours[2], chroma[1])):
            if not (mine.knn and theirs.knn):
                continue
            build = f"{theirs.build_seconds / mine.build_seconds:.1f}x" if mine.build_seconds and theirs.build_seconds else ""
            ratios.append(
                f"| {size:,} | {label} | {theirs.knn[1] / mine.knn[1]:.1f}x | {theirs.knn[0] / mine.knn[0]:.1f}x "
                f"| {fmt(mine.knn_recall, 3)} / {fmt(theirs.knn_recall, 3)} | {build} |"
            )
    if ratios:
        lines += [
            "",
            "Side by side, knn on the same questions (ours = the EmbeddedIndex row in its default mode):",
            "",
            "| N | filter | Chroma p95 / ours p95 | Chroma p50 / ours p50 | recall@10 ours / Chroma | Chroma build / ours build |",
            "|---:|---|---:|---:|---:|---:|",
            *ratios,
        ]
    lines += ["", f"Peak process RSS over the whole run (both engines, corpus and vectors): {peak_rss_mb():.0f} MB.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "recall.md")
    parser.add_argument("--batch", type=int, default=2000, help="documents per upsert while building")
    parser.add_argument("--no-chroma", action="store_true")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))

    print(f"embedding {max(sizes):,} memories and {args.queries} questions (not timed) ...", file=sys.stderr)
    work = workload(max(sizes), args.queries)
    rows = []
    for size in sizes:
        reference = Reference(work, size)
        passing = statistics.fmean(float(work.allowed(size, q.filter).mean()) for q in work.queries)
        scratch = Path(tempfile.mkdtemp(prefix="recall-bench-"))
        try:
            print(f"N={size:,}: EmbeddedIndex ...", file=sys.stderr)
            ours = measure_ours(work, size, reference, scratch / "embedded", args.batch)
            chroma: list[Measured] | str = "skipped (--no-chroma)"
            if not args.no_chroma:
                print(f"N={size:,}: ChromaDB ...", file=sys.stderr)
                chroma = measure_chroma(work, size, reference, scratch / "chroma")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        rows.append((size, passing, ours, chroma))
    report = render(rows, machine(), args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
