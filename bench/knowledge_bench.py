"""Governed knowledge, in-process (docs/knowledge.md): source writes and paged reads, and pre-fill's
reading speed on large ETL files.

Measured on the local adapters (SQLite metadata, file bodies) in a temporary folder:
- POST-equivalent ``SourceLibrary.put`` of a 2 MiB multi-byte document, then a changed one (v2);
- reading it whole in 16,000-character pages, cold (first read decodes the body) and warm
  (the library keeps decoded texts), as pages per second;
- ``prefill.suggest`` on ETL files of 50 to 2,000 INSERT … SELECT statements: statements read per
  second, and where the task's reading time (``READ_SECONDS``) or its 300-suggestion cap stops it.

Run: ``python bench/knowledge_bench.py [--out bench/results/knowledge.md]``.
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from memtool.clock import FrozenClock
from memtool.identity import Identity
from memtool.knowledge.bodies import FileSourceBodies
from memtool.knowledge.prefill import READ_SECONDS, SourceText, suggest
from memtool.knowledge.sources import READ_MAX_CHARS, SOURCE_MAX_BYTES, SourceKind, SourceLibrary
from memtool.memory.sqlite_store import SQLiteMemoryStore

PARAGRAPH = "退款政策：签收后30天内可全额退款 🧾；ETL 口径 = gross − discount − refund。\n"


def statement(i: int) -> str:
    return (
        f"INSERT INTO mart.t_{i % 40} (day, amount) SELECT CAST(o.paid_at AS DATE) AS day, "
        f"SUM(o.gross_amount - o.discount_amount) AS amount FROM fact_order_line o JOIN dim_{i % 9} d ON d.id = o.d_id "
        f"WHERE o.is_test = FALSE AND o.k = {i} GROUP BY 1;\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "knowledge.md")
    args = parser.parse_args()
    lines = [
        "# Governed knowledge (in-process)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()}, Python {platform.python_version()}, "
        "SQLite metadata and file bodies in a temporary folder. Run: `python bench/knowledge_bench.py`.",
        "",
    ]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        library = SourceLibrary(SQLiteMemoryStore(root / "m.sqlite3"), FileSourceBodies(root / "sources"), FrozenClock(datetime.now(UTC)))
        curator = Identity(tenant="bench", user="mei", roles=frozenset({"curator"}))
        chars = SOURCE_MAX_BYTES // len(PARAGRAPH.encode("utf-8")) * len(PARAGRAPH)
        text = (PARAGRAPH * (chars // len(PARAGRAPH) + 1))[:chars]
        started = time.perf_counter()
        source = library.put(curator, "policy.md", SourceKind.DOCUMENT, text).source
        put_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        library.put(curator, "policy.md", SourceKind.DOCUMENT, text.replace("30天", "14天", 1))
        put2_ms = (time.perf_counter() - started) * 1000

        def read_all(version: int) -> tuple[float, int]:
            began, pages, offset = time.perf_counter(), 0, 0
            parts = []
            while offset is not None:
                page = library.read(curator, source.id, version=version, offset=offset, limit=READ_MAX_CHARS)
                parts.append(page.text)
                pages += 1
                offset = page.next_offset
            assert "".join(parts) == (text if version == 1 else text.replace("30天", "14天", 1))
            return time.perf_counter() - began, pages

        cold, pages = read_all(1)
        warm, _ = read_all(1)
        lines += [
            "## Sources",
            "",
            "| measure | value |",
            "|---|---|",
            f"| document | {len(text):,} characters, {len(text.encode('utf-8')):,} bytes of UTF-8 |",
            f"| put v1 / put v2 | {put_ms:.0f} ms / {put2_ms:.0f} ms |",
            f"| whole read in {READ_MAX_CHARS:,}-character pages | {pages} pages: cold {cold * 1000:.0f} ms "
            f"({pages / cold:,.0f} pages/s), warm {warm * 1000:.0f} ms ({pages / warm:,.0f} pages/s) |",
            f"| warm / cold | {warm / cold:.2f} |",
            "",
        ]
    lines += [
        "## Pre-fill reading ETL SQL",
        "",
        f"`suggest()` reads for at most `READ_SECONDS` = {READ_SECONDS:g} s and writes at most 300 suggestions a task.",
        "",
        "| statements | characters | read | suggestions | seconds | statements/s | stopped by |",
        "|---|---|---|---|---|---|---|",
    ]
    for count in (50, 150, 500, 2000):
        etl = "".join(statement(i) for i in range(count))
        began = time.perf_counter()
        found, gaps, read = suggest([SourceText("etl", 1, "etl.sql", "etl_sql", etl)])
        seconds = time.perf_counter() - began
        stopped = next((g.split(": ", 1)[1] for g in gaps if "etl.sql: read " in g or "not read to its end" in g), "the end")
        lines.append(
            f"| {count:,} | {len(etl):,} | {read['etl']:,} | {len(found)} | {seconds:.2f} | {read['etl'] / seconds:,.0f} | {stopped} |"
        )
    report = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
