"""Builds the knowledge adapters the settings choose: where source texts live (S3 in AWS, files
under the state folder locally) and the source library over them and the record store."""

from __future__ import annotations

from typing import TYPE_CHECKING

from memtool.runtime import container
from memtool.settings import get_settings

if TYPE_CHECKING:
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
