"""KIP-932 share-group records of `__consumer_offsets` (types 10-15): key/value codecs.

Pure code, byte-exact with Kafka 4.2's coordinator record schemas (reference share-groups.md §5).
The framing is the consumer groups' (consumer_group_records.py): a key is the int16 record type
and a non-flexible struct of int16-length strings; a value is int16 version 0 and a flexible
struct (compact strings and arrays, 16-byte uuids, a tagged-field section after every struct);
a null value is a tombstone. Readers skip tags they do not know (4.3 adds some).

    10 ShareGroupMemberMetadata           GroupId, MemberId  RackId, ClientId, ClientHost, SubscribedTopicNames
    11 ShareGroupMetadata                 GroupId            Epoch, MetadataHash
    12 ShareGroupTargetAssignmentMetadata GroupId            AssignmentEpoch
    13 ShareGroupTargetAssignmentMember   GroupId, MemberId  TopicPartitions[]
    14 ShareGroupCurrentMemberAssignment  GroupId, MemberId  MemberEpoch, PreviousMemberEpoch, State, AssignedPartitions[]
    15 ShareGroupStatePartitionMetadata   GroupId            InitializingTopics, InitializedTopics, DeletingTopics
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Union

from .consumer_group_records import TopicPartitions
from .coordinator_serde import INT16, INT32, INT64, NO_TAGGED_FIELDS, RecordDecodeError, StructReader, \
    write_compact_string, write_string
from .varint import encode_uvarint

_b = struct.Struct(">b")
_VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class TopicPartitionsInfo:
    """A topic of record 15 with its partitions (initializing or initialized share state)."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic of record 15 whose share state is being deleted."""

    topic_id: uuid.UUID
    topic_name: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    """Key of record 10: one member's subscription and client details."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    """Value of record 10."""

    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    """Key of record 11: the group epoch (its tombstone deletes the group)."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    """Value of record 11: the epoch and the hash of the subscribed topics' metadata."""

    epoch: int
    metadata_hash: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    """Key of record 12: the target assignment's epoch."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    """Value of record 12."""

    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    """Key of record 13: one member's target assignment."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    """Value of record 13."""

    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    """Key of record 14: one member's epochs and assigned partitions."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    """Value of record 14; `state` is 0 STABLE (share members have no revocation step)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataKey:
    """Key of record 15: which topics' share-partition state is initializing, initialized, deleting."""

    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupStatePartitionMetadataValue:
    """Value of record 15."""

    initializing_topics: tuple[TopicPartitionsInfo, ...]
    initialized_topics: tuple[TopicPartitionsInfo, ...]
    deleting_topics: tuple[TopicInfo, ...]


ShareGroupKey = Union[
    ShareGroupMemberMetadataKey, ShareGroupMetadataKey, ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMemberKey, ShareGroupCurrentMemberAssignmentKey, ShareGroupStatePartitionMetadataKey,
]
ShareGroupValue = Union[
    ShareGroupMemberMetadataValue, ShareGroupMetadataValue, ShareGroupTargetAssignmentMetadataValue,
    ShareGroupTargetAssignmentMemberValue, ShareGroupCurrentMemberAssignmentValue,
    ShareGroupStatePartitionMetadataValue,
]

# record type -> (key class, the key's string fields in order)
_KEY_TYPES: dict[int, tuple[type, tuple[str, ...]]] = {
    10: (ShareGroupMemberMetadataKey, ("group_id", "member_id")),
    11: (ShareGroupMetadataKey, ("group_id",)),
    12: (ShareGroupTargetAssignmentMetadataKey, ("group_id",)),
    13: (ShareGroupTargetAssignmentMemberKey, ("group_id", "member_id")),
    14: (ShareGroupCurrentMemberAssignmentKey, ("group_id", "member_id")),
    15: (ShareGroupStatePartitionMetadataKey, ("group_id",)),
}
_TYPE_OF_KEY: dict[type, int] = {cls: t for t, (cls, _fields) in _KEY_TYPES.items()}

SHARE_GROUP_RECORD_TYPES = frozenset(_KEY_TYPES)
"""The `__consumer_offsets` key types (the key's first int16) of share groups."""

SHARE_GROUP_KEY_CLASSES = frozenset(_TYPE_OF_KEY)
"""The key classes of this module (what encode_key accepts)."""

SHARE_GROUP_VALUE_CLASSES = frozenset((
    ShareGroupMemberMetadataValue, ShareGroupMetadataValue, ShareGroupTargetAssignmentMetadataValue,
    ShareGroupTargetAssignmentMemberValue, ShareGroupCurrentMemberAssignmentValue,
    ShareGroupStatePartitionMetadataValue,
))
"""The value classes of this module (what encode_value accepts)."""

RECORD_TYPE_NAMES: dict[type, str] = {
    ShareGroupMemberMetadataKey: "share_group_member_metadata",
    ShareGroupMetadataKey: "share_group_metadata",
    ShareGroupTargetAssignmentMetadataKey: "share_group_target_assignment_metadata",
    ShareGroupTargetAssignmentMemberKey: "share_group_target_assignment_member",
    ShareGroupCurrentMemberAssignmentKey: "share_group_current_member_assignment",
    ShareGroupStatePartitionMetadataKey: "share_group_state_partition_metadata",
}
"""The record type each key is shown as (offsets-log dump): Kafka's record name in snake_case."""


# ------------------------------------------------------------------------------- encoding


def _carray(items: list[bytes]) -> bytes:
    """Compact array of already-encoded elements."""
    return encode_uvarint(len(items) + 1) + b"".join(items)


def _int32s(values: tuple[int, ...]) -> bytes:
    """Compact []int32."""
    return _carray([INT32.pack(v) for v in values])


def _topic_partitions(tps: tuple[TopicPartitions, ...]) -> bytes:
    """[]TopicPartitions: uuid, compact []int32, empty tag section per element."""
    return _carray([tp.topic_id.bytes + _int32s(tp.partitions) + NO_TAGGED_FIELDS for tp in tps])


def _topics_info(topics: tuple[TopicPartitionsInfo, ...]) -> bytes:
    """[]TopicPartitionsInfo of record 15."""
    return _carray([t.topic_id.bytes + write_compact_string(t.topic_name) + _int32s(t.partitions)
                    + NO_TAGGED_FIELDS for t in topics])


def encode_key(key: ShareGroupKey) -> bytes:
    """int16 record type, then the key's strings (non-flexible)."""
    record_type = _TYPE_OF_KEY.get(type(key))
    if record_type is None:
        raise TypeError(f"encode_key: not a share-group key: {type(key).__name__}")
    return INT16.pack(record_type) + b"".join(write_string(getattr(key, f)) for f in _KEY_TYPES[record_type][1])


def encode_value(value: ShareGroupValue) -> bytes:
    """int16 version 0, then the flexible value body."""
    v = value
    if type(v) is ShareGroupMemberMetadataValue:
        body = (write_compact_string(v.rack_id) + write_compact_string(v.client_id)
                + write_compact_string(v.client_host)
                + _carray([write_compact_string(t) for t in v.subscribed_topic_names]))
    elif type(v) is ShareGroupMetadataValue:
        body = INT32.pack(v.epoch) + INT64.pack(v.metadata_hash)
    elif type(v) is ShareGroupTargetAssignmentMetadataValue:
        body = INT32.pack(v.assignment_epoch)
    elif type(v) is ShareGroupTargetAssignmentMemberValue:
        body = _topic_partitions(v.topic_partitions)
    elif type(v) is ShareGroupCurrentMemberAssignmentValue:
        body = (INT32.pack(v.member_epoch) + INT32.pack(v.previous_member_epoch) + _b.pack(v.state)
                + _topic_partitions(v.assigned_partitions))
    elif type(v) is ShareGroupStatePartitionMetadataValue:
        body = (_topics_info(v.initializing_topics) + _topics_info(v.initialized_topics)
                + _carray([t.topic_id.bytes + write_compact_string(t.topic_name) + NO_TAGGED_FIELDS
                           for t in v.deleting_topics]))
    else:
        raise TypeError(f"encode_value: not a share-group value: {type(v).__name__}")
    return INT16.pack(_VALUE_VERSION) + body + NO_TAGGED_FIELDS


# ------------------------------------------------------------------------------- decoding


def decode_key(data: bytes | bytearray | memoryview) -> ShareGroupKey | None:
    """The key of a share-group record, or None when its type is not one of 10-15."""
    d = bytes(data)
    if len(d) < 2:
        raise RecordDecodeError(f"record key of {len(d)} bytes has no type")
    (record_type,) = INT16.unpack_from(d, 0)
    entry = _KEY_TYPES.get(record_type)
    if entry is None:
        return None
    cls, fields = entry
    p, values = 2, []
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


def _read_int32s(r: StructReader, name: str) -> tuple[int, ...]:
    """Compact []int32."""
    return tuple(r.fixed(INT32) for _ in range(r.count(name)))


def _read_topic_partitions(r: StructReader, name: str) -> tuple[TopicPartitions, ...]:
    """[]TopicPartitions; element tags are skipped."""
    out = []
    for _ in range(r.count(name)):
        topic_id = r.uuid()
        partitions = _read_int32s(r, "Partitions")
        r.tags()
        out.append(TopicPartitions(topic_id, partitions))
    return tuple(out)


def _read_topics_info(r: StructReader, name: str) -> tuple[TopicPartitionsInfo, ...]:
    """[]TopicPartitionsInfo of record 15."""
    out = []
    for _ in range(r.count(name)):
        topic_id = r.uuid()
        topic_name = r.cstr_nn("TopicName")
        partitions = _read_int32s(r, "Partitions")
        r.tags()
        out.append(TopicPartitionsInfo(topic_id, topic_name, partitions))
    return tuple(out)


def _read_body(key: ShareGroupKey, r: StructReader) -> ShareGroupValue:
    """The regular fields of the value that goes with `key` (the caller reads its tags)."""
    t = type(key)
    if t is ShareGroupMemberMetadataKey:
        rack_id = r.cstr()
        client_id = r.cstr_nn("ClientId")
        client_host = r.cstr_nn("ClientHost")
        names = tuple(r.cstr_nn("SubscribedTopicNames") for _ in range(r.count("SubscribedTopicNames")))
        return ShareGroupMemberMetadataValue(rack_id, client_id, client_host, names)
    if t is ShareGroupMetadataKey:
        epoch = r.fixed(INT32)
        return ShareGroupMetadataValue(epoch, r.fixed(INT64))
    if t is ShareGroupTargetAssignmentMetadataKey:
        return ShareGroupTargetAssignmentMetadataValue(r.fixed(INT32))
    if t is ShareGroupTargetAssignmentMemberKey:
        return ShareGroupTargetAssignmentMemberValue(_read_topic_partitions(r, "TopicPartitions"))
    if t is ShareGroupCurrentMemberAssignmentKey:
        member_epoch = r.fixed(INT32)
        previous = r.fixed(INT32)
        state = r.fixed(_b)
        return ShareGroupCurrentMemberAssignmentValue(member_epoch, previous, state,
                                                      _read_topic_partitions(r, "AssignedPartitions"))
    initializing = _read_topics_info(r, "InitializingTopics")
    initialized = _read_topics_info(r, "InitializedTopics")
    deleting = []
    for _ in range(r.count("DeletingTopics")):
        topic_id = r.uuid()
        deleting.append(TopicInfo(topic_id, r.cstr_nn("TopicName")))
        r.tags()
    return ShareGroupStatePartitionMetadataValue(initializing, initialized, tuple(deleting))


def decode_value(key: ShareGroupKey, data: bytes | bytearray | memoryview | None) -> ShareGroupValue | None:
    """The value that goes with an already-decoded key; None for a tombstone."""
    if data is None:
        return None
    r = StructReader(bytes(data))
    version = r.fixed(INT16)
    if version != _VALUE_VERSION:
        raise RecordDecodeError(f"{type(key).__name__}: unknown value version {version}")
    value = _read_body(key, r)
    r.tags()  # e.g. AssignmentTimestamp of record 12 (4.3)
    r.end(f"value of {type(key).__name__}")
    return value
