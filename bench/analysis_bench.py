"""The deep-analysis route, measured: not a test, a measurement.

1. **Questions.** The issue's analysis questions through POST /ask in-process (the real handler,
   AskFlow on moto's Step Functions engine with its Map over the analysis functions' handlers,
   the local process sandbox, the ML tools, DuckDB demo warehouse at ``--scale``): what each found
   (the planted 2026-06 refund spike of 盐酸氨溴索口服溶液 and the 2026-09 drop in 武汉), which
   runner ran it, and the latency split (PlanAnalyses, Summarize, the rest of the flow).
2. **Runners.** One anomaly table (24 months) through the code interpreter in the local process
   sandbox and through ``ml_anomaly`` in-process, ``--runs`` times each: p50 of both and their
   ratio (the sandbox's cost is a fresh interpreter with numpy, pandas and matplotlib per run).

    python bench/analysis_bench.py [--scale 1.0] [--runs 10] [--out bench/results/analysis_bench.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    ("上海医院渠道最近三个月的净收入有没有异常？", "no anomaly in 2026-08..10"),
    ("2026年6月退款为什么异常高", "names 2026-06, 盐酸氨溴索口服溶液, 质量问题"),
    ("预测下季度各区域的销量", "intervals and a backtest MAPE per region"),
    ("为什么9月武汉的净收入下降了", "attribution summing to the change"),
    ("武汉最近一年的净收入有没有异常", "flags 2026-09"),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "analysis_bench.md"))
    parser.add_argument("--only", type=int, default=None, help="ask only the question with this index (debugging)")
    args = parser.parse_args()

    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
    os.environ["POWERTOOLS_LOG_LEVEL"] = "CRITICAL"
    sys.path.insert(0, str(ROOT))
    from moto import mock_aws

    from memtool.runtime import container
    from memtool.runtime.aws import client
    from memtool.runtime.local_api import LocalApiGateway
    from memtool.settings import Settings, use_settings
    from memtool.runtime.tables import create_tables
    from memtool.runtime.template import load_template
    from memtool.sql.demo_warehouse import build_demo_warehouse

    today = date(2026, 11, 29)
    work = Path(tempfile.mkdtemp(prefix="memtool-analysis-bench-"))
    summary = build_demo_warehouse(work / "demo.duckdb", scale=args.scale, anchor=today)
    template = load_template(ROOT / "template.yaml")
    settings = Settings(
        runtime="local", home=work / "home", today=today, warehouse_path=summary.path,
        aws_access_key_id="bench", aws_secret_access_key="bench",
    )  # fmt: skip
    rows: list[str] = []
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        use_settings(settings)
        create_tables(client("dynamodb", settings), settings, template)
        gateway = LocalApiGateway(template, ROOT)
        headers = {"X-Memtool-Tenant": "bench", "X-Memtool-User": "analyst", "Content-Type": "application/json"}

        def ask(question: str) -> dict:
            return gateway.invoke("POST", "/ask", headers=headers, body=json.dumps({"question": question})).json()

        if args.only is None:
            ask(QUESTIONS[0][0])  # warm-up: imports, the first sandbox, the state machine
        for question, expected in QUESTIONS if args.only is None else [QUESTIONS[args.only]]:
            answer = ask(question)
            analysis = answer.get("analysis") or {}
            runs = ", ".join(f"{a['kind']}→{a['tool']}{'' if a.get('success') else ' (failed)'}" for a in analysis.get("analyses") or [])
            timings = answer["timings"]
            summary_text = (analysis.get("summary") or "").replace("\n", " ").replace("|", "/")
            if answer["status"] != "answered":  # say why, in the table
                summary_text = f"{summary_text} notes: {'; '.join(answer['notes'])}".strip()
            rows.append(
                f"| {question} | {answer['status']} | {runs} | {timings.get('PlanAnalyses', 0):.0f} | {timings.get('Summarize', 0):.0f} "
                f"| {timings['total']:.0f} | {expected} | {summary_text[:260]}{'…' if len(summary_text) > 260 else ''} |"
            )

        # 2. the same table through both runners
        executor = container.tool_executor()
        table = [[f"{2025 + (m - 1) // 12}-{(m - 1) % 12 + 1:02d}", 1000.0 + 15 * ((m * 7) % 5)] for m in range(1, 25)]
        table[17][1] = 4000.0
        params = {"label_column": "month", "value_column": "value", "series_name": "value", "period": 12}
        timings_of: dict[str, list[float]] = {"code_interpreter": [], "ml_anomaly": []}
        found: dict[str, list[str]] = {}
        for _ in range(args.runs):
            for tool, arguments in (
                ("code_interpreter", {"analysis": "anomaly", "columns": ["month", "value"], "rows": table, "params": params, "return_files": False}),
                ("ml_anomaly", {"columns": ["month", "value"], "rows": table, **params}),
            ):
                started = time.perf_counter()
                result = executor.call(tool, arguments)
                timings_of[tool].append((time.perf_counter() - started) * 1000)
                data = result.data or {}
                found[tool] = (data.get("result") or data).get("anomalies", []) if result.success else [f"failed: {result.error}"]
        container.reset()
        use_settings(None)

    sandbox_p50, ml_p50 = percentile(timings_of["code_interpreter"], 0.5), percentile(timings_of["ml_anomaly"], 0.5)
    lines = [
        "# The deep-analysis route",
        "",
        f"Generated by `python bench/analysis_bench.py --scale {args.scale} --runs {args.runs}` on {time.strftime('%Y-%m-%d %H:%M')}.",
        f"Machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, Python {platform.python_version()}.",
        f"Demo warehouse at scale {args.scale} ({summary.row_counts.get('fact_order_line', 0):,} order lines); in-process AskFlow on moto,",
        "the analysis functions' handlers dispatched in-process, the local process sandbox, the ML tools.",
        "",
        "## Questions",
        "",
        "| question | status | analyses (kind→tool) | PlanAnalyses ms | Summarize ms | total ms | expected | summary |",
        "|---|---|---|---:|---:|---:|---|---|",
        *rows,
        "",
        "## The same 24-month table through each runner",
        "",
        "| runner | runs | p50 ms | p95 ms | anomalies found |",
        "|---|---:|---:|---:|---|",
        f"| code_interpreter (local process sandbox) | {args.runs} | {sandbox_p50:.0f} | {percentile(timings_of['code_interpreter'], 0.95):.0f} | {', '.join(found['code_interpreter'])} |",
        f"| ml_anomaly (in-process, robust z + IsolationForest) | {args.runs} | {ml_p50:.0f} | {percentile(timings_of['ml_anomaly'], 0.95):.0f} | {', '.join(found['ml_anomaly'])} |",
        "",
        f"The sandbox costs {sandbox_p50 / ml_p50:.1f}× the in-process tool at p50 (a fresh, isolated interpreter per run).",
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
