"""One tenant, one model, one warehouse: the tenants file and the model in force for a tenant.

Locally, ``memtool serve --tenants FILE`` (or ``MEMTOOL_TENANTS_FILE``) names, per tenant, its
warehouse (``duckdb:///path.duckdb`` or ``postgresql://…``) and its semantic model (a YAML file)::

    tpch:
      warehouse: duckdb:///data/tpch.duckdb   # a relative path is read from the file's folder
      model: model.yaml
      tables: [lineitem, orders, customer, part, partsupp, supplier, nation, region]

``tables`` lists the warehouse tables the tenant may read (names or patterns: ``dim_*``,
``analytics.*``). Its model may name no other table (``PUT /model`` refuses one, with its place)
and the guardrails allow no other, whatever the model says. Where one warehouse serves more than
one tenant, every tenant on it needs the list: a model is what a curator writes, the list is what
the operator granted.

Tenants not in the file keep the process's warehouse and, on the local demo warehouse, the demo
model. A model a curator stored for the tenant (``PUT /model``, ``memtool model push``) wins over
the file's: the file's is where a tenant starts.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memtool.errors import ValidationFailed
from memtool.semantic.catalog import TenantModel
from memtool.sql.grants import table_granted, table_pattern_problem

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class TenantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    warehouse: str = Field(description="duckdb:///path.duckdb or postgresql://user@host:port/db")
    model: Path = Field(description="the tenant's semantic model (YAML)")
    tables: tuple[str, ...] | None = Field(
        None, min_length=1, description="the warehouse tables the tenant may read (names or patterns); required on a shared warehouse"
    )

    @field_validator("tables")
    @classmethod
    def _patterns(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        for pattern in value:
            problem = table_pattern_problem(pattern)
            if problem:
                raise ValueError(problem)
        return tuple(p.lower() for p in value)


def load_tenants(path: Path) -> dict[str, TenantEntry]:
    """The tenants file, checked: every tenant id, URL and model path (relative ones resolved)."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValidationFailed(f"the tenants file {path} cannot be read: {exc.strerror}", field="tenants") from None
    except yaml.YAMLError as exc:
        raise ValidationFailed(f"the tenants file {path} is not YAML: {exc}", field="tenants") from None
    if not isinstance(document, dict) or not document:
        raise ValidationFailed(f"the tenants file {path} must map each tenant id to {{warehouse: URL, model: PATH}}", field="tenants")
    entries: dict[str, TenantEntry] = {}
    for tenant, raw in document.items():
        if not isinstance(tenant, str) or not _TENANT.match(tenant):
            raise ValidationFailed(f"{path}: {tenant!r} is not a tenant id (letters, digits, _ . -)", field="tenants")
        try:
            entry = TenantEntry.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise ValidationFailed(f"{path}: tenant {tenant}: {problems}", field="tenants") from None
        model = entry.model if entry.model.is_absolute() else (path.parent / entry.model).resolve()
        if not model.is_file():
            raise ValidationFailed(f"{path}: tenant {tenant}: the model file {model} does not exist", field="tenants")
        entries[tenant] = TenantEntry(warehouse=_resolve_url(entry.warehouse, path.parent), model=model, tables=entry.tables)
    by_warehouse: dict[str, list[str]] = {}
    for tenant, entry in entries.items():
        by_warehouse.setdefault(entry.warehouse, []).append(tenant)
    for url, sharing in by_warehouse.items():
        unlisted = [t for t in sharing if entries[t].tables is None]
        if len(sharing) > 1 and unlisted:
            raise ValidationFailed(
                f"{path}: tenants {', '.join(sharing)} share the warehouse {_shown(url)}: each needs a tables: list "
                f"(the tables it may read); missing for {', '.join(unlisted)}",
                field="tenants",
            )
    return entries


def _shown(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//…@", url)  # never a password in a message


def _resolve_url(url: str, folder: Path) -> str:
    """duckdb:///abs stays; duckdb://relative (or duckdb:relative) is read from the file's folder."""
    if url.startswith("duckdb:"):
        rest = url[len("duckdb:") :]
        if rest.startswith("///"):
            return url
        relative = rest.lstrip("/")
        return f"duckdb://{(folder / relative).resolve()}"
    return url


__all__ = ["TenantEntry", "TenantModel", "load_tenants", "table_granted", "table_pattern_problem"]
