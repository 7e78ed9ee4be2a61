"""Sources: the documents a definition came from (DDL, ETL SQL, business documents), versioned.

A source is two things (docs/knowledge.md):

- its **metadata**, one ``knowledge`` memory per source name in the tenant's shared partition
  (owner ``TENANT_OWNER``, slot ``source.<name>``): the record store's versions, history and
  optimistic locking are the source's, and a source id is that memory's id. Its ``value`` holds
  the kind, the SHA-256 and the size of that version's text.
- its **bodies**, one per version, in a ``SourceBodies`` store (S3 in AWS, files locally),
  addressed by tenant, source name and SHA-256. A body is written before the record that names
  it, so a record never points at a body that is not there; a crash in between leaves only an
  unreferenced body, which the same post writes again.

Posting a name again makes a new version when the text differs and answers the version in force
when it does not. Reads are paged by characters (Unicode code points): ``offset`` and ``limit``
give a page, ``next_offset`` the next one, and the pages of one version concatenate to its text.
A read that names an old version says ``stale`` and names the newest.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memtool.clock import Clock
from memtool.errors import Forbidden, NotFound, ValidationFailed
from memtool.identity import Identity
from memtool.knowledge.governance import governance_draft, scan, shared
from memtool.memory.records import MemoryKind, MemoryRecord
from memtool.memory.slots import SOURCE_KEY_PREFIX
from memtool.memory.store import MemoryStore, Partition, UndecodableRecord

SOURCE_TAG = "source"
SOURCE_MAX_BYTES = 2 * 1024 * 1024  # a source's text as UTF-8
READ_MAX_CHARS = 16_000  # one page of a paged read
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,119}$"
_NAME = re.compile(NAME_PATTERN)
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_CACHED_BODIES = 8  # decoded texts kept per process (immutable: addressed by their digest)
_CACHED_CHARS = 8_000_000


class SourceKind(StrEnum):
    DDL = "ddl"
    ETL_SQL = "etl_sql"
    DOCUMENT = "document"


class SourceMeta(BaseModel):
    """A source version's metadata as its record's ``value`` holds it. It is read back as hostile
    input: a record written beneath the library (a bug, a restore) that does not validate is not a
    source, and its digest can only name a body of the caller's own tenant and source name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_PATTERN)
    kind: SourceKind
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    chars: int = Field(ge=0)
    bytes: int = Field(ge=0, le=SOURCE_MAX_BYTES)


@dataclass(frozen=True)
class SourceVersion:
    id: str
    name: str
    kind: SourceKind
    version: int
    latest_version: int
    sha256: str
    chars: int
    bytes: int
    created_by: str
    created_at: datetime  # when this version was stored

    @property
    def stale(self) -> bool:
        return self.version < self.latest_version

    def cite(self) -> str:
        """How an answer names this version: ``source:<id>@v<version>``."""
        return f"source:{self.id}@v{self.version}"


@dataclass(frozen=True)
class SourceWrite:
    source: SourceVersion
    created: bool  # a new source (version 1)
    unchanged: bool  # the same text as the version in force: no new version


@dataclass(frozen=True)
class SourcePage:
    text: str
    offset: int
    limit: int
    total_chars: int
    complete: bool  # this page reaches the end of the text
    next_offset: int | None
    source: SourceVersion


@dataclass(frozen=True)
class SourceListing:
    items: list[SourceVersion]
    next_cursor: str | None


class SourceBodies(Protocol):
    """Where the texts of source versions live (S3 in AWS, files locally): write once, read many."""

    def put(self, tenant: str, name: str, digest: str, body: bytes) -> None: ...

    def get(self, tenant: str, name: str, digest: str) -> bytes:
        """The body; ``NotFound`` when it is not there."""
        ...

    def delete(self, tenant: str, name: str) -> int:
        """Remove every body of the source ``name``; returns how many were removed."""
        ...


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def name_folder(name: str) -> str:
    """The folder (or S3 prefix) of a source name's bodies: a digest, so no name can climb out of it."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]


def check_digest(digest: str) -> str:
    if not _DIGEST.match(digest):
        raise ValidationFailed("a source body is addressed by a SHA-256 in hex", field="sha256")
    return digest


class SourceLibrary:
    """The application's view of sources: curators write and delete, every member of the tenant reads."""

    def __init__(self, store: MemoryStore, bodies: SourceBodies, clock: Clock) -> None:
        self._store = store
        self._bodies = bodies
        self._clock = clock
        self._texts: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    # ---- writes ---------------------------------------------------------------------------

    def put(self, who: Identity, name: str, kind: SourceKind, text: str) -> SourceWrite:
        """Store ``text`` as the source ``name``'s next version (or answer the one in force when
        the text is the same). Curators only."""
        if not who.is_curator:
            raise Forbidden("sources are written by curators (role curator or admin)", field="roles")
        check_name(name)
        if not text.strip():
            raise ValidationFailed("the text is blank", field="text")
        body = text.encode("utf-8")
        if len(body) > SOURCE_MAX_BYTES:
            raise ValidationFailed(f"a source holds at most {SOURCE_MAX_BYTES:,} bytes of UTF-8; this text has {len(body):,}", field="text")
        meta = SourceMeta(name=name, kind=kind, sha256=hashlib.sha256(body).hexdigest(), chars=len(text), bytes=len(body))
        where = _partition(who.tenant)
        now = self._clock.now()
        head = self._head(where, name)
        if head is not None and _meta_of(head) == meta:
            return SourceWrite(self._version_of(head, head.version), created=False, unchanged=True)
        self._bodies.put(who.tenant, name, meta.sha256, body)  # the body first: a record never names a missing one
        draft = governance_draft(SOURCE_KEY_PREFIX + name, _summary(meta), meta, who.user, [SOURCE_TAG, f"source_kind:{kind.value}"])
        outcome = self._store.create(where, draft, now)
        record = outcome.record
        return SourceWrite(self._version_of(record, record.version), created=outcome.created, unchanged=outcome.unchanged)

    def delete(self, who: Identity, source_id: str) -> SourceVersion:
        """Forget the source, every version of it, and its bodies. Curators only."""
        if not who.is_curator:
            raise Forbidden("sources are deleted by curators (role curator or admin)", field="roles")
        head = self.get(who, source_id)
        self._store.forget(_partition(who.tenant), source_id)
        self._bodies.delete(who.tenant, head.name)  # after the record: a crash between leaves unreferenced bodies only
        with self._lock:
            for key in [k for k in self._texts if k[0] == who.tenant and k[1] == head.name]:
                del self._texts[key]
        return head

    # ---- reads ----------------------------------------------------------------------------

    def get(self, who: Identity, source_id: str, version: int | None = None) -> SourceVersion:
        return self.version_of(who.tenant, source_id, version)

    def version_of(self, tenant: str, source_id: str, version: int | None = None) -> SourceVersion:
        """A version's metadata (default: the newest); ``NotFound`` naming the field that missed."""
        where = _partition(tenant)
        head = self._source_head(where, source_id)
        if version is None or version == head.version:
            return self._version_of(head, head.version)
        if version > head.version or version < 1:
            raise NotFound(f"source {source_id} has no version {version} (it is at version {head.version})", field="version")
        try:
            record = self._store.get(where, source_id, self._clock.now(), version=version)
        except NotFound:
            raise NotFound(f"source {source_id} has no version {version} (it is at version {head.version})", field="version") from None
        return self._version_of(record, head.version)

    def history(self, who: Identity, source_id: str) -> list[SourceVersion]:
        where = _partition(who.tenant)
        head = self._source_head(where, source_id)
        versions = []
        for record in self._store.history(where, source_id, self._clock.now()):
            if _meta_of(record) is not None:
                versions.append(self._version_of(record, head.version))
        return versions

    def list(self, who: Identity, cursor: str | None = None, limit: int = 20) -> SourceListing:
        """The tenant's sources (newest version of each), a page at a time."""
        def pick(record: MemoryRecord) -> SourceVersion | None:
            return self._version_of(record, record.version) if is_source(record) else None

        items, next_cursor = scan(self._store, who.tenant, self._clock.now(), pick, cursor, limit)
        return SourceListing(items=items, next_cursor=next_cursor)

    def read(
        self, who: Identity, source_id: str, *, version: int | None = None, offset: int = 0, limit: int = READ_MAX_CHARS
    ) -> SourcePage:
        """One page of a version's text: ``limit`` characters from ``offset`` (both in code points)."""
        if offset < 0:
            raise ValidationFailed("offset counts characters from 0", field="offset")
        if not 1 <= limit <= READ_MAX_CHARS:
            raise ValidationFailed(f"a page holds 1 to {READ_MAX_CHARS:,} characters", field="limit")
        tenant = who.tenant
        source = self.version_of(tenant, source_id, version)
        if offset > source.chars:
            raise ValidationFailed(f"offset {offset} is past the end of the text ({source.chars:,} characters)", field="offset")
        text = self._text(tenant, source)
        page = text[offset : offset + limit]
        end = offset + len(page)
        complete = end >= len(text)
        return SourcePage(
            text=page,
            offset=offset,
            limit=limit,
            total_chars=len(text),
            complete=complete,
            next_offset=None if complete else end,
            source=source,
        )

    def read_dependency(
        self, who: Identity, record: MemoryRecord, source_id: str | None, *, offset: int = 0, limit: int = READ_MAX_CHARS
    ) -> SourcePage:
        """A page of the source ``record`` (a memory the caller may read) depends on, at the version
        it is pinned to: the first such source, or the one ``source_id`` names."""
        cited = [ref for ref in record.provenance.sources if ref.depends_on == "source" and source_id in (None, ref.id)]
        if not cited:
            named = "" if source_id is None else f" {source_id}"
            raise NotFound(f"memory {record.id} depends on no source{named}", field="source_id")
        return self.read(who, cited[0].id, version=cited[0].version, offset=offset, limit=limit)

    def text_named(self, who: Identity, name: str) -> tuple[SourceVersion, str]:
        """The newest version of the source ``name`` and its whole text; ``NotFound`` naming ``name``."""
        head = self._head(_partition(who.tenant), check_name(name))
        if head is None or not is_source(head):
            raise NotFound(f"the tenant has no source named {name!r}", field="name")
        source = self._version_of(head, head.version)
        return source, self._text(who.tenant, source)

    def text(self, who: Identity, source_id: str, version: int | None = None) -> tuple[SourceVersion, str]:
        """A version's whole text (a pre-fill reads its frozen input with it)."""
        source = self.version_of(who.tenant, source_id, version)
        return source, self._text(who.tenant, source)

    # ---- inside ---------------------------------------------------------------------------

    def _head(self, where: Partition, name: str) -> MemoryRecord | None:
        try:
            return self._store.get_slot(where, MemoryKind.KNOWLEDGE, SOURCE_KEY_PREFIX + name, self._clock.now())
        except UndecodableRecord:
            return None  # a damaged record: the next post makes a fresh version 1 beside it

    def _source_head(self, where: Partition, source_id: str) -> MemoryRecord:
        try:
            head = self._store.get(where, source_id, self._clock.now())
        except (NotFound, UndecodableRecord):
            raise NotFound(f"source {source_id} not found", field="id") from None
        if not is_source(head):
            raise NotFound(f"source {source_id} not found", field="id")
        return head

    def _version_of(self, record: MemoryRecord, latest: int) -> SourceVersion:
        meta = _meta_of(record)
        if meta is None:
            raise NotFound(f"source {record.id} v{record.version} has no readable metadata", field="id")
        return SourceVersion(
            id=record.id,
            name=meta.name,
            kind=meta.kind,
            version=record.version,
            latest_version=latest,
            sha256=meta.sha256,
            chars=meta.chars,
            bytes=meta.bytes,
            created_by=record.provenance.author or "",
            created_at=record.updated_at,
        )

    def _text(self, tenant: str, source: SourceVersion) -> str:
        key = (tenant, source.name, source.sha256)
        with self._lock:
            cached = self._texts.get(key)
            if cached is not None:
                self._texts.move_to_end(key)
                return cached
        body = self._bodies.get(tenant, source.name, source.sha256)
        if hashlib.sha256(body).hexdigest() != source.sha256:
            raise NotFound(f"the text of source {source.id} v{source.version} does not match its SHA-256", field="version")
        text = body.decode("utf-8")
        with self._lock:
            self._texts[key] = text
            while len(self._texts) > _CACHED_BODIES or sum(len(t) for t in self._texts.values()) > _CACHED_CHARS:
                self._texts.popitem(last=False)
        return text


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValidationFailed(
            "a source name is 1-120 letters, digits, '.', '_', '/' or '-', starting with a letter or digit", field="name"
        )
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise ValidationFailed("a source name's parts between '/' are not empty, '.' or '..'", field="name")
    return name


def _partition(tenant: str) -> Partition:
    return shared(tenant)


def is_source(record: MemoryRecord) -> bool:
    """A knowledge memory in a ``source.`` slot whose value is valid metadata of that source."""
    return (
        record.kind is MemoryKind.KNOWLEDGE
        and bool(record.key and record.key.startswith(SOURCE_KEY_PREFIX))
        and _meta_of(record) is not None
    )


def _meta_of(record: MemoryRecord) -> SourceMeta | None:
    value: Any = record.value
    if not isinstance(value, dict):
        return None
    try:
        meta = SourceMeta.model_validate(value)
    except ValidationError:
        return None
    if record.key != SOURCE_KEY_PREFIX + meta.name:
        return None  # a value naming another source's bodies is not this one's
    return meta


def _summary(meta: SourceMeta) -> str:
    return f"Source {meta.name} ({meta.kind.value}, {meta.chars:,} characters)"


__all__ = [
    "READ_MAX_CHARS",
    "SOURCE_KEY_PREFIX",
    "SOURCE_MAX_BYTES",
    "SourceBodies",
    "SourceKind",
    "SourceLibrary",
    "SourceListing",
    "SourcePage",
    "SourceVersion",
    "SourceWrite",
    "check_digest",
    "check_name",
    "is_source",
    "name_folder",
    "source_digest",
]
