"""DynamoDB tables for the local runtime and tests, built from template.yaml; state save and load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memtool.runtime.template import TABLE_SETTINGS, table_specs
from memtool.settings import Settings


def table_names(settings: Settings) -> dict[str, str]:
    return {logical: getattr(settings, attr) for logical, attr in TABLE_SETTINGS.items()}


def create_tables(dynamodb: Any, settings: Settings, template: dict[str, Any]) -> dict[str, str]:
    """Create every template table that the settings name, with TTL; returns logical id -> name."""
    names = table_names(settings)
    existing = set(dynamodb.list_tables()["TableNames"])
    for spec in table_specs(template):
        name = names.get(spec.logical_id)
        if name is None or name in existing:
            continue
        dynamodb.create_table(**spec.create_table_arguments(name))
        dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.1, "MaxAttempts": 50})
        if spec.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
            )
    return names


def save_tables(dynamodb: Any, names: dict[str, str], folder: Path) -> dict[str, int]:
    """Write every item of each table to folder/<logical id>.json (DynamoDB JSON)."""
    folder.mkdir(parents=True, exist_ok=True)
    counts = {}
    for logical, name in names.items():
        items: list[dict[str, Any]] = []
        for page in dynamodb.get_paginator("scan").paginate(TableName=name):
            items.extend(page["Items"])
        tmp = folder / f"{logical}.json.tmp"
        tmp.write_text(json.dumps({"table": logical, "items": items}, ensure_ascii=False), encoding="utf-8")
        tmp.replace(folder / f"{logical}.json")
        counts[logical] = len(items)
    return counts


def load_tables(dynamodb: Any, names: dict[str, str], folder: Path) -> dict[str, int]:
    counts = {}
    for logical, name in names.items():
        path = folder / f"{logical}.json"
        if not path.is_file():
            continue
        items = json.loads(path.read_text(encoding="utf-8"))["items"]
        for start in range(0, len(items), 25):
            request: dict[str, Any] | None = {name: [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]}
            while request:
                request = dynamodb.batch_write_item(RequestItems=request).get("UnprocessedItems") or None
        counts[logical] = len(items)
    return counts
