"""Bodies, parameters and answers of the source API (POST/GET/DELETE /sources, paged reads).

A source is a versioned document a definition came from: DDL, ETL SQL or a business document
(docs/knowledge.md). Its text is read back in pages of at most ``READ_MAX_CHARS`` characters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from pydantic import BaseModel, ConfigDict, Field

from memtool.api.limits import PlainText
from memtool.api.memories import ID_PATTERN, MAX_VERSION
from memtool.knowledge.sources import (
    NAME_PATTERN,
    READ_MAX_CHARS,
    SOURCE_MAX_BYTES,
    SourceKind,
    SourceListing,
    SourcePage,
    SourceVersion,
    SourceWrite,
)


class CreateSourceBody(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)

    name: str = Field(
        pattern=NAME_PATTERN,
        description="1-120 letters, digits, '.', '_', '/' or '-' (e.g. etl/daily_revenue.sql); posting a name again "
        "makes its next version when the text differs",
    )
    kind: SourceKind = Field(description="ddl, etl_sql or document")
    text: PlainText = Field(
        min_length=1,
        description=f"the whole text, at most {SOURCE_MAX_BYTES:,} bytes as UTF-8 (tab, newline and carriage return "
        "are the only control characters)",
    )


# ---- parameters ----------------------------------------------------------------------------

SourceIdParam = Annotated[str, Path(pattern=ID_PATTERN, description="the source's id (id of POST /sources)")]
SourceVersionParam = Annotated[int | None, Query(ge=1, le=MAX_VERSION, description="that version instead of the newest")]
SourceHistoryParam = Annotated[bool, Query(description="also return every version, oldest first")]
OffsetParam = Annotated[int, Query(ge=0, le=SOURCE_MAX_BYTES, description="the first character of the page (code points from 0)")]
ReadLimitParam = Annotated[int, Query(ge=1, le=READ_MAX_CHARS, description=f"characters in the page, at most {READ_MAX_CHARS:,}")]
SourceCursorParam = Annotated[PlainText | None, Query(max_length=2048, description="next_cursor of the previous page (opaque)")]
SourceLimitParam = Annotated[int, Query(ge=1, le=100, description="page size")]


# ---- answers ---------------------------------------------------------------------------------


class _Answer(BaseModel):
    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class SourceView(_Answer):
    id: str
    name: str
    kind: SourceKind
    version: int = Field(description="this version")
    latest_version: int = Field(description="the newest version")
    stale: bool = Field(description="a newer version exists")
    sha256: str = Field(description="of the text as UTF-8")
    chars: int = Field(description="characters (code points)")
    bytes: int = Field(description="bytes as UTF-8")
    created_by: str = Field(description="the curator who stored this version")
    created_at: datetime
    cite: str = Field(description="how an answer cites this version: source:<id>@v<version>")


class SourceWritten(_Answer):
    """POST /sources: the version in force after the post."""

    source: SourceView
    created: bool = Field(description="a new source (version 1)")
    unchanged: bool = Field(description="the same text as the version in force: no new version was made")


class SourceRead(BaseModel):
    """GET /sources/{id}: a version's metadata; ``history`` only when asked for."""

    source: SourceView
    history: list[SourceView] | None = Field(None, description="every version, oldest first (?history=true)")


class SourcesListing(_Answer):
    items: list[SourceView] = Field(description="each source at its newest version")
    next_cursor: str | None


class SourcePageView(_Answer):
    """GET /sources/{id}/read: one page of a version's text."""

    source_id: str
    name: str
    text: str
    offset: int
    limit: int
    total_chars: int
    complete: bool = Field(description="this page reaches the end of the text")
    next_offset: int | None = Field(description="offset of the next page; null on the last")
    version: int = Field(description="the version read")
    latest_version: int
    stale: bool = Field(description="a newer version than the one read exists")
    sha256: str
    cite: str


def source_view(source: SourceVersion) -> SourceView:
    return SourceView(
        id=source.id,
        name=source.name,
        kind=source.kind,
        version=source.version,
        latest_version=source.latest_version,
        stale=source.stale,
        sha256=source.sha256,
        chars=source.chars,
        bytes=source.bytes,
        created_by=source.created_by,
        created_at=source.created_at,
        cite=source.cite(),
    )


def source_written(write: SourceWrite) -> SourceWritten:
    return SourceWritten(source=source_view(write.source), created=write.created, unchanged=write.unchanged)


def sources_listing(listing: SourceListing) -> SourcesListing:
    return SourcesListing(items=[source_view(s) for s in listing.items], next_cursor=listing.next_cursor)


def source_page(page: SourcePage) -> SourcePageView:
    source = page.source
    return SourcePageView(
        source_id=source.id,
        name=source.name,
        text=page.text,
        offset=page.offset,
        limit=page.limit,
        total_chars=page.total_chars,
        complete=page.complete,
        next_offset=page.next_offset,
        version=source.version,
        latest_version=source.latest_version,
        stale=source.stale,
        sha256=source.sha256,
        cite=source.cite(),
    )
