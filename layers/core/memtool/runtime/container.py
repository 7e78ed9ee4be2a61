"""Builds the adapters the settings choose, once per process (per Lambda container).

Handlers ask the container for services; tests install settings (or fakes) and reset it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from memtool.clock import Clock, SystemClock
from memtool.runtime.adapter_cache import AdapterCache
from memtool.settings import get_settings, on_settings_change

logger = logging.getLogger("memtool.runtime")

if TYPE_CHECKING:
    from datetime import date, datetime
    from pathlib import Path

    from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer

    from memtool.analysis.code_interpreter import ResilientSandbox
    from memtool.analysis.sandbox.local import LocalProcessSandbox
    from memtool.cache.fewshots import FewshotLibrary
    from memtool.cache.sql_cache import SqlCache
    from memtool.diagnosis.bedrock import BedrockDiagnoser
    from memtool.diagnosis.queue import DiagnosisQueue
    from memtool.flows.ask import AskService
    from memtool.flows.ask.steps import AskSteps
    from memtool.flows.diagnose import DiagnosisService
    from memtool.flows.feedback import CorrectionSplitter, FeedbackService
    from memtool.flows.indexing import MemoryIndexer
    from memtool.flows.maintenance import IndexReconciler
    from memtool.flows.memory_write import MemoryService
    from memtool.flows.model import ModelFlow
    from memtool.flows.runner import FlowRunner
    from memtool.memory.store import MemoryStore
    from memtool.planning.context import FewshotExample
    from memtool.planning.port import Planner
    from memtool.planning.rule_planner import RulePlanner
    from memtool.retrieval.embedders import Embedder
    from memtool.retrieval.index import VectorIndex
    from memtool.retrieval.recall import Recall
    from memtool.runtime.tenancy import TenantEntry
    from memtool.runtime.tenant_access import TenantRedshiftSecret
    from memtool.semantic.catalog import Catalog, TenantModel
    from memtool.semantic.compiler import IntentCompiler
    from memtool.semantic.model_store import ActiveModel, ModelStore
    from memtool.semantic.parser import QuestionParser
    from memtool.sql.warehouse import Warehouse
    from memtool.tools.base import ToolRegistry
    from memtool.tools.breakers import CircuitBreakers, GuardedClient
    from memtool.tools.executor import ToolExecutor

_clock: Clock | None = None

# What the container has built, by key, under one lock (memtool.runtime.adapter_cache).
_adapters = AdapterCache()
once = _adapters.once
_per_key = _adapters.per_key


def use_clock(clock: Clock | None) -> None:
    global _clock
    _clock = clock


def clock() -> Clock:
    return _clock or SystemClock()


@once
def memory_store() -> MemoryStore:
    """The record store the settings choose: DynamoDB (AWS, or moto locally) or SQLite (local)."""
    settings = get_settings()
    if settings.record_store == "sqlite":
        from memtool.memory.sqlite_store import SQLiteMemoryStore

        return SQLiteMemoryStore(settings.sqlite_path)
    from pynamodb.connection import Connection

    from memtool.memory.dynamodb_store import DynamoMemoryStore, memory_item_for

    model = memory_item_for(
        settings.memory_table,
        settings.region,
        host=settings.aws_endpoint_url,
        aws_access_key_id=settings.aws_access_key_id,
        aws_secret_access_key=settings.aws_secret_access_key,
    )
    connection = Connection(
        region=settings.region,
        host=settings.aws_endpoint_url,
        aws_access_key_id=settings.aws_access_key_id,
        aws_secret_access_key=settings.aws_secret_access_key,
        max_retry_attempts=3,
    )
    return DynamoMemoryStore(model, connection)


def memory_service() -> MemoryService:
    from memtool.flows.memory_write import MemoryService

    return MemoryService(memory_store(), clock(), get_settings(), check_correction=check_correction)


def check_correction(value: object, tenant: str | None = None) -> None:
    """A correction memory's meaning checked against the tenant's model (the parser is built on first need)."""
    from memtool.feedback.corrections import check_taught_meaning

    check_taught_meaning(value, question_parser(tenant), today())


@once
def idempotency_store() -> BasePersistenceLayer:
    settings = get_settings()
    if settings.record_store == "sqlite":  # idempotency records live in the store's own database
        from memtool.runtime.sqlite_idempotency import SQLiteIdempotencyLayer

        return SQLiteIdempotencyLayer(settings.sqlite_path)
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    from memtool.runtime.aws import client

    return DynamoDBPersistenceLayer(
        table_name=settings.idempotency_table, boto3_client=client("dynamodb", settings)
    )


@once
def embedder() -> Embedder:
    from memtool.retrieval.embedders import BedrockTitanEmbedder, HashingEmbedder

    settings = get_settings()
    if settings.embedder == "bedrock":
        from memtool.runtime.aws import client

        return BedrockTitanEmbedder(
            guarded_aws_client("bedrock", client("bedrock-runtime", settings, max_attempts=1)),  # the embedder retries
            model_id=settings.bedrock_embedding_model_id,
            dimensions=settings.bedrock_embedding_dimensions,
        )
    return HashingEmbedder(settings.hashing_dimensions)


@once
def vector_index() -> VectorIndex | None:
    """The configured index, ensured once per container; None when recall runs without one."""
    settings = get_settings()
    if settings.vector_index == "none":
        return None
    if settings.vector_index == "opensearch":
        from memtool.retrieval.opensearch_index import OpenSearchIndex, opensearch_client

        if not settings.opensearch_endpoint:
            return None
        import boto3

        index: VectorIndex = OpenSearchIndex(
            opensearch_client(
                settings.opensearch_endpoint,
                settings.region,
                settings.opensearch_service,
                credentials=boto3.session.Session().get_credentials(),
                timeout=settings.opensearch_timeout_seconds,
                max_retries=settings.opensearch_max_retries,
            ),
            index=settings.opensearch_index,
            dimension=embedder().dimension,
            pipeline=settings.opensearch_pipeline,
            serverless=settings.opensearch_service == "aoss",
        )
        guarded = guarded_index(index)
        guarded.ensure()  # behind the breaker too: an unreachable cluster opens it, and steps stop waiting on it
        return guarded
    else:
        from memtool.retrieval.embedded_index import EmbeddedIndex

        index = EmbeddedIndex(settings.home / "index")
    index.ensure()
    return index


def recall() -> Recall:
    from memtool.retrieval.recall import Recall

    settings = get_settings()
    try:
        index = vector_index()
    except Exception as exc:  # noqa: BLE001 - an index that cannot even be reached degrades recall, visibly
        from memtool.retrieval.index import UnreachableIndex

        index = UnreachableIndex(f"vector index unavailable: {type(exc).__name__}: {exc}")
    return Recall(
        memory_store(),
        index,
        embedder(),
        clock(),
        settings.recall_budgets,
        min_candidates=settings.recall_min_candidates,
        fallback_scan_limit=settings.recall_fallback_scan_limit,
        min_cosine=settings.recall_min_cosine,
        min_score=settings.recall_min_score,
        duplicate_cosine=settings.recall_duplicate_cosine,
    )


def memory_indexer() -> MemoryIndexer:
    from memtool.flows.indexing import MemoryIndexer

    index = vector_index()
    if index is None:
        raise RuntimeError("the indexer needs a vector index (MEMTOOL_VECTOR_INDEX)")
    from memtool.runtime.maintenance import distil_expired_session

    return MemoryIndexer(memory_store(), index, embedder(), on_session_expired=distil_expired_session)


def index_reconciler() -> IndexReconciler:
    """Maintenance's ReconcileIndex over the store and the index."""
    from memtool.flows.maintenance import IndexReconciler

    return IndexReconciler(memory_store(), memory_indexer(), clock())


def today() -> date:
    settings = get_settings()
    return settings.today or clock().now().date()


def warehouse_path() -> Path:
    settings = get_settings()
    return settings.warehouse_path or settings.home / "warehouse" / "demo.duckdb"


NO_WAREHOUSE = (
    "no warehouse is configured, so data questions cannot be answered: deploy with the stack parameter "
    "RedshiftSecretArn (the Secrets Manager ARN of a read-only Redshift user; it sets MEMTOOL_WAREHOUSE=redshift "
    "and MEMTOOL_REDSHIFT_SECRET_ARN), or run locally with `memtool serve`"
)


def require_warehouse() -> None:
    """Refuse a request that needs the warehouse, before any work, when none is configured."""
    if get_settings().warehouse == "none":
        from memtool.errors import NotConfigured

        raise NotConfigured(NO_WAREHOUSE, field="RedshiftSecretArn")


@once
def default_warehouse() -> Warehouse:
    """The process's own warehouse (MEMTOOL_WAREHOUSE / _URL / _PATH)."""
    require_warehouse()
    settings = get_settings()
    if settings.warehouse == "redshift":
        from memtool.runtime.aws import client
        from memtool.sql.redshift_warehouse import redshift_from_secret

        if not settings.redshift_secret_arn:
            raise RuntimeError("MEMTOOL_WAREHOUSE=redshift needs MEMTOOL_REDSHIFT_SECRET_ARN")
        return guarded_warehouse(redshift_from_secret(settings.redshift_secret_arn, client("secretsmanager", settings)))
    if settings.warehouse_url:
        from memtool.sql.urls import open_warehouse

        return open_warehouse(settings.warehouse_url)
    from memtool.sql.duckdb_warehouse import DuckDBWarehouse

    path = warehouse_path()
    if not path.is_file():
        from memtool.sql.warehouse import WarehouseError

        raise WarehouseError(f"the demo warehouse {path} is missing: run `memtool seed-warehouse`", code="unavailable")
    return DuckDBWarehouse(path)


@once
def tenants() -> dict[str, TenantEntry]:
    """The tenants file's entries (none without one)."""
    from memtool.runtime.tenancy import load_tenants

    path = get_settings().tenants_file
    return load_tenants(path) if path is not None else {}


def warehouse(tenant: str | None = None) -> Warehouse:
    """The tenant's warehouse (its tenants-file entry or its own secret), else the process's."""
    entry = tenants().get(tenant) if tenant else None
    if entry is None:
        own = _tenant_redshift(tenant)
        if own is not None:
            return own
        _refuse_the_demo_warehouse_to_another_model(tenant)
        return default_warehouse()
    url = entry.warehouse

    def build() -> Warehouse:
        from memtool.sql.urls import open_warehouse

        return open_warehouse(url)

    return _per_key(("warehouse", url), build)




def _tenant_redshift(tenant: str | None) -> Warehouse | None:
    """In AWS (TenantRedshiftSecretPrefix), tenant T's warehouse is the Redshift user in the secret named <prefix>T."""
    settings = get_settings()
    prefix = settings.tenant_redshift_secret_prefix
    if settings.warehouse != "redshift" or not prefix or not tenant:
        return None
    return _tenant_secret(prefix, tenant).warehouse()


def _tenant_secret(prefix: str, tenant: str) -> TenantRedshiftSecret:
    from memtool.runtime.tenant_access import TenantRedshiftSecret, secret_name_part

    name = prefix + secret_name_part(tenant)

    def secrets() -> Any:
        from memtool.runtime.aws import client

        return client("secretsmanager", get_settings())

    def open_redshift(arn: str, secrets_client: Any) -> Warehouse:
        from memtool.sql.redshift_warehouse import redshift_from_secret

        return guarded_warehouse(redshift_from_secret(arn, secrets_client))

    def build() -> TenantRedshiftSecret:
        return TenantRedshiftSecret(name, now=lambda: clock().now().timestamp(), secrets=secrets, open_warehouse=open_redshift)

    return _per_key(("tenant-redshift-secret", name), build)








def grant_missing(tenant: str | None) -> str | None:
    """Why the tenant needs a grant it does not have, or None (memtool.runtime.tenant_access.missing_grant)."""
    from memtool.runtime.tenant_access import missing_grant

    has_entry = bool(tenant and tenants().get(tenant) is not None)
    granted, own_redshift = granted_tables(tenant), lambda: _tenant_redshift(tenant) is not None
    return missing_grant(tenant, get_settings(), granted=granted, has_entry=has_entry, own_redshift=own_redshift)


def granted_tables(tenant: str | None) -> tuple[str, ...] | None:
    """The warehouse tables an operator granted the tenant (memtool.runtime.tenant_access.granted_patterns)."""
    from memtool.runtime.tenant_access import granted_patterns

    entry = tenants().get(tenant) if tenant else None
    settings = get_settings()
    prefix = settings.tenant_redshift_secret_prefix

    def secret() -> TenantRedshiftSecret | None:
        return _tenant_secret(prefix, tenant) if settings.warehouse == "redshift" and prefix and tenant else None

    return granted_patterns(tenant, settings, entry=entry, secret=secret)


MODEL_MISSING = (
    "tenant {tenant} has no semantic model, so its data questions cannot be answered: draft one from the warehouse with "
    "`memtool model init --warehouse URL > model.yaml`, curate it, and store it with `memtool model push model.yaml` "
    "(a curator; PUT /model)"
)


def tenant_model(tenant: str | None = None) -> TenantModel:
    """A curator's stored model, else the tenants file's, else (local demo warehouse only) the demo's."""
    from memtool.semantic.catalog import TenantModel

    stored = _stored_model(tenant) if tenant else None
    if stored is not None:

        def from_store() -> TenantModel:  # once per stored version: its version in the model's, for cache keys and citations
            label = f"{stored.model.name or 'model'} {stored.model_version} (stored v{stored.version})"
            catalog = stored.model.model_copy(update={"model_version": f"{stored.model_version}+v{stored.version}"})
            return TenantModel(catalog, label, "stored", stored.version)

        return _per_key(("model", tenant, stored.memory_id, stored.version), from_store)
    entry = tenants().get(tenant) if tenant else None
    if entry is not None:
        path = entry.model
        mtime = path.stat().st_mtime_ns

        def from_file() -> TenantModel:
            from memtool.semantic.catalog import load_catalog

            catalog = load_catalog(path)
            return TenantModel(catalog, f"{catalog.name or path.stem} {catalog.model_version} (file {path.name})", "file")

        return _per_key(("model-file", str(path), mtime), from_file)
    if _built_in_model_applies():
        from memtool.semantic.catalog import load_catalog

        catalog = load_catalog()
        return _per_key(("model-demo",), lambda: TenantModel(catalog, f"{catalog.name} {catalog.model_version} (built in)", "built_in"))
    from memtool.errors import ModelMissing

    raise ModelMissing(MODEL_MISSING.format(tenant=tenant or "(none)"), field="model")


def _stored_model(tenant: str) -> ActiveModel | None:
    return model_store().active(tenant)


class ContainerClock:
    """The container's clock at each call (``use_clock`` may change it later)."""

    def now(self) -> datetime:
        return clock().now()


def model_store() -> ModelStore:
    """The tenant models on the process's record store, one per store: its parsed-model cache lives
    as long as the store it reads (a new store, after reset() or new settings, gets a new one)."""
    from memtool.semantic.model_store import ModelStore

    store = memory_store()
    return _per_key(("model-store", id(store)), lambda: ModelStore(store, ContainerClock()))


def model_check_warehouse(tenant: str) -> Warehouse | None:
    """Where a tenant's model is checked; None without a warehouse."""
    if get_settings().warehouse == "none" and tenants().get(tenant) is None:
        return None
    return warehouse(tenant)


def model_flow() -> ModelFlow:
    from memtool.flows.model import ModelFlow

    return ModelFlow(model_store(), model_check_warehouse, granted_for=granted_tables, grant_missing=grant_missing)


def foreign_tables(tenant: str | None) -> frozenset[str]:
    """Tables other tenants' models (in the tenants file) read that this tenant's model does not."""
    own = set(tenant_model(tenant).catalog.physical_tables)
    others: set[str] = set()
    for other in tenants():
        if other != tenant:
            others.update(tenant_model(other).catalog.physical_tables)
    default = None if tenant is None or tenant not in tenants() else _default_model_tables()
    if default:
        others.update(default)
    return frozenset(others - own)


def _refuse_the_demo_warehouse_to_another_model(tenant: str | None) -> None:
    """The built-in demo warehouse holds the demo's tables only: a tenant whose model reads other
    tables (a model pushed in another process that had the tenant's warehouse, say) is told what to
    configure (WarehouseMissing, 409), never run on the demo's data."""
    if not tenant or not _built_in_model_applies():
        return
    from memtool.errors import ModelMissing
    from memtool.runtime.tenant_access import refuse_beyond_the_demo

    try:
        model = tenant_model(tenant)
    except ModelMissing:
        return  # no model: the ask answers model_missing on its own
    refuse_beyond_the_demo(tenant, model, _default_model_tables())


def _built_in_model_applies() -> bool:
    """The demo model serves tenants without one only on the local demo warehouse."""
    settings = get_settings()
    return settings.warehouse == "duckdb" and not settings.warehouse_url


def _default_model_tables() -> tuple[str, ...]:
    if _built_in_model_applies():
        from memtool.semantic.catalog import load_catalog

        return load_catalog().physical_tables
    return ()


def planner(tenant: str | None = None) -> Planner:
    """Built on the first step that plans for the tenant, never at cold start; rebuilt when its model changes."""
    model = tenant_model(tenant)
    # Tenants share a planner only when they read the same warehouse with the same model: its
    # entity values come from that warehouse, so equal models on two warehouses never share one.
    # A stored model is a curator's: its name, version and label are theirs to choose, so its planner
    # (and the entity values read for it) is the tenant's own, never shared on a matching label.
    shared_by = ("tenant", tenant, model.version) if model.origin == "stored" else ("catalog", id(model.catalog))
    key = ("planner", _warehouse_identity(tenant), model.label, shared_by)
    return _per_key(key, lambda: _build_planner(model.catalog, lambda: warehouse(tenant)))


def _warehouse_identity(tenant: str | None) -> str:
    """A stable name of the warehouse ``warehouse(tenant)`` reads: its URL, its own secret, or the default."""
    entry = tenants().get(tenant) if tenant else None
    if entry is not None:
        return f"url:{entry.warehouse}"
    try:
        own = _tenant_redshift(tenant)
    except Exception:  # noqa: BLE001 - an unreadable secret is the planner's problem to report, not the key's
        return f"unreadable:{tenant}"
    return f"secret:{tenant}" if own is not None else "default"


def _build_planner(catalog: Catalog, open_warehouse: Callable[[], Warehouse]) -> Planner:
    from memtool.planning.rule_planner import RulePlanner
    from memtool.semantic.entities import EntityIndex

    settings = get_settings()
    try:
        entities = EntityIndex.from_warehouse(open_warehouse(), catalog)
    except Exception:  # noqa: BLE001 - the model's own values still resolve names
        entities = EntityIndex.static(catalog)
    as_of = catalog.as_of
    today_source = (lambda: as_of) if as_of is not None else today  # a historical data set is read as of its end
    rules = RulePlanner(catalog, entities, today=today_source)
    if settings.planner == "bedrock":
        from memtool.planning.bedrock_planner import BedrockPlanner
        from memtool.runtime.aws import client
        from memtool.runtime.knowledge import planner_sources

        return BedrockPlanner(
            guarded_aws_client("bedrock", client("bedrock-runtime", settings, max_attempts=1)),
            model_id=settings.bedrock_planner_model_id,
            catalog=catalog,
            entities=entities,
            today=today_source,
            fallback=rules,
            sources=planner_sources,  # read_source: the request's tenant's sources
        )
    return rules


def question_parser(tenant: str | None = None) -> QuestionParser:
    """The rule planner's (the Bedrock planner falls back to it)."""
    return planner(tenant).rules.parser


def fewshot_search(tenant: str, question: str) -> list[FewshotExample]:
    """Approved few-shots for a question, matched on its masked shape."""
    from memtool.semantic.masking import mask_question

    masked = mask_question(question_parser(tenant).recognise(question, today=today()))
    return fewshot_library().search(tenant, question, masked)


def ask_steps() -> AskSteps:
    """AskFlow's steps over factories for what reaches outside (the planner and its entity values
    read the warehouse, recall builds the embedder and the index): each is built by the first step
    that needs it, so Record and Visualize start without them."""
    from memtool.flows.ask.steps import AskSteps
    from memtool.runtime.knowledge import source_library

    return AskSteps(
        settings=get_settings(),
        clock=clock(),
        memories=memory_service(),
        store=memory_store(),
        recall=recall,
        planner=planner,
        warehouse_factory=warehouse,
        fewshot_search=fewshot_search,
        today=today,
        diagnosis=diagnosis_service,
        compiler=intent_compiler,
        cache=sql_cache,
        model=tenant_model,
        foreign_tables=foreign_tables,
        granted_tables=granted_tables,
        sources=source_library,
    )


def rule_planner(tenant: str | None = None) -> RulePlanner:
    """The planner's rules (the Bedrock planner falls back to them)."""
    return planner(tenant).rules


def sql_cache() -> SqlCache:
    """The SQL cache over the record store and the vector index."""
    from memtool.cache.sql_cache import SqlCache

    return SqlCache(
        memory_store(), clock=clock(), settings=get_settings(), rules=rule_planner, today=today, index=vector_index, embedder=embedder
    )


def intent_compiler(tenant: str | None = None) -> IntentCompiler:
    """The planner's rules' compiler, over the tenant's model."""
    return planner(tenant).rules.compiler


@once
def diagnosis_queue() -> DiagnosisQueue:
    """SQS in AWS, SQLite in the local runtime, or none."""
    from memtool.diagnosis.queue import build_diagnosis_queue
    from memtool.runtime.aws import client

    settings = get_settings()
    return build_diagnosis_queue(settings, lambda: client("sqs", settings))


def diagnosis_llm() -> BedrockDiagnoser | None:
    """The Bedrock diagnoser, when MEMTOOL_DIAGNOSER=bedrock."""
    settings = get_settings()
    if settings.diagnoser != "bedrock":
        return None
    from memtool.diagnosis.bedrock import BedrockDiagnoser
    from memtool.runtime.aws import client

    return BedrockDiagnoser(
        guarded_aws_client("bedrock", client("bedrock-runtime", settings, max_attempts=1)), model_id=settings.bedrock_diagnoser_model_id
    )


def diagnosis_service() -> DiagnosisService:
    from memtool.flows.diagnose import DiagnosisService

    return DiagnosisService(
        store=memory_store(),
        memories=memory_service(),
        clock=clock(),
        settings=get_settings(),
        warehouse=warehouse,
        compiler=intent_compiler,
        llm=diagnosis_llm,
        queue=diagnosis_queue,
        foreign_tables=foreign_tables,
        granted_tables=granted_tables,
    )


def feedback_service() -> FeedbackService:
    from memtool.flows.feedback import FeedbackService

    return FeedbackService(
        memory_store(),
        clock(),
        get_settings(),
        parser=question_parser,
        today=today,
        fewshots=fewshot_library,
        splitter=correction_splitter,
        diagnosis=diagnosis_service,
    )


def correction_splitter(tenant: str | None = None) -> CorrectionSplitter | None:
    """The Bedrock planner, when it is the planner."""
    built = planner(tenant)
    return cast("CorrectionSplitter", built) if hasattr(built, "split_correction") else None


@once
def flow_runner() -> FlowRunner:
    from memtool.runtime.aws import client

    settings = get_settings()
    if not settings.is_local:
        from memtool.runtime.step_functions import StepFunctionsRunner

        # One attempt, and a read timeout longer than the flow's: a slow flow is never started twice.
        sfn = client(
            "stepfunctions",
            settings,
            max_attempts=1,
            connect_timeout=settings.ask_flow_connect_timeout_seconds,
            read_timeout=settings.ask_flow_read_timeout_seconds,
        )
        return StepFunctionsRunner(sfn, {"AskFlow": settings.ask_state_machine_arn or ""})
    from memtool.runtime.local_flows import local_flow_runner

    return local_flow_runner(client("stepfunctions", settings), timeout_scale=settings.local_flow_timeout_scale)


def ask_service() -> AskService:
    from memtool.flows.ask import AskService

    require_warehouse()  # a clear 503 naming what to set, not a failed flow

    return AskService(flow_runner(), clock(), response_rows=get_settings().response_rows)


# ---- tools, analysis and the circuit breakers --------------------------------------------------


@once
def breakers() -> CircuitBreakers:
    """One breaker per outside dependency, per process (per Lambda container)."""
    from memtool.tools.breakers import CircuitBreakers

    settings = get_settings()
    return CircuitBreakers(failure_threshold=settings.breaker_failure_threshold, cooldown_seconds=settings.breaker_cooldown_seconds)




def guarded_aws_client(dependency: str, aws_client: Any) -> GuardedClient:
    """A boto3 client whose calls go through the dependency's breaker."""
    from memtool.runtime.guarded import aws_client_behind

    return aws_client_behind(breakers().get(dependency), aws_client)


def guarded_index(index: VectorIndex) -> VectorIndex:
    """The vector index behind the "opensearch" breaker (an open circuit reads as IndexUnavailable)."""
    from memtool.runtime.guarded import index_behind

    return index_behind(breakers().get("opensearch"), index)


def guarded_warehouse(built: Warehouse) -> Warehouse:
    """Redshift behind the "redshift" breaker: only outages count, never a bad SQL."""
    from memtool.runtime.guarded import warehouse_behind

    return warehouse_behind(breakers().get("redshift"), built)


def local_sandbox() -> LocalProcessSandbox:
    from memtool.analysis.sandbox.local import LocalProcessSandbox

    settings = get_settings()
    return LocalProcessSandbox(memory_bytes=settings.sandbox_memory_mb << 20, cpu_seconds=max(1, int(settings.sandbox_timeout_seconds)))


@once
def sandbox() -> ResilientSandbox:
    """E2B behind its breaker with the local sandbox as fallback, or the local sandbox."""
    from memtool.analysis.code_interpreter import ResilientSandbox

    settings = get_settings()
    if settings.sandbox != "e2b":
        return ResilientSandbox(local_sandbox())
    from memtool.analysis.sandbox.e2b import E2BSandbox

    if not settings.e2b_secret_arn:
        raise RuntimeError("MEMTOOL_SANDBOX=e2b needs MEMTOOL_E2B_SECRET_ARN")
    from memtool.runtime.aws import client

    secret = client("secretsmanager", settings).get_secret_value(SecretId=settings.e2b_secret_arn)["SecretString"]
    api_key = secret.strip()
    if api_key.startswith("{"):
        import json

        api_key = str(json.loads(api_key).get("api_key") or json.loads(api_key).get("E2B_API_KEY") or "")
    return ResilientSandbox(E2BSandbox(api_key=api_key), fallback=local_sandbox, breaker=breakers().get("e2b"))


@once
def tool_registry() -> ToolRegistry:
    """The code interpreter and the ML tools (their libraries load on first call)."""
    from memtool.analysis.code_interpreter import code_interpreter_tool
    from memtool.analysis.ml.registry import ml_tools
    from memtool.tools.base import ToolRegistry

    settings = get_settings()
    return ToolRegistry([code_interpreter_tool(sandbox, timeout_seconds=settings.sandbox_timeout_seconds), *ml_tools()])


@once
def tool_executor() -> ToolExecutor:
    """Over the registry, with the breakers (one per process: its slots bound the CPU)."""
    from memtool.tools.executor import ToolExecutor

    return ToolExecutor(tool_registry(), breakers=breakers(), max_parallel=get_settings().tool_max_parallel)


def reset() -> None:
    """Forget every built adapter (closing the ones that hold files) so settings apply afresh."""
    _adapters.reset()


def fewshot_library() -> FewshotLibrary:
    """The few-shot library on the process's record store and embedder.

    It caches the embeddings of approved examples, so it lives as long as the adapters it was
    built on: reset(), new settings or another clock build a new one. Candidates recorded without
    their masked text are masked with the planner's catalog and entity values (built on first
    need: listing and reviewing never touch the warehouse).
    """
    from memtool.cache.fewshots import FewshotLibrary

    store, embeds, settings = memory_store(), embedder(), get_settings()

    def mask(question: str, tenant: str) -> str:
        from memtool.semantic.masking import mask_question

        return mask_question(question_parser(tenant).recognise(question, today=today())).text

    key = ("fewshot-library", id(store), id(embeds), id(_clock), id(settings))
    return _per_key(key, lambda: FewshotLibrary(store, embeds, clock(), settings, masker=mask))


on_settings_change(reset)  # new settings: forget every adapter built under the old ones
