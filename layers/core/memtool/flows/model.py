"""The tenant's semantic model: read it, list its versions, put a new one (curators).

The tenant is always the caller's: a request names no tenant. A put is checked against the
tenant's warehouse when one is configured (every metric compiles and runs, alone and by each of
its dimensions); without one only the structure is checked, and the answer says so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memtool.identity import Identity
from memtool.knowledge.dependencies import DependencyChecker
from memtool.semantic.catalog import Catalog
from memtool.semantic.model_store import ActiveModel, ModelStore, ModelVersionInfo
from memtool.semantic.reach import reach_problems
from memtool.semantic.validation import (
    WAREHOUSE_CHECK_SECONDS,
    WAREHOUSE_QUERY_SECONDS,
    ModelProblem,
    ModelRejected,
    warehouse_problems,
)

if TYPE_CHECKING:
    from memtool.sql.warehouse import Warehouse

# The tenant's warehouse, or None when the deployment has none to check against.
WarehouseFor = Callable[[str], "Warehouse | None"]


@dataclass(frozen=True)
class ModelPut:
    model: ActiveModel
    warehouse_checked: bool


class ModelFlow:
    def __init__(
        self,
        models: ModelStore,
        warehouse_for: WarehouseFor | None = None,
        *,
        query_seconds: float = WAREHOUSE_QUERY_SECONDS,
        budget_seconds: float = WAREHOUSE_CHECK_SECONDS,
        granted_for: Callable[[str], Sequence[str] | None] | None = None,  # (tenant) -> the tables the operator granted
        grant_missing: Callable[[str], str | None] | None = None,  # (tenant) -> why it needs a grant it lacks
    ) -> None:
        self._models = models
        self._warehouse_for = warehouse_for
        self._granted_for = granted_for
        self._grant_missing = grant_missing
        self._query_seconds = query_seconds
        self._budget_seconds = budget_seconds

    def get(self, who: Identity, version: int | None = None) -> ActiveModel:
        return self._models.get(who.tenant, version)

    def history(self, who: Identity) -> list[ModelVersionInfo]:
        self._models.get(who.tenant)  # StoredModelMissing (404, with how to make one) when there is none
        return self._models.history(who.tenant)

    def put(self, who: Identity, document: Mapping[str, Any], expected_version: int | None) -> ModelPut:
        warehouse = None
        unreachable: str | None = None
        if who.is_curator and self._warehouse_for is not None:  # a non-curator is refused before any query
            try:
                warehouse = self._warehouse_for(who.tenant)
            except Exception as exc:  # noqa: BLE001 - a model is never stored unchecked when a warehouse is configured
                unreachable = f"the warehouse could not be opened to check the model: {type(exc).__name__}: {exc}"

        def validate(model: Catalog) -> list[ModelProblem]:
            # What the model's SQL reaches comes first, without a warehouse: an expression with a
            # subquery or a table function, or a table the tenant was not granted, is never run.
            missing = self._grant_missing(who.tenant) if self._grant_missing is not None else None
            if missing is not None:
                return [ModelProblem("tables", missing)]
            granted = self._granted_for(who.tenant) if self._granted_for is not None else None
            reach = reach_problems(model, granted)
            if reach:
                return reach
            if unreachable is not None:
                return [ModelProblem("", unreachable)]
            if warehouse is None:
                return []
            return warehouse_problems(
                model, warehouse, query_seconds=self._query_seconds, budget_seconds=self._budget_seconds
            )

        if who.is_curator:  # a non-curator is refused by the store, before anything is looked up
            document = self._pinned(who.tenant, document)
        stored = self._models.put(who.tenant, document, actor=who, expected_version=expected_version, validate=validate)
        return ModelPut(stored, warehouse_checked=warehouse is not None)

    def _pinned(self, tenant: str, document: Mapping[str, Any]) -> Mapping[str, Any]:
        """The document with each metric's and dimension's ``depends_on`` pinned to a version of a
        source that exists (docs/knowledge.md); ``ModelRejected`` with every one that does not.
        Entries of the wrong shape are left for the structural check to report."""
        checker = DependencyChecker(self._models.store, self._models.clock)
        pinned = copy.deepcopy(dict(document))
        problems: list[ModelProblem] = []
        for section in ("metrics", "dimensions"):
            items = pinned.get(section)
            for i, item in enumerate(items if isinstance(items, list) else []):
                declared = item.get("depends_on") if isinstance(item, dict) else None
                for j, entry in enumerate(declared if isinstance(declared, list) else []):
                    if not (isinstance(entry, dict) and isinstance(entry.get("source"), str)):
                        continue
                    version = entry.get("version")
                    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
                        continue
                    try:
                        entry["version"] = checker.pin_source(tenant, entry["source"], version)
                    except ValueError as missing:
                        problems.append(ModelProblem(f"{section}[{i}].depends_on[{j}].source", str(missing)))
        if problems:
            raise ModelRejected(problems)
        return pinned
