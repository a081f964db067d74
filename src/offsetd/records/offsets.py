"""The `__consumer_offsets` topic: its name, the group -> partition hash, and its records' keys,
with the encode / decode entry points that pick each record type's value codec.

Pure code: bytes in, values out (no asyncio, sockets or files). Byte layouts follow Kafka's
coordinator record schemas (conformance reference §4); framing and field primitives are in
coordinator_serde.py, each record type's value in a module of its own. The key version selects
the record type:

    key v0, v1  OffsetCommit   group string, topic string, partition int32  (offset_commit_value.py)
    key v2      GroupMetadata  group string                                 (group_metadata_value.py)
    3-8, 16     KIP-848 consumer groups (consumer_group_records.py)
    10-15       KIP-932 share groups (share_group_records.py); decode_key here returns
                UnknownRecordKey for these two families and for future types

The broker's start-up replay does not decode values at all (records/scan.py `scan_key_values`
feeds key and value bytes to the coordinator); these decoders serve reads, tools and tests.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, Union

from offsetd.records.coordinator_serde import (
    INT16,
    INT32,
    RecordDecodeError,
    as_bytes,
    check_end,
    read_required_string,
    write_string,
)
from offsetd.records import consumer_group_records, share_group_records
from offsetd.records.group_metadata_value import (
    GroupMetadataValue,
    decode_group_metadata_value,
    encode_group_metadata_value,
)
from offsetd.records.offset_commit_value import (
    OffsetCommitValue,
    decode_offset_commit_value,
    encode_offset_commit_value,
)

__all__ = [
    "OFFSETS_TOPIC",
    "DEFAULT_NUM_PARTITIONS",
    "java_string_hash",
    "partition_for",
    "OffsetCommitKey",
    "offset_commit_key",
    "GroupMetadataKey",
    "UnknownRecordKey",
    "encode_key",
    "encode_value",
    "decode_key",
    "decode_value",
]

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_NUM_PARTITIONS = 50
"""Kafka's default `offsets.topic.num.partitions`."""

_INT32_MIN = -(2**31)

# Key versions (§4.2).
_OFFSET_COMMIT_KEY_V0 = 0
_OFFSET_COMMIT_KEY_V1 = 1
_GROUP_METADATA_KEY_V2 = 2

_h_unpack = INT16.unpack_from
_i_unpack = INT32.unpack_from


# ---------------------------------------------------------------------------------------------
# Group -> partition mapping (§4.3)
# ---------------------------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java `String.hashCode`: h = 31*h + c over UTF-16 code units, wrapped to signed 32 bits."""
    h = 0
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")  # ASCII: code unit == byte
    else:
        # Non-BMP characters become two surrogate units, exactly as Java stores them;
        # surrogatepass keeps lone surrogates (legal in a Java String) as their own unit.
        raw = s.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(raw) // 2}H", raw)
    for c in units:
        h = (31 * h + c) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=1 << 16)  # asked on every request of a group (or transactional id): the hash is a Python loop
def partition_for(group_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """`__consumer_offsets` partition of a group: Kafka `Utils.abs(hashCode) % n` (MIN_VALUE -> 0)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % num_partitions


# ---------------------------------------------------------------------------------------------
# Record keys
# ---------------------------------------------------------------------------------------------


# Keys are NamedTuples: the coordinator builds one per committed partition, and a NamedTuple
# costs a fraction of a frozen dataclass to construct.
class OffsetCommitKey(NamedTuple):
    """Key of an OffsetCommit record (key versions 0 and 1 share this layout)."""

    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    """Key of a GroupMetadata record (key version 2)."""

    group: str


@dataclass(frozen=True, slots=True)
class UnknownRecordKey:
    """A key whose version is not 0, 1 or 2; the loader skips such records with a warning."""

    version: int


RecordKey = Union[OffsetCommitKey, GroupMetadataKey]


@lru_cache(maxsize=65536)  # consumers commit the same partitions again and again
def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """An OffsetCommit key (version 1); the commit path calls this without an OffsetCommitKey."""
    # int16 version 1 | string group | string topic | int32 partition
    return b"".join((b"\x00\x01", write_string(group), write_string(topic), INT32.pack(partition)))


def encode_key(key: RecordKey | consumer_group_records.ConsumerGroupKey | share_group_records.ShareGroupKey) -> bytes:
    """OffsetCommitKey -> key version 1; GroupMetadataKey -> key version 2; a consumer- or
    share-group key -> its record type (consumer_group_records.py, share_group_records.py)."""
    if type(key) is OffsetCommitKey:
        return offset_commit_key(key.group, key.topic, key.partition)
    if type(key) is GroupMetadataKey:
        # int16 version 2 | string group
        return b"\x00\x02" + write_string(key.group)
    if type(key) in share_group_records.SHARE_GROUP_KEY_CLASSES:
        return share_group_records.encode_key(key)  # type: ignore[arg-type]
    return consumer_group_records.encode_key(key)  # type: ignore[arg-type]


def decode_key(
    data: bytes | bytearray | memoryview,
) -> OffsetCommitKey | GroupMetadataKey | UnknownRecordKey:
    """Decode a record key; unknown key versions come back as UnknownRecordKey (not an error)."""
    if data is None:
        raise RecordDecodeError("record key is null")
    d = as_bytes(data)
    if len(d) < 2:
        raise RecordDecodeError(f"record key of {len(d)} bytes has no version")
    (version,) = _h_unpack(d, 0)
    try:
        if version == _OFFSET_COMMIT_KEY_V1 or version == _OFFSET_COMMIT_KEY_V0:
            group, p = read_required_string(d, 2, False, "group")
            topic, p = read_required_string(d, p, False, "topic")
            (partition,) = _i_unpack(d, p)
            check_end(d, p + 4, "OffsetCommit key")
            return OffsetCommitKey(group, topic, partition)
        if version == _GROUP_METADATA_KEY_V2:
            group, p = read_required_string(d, 2, False, "group")
            check_end(d, p, "GroupMetadata key")
            return GroupMetadataKey(group)
    except (struct.error, IndexError) as exc:
        raise RecordDecodeError(f"truncated key (version {version}): {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in key (version {version}): {exc}") from exc
    return UnknownRecordKey(version)


# ---------------------------------------------------------------------------------------------
# Values: the codec of each record type
# ---------------------------------------------------------------------------------------------

RecordValue = Union[OffsetCommitValue, GroupMetadataValue]


def encode_value(value: RecordValue | consumer_group_records.ConsumerGroupValue | share_group_records.ShareGroupValue,
                 version: int | None = None) -> bytes:
    """Serialize a value: OffsetCommit -> v3 (v1 if expire_timestamp != -1); GroupMetadata -> v3;
    a consumer- or share-group value -> its v0 (consumer_group_records.py, share_group_records.py).

    `version` forces another schema version of the first two (0..4; for tests and compatibility
    tools); fields that version lacks are dropped.
    """
    if type(value) is OffsetCommitValue:
        return encode_offset_commit_value(value, version)
    if type(value) is GroupMetadataValue:
        return encode_group_metadata_value(value, version)
    if type(value) in share_group_records.SHARE_GROUP_VALUE_CLASSES:
        return share_group_records.encode_value(value)  # type: ignore[arg-type]
    return consumer_group_records.encode_value(value)  # type: ignore[arg-type]


def decode_value(
    key: OffsetCommitKey | GroupMetadataKey, data: bytes | bytearray | memoryview | None
) -> OffsetCommitValue | GroupMetadataValue | None:
    """Decode the value that goes with an already-decoded key; None for a tombstone."""
    if data is None:
        return None
    if type(key) is OffsetCommitKey:
        return decode_offset_commit_value(data)
    if type(key) is GroupMetadataKey:
        return decode_group_metadata_value(data)
    raise TypeError(f"decode_value: no value schema for {type(key).__name__}")
