"""What the Bedrock planner may read beyond its prompt: the tenant's sources, a page at a time.

A ``SourceShelf`` is one tenant's sources as the planner sees them (``memtool.runtime.knowledge``
binds it to the source library); the planner gets a function from the request's tenant to its
shelf, so a planner shared by tenants on one catalog never reads another tenant's sources.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from memtool.planning.bedrock_tools import TOOL_CLARIFY, TOOL_INTENT, TOOL_READ_SOURCE, TOOL_SQL, ReadSourceInput, validation_text
from memtool.planning.plan import Citation

MAX_LISTED_SOURCES = 20  # named in the prompt
MAX_SOURCE_READS = 8  # read_source calls in one planning conversation


@dataclass(frozen=True)
class SourceEntry:
    id: str
    name: str
    kind: str
    version: int
    chars: int


class SourceShelf(Protocol):
    def listing(self) -> Sequence[SourceEntry]: ...

    def read(self, source_id: str, version: int | None, offset: int, limit: int) -> Mapping[str, Any]:
        """One page as ``GET /sources/{id}/read`` answers it; ``LookupError`` or ``ValueError``
        (with a message for the model) when the source, version or bounds are wrong."""
        ...


SourceShelves = Callable[[str], SourceShelf | None]  # tenant -> its shelf (None: no sources)


def listing(shelf: SourceShelf) -> list[dict[str, Any]]:
    """The sources the prompt names, at most ``MAX_LISTED_SOURCES``."""
    entries = list(shelf.listing())[:MAX_LISTED_SOURCES]
    return [{"source_id": e.id, "name": e.name, "kind": e.kind, "version": e.version, "chars": e.chars} for e in entries]


def read_source(shelf: SourceShelf, call: Mapping[str, Any], reads: list[Citation], notes: list[str]) -> dict[str, Any]:
    """One toolResult for one call of a reading turn: a page of a source (cited in ``reads``), or why not."""
    use_id = str(call.get("toolUseId", ""))
    if call.get("name") != TOOL_READ_SOURCE:
        return _tool_error(use_id, "ignored: read with read_source alone, then answer with one tool call")
    if len(reads) >= MAX_SOURCE_READS:
        return _tool_error(use_id, f"read budget spent ({MAX_SOURCE_READS} pages): answer with {TOOL_INTENT}, {TOOL_SQL} or {TOOL_CLARIFY}")
    try:
        wanted = ReadSourceInput.model_validate(call.get("input"))
    except ValidationError as error:
        return _tool_error(use_id, f"read_source input is invalid: {validation_text(error)}")
    try:
        page = dict(shelf.read(wanted.source_id, wanted.version, wanted.offset, wanted.limit))
    except (LookupError, ValueError) as error:
        return _tool_error(use_id, f"read_source: {error}")
    cite = str(page.get("cite") or f"source:{wanted.source_id}@v{page.get('version')}")
    end = int(page.get("offset", wanted.offset)) + len(str(page.get("text", "")))
    reads.append(Citation(source=cite, text=f"{page.get('name')} v{page.get('version')}, characters {wanted.offset:,}-{end:,}"))
    if page.get("stale"):
        notes.append(f"read {page.get('name')} v{page.get('version')}; v{page.get('latest_version')} exists (stale)")
    return {"toolResult": {"toolUseId": use_id, "content": [{"json": page}], "status": "success"}}


def _tool_error(use_id: str, message: str) -> dict[str, Any]:
    return {"toolResult": {"toolUseId": use_id, "content": [{"text": message}], "status": "error"}}
