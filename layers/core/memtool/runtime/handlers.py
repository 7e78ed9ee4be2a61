"""Loads the real Lambda handlers from functions/<name>/app.py, as Lambda would.

Lambda runs one invocation at a time per container, and handler code relies on it: a
Powertools resolver keeps per-request state on the module's ``app``, and the current event and
Lambda context on the ``BaseRouter`` class itself, shared by every resolver in the process. The
local runtime serves requests on many threads, so ``LambdaContainers`` gives each concurrent
invocation its own warm copy of the handler module (as Lambda would give it its own container)
and ``per_thread_router_state`` keeps Powertools' class-level request state per thread. Without
both, concurrent requests read each other's identity headers.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

LambdaHandler = Callable[[dict[str, Any], Any], Any]


@cache
def load_handler(code_uri: Path, handler: str) -> LambdaHandler:
    return _load(code_uri, handler, copy=0)


def _load(code_uri: Path, handler: str, copy: int) -> LambdaHandler:
    module_name, _, function_name = handler.rpartition(".")
    source = Path(code_uri) / f"{module_name.replace('.', '/')}.py"
    if not source.is_file():
        raise FileNotFoundError(f"handler source {source} not found")
    unique = f"memtool_functions.{Path(code_uri).name}.{module_name}"
    if copy:
        unique += f"__container{copy}"
    spec = importlib.util.spec_from_file_location(unique, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return getattr(module, function_name)


def function_handler(root: Path, name: str) -> LambdaHandler:
    """functions/<name>/app.py's lambda_handler."""
    return load_handler(root / "functions" / name, "app.lambda_handler")


def function_fleet(root: Path, name: str) -> LambdaHandler:
    """functions/<name>/app.py's lambda_handler, each concurrent call in its own warm copy."""
    code_uri = root / "functions" / name

    def invoke(event: Any, context: Any) -> Any:
        return containers.invoke(code_uri, "app.lambda_handler", event, context)

    return invoke


class _PerThread:
    """A data descriptor whose value belongs to the thread that set it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._local = threading.local()

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return getattr(self._local, "value", None)

    def __set__(self, obj: Any, value: Any) -> None:
        self._local.value = value


def per_thread_router_state() -> None:
    """Make Powertools' ``BaseRouter.current_event`` and ``lambda_context`` per thread (idempotent).

    Powertools assigns them on the class (``BaseRouter.current_event = ...``), which goes through
    the metaclass; a metaclass ``__setattr__`` routes those writes into a per-thread descriptor,
    which also serves every read, on the class and on resolver instances.
    """
    from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

    if isinstance(BaseRouter.__dict__.get("current_event"), _PerThread):
        return

    # whatever metaclass this Powertools version gives BaseRouter, extended: mypy cannot type a
    # base computed at run time
    class PerThreadRouterMeta(type(BaseRouter)):  # type: ignore[misc]
        def __setattr__(cls, name: str, value: Any) -> None:
            slot = type.__getattribute__(cls, "__dict__").get(name)
            if isinstance(slot, _PerThread):
                slot.__set__(None, value)
            else:
                super().__setattr__(name, value)

    for name in ("current_event", "lambda_context"):
        type.__setattr__(BaseRouter, name, _PerThread(name))
    # mypy reads a class's __class__ as object's property from the class side: a metaclass swap is
    # exactly what it cannot model
    BaseRouter.__class__ = PerThreadRouterMeta  # type: ignore[method-assign]


class LambdaContainers:
    """Warm handler copies per function: one per concurrent invocation, idle ones reused."""

    def __init__(self) -> None:
        self._idle: dict[tuple[Path, str], list[LambdaHandler]] = {}
        self._made: dict[tuple[Path, str], int] = {}
        self._lock = threading.Lock()

    def invoke(self, code_uri: Path, handler: str, event: Any, context: Any) -> Any:
        per_thread_router_state()
        key = (Path(code_uri), handler)
        with self._lock:
            idle = self._idle.setdefault(key, [])
            function = idle.pop() if idle else None
            copy = None
            if function is None:
                copy = self._made.get(key, 0)
                self._made[key] = copy + 1
        if function is None:
            assert copy is not None
            with _loading:  # module execution is not safe to run twice at once
                function = load_handler(key[0], handler) if copy == 0 else _load(key[0], handler, copy)
        try:
            return function(event, context)
        finally:
            with self._lock:
                self._idle[key].append(function)

    def warm(self) -> dict[str, int]:
        """How many copies of each function exist (the local runtime's concurrency high-water mark)."""
        with self._lock:
            return {f"{uri.name}.{handler}": made for (uri, handler), made in self._made.items()}


_loading = threading.Lock()
containers = LambdaContainers()  # process-wide, as Lambda's container fleet per function
