"""The records of `__share_group_state` (KIP-932, Kafka 4.2; reference share-groups.md §5): the
share coordinator's log of each share-partition's window.

Framing as in `__consumer_offsets` (coordinator_serde): key = int16 record type + key struct v0,
not flexible (string group id, 16-byte topic id, int32 partition); value = int16 version 0 +
a flexible struct, or null (a tombstone, written under the ShareSnapshot key). Types:

* 0 ShareSnapshot: SnapshotEpoch, StateEpoch, LeaderEpoch int32; StartOffset, CreateTimestamp,
  WriteTimestamp int64; StateBatches; tagged field 0 DeliveryCompleteCount int32 (4.2, KIP-1226),
  left out when -1.
* 1 ShareUpdate: SnapshotEpoch, LeaderEpoch int32; StartOffset int64 (-1: unchanged);
  StateBatches (the changed runs only); the same tagged field.

A state batch is FirstOffset, LastOffset int64, DeliveryState int8 (0 available, 2 acknowledged,
4 archived), DeliveryCount int16, then its own (empty) tagged-field section.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Union

from .coordinator_serde import (
    INT16, INT32, INT64, NO_TAGGED_FIELDS, RecordDecodeError, StructReader, as_bytes, read_required_string,
    write_string,
)
from .varint import encode_uvarint

SHARE_SNAPSHOT, SHARE_UPDATE = 0, 1
VALUE_VERSION = 0
DELIVERY_COMPLETE_COUNT_TAG = 0

_batch = struct.Struct(">qqbh")
_snapshot_head = struct.Struct(">iiiqqq")  # snapshot epoch, state epoch, leader epoch, start, create, write
_update_head = struct.Struct(">iiq")       # snapshot epoch, leader epoch, start offset
_int8 = struct.Struct(">b")


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets in one persisted state with one delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """The share-partition a record belongs to; `record_type` says Snapshot (0) or Update (1)."""

    record_type: int
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    """The whole window: replaying it replaces the share-partition's state."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp: int
    write_timestamp: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    """What changed since the snapshot it follows: merged into the state on replay."""

    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


ShareStateValue = Union[ShareSnapshotValue, ShareUpdateValue]


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


def encode_key(key: ShareStateKey) -> bytes:
    return b"".join((INT16.pack(key.record_type), write_string(key.group_id), key.topic_id.bytes,
                     INT32.pack(key.partition)))


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    parts = [encode_uvarint(len(batches) + 1)]
    for b in batches:
        parts.append(_batch.pack(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count))
        parts.append(NO_TAGGED_FIELDS)
    return b"".join(parts)


def _tagged(delivery_complete_count: int) -> bytes:
    """The struct's tagged-field section: DeliveryCompleteCount when it is not the default -1."""
    if delivery_complete_count == -1:
        return NO_TAGGED_FIELDS
    return b"\x01" + encode_uvarint(DELIVERY_COMPLETE_COUNT_TAG) + b"\x04" + INT32.pack(delivery_complete_count)


def encode_value(value: ShareStateValue) -> bytes:
    if isinstance(value, ShareSnapshotValue):
        head = _snapshot_head.pack(value.snapshot_epoch, value.state_epoch, value.leader_epoch, value.start_offset,
                                   value.create_timestamp, value.write_timestamp)
    else:
        head = _update_head.pack(value.snapshot_epoch, value.leader_epoch, value.start_offset)
    return b"".join((INT16.pack(VALUE_VERSION), head, _batches(value.state_batches),
                     _tagged(value.delivery_complete_count)))


# ---------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------


def decode_key(data: bytes | bytearray | memoryview) -> ShareStateKey:
    """A ShareSnapshot or ShareUpdate key; RecordDecodeError for anything else."""
    d = as_bytes(data)
    try:
        record_type = INT16.unpack_from(d, 0)[0]
        if record_type not in (SHARE_SNAPSHOT, SHARE_UPDATE):
            raise RecordDecodeError(f"unknown __share_group_state record type {record_type}")
        group_id, p = read_required_string(d, 2, False, "GroupId")
        topic_id = uuid.UUID(bytes=d[p:p + 16])
        (partition,) = INT32.unpack_from(d, p + 16)
    except (IndexError, ValueError, struct.error) as exc:
        raise RecordDecodeError(f"bad __share_group_state key: {exc}") from exc
    if p + 20 != len(d):
        raise RecordDecodeError(f"__share_group_state key: {len(d) - p - 20} trailing bytes")
    return ShareStateKey(record_type, group_id, topic_id, partition)


def decode_value(key: ShareStateKey, data: bytes | bytearray | memoryview | None) -> ShareStateValue | None:
    """The value of `key`'s type; None for a tombstone."""
    if data is None:
        return None
    r = StructReader(as_bytes(data))
    try:
        version = r.fixed(INT16)
        if version != VALUE_VERSION:
            raise RecordDecodeError(f"unknown __share_group_state value version {version}")
        if key.record_type == SHARE_SNAPSHOT:
            snapshot_epoch, state_epoch, leader_epoch = r.fixed(INT32), r.fixed(INT32), r.fixed(INT32)
            start, created, written = r.fixed(INT64), r.fixed(INT64), r.fixed(INT64)
        else:
            snapshot_epoch, leader_epoch, start = r.fixed(INT32), r.fixed(INT32), r.fixed(INT64)
        batches = []
        for _ in range(r.count("StateBatches")):
            first, last, state = r.fixed(INT64), r.fixed(INT64), r.fixed(_int8)
            batches.append(StateBatch(first, last, state, r.fixed(INT16)))
            r.tags()
        raw_count = r.tags().get(DELIVERY_COMPLETE_COUNT_TAG)
        r.end("__share_group_state value")
        complete = -1 if raw_count is None else INT32.unpack(raw_count)[0]
    except (IndexError, struct.error) as exc:
        raise RecordDecodeError(f"bad __share_group_state value: {exc}") from exc
    if key.record_type == SHARE_SNAPSHOT:
        return ShareSnapshotValue(snapshot_epoch, state_epoch, leader_epoch, start, created, written,
                                  tuple(batches), complete)
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start, tuple(batches), complete)
