"""The model of `offsetd acls` (kafka-acls.sh compatible): Kafka's ACL names and wire codes, the
bindings and filters an invocation means, and kafka-acls' output text. No client library here:
`acls_cli` turns these into confluent-kafka calls.

Kafka's rules reproduced: `--operation` defaults to All; a principal without a host gets host `*`;
`--consumer` means topic READ+DESCRIBE and group READ, `--producer` topic WRITE+DESCRIBE+CREATE
(+ CLUSTER IDEMPOTENT_WRITE with `--idempotent`, + WRITE+DESCRIBE on each `--transactional-id`);
each resource type accepts only its own operations."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable

from ..security.acl import CLUSTER_NAME, AclOperation, AclPermission, PatternType, ResourceType
from .errors import UsageError

WILDCARD_HOST = "*"


_O = AclOperation
# The operations each resource type accepts (kafka-acls refuses the others before calling the broker).
RESOURCE_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.ALL}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE, _O.ALL}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE, _O.ALL}),
}


@dataclass(frozen=True, order=True)
class ResourcePattern:
    """A resource (or, with ANY/MATCH pattern types, a resource filter)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")

    def filter_text(self) -> str:
        """kafka-acls' text for the resource used as a filter (--remove's confirmation line)."""
        return (f"ResourcePatternFilter(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, order=True)
class AccessEntry:
    """(principal, host, operation, permission): an ACL on a resource, or with None/ANY a filter."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


@dataclass(frozen=True, order=True)
class Acl:
    """A binding: an access entry on a resource pattern."""

    resource: ResourcePattern
    entry: AccessEntry


def parse_enum(kind: type[IntEnum], text: str, option: str) -> IntEnum:
    """A Kafka name, case-insensitive, with or without underscores (`DescribeConfigs`,
    `describe_configs`); UsageError listing the names otherwise."""
    wanted = text.strip().replace("_", "").replace("-", "").upper()
    for member in kind:
        if member.name.replace("_", "") == wanted:
            return member
    names = ", ".join(m.name for m in kind)
    raise UsageError(f"Invalid value '{text}' for {option}: expected one of {names}")


def parse_principal(text: str, option: str) -> str:
    """A principal `Type:name` (Kafka's rule: a type, a colon, a name)."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise UsageError(f"Invalid principal '{text}' for {option}: expected Type:name, e.g. User:alice")
    return text


@dataclass
class AclRequest:
    """The selectors of one invocation, already validated (see `acls_cli.build_parser`)."""

    topics: list[str]
    groups: list[str]
    transactional_ids: list[str]
    cluster: bool
    pattern_type: PatternType
    allow_principals: list[str]
    deny_principals: list[str]
    allow_hosts: list[str]
    deny_hosts: list[str]
    operations: list[AclOperation]
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False
    principal_filter: list[str] | None = None

    def resources(self) -> list[ResourcePattern]:
        """Every resource named on the command line (the cluster is `kafka-cluster`)."""
        found = [ResourcePattern(ResourceType.TOPIC, t, self.pattern_type) for t in self.topics]
        found += [ResourcePattern(ResourceType.GROUP, g, self.pattern_type) for g in self.groups]
        found += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, self.pattern_type) for t in self.transactional_ids]
        if self.cluster:
            found.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
        return found


def _entries(principals: Iterable[str], hosts: list[str], ops: Iterable[AclOperation],
             permission: AclPermission) -> list[AccessEntry]:
    """Every (principal, host, op) combination; hosts default to `*`."""
    return [AccessEntry(p, h, op, permission) for p in principals for h in (hosts or [WILDCARD_HOST]) for op in ops]


def _access(req: AclRequest, ops: Iterable[AclOperation]) -> list[AccessEntry]:
    """The ALLOW and DENY entries of the request's principals and hosts for `ops`."""
    ops = list(ops)
    return (_entries(req.allow_principals, req.allow_hosts, ops, AclPermission.ALLOW)
            + _entries(req.deny_principals, req.deny_hosts, ops, AclPermission.DENY))


def bindings_to_add(req: AclRequest) -> dict[ResourcePattern, list[AccessEntry]]:
    """resource -> the ACLs `--add` creates on it, checked against each type's operations."""
    if not req.allow_principals and not req.deny_principals:
        raise UsageError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    return _with_operations(req, _access)


def filters_to_remove(req: AclRequest) -> dict[ResourcePattern, list[AccessEntry] | None]:
    """resource filter -> the ACL entries `--remove` deletes (None: every ACL of the filter)."""
    if not req.allow_principals and not req.deny_principals:
        if req.producer or req.consumer:
            raise UsageError("--producer and --consumer need --allow-principal or --deny-principal")
        if req.allow_hosts or req.deny_hosts:
            raise UsageError("--allow-host/--deny-host need --allow-principal/--deny-principal")
        resources = req.resources()
        if not resources:
            raise _no_resource()
        return {r: None for r in resources}
    return dict(_with_operations(req, _access))


def _no_resource() -> UsageError:
    return UsageError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                      "or --transactional-id <id>")


def _with_operations(req: AclRequest, access) -> dict[ResourcePattern, list[AccessEntry]]:
    """The per-resource entries of --operation, or of the --producer/--consumer conveniences."""
    if req.producer or req.consumer:
        result = _conveniences(req, access)
    else:
        resources = req.resources()
        if not resources:
            raise _no_resource()
        result = {r: access(req, req.operations) for r in resources}
    for resource, entries in result.items():
        allowed = RESOURCE_OPERATIONS.get(resource.resource_type, frozenset())
        bad = sorted({e.operation for e in entries} - allowed)
        if bad:
            raise UsageError(f"ResourceType {resource.resource_type.name} only supports operations "
                             + ", ".join(op.name for op in sorted(allowed)) + f" (not {bad[0].name})")
    return result


def _conveniences(req: AclRequest, access) -> dict[ResourcePattern, list[AccessEntry]]:
    """--producer / --consumer (both may be given): the ACLs each client role needs."""
    result: dict[ResourcePattern, list[AccessEntry]] = {}

    def add(resource: ResourcePattern, ops: list[AclOperation]) -> None:
        entries = result.setdefault(resource, [])
        entries.extend(e for e in access(req, ops) if e not in entries)

    pattern = req.pattern_type
    if req.producer:
        if not req.topics:
            raise UsageError("With --producer you must specify a --topic")
        for topic in req.topics:
            add(ResourcePattern(ResourceType.TOPIC, topic, pattern), [_O.WRITE, _O.DESCRIBE, _O.CREATE])
        for txn in req.transactional_ids:
            add(ResourcePattern(ResourceType.TRANSACTIONAL_ID, txn, pattern), [_O.WRITE, _O.DESCRIBE])
        if req.idempotent:
            add(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL), [_O.IDEMPOTENT_WRITE])
    if req.consumer:
        if not req.topics or not req.groups:
            raise UsageError("With --consumer you must specify a --topic and a --group and no --cluster or "
                             "--transactional-id option should be specified.")
        for topic in req.topics:
            add(ResourcePattern(ResourceType.TOPIC, topic, pattern), [_O.READ, _O.DESCRIBE])
        for group in req.groups:
            add(ResourcePattern(ResourceType.GROUP, group, pattern), [_O.READ])
    return result


def list_filters(req: AclRequest) -> list[ResourcePattern]:
    """The resource filters of `--list`: the named resources, or every resource."""
    return req.resources() or [ResourcePattern(ResourceType.ANY, None, PatternType.ANY)]


def format_acls(verb: str, resource: ResourcePattern, entries: Iterable[AccessEntry]) -> str:
    """kafka-acls' block, spacing included: "<verb> for resource `ResourcePattern(...)`: ", then
    the ACLs one per line, each after a tab (the first line starts with a space, the last ends
    with one), then a blank line."""
    lines = "\n".join(f"\t{entry}" for entry in sorted(entries, key=_entry_order))
    return f"{verb} for resource `{resource}`: \n {lines} \n\n"


def _entry_order(entry: AccessEntry) -> tuple:
    return (entry.principal or "", entry.host or "", entry.permission.name, entry.operation.name)


def group_by_resource(acls: Iterable[Acl]) -> dict[ResourcePattern, list[AccessEntry]]:
    """Bindings grouped per resource, resources in (type, name, pattern) order."""
    grouped: dict[ResourcePattern, list[AccessEntry]] = {}
    for acl in sorted(acls, key=lambda a: (a.resource.resource_type.name, a.resource.name or "",
                                           a.resource.pattern_type.name)):
        grouped.setdefault(acl.resource, []).append(acl.entry)
    return grouped


def format_listing(acls: Iterable[Acl], principals: list[str] | None = None) -> str:
    """`--list`'s output; with `--principal` only those principals' ACLs, under Kafka's heading."""
    acls = list(acls)
    if principals:
        text = ""
        for principal in principals:
            mine = [a for a in acls if a.entry.principal == principal]
            text += f"ACLs for principal `{principal}`\n" + "".join(
                format_acls("Current ACLs", r, e) for r, e in group_by_resource(mine).items()) + "\n"
        return text
    return "".join(format_acls("Current ACLs", r, e) for r, e in group_by_resource(acls).items())


def acl_json(acl: Acl) -> dict[str, object]:
    """One binding for --output json."""
    return {"resourceType": acl.resource.resource_type.name, "name": acl.resource.name,
            "patternType": acl.resource.pattern_type.name, "principal": acl.entry.principal,
            "host": acl.entry.host, "operation": acl.entry.operation.name,
            "permissionType": acl.entry.permission.name}
