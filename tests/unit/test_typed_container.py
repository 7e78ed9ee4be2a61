"""The composition root is typed: every factory a handler calls declares what it builds, with no
``Any`` in it, so mypy checks the handlers against the real services (issue 23, item 4).

The container imports its adapters' types only under ``TYPE_CHECKING`` (the Lambda cold path
imports none of them); this test imports them, resolves every factory's annotations, and walks
them for ``Any``. One caching helper builds them all; its behaviour is checked here too.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import threading
import typing
from pathlib import Path
from typing import Any

from memtool.runtime import container
from memtool.runtime.adapter_cache import AdapterCache, Once

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "functions"
CONTAINER = Path(container.__file__)


def _type_checking_names() -> dict[str, object]:
    """The names the container's ``if TYPE_CHECKING:`` block imports, imported for real."""
    names: dict[str, object] = {}
    for node in ast.walk(ast.parse(CONTAINER.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.module, ast.dump(statement)
                module = importlib.import_module(statement.module)
                for alias in statement.names:
                    names[alias.asname or alias.name] = getattr(module, alias.name)
    return names


def _contains_any(hint: object) -> bool:
    if hint is Any:
        return True
    return any(_contains_any(argument) for argument in typing.get_args(hint))


def _handler_calls() -> set[str]:
    """The container functions the Lambda handlers call (``container.<name>(``)."""
    called: set[str] = set()
    for app in FUNCTIONS.glob("*/app.py"):
        called |= set(re.findall(r"\bcontainer\.([a-z_]+)\(", app.read_text(encoding="utf-8")))
    return called


def _factories() -> dict[str, Any]:
    """Every public function of the container (the ``once`` ones unwrapped)."""
    found = {}
    for name, value in vars(container).items():
        if name.startswith("_") or name == "once":
            continue
        target = value.factory if isinstance(value, Once) else value
        if inspect.isfunction(target) and target.__module__ == container.__name__:
            found[name] = target
    return found


def test_the_handlers_call_the_container() -> None:
    called = _handler_calls()
    # the test would pass vacuously if the pattern found nothing
    assert {"ask_service", "memory_service", "feedback_service", "diagnosis_service", "tool_executor"} <= called


def test_every_factory_declares_its_return_type_without_any() -> None:
    namespace = vars(container) | _type_checking_names()
    factories = _factories()
    assert _handler_calls() <= set(factories), sorted(_handler_calls() - set(factories))
    loose = {}
    for name, factory in factories.items():
        if "return" not in factory.__annotations__:
            loose[name] = "no return type"
            continue
        hint = typing.get_type_hints(factory, globalns=namespace)["return"]
        if _contains_any(hint):
            loose[name] = str(hint)
    assert loose == {}


def test_the_walk_would_see_an_any() -> None:
    assert _contains_any(dict[str, Any]) and _contains_any(list[Any] | None) and not _contains_any(dict[str, int])


def test_once_builds_one_adapter_under_concurrent_first_use() -> None:
    built: list[object] = []
    gate = threading.Barrier(8)

    def build() -> object:
        built.append(object())
        return built[-1]

    factory = container.once(build)
    results: list[object] = []

    def first_use() -> None:
        gate.wait()
        results.append(factory())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(built) == 1 and results == built * 8
        factory.cache_clear()
        assert factory() is not results[0] and len(built) == 2
    finally:
        factory.cache_clear()


def test_per_key_adapters_are_bounded_and_reset_closes_them() -> None:
    cache = AdapterCache(per_key_limit=8)

    class Closing:
        closed = 0

        def close(self) -> None:
            Closing.closed += 1

    first = cache.per_key(("test", 0), Closing)
    assert cache.per_key(("test", 0), Closing) is first  # built once per key
    for n in range(1, 9):
        cache.per_key(("test", n), Closing)
    assert len(cache.per_key_built) == 8
    assert ("test", 0) not in cache.per_key_built  # the oldest dropped, not closed
    assert Closing.closed == 0
    single = cache.once(Closing)
    assert single() is single()
    cache.reset()
    assert cache.per_key_built == {} and cache.singletons == {} and Closing.closed == 9
    assert single() is not first
