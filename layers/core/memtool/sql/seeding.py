"""`memtool seed-warehouse`: build a dataset into a DuckDB file and, with --target, load it into PostgreSQL.

The demo dataset keeps its own file next to the local runtime's state (or MEMTOOL_WAREHOUSE_PATH);
TPC-H goes to ``<home>/warehouse/tpch.duckdb``. With ``--target`` and no ``--path`` the DuckDB
file is only a staging copy in a temporary folder, removed afterwards. Everything that can go
wrong in the user's hands (a file of the other kind, an unreachable server, a missing generator)
is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path

# --scale when none is given: the demo's 1.0 is about 300k order lines; TPC-H 0.1 about 600k lineitems.
DEFAULT_SCALES: dict[str, float] = {"demo": 1.0, "tpch": 0.1}
TPCH_FILE_NAME = "tpch.duckdb"

_PROG = "memtool seed-warehouse"


class SeedRefused(Exception):
    """A reason to stop that the user can act on; the command prints it as one line and exits 2."""


def seed_warehouse_command(args: argparse.Namespace) -> int:
    """Run the command for parsed arguments (see ``p_seed`` in memtool.cli); 0 on success, 2 when refused."""
    dataset: str = getattr(args, "dataset", None) or "demo"
    target: str | None = getattr(args, "target", None)
    scale = float(args.scale) if args.scale is not None else DEFAULT_SCALES[dataset]
    try:
        if dataset == "tpch" and args.drift:
            raise SeedRefused("--drift renames the demo dataset's tables; it does not apply to --dataset tpch")
        if target:
            _check_target(target)
        with _staging_folder(needed=bool(target) and not args.path) as staging:
            if dataset == "demo":
                path = _seed_demo(args, scale=scale, staging=staging)
            else:
                path = _seed_tpch(args, scale=scale, staging=staging)
            if target:
                _load_into_postgres(path, target)
    except SeedRefused as refused:
        print(f"{_PROG}: {refused}", file=sys.stderr)
        return 2
    return 0


# --------------------------------------------------------------------------- datasets


def _seed_demo(args: argparse.Namespace, *, scale: float, staging: Path | None) -> Path:
    from memtool.settings import Settings
    from memtool.sql.demo_warehouse import (
        DEMO_FILE_NAME,
        DRIFT_RENAMES,
        build_demo_warehouse,
        drifted_path,
        read_warehouse_summary,
    )

    settings = Settings(runtime="local")
    if args.path:
        path = Path(args.path)
    elif staging is not None:
        path = staging / DEMO_FILE_NAME
    else:
        normal_path = settings.warehouse_path or _home(args.home, settings.home) / "warehouse" / DEMO_FILE_NAME
        # The drifted file gets a name of its own so it never takes the place of the normal one.
        path = drifted_path(normal_path) if args.drift else normal_path
    existing = read_warehouse_summary(path) if path.exists() else None
    if existing is not None and existing.drift != args.drift:
        held, asked = ("drifted", "normal") if existing.drift else ("normal", "drifted")
        raise SeedRefused(
            f"{path} holds the {held} demo warehouse; not replacing it with the {asked} one. "
            "Name another file with --out, or delete this one first."
        )
    anchor = date.fromisoformat(args.today) if args.today else (settings.today or date.today())
    kind = "drifted demo warehouse" if args.drift else "demo warehouse"
    print(f"building the {kind}: seed {args.seed}, scale {scale}, 24 months ending {anchor:%Y-%m} …", flush=True)
    started = time.perf_counter()
    summary = build_demo_warehouse(path, seed=args.seed, scale=scale, anchor=anchor, drift=args.drift)
    print(f"wrote {path} in {time.perf_counter() - started:.1f}s")
    _print_counts(summary.row_counts)
    if summary.drift:
        print("schema drift (same rows as the normal warehouse; no view keeps an old name):")
        for key, new_name in DRIFT_RENAMES.renamed_columns.items():
            print(f"  column {key} -> {new_name}")
        for old_name, new_name in DRIFT_RENAMES.renamed_tables.items():
            print(f"  table  {old_name} -> {new_name}")
    return path


def _seed_tpch(args: argparse.Namespace, *, scale: float, staging: Path | None) -> Path:
    build_tpch_warehouse = _tpch_builder()
    if args.path:
        path = Path(args.path)
    elif staging is not None:
        path = staging / TPCH_FILE_NAME
    else:
        from memtool.settings import Settings

        path = _home(args.home, Settings(runtime="local").home) / "warehouse" / TPCH_FILE_NAME
    print(f"building the TPC-H warehouse: scale factor {scale:g} …", flush=True)
    started = time.perf_counter()
    row_counts = build_tpch_warehouse(path, scale=scale)
    print(f"wrote {path} in {time.perf_counter() - started:.1f}s")
    _print_counts(row_counts)
    return path


def _tpch_builder() -> Callable[..., dict[str, int]]:
    try:
        from memtool.datasets.tpch import build_tpch_warehouse
    except ImportError as missing:
        raise SeedRefused(
            f"the TPC-H dataset is not available ({missing}); install the local extra: pip install -e '.[local]'"
        ) from None
    builder: Callable[..., dict[str, int]] = build_tpch_warehouse
    return builder


# --------------------------------------------------------------------------- PostgreSQL


def _check_target(url: str) -> None:
    """Refuse a target that is not a PostgreSQL URL or does not answer, before minutes of building."""
    from memtool.sql.postgres_load import probe_postgres
    from memtool.sql.urls import redact_url
    from memtool.sql.warehouse import WarehouseError

    if not url.lower().startswith(("postgresql://", "postgres://")):
        raise SeedRefused(f"--target must be a postgresql://user@host:port/database URL, not {redact_url(url)!r}")
    try:
        probe_postgres(url)
    except WarehouseError as error:
        raise SeedRefused(f"cannot reach {redact_url(url)}: {error}") from None


def _load_into_postgres(path: Path, url: str) -> None:
    from memtool.sql.postgres_load import copy_duckdb_into_postgres
    from memtool.sql.urls import redact_url
    from memtool.sql.warehouse import WarehouseError

    print(f"loading {path.name} into {redact_url(url)} …", flush=True)
    started = time.perf_counter()
    try:
        counts = copy_duckdb_into_postgres(path, url, progress=lambda line: print(f"  {line}", flush=True))
    except (WarehouseError, ValueError, OSError) as error:
        raise SeedRefused(f"loading into {redact_url(url)} failed, nothing was written: {error}") from None
    print(f"loaded {len(counts)} tables into {redact_url(url)} in {time.perf_counter() - started:.1f}s")
    _print_counts(counts)


# --------------------------------------------------------------------------- helpers


def _home(value: str | None, default: Path) -> Path:
    return Path(value) if value else default


def _print_counts(row_counts: dict[str, int]) -> None:
    for table, count in row_counts.items():
        print(f"  {table:<18} {count:>9,} rows")


@contextmanager
def _staging_folder(*, needed: bool) -> Iterator[Path | None]:
    if not needed:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="memtool-seed-") as folder:
        yield Path(folder)
