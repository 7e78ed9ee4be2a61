"""The semantic model store and its flow, built on the container's record store and warehouses.

``model_store()`` is one per record store (per process, per Lambda container): its parsed-model
cache lives as long as the store it reads, and a new store (``container.reset()``, new settings)
gets a new one. It reads the clock the container has at each call (tests move it).
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING

from memtool.runtime import container
from memtool.settings import get_settings

if TYPE_CHECKING:
    from memtool.flows.model import ModelFlow
    from memtool.semantic.model_store import ModelStore
    from memtool.sql.warehouse import Warehouse

_held: list[tuple[object, ModelStore]] = []
_lock = threading.Lock()


class _ContainerClock:
    """The container's clock at each call (``container.use_clock`` may change it later)."""

    def now(self) -> datetime:
        return container.clock().now()


def model_store() -> ModelStore:
    """The tenant models on the process's record store (the ask path reads ``active(tenant)``)."""
    from memtool.semantic.model_store import ModelStore

    store = container.memory_store()
    with _lock:
        if _held and _held[0][0] is store:
            return _held[0][1]
        built = ModelStore(store, _ContainerClock())
        _held[:] = [(store, built)]
        return built


def tenant_warehouse(tenant: str) -> Warehouse | None:
    """The warehouse a tenant's model is checked on; None when the deployment has none."""
    if get_settings().warehouse == "none" and container.tenants().get(tenant) is None:
        return None
    return container.warehouse(tenant)


def model_flow() -> ModelFlow:
    from memtool.flows.model import ModelFlow

    return ModelFlow(model_store(), tenant_warehouse)
