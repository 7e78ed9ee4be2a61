"""The memory table's items on DynamoDB (``memory.dynamodb_store``): their keys, the PynamoDB
model, and the mapping of a record to its items and of an item back to its record.

One table, items of three types in a partition per tenant and owner, so no key a caller can
build reaches another tenant's or user's items:

    pk = T#<tenant>#O#<owner>
    sk = M#<id>                      head: the current version (gsi1 by_kind lists heads)
    sk = V#<id>#<version:08d>        snapshot of every version, for history
    sk = S#<kind>#<key>              slot: which memory holds a slot-like key
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pynamodb.attributes import (
    JSONAttribute,
    ListAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    UTCDateTimeAttribute,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from memtool.memory.records import (
    Credit,
    CreditEntry,
    IndexState,
    MemoryKind,
    MemoryRecord,
    MemoryScope,
    MemoryStatus,
    Provenance,
)
from memtool.memory.store import Partition, UndecodableRecord


def _sessions_that_share_one_model_loader() -> None:
    """PynamoDB makes a botocore session per connection and per thread (botocore's sessions are not
    thread-safe), and each session loads DynamoDB's service model and the endpoint rules from
    their JSON files again on its first client: some 110 of a new client's 125 ms. The sessions it
    makes here read them through one loader for the process, which caches what it has parsed (the
    same sharing one session's own clients have). Each session, its clients and its credentials
    stay its own."""
    import threading

    import botocore.loaders
    import botocore.session
    import pynamodb.connection.base

    if getattr(pynamodb.connection.base.get_session, "memtool_shared_loader", False):
        return
    loader: list[botocore.loaders.Loader] = []
    lock = threading.Lock()

    def get_session() -> botocore.session.Session:
        session = botocore.session.get_session()
        with lock:
            if not loader:
                loader.append(botocore.loaders.create_loader(session.get_config_variable("data_path")))
        session.register_component("data_loader", loader[0])
        return session

    get_session.memtool_shared_loader = True  # type: ignore[attr-defined]
    pynamodb.connection.base.get_session = get_session


_sessions_that_share_one_model_loader()

HEAD, VERSION, SLOT = "head", "version", "slot"
BY_KIND_INDEX = "by_kind"


def partition_key(where: Partition) -> str:
    return f"T#{where.tenant}#O#{where.owner}"


def partition_of(pk: str) -> tuple[str, str] | None:
    """(tenant, owner) of a partition key, None for one that is not ``T#<tenant>#O#<owner>``."""
    if not pk.startswith("T#") or "#O#" not in pk:
        return None
    tenant, _, owner = pk[2:].partition("#O#")
    return tenant, owner


def head_key(memory_id: str) -> str:
    return f"M#{memory_id}"


def version_key(memory_id: str, version: int) -> str:
    return f"V#{memory_id}#{version:08d}"


def slot_key(kind: MemoryKind, key: str) -> str:
    return f"S#{kind.value}#{key}"


def kind_partition_key(where: Partition, kind: MemoryKind) -> str:
    return f"{partition_key(where)}#K#{kind.value}"


class ByKindIndex(GlobalSecondaryIndex["MemoryItem"]):
    class Meta:
        index_name = BY_KIND_INDEX
        projection = AllProjection()

    gsi1pk = UnicodeAttribute(hash_key=True)
    gsi1sk = UnicodeAttribute(range_key=True)


class MemoryItem(Model):
    """Every item of the memory table; ``item_type`` says which of the three it is."""

    class Meta:
        table_name = "unbound"  # bound per store by memory_item_for()

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    item_type = UnicodeAttribute()
    gsi1pk = UnicodeAttribute(null=True)
    gsi1sk = UnicodeAttribute(null=True)

    memory_id = UnicodeAttribute()
    tenant = UnicodeAttribute()
    owner = UnicodeAttribute()
    kind = UnicodeAttribute()
    key = UnicodeAttribute(null=True)
    content = UnicodeAttribute(null=True)
    value = JSONAttribute(null=True)
    source_text = UnicodeAttribute(null=True)
    scope = UnicodeAttribute(null=True)
    status = UnicodeAttribute(null=True)
    status_reason = UnicodeAttribute(null=True)
    version = NumberAttribute(null=True)
    credit_uses = NumberAttribute(default=0)
    credit_successes = NumberAttribute(default=0)
    credit_failures = NumberAttribute(default=0)
    credit_feedback_score = NumberAttribute(default=0)
    credit_recent = JSONAttribute(null=True)  # list of CreditEntry as JSON; absent when empty
    confidence = NumberAttribute(null=True)
    provenance = JSONAttribute(null=True)
    session_id = UnicodeAttribute(null=True)
    # pynamodb types `of` as the element's Python type (Type[_T]) though it takes the element's
    # Attribute class: the type argument says what the list holds.
    tags = ListAttribute[str](of=UnicodeAttribute, null=True)  # type: ignore[arg-type]
    created_at = UTCDateTimeAttribute(null=True)
    updated_at = UTCDateTimeAttribute(null=True)
    last_used_at = UTCDateTimeAttribute(null=True)
    expires_at = TTLAttribute(null=True)
    index_state = UnicodeAttribute(null=True)
    redactions = JSONAttribute(null=True)

    by_kind = ByKindIndex()

    # Why the item could not be decoded; None for every item that could.
    decode_error: str | None = None

    @classmethod
    def from_raw_data(cls, data: dict[str, Any]) -> MemoryItem:
        """Decode an item; one that does not decode comes back with only its plain keys set.

        PynamoDB decodes items inside its query iterator, so one bad item would end a whole
        listing; instead it becomes an item that ``to_record`` refuses and listings skip, and
        that ``forget`` can still remove (it needs only keys, kind, key and version).
        """
        try:
            return super().from_raw_data(data)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            item = cls()
            for name in ("pk", "sk", "item_type", "memory_id", "tenant", "owner", "kind", "key"):
                raw = data.get(name)
                if isinstance(raw, dict) and isinstance(raw.get("S"), str):
                    setattr(item, name, raw["S"])
            raw_version = data.get("version")
            if isinstance(raw_version, dict):
                try:
                    item.version = int(raw_version.get("N", ""))
                except ValueError:
                    pass
            raw_expiry = data.get("expires_at")
            if isinstance(raw_expiry, dict):
                try:
                    item.expires_at = datetime.fromtimestamp(int(raw_expiry.get("N", "")), UTC)
                except (ValueError, OverflowError, OSError):
                    pass
            item.decode_error = f"{type(exc).__name__}: {exc}"
            return item


def memory_item_for(
    table_name: str,
    region: str,
    host: str | None = None,
    aws_access_key_id: str | None = None,
    aws_secret_access_key: str | None = None,
) -> type[MemoryItem]:
    """A MemoryItem model bound to one table and endpoint (tests bind one per test)."""
    meta = type(
        "Meta",
        (),
        {
            "table_name": table_name,
            "region": region,
            "host": host,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "max_retry_attempts": 3,
        },
    )
    return type("BoundMemoryItem", (MemoryItem,), {"Meta": meta, "__module__": __name__})


def to_record(item: MemoryItem) -> MemoryRecord:
    """The record an item holds; ``UndecodableRecord`` when it holds none."""
    if item.decode_error is not None:
        raise UndecodableRecord(item.memory_id or "?", item.decode_error)
    try:
        return _decode_item(item)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
        raise UndecodableRecord(item.memory_id or "?", f"{type(exc).__name__}: {exc}") from exc


def _decode_item(item: MemoryItem) -> MemoryRecord:
    return MemoryRecord(
        id=item.memory_id,
        tenant=item.tenant,
        owner=item.owner,
        kind=MemoryKind(item.kind),
        key=item.key,
        content=item.content or "",
        value=item.value,
        source_text=item.source_text,
        scope=MemoryScope(item.scope),
        status=MemoryStatus(item.status),
        status_reason=item.status_reason,
        version=int(item.version),
        credit=Credit(
            uses=int(item.credit_uses),
            successes=int(item.credit_successes),
            failures=int(item.credit_failures),
            feedback_score=float(item.credit_feedback_score),
            recent=[CreditEntry.model_validate(entry) for entry in item.credit_recent or []],
        ),
        confidence=float(item.confidence if item.confidence is not None else 1.0),
        provenance=Provenance.model_validate(item.provenance or {}),
        session_id=item.session_id,
        tags=list(item.tags or []),
        created_at=item.created_at,
        updated_at=item.updated_at,
        last_used_at=item.last_used_at,
        expires_at=item.expires_at,
        index_state=IndexState(item.index_state or IndexState.PENDING),
        redactions=dict(item.redactions or {}),
    )


def recent_json(credit: Credit) -> list[dict[str, Any]] | None:
    """The credit ledger as the item holds it; None (no attribute) when empty, as on old items."""
    return [entry.model_dump(mode="json") for entry in credit.recent] or None


def record_item(model: type[MemoryItem], record: MemoryRecord, sk: str, item_type: str) -> MemoryItem:
    """The item of ``record`` under sort key ``sk``: its head (indexed by kind) or a snapshot."""
    where = Partition(record.tenant, record.owner)
    item = model(
        pk=partition_key(where),
        sk=sk,
        item_type=item_type,
        memory_id=record.id,
        tenant=record.tenant,
        owner=record.owner,
        kind=record.kind.value,
        key=record.key,
        content=record.content,
        value=record.value,
        source_text=record.source_text,
        scope=record.scope.value,
        status=record.status.value,
        status_reason=record.status_reason,
        version=record.version,
        credit_uses=record.credit.uses,
        credit_successes=record.credit.successes,
        credit_failures=record.credit.failures,
        credit_feedback_score=record.credit.feedback_score,
        credit_recent=recent_json(record.credit),
        confidence=record.confidence,
        provenance=record.provenance.model_dump(mode="json"),
        session_id=record.session_id,
        tags=record.tags or None,
        created_at=record.created_at,
        updated_at=record.updated_at,
        last_used_at=record.last_used_at,
        expires_at=record.expires_at,
        index_state=record.index_state.value,
        redactions=record.redactions or None,
    )
    if item_type == VERSION:
        # Snapshots live as long as their record: reads check the head's expiry, and the
        # indexer removes a record's snapshots when DynamoDB's TTL removes its head.
        item.expires_at = None
    if item_type == HEAD:
        item.gsi1pk = kind_partition_key(where, record.kind)
        item.gsi1sk = f"{record.updated_at.isoformat()}#{record.id}"
    return item


def slot_item(model: type[MemoryItem], record: MemoryRecord) -> MemoryItem:
    """The slot item that says which memory holds ``record``'s key."""
    assert record.key is not None
    return model(
        pk=partition_key(Partition(record.tenant, record.owner)),
        sk=slot_key(record.kind, record.key),
        item_type=SLOT,
        memory_id=record.id,
        tenant=record.tenant,
        owner=record.owner,
        kind=record.kind.value,
        key=record.key,
    )
