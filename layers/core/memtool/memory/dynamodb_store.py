"""The record store on DynamoDB (PynamoDB): versioned memories, slots, TTL-aware reads.

One table, items of three types (head, snapshot, slot) in a partition per tenant and owner, so
no key a caller can build reaches another tenant's or user's items: the keys, the PynamoDB model
and the mapping between records and items are in ``memory.dynamodb_items``.

A write is one transaction: the head with a condition on its version (optimistic locking),
the new snapshot, the previous snapshot marked superseded, and the slot when created. Before it,
the record must survive a round trip through its item (a record that cannot be read back is
never stored). An item that cannot be decoded all the same (written by hand, or by another
version) makes single reads fail with ``UndecodableRecord``; listings skip and report it.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.transactions import TransactWrite

from memtool.errors import NotFound, ValidationFailed, VersionConflict
from memtool.memory.dynamodb_items import BY_KIND_INDEX as BY_KIND_INDEX
from memtool.memory.dynamodb_items import (
    HEAD,
    VERSION,
    MemoryItem,
    head_key,
    kind_partition_key,
    partition_key,
    partition_of,
    recent_json,
    record_item,
    slot_item,
    slot_key,
    to_record,
    version_key,
)
from memtool.memory.dynamodb_items import SLOT as SLOT
from memtool.memory.dynamodb_items import ByKindIndex as ByKindIndex
from memtool.memory.dynamodb_items import memory_item_for as memory_item_for
from memtool.memory.records import (
    Credit,
    IndexState,
    MemoryDraft,
    MemoryKind,
    MemoryPatch,
    MemoryRecord,
    MemoryStatus,
)
from memtool.memory.store import (
    ForgetOutcome,
    MemoryPage,
    Partition,
    UndecodableRecord,
    WriteOutcome,
    credited,
    first_version,
    forgotten,
    next_version,
    report_skipped,
    same_content,
    storable_json,
    supersede_patch,
)

_TIMES = {"created_at", "updated_at", "last_used_at", "expires_at"}
# A head's credit is a compare-and-swap on its item: under contention a writer re-reads and tries
# again, after a short jittered pause, this many times before it gives up with VersionConflict.
CAS_ATTEMPTS = 20
CAS_PAUSE_SECONDS = 0.01  # the first pause is up to this; each later one may be twice as long,
CAS_PAUSE_DOUBLINGS = 5  # up to 2**5 times this

logger = logging.getLogger("memtool.memory")


class DynamoMemoryStore:
    """MemoryStore on one DynamoDB table."""

    def __init__(self, model: type[MemoryItem], connection: Connection) -> None:
        self._model = model
        self._connection = connection

    # ---- items ----------------------------------------------------------------------------

    def _load(self, pk: str, sk: str) -> MemoryItem | None:
        try:
            return self._model.get(pk, sk, consistent_read=True)
        except DoesNotExist:
            return None

    def _head(self, where: Partition, memory_id: str, now: datetime) -> MemoryItem:
        item = self._load(partition_key(where), head_key(memory_id))
        if item is None or (item.expires_at is not None and item.expires_at <= now):
            raise NotFound(f"memory {memory_id} not found", field="id")
        if item.decode_error is not None and item.version is None:
            raise UndecodableRecord(memory_id, item.decode_error)
        return item

    def record_from_image(self, image: dict) -> MemoryRecord | None:
        """A head item from a stream image (DynamoDB JSON) as a record; None for other items."""
        if image.get("item_type", {}).get("S") != HEAD:
            return None
        return to_record(self._model.from_raw_data(image))

    def _ensure_storable(self, record: MemoryRecord) -> None:
        """Refuse a record that would not read back, from JSON or from its DynamoDB item."""
        storable_json(record)
        item = record_item(self._model, record, head_key(record.id), HEAD)
        try:
            back = to_record(self._model.from_raw_data(item.serialize()))
        except UndecodableRecord as exc:
            raise ValidationFailed(f"value cannot be stored: it would not read back ({exc.reason[:120]})", field="value") from exc
        # Times are left out: DynamoDB holds them in UTC (the TTL attribute in whole seconds), so
        # they read back as the same instant, written differently.
        stored = back.model_dump(mode="json", exclude=_TIMES)
        wanted = record.model_dump(mode="json", exclude=_TIMES)
        if stored != wanted:
            name = next((n for n in wanted if stored.get(n) != wanted[n]), "value")
            raise ValidationFailed(f"{name} cannot be stored: it reads back differently", field=name)

    # ---- writes -------------------------------------------------------------------------

    def create(self, where: Partition, draft: MemoryDraft, now: datetime) -> WriteOutcome:
        if draft.key is not None:
            slot = self._load(partition_key(where), slot_key(draft.kind, draft.key))
            if slot is not None:
                return self._supersede_slot(where, slot.memory_id, draft, now)
        record = first_version(where, draft, now)
        self._ensure_storable(record)
        try:
            with TransactWrite(connection=self._connection) as tx:
                tx.save(record_item(self._model, record, head_key(record.id), HEAD), condition=self._model.pk.does_not_exist())
                tx.save(record_item(self._model, record, version_key(record.id, 1), VERSION), condition=self._model.pk.does_not_exist())
                if record.key is not None:
                    tx.save(slot_item(self._model, record), condition=self._model.pk.does_not_exist())
        except TransactWriteError as exc:
            if record.key is not None and _failed_on(exc, index=2):
                # Another writer created the slot between our read and our write: supersede it.
                slot = self._load(partition_key(where), slot_key(record.kind, record.key))
                if slot is not None:
                    return self._supersede_slot(where, slot.memory_id, draft, now)
            raise
        return WriteOutcome(record=record, created=True)

    def _supersede_slot(self, where: Partition, memory_id: str, draft: MemoryDraft, now: datetime) -> WriteOutcome:
        head = self._load(partition_key(where), head_key(memory_id))
        if head is None:  # a slot left behind by an interrupted forget: drop it and start over
            self._model(pk=partition_key(where), sk=slot_key(draft.kind, draft.key or "")).delete()
            return self.create(where, draft, now)
        try:
            current = to_record(head)
        except UndecodableRecord as exc:
            # A damaged holder must not block its slot (the request names no id to blame): remove
            # it as ``delete_by_id`` does (every version, the slot, then the head, whose REMOVE the
            # stream carries to the indexer) and create the new record afresh. Two steps, as any
            # forget on DynamoDB is: a create that fails after the removal can simply be retried.
            logger.warning(
                "slot %s/%s of %s/%s was held by undecodable memory %s (%s); removing it and creating afresh",
                draft.kind.value, draft.key, where.tenant, where.owner, memory_id, exc.reason,
            )
            self.delete_by_id(where, memory_id)
            return self.create(where, draft, now)
        patch = supersede_patch(draft)
        if not current.is_expired(now) and same_content(current, patch):
            return WriteOutcome(record=current, created=False, unchanged=True)
        outcome = self._write_version(current, patch, now)
        return WriteOutcome(record=outcome.record, created=False, superseded=current)

    def update(
        self, where: Partition, memory_id: str, patch: MemoryPatch, expected_version: int, now: datetime
    ) -> WriteOutcome:
        current = to_record(self._head(where, memory_id, now))
        if current.version != expected_version:
            raise VersionConflict(
                f"memory {memory_id} is at version {current.version}, not {expected_version}",
                current_version=current.version,
            )
        return self._write_version(current, patch, now)

    def _write_version(self, current: MemoryRecord, patch: MemoryPatch, now: datetime) -> WriteOutcome:
        """Write a new version on top of ``current`` as read earlier; stale → VersionConflict.

        The head is put whole, credit included, so its condition holds the credit read as well as
        the version. A credit update since the read is not a conflict (the patch does not concern
        credit): the version is made again on the head as it is now, which keeps that credit.
        """
        for attempt in range(CAS_ATTEMPTS):
            try:
                return WriteOutcome(record=self._put_version(current, patch, now), created=False)
            except _CreditMoved as moved:
                current = moved.head
            _pause(attempt)
        raise VersionConflict(
            f"memory {current.id} kept changing while writing version {current.version + 1}",
            current_version=current.version,
        )

    def _put_version(self, current: MemoryRecord, patch: MemoryPatch, now: datetime) -> MemoryRecord:
        """One transaction for the new version, which it returns.

        ``_CreditMoved`` (with the head as it is now) when only the head's credit changed since
        ``current`` was read; VersionConflict when another version was written or the head is gone.
        """
        new = next_version(current, patch, now)
        self._ensure_storable(new)
        previous_snapshot = self._model(
            pk=partition_key(Partition(current.tenant, current.owner)),
            sk=version_key(current.id, current.version),
        )
        try:
            with TransactWrite(connection=self._connection) as tx:
                tx.save(
                    record_item(self._model, new, head_key(new.id), HEAD),
                    condition=(self._model.version == current.version) & self._credit_is(current.credit),
                )
                tx.save(record_item(self._model, new, version_key(new.id, new.version), VERSION), condition=self._model.pk.does_not_exist())
                tx.update(
                    previous_snapshot,
                    actions=[self._model.status.set(MemoryStatus.SUPERSEDED.value)],
                    condition=self._model.pk.exists(),
                )
        except TransactWriteError as exc:
            if _failed_on(exc, index=0) or _failed_on(exc, index=1) or _conflicted(exc):
                latest = self._load(previous_snapshot.pk, head_key(current.id))
                head_raced = _failed_on(exc, index=0) or _conflicted(exc)
                if head_raced and latest is not None and latest.version is not None and int(latest.version) == current.version:
                    raise _CreditMoved(to_record(latest)) from exc
                raise VersionConflict(
                    f"memory {current.id} changed while writing version {new.version}",
                    current_version=int(latest.version) if latest is not None and latest.version is not None else None,
                ) from exc
            raise
        return new

    def update_credit(
        self,
        where: Partition,
        memory_id: str,
        compute: Callable[[MemoryRecord], Credit],
        used_at: datetime,
        now: datetime,
    ) -> MemoryRecord:
        """Credit the head in place: one conditional UpdateItem per attempt (compare-and-swap).

        The condition holds the version and the credit as read, so a write that raced another
        credit update or a new version fails, and is computed again on a fresh read. Only the
        head changes: no new version, no snapshot (the stream carries a MODIFY with the same
        version, which the indexer ignores).
        """
        for attempt in range(CAS_ATTEMPTS):
            head = self._head(where, memory_id, now)
            current = to_record(head)
            written = credited(current, compute(current), used_at)
            if written is None:
                return current
            self._ensure_storable(written)
            credit = written.credit
            assert written.last_used_at is not None  # credited() stamps the use
            try:
                self._model(pk=partition_key(where), sk=head_key(memory_id)).update(
                    actions=[
                        self._model.credit_uses.set(credit.uses),
                        self._model.credit_successes.set(credit.successes),
                        self._model.credit_failures.set(credit.failures),
                        self._model.credit_feedback_score.set(credit.feedback_score),
                        self._recent_action(credit),
                        self._model.last_used_at.set(written.last_used_at),
                    ],
                    condition=(self._model.version == current.version) & self._credit_is(current.credit),
                )
            except UpdateError as exc:
                if exc.cause_response_code not in _RACED:
                    raise
                _pause(attempt)
                continue
            return written
        raise VersionConflict(
            f"memory {memory_id} kept changing while crediting it; try again",
            current_version=current.version,
        )

    def _credit_is(self, credit: Credit) -> Condition:
        """The head's credit attributes hold exactly ``credit`` (the compare of compare-and-swap)."""
        recent = recent_json(credit)
        return (
            (self._model.credit_uses == credit.uses)
            & (self._model.credit_successes == credit.successes)
            & (self._model.credit_failures == credit.failures)
            & (self._model.credit_feedback_score == credit.feedback_score)
            & (self._model.credit_recent.does_not_exist() if recent is None else self._model.credit_recent == recent)
        )

    def _recent_action(self, credit: Credit) -> Any:
        recent = recent_json(credit)
        return self._model.credit_recent.remove() if recent is None else self._model.credit_recent.set(recent)

    def forget(self, where: Partition, memory_id: str) -> ForgetOutcome:
        pk = partition_key(where)
        head = self._load(pk, head_key(memory_id))
        snapshots = list(
            self._model.query(pk, self._model.sk.startswith(f"V#{memory_id}#"), consistent_read=True)
        )
        if head is None and not snapshots:
            raise NotFound(f"memory {memory_id} not found", field="id")
        doomed = list(snapshots)
        if head is not None and head.key is not None:
            # Found by the memory id, not by the head's kind and key: a damaged head may name a
            # kind that no slot has, and its slot must go all the same.
            doomed.extend(self._slots_of(pk, memory_id))
        # The head goes last: until it is gone a failed forget can simply be retried.
        for chunk in _chunks(doomed, 99):
            with TransactWrite(connection=self._connection) as tx:
                for item in chunk:
                    tx.delete(item)
        if head is not None:
            head.delete()
        versions = sorted(int(s.version) for s in snapshots if s.version is not None)
        if head is not None and head.version is not None:
            last_version = int(head.version)
        else:
            last_version = versions[-1] if versions else 0
        return forgotten(where, memory_id, versions, last_version)

    def delete_by_id(self, where: Partition, memory_id: str) -> ForgetOutcome:
        """Admin delete; ``forget`` never decodes a record, so it is the same operation."""
        return self.forget(where, memory_id)

    def _slots_of(self, pk: str, memory_id: str) -> list[MemoryItem]:
        return list(
            self._model.query(
                pk,
                self._model.sk.startswith("S#"),
                filter_condition=self._model.memory_id == memory_id,
                consistent_read=True,
            )
        )

    def mark_indexed(self, where: Partition, memory_id: str, version: int, state: IndexState) -> bool:
        """Record the index state of a version; a head that moved on is left alone."""
        head = self._model(pk=partition_key(where), sk=head_key(memory_id))
        try:
            head.update(
                actions=[self._model.index_state.set(state.value)],
                condition=(self._model.version == version),
            )
        except UpdateError as exc:
            if exc.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def unindexed(self, before: datetime, now: datetime, limit: int = 500) -> list[MemoryRecord]:
        """Heads whose current version is not indexed and was written before ``before``: the ones
        the stream indexer missed (maintenance's ReconcileIndex). A daily Scan of heads only."""
        found: list[MemoryRecord] = []
        condition = (
            (self._model.item_type == HEAD)
            & ((self._model.index_state != IndexState.INDEXED.value) | self._model.index_state.does_not_exist())
            & (self._model.updated_at < before)
        )
        for item in self._model.scan(filter_condition=condition, page_size=200):
            if item.decode_error is not None or (item.expires_at is not None and item.expires_at <= now):
                continue
            try:
                found.append(to_record(item))
            except UndecodableRecord:
                continue
            if len(found) >= limit:
                break
        return found

    def purge_snapshots(self, where: Partition, memory_id: str) -> int:
        """Delete the snapshots (and slot) of a record whose head DynamoDB's TTL removed."""
        pk = partition_key(where)
        doomed = list(self._model.query(pk, self._model.sk.startswith(f"V#{memory_id}#"), consistent_read=True))
        doomed.extend(self._slots_of(pk, memory_id))
        for chunk in _chunks(doomed, 25):
            with self._model.batch_write() as batch:
                for item in chunk:
                    batch.delete(item)
        return len(doomed)

    # ---- reads --------------------------------------------------------------------------

    def get(self, where: Partition, memory_id: str, now: datetime, version: int | None = None) -> MemoryRecord:
        head = self._head(where, memory_id, now)
        if version is None or version == int(head.version):
            return to_record(head)
        if version < 1 or version > int(head.version):
            raise NotFound(f"memory {memory_id} has no version {version}", field="version")
        snapshot = self._load(partition_key(where), version_key(memory_id, version))
        if snapshot is None:
            raise NotFound(f"memory {memory_id} has no version {version}", field="version")
        return to_record(snapshot).model_copy(update={"expires_at": head.expires_at})

    def get_many(
        self, tenant: str, refs: Sequence[tuple[str, str]], skipped: list[str] | None = None
    ) -> dict[str, MemoryRecord]:
        """Heads by (owner, memory id) within one tenant, consistent; missing ones are absent.

        A head that cannot be decoded is left out, and its id appended to ``skipped``.
        """
        keys = {(partition_key(Partition(tenant, owner)), head_key(mid)) for owner, mid in refs}
        found: dict[str, MemoryRecord] = {}
        for record in _decodable(self._model.batch_get(list(keys), consistent_read=True), skipped):
            found[record.id] = record
        return found

    def heads(
        self,
        where: Partition,
        kinds: Sequence[MemoryKind] | None = None,
        limit: int = 2000,
        skipped: list[str] | None = None,
    ) -> list[MemoryRecord]:
        """Up to ``limit`` heads of a partition, newest first (the recall fallback scans these).

        Expired heads are included (recall filters them); undecodable ones go to ``skipped``.
        """
        condition = None
        if kinds:
            condition = self._model.kind.is_in(*[k.value for k in kinds])
        results = self._model.query(
            partition_key(where),
            self._model.sk.startswith("M#"),
            filter_condition=condition,
            scan_index_forward=False,
            limit=limit,
        )
        return list(_decodable(results, skipped))

    def partitions(self, tenant: str | None = None, after: Partition | None = None, limit: int = 500) -> list[Partition]:
        """The partitions that hold heads, in (tenant, owner) order, after ``after``.

        A Scan of the head items' keys (maintenance runs it daily, not a request path): every
        partition key is read, sorted, and the page after the cursor is returned.
        """
        found: set[tuple[str, str]] = set()
        condition = self._model.item_type == HEAD
        if tenant is not None:
            condition = condition & self._model.pk.startswith(f"T#{tenant}#O#")
        for item in self._model.scan(filter_condition=condition, attributes_to_get=["pk"], page_size=500):
            parsed = partition_of(item.pk)
            if parsed is not None and (tenant is None or parsed[0] == tenant):
                found.add(parsed)
        ordered = sorted(found)
        if after is not None:
            ordered = [p for p in ordered if p > (after.tenant, after.owner)]
        return [Partition(t, o) for t, o in ordered[:limit]]

    def get_slot(self, where: Partition, kind: MemoryKind, key: str, now: datetime) -> MemoryRecord | None:
        """The live record holding a slot key, or None."""
        slot = self._load(partition_key(where), slot_key(kind, key))
        if slot is None:
            return None
        try:
            return self.get(where, slot.memory_id, now)
        except NotFound:
            return None

    def history(self, where: Partition, memory_id: str, now: datetime) -> list[MemoryRecord]:
        head = self._head(where, memory_id, now)
        snapshots = self._model.query(
            partition_key(where), self._model.sk.startswith(f"V#{memory_id}#"), consistent_read=True
        )
        return [to_record(s).model_copy(update={"expires_at": head.expires_at}) for s in snapshots]

    def list(
        self,
        where: Partition,
        now: datetime,
        kind: MemoryKind | None = None,
        status: MemoryStatus | None = None,
        cursor: str | None = None,
        limit: int = 20,
    ) -> MemoryPage:
        live = self._model.expires_at.does_not_exist() | (self._model.expires_at > now)
        if status is not None:
            live = live & (self._model.status == status.value)
        start = _decode_cursor(
            cursor, partition_key(where), kind_partition_key(where, kind) if kind is not None else None
        )
        if kind is not None:
            results = self._model.by_kind.query(
                kind_partition_key(where, kind),
                filter_condition=live,
                scan_index_forward=False,
                limit=limit,
                last_evaluated_key=start,
            )
        else:
            results = self._model.query(
                partition_key(where),
                self._model.sk.startswith("M#"),
                filter_condition=live,
                scan_index_forward=False,
                limit=limit,
                last_evaluated_key=start,
                consistent_read=True,
            )
        skipped: list[str] = []
        items = list(_decodable(results, skipped))
        last = results.last_evaluated_key
        # A full page (skipped items count: the query consumed them) may have more behind it.
        full = len(items) + len(skipped) == limit
        return MemoryPage(items=items, next_cursor=_encode_cursor(last) if last and full else None, skipped=skipped)


def _decodable(items: Iterable[MemoryItem], skipped: list[str] | None) -> Iterator[MemoryRecord]:
    """The records of ``items``; one that cannot be decoded is logged, reported and left out."""
    for item in items:
        try:
            yield to_record(item)
        except UndecodableRecord as exc:
            report_skipped(exc.memory_id, exc.reason, skipped)


class _CreditMoved(Exception):
    """A version write lost only to a credit update: same version, so it may simply be redone."""

    def __init__(self, head: MemoryRecord) -> None:
        super().__init__(f"the credit of memory {head.id} changed")
        self.head = head


# A conditional write that lost to another writer of the same item.
_RACED = frozenset({"ConditionalCheckFailedException", "TransactionConflictException"})


def _pause(attempt: int) -> None:
    """A short jittered backoff, so writers that raced do not race again in step."""
    time.sleep(random.uniform(0, CAS_PAUSE_SECONDS * 2 ** min(attempt, CAS_PAUSE_DOUBLINGS)))  # not crypto


def _conflicted(exc: TransactWriteError) -> bool:
    """DynamoDB cancels a transaction that races another one on the same item (TransactionConflict):
    for a versioned write that is a stale version too, and the caller may retry."""
    return any(reason is not None and reason.code == "TransactionConflict" for reason in exc.cancellation_reasons or [])


def _failed_on(exc: TransactWriteError, index: int) -> bool:
    reasons = exc.cancellation_reasons or []
    reason = reasons[index] if index < len(reasons) else None
    return reason is not None and reason.code == "ConditionalCheckFailed"


def _chunks(items: list[MemoryItem], size: int) -> Iterator[list[MemoryItem]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _encode_cursor(key: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode().rstrip("=")


_HEAD_CURSOR = frozenset({"pk", "sk"})  # LastEvaluatedKey of the head query on the table
_KIND_CURSOR = frozenset({"pk", "sk", "gsi1pk", "gsi1sk"})  # of the by_kind query: index and table keys


def _decode_cursor(cursor: str | None, expected_pk: str, expected_kind_pk: str | None = None) -> dict | None:
    """An opaque cursor is only honoured inside the listing that issued it.

    It must be exactly a LastEvaluatedKey of that listing: the key attributes it has, each a
    string (``{"S": ...}``) that DynamoDB can take; anything else is a ValidationFailed on
    ``cursor``, never a malformed ExclusiveStartKey sent to DynamoDB (a server error).
    """
    if not cursor:
        return None
    refused = ValidationFailed("cursor is not one this API issued", field="cursor")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode()))
    except (binascii.Error, ValueError, TypeError, UnicodeError, RecursionError, OverflowError) as exc:
        raise refused from exc
    names = _HEAD_CURSOR if expected_kind_pk is None else _KIND_CURSOR
    if not isinstance(key, dict) or set(key) != names:
        raise refused
    for value in key.values():
        if not isinstance(value, dict) or set(value) != {"S"} or not isinstance(value["S"], str):
            raise refused
        try:
            value["S"].encode("utf-8")  # a lone surrogate cannot be sent
        except UnicodeError as exc:
            raise refused from exc
    if key["pk"]["S"] != expected_pk or (expected_kind_pk is not None and key["gsi1pk"]["S"] != expected_kind_pk):
        raise ValidationFailed("cursor belongs to another listing", field="cursor")
    return key
