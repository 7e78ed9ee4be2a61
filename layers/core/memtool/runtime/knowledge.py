"""Builds the knowledge adapters the settings choose: where source texts live (S3 in AWS, files
under the state folder locally), the source library over them and the record store, and the
proposal and pre-fill services."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from memtool.runtime import container
from memtool.settings import get_settings

if TYPE_CHECKING:
    from memtool.flows.prefill import PrefillService
    from memtool.flows.proposals import ProposalService
    from memtool.knowledge.sources import SourceBodies, SourceLibrary
    from memtool.planning.sources import SourceEntry

logger = logging.getLogger("memtool.runtime")


@container.once
def source_bodies() -> SourceBodies:
    """An S3 bucket (MEMTOOL_SOURCES_BUCKET) or ``<home>/state/sources``."""
    settings = get_settings()
    if settings.sources_bucket:
        from memtool.knowledge.bodies import S3SourceBodies
        from memtool.runtime.aws import client

        return S3SourceBodies(client("s3", settings), settings.sources_bucket)
    from memtool.knowledge.bodies import FileSourceBodies

    return FileSourceBodies(settings.sources_folder)


@container.once
def source_library() -> SourceLibrary:
    """One per process: it keeps the last texts it read (immutable, addressed by their SHA-256)."""
    from memtool.knowledge.sources import SourceLibrary

    return SourceLibrary(container.memory_store(), source_bodies(), container.ContainerClock())


def proposal_service() -> ProposalService:
    """Proposals over the process's record store; accepting one writes through the memory service."""
    from memtool.flows.proposals import ProposalService

    return ProposalService(container.memory_store(), container.memory_service(), container.clock())


def prefill_service() -> PrefillService:
    from memtool.flows.prefill import PrefillService

    return PrefillService(container.memory_store(), source_library(), container.clock())


class TenantShelf:
    """One tenant's sources as the Bedrock planner reads them (memtool.planning.sources.SourceShelf)."""

    def __init__(self, library: SourceLibrary, tenant: str) -> None:
        from memtool.identity import Identity

        self._library = library
        self._reader = Identity(tenant=tenant, user="planner", roles=frozenset())

    def listing(self) -> list[SourceEntry]:
        from memtool.planning.sources import MAX_LISTED_SOURCES, SourceEntry

        page = self._library.list(self._reader, limit=MAX_LISTED_SOURCES)
        return [SourceEntry(s.id, s.name, s.kind.value, s.version, s.chars) for s in page.items]

    def read(self, source_id: str, version: int | None, offset: int, limit: int) -> dict[str, Any]:
        from memtool.api.sources import source_page
        from memtool.errors import NotFound, ValidationFailed

        try:
            page = self._library.read(self._reader, source_id, version=version, offset=offset, limit=limit)
        except NotFound as missing:
            raise LookupError(missing.message) from None
        except ValidationFailed as bad:
            raise ValueError(f"{bad.field}: {bad.message}") from None
        except Exception as error:  # noqa: BLE001 - the store or the bucket failed: the model is told, the plan goes on
            logger.warning("read_source %s failed: %s", source_id, error)
            raise LookupError(f"the text of {source_id} cannot be read now ({type(error).__name__})") from None
        return source_page(page).model_dump(mode="json")


def planner_sources(tenant: str) -> TenantShelf | None:
    """The shelf the Bedrock planner reads for ``tenant`` (its sources, a page at a time)."""
    return TenantShelf(source_library(), tenant)
