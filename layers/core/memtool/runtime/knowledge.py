"""Builds the knowledge adapters the settings choose: where source texts live (S3 in AWS, files
under the state folder locally), the source library over them and the record store, and the
proposal and pre-fill services."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtool.runtime import container
from memtool.settings import get_settings

if TYPE_CHECKING:
    from memtool.flows.prefill import PrefillService
    from memtool.flows.proposals import ProposalService
    from memtool.knowledge.sources import SourceBodies, SourceLibrary


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
