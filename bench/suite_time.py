"""How long the test suite takes, and its 20 slowest tests: the figure docs/development.md reports.

Runs ``python -m pytest`` (the README's command, on its three workers) or one tier of it in a child
process, with every duration over 0.05 s reported, and prints the wall time, the load average
before and after (the figure only means something on a quiet machine), the time summed by phase
(setup, call, teardown) and by file, and the 20 slowest tests with their phase. The sums are
test-seconds across the workers, so they add up to more than the wall time.

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
    command = [sys.executable, "-m", "pytest", "-q", "--durations=0", "--durations-min=0.05", *TIERS[tier], *extra]
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
    slowest.sort(key=lambda m: -float(m["seconds"]))
    lines += [f"| {float(m['seconds']):.1f} | {m['phase']} | `{m['test']}` |" for m in slowest[:20]]
    by_phase: dict[str, float] = {}
    by_file: dict[str, float] = {}
    for m in slowest:
        by_phase[m["phase"]] = by_phase.get(m["phase"], 0.0) + float(m["seconds"])
        test_file = m["test"].split("::", 1)[0]
        by_file[test_file] = by_file.get(test_file, 0.0) + float(m["seconds"])
    lines += [
        "",
        "Test-seconds by phase (over 0.05 s each, all workers): "
        + ", ".join(f"{phase} {seconds:.0f} s" for phase, seconds in sorted(by_phase.items(), key=lambda kv: -kv[1]))
        + ".",
        "",
        "| test-seconds | file |",
        "|---:|---|",
    ]
    lines += [f"| {seconds:.1f} | `{name}` |" for name, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:15]]
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
