"""A tenant without a semantic model is told how to make one, in the answer, not a generic failure."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from memtool.errors import ModelMissing
from memtool.flows.ask.state import classify_failure
from memtool.runtime import container
from memtool.settings import Settings, use_settings


def test_a_tenant_without_a_model_gets_the_commands_that_make_one(tmp_path: Path) -> None:
    warehouse = tmp_path / "shop.duckdb"
    with duckdb.connect(str(warehouse)) as con:
        con.execute("CREATE TABLE sales (amount DECIMAL(12,2))")
    # a warehouse of the tenant's own (not the demo's): no built-in model applies
    use_settings(Settings(runtime="local", home=tmp_path, store="sqlite", warehouse_url=f"duckdb://{warehouse}"))
    with pytest.raises(ModelMissing) as missing:
        container.planner("newco")
    assert "memtool model init --warehouse URL" in missing.value.message and "memtool model push" in missing.value.message

    # as AskFlow reports it when the Plan step raised it (the Lambda error JSON in the Cause)
    cause = json.dumps({"errorType": "ModelMissing", "errorMessage": missing.value.message})
    error = classify_failure("ModelMissing", cause, step="Plan")
    assert (error.error, error.step) == ("model_missing", "Plan")
    assert "memtool model init --warehouse URL" in error.message and "memtool model push model.yaml" in error.message
