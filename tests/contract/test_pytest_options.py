"""pyproject.toml's pytest options: the hint beside addopts does what it says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

WHERE = """
import os
from pathlib import Path

def test_where():
    Path(os.environ["WHERE_FILE"]).write_text(os.environ.get("PYTEST_XDIST_WORKER", "main"))
"""


def _hints() -> list[str]:
    """The options in backticks in the comment just above addopts."""
    lines = (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("addopts"))
    start = end
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return re.findall(r"`([^`]+)`", " ".join(lines[start:end]))


def _run(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], str]:
    test = tmp_path / "test_where.py"
    test.write_text(WHERE, encoding="utf-8")
    where = tmp_path / "where.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "-q", "-p", "no:cacheprovider"]
        + [*options, str(test)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        # not this run's xdist variables: under a worker, PYTEST_XDIST_WORKER would be inherited
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}, "WHERE_FILE": str(where)},
    )
    return done, where.read_text(encoding="utf-8") if where.exists() else ""


def test_the_one_process_hint_runs_the_tests_in_this_process(tmp_path: Path) -> None:
    hints = _hints()
    assert hints == ["-n0"]
    for hint in hints:
        done, where = _run(tmp_path, *hint.split())
        assert done.returncode == 0, done.stdout + done.stderr
        assert where == "main"  # no xdist worker ran it


def test_the_old_hint_fails_with_these_addopts(tmp_path: Path) -> None:
    # what the comment said before: without xdist, nothing knows the addopts' -n
    done, where = _run(tmp_path, "-p", "no:xdist")
    assert done.returncode != 0 and where == ""
    assert "unrecognized arguments: -n" in done.stderr
