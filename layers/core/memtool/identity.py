"""Who acts: a tenant, a user in it and their roles. The ground floor's one caller type.

Flows and domain services take an ``Identity``; how one is read from a request (the Cognito
authorizer's claims in AWS, the X-Memtool-* headers locally) is the API layer's business
(``memtool.api.identity``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

CURATOR_ROLES = frozenset({"admin", "curator"})


@dataclass(frozen=True)
class Identity:
    tenant: str
    user: str
    roles: frozenset[str] = field(default_factory=frozenset)

    @property
    def is_curator(self) -> bool:
        return bool(self.roles & CURATOR_ROLES)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles
