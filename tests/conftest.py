"""Shared fixtures: moto in-process AWS with tables built from template.yaml, the local API."""

from __future__ import annotations

import sys

# Bytecode: where PYTHONDONTWRITEBYTECODE is set (this CI machine's shell sets it), every run, both
# workers and every server a test starts would compile memtool and rewrite every test module's
# asserts afresh: some 10 s of each worker's collection on 2 cores, and as much again in the
# children. The suite writes the caches anyway, into the __pycache__ folders git ignores; the
# processes it starts keep the variable, so they read them and write none. Set before anything
# below is imported.
sys.dont_write_bytecode = False

import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

# moto's botocore hook must be registered before the process's one boto3 session (runtime/aws.py)
# exists, or that session's clients would bypass moto.
import moto.core.models  # noqa: F401
import pytest

from memtool.runtime import container
from memtool.runtime.aws import client
from memtool.clock import FrozenClock
from memtool.runtime.handlers import function_handler
from memtool.runtime.local_api import LocalApiGateway
from memtool.settings import Settings, use_settings
from memtool.runtime.stream_drain import StreamDrainer
from memtool.runtime.tables import create_tables
from memtool.runtime.template import load_template

from tests.support import ROOT, Api


E2E = ROOT / "tests" / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/e2e carries the ``e2e`` marker: ``-m "not e2e"`` is the fast tier."""
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(autouse=True)
def _isolated_process_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    yield
    use_settings(None)
    container.use_clock(None)


@pytest.fixture(scope="session")
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


@pytest.fixture
def clock() -> FrozenClock:
    frozen = FrozenClock(datetime(2026, 11, 29, 9, 0, tzinfo=UTC))
    container.use_clock(frozen)
    return frozen


TODAY = date(2026, 11, 29)


@pytest.fixture(scope="session")
def demo_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small demo warehouse (about 15k order lines), built once per test session."""
    from memtool.sql.demo_warehouse import build_demo_warehouse

    path = tmp_path_factory.mktemp("warehouse") / "demo.duckdb"
    build_demo_warehouse(path, seed=7, scale=0.05, anchor=TODAY)
    return path


@pytest.fixture
def aws(template: dict[str, Any], clock: FrozenClock, tmp_path: Path, demo_warehouse: Path) -> Iterator[Settings]:
    """moto in-process, the template's tables under names unique to this test, local runtime mode."""
    from moto import mock_aws

    suffix = uuid.uuid4().hex[:8]
    settings = Settings(
        runtime="local",
        region="us-east-1",
        home=tmp_path / "memtool-home",
        today=TODAY,
        warehouse_path=demo_warehouse,
        memory_table=f"memory-{suffix}",
        idempotency_table=f"idempotency-{suffix}",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        use_settings(settings)
        create_tables(client("dynamodb", settings), settings, template)
        yield settings
        container.reset()


@pytest.fixture
def api(aws: Settings, template: dict[str, Any]) -> Api:
    return Api(LocalApiGateway(template, ROOT), tenant=f"acme-{uuid.uuid4().hex[:6]}", user="li")


@pytest.fixture
def stream_drain(aws: Settings) -> StreamDrainer:
    """The memory table's stream, delivered to the real indexer handler on demand."""
    return StreamDrainer(
        client("dynamodb", aws),
        client("dynamodbstreams", aws),
        aws.memory_table,
        function_handler(ROOT, "indexer"),
    )


@pytest.fixture
def drain(stream_drain: StreamDrainer) -> StreamDrainer:
    return stream_drain
