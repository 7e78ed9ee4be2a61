"""The composition root's one cache: every adapter it has built, by key, under one lock.

Two threads must not build the same adapter at once (the threaded local server's first requests
did), or two embedded indexes or store pools on one file would each hold half the truth: so one
reentrant lock guards building (factories call each other). Singletons (``once``) stay until
``reset``; adapters built per key (a tenant's warehouse, model and planner, the model store of a
record store) are at most ``per_key_limit``, the oldest dropped, not closed: another thread may
be using it. ``reset`` closes what holds files and forgets everything.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import update_wrapper
from typing import Any, Generic, TypeVar, cast

logger = logging.getLogger("memtool.runtime")

Built = TypeVar("Built")
_MISSING = object()


class AdapterCache:
    def __init__(self, per_key_limit: int = 64) -> None:
        self.per_key_limit = per_key_limit
        self.lock = threading.RLock()
        self.singletons: dict[str, object] = {}
        self.per_key_built: dict[tuple[object, ...], object] = {}

    def once(self, factory: Callable[[], Built]) -> Once[Built]:
        """``factory`` as a singleton: built on first call, even under concurrent first use."""
        return Once(self, factory)

    def per_key(self, key: tuple[object, ...], build: Callable[[], Built]) -> Built:
        return self._cached(self.per_key_built, key, build, limit=self.per_key_limit)

    def reset(self) -> None:
        """Close what the adapters hold (files, pools) and forget them all."""
        with self.lock:
            for built in self.singletons.values():
                close = getattr(built, "close", None)
                if close is not None:
                    close()
            self.singletons.clear()
            for built in self.per_key_built.values():
                _close_quietly(built)
            self.per_key_built.clear()

    def _cached(self, table: dict[Any, object], key: object, build: Callable[[], Built], *, limit: int | None = None) -> Built:
        found = table.get(key, _MISSING)
        if found is _MISSING:
            with self.lock:
                found = table.get(key, _MISSING)
                if found is _MISSING:
                    found = build()
                    if limit is not None and len(table) >= limit:
                        table.pop(next(iter(table)))
                    table[key] = found
        return cast("Built", found)


class Once(Generic[Built]):
    """A factory whose adapter is built once per process (per Lambda container); ``cache_clear``
    forgets it (``AdapterCache.reset`` forgets them all)."""

    def __init__(self, cache: AdapterCache, factory: Callable[[], Built]) -> None:
        self._cache = cache
        self._factory = factory
        self._key = factory.__qualname__
        update_wrapper(self, factory)

    @property
    def factory(self) -> Callable[[], Built]:
        return self._factory

    def __call__(self) -> Built:
        return self._cache._cached(self._cache.singletons, self._key, self._factory)

    def cache_clear(self) -> None:
        with self._cache.lock:
            self._cache.singletons.pop(self._key, None)


def _close_quietly(built: Any) -> None:
    close = getattr(built, "close", None)
    if close is not None and not isinstance(built, type):
        try:
            close()
        except Exception:  # noqa: BLE001 - closing what is forgotten must not fail the request
            logger.debug("closing %s failed", type(built).__name__)
