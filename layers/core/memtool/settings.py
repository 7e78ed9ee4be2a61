"""The one settings model: every MEMTOOL_* variable, validated once at cold start.

Nothing else in memtool reads ``os.environ``. Tests and the local runtime build a
``Settings`` explicitly and install it with :func:`use_settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# docs/architecture.md, Memory: how many of each kind recall injects per route (knowledge: shared definitions).
DEFAULT_RECALL_BUDGETS: dict[str, dict[str, int]] = {
    "nl2sql_query": {"profile": 5, "episodic": 2, "correction": 5, "knowledge": 2, "causal": 2},
    "kpi_lookup": {"profile": 2, "episodic": 0, "correction": 1, "knowledge": 1, "causal": 1},
    "business_knowledge_qa": {"profile": 3, "episodic": 1, "correction": 1, "knowledge": 5, "causal": 0},
    "deep_analysis_workflow": {"profile": 8, "episodic": 8, "correction": 4, "knowledge": 3, "causal": 2},
}


# The kinds recall's per-kind floors apply to.
RECALLED_KINDS = ("profile", "episodic", "correction", "knowledge", "fewshot", "working", "causal", "cache")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMTOOL_", extra="ignore", frozen=True)

    runtime: Literal["aws", "local"] = Field(
        "aws",
        description="'local' trusts X-Memtool-* identity headers; 'aws' trusts only authorizer claims.",
    )
    region: str = Field(
        "us-east-1", validation_alias=AliasChoices("MEMTOOL_REGION", "AWS_REGION", "AWS_DEFAULT_REGION")
    )
    aws_endpoint_url: str | None = Field(None, description="Set by the local runtime (moto server).")
    # Static credentials only for the local runtime's moto server; AWS uses the default chain.
    aws_access_key_id: str | None = None
    aws_secret_access_key: str | None = None
    home: Path = Field(Path(".memtool"), description="State folder of the local runtime.")
    # Set by Lambda itself: in a Lambda function no adapter may read a local file (see _aws_reads_no_local_path).
    lambda_function_name: str | None = Field(None, validation_alias="AWS_LAMBDA_FUNCTION_NAME")

    store: Literal["dynamodb", "sqlite"] | None = Field(
        None,
        description="Record store: 'dynamodb' (AWS, and `memtool serve --store dynamodb` on moto) or "
        "'sqlite' (the local runtime's default). Unset: dynamodb.",
    )
    store_path: Path | None = Field(None, description="SQLite store file; default <home>/state/memtool.sqlite3.")
    indexer_max_attempts: int = Field(5, ge=1, le=100, description="Deliveries of one change before it is a dead letter.")

    memory_table: str = "memtool-memory"
    idempotency_table: str = "memtool-idempotency"
    idempotency_ttl_seconds: int = Field(3600, ge=60)

    tenant_claim: str = "custom:tenant_id"
    roles_claim: str = "cognito:groups"

    max_content_bytes: int = Field(8192, ge=256)

    # Fair use (memtool.memory.budget): each tenant's request budget, a token bucket in the record
    # store that POST /ask and POST /feedback spend; a request over it answers 429 rate_limited with
    # Retry-After. Off by default here (the local runtime, the tests); the template turns it on in
    # AWS (TenantRequestsPerMinute 60, TenantRequestBurst 10).
    tenant_requests_per_minute: int = Field(
        0, ge=0, le=60_000, description="Requests a tenant may make per minute, sustained (the bucket's refill); 0: no budget."
    )
    tenant_request_burst: int = Field(
        10, ge=1, le=10_000, description="Requests a tenant may make at once (the bucket's size), then the per-minute rate."
    )

    # Retrieval: which embedder and which vector index serve recall.
    embedder: Literal["hashing", "bedrock"] = "hashing"
    hashing_dimensions: int = Field(256, ge=16, le=4096)
    bedrock_embedding_dimensions: Literal[256, 512, 1024] = 1024
    vector_index: Literal["embedded", "opensearch", "none"] = Field(
        "embedded", description="'none' leaves recall on its lexical fallback over the record store."
    )
    opensearch_endpoint: str | None = None
    opensearch_service: Literal["es", "aoss"] = "aoss"
    opensearch_index: str = "memtool-memories"
    opensearch_pipeline: str = "memtool-hybrid"
    # Sized against a flow step's 20 s: one request waits at most 3 s, and is retried once.
    opensearch_timeout_seconds: float = Field(3.0, gt=0, le=60, description="Timeout of one OpenSearch request.")
    opensearch_max_retries: int = Field(1, ge=0, le=5, description="Retries of an OpenSearch request that timed out or failed to connect.")
    recall_budgets: dict[str, dict[str, int]] = Field(
        default_factory=lambda: {route: dict(budget) for route, budget in DEFAULT_RECALL_BUDGETS.items()},
        description="route -> memory kind -> how many memories recall injects (JSON).",
    )
    recall_min_candidates: int = Field(40, ge=1, le=1000)
    recall_min_cosine: dict[str, float] = Field(
        default_factory=lambda: dict.fromkeys(RECALLED_KINDS, 0.5),
        description="memory kind -> cosine similarity to the question a candidate needs (or a lexical match on a key term) (JSON).",
    )
    recall_min_score: dict[str, float] = Field(
        default_factory=lambda: dict.fromkeys(RECALLED_KINDS, 0.2),
        description="memory kind -> the final recall score below which a candidate is dropped (JSON).",
    )
    recall_duplicate_cosine: float = Field(0.95, gt=0, le=1, description="Candidates this similar to a better one are collapsed.")

    # Learning: reward fusion, credit, retirement, few-shots.
    reward_env_weight: float = Field(0.7, ge=0, le=1, description="alpha in R = alpha*R_env + beta*R_user.")
    reward_user_weight: float = Field(0.3, ge=0, le=1, description="beta in R = alpha*R_env + beta*R_user.")
    credit_ema_alpha: float = Field(0.3, gt=0, le=1, description="Weight of a new reward in a memory's feedback_score (EMA).")
    retire_below_score: float = Field(
        -0.2, ge=-1, le=1, description="A memory whose feedback_score stays below this (a thumbs-down is worth -0.3) ..."
    )
    retire_after_uses: int = Field(5, ge=1, le=10_000, description="... after this many uses is archived.")
    clarification_confidence: float = Field(0.8, ge=0, le=1, description="Confidence of a correction learned from a clarification reply.")
    fewshot_min_similarity: float = Field(0.95, ge=0, le=1)
    fewshot_min_confidence: float = Field(0.9, ge=0, le=1)
    fewshot_max_fail_count: int = Field(3, ge=0)
    fewshot_top_k: int = Field(3, ge=1, le=20)
    recall_fallback_scan_limit: int = Field(2000, ge=10)

    session_turns: int = Field(10, ge=2, le=100, description="Turns a session keeps; older ones fold into its running summary.")

    # Maintenance (MaintenanceFlow, memtool maintain): decay, archiving, consolidation, capacity.
    decay_floor: float = Field(0.1, ge=0, le=1, description="Stored confidence never decays below this.")
    decay_min_step: float = Field(
        0.1, gt=0, le=1, description="A decay is written (as a new version) once it lowers confidence by at least this much."
    )
    archive_unused_days: int = Field(60, ge=1, le=3650, description="An episodic or causal memory unused this long is archived.")
    archive_low_confidence: float = Field(
        0.3, ge=0, le=1, description="... and one whose confidence decayed below this with a feedback score below retire_below_score."
    )
    consolidate_min_cluster: int = Field(5, ge=2, le=1000, description="Similar episodes needed for one summary.")
    consolidate_similarity: float = Field(0.8, gt=0, le=1, description="Cosine at which two episodes belong to one cluster.")
    capacity_episodic: int = Field(5000, ge=1, description="Active episodic memories kept per user (MEMTOOL_CAPACITY_EPISODIC).")
    capacity_causal: int = Field(500, ge=1, description="Active lessons kept per user or tenant.")
    capacity_cache: int = Field(10_000, ge=1, description="Cached SQL entries kept per user or tenant.")
    capacity_correction: int = Field(2000, ge=1, description="Active corrections kept per user or tenant.")
    maintenance_batch: int = Field(2000, ge=10, le=100_000, description="Heads one maintenance step reads per invocation.")
    maintenance_interval_hours: float = Field(
        24.0, ge=0, le=24 * 30, description="How often the local runtime runs maintenance (0: never; MaintenanceFlow is scheduled in AWS)."
    )

    # Asking: the warehouse, the planner and the flow.
    today: date | None = Field(None, description="Anchor date for the demo warehouse and time words (MEMTOOL_TODAY).")
    warehouse: Literal["duckdb", "redshift", "none"] = Field(
        "duckdb",
        description="'redshift' (MEMTOOL_REDSHIFT_SECRET_ARN), 'duckdb' (a local file) or 'none': data questions then "
        "answer a configuration error that says what to set.",
    )
    warehouse_path: Path | None = Field(None, description="DuckDB file; default <home>/warehouse/demo.duckdb.")
    warehouse_url: str | None = Field(
        None,
        description="The default warehouse as a URL (duckdb:///path.duckdb or postgresql://…), instead of the demo file; "
        "tenants without a stored model then need one (memtool model push).",
    )
    tenants_file: Path | None = Field(
        None, description="YAML mapping each tenant id to {warehouse: URL, model: PATH} (memtool serve --tenants)."
    )
    warehouse_scale: float = Field(1.0, gt=0, le=50)
    warehouse_seed: int = 7
    max_rows: int = Field(1000, ge=1, le=100_000)
    response_rows: int = Field(200, ge=1, le=5000)
    # Inner budgets stay below a flow step's 20 s (AskFlow Task TimeoutSeconds; template.yaml).
    statement_timeout_seconds: float = Field(15.0, gt=0, le=900, description="Statement timeout of a generated query.")
    planner: Literal["rules", "bedrock"] = "rules"
    ask_state_machine_arn: str | None = None
    maintenance_state_machine_arn: str | None = Field(None, description="MaintenanceFlow, which POST /maintenance/run starts in AWS.")
    # The timeout chain (tests/contract/test_timeout_chain.py): API Gateway 29 s > the ask Lambda's
    # 28 s >= connect + read + 1 s; read 25 s > AskFlow's TimeoutSeconds 23 > every step's 20 s.
    # StartSyncExecution is never retried by the client: a retry would start a second flow.
    ask_flow_timeout_seconds: float = Field(
        23.0, gt=0, le=300, description="AskFlow's TimeoutSeconds (statemachines/ask_flow.asl.json): the steps fit their waits into it."
    )
    local_flow_timeout_scale: float = Field(
        10.0,
        ge=1,
        le=100,
        description="The local runtime multiplies the ASL's TimeoutSeconds by this: its flows' steps share one process's CPU.",
    )
    ask_flow_connect_timeout_seconds: float = Field(2.0, gt=0, le=10, description="Connect timeout of StartSyncExecution.")
    ask_flow_read_timeout_seconds: float = Field(
        25.0, gt=0, le=900, description="Read timeout of StartSyncExecution: longer than AskFlow's TimeoutSeconds (23)."
    )
    redshift_secret_arn: str | None = None
    tenant_redshift_secret_prefix: str | None = Field(
        None,
        description="With MEMTOOL_WAREHOUSE=redshift: tenant T reads the Redshift user in the Secrets Manager secret named "
        "<prefix>T; a tenant without one uses MEMTOOL_REDSHIFT_SECRET_ARN.",
    )
    tenant_tables: Annotated[dict[str, list[str]], NoDecode] = Field(
        default_factory=dict,
        description="The warehouse tables each tenant may read, as patterns (lineitem, dim_*, analytics.*), "
        "for tenants on the process's warehouse (JSON: {\"acme\": [\"fact_*\", \"dim_*\"]}; \"*\" for every tenant not "
        "listed). A tenant's model may name only these; a tenants-file entry has its own tables: list. "
        "Required where one warehouse serves several tenants.",
    )
    e2b_secret_arn: str | None = None
    bedrock_planner_model_id: str = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    bedrock_embedding_model_id: str = "amazon.titan-embed-text-v2:0"

    # The SQL semantic cache (memtool.cache.sql_cache).
    cache_enabled: bool = Field(True, description="Serve repeated questions' SQL from the cache (it always runs again).")
    cache_ttl_seconds: int = Field(900, ge=1, le=86_400, description="How long a cached SQL lives.")
    cache_min_similarity: dict[str, float] = Field(
        default_factory=lambda: {"nl2sql_query": 0.92, "kpi_lookup": 0.92},
        description="route -> masked-text similarity a question the rules cannot plan needs to a cached one (JSON).",
    )

    # Diagnosis: classify a failure, test hypotheses by running repairs, keep the verified lesson.
    diagnosis_max_executions: int = Field(
        8, ge=1, le=50, description="Intervention tests one diagnosis may run on the warehouse (its budget)."
    )
    diagnosis_row_cap: int = Field(50, ge=1, le=1000, description="Row cap of an intervention test.")
    diagnosis_timeout_seconds: float = Field(10.0, gt=0, le=300, description="Statement timeout of an intervention test.")
    diagnosis_deadline_seconds: float = Field(
        15.0, gt=0, le=600, description="Wall-clock budget of one diagnosis (its tests stop there; a flow step gets 20 s)."
    )
    diagnosis_tolerance: float = Field(
        0.001, ge=0, le=0.5, description="Relative tolerance when a repaired value is compared with the value the user expected."
    )
    diagnoser: Literal["rules", "bedrock"] = Field(
        "rules", description="'bedrock' adds the Bedrock diagnoser's hypotheses to the rules' (the rules always run)."
    )
    bedrock_diagnoser_model_id: str = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    diagnose_queue: Literal["none", "sqs", "sqlite"] | None = Field(
        None,
        description="Where off-path diagnose events go: 'sqs' (AWS, MEMTOOL_DIAGNOSE_QUEUE_URL), 'sqlite' (the local "
        "runtime, drained into the diagnose handler) or 'none'. Unset: sqs when a queue URL is set, else none.",
    )
    diagnose_queue_url: str | None = None
    diagnose_queue_path: Path | None = Field(None, description="SQLite diagnose queue; default <home>/state/diagnose-queue.sqlite3.")
    diagnose_max_attempts: int = Field(3, ge=1, le=100, description="Deliveries of one diagnose event before it is a dead letter.")

    # Governed knowledge (memtool.knowledge): where the texts of sources live.
    sources_bucket: str | None = Field(
        None,
        description="S3 bucket of source texts (template.yaml, SourcesBucket); unset: files under <home>/state/sources. "
        "The metadata is always in the record store.",
    )

    # Tools and analysis (memtool.tools, memtool.analysis).
    sandbox: Literal["local", "e2b"] = Field(
        "local", description="Code interpreter: 'e2b' (hosted, MEMTOOL_E2B_SECRET_ARN) or 'local' (a separate process with limits)."
    )
    sandbox_timeout_seconds: float = Field(
        15.0, gt=0, le=300, description="Wall clock of one code-interpreter run (the Analyze step gets 20 s)."
    )
    sandbox_memory_mb: int = Field(1024, ge=256, le=8192, description="Address-space limit of a local sandbox run.")
    sandbox_workdir_mb: int = Field(
        64, ge=1, le=4096, description="Bytes a local sandbox run may write in its working directory (MiB); past them it is stopped."
    )
    sandbox_workdir_files: int = Field(
        1000, ge=16, le=100_000, description="Files and folders a local sandbox run may make in its working directory."
    )
    analysis_code_rows: int = Field(
        200, ge=1, le=10_000, description="Results of at most this many rows go to the code interpreter; larger ones to the ML tools."
    )
    tool_max_parallel: int = Field(4, ge=1, le=32, description="Independent tool calls of one turn run at most this many at a time.")
    breaker_failure_threshold: int = Field(
        3,
        ge=1,
        le=100,
        description="Consecutive failures of an outside dependency (Bedrock, OpenSearch, Redshift, E2B) that open its circuit.",
    )
    breaker_cooldown_seconds: float = Field(30.0, gt=0, le=3600, description="How long an open circuit skips its dependency.")

    # The MCP server (`memtool mcp`): whom it acts for. Identity comes from here (or the command's
    # options), never from a tool call's arguments.
    mcp_tenant: str | None = Field(None, description="Tenant the MCP server acts for (MEMTOOL_MCP_TENANT; --tenant).")
    mcp_user: str | None = Field(None, description="User the MCP server acts for (MEMTOOL_MCP_USER; --user).")
    mcp_roles: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Roles of that user, comma-separated (MEMTOOL_MCP_ROLES=curator; --role)."
    )
    mcp_port: int = Field(3001, ge=1, le=65535, description="Port of the MCP server's streamable HTTP transport on 127.0.0.1.")

    @field_validator("tenant_tables", mode="before")
    @classmethod
    def _tenant_tables_json(cls, value: Any) -> Any:
        """MEMTOOL_TENANT_TABLES is JSON; empty (the template's default) grants nothing."""
        if isinstance(value, str):
            import json

            if not value.strip():
                return {}
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"MEMTOOL_TENANT_TABLES must be JSON ({{\"tenant\": [\"table pattern\", ...]}}): {exc}") from None
        return value

    @field_validator("mcp_roles", mode="before")
    @classmethod
    def _comma_separated(cls, roles: Any) -> Any:
        if isinstance(roles, str):
            return [role.strip() for role in roles.split(",") if role.strip()]
        return roles

    @model_validator(mode="after")
    def _aws_reads_no_local_path(self) -> Settings:
        """In a Lambda function a file-backed adapter would read the package's (read-only, empty)
        working directory: refuse it at cold start, naming what to set instead."""
        if self.lambda_function_name is None or self.runtime != "aws":
            return self
        local = self.local_path_adapters()
        if local:
            raise ValueError(
                f"{self.lambda_function_name} runs in AWS but would read local files: {'; '.join(local)}"
            )
        return self

    def local_path_adapters(self) -> list[str]:
        """The adapters these settings choose that read or write a local file (none may in AWS)."""
        local = []
        if self.record_store == "sqlite":
            local.append("MEMTOOL_STORE=sqlite (use dynamodb)")
        if self.warehouse == "duckdb":
            local.append("MEMTOOL_WAREHOUSE=duckdb (use redshift with MEMTOOL_REDSHIFT_SECRET_ARN, or none)")
        if self.vector_index == "embedded":
            local.append("MEMTOOL_VECTOR_INDEX=embedded (use opensearch, or none for the lexical fallback)")
        if self.diagnose_queue_kind == "sqlite":
            local.append("MEMTOOL_DIAGNOSE_QUEUE=sqlite (use sqs)")
        if self.sources_bucket is None:
            local.append("MEMTOOL_SOURCES_BUCKET unset (source texts would be local files; set the SourcesBucket)")
        if self.tenants_file is not None:
            local.append("MEMTOOL_TENANTS_FILE (a local file; in AWS each tenant's model is stored with PUT /model)")
        return local

    @property
    def is_local(self) -> bool:
        return self.runtime == "local"

    @property
    def record_store(self) -> Literal["dynamodb", "sqlite"]:
        return self.store or "dynamodb"

    @property
    def sqlite_path(self) -> Path:
        return self.store_path or self.home / "state" / "memtool.sqlite3"

    @property
    def diagnose_queue_kind(self) -> Literal["none", "sqs", "sqlite"]:
        if self.diagnose_queue is not None:
            return self.diagnose_queue
        return "sqs" if self.diagnose_queue_url else "none"

    @property
    def sources_folder(self) -> Path:
        return self.home / "state" / "sources"

    @property
    def diagnose_queue_file(self) -> Path:
        return self.diagnose_queue_path or self.home / "state" / "diagnose-queue.sqlite3"


_override: Settings | None = None


@lru_cache(maxsize=1)
def _from_environment() -> Settings:
    return Settings()


def get_settings() -> Settings:
    """The settings in force: an installed override, else the environment (read once)."""
    return _override if _override is not None else _from_environment()


# Called after new settings are installed: the container registers its reset here, so that what it
# built under the old settings goes (settings, the ground floor, never imports the container).
_on_change: list[Callable[[], None]] = []


def on_settings_change(callback: Callable[[], None]) -> None:
    if callback not in _on_change:
        _on_change.append(callback)


def use_settings(settings: Settings | None) -> None:
    """Install settings for this process (local runtime, tests); ``None`` restores the environment."""
    global _override
    _override = settings
    for callback in _on_change:
        callback()
