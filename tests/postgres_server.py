"""A throwaway PostgreSQL cluster for tests: initdb into a temp folder, start on loopback, stop and delete.

The server listens on 127.0.0.1 on a free port and on a unix socket inside the folder, trusts
local connections (nobody else can reach loopback in the test sandbox) and runs with fsync off:
the data dies with the test session anyway. The binaries come from PATH or
/usr/lib/postgresql/<version>/bin. PostgreSQL refuses to run as root; as root the cluster is run
by the ``postgres`` account (the Debian packages create it), else the tests are skipped with the
reason.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SUPERUSER = "memtool"
_START_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class PostgresServer:
    """A running cluster: connect as ``SUPERUSER`` over TCP on loopback."""

    host: str
    port: int
    data_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def create_database(self, prefix: str = "memtool_test") -> str:
        """A new empty database with a unique name; returns its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def find_binaries() -> dict[str, Path] | None:
    """initdb, pg_ctl and postgres from one installation: PATH first, then the newest Debian one."""
    on_path = {name: shutil.which(name) for name in ("initdb", "pg_ctl", "postgres")}
    if all(on_path.values()):
        return {name: Path(str(found)) for name, found in on_path.items()}
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True):
        candidates = {name: Path(folder) / name for name in ("initdb", "pg_ctl", "postgres")}
        if all(os.access(path, os.X_OK) for path in candidates.values()):
            return candidates
    return None


def _version_key(folder: str) -> float:
    try:
        return float(Path(folder).parent.name)
    except ValueError:
        return 0.0


def _run_as() -> dict[str, Any]:
    """subprocess keyword arguments that drop root to the postgres account; {} when not root."""
    if os.geteuid() != 0:
        return {}
    try:
        account = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("PostgreSQL refuses to run as root and there is no 'postgres' account to run it as")
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def postgres_server() -> Iterator[PostgresServer]:
    """Start a cluster, yield it, and stop it and delete its folder on the way out (also on failure)."""
    binaries = find_binaries()
    if binaries is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found on PATH or in /usr/lib/postgresql/*/bin")
    try:
        import psycopg  # noqa: F401 - only to skip with the reason when the driver is missing
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'psycopg[binary]'")
    run_as = _run_as()
    root = Path(tempfile.mkdtemp(prefix="memtool-pg-"))
    data_dir = root / "data"
    started = False
    try:
        if run_as:
            os.chown(root, run_as["user"], run_as["group"])
        _run(
            [str(binaries["initdb"]), "-D", str(data_dir), "-U", SUPERUSER, "--auth=trust", "--encoding=UTF8",
             "--locale=C", "--no-sync"],
            run_as,
        )  # fmt: skip
        port = _free_port()
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        _run(
            [str(binaries["pg_ctl"]), "-D", str(data_dir), "-l", str(root / "server.log"), "-o", options, "-w",
             "-t", str(_START_TIMEOUT_SECONDS), "start"],
            run_as,
        )  # fmt: skip
        started = True
        yield PostgresServer(host="127.0.0.1", port=port, data_dir=data_dir)
    finally:
        if started:
            subprocess.run(
                [str(binaries["pg_ctl"]), "-D", str(data_dir), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                check=False,
                timeout=60,
                **run_as,
            )
        shutil.rmtree(root, ignore_errors=True)


def _run(command: list[str], run_as: dict[str, Any]) -> None:
    try:
        subprocess.run(command, capture_output=True, text=True, check=True, timeout=120, **run_as)
    except subprocess.CalledProcessError as failed:
        log = Path(command[command.index("-l") + 1]) if "-l" in command else None
        tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
        pytest.skip(
            f"PostgreSQL could not start: {Path(command[0]).name} exited {failed.returncode}: "
            f"{(failed.stderr or failed.stdout).strip()[-1000:]} {tail}"
        )

