"""The API versions this broker serves: one table, intersected with what kio can decode.

ApiVersions advertises exactly this table; any other (key, version) is refused.
"""

from __future__ import annotations

from enum import IntEnum

from kio.schema.index import api_key_map, schema_name_map

from .legacy_schemas import legacy_versions


class ApiKey(IntEnum):
    """Kafka API keys served (names as in Kafka's message definitions)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


# Highest versions we implement the semantics of. Produce v13 / Fetch v17+ / Metadata v13 change
# identifiers or error layout we do not serve yet, OffsetCommit/OffsetFetch v10 key topics by id.
# Lower bounds: the lowest version Kafka 3.9 accepted (its message JSON schemas' validVersions),
# for every API below, Produce v0-2 and Fetch v0-3 (message formats v0/v1, converted to and from
# the stored v2 batches) included. kio generates Kafka 4's versions (KIP-896 removed the oldest);
# the versions it lacks come from legacy_schemas. SERVED_MIN caps what the union of the two would
# offer.
SERVED_MAX: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 11,
    ApiKey.FETCH: 16,
    ApiKey.LIST_OFFSETS: 8,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,  # KIP-320; v0-1 from legacy_schemas
    ApiKey.API_VERSIONS: 4,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.INIT_PRODUCER_ID: 5,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.FIND_COORDINATOR: 6,
    ApiKey.JOIN_GROUP: 9,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 5,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.DESCRIBE_GROUPS: 6,  # v6: KIP-1043's GROUP_ID_NOT_FOUND for a group not classic
    ApiKey.LIST_GROUPS: 5,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: 0,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    # SASL (server/sasl_wire.py answers them): v0 stays advertised, librdkafka needs it (§2.1)
    ApiKey.SASL_HANDSHAKE: 1,
    ApiKey.SASL_AUTHENTICATE: 2,
    # Transactions at transaction.version 0 (the feature is not advertised): EndTxn v5 and
    # TxnOffsetCommit v5 belong to TV2 and are not served; AddPartitionsToTxn v4-5 is the leaders'
    # batched / verify-only form.
    ApiKey.ADD_PARTITIONS_TO_TXN: 5,
    ApiKey.ADD_OFFSETS_TO_TXN: 4,
    ApiKey.END_TXN: 4,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.TXN_OFFSET_COMMIT: 4,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 1,
    # Security (reference security.md §2-§3): the ACL APIs from v1 (KIP-896 removed v0), SCRAM
    # credentials, and DescribeClientQuotas as an empty stub (kafka-configs --describe asks it).
    ApiKey.DESCRIBE_ACLS: 3,
    ApiKey.CREATE_ACLS: 3,
    ApiKey.DELETE_ACLS: 3,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1,
    # KIP-848 consumer groups (reference B2); librdkafka sends v1 only. Listed even when
    # group.coordinator.rebalance.protocols leaves consumer out (then answered 35), as Kafka does.
    ApiKey.CONSUMER_GROUP_HEARTBEAT: 1,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 1,
    # KIP-932 share groups (share-groups.md §0): v1 only (v0 was 4.0's early access); listed even
    # when group.share.enable is off (then answered 35), as Kafka does. librdkafka asks for v1;
    # ShareFetch/ShareAcknowledge v2 (acquire modes, renew requests) is not served yet.
    ApiKey.SHARE_GROUP_HEARTBEAT: 1,
    ApiKey.SHARE_GROUP_DESCRIBE: 1,
    ApiKey.SHARE_FETCH: 1,
    ApiKey.SHARE_ACKNOWLEDGE: 1,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 1,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
    # The share coordinator's internal state APIs (brokers to brokers, cluster mode; §5).
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 1,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 1,
}


# Lowest versions served where kio/legacy_schemas know older ones we do not implement.
SERVED_MIN: dict[ApiKey, int] = {}


def _kio_versions(api_key: int) -> set[int]:
    name = api_key_map[api_key]
    kio = {v for v, kinds in schema_name_map[name].items() if len(kinds) >= 2}
    return kio | legacy_versions(api_key)


def _build() -> dict[int, tuple[int, int]]:
    table = {}
    for key, served_max in SERVED_MAX.items():
        served_min = SERVED_MIN.get(key, 0)
        versions = sorted(v for v in _kio_versions(key) if served_min <= v <= served_max)
        table[int(key)] = (versions[0], versions[-1])
    return table


SUPPORTED: dict[int, tuple[int, int]] = _build()


def is_supported(api_key: int, version: int) -> bool:
    """True when we serve this (api_key, version)."""
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


def api_keys_body() -> list[dict[str, int]]:
    """The `api_keys` array of an ApiVersions response."""
    return [
        {"api_key": key, "min_version": lo, "max_version": hi}
        for key, (lo, hi) in sorted(SUPPORTED.items())
    ]
