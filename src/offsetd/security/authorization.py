"""The authorization decision (reference security.md §3): one request's principal and host asking
the ACL Authorizer whether an operation on a resource is allowed, each answer asked once.

Authorization is on when `authorizer.class.name` is non-empty (config.py accepts Kafka's
StandardAuthorizer and AclAuthorizer names, both served by acl.py's Authorizer). Off,
`broker.authorizer` is None and every handler pays one attribute test. On, each check is one call
of Authorizer.authorize(principal, host, operation, resource type, name). Which check each API
makes is server/api_checks.py's table."""

from __future__ import annotations

from typing import Any, Iterable

from .acl import CLUSTER_NAME, AclOperation, Authorizer, ResourceType

Op = AclOperation
Res = ResourceType


def _host(ctx: Any) -> str:
    host = getattr(ctx, "host", "")
    if host:
        return host
    return getattr(ctx, "client_host", "").lstrip("/")


class Access:
    """One request's view of the authorizer: its principal and host, and the decisions already
    made (a request naming a topic in many partitions asks once)."""

    __slots__ = ("authorizer", "principal", "host", "_memo")

    def __init__(self, authorizer: Authorizer, ctx: Any) -> None:
        self.authorizer = authorizer
        self.principal: str = getattr(ctx, "principal", "User:ANONYMOUS")
        self.host = _host(ctx)
        self._memo: dict[tuple[int, int, str], bool] = {}

    def allows(self, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        key = (op, rtype, name)
        decision = self._memo.get(key)
        if decision is None:
            decision = self._memo[key] = self.authorizer.authorize(self.principal, self.host, op, rtype, name)
        return decision

    def cluster(self, op: AclOperation) -> bool:
        return self.allows(op, Res.CLUSTER, CLUSTER_NAME)

    def by_type(self, op: AclOperation, rtype: ResourceType) -> bool:
        return self.authorizer.authorize_by_type(self.principal, self.host, op, rtype)

    def operations(self, rtype: ResourceType, name: str) -> int:
        """The authorized_operations bit field of a resource (§3 item 7)."""
        return self.authorizer.authorized_operations(self.principal, self.host, rtype, name)

    def denied(self, op: AclOperation, rtype: ResourceType, names: Iterable[str]) -> set[str]:
        return {name for name in names if not self.allows(op, rtype, name)}


def access(broker: Any, ctx: Any) -> Access | None:
    """The Access of the request `ctx` (broker/request_context.py's current_context() in handlers),
    or None when authorization is off (one attribute test)."""
    authorizer = getattr(broker, "authorizer", None)  # unit tests drive handlers with stand-in brokers
    if authorizer is None:
        return None
    return Access(authorizer, ctx)


def authorizer_enabled(config: Any) -> bool:
    """`authorizer.class.name` set (to any value config.py accepts): ACLs are enforced."""
    return bool(config.get("authorizer.class.name"))
