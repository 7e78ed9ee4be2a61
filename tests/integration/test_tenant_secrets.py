"""Each tenant's own Redshift secret (TenantRedshiftSecretPrefix), on moto's Secrets Manager.

A tenant with a secret named ``<prefix><tenant>`` connects with that secret's Redshift user; a
tenant without one uses the stack's ``MEMTOOL_REDSHIFT_SECRET_ARN``, and that answer is kept for
TENANT_SECRET_RECHECK_SECONDS so requests do not ask Secrets Manager each time. Redshift itself is
``redshift_connector.connect`` replaced by a recorder: the test asserts on what the adapter would
connect with, and the recorder's connection answers ``SELECT 1``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redshift_connector

from memtool.clock import FrozenClock
from memtool.errors import ValidationFailed
from memtool.runtime import aws, container
from memtool.runtime.tenant_access import TENANT_SECRET_RECHECK_SECONDS
from memtool.settings import Settings, use_settings

REGION = "us-east-1"


def redshift_secret(host: str, database: str, user: str) -> str:
    return json.dumps({"host": host, "port": 5439, "dbname": database, "username": user, "password": f"{user}-password"})


class OneRowCursor:
    """The DB-API cursor surface RedshiftWarehouse uses, answering every SELECT with one row."""

    description = [("one", 23, None, None, None, None, None)]

    def __init__(self) -> None:
        self.executed: list[str] = []

    def execute(self, sql: str, params: Any = None) -> None:
        self.executed.append(sql)

    def fetchmany(self, size: int) -> list[tuple[int]]:
        return [(1,)]

    def close(self) -> None:
        pass


class OneRowConnection:
    autocommit = False

    def cursor(self) -> OneRowCursor:
        return OneRowCursor()

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class RecordingConnect:
    """Stands in for ``redshift_connector.connect``: keeps each call's keyword arguments."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, **kwargs: Any) -> OneRowConnection:
        self.calls.append(kwargs)
        return OneRowConnection()

    def target(self) -> tuple[str, str, str, str]:
        last = self.calls[-1]
        return last["host"], last["database"], last["user"], last["password"]


@dataclass
class Deployment:
    prefix: str
    own: str  # a tenant with a secret of its own
    other: str  # a tenant without one
    connect: RecordingConnect
    secret_reads: list[str]  # SecretId of every GetSecretValue that reached Secrets Manager
    admin: Any


@pytest.fixture
def deployment(monkeypatch: pytest.MonkeyPatch, clock: FrozenClock, tmp_path: Any) -> Iterator[Deployment]:
    import boto3
    from moto import mock_aws

    run = uuid.uuid4().hex[:8]
    prefix = f"memtool/test-{run}/tenants/"
    connect = RecordingConnect()
    monkeypatch.setattr(redshift_connector, "connect", connect)
    secret_reads: list[str] = []
    real_client = aws.client

    def counting_client(service: str, settings: Settings, **kwargs: Any) -> Any:
        built = real_client(service, settings, **kwargs)
        if service == "secretsmanager":
            built.meta.events.register(
                "before-parameter-build.secrets-manager.GetSecretValue", lambda params, **_: secret_reads.append(params["SecretId"])
            )
        return built

    monkeypatch.setattr(aws, "client", counting_client)
    with mock_aws():
        admin = boto3.client("secretsmanager", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
        stack = admin.create_secret(
            Name=f"memtool/test-{run}/redshift", SecretString=redshift_secret("stack.example", "shared", "stack_reader")
        )
        own = f"acme-{run}"
        admin.create_secret(Name=prefix + own, SecretString=redshift_secret("acme.example", "acme_dw", "acme_reader"))
        use_settings(
            Settings(
                runtime="local",
                region=REGION,
                home=tmp_path / "memtool-home",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                warehouse="redshift",
                redshift_secret_arn=stack["ARN"],
                tenant_redshift_secret_prefix=prefix,
            )
        )
        try:
            yield Deployment(prefix, own, f"globex-{run}", connect, secret_reads, admin)
        finally:
            use_settings(None)


def query(tenant: str) -> None:
    result = container.warehouse(tenant).run("SELECT 1 AS one", max_rows=5, timeout_seconds=5)
    assert result.rows == [[1]]


def test_each_tenant_connects_with_its_own_secret_or_the_stacks(deployment: Deployment) -> None:
    # When the tenant with a secret of its own asks, then the tenant without one
    query(deployment.own)
    own_target = deployment.connect.target()
    query(deployment.other)
    other_target = deployment.connect.target()

    # Then each connected as the Redshift user of its secret
    assert own_target == ("acme.example", "acme_dw", "acme_reader", "acme_reader-password")
    assert other_target == ("stack.example", "shared", "stack_reader", "stack_reader-password")
    assert [call["ssl"] for call in deployment.connect.calls] == [True, True]
    # (the own secret: looked up by name, then read by its ARN on the first connection)
    assert deployment.secret_reads[:2] == [deployment.prefix + deployment.own, _arn(deployment, deployment.prefix + deployment.own)]


def test_the_warehouse_is_built_once_per_tenant(deployment: Deployment) -> None:
    first = container.warehouse(deployment.own)
    query(deployment.own)
    query(deployment.own)

    assert container.warehouse(deployment.own) is first
    assert deployment.secret_reads == [deployment.prefix + deployment.own, _arn(deployment, deployment.prefix + deployment.own)]
    assert len(deployment.connect.calls) == 2  # a connection per query, one secret read for all


def test_a_tenant_without_a_secret_is_asked_about_again_only_after_five_minutes(deployment: Deployment, clock: FrozenClock) -> None:
    missing = deployment.prefix + deployment.other
    # Given the tenant without a secret asked three times
    for _ in range(3):
        query(deployment.other)
    # Then Secrets Manager was asked about its secret once (and the stack's secret read once)
    assert deployment.secret_reads.count(missing) == 1
    assert [read for read in deployment.secret_reads if read != missing] == [container.get_settings().redshift_secret_arn]

    # When its secret is created, within the five minutes the stack's warehouse still answers
    deployment.admin.create_secret(Name=missing, SecretString=redshift_secret("globex.example", "globex_dw", "globex_reader"))
    clock.advance(seconds=TENANT_SECRET_RECHECK_SECONDS - 1)
    query(deployment.other)
    assert deployment.connect.target()[0] == "stack.example"
    assert deployment.secret_reads.count(missing) == 1

    # And after them, its own secret does
    clock.advance(seconds=2)
    query(deployment.other)
    assert deployment.connect.target() == ("globex.example", "globex_dw", "globex_reader", "globex_reader-password")
    assert deployment.secret_reads.count(missing) == 2


@pytest.mark.parametrize(
    "tenant",
    ["../acme", "acme/../../redshift", "acme*", "acme\n", "-acme", "a" * 65, "acme tenant", "ａｃｍｅ"],
    ids=["dot-dot", "slash", "wildcard", "newline", "leading-dash", "too-long", "space", "fullwidth"],
)
def test_a_malformed_tenant_id_never_reaches_secrets_manager(deployment: Deployment, tenant: str) -> None:
    with pytest.raises(ValidationFailed, match="tenant id"):
        container.warehouse(tenant)

    assert deployment.secret_reads == []
    assert deployment.connect.calls == []


def test_without_the_prefix_every_tenant_uses_the_stacks_secret(deployment: Deployment) -> None:
    settings = container.get_settings()
    use_settings(settings.model_copy(update={"tenant_redshift_secret_prefix": None}))

    query(deployment.own)

    assert deployment.connect.target()[0] == "stack.example"
    assert deployment.secret_reads == [settings.redshift_secret_arn]


def _arn(deployment: Deployment, name: str) -> str:
    return str(deployment.admin.describe_secret(SecretId=name)["ARN"])


# ---- what each tenant may read (docs/architecture.md, "Tenant walls") ----------------------------


def test_a_tenants_secret_grants_its_tables_and_a_tenant_on_the_stacks_redshift_needs_a_grant(deployment: Deployment) -> None:
    granted = f"granted-{uuid.uuid4().hex[:6]}"
    secret = json.loads(redshift_secret("granted.example", "granted_dw", "granted_reader")) | {"tables": ["Sales_*", "dim_region"]}
    deployment.admin.create_secret(Name=deployment.prefix + granted, SecretString=json.dumps(secret))

    assert container.granted_tables(granted) == ("sales_*", "dim_region")
    assert container.grant_missing(granted) is None
    assert container.granted_tables(deployment.own) is None  # its own warehouse, no list: the model is the wall
    assert container.grant_missing(deployment.own) is None
    # a tenant on the stack's shared Redshift may not store a model until its tables are granted
    missing = container.grant_missing(deployment.other)
    assert missing is not None and "shared Redshift" in missing and "TenantTables" in missing

    use_settings(container.get_settings().model_copy(update={"tenant_tables": {deployment.other: ["fact_*"], "*": ["public_*"]}}))
    assert container.granted_tables(deployment.other) == ("fact_*",)
    assert container.granted_tables("initech") == ("public_*",)  # "*": every tenant not listed
    assert container.grant_missing(deployment.other) is None


@pytest.mark.parametrize("tables", [[], "fact_*", ["a.b.c.d"], ["fact; DROP"]])
def test_a_secret_whose_tables_are_not_a_list_of_names_is_an_error_naming_it(deployment: Deployment, tables: Any) -> None:
    from memtool.sql.warehouse import WarehouseError

    bad = f"bad-{uuid.uuid4().hex[:6]}"
    secret = json.loads(redshift_secret("bad.example", "bad_dw", "bad_reader")) | {"tables": tables}
    deployment.admin.create_secret(Name=deployment.prefix + bad, SecretString=json.dumps(secret))

    with pytest.raises(WarehouseError, match=f"the tenant's secret {deployment.prefix}{bad}: tables"):
        container.granted_tables(bad)


def test_a_curator_on_the_stacks_shared_redshift_cannot_store_a_model_before_a_grant(deployment: Deployment) -> None:
    from memtool.identity import Identity
    from memtool.semantic.catalog import load_catalog
    from memtool.semantic.model_store import StoredModelMissing
    from memtool.semantic.validation import ModelRejected

    use_settings(container.get_settings().model_copy(update={"store": "sqlite"}))  # a record store of its own
    curator = Identity(deployment.other, "wang", frozenset({"curator"}))
    model = load_catalog().model_dump(mode="json")
    with pytest.raises(ModelRejected) as refused:
        container.model_flow().put(curator, model, None)
    assert [p.path for p in refused.value.problems] == ["tables"]
    assert "grant it its tables first" in refused.value.problems[0].message
    with pytest.raises(StoredModelMissing):
        container.model_store().get(deployment.other)  # nothing was stored
