"""How long the test suite takes, and its 20 slowest tests: the figure docs/development.md reports.

Runs ``python -m pytest`` (the README's command, on its two workers) or one tier of it in a child
process, with ``--durations=20``, and prints the wall time, the load average before and after (the
figure only means something on a quiet machine), and the slowest tests with their phase (setup,
call, teardown).

    python bench/suite_time.py                 # the whole suite
    python bench/suite_time.py --tier fast     # pytest -m "not e2e": what the inner loop runs
    python bench/suite_time.py --out bench/results/suite_time.md

Not a test: the time depends on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = {"all": [], "fast": ["-m", "not e2e"]}
_DURATION = re.compile(r"^\s*(?P<seconds>[0-9.]+)s (?P<phase>setup|call|teardown)\s+(?P<test>\S.*)$")
_SUMMARY = re.compile(r"^(?:=+ )?(?P<summary>(?:\d+ failed, )?\d+ passed.*?)(?: =+)?$")


def run(tier: str, extra: list[str]) -> tuple[float, int, str]:
    command = [sys.executable, "-m", "pytest", "-q", "--durations=20", *TIERS[tier], *extra]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - started, done.returncode, done.stdout + done.stderr


def report(tier: str, seconds: float, returncode: int, output: str, load_before: tuple[float, ...]) -> list[str]:
    slowest = [m for m in map(_DURATION.match, output.splitlines()) if m]
    summary = next((m["summary"] for m in map(_SUMMARY.search, output.splitlines()) if m), "no summary line (see the output)")
    load_after = os.getloadavg()
    lines = [
        f"# Suite time ({tier})",
        "",
        f"`python bench/suite_time.py --tier {tier}` on {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {date.today().isoformat()}: `{shlex.join(['python', '-m', 'pytest', *TIERS[tier]])}`.",
        "",
        f"- wall time: **{seconds:.0f} s** (exit status {returncode}; {summary})",
        f"- load average before / after (1 min): {load_before[0]:.1f} / {load_after[0]:.1f}",
        "",
        "| seconds | phase | test |",
        "|---:|---|---|",
    ]
    lines += [f"| {float(m['seconds']):.1f} | {m['phase']} | `{m['test']}` |" for m in slowest[:20]]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", choices=sorted(TIERS), default="all")
    parser.add_argument("--out", type=Path, help="write the report (markdown) here too")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(f"running the {args.tier} tier …", flush=True)
    seconds, returncode, output = run(args.tier, args.pytest_args)
    lines = report(args.tier, seconds, returncode, output, load_before)
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if returncode != 0:
        print(output[-4000:], file=sys.stderr)
    return returncode


if __name__ == "__main__":
    raise SystemExit(main())
