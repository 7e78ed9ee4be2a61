"""Integration fixtures: a real PostgreSQL server for the warehouse adapter and the loader.

Each xdist worker that runs a PostgreSQL test starts its own throwaway cluster once (about two
seconds) and stops it at the end of the session; a test module gets a fresh database of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memtool.memory.sqlite_store import SQLiteMemoryStore
from memtool.memory.store import MemoryStore
from memtool.runtime import container
from tests.postgres_server import PostgresServer, postgres_server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """The worker's PostgreSQL server (skips the test when PostgreSQL cannot run here)."""
    with postgres_server() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres: PostgresServer) -> str:
    """A database on the worker's server that tests of the session share: connect as its superuser."""
    return postgres.create_database("memtool_session")


@pytest.fixture(scope="module")
def postgres_database(postgres: PostgresServer) -> Iterator[str]:
    """A fresh, empty database for one test module, dropped afterwards."""
    url = postgres.create_database()
    yield url
    postgres.drop_database(url)


@pytest.fixture(params=["dynamodb", "sqlite"])
def store(request: pytest.FixtureRequest, clock, tmp_path) -> MemoryStore:  # noqa: ANN001 - the root conftest's fixtures
    """Both record stores: DynamoDB on moto (the ``aws`` settings) and SQLite. A test module may define its own."""
    if request.param == "dynamodb":
        request.getfixturevalue("aws")
        return container.memory_store()
    sqlite = SQLiteMemoryStore(tmp_path / "memtool.sqlite3")
    request.addfinalizer(sqlite.close)
    return sqlite
