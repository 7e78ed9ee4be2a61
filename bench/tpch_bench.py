"""Bring your own warehouse, measured on TPC-H: not a test, a measurement.

1. ``memtool seed-warehouse --dataset tpch`` at ``--scale`` (tpchgen-cli into DuckDB): wall time.
2. ``memtool model init`` on the fresh warehouse: wall time, and what it drafted.
3. ``memtool model validate`` of examples/tpch/model.yaml on it (every metric x dimension, LIMIT 0).
4. The 46 questions of tests/tpch_questions.py, planned by the rule planner from the curated model,
   run on DuckDB and compared by value with their hand-written SQL: accuracy per language, and
   plan and run time (p50, p95).
5. With ``--postgres URL``: the same warehouse copied into PostgreSQL, the same questions' SQL run
   there, rows compared with DuckDB's, and the run-time ratio PostgreSQL / DuckDB.

    python bench/tpch_bench.py [--scale 0.1] [--postgres postgresql://user@127.0.0.1:5432/db] [--out bench/results/tpch.md]
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "layers" / "core"))

from tests.integration.test_tpch_questions import same_in_any_group_order  # noqa: E402
from tests.tpch_questions import QUESTIONS  # noqa: E402

MODEL = ROOT / "examples" / "tpch" / "model.yaml"
TODAY = date(1998, 8, 3)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--postgres", help="a PostgreSQL URL to load TPC-H into and compare with (its tables are replaced)")
    parser.add_argument("--out", type=Path, help="write the report (Markdown) here too")
    args = parser.parse_args()

    import duckdb

    from memtool.datasets.tpch import build_tpch_warehouse
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.catalog import Catalog, load_catalog
    from memtool.semantic.entities import EntityIndex
    from memtool.semantic.introspect import draft_model, read_catalog_facts
    from memtool.semantic.validation import warehouse_problems
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    lines = [f"# TPC-H: bring your own warehouse (scale {args.scale})", ""]
    lines.append(f"Machine: {platform.machine()}, {platform.python_version()}, `python bench/tpch_bench.py --scale {args.scale}`"
                 + (" --postgres …" if args.postgres else ""))  # fmt: skip
    lines.append("")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tpch.duckdb"
        started = time.perf_counter()
        counts = build_tpch_warehouse(path, scale=args.scale)
        lines.append(f"- seed-warehouse: {sum(counts.values()):,} rows ({counts['lineitem']:,} line items) in {time.perf_counter() - started:.1f} s")
        reference_path = Path(folder) / "reference.duckdb"
        shutil.copyfile(path, reference_path)
        warehouse = DuckDBWarehouse(path)

        started = time.perf_counter()
        draft = Catalog.model_validate(draft_model(read_catalog_facts(warehouse), name="tpch"))
        lines.append(f"- model init: {len(draft.tables)} tables, {len(draft.joins)} joins, {len(draft.metrics)} metrics, "
                     f"{len(draft.dimensions)} dimensions in {time.perf_counter() - started:.1f} s")  # fmt: skip

        model = load_catalog(MODEL)
        started = time.perf_counter()
        problems = warehouse_problems(model, warehouse)
        lines.append(f"- model validate (curated model, every metric x dimension, LIMIT 0): {len(problems)} problems "
                     f"in {time.perf_counter() - started:.1f} s")  # fmt: skip

        started = time.perf_counter()
        planner = RulePlanner(model, EntityIndex.from_warehouse(warehouse, model), today=TODAY)
        lines.append(f"- planner built (entity values read from the warehouse) in {time.perf_counter() - started:.2f} s")
        reference = duckdb.connect(str(reference_path), read_only=True)
        plan_ms, run_ms, good = [], [], {"en": 0, "zh": 0}
        planned: list[tuple[str, str, list[list[object]], float]] = []
        misses = []
        for question in QUESTIONS:
            started = time.perf_counter()
            plan = planner.plan(question.question)
            plan_ms.append((time.perf_counter() - started) * 1000)
            if plan.status != "planned" or plan.sql is None:
                misses.append(f"{question.id}: {plan.status}")
                continue
            started = time.perf_counter()
            result = warehouse.run(plan.sql, max_rows=5000, timeout_seconds=60)
            elapsed = (time.perf_counter() - started) * 1000
            run_ms.append(elapsed)
            planned.append((question.id, plan.sql, result.rows, elapsed))
            expected = reference.execute(question.expected_sql).fetchall()
            if same_in_any_group_order(result.rows, expected, ordered=question.ordered):
                good[question.lang] += 1
            else:
                misses.append(f"{question.id}: rows differ")
        total = {lang: sum(1 for q in QUESTIONS if q.lang == lang) for lang in ("en", "zh")}
        accuracy = sum(good.values()) / len(QUESTIONS)
        lines += [
            "",
            "| questions | shapes | correct by value | English | Chinese | plan p50 / p95 | DuckDB run p50 / p95 |",
            "| --- | --- | --- | --- | --- | --- | --- |",
            f"| {len(QUESTIONS)} | {len({q.shape for q in QUESTIONS})} | {accuracy:.0%} | {good['en']}/{total['en']} | "
            f"{good['zh']}/{total['zh']} | {pct(plan_ms, 0.5):.1f} / {pct(plan_ms, 0.95):.1f} ms | "
            f"{pct(run_ms, 0.5):.1f} / {pct(run_ms, 0.95):.1f} ms |",
        ]
        if misses:
            lines += ["", "Not answered correctly: " + "; ".join(misses)]
        if args.postgres:
            from memtool.sql.postgres_load import copy_duckdb_into_postgres
            from memtool.sql.postgres_warehouse import PostgresWarehouse

            warehouse.close()
            started = time.perf_counter()
            copy_duckdb_into_postgres(reference_path, args.postgres)
            load_s = time.perf_counter() - started
            postgres = PostgresWarehouse.from_url(args.postgres)
            same, ratios = 0, []
            for qid, sql, rows, duck_ms in planned:
                started = time.perf_counter()
                theirs = postgres.run(sql, max_rows=5000, timeout_seconds=60)
                ratios.append(((time.perf_counter() - started) * 1000) / max(duck_ms, 0.01))
                question = next(q for q in QUESTIONS if q.id == qid)
                same += same_in_any_group_order(theirs.rows, [tuple(r) for r in rows], ordered=question.ordered)
            lines += [
                "",
                f"PostgreSQL: loaded in {load_s:.1f} s; {same}/{len(planned)} answers equal DuckDB's; "
                f"run time PostgreSQL / DuckDB p50 {statistics.median(ratios):.1f}x, p95 {pct(ratios, 0.95):.1f}x.",
            ]
        reference.close()
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    return 0 if accuracy >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
