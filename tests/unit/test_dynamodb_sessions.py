"""PynamoDB's botocore sessions (one per connection and thread) read the service models through one
loader for the process: DynamoDB's model is parsed once, not once per session (memory/dynamodb_items.py)."""

from __future__ import annotations

import threading
from typing import Any

import botocore.loaders
from pynamodb.connection import Connection

import memtool.memory.dynamodb_items  # noqa: F401  (installs the shared loader)


def test_sessions_of_two_connections_in_two_threads_are_their_own_and_parse_dynamodbs_model_once(
    monkeypatch: Any,
) -> None:
    loaded: list[str] = []
    original = botocore.loaders.JSONFileLoader.load_file

    def counting(self: Any, file_path: str) -> Any:
        loaded.append(file_path)
        return original(self, file_path)

    monkeypatch.setattr(botocore.loaders.JSONFileLoader, "load_file", counting)
    connections = [
        Connection(region="eu-west-1", host="http://127.0.0.1:1", aws_access_key_id="k", aws_secret_access_key="s") for _ in range(2)
    ]
    sessions: list[Any] = []
    clients: list[Any] = []

    def use(connection: Connection) -> None:
        sessions.append(connection.session)
        clients.append(connection.client)

    for connection in connections:
        thread = threading.Thread(target=use, args=(connection,))
        thread.start()
        thread.join()

    first, second = sessions
    assert first is not second  # botocore sessions are not thread-safe: each keeps its own
    assert first.get_component("data_loader") is second.get_component("data_loader")
    assert clients[0] is not clients[1]
    assert clients[0].meta.region_name == clients[1].meta.region_name == "eu-west-1"
    assert first.get_credentials().access_key == second.get_credentials().access_key == "k"
    dynamodb_models = [path for path in loaded if "/dynamodb/" in path and path.endswith("service-2")]
    assert len(dynamodb_models) <= 1  # parsed at most once in this process, then cached for every session
