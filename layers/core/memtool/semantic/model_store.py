"""A tenant's semantic model kept as versioned ``knowledge`` in the record store.

One memory per tenant holds it: tenant scope, owner ``TENANT_OWNER``, the slot ``semantic_model``
(so it is always the same memory id). Its ``value`` is the model document as the curator sent
it, its ``content`` a one-line summary. Each put is a new version of that memory: the store's
versions, history and optimistic locking (a stale ``expected_version`` is a ``VersionConflict``)
are the model's. A document is stored only after it parses, its references resolve and the
caller's own check (the warehouse) passes; a refused one leaves the version in force as it was.

Reading the model in force (``active``) reads the head from the store every time, so a new
version is seen at once by every process; only the parse (a 30-40 KB document) is cached, by
(memory id, version), which never changes its meaning.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic_core import to_jsonable_python

from memtool.clock import Clock
from memtool.errors import Forbidden, ModelMissing, NotFound, VersionConflict
from memtool.identity import Identity
from memtool.memory.records import MemoryDraft, MemoryKind, MemoryPatch, MemoryRecord, MemoryScope, MemoryStatus, Provenance, Trigger
from memtool.memory.store import TENANT_OWNER, MemoryStore, Partition, UndecodableRecord
from memtool.semantic.catalog import Catalog
from memtool.semantic.validation import ModelProblem, ModelRejected, parse_for_checks, size_problems

MODEL_KEY = "semantic_model"
MODEL_TAG = "semantic_model"
PARSED_CACHE_SIZE = 64  # parsed versions kept per process (a few tenants, a few versions each)

logger = logging.getLogger("memtool.semantic")

NO_MODEL = (
    "tenant {tenant} has no stored semantic model: draft one from the warehouse with "
    "`memtool model init --warehouse URL > model.yaml`, curate it, and store it with "
    "`memtool model push model.yaml` (a curator; PUT /model)"
)


class StoredModelMissing(NotFound, ModelMissing):
    """No stored model (or no such version of it): a 404 ``model_missing`` that says how to make one."""

    code = "model_missing"


@dataclass(frozen=True)
class ActiveModel:
    model: Catalog
    version: int  # the memory record's version: 1, 2, ...
    model_version: str  # the model's own label (model_version in the document)
    memory_id: str
    updated_by: str
    updated_at: datetime
    document: Mapping[str, Any] | None = field(default=None, compare=False)  # as the curator sent it (pull, diff)


@dataclass(frozen=True)
class ModelVersionInfo:
    version: int
    model_version: str
    updated_by: str
    updated_at: datetime
    summary: str


Validate = Callable[[Catalog], list[ModelProblem]]


class ModelStore:
    def __init__(self, store: MemoryStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._parsed: OrderedDict[tuple[str, int], Catalog] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def store(self) -> MemoryStore:
        return self._store

    @property
    def clock(self) -> Clock:
        return self._clock

    # ---- reads ----------------------------------------------------------------------------

    def active(self, tenant: str) -> ActiveModel | None:
        """The model in force for the tenant, or None when it has none stored.

        A head that does not parse (written beneath this store, e.g. through /memories) never
        takes effect: the newest version that parses stays in force, and a warning says so.
        """
        where = _partition(tenant)
        head = self._head(where)
        if head is None:
            return None
        try:
            return self._active(head)
        except ValueError as exc:
            logger.warning("semantic model %s v%d of %s does not parse: %s", head.id, head.version, tenant, str(exc)[:300])
        for record in reversed(self._store.history(where, head.id, self._clock.now())):
            if record.version < head.version:
                try:
                    return self._active(record)
                except ValueError:
                    continue
        return None

    def get(self, tenant: str, version: int | None = None) -> ActiveModel:
        """The stored model at ``version`` (default: the head); StoredModelMissing when there is none."""
        where = _partition(tenant)
        head = self._head(where)
        if head is None:
            raise StoredModelMissing(NO_MODEL.format(tenant=tenant), field="model")
        record = head
        if version is not None and version != head.version:
            try:
                record = self._store.get(where, head.id, self._clock.now(), version=version)
            except NotFound:
                raise StoredModelMissing(
                    f"the semantic model has no version {version} (it is at version {head.version})", field="version"
                ) from None
        return self._active(record)

    def history(self, tenant: str) -> list[ModelVersionInfo]:
        """Every stored version, oldest first; empty when the tenant has none."""
        where = _partition(tenant)
        head = self._head(where)
        if head is None:
            return []
        return [
            ModelVersionInfo(
                version=r.version,
                model_version=_model_version(r.value),
                updated_by=r.provenance.author or "",
                updated_at=r.updated_at,
                summary=r.content,
            )
            for r in self._store.history(where, head.id, self._clock.now())
        ]

    # ---- writes ---------------------------------------------------------------------------

    def put(
        self,
        tenant: str,
        document: Mapping[str, Any],
        *,
        actor: Identity,
        expected_version: int | None,
        validate: Validate | None = None,
    ) -> ActiveModel:
        """Store ``document`` as the tenant's next model version, or refuse it and change nothing.

        Forbidden for a non-curator; ModelRejected (with every problem) for a document that does
        not parse, is too large or fails ``validate``; VersionConflict when ``expected_version``
        is not the stored version (None or 0: there must be no model yet).
        """
        if not actor.is_curator:
            raise Forbidden("the semantic model is written by curators (role curator or admin)", field="model")
        if actor.tenant != tenant:
            raise Forbidden("a model is written for the caller's own tenant", field="tenant")
        plain = to_jsonable_python(dict(document))
        problems = size_problems(plain)
        if problems:
            raise ModelRejected(problems)
        candidate, problems = parse_for_checks(plain)
        if candidate is not None and validate is not None:
            # Run even when references dangle, so one refusal lists everything that is wrong.
            problems = [*problems, *validate(candidate)]
        if problems or candidate is None:
            raise ModelRejected(problems)
        model = candidate
        where = _partition(tenant)
        head = self._head(where)
        now = self._clock.now()
        provenance = Provenance(trigger=Trigger.EXPLICIT, author=actor.user)
        if head is None:
            if expected_version not in (None, 0):
                raise VersionConflict(
                    f"tenant {tenant} has no stored model yet: send expected_version null (or 0) to create it",
                    current_version=0,
                )
            draft = MemoryDraft(
                kind=MemoryKind.KNOWLEDGE,
                content=_summary(model),
                key=MODEL_KEY,
                value=plain,
                scope=MemoryScope.TENANT,
                status=MemoryStatus.ACTIVE,
                provenance=provenance,
                tags=[MODEL_TAG],
            )
            outcome = self._store.create(where, draft, now)
            if not outcome.created:  # another curator created it a moment before: ours superseded theirs
                logger.warning("semantic model of %s was created twice at once; v%d is %s's", tenant, outcome.record.version, actor.user)
            record = outcome.record
        else:
            if expected_version in (None, 0):
                raise VersionConflict(
                    f"the semantic model is at version {head.version}: send expected_version {head.version} "
                    "(pull it first to see what changed)",
                    current_version=head.version,
                )
            assert expected_version is not None
            patch = MemoryPatch(
                content=_summary(model), value=plain, status=MemoryStatus.ACTIVE, provenance=provenance, tags=[MODEL_TAG]
            )
            record = self._store.update(where, head.id, patch, expected_version, now).record
        self._remember(record, model)
        return _active_of(record, model)

    # ---- inside -----------------------------------------------------------------------------

    def _head(self, where: Partition) -> MemoryRecord | None:
        try:
            return self._store.get_slot(where, MemoryKind.KNOWLEDGE, MODEL_KEY, self._clock.now())
        except UndecodableRecord as exc:
            logger.warning("the semantic model memory %s of %s cannot be decoded", exc.memory_id, where.tenant)
            return None

    def _active(self, record: MemoryRecord) -> ActiveModel:
        """The record as a model in force; the parse is cached by (memory id, version). Raises
        ValueError (pydantic's ValidationError is one) for a value that is not a model."""
        key = (record.id, record.version)
        with self._lock:
            model = self._parsed.get(key)
            if model is not None:
                self._parsed.move_to_end(key)
        if model is None:
            if not isinstance(record.value, dict):
                raise ValueError("the stored value is not a model document")
            model = Catalog.model_validate(record.value)
            self._remember(record, model)
        return _active_of(record, model)

    def _remember(self, record: MemoryRecord, model: Catalog) -> None:
        with self._lock:
            self._parsed[(record.id, record.version)] = model
            self._parsed.move_to_end((record.id, record.version))
            while len(self._parsed) > PARSED_CACHE_SIZE:
                self._parsed.popitem(last=False)


def _partition(tenant: str) -> Partition:
    return Partition(tenant, TENANT_OWNER)


def _active_of(record: MemoryRecord, model: Catalog) -> ActiveModel:
    return ActiveModel(
        model=model,
        version=record.version,
        model_version=model.model_version,
        memory_id=record.id,
        updated_by=record.provenance.author or "",
        updated_at=record.updated_at,
        document=record.value if isinstance(record.value, dict) else None,
    )


def _model_version(value: Any) -> str:
    found = value.get("model_version") if isinstance(value, dict) else None
    return str(found) if found is not None else ""


def _summary(model: Catalog) -> str:
    return (
        f"semantic model {model.name or '(unnamed)'} {model.model_version}: {len(model.metrics)} metrics, "
        f"{len(model.dimensions)} dimensions, {len(model.tables)} tables"
    )


__all__ = ["MODEL_KEY", "ActiveModel", "ModelStore", "ModelVersionInfo", "StoredModelMissing"]
