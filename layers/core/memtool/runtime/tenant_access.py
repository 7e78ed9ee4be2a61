"""What a tenant's warehouse access is: its own Redshift in AWS, and the tables granted to it.

A tenant's own Redshift is the secret named ``<TenantRedshiftSecretPrefix><tenant>``.
The container asks ``TenantRedshiftSecret`` for the tenant's warehouse on each request; it asks
Secrets Manager once and keeps what it found, and asks again about a missing secret only after
``TENANT_SECRET_RECHECK_SECONDS``. The secret may also grant the tenant its tables
(``{"tables": [...]}``). The clock, the client and the warehouse's constructor come in from the
container, so this module touches no AWS client of its own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memtool.runtime.tenancy import TenantEntry
    from memtool.semantic.catalog import TenantModel
    from memtool.settings import Settings
    from memtool.sql.warehouse import Warehouse

logger = logging.getLogger("memtool.runtime")

# A tenant without a secret of its own is asked about again after this long, not on every request
# (each would be a Secrets Manager call): a secret created for it is used within five minutes.
TENANT_SECRET_RECHECK_SECONDS = 300.0


def secret_name_part(tenant: str) -> str:
    """Tenant ids are checked where they enter; a secret name allows more (``/`` would reach another
    tenant's path under the prefix), so anything but letters, digits, _ . - stops here."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", tenant):
        from memtool.errors import ValidationFailed

        raise ValidationFailed("the tenant id must be letters, digits, _ . - (at most 64)", field="tenant")
    return tenant


class TenantRedshiftSecret:
    """One tenant's secret as Secrets Manager last answered: its warehouse (kept), or none (asked
    again after TENANT_SECRET_RECHECK_SECONDS)."""

    def __init__(
        self,
        name: str,
        *,
        now: Callable[[], float],
        secrets: Callable[[], Any],
        open_warehouse: Callable[[str, Any], Warehouse],
    ) -> None:
        self.name = name
        self._now = now  # a timestamp of the container's clock
        self._secrets = secrets  # () -> a Secrets Manager client
        self._open_warehouse = open_warehouse  # (the secret's ARN, the client) -> the tenant's Redshift, guarded
        self._found: Warehouse | None = None
        self.tables: tuple[str, ...] | None = None  # what the secret grants ({"tables": [...]}), when it says
        self._missing_until = 0.0  # a timestamp of the container's clock
        self._lock = threading.Lock()

    def warehouse(self) -> Warehouse | None:
        with self._lock:
            if self._found is not None:
                return self._found
            now = self._now()
            if now < self._missing_until:
                return None
            secrets = self._secrets()
            arn = self._lookup(secrets)
            if arn is None:
                self._missing_until = now + TENANT_SECRET_RECHECK_SECONDS
                return None
            # By its ARN, so a later read (after a password rotation) is of this very secret.
            self._found = self._open_warehouse(arn, secrets)
            return self._found

    def _lookup(self, secrets: Any) -> str | None:
        """The secret's ARN, or None when no secret has this name."""
        from botocore.exceptions import ClientError

        from memtool.sql.warehouse import WarehouseError

        try:
            found = secrets.get_secret_value(SecretId=self.name)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code == "ResourceNotFoundException":
                return None
            raise WarehouseError(
                f"the tenant's Redshift secret {self.name} could not be read ({code}); the stack's role may read only "
                "secrets named with TenantRedshiftSecretPrefix",
                code="unavailable",
            ) from None
        if found.get("Name") != self.name:  # Secrets Manager also resolves partial ARNs: only this very name counts
            logger.warning("secret %s answered as %s: not the tenant's", self.name, found.get("Name"))
            return None
        self.tables = secret_tables(found.get("SecretString"), self.name)
        return str(found["ARN"])


def secret_tables(secret_string: Any, name: str) -> tuple[str, ...] | None:
    """The ``tables`` a tenant's secret grants (``{"tables": ["fact_*", ...], ...}``), or None."""
    import json

    from memtool.sql.grants import normalized_patterns

    try:
        document = json.loads(secret_string) if isinstance(secret_string, str) else None
    except ValueError:
        return None
    raw = document.get("tables") if isinstance(document, dict) else None
    if raw is None:
        return None
    from memtool.sql.warehouse import WarehouseError

    if not isinstance(raw, list) or not raw:
        raise WarehouseError(f"the tenant's secret {name}: tables must be a list of table names or patterns", code="unavailable")
    try:
        return normalized_patterns(str(p) for p in raw)
    except ValueError as exc:
        raise WarehouseError(f"the tenant's secret {name}: tables: {exc}", code="unavailable") from None


def granted_patterns(
    tenant: str | None, settings: Settings, *, entry: TenantEntry | None, secret: Callable[[], TenantRedshiftSecret | None]
) -> tuple[str, ...] | None:
    """The warehouse tables an operator granted the tenant (patterns), or None where nothing is configured.

    A tenants-file ``entry``'s ``tables:``; else, for a tenant with its own Redshift ``secret``, the
    secret's ``tables``; else MEMTOOL_TENANT_TABLES (the tenant's entry, or ``*``). None means the
    warehouse is the tenant's own, or the built-in demo: the model's tables are then the wall.
    """
    if entry is not None:
        return entry.tables
    own = secret()
    if own is not None and own.warehouse() is not None and own.tables is not None:
        return own.tables
    configured = settings.tenant_tables
    patterns = configured.get(tenant or "") if tenant else None
    if patterns is None:
        patterns = configured.get("*")
    if patterns is None:
        return None
    from memtool.sql.grants import normalized_patterns

    return normalized_patterns(patterns)


def missing_grant(
    tenant: str | None, settings: Settings, *, granted: tuple[str, ...] | None, has_entry: bool, own_redshift: Callable[[], bool]
) -> str | None:
    """Why the tenant needs a grant it does not have, or None: on the stack's shared Redshift (a
    tenant without a secret of its own), every tenant's tables must be granted before a curator may
    store a model, or one curator's model could name another tenant's tables."""
    if granted is not None or has_entry:
        return None  # granted, or a tenants-file entry (load_tenants requires grants where entries share a warehouse)
    if settings.warehouse == "redshift":
        if settings.tenant_redshift_secret_prefix and tenant and own_redshift():
            return None  # a warehouse of its own
        return (
            f"tenant {tenant} reads the stack's shared Redshift, which serves every tenant without a secret of its own: "
            "grant it its tables first (the TenantTables parameter, MEMTOOL_TENANT_TABLES, or a tables list in its own secret)"
        )
    if settings.warehouse_url:
        return (
            f"tenant {tenant} reads the process's warehouse (MEMTOOL_WAREHOUSE_URL), which serves every tenant not in the "
            "tenants file: grant it its tables first (MEMTOOL_TENANT_TABLES, e.g. {\"" + str(tenant) + "\": [\"*\"]} on a "
            "warehouse of its own), or give it a tenants-file entry with tables:"
        )
    return None  # the built-in demo warehouse: the same demo data for every tenant


def refuse_beyond_the_demo(tenant: str, model: TenantModel, demo_tables: tuple[str, ...]) -> None:
    """Raise WarehouseMissing (409) when the tenant's model reads tables the built-in demo warehouse
    does not hold (a model pushed in another process that had the tenant's warehouse, say): it is
    told what to configure, never run on the demo's data."""
    if model.origin == "built_in":
        return
    demo = {t.lower() for t in demo_tables}
    foreign = sorted(t for t in model.catalog.physical_tables if t.lower() not in demo)
    if foreign:
        from memtool.errors import WarehouseMissing

        raise WarehouseMissing(
            f"tenant {tenant}'s semantic model ({model.label}) reads tables this process has no warehouse for "
            f"({', '.join(foreign[:5])}{', …' if len(foreign) > 5 else ''}): give the tenant its warehouse with an entry in a "
            "tenants file (memtool serve --tenants FILE, memtool mcp --tenants FILE) or MEMTOOL_WAREHOUSE_URL",
            field="warehouse",
        )
