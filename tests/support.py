"""Test helpers: an API client over the in-process gateway, and direct reads of stored state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtool.runtime.aws import client
from memtool.runtime.local_api import ApiResponse, LocalApiGateway
from memtool.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"


@dataclass
class Api:
    gateway: LocalApiGateway
    tenant: str
    user: str

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        query: dict[str, str] | None = None,
        raw: str | None = None,
        as_user: tuple[str, str] | None = None,
        roles: str | None = None,
    ) -> ApiResponse:
        tenant, user = as_user or (self.tenant, self.user)
        sent = {"X-Memtool-Tenant": tenant, "X-Memtool-User": user, "Content-Type": "application/json"}
        if roles:
            sent["X-Memtool-Roles"] = roles
        sent.update(headers or {})
        payload = raw if raw is not None else (None if body is None else json.dumps(body, ensure_ascii=False))
        return self.gateway.invoke(
            method, path, headers=sent, query={k: [v] for k, v in (query or {}).items()}, body=payload
        )


def table_items(settings: Settings) -> list[dict[str, Any]]:
    """Every item of the memory table, straight from DynamoDB (for assertions on stored state)."""
    dynamodb = client("dynamodb", settings)
    items: list[dict[str, Any]] = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=settings.memory_table):
        items.extend(page["Items"])
    return items


def load_event(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))
