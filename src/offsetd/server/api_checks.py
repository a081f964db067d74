"""Authorization at the edge (reference security.md §4): which check each served API makes, in
check order, as data the unit tests hold against the reference. The handlers in broker/ and
server/ make these checks through security/authorization.py's Access."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..protocol.api_versions import ApiKey
from ..protocol.errors import Error
from ..security.acl import AclOperation, ResourceType
from ..security.authorization import Access, Op, Res


class Where(str, Enum):
    """Where a denied check's error goes in the response."""

    TOP = "top level"
    PARTITION = "every partition of the resource"
    ALL_PARTITIONS = "every partition of the request"
    RESOURCE = "that resource's entry"
    KEY = "that key's entry (v4+), top level before"
    GROUP = "that group's entry (top level in single-group versions)"
    FILTERED = "omitted silently"
    CONFIG_ERROR = "the created topic's config error, configs omitted"


@dataclass(frozen=True, slots=True)
class Check:
    """One authorization step of an API: `operation` on `resource`, else `error` at `where`."""

    resource: ResourceType
    operation: AclOperation
    error: int
    where: Where
    note: str = ""


def _c(resource: ResourceType, operation: AclOperation, error: int, where: Where, note: str = "") -> Check:
    return Check(resource, operation, error, where, note)


_TXN_DENIED = Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_TOPIC_DENIED = Error.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = Error.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED = Error.CLUSTER_AUTHORIZATION_FAILED

# THE TABLE (§4), in check order. Handlers implement exactly these steps; the unit tests hold this
# table against the reference. APIs with no check (ApiVersions, SaslHandshake, SaslAuthenticate)
# are absent.
API_CHECKS: dict[int, tuple[Check, ...]] = {
    ApiKey.PRODUCE: (
        _c(Res.TRANSACTIONAL_ID, Op.WRITE, _TXN_DENIED, Where.ALL_PARTITIONS, "only with a transactional batch"),
        _c(Res.TOPIC, Op.WRITE, _TOPIC_DENIED, Where.PARTITION, "before unknown-topic")),
    ApiKey.FETCH: (_c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION, "consumers (replica_id < 0)"),),
    ApiKey.LIST_OFFSETS: (_c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.PARTITION),),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        _c(Res.CLUSTER, Op.CLUSTER_ACTION, _TOPIC_DENIED, Where.PARTITION, "allows every topic (brokers)"),
        _c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.PARTITION, "else per topic (consumers, KIP-320)")),
    ApiKey.METADATA: (
        _c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.RESOURCE, "all-topics requests: omitted silently"),
        _c(Res.CLUSTER, Op.CREATE, _TOPIC_DENIED, Where.RESOURCE, "auto-create; else CREATE on the topic")),
    ApiKey.CREATE_TOPICS: (
        _c(Res.CLUSTER, Op.CREATE, _TOPIC_DENIED, Where.RESOURCE, "else CREATE on each topic"),
        _c(Res.TOPIC, Op.DESCRIBE_CONFIGS, _TOPIC_DENIED, Where.CONFIG_ERROR)),
    ApiKey.DELETE_TOPICS: (
        _c(Res.CLUSTER, Op.DELETE, _TOPIC_DENIED, Where.RESOURCE, "allows every topic"),
        _c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.RESOURCE, "before existence"),
        _c(Res.TOPIC, Op.DELETE, _TOPIC_DENIED, Where.RESOURCE)),
    ApiKey.CREATE_PARTITIONS: (_c(Res.TOPIC, Op.ALTER, _TOPIC_DENIED, Where.RESOURCE),),
    ApiKey.DESCRIBE_CONFIGS: (
        _c(Res.TOPIC, Op.DESCRIBE_CONFIGS, _TOPIC_DENIED, Where.RESOURCE, "TOPIC resources"),
        _c(Res.GROUP, Op.DESCRIBE_CONFIGS, _GROUP_DENIED, Where.RESOURCE, "GROUP resources"),
        _c(Res.CLUSTER, Op.DESCRIBE_CONFIGS, _CLUSTER_DENIED, Where.RESOURCE, "BROKER, BROKER_LOGGER, CLIENT_METRICS")),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        _c(Res.TOPIC, Op.ALTER_CONFIGS, _TOPIC_DENIED, Where.RESOURCE, "TOPIC resources"),
        _c(Res.GROUP, Op.ALTER_CONFIGS, _GROUP_DENIED, Where.RESOURCE, "GROUP resources"),
        _c(Res.CLUSTER, Op.ALTER_CONFIGS, _CLUSTER_DENIED, Where.RESOURCE, "BROKER, BROKER_LOGGER, CLIENT_METRICS")),
    ApiKey.INIT_PRODUCER_ID: (
        _c(Res.TRANSACTIONAL_ID, Op.WRITE, _TXN_DENIED, Where.TOP, "with a transactional id"),
        _c(Res.CLUSTER, Op.IDEMPOTENT_WRITE, _CLUSTER_DENIED, Where.TOP,
           "without one; or authorize_by_type(WRITE, TOPIC)")),
    ApiKey.FIND_COORDINATOR: (
        _c(Res.GROUP, Op.DESCRIBE, _GROUP_DENIED, Where.KEY, "key type 0"),
        _c(Res.TRANSACTIONAL_ID, Op.DESCRIBE, _TXN_DENIED, Where.KEY, "key type 1")),
    ApiKey.JOIN_GROUP: (_c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),),
    ApiKey.SYNC_GROUP: (_c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),),
    ApiKey.HEARTBEAT: (_c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),),
    ApiKey.LEAVE_GROUP: (_c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),),
    ApiKey.OFFSET_COMMIT: (
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.ALL_PARTITIONS),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION, "before unknown-topic")),
    ApiKey.OFFSET_FETCH: (
        _c(Res.GROUP, Op.DESCRIBE, _GROUP_DENIED, Where.GROUP),
        _c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.PARTITION, "appended; all-topics: omitted silently")),
    ApiKey.OFFSET_DELETE: (
        _c(Res.GROUP, Op.DELETE, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION)),
    ApiKey.DESCRIBE_GROUPS: (_c(Res.GROUP, Op.DESCRIBE, _GROUP_DENIED, Where.RESOURCE),),
    ApiKey.LIST_GROUPS: (
        _c(Res.CLUSTER, Op.DESCRIBE, Error.NONE, Where.FILTERED, "shows every group"),
        _c(Res.GROUP, Op.DESCRIBE, Error.NONE, Where.FILTERED, "else per group")),
    ApiKey.DELETE_GROUPS: (_c(Res.GROUP, Op.DELETE, _GROUP_DENIED, Where.RESOURCE),),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.TOP, "every subscribed topic name")),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (_c(Res.GROUP, Op.DESCRIBE, _GROUP_DENIED, Where.RESOURCE),),
    ApiKey.SHARE_GROUP_HEARTBEAT: (
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.DESCRIBE, _TOPIC_DENIED, Where.TOP, "every subscribed topic name, after the member id")),
    ApiKey.SHARE_GROUP_DESCRIBE: (_c(Res.GROUP, Op.DESCRIBE, _GROUP_DENIED, Where.RESOURCE),),
    ApiKey.SHARE_FETCH: (
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION)),
    ApiKey.SHARE_ACKNOWLEDGE: (
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION)),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (_c(Res.GROUP, Op.DESCRIBE, _GROUP_DENIED, Where.GROUP),),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION)),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (
        _c(Res.GROUP, Op.DELETE, _GROUP_DENIED, Where.TOP),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.RESOURCE)),
    ApiKey.TXN_OFFSET_COMMIT: (
        _c(Res.TRANSACTIONAL_ID, Op.WRITE, _TXN_DENIED, Where.ALL_PARTITIONS),
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.ALL_PARTITIONS),
        _c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION)),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        _c(Res.TRANSACTIONAL_ID, Op.WRITE, _TXN_DENIED, Where.ALL_PARTITIONS,
           "v4+: per transaction, none for verify-only ones (a leader checking a Produce already authorized)"),
        _c(Res.TOPIC, Op.WRITE, _TOPIC_DENIED, Where.PARTITION, "the others: OPERATION_NOT_ATTEMPTED")),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        _c(Res.TRANSACTIONAL_ID, Op.WRITE, _TXN_DENIED, Where.TOP),
        _c(Res.GROUP, Op.READ, _GROUP_DENIED, Where.TOP)),
    ApiKey.END_TXN: (_c(Res.TRANSACTIONAL_ID, Op.WRITE, _TXN_DENIED, Where.TOP),),
    ApiKey.WRITE_TXN_MARKERS: (_c(Res.CLUSTER, Op.CLUSTER_ACTION, _CLUSTER_DENIED, Where.ALL_PARTITIONS,
                                  "cluster mode: the peers' principal needs it (or is a super user)"),),
    **{api: (_c(Res.CLUSTER, Op.CLUSTER_ACTION, _CLUSTER_DENIED, Where.PARTITION,
                "the share coordinator's state APIs: brokers only"),)
       for api in (ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
                   ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY)},
    ApiKey.DESCRIBE_TRANSACTIONS: (_c(Res.TRANSACTIONAL_ID, Op.DESCRIBE, _TXN_DENIED, Where.RESOURCE),),
    ApiKey.LIST_TRANSACTIONS: (_c(Res.TRANSACTIONAL_ID, Op.DESCRIBE, Error.NONE, Where.FILTERED),),
    ApiKey.DESCRIBE_PRODUCERS: (_c(Res.TOPIC, Op.READ, _TOPIC_DENIED, Where.PARTITION),),
    ApiKey.DESCRIBE_ACLS: (_c(Res.CLUSTER, Op.DESCRIBE, _CLUSTER_DENIED, Where.TOP),),
    ApiKey.CREATE_ACLS: (_c(Res.CLUSTER, Op.ALTER, _CLUSTER_DENIED, Where.RESOURCE),),
    ApiKey.DELETE_ACLS: (_c(Res.CLUSTER, Op.ALTER, _CLUSTER_DENIED, Where.RESOURCE),),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (_c(Res.CLUSTER, Op.DESCRIBE, _CLUSTER_DENIED, Where.TOP),),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (_c(Res.CLUSTER, Op.ALTER, _CLUSTER_DENIED, Where.RESOURCE),),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (_c(Res.CLUSTER, Op.DESCRIBE_CONFIGS, _CLUSTER_DENIED, Where.TOP),),
}


def check(api_key: int, resource: ResourceType) -> Check:
    """The table's check of `api_key` on `resource` (the first one, when there are several)."""
    return next(c for c in API_CHECKS[api_key] if c.resource == resource)


def commit_denied(acc: Access | None, topics: Any, group_id: str, transactional_id: str | None = None) -> dict[str, int]:
    """Per topic, the authorization error of its partitions in OffsetCommit / TxnOffsetCommit
    (reference security.md §4, in order): no WRITE on the transactional id: 53 everywhere; no READ
    on the group: 30 everywhere; else 29 on each topic without READ. Empty: all allowed."""
    if acc is None:
        return {}
    names = {t.name for t in topics}
    if transactional_id is not None and not acc.allows(Op.WRITE, Res.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(names, Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not acc.allows(Op.READ, Res.GROUP, group_id or ""):
        return dict.fromkeys(names, Error.GROUP_AUTHORIZATION_FAILED)
    return dict.fromkeys(acc.denied(Op.READ, Res.TOPIC, names), Error.TOPIC_AUTHORIZATION_FAILED)
