"""ACLs and the one authorization function (reference security.md §3): a pure, indexed ACL set that
answers authorize(principal, host, operation, resource) the way Kafka's StandardAuthorizer does."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Iterator

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
# authorize_by_type's first check runs on a fixed name: super users and allow-everyone pass there.
_BY_TYPE_NAME = "hardcode"
_CACHE_LIMIT = 8192


class ResourceType(IntEnum):
    """Kafka's resource type wire codes (ANY only in filters)."""

    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's resource pattern type wire codes (ANY and MATCH only in filters)."""

    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    """Kafka's ACL operation wire codes; bit n of an authorized_operations field is operation n."""

    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(IntEnum):
    """Kafka's ACL permission type wire codes (ANY only in filters)."""

    ANY = 1
    DENY = 2
    ALLOW = 3


Op = AclOperation

# An ALLOW on any of these also allows the key (§3 item 4); a DENY implies nothing.
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    Op.DESCRIBE: frozenset({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}),
    Op.DESCRIBE_CONFIGS: frozenset({Op.ALTER_CONFIGS}),
}

# The operations tested for an authorized_operations field, per resource type (§3 item 7).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
                           Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: (principal, host, operation, permission) on (resource type, name, pattern type)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A Describe/DeleteAcls filter: None and ANY match everything; pattern MATCH matches every ACL
    that applies to the name (the literal one, `*`, and prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermission = AclPermission.ANY

    def matches(self, b: AclBinding) -> bool:
        """Whether the binding is selected by this filter (Kafka's AclBindingFilter semantics)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        return ((self.principal is None or self.principal == b.principal)
                and (self.host is None or self.host == b.host)
                and (self.operation == Op.ANY or self.operation == b.operation)
                and (self.permission == AclPermission.ANY or self.permission == b.permission))

    def _pattern_matches(self, b: AclBinding) -> bool:
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != b.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern != PatternType.MATCH:
            return name == b.resource_name
        if b.pattern_type == PatternType.LITERAL:
            return name == b.resource_name or b.resource_name == WILDCARD
        return name.startswith(b.resource_name)  # PREFIXED


def normalize_host(host: str) -> str:
    """An IP in one canonical spelling (Java's `0:0:0:0:0:0:0:1` and Python's `::1` compare equal;
    an IPv4-mapped IPv6 address is its IPv4 address); anything else unchanged."""
    if host == WILDCARD:
        return host
    try:
        ip = ipaddress.ip_address(host.strip("[]").lstrip("/"))
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


# A prepared ACL entry for the hot path: (principal, normalised host, operation, permission).
_Entry = tuple[str, str, AclOperation, AclPermission]


class Authorizer:
    """Kafka's StandardAuthorizer over an in-memory ACL set, indexed so that a decision costs the
    ACLs of the resource (literal name, `*`, its prefixes), not all of them."""

    def __init__(self, acls: Iterable[AclBinding] = (), super_users: Iterable[str] = (),
                 allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: dict[AclBinding, None] = {}  # insertion-ordered set
        self._literal: dict[tuple[ResourceType, str], list[_Entry]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[_Entry]]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._by_type: dict[ResourceType, list[tuple[AclBinding, str]]] = {}  # (binding, normalised host)
        self._cache: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        for binding in acls:
            self._acls[binding] = None
        self._reindex()

    def __len__(self) -> int:
        return len(self._acls)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(list(self._acls))

    # ------------------------------------------------------------------ ACL set

    @staticmethod
    def validate(binding: AclBinding) -> str | None:
        """Why CreateAcls must refuse this ACL with INVALID_REQUEST (42), or None if it is valid."""
        if binding.resource_type == ResourceType.ANY:
            return "Invalid resource type ANY: an ACL needs a concrete resource type"
        if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"Invalid pattern type {binding.pattern_type.name}: only LITERAL and PREFIXED ACLs can be created"
        if binding.operation == Op.ANY:
            return "Invalid operation ANY: an ACL needs a concrete operation"
        if binding.permission == AclPermission.ANY:
            return "Invalid permission type ANY: an ACL is either ALLOW or DENY"
        if not binding.resource_name:
            return "Resource name must not be empty"
        if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
            return f"A CLUSTER resource must be named {CLUSTER_NAME!r}, not {binding.resource_name!r}"
        kind, sep, name = (binding.principal or "").partition(":")
        if not sep or not kind or not name:
            return f"Invalid principal {binding.principal!r}: expected <type>:<name>, e.g. User:alice"
        if not binding.host:
            return "Host must not be empty (use * for any host)"
        return None

    def add(self, bindings: Iterable[AclBinding]) -> list[str | None]:
        """Add ACLs (an existing one is not duplicated); per binding its validation error or None."""
        results: list[str | None] = []
        for binding in bindings:
            problem = self.validate(binding)
            if problem is None:
                self._acls[binding] = None
            results.append(problem)
        self._reindex()
        return results

    def remove(self, filters: Iterable[AclFilter]) -> list[list[AclBinding]]:
        """Remove every ACL matching any filter; per filter the ACLs it matched (before removal)."""
        matched = [self.describe(f) for f in filters]
        for bindings in matched:
            for binding in bindings:
                self._acls.pop(binding, None)
        self._reindex()
        return matched

    def describe(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The ACLs the filter selects, in insertion order."""
        return [b for b in self._acls if acl_filter.matches(b)]

    def _reindex(self) -> None:
        self._literal.clear()
        self._prefixed.clear()
        self._by_type.clear()
        self._cache.clear()
        for b in self._acls:
            host = normalize_host(b.host)
            self._by_type.setdefault(b.resource_type, []).append((b, host))
            entry: _Entry = (b.principal, host, b.operation, b.permission)
            if b.pattern_type == PatternType.LITERAL:
                self._literal.setdefault((b.resource_type, b.resource_name), []).append(entry)
            elif b.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(b.resource_type, {}).setdefault(b.resource_name, []).append(entry)
        self._prefix_lengths = {t: tuple(sorted({len(p) for p in by_prefix}))
                                for t, by_prefix in self._prefixed.items()}

    # ------------------------------------------------------------------ decisions

    def candidates(self, rtype: ResourceType, name: str) -> list[_Entry]:
        """Every ACL entry on the resource: LITERAL equal, LITERAL `*`, PREFIXED prefixes of the name."""
        found: list[_Entry] = []
        exact = self._literal.get((rtype, name))
        if exact:
            found.extend(exact)
        if name != WILDCARD:
            wildcard = self._literal.get((rtype, WILDCARD))
            if wildcard:
                found.extend(wildcard)
        by_prefix = self._prefixed.get(rtype)
        if by_prefix:
            for length in self._prefix_lengths[rtype]:
                if length > len(name):
                    break
                entries = by_prefix.get(name[:length])
                if entries:
                    found.extend(entries)
        return found

    def authorize(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        """Whether `principal` connected from `host` may perform `op` on the resource (§3 items 2-5)."""
        key = (principal, host, op, rtype, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, host, op, rtype, name)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, op: AclOperation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self.candidates(rtype, name)
        if not entries:
            return self.allow_if_no_acl
        client = normalize_host(host)
        implying = IMPLIED_BY.get(op, frozenset())
        allowed = False
        for acl_principal, acl_host, acl_op, permission in entries:
            if acl_principal != principal and acl_principal != WILDCARD_PRINCIPAL:
                continue
            if acl_host != WILDCARD and acl_host != client:
                continue
            if acl_op == op or acl_op == Op.ALL:
                if permission == AclPermission.DENY:
                    return False  # DENY beats ALLOW
                allowed = True
            elif permission == AclPermission.ALLOW and acl_op in implying:
                allowed = True
        return allowed

    def authorize_by_type(self, principal: str, host: str, op: AclOperation, rtype: ResourceType) -> bool:
        """Whether `op` is allowed on at least one resource of the type (Kafka's authorizeByResourceType,
        §3 item 6): an undominated ALLOW of exactly `op` or ALL; implied operations do not count."""
        if op == Op.ANY or rtype == ResourceType.ANY:
            raise ValueError("authorize_by_type needs a concrete operation and resource type")
        if self.authorize(principal, host, op, rtype, _BY_TYPE_NAME):
            return True
        client = normalize_host(host)
        deny: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allow: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        for b, acl_host in self._by_type.get(rtype, ()):
            if b.operation != op and b.operation != Op.ALL:
                continue
            if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                continue
            if acl_host != WILDCARD and acl_host != client:
                continue
            if b.permission == AclPermission.DENY:
                if b.pattern_type == PatternType.LITERAL and b.resource_name == WILDCARD:
                    return False  # a LITERAL `*` DENY dominates everything
                deny[b.pattern_type].add(b.resource_name)
            else:
                allow[b.pattern_type].add(b.resource_name)

        def dominated(name: str, pattern: PatternType) -> bool:
            if pattern == PatternType.LITERAL and name == WILDCARD:
                return False  # a LITERAL `*` ALLOW is dominated only by a LITERAL `*` DENY (handled above)
            if pattern == PatternType.LITERAL and name in deny[PatternType.LITERAL]:
                return True
            return any(name.startswith(prefix) for prefix in deny[PatternType.PREFIXED])

        return any(not dominated(name, pattern) for pattern, names in allow.items() for name in names)

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType, name: str) -> int:
        """The authorized_operations bit field of a resource: bit n set when operation n is allowed,
        testing only the operations valid for the type (§3 item 7)."""
        bits = 0
        for op in SUPPORTED_OPERATIONS.get(rtype, ()):
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits


def parse_super_users(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """`super.users`: a `;`-separated list of principals (exact, case-sensitive strings)."""
    if value is None:
        return ()
    items = value.split(";") if isinstance(value, str) else list(value)
    return tuple(item.strip() for item in items if item.strip())
