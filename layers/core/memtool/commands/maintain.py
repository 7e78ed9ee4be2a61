"""`memtool maintain`: run MaintenanceFlow over the local state, as the daily schedule does.

Starts the local runtime without its API (moto's engine, the stores of ``--home``), runs the flow
from statemachines/maintenance.asl.json over every tenant (or ``--tenant``) and the chosen steps
(``--step``, repeatable; all by default), and prints each step's counts. Progress goes to stderr.
Exit codes: 0 the run succeeded, 1 a step failed (its error is printed), 2 it could not start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

STEPS = ("decay", "consolidate", "conflicts", "capacity", "pii_rescan", "reconcile")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = commands.add_parser(
        "maintain",
        help="run memory maintenance now over the local state: decay, consolidate, conflicts, capacity, pii_rescan, reconcile",
        description="Runs MaintenanceFlow (the same state machine AWS schedules daily) over the local runtime's state and "
        "prints every step's counts. Exit codes: 0 done, 1 a step failed, 2 the run could not start.",
    )
    p.add_argument("--home", help="state folder (default .memtool or MEMTOOL_HOME)")
    p.add_argument("--tenant", help="only this tenant (default: every tenant with memories)")
    p.add_argument("--step", action="append", choices=STEPS, help="only this step (repeatable; default: every step)")
    p.add_argument("--store", choices=("sqlite", "dynamodb"), help="record store (default MEMTOOL_STORE or sqlite)")
    p.set_defaults(func=maintain_command)


def report_lines(report: dict[str, Any]) -> list[str]:
    """The report as a reader wants it: one line per step, its counts by name."""
    lines = []
    for step, counts in (report.get("steps") or {}).items():
        shown = ", ".join(f"{name} {value}" for name, value in sorted(counts.items()) if not isinstance(value, list)) or "nothing to do"
        lines.append(f"{step:<12} {shown}")
    tenants = report.get("tenants") or {}
    lines.append(f"{len(tenants)} tenant{'s' if len(tenants) != 1 else ''}: {', '.join(sorted(tenants)) or 'none with memories'}")
    return lines


def maintain_command(args: argparse.Namespace) -> int:
    from memtool.runtime.local import LocalRuntime
    from memtool.runtime.maintenance_launchers import LocalMaintenanceLauncher
    from memtool.settings import Settings

    home = Path(args.home) if args.home else Settings().home
    print(f"memtool maintain: the local state in {home} …", file=sys.stderr, flush=True)
    runtime = LocalRuntime(home=home, port=0, serve_api=False, store=args.store)
    try:
        runtime.start()
    except Exception as exc:  # noqa: BLE001 - one line and exit code 2, never a traceback
        print(f"memtool maintain: could not start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        from memtool.runtime import container

        execution_input: dict[str, Any] = {"trigger": "cli", "tenant": args.tenant, "steps": args.step}
        launched = LocalMaintenanceLauncher(container.flow_runner()).launch(execution_input)
    finally:
        runtime.stop()
    if launched.status != "SUCCEEDED" or launched.output is None:
        step = (launched.output or {}).get("failed_step") if isinstance(launched.output, dict) else None
        where = f" in {step}" if step else ""
        print(f"memtool maintain: {launched.status.lower()}{where}: {launched.error}: {launched.cause}", file=sys.stderr)
        return 1
    report = (launched.output.get("maintenance") or {}).get("report") or {}
    for line in report_lines(report):
        print(line)
    return 0
