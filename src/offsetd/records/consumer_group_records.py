"""KIP-848 consumer-group records of `__consumer_offsets` (types 3-8 and 16): key/value codecs.

Pure code, byte-exact with Kafka 4.0's coordinator record schemas (reference B6). A key is an
int16 record type followed by a non-flexible struct (int16-length strings). A value is int16
version 0 followed by a flexible struct: compact strings, bytes and arrays (uvarint of n + 1,
0 = null), 16-byte uuids, and a tagged-field section closing every struct. A null value is a
tombstone. Readers skip tags they do not know (later Kafka versions add some).

    3  ConsumerGroupMetadata                 GroupId                 Epoch
    4  ConsumerGroupPartitionMetadata        GroupId                 Topics[TopicMetadata]
    5  ConsumerGroupMemberMetadata           GroupId, MemberId       member's subscription
    6  ConsumerGroupTargetAssignmentMetadata GroupId                 AssignmentEpoch
    7  ConsumerGroupTargetAssignmentMember   GroupId, MemberId       TopicPartitions[]
    8  ConsumerGroupCurrentMemberAssignment  GroupId, MemberId       epochs, state, partitions
    16 ConsumerGroupRegularExpression        GroupId, RegularExpression  Topics, Version, Timestamp
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Union

from .coordinator_serde import (
    INT16,
    INT32,
    INT64,
    NO_TAGGED_FIELDS,
    RecordDecodeError,
    StructReader,
    write_compact_bytes,
    write_compact_string,
    write_string,
)
from .varint import encode_uvarint

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "RECORD_TYPE_NAMES",
    "TopicPartitions",
    "TopicMetadata",
    "PartitionRacks",
    "ClassicProtocol",
    "ClassicMemberMetadata",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupKey",
    "ConsumerGroupValue",
    "encode_key",
    "decode_key",
    "encode_value",
    "decode_value",
]

_b = struct.Struct(">b")

_VALUE_VERSION = 0

# ClassicMemberMetadata is tag 0 of the member metadata value.
_TAG_CLASSIC_MEMBER_METADATA = 0


# ---------------------------------------------------------------------------------- structs


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """Partitions of one topic, by topic id (assignments carry ids, not names)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PartitionRacks:
    """Racks of one partition (record 4; unused after Kafka 4.0, written empty)."""

    partition: int
    racks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One subscribed topic as record 4 stores it."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: tuple[PartitionRacks, ...] = ()


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """One protocol a classic-protocol member inside a consumer group supports."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Tag 0 of record 5: present only for a member that joined with the classic protocol."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]


# ------------------------------------------------------------------------------ keys/values
# Keys are frozen dataclasses, not NamedTuples: two key types with the same fields must never
# compare equal (they are dict keys in the coordinator).


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    """Key of record 3: the group epoch."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    """Value of record 3."""

    epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    """Key of record 4: metadata of the subscribed topics."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Value of record 4."""

    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    """Key of record 5: one member's subscription and client details."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    """Value of record 5."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    """Key of record 6: the epoch of the target assignment."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    """Value of record 6."""

    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    """Key of record 7: one member's target assignment."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    """Value of record 7."""

    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    """Key of record 8: one member's current epoch, state and owned partitions."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """Value of record 8; `state` is 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    """Key of record 16: one subscribed regular expression of a group."""

    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """Value of record 16: the topics the expression resolved to, and when."""

    topics: tuple[str, ...]
    version: int
    timestamp: int


ConsumerGroupKey = Union[
    ConsumerGroupMetadataKey, ConsumerGroupPartitionMetadataKey, ConsumerGroupMemberMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupRegularExpressionKey,
]
ConsumerGroupValue = Union[
    ConsumerGroupMetadataValue, ConsumerGroupPartitionMetadataValue, ConsumerGroupMemberMetadataValue,
    ConsumerGroupTargetAssignmentMetadataValue, ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupCurrentMemberAssignmentValue, ConsumerGroupRegularExpressionValue,
]

# record type -> (key class, the key's string fields in order)
_KEY_TYPES: dict[int, tuple[type, tuple[str, ...]]] = {
    3: (ConsumerGroupMetadataKey, ("group_id",)),
    4: (ConsumerGroupPartitionMetadataKey, ("group_id",)),
    5: (ConsumerGroupMemberMetadataKey, ("group_id", "member_id")),
    6: (ConsumerGroupTargetAssignmentMetadataKey, ("group_id",)),
    7: (ConsumerGroupTargetAssignmentMemberKey, ("group_id", "member_id")),
    8: (ConsumerGroupCurrentMemberAssignmentKey, ("group_id", "member_id")),
    16: (ConsumerGroupRegularExpressionKey, ("group_id", "regular_expression")),
}
_TYPE_OF_KEY: dict[type, int] = {cls: t for t, (cls, _fields) in _KEY_TYPES.items()}

CONSUMER_GROUP_RECORD_TYPES = frozenset(_KEY_TYPES)
"""The `__consumer_offsets` key types (the key's first int16) of consumer groups."""

RECORD_TYPE_NAMES: dict[type, str] = {
    ConsumerGroupMetadataKey: "consumer_group_metadata",
    ConsumerGroupPartitionMetadataKey: "consumer_group_partition_metadata",
    ConsumerGroupMemberMetadataKey: "consumer_group_member_metadata",
    ConsumerGroupTargetAssignmentMetadataKey: "consumer_group_target_assignment_metadata",
    ConsumerGroupTargetAssignmentMemberKey: "consumer_group_target_assignment_member",
    ConsumerGroupCurrentMemberAssignmentKey: "consumer_group_current_member_assignment",
    ConsumerGroupRegularExpressionKey: "consumer_group_regular_expression",
}
"""The record type each key is shown as (offsets-log dump, Spark offsets-log source): Kafka's
record name in snake_case, in record-type order."""


# ------------------------------------------------------------------------------- encoding
# Field writers are coordinator_serde's: key strings non-flexible, value strings and bytes compact.


def _carray(items: list[bytes]) -> bytes:
    """Compact array of already-encoded elements."""
    return encode_uvarint(len(items) + 1) + b"".join(items)


def _topic_partitions(tps: tuple[TopicPartitions, ...]) -> bytes:
    """[]TopicPartitions: uuid, compact []int32, empty tag section per element."""
    return _carray([
        tp.topic_id.bytes + _carray([INT32.pack(p) for p in tp.partitions]) + NO_TAGGED_FIELDS for tp in tps
    ])


def _classic_member_metadata(m: ClassicMemberMetadata) -> bytes:
    """ClassicMemberMetadata struct (the body of record 5's tag 0)."""
    protocols = _carray([write_compact_string(p.name) + write_compact_bytes(p.metadata) + NO_TAGGED_FIELDS
                         for p in m.supported_protocols])
    return INT32.pack(m.session_timeout_ms) + protocols + NO_TAGGED_FIELDS


def _member_metadata_value(v: ConsumerGroupMemberMetadataValue) -> bytes:
    """Record 5's body; ClassicMemberMetadata goes in the tag section only when present."""
    body = b"".join((
        write_compact_string(v.instance_id), write_compact_string(v.rack_id),
        write_compact_string(v.client_id), write_compact_string(v.client_host),
        _carray([write_compact_string(t) for t in v.subscribed_topic_names]),
        write_compact_string(v.subscribed_topic_regex),
        INT32.pack(v.rebalance_timeout_ms), write_compact_string(v.server_assignor),
    ))
    if v.classic_member_metadata is None:
        return body + NO_TAGGED_FIELDS
    tagged = _classic_member_metadata(v.classic_member_metadata)
    return body + b"\x01" + encode_uvarint(_TAG_CLASSIC_MEMBER_METADATA) + encode_uvarint(len(tagged)) + tagged


def _partition_metadata_value(v: ConsumerGroupPartitionMetadataValue) -> bytes:
    """Record 4's body."""
    topics = []
    for t in v.topics:
        racks = _carray([
            INT32.pack(pr.partition) + _carray([write_compact_string(r) for r in pr.racks]) + NO_TAGGED_FIELDS
            for pr in t.partition_metadata
        ])
        topics.append(t.topic_id.bytes + write_compact_string(t.topic_name) + INT32.pack(t.num_partitions)
                      + racks + NO_TAGGED_FIELDS)
    return _carray(topics) + NO_TAGGED_FIELDS


def encode_key(key: ConsumerGroupKey) -> bytes:
    """int16 record type, then the key's strings (non-flexible)."""
    record_type = _TYPE_OF_KEY.get(type(key))
    if record_type is None:
        raise TypeError(f"encode_key: not a consumer-group key: {type(key).__name__}")
    fields = _KEY_TYPES[record_type][1]
    return INT16.pack(record_type) + b"".join(write_string(getattr(key, f)) for f in fields)


def encode_value(value: ConsumerGroupValue) -> bytes:
    """int16 version 0, then the flexible value body."""
    t = type(value)
    if t is ConsumerGroupMetadataValue:
        body = INT32.pack(value.epoch) + NO_TAGGED_FIELDS  # type: ignore[union-attr]
    elif t is ConsumerGroupPartitionMetadataValue:
        body = _partition_metadata_value(value)  # type: ignore[arg-type]
    elif t is ConsumerGroupMemberMetadataValue:
        body = _member_metadata_value(value)  # type: ignore[arg-type]
    elif t is ConsumerGroupTargetAssignmentMetadataValue:
        body = INT32.pack(value.assignment_epoch) + NO_TAGGED_FIELDS  # type: ignore[union-attr]
    elif t is ConsumerGroupTargetAssignmentMemberValue:
        body = _topic_partitions(value.topic_partitions) + NO_TAGGED_FIELDS  # type: ignore[union-attr]
    elif t is ConsumerGroupCurrentMemberAssignmentValue:
        v: ConsumerGroupCurrentMemberAssignmentValue = value  # type: ignore[assignment]
        body = b"".join((
            INT32.pack(v.member_epoch), INT32.pack(v.previous_member_epoch), _b.pack(v.state),
            _topic_partitions(v.assigned_partitions), _topic_partitions(v.partitions_pending_revocation),
            NO_TAGGED_FIELDS,
        ))
    elif t is ConsumerGroupRegularExpressionValue:
        r: ConsumerGroupRegularExpressionValue = value  # type: ignore[assignment]
        body = (_carray([write_compact_string(s) for s in r.topics]) + INT64.pack(r.version)
                + INT64.pack(r.timestamp) + NO_TAGGED_FIELDS)
    else:
        raise TypeError(f"encode_value: not a consumer-group value: {t.__name__}")
    return INT16.pack(_VALUE_VERSION) + body


# ------------------------------------------------------------------------------- decoding


def decode_key(data: bytes | bytearray | memoryview) -> ConsumerGroupKey | None:
    """The key of a consumer-group record, or None when its type is not one of 3-8, 16."""
    d = bytes(data)
    if len(d) < 2:
        raise RecordDecodeError(f"record key of {len(d)} bytes has no type")
    (record_type,) = INT16.unpack_from(d, 0)
    entry = _KEY_TYPES.get(record_type)
    if entry is None:
        return None
    cls, fields = entry
    p = 2
    values = []
    try:
        for name in fields:
            (n,) = INT16.unpack_from(d, p)
            if n < 0 or p + 2 + n > len(d):
                raise RecordDecodeError(f"key field {name} of length {n} is null or overruns the key")
            values.append(d[p + 2:p + 2 + n].decode("utf-8"))
            p += 2 + n
    except struct.error as exc:
        raise RecordDecodeError(f"truncated key (type {record_type}): {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in key (type {record_type}): {exc}") from exc
    if p != len(d):
        raise RecordDecodeError(f"key (type {record_type}): {len(d) - p} trailing bytes")
    return cls(*values)


def _read_topic_partitions(r: StructReader, name: str) -> tuple[TopicPartitions, ...]:
    """[]TopicPartitions; element tags (e.g. KIP-1251 AssignmentEpochs) are skipped."""
    out = []
    for _ in range(r.count(name)):
        topic_id = r.uuid()
        partitions = tuple(r.fixed(INT32) for _ in range(r.count("Partitions")))
        r.tags()  # e.g. AssignmentEpochs (KIP-1251, after 4.0)
        out.append(TopicPartitions(topic_id, partitions))
    return tuple(out)


def _read_classic_member_metadata(raw: bytes) -> ClassicMemberMetadata:
    """Record 5's tag 0 from its raw bytes."""
    r = StructReader(raw)
    session_timeout = r.fixed(INT32)
    protocols = []
    for _ in range(r.count("SupportedProtocols")):
        name = r.cstr_nn("Name")
        metadata = r.cbytes_nn("Metadata")
        r.tags()
        protocols.append(ClassicProtocol(name, metadata))
    r.tags()
    r.end("ClassicMemberMetadata")
    return ClassicMemberMetadata(session_timeout, tuple(protocols))


def _read_member_metadata(r: StructReader) -> ConsumerGroupMemberMetadataValue:
    """Record 5's body."""
    instance_id = r.cstr()
    rack_id = r.cstr()
    client_id = r.cstr_nn("ClientId")
    client_host = r.cstr_nn("ClientHost")
    names = tuple(r.cstr_nn("SubscribedTopicNames") for _ in range(r.count("SubscribedTopicNames")))
    regex = r.cstr()
    rebalance_timeout = r.fixed(INT32)
    server_assignor = r.cstr()
    tags = r.tags()
    classic = None
    if _TAG_CLASSIC_MEMBER_METADATA in tags:
        classic = _read_classic_member_metadata(tags[_TAG_CLASSIC_MEMBER_METADATA])
    return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                            rebalance_timeout, server_assignor, classic)


def _read_partition_metadata(r: StructReader) -> ConsumerGroupPartitionMetadataValue:
    """Record 4's body."""
    topics = []
    for _ in range(r.count("Topics")):
        topic_id = r.uuid()
        name = r.cstr_nn("TopicName")
        num_partitions = r.fixed(INT32)
        racks = []
        for _ in range(r.count("PartitionMetadata")):
            partition = r.fixed(INT32)
            names = tuple(r.cstr_nn("Racks") for _ in range(r.count("Racks")))
            r.tags()
            racks.append(PartitionRacks(partition, names))
        r.tags()
        topics.append(TopicMetadata(topic_id, name, num_partitions, tuple(racks)))
    r.tags()
    return ConsumerGroupPartitionMetadataValue(tuple(topics))


def _read_value(key: ConsumerGroupKey, r: StructReader) -> ConsumerGroupValue:
    """The body of the value that goes with `key`."""
    t = type(key)
    if t is ConsumerGroupMetadataKey:
        epoch = r.fixed(INT32)
        r.tags()  # MetadataHash (KIP-1101, 4.1) and later tags
        return ConsumerGroupMetadataValue(epoch)
    if t is ConsumerGroupPartitionMetadataKey:
        return _read_partition_metadata(r)
    if t is ConsumerGroupMemberMetadataKey:
        return _read_member_metadata(r)
    if t is ConsumerGroupTargetAssignmentMetadataKey:
        epoch = r.fixed(INT32)
        r.tags()
        return ConsumerGroupTargetAssignmentMetadataValue(epoch)
    if t is ConsumerGroupTargetAssignmentMemberKey:
        tps = _read_topic_partitions(r, "TopicPartitions")
        r.tags()
        return ConsumerGroupTargetAssignmentMemberValue(tps)
    if t is ConsumerGroupCurrentMemberAssignmentKey:
        member_epoch = r.fixed(INT32)
        previous = r.fixed(INT32)
        state = r.fixed(_b)
        assigned = _read_topic_partitions(r, "AssignedPartitions")
        pending = _read_topic_partitions(r, "PartitionsPendingRevocation")
        r.tags()
        return ConsumerGroupCurrentMemberAssignmentValue(member_epoch, previous, state, assigned, pending)
    topics = tuple(r.cstr_nn("Topics") for _ in range(r.count("Topics")))
    version = r.fixed(INT64)
    timestamp = r.fixed(INT64)
    r.tags()
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp)


def decode_value(key: ConsumerGroupKey, data: bytes | bytearray | memoryview | None) -> ConsumerGroupValue | None:
    """The value that goes with an already-decoded key; None for a tombstone."""
    if data is None:
        return None
    r = StructReader(bytes(data))
    version = r.fixed(INT16)
    if version != _VALUE_VERSION:
        raise RecordDecodeError(f"{type(key).__name__}: unknown value version {version}")
    value = _read_value(key, r)
    r.end(f"value of {type(key).__name__}")
    return value
