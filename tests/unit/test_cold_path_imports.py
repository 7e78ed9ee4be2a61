"""The light handlers' cold path: importing them loads no scikit-learn, scipy, pandas, statsmodels,
matplotlib or E2B SDK (those live only in the analysis images, imported when a tool runs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("sklearn", "scipy", "pandas", "statsmodels", "matplotlib", "e2b")

PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
assert callable(module.lambda_handler)
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[2])))
print(json.dumps(heavy))
"""


def imported_heavy(handler: Path) -> list[str]:
    env = {"PATH": "/usr/bin:/bin", "MEMTOOL_RUNTIME": "aws", "AWS_REGION": "us-east-1", "POWERTOOLS_TRACE_DISABLED": "1", "PYTHONPATH": str(ROOT / "layers" / "core")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(handler), json.dumps(HEAVY)], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("function", ["ask", "memory_write", "flow_steps", "feedback"])
def test_importing_a_light_handler_loads_no_analysis_library(function):
    assert imported_heavy(ROOT / "functions" / function / "app.py") == []


def test_the_probe_sees_a_heavy_import_when_there_is_one(tmp_path):
    # The check can fail: a handler that imports pandas is caught.
    handler = tmp_path / "app.py"
    handler.write_text("import pandas\n\ndef lambda_handler(event, context):\n    return {}\n")
    assert imported_heavy(handler) == ["pandas"]
