"""`memtool model validate FILE --warehouse URL`: every metric and dimension compiles and runs
(LIMIT 0) on the warehouse, and each failure is reported with its line in the YAML."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from memtool.cli import main
from memtool.sql.demo_warehouse import build_demo_warehouse

ROOT = Path(__file__).resolve().parents[2]
DEMO_MODEL = ROOT / "layers" / "core" / "memtool" / "sql" / "demo_model.yaml"


@pytest.fixture(scope="module")
def warehouse_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("validate") / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.01, anchor=date(2026, 11, 29))
    return f"duckdb://{path}"


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_demo_model_is_valid_on_its_warehouse(warehouse_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "validate", str(DEMO_MODEL), "--warehouse", warehouse_url]) == 0
    assert "valid (8 metrics, 12 dimensions; the format and the warehouse checked)" in capsys.readouterr().out


def test_a_metric_that_does_not_run_is_reported_at_its_line(
    warehouse_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = DEMO_MODEL.read_text(encoding="utf-8").replace("expression: SUM(fp.qty)", "expression: SUM(fp.quantity)")
    broken = tmp_path / "model.yaml"
    broken.write_text(text, encoding="utf-8")

    assert main(["model", "validate", str(broken), "--warehouse", warehouse_url]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    metric_line = line_of(text, "name: rx_volume")
    assert len(out) == 1 and out[0].startswith(f"{broken}:"), out
    reported = int(out[0].split(":")[1])
    assert metric_line <= reported <= line_of(text, "expression: SUM(fp.quantity)")
    assert "rx_volume" in out[0] and "quantity" in out[0]


def test_a_dangling_reference_is_reported_without_a_warehouse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = DEMO_MODEL.read_text(encoding="utf-8").replace("  source: prescription\n", "  source: prescriptions\n", 1)
    broken = tmp_path / "model.yaml"
    broken.write_text(text, encoding="utf-8")

    assert main(["model", "validate", str(broken)]) == 1
    out = capsys.readouterr().out
    assert f"{broken}:{line_of(text, 'source: prescriptions')}: metrics[7]" in out and "prescriptions" in out, out


def test_unreadable_input_is_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("metrics: [\n", encoding="utf-8")
    assert main(["model", "validate", str(bad)]) == 2
    assert "YAML syntax error" in capsys.readouterr().err
    assert main(["model", "validate", str(DEMO_MODEL), "--warehouse", "mysql://nowhere"]) == 2
    assert "not a warehouse URL" in capsys.readouterr().err


def test_an_unreachable_warehouse_is_one_line_and_exit_2_not_a_problem_per_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["model", "validate", str(DEMO_MODEL), "--warehouse", f"duckdb://{tmp_path}/missing.duckdb"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1


def test_a_warehouse_without_the_models_tables_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import duckdb

    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE something_else (x INTEGER)")
    assert main(["model", "validate", str(DEMO_MODEL), "--warehouse", f"duckdb://{other}"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "has no table" in out[0] and "fact_order_line" in out[0]


def test_model_init_never_writes_over_an_existing_file(warehouse_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    curated = tmp_path / "model.yaml"
    curated.write_text("# curated by hand\n", encoding="utf-8")
    assert main(["model", "init", "--warehouse", warehouse_url, "-o", str(curated)]) == 2
    assert curated.read_text(encoding="utf-8") == "# curated by hand\n" and "--force" in capsys.readouterr().err
    assert main(["model", "init", "--warehouse", warehouse_url, "-o", str(curated), "--force"]) == 0
    assert curated.read_text(encoding="utf-8").startswith("# A DRAFT semantic model")
