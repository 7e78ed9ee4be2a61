"""Who is asking, read from the request: the authorizer's claims (AWS) or local headers (local only).

Identity never comes from the request body. In AWS only the Cognito authorizer's claims count;
the X-Memtool-* headers are honoured only when the runtime is local.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from memtool.errors import Unauthenticated, ValidationFailed
from memtool.identity import CURATOR_ROLES, Identity
from memtool.settings import Settings

# '#' separates key parts in the memory table, so identifiers may never contain it.
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@:\-]{0,127}$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)

TENANT_HEADER = "x-memtool-tenant"
USER_HEADER = "x-memtool-user"
ROLES_HEADER = "x-memtool-roles"

# How each header is named in errors and in the OpenAPI document.
ROLES_HEADER_MAX = 512  # the OpenAPI document says so too
HEADER_NAMES = {TENANT_HEADER: "X-Memtool-Tenant", USER_HEADER: "X-Memtool-User", ROLES_HEADER: "X-Memtool-Roles"}


def identity_from_event(event: Mapping[str, Any], settings: Settings) -> Identity:
    claims = ((event.get("requestContext") or {}).get("authorizer") or {}).get("claims") or {}
    if claims:
        return _checked(claims.get(settings.tenant_claim), claims.get("sub"), _roles(claims.get(settings.roles_claim)))
    if settings.is_local:
        roles = single_header(event, ROLES_HEADER, HEADER_NAMES[ROLES_HEADER])
        if roles is not None and len(roles) > ROLES_HEADER_MAX:
            raise ValidationFailed(f"is {len(roles)} characters; the limit is {ROLES_HEADER_MAX}", field=HEADER_NAMES[ROLES_HEADER])
        return _checked(
            single_header(event, TENANT_HEADER, HEADER_NAMES[TENANT_HEADER]),
            single_header(event, USER_HEADER, HEADER_NAMES[USER_HEADER]),
            _roles(roles),
        )
    raise Unauthenticated("no authorizer claims on the request", field="authorization")


def single_header(event: Mapping[str, Any], name: str, display_name: str) -> str | None:
    """The one value of header ``name`` (any case), or None; sent twice it is a 400, never "last wins".

    A REST proxy event keeps every value in ``multiValueHeaders`` and only the last in ``headers``.
    """
    values: list[Any] = []
    for key, sent in (event.get("multiValueHeaders") or {}).items():
        if key.lower() == name:
            values.extend(v for v in (sent if isinstance(sent, list) else [sent]) if v is not None)
    if not values:  # events without multiValueHeaders (hand-written ones, other proxies)
        values = [v for k, v in (event.get("headers") or {}).items() if k.lower() == name and v is not None]
    if len(values) > 1:
        raise ValidationFailed(f"sent {len(values)} times; send it once", field=display_name)
    return str(values[0]) if values else None


def _roles(raw: Any) -> frozenset[str]:
    if raw is None:
        return frozenset()
    if isinstance(raw, list):
        return frozenset(str(r).strip() for r in raw if str(r).strip())
    # Cognito renders groups as "[a, b]" or "a,b" depending on the integration.
    return frozenset(r.strip() for r in str(raw).strip("[]").replace(" ", ",").split(",") if r.strip())


def _checked(tenant: Any, user: Any, roles: frozenset[str]) -> Identity:
    if not tenant:
        raise Unauthenticated("the caller has no tenant", field="tenant")
    if not user:
        raise Unauthenticated("the caller has no user id", field="user")
    for name, value in (("tenant", tenant), ("user", user)):
        if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
            raise Unauthenticated(f"{name} identifier is malformed", field=name)
    return Identity(tenant=tenant, user=user, roles=roles)


__all__ = ["CURATOR_ROLES", "HEADER_NAMES", "IDENTIFIER_PATTERN", "Identity", "identity_from_event", "single_header"]
