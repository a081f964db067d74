"""`__consumer_offsets` record codecs, the group -> partition hash, and a log-record walker.

Pure code: bytes in, values out (no asyncio, sockets or files). Byte layouts follow Kafka's
coordinator record schemas (conformance reference §4); all integers are big-endian.

Record framing (§4.2): key = int16 key version + key struct; value = int16 value version +
value struct, or null (a tombstone). The key version selects the record type:

    key v0, v1  OffsetCommit   group string, topic string, partition int32
    key v2      GroupMetadata  group string
    other       not ours (KIP-848 / share groups / future): decode_key returns UnknownRecordKey

Non-flexible encodings: string = int16 length + UTF-8 (-1 = null), bytes = int32 length + data
(-1 = null), array = int32 count. Flexible versions (value v4) use "compact" lengths, an
unsigned varint of length + 1 (0 = null), and end every struct with a tagged-field section:
unsigned-varint count, then (uvarint tag, uvarint size, size bytes) per field.

The broker's start-up replay does not decode values at all (records/scan.py `scan_key_values`
feeds key and value bytes to the coordinator); these decoders serve reads, tools and tests.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Callable, Generator, NamedTuple, Union

from crc32c import crc32c

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    CONTROL_MASK,
    CRC_START,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
)
from offsetd.records.varint import encode_uvarint

__all__ = [
    "OFFSETS_TOPIC",
    "DEFAULT_NUM_PARTITIONS",
    "java_string_hash",
    "partition_for",
    "OffsetCommitKey",
    "GroupMetadataKey",
    "OffsetCommitValue",
    "MemberMetadata",
    "GroupMetadataValue",
    "UnknownRecordKey",
    "RecordDecodeError",
    "ControlMarker",
    "encode_key",
    "encode_value",
    "decode_key",
    "decode_offset_commit_value",
    "decode_group_metadata_value",
    "parse_subscription_topics",
    "encode_consumer_subscription",
    "iter_log_records",
    "LogRecord",
]

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_NUM_PARTITIONS = 50
"""Kafka's default `offsets.topic.num.partitions`."""

_INT32_MIN = -(2**31)

# Key versions (§4.2).
_OFFSET_COMMIT_KEY_V0 = 0
_OFFSET_COMMIT_KEY_V1 = 1
_GROUP_METADATA_KEY_V2 = 2

# Precompiled structs. Names spell the format: h int16, H uint16, i int32, q int64.
_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_hh = struct.Struct(">hh")
_hqih = struct.Struct(">hqih")  # value v3: version, offset, leaderEpoch, metadata length
_hqi = struct.Struct(">hqi")  # value v4 prefix: version, offset, leaderEpoch
_v3_empty_unpack = struct.Struct(">hqihq").unpack  # value v3 with empty metadata (24 bytes)
_qq = struct.Struct(">qq")
_h_unpack = _h.unpack_from
_i_unpack = _i.unpack_from
_q_unpack = _q.unpack_from
_hh_unpack = _hh.unpack_from
_hqih_unpack = _hqih.unpack_from

# Magic-v2 batch header (see batch.py): baseOffset q, batchLength i, partitionLeaderEpoch i,
# magic b, crc I, attributes h, lastOffsetDelta i, baseTimestamp q, maxTimestamp q,
# producerId q, producerEpoch h, baseSequence i, recordsCount i -> 61 bytes.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _BATCH_HEADER.size == BATCH_HEADER_SIZE
_batch_header_unpack = _BATCH_HEADER.unpack_from
_COMPRESSION_MASK = 0x07
_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


class RecordDecodeError(ValueError):
    """A `__consumer_offsets` key, value or batch is truncated, garbage or of an unknown version."""


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


def partition_for(group_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """`__consumer_offsets` partition of a group: Kafka `Utils.abs(hashCode) % n` (MIN_VALUE -> 0)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % num_partitions


# ---------------------------------------------------------------------------------------------
# Record types
# ---------------------------------------------------------------------------------------------


# Keys and OffsetCommit values are NamedTuples: the coordinator builds one of each per committed
# partition, and a NamedTuple costs a fraction of a frozen dataclass to construct.
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


class OffsetCommitValue(NamedTuple):
    """Value of an OffsetCommit record; -1 means absent for leader_epoch and the timestamps."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One classic-group member as stored in a GroupMetadata value."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """Value of a GroupMetadata record: a classic group's generation and members."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...]


RecordKey = Union[OffsetCommitKey, GroupMetadataKey]
RecordValue = Union[OffsetCommitValue, GroupMetadataValue]


class ControlMarker(IntEnum):
    """Transaction end marker (control record type) as yielded by `iter_log_records`."""

    ABORT = 0
    COMMIT = 1


# ---------------------------------------------------------------------------------------------
# Primitive encoders
# ---------------------------------------------------------------------------------------------


def _str(s: str | None) -> bytes:
    """Non-flexible string: int16 length + UTF-8 bytes; null -> length -1."""
    if s is None:
        return b"\xff\xff"
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} UTF-8 bytes does not fit an int16 length")
    return _h.pack(len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    """Non-flexible bytes: int32 length + data; null -> length -1."""
    if b is None:
        return b"\xff\xff\xff\xff"
    return _i.pack(len(b)) + bytes(b)


def _cstr(s: str | None) -> bytes:
    """Compact string: uvarint(length + 1) + UTF-8 bytes; null -> 0."""
    if s is None:
        return b"\x00"
    b = s.encode("utf-8")
    return encode_uvarint(len(b) + 1) + b


def _cbytes(b: bytes | None) -> bytes:
    """Compact bytes: uvarint(length + 1) + data; null -> 0."""
    if b is None:
        return b"\x00"
    return encode_uvarint(len(b) + 1) + bytes(b)


_NO_TAGS = b"\x00"  # empty tagged-field section: count 0


# ---------------------------------------------------------------------------------------------
# Primitive decoders: each takes (buf, pos) and returns (value, new pos); they raise
# RecordDecodeError, IndexError or struct.error, which the public decoders turn into
# RecordDecodeError.
# ---------------------------------------------------------------------------------------------


def _read_varint_bits(d: bytes, p: int, max_bytes: int) -> tuple[int, int]:
    """The raw (unsigned) value of a LEB128 varint of at most max_bytes bytes at p."""
    result = 0
    for shift in range(0, 7 * max_bytes, 7):
        b = d[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
    raise RecordDecodeError(f"varint longer than {max_bytes} bytes")


def _read_uvarint(d: bytes, p: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (an int32 in flexible versions)."""
    return _read_varint_bits(d, p, 5)


def _read_length(d: bytes, p: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """A length or count: compact (unsigned varint of n + 1) in flexible versions, else the fixed
    int16/int32 `fixed`; -1 means null."""
    if flexible:
        n, p = _read_uvarint(d, p)
        return n - 1, p
    return fixed.unpack_from(d, p)[0], p + fixed.size


def _read_str(d: bytes, p: int, flexible: bool) -> tuple[str | None, int]:
    """String (int16 length or compact); returns None for null."""
    n, p = _read_length(d, p, flexible, _h)
    if n < 0:
        if n == -1:
            return None, p
        raise RecordDecodeError(f"invalid string length {n}")
    e = p + n
    if e > len(d):
        raise RecordDecodeError(f"string of {n} bytes overruns the buffer")
    return d[p:e].decode("utf-8"), e


def _read_str_nn(d: bytes, p: int, flexible: bool, name: str) -> tuple[str, int]:
    """Non-nullable string; null is an error."""
    s, p = _read_str(d, p, flexible)
    if s is None:
        raise RecordDecodeError(f"non-nullable field {name} was serialized as null")
    return s, p


def _read_bytes_nn(d: bytes, p: int, flexible: bool, name: str) -> tuple[bytes, int]:
    """Non-nullable bytes (int32 length or compact)."""
    n, p = _read_length(d, p, flexible, _i)
    if n < 0:
        raise RecordDecodeError(f"non-nullable field {name} has length {n}")
    e = p + n
    if e > len(d):
        raise RecordDecodeError(f"field {name} of {n} bytes overruns the buffer")
    return d[p:e], e


def _skip_tagged_fields(d: bytes, p: int) -> int:
    """Skip a tagged-field section (none of these schemas defines a tag, so all are unknown)."""
    count, p = _read_uvarint(d, p)
    for _ in range(count):
        _tag, p = _read_uvarint(d, p)
        size, p = _read_uvarint(d, p)
        p += size
        if p > len(d):
            raise RecordDecodeError("tagged field overruns the buffer")
    return p


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """The argument as `bytes` (slicing bytes is the cheapest way to cut small fields)."""
    return data if type(data) is bytes else bytes(data)


def _check_end(d: bytes, p: int, what: str) -> None:
    """Raise if bytes remain after a fully decoded struct."""
    if p != len(d):
        raise RecordDecodeError(f"{what}: {len(d) - p} trailing bytes")


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


@lru_cache(maxsize=65536)  # consumers commit the same partitions again and again
def _offset_commit_key_bytes(key: OffsetCommitKey) -> bytes:
    # int16 version 1 | string group | string topic | int32 partition
    return b"".join((b"\x00\x01", _str(key.group), _str(key.topic), _i.pack(key.partition)))


def encode_key(key: RecordKey) -> bytes:
    """OffsetCommitKey -> key version 1; GroupMetadataKey -> key version 2."""
    if type(key) is OffsetCommitKey:
        return _offset_commit_key_bytes(key)
    if type(key) is GroupMetadataKey:
        # int16 version 2 | string group
        return b"\x00\x02" + _str(key.group)
    raise TypeError(f"encode_key: expected OffsetCommitKey or GroupMetadataKey, got {type(key).__name__}")


def decode_key(
    data: bytes | bytearray | memoryview,
) -> OffsetCommitKey | GroupMetadataKey | UnknownRecordKey:
    """Decode a record key; unknown key versions come back as UnknownRecordKey (not an error)."""
    if data is None:
        raise RecordDecodeError("record key is null")
    d = _as_bytes(data)
    if len(d) < 2:
        raise RecordDecodeError(f"record key of {len(d)} bytes has no version")
    (version,) = _h_unpack(d, 0)
    try:
        if version == _OFFSET_COMMIT_KEY_V1 or version == _OFFSET_COMMIT_KEY_V0:
            group, p = _read_str_nn(d, 2, False, "group")
            topic, p = _read_str_nn(d, p, False, "topic")
            (partition,) = _i_unpack(d, p)
            _check_end(d, p + 4, "OffsetCommit key")
            return OffsetCommitKey(group, topic, partition)
        if version == _GROUP_METADATA_KEY_V2:
            group, p = _read_str_nn(d, 2, False, "group")
            _check_end(d, p, "GroupMetadata key")
            return GroupMetadataKey(group)
    except (struct.error, IndexError) as exc:
        raise RecordDecodeError(f"truncated key (version {version}): {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in key (version {version}): {exc}") from exc
    return UnknownRecordKey(version)


# ---------------------------------------------------------------------------------------------
# OffsetCommit values (§4.5)
#
#   v0, v2  int16 ver | int64 offset | string metadata | int64 commitTimestamp
#   v1      int16 ver | int64 offset | string metadata | int64 commitTimestamp | int64 expireTs
#   v3      int16 ver | int64 offset | int32 leaderEpoch | string metadata | int64 commitTimestamp
#   v4      as v3 with a compact string and a trailing tagged-field section
# ---------------------------------------------------------------------------------------------


def _encode_offset_commit_value(v: OffsetCommitValue, version: int | None) -> bytes:
    """Serialize at `version`; None picks v3, or v1 when an expire timestamp is set."""
    if version is None:
        version = 1 if v.expire_timestamp != -1 else 3
    md = v.metadata if v.metadata is not None else ""
    if version == 3:
        return b"".join((_hqi.pack(3, v.offset, v.leader_epoch), _str(md), _q.pack(v.commit_timestamp)))
    if version == 1:
        # v1 has no leader epoch: it is dropped, as Kafka does.
        return b"".join((_h.pack(1), _q.pack(v.offset), _str(md), _qq.pack(v.commit_timestamp, v.expire_timestamp)))
    if version == 0 or version == 2:
        return b"".join((_h.pack(version), _q.pack(v.offset), _str(md), _q.pack(v.commit_timestamp)))
    if version == 4:
        return b"".join(
            (_hqi.pack(4, v.offset, v.leader_epoch), _cstr(md), _q.pack(v.commit_timestamp), _NO_TAGS)
        )
    raise ValueError(f"OffsetCommitValue version {version} is not one of 0..4")


def _decode_offset_commit_tuple(d: bytes) -> tuple[int, int, str, int, int]:
    """(offset, leader_epoch, metadata, commit_ts, expire_ts) of any value version 0..4."""
    try:
        (version,) = _h_unpack(d, 0)
        if version == 3:
            _, offset, epoch, n = _hqih_unpack(d, 0)
            if n < 0:
                raise RecordDecodeError("non-nullable field metadata was serialized as null")
            p = 16 + n
            metadata = d[16:p].decode("utf-8") if n else ""
            (commit_ts,) = _q_unpack(d, p)
            _check_end(d, p + 8, "OffsetCommit value v3")
            return offset, epoch, metadata, commit_ts, -1
        if 0 <= version <= 2:
            (offset,) = _q_unpack(d, 2)
            metadata, p = _read_str_nn(d, 10, False, "metadata")
            (commit_ts,) = _q_unpack(d, p)
            p += 8
            expire_ts = -1
            if version == 1:
                (expire_ts,) = _q_unpack(d, p)
                p += 8
            _check_end(d, p, f"OffsetCommit value v{version}")
            return offset, -1, metadata, commit_ts, expire_ts
        if version == 4:
            _, offset, epoch = _hqi.unpack_from(d, 0)
            metadata, p = _read_str_nn(d, 14, True, "metadata")
            (commit_ts,) = _q_unpack(d, p)
            p = _skip_tagged_fields(d, p + 8)
            _check_end(d, p, "OffsetCommit value v4")
            return offset, epoch, metadata, commit_ts, -1
    except (struct.error, IndexError) as exc:
        raise RecordDecodeError(f"truncated OffsetCommit value: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in OffsetCommit value: {exc}") from exc
    raise RecordDecodeError(f"unknown OffsetCommit value version {version}")


def decode_offset_commit_value(data: bytes | bytearray | memoryview) -> OffsetCommitValue:
    """Decode an OffsetCommit value of version 0..4 (v4: unknown tagged fields are skipped)."""
    return OffsetCommitValue(*_decode_offset_commit_tuple(_as_bytes(data)))


# ---------------------------------------------------------------------------------------------
# GroupMetadata values (§4.7)
#
#   int16 ver | string protocolType | int32 generation | nullable-string protocol |
#   nullable-string leader | [int64 currentStateTimestamp, v2+] | array members |
#   [tagged fields, v4]
#   member: string memberId | [nullable-string groupInstanceId, v3+] | string clientId |
#           string clientHost | [int32 rebalanceTimeout, v1+] | int32 sessionTimeout |
#           bytes subscription | bytes assignment | [tagged fields, v4]
# ---------------------------------------------------------------------------------------------


def _encode_group_metadata_value(v: GroupMetadataValue, version: int | None) -> bytes:
    """Serialize at `version` (default 3); fields the version lacks are dropped."""
    if version is None:
        version = 3
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue version {version} is not one of 0..4")
    flex = version >= 4
    s = _cstr if flex else _str
    b = _cbytes if flex else _bytes
    out = [_h.pack(version), s(v.protocol_type if v.protocol_type is not None else ""),
           _i.pack(v.generation), s(v.protocol), s(v.leader)]
    if version >= 2:
        out.append(_q.pack(v.current_state_timestamp))
    out.append(encode_uvarint(len(v.members) + 1) if flex else _i.pack(len(v.members)))
    for m in v.members:
        out.append(s(m.member_id))
        if version >= 3:
            out.append(s(m.group_instance_id))
        out.append(s(m.client_id))
        out.append(s(m.client_host))
        if version >= 1:
            out.append(_i.pack(m.rebalance_timeout))
        out.append(_i.pack(m.session_timeout))
        out.append(b(m.subscription))
        out.append(b(m.assignment))
        if flex:
            out.append(_NO_TAGS)
    if flex:
        out.append(_NO_TAGS)
    return b"".join(out)


def decode_group_metadata_value(data: bytes | bytearray | memoryview) -> GroupMetadataValue:
    """Decode a GroupMetadata value of version 0..4 (rebalance timeout -1 -> session timeout)."""
    d = _as_bytes(data)
    try:
        (version,) = _h_unpack(d, 0)
        if not 0 <= version <= 4:
            raise RecordDecodeError(f"unknown GroupMetadata value version {version}")
        flex = version >= 4
        protocol_type, p = _read_str(d, 2, flex)
        if protocol_type is None:  # tolerated: "" and null both mean "no protocol type"
            protocol_type = ""
        (generation,) = _i_unpack(d, p)
        protocol, p = _read_str(d, p + 4, flex)
        leader, p = _read_str(d, p, flex)
        current_state_timestamp = -1
        if version >= 2:
            (current_state_timestamp,) = _q_unpack(d, p)
            p += 8
        count, p = _read_length(d, p, flex, _i)
        if count < 0:
            raise RecordDecodeError(f"non-nullable array members has count {count}")
        if count > len(d):  # every member takes well over one byte: garbage count
            raise RecordDecodeError(f"members count {count} exceeds the buffer")
        members = []
        for _ in range(count):
            member_id, p = _read_str_nn(d, p, flex, "memberId")
            instance_id = None
            if version >= 3:
                instance_id, p = _read_str(d, p, flex)
            client_id, p = _read_str_nn(d, p, flex, "clientId")
            client_host, p = _read_str_nn(d, p, flex, "clientHost")
            rebalance_timeout = -1
            if version >= 1:
                (rebalance_timeout,) = _i_unpack(d, p)
                p += 4
            (session_timeout,) = _i_unpack(d, p)
            subscription, p = _read_bytes_nn(d, p + 4, flex, "subscription")
            assignment, p = _read_bytes_nn(d, p, flex, "assignment")
            if flex:
                p = _skip_tagged_fields(d, p)
            if rebalance_timeout == -1:
                rebalance_timeout = session_timeout
            members.append(
                MemberMetadata(
                    member_id, instance_id, client_id, client_host,
                    rebalance_timeout, session_timeout, subscription, assignment,
                )
            )
        if flex:
            p = _skip_tagged_fields(d, p)
        _check_end(d, p, f"GroupMetadata value v{version}")
    except (struct.error, IndexError) as exc:
        raise RecordDecodeError(f"truncated GroupMetadata value: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in GroupMetadata value: {exc}") from exc
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


# ---------------------------------------------------------------------------------------------
# Generic value entry points and record helpers
# ---------------------------------------------------------------------------------------------


def encode_value(value: RecordValue, version: int | None = None) -> bytes:
    """Serialize a value: OffsetCommit -> v3 (v1 if expire_timestamp != -1); GroupMetadata -> v3.

    `version` forces another schema version (0..4; for tests and compatibility tools); fields
    that version lacks are dropped.
    """
    if type(value) is OffsetCommitValue:
        return _encode_offset_commit_value(value, version)
    if type(value) is GroupMetadataValue:
        return _encode_group_metadata_value(value, version)
    raise TypeError(f"encode_value: expected OffsetCommitValue or GroupMetadataValue, got {type(value).__name__}")


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


# ---------------------------------------------------------------------------------------------
# Consumer protocol subscription (§1.4)
# ---------------------------------------------------------------------------------------------


def _consumer_protocol_count(d: bytes) -> int | None:
    """The topic count after the int16 version of a "consumer" protocol subscription or
    assignment (None: a negative version or an impossible count). Raises struct.error if short."""
    version, = _h_unpack(d, 0)
    (count,) = _i_unpack(d, 2)
    return None if version < 0 or count < 0 or count > len(d) else count


def parse_subscription_topics(metadata: bytes | bytearray | memoryview | None) -> list[str] | None:
    """Topics of "consumer" JoinGroup member metadata (v0 layout, later fields ignored); None if unparsable."""
    # int16 version | int32 topic count | (int16 length + UTF-8)* | bytes userData (int32 length,
    # -1 = null) | fields of later versions (ignored)
    if metadata is None:
        return None
    d = _as_bytes(metadata)
    try:
        count = _consumer_protocol_count(d)
        if count is None:
            return None
        p = 6
        topics: list[str] = []
        for _ in range(count):
            topic, p = _read_str(d, p, False)
            if topic is None:
                return None
            topics.append(topic)
        (ud,) = _i_unpack(d, p)
        if ud < -1 or p + 4 + max(ud, 0) > len(d):
            return None
    except (struct.error, IndexError, UnicodeDecodeError, RecordDecodeError):
        return None
    return topics


def parse_assignment_partitions(assignment: bytes | bytearray | memoryview | None) -> list[tuple[str, int]] | None:
    """(topic, partition) pairs of a "consumer" SyncGroup assignment (v0 layout, later fields
    ignored), sorted; None if unparsable. Empty bytes: nothing assigned."""
    # int16 version | int32 topic count | (int16 length + UTF-8, int32 count, int32 partition*)*
    # | bytes userData
    if not assignment:
        return [] if assignment is not None else None
    d = _as_bytes(assignment)
    try:
        count = _consumer_protocol_count(d)
        if count is None:
            return None
        p = 6
        pairs: list[tuple[str, int]] = []
        for _ in range(count):
            topic, p = _read_str(d, p, False)
            (n,) = _i_unpack(d, p)
            if topic is None or n < 0 or p + 4 + 4 * n > len(d):
                return None
            pairs.extend((topic, part) for part in struct.unpack_from(f">{n}i", d, p + 4))
            p += 4 + 4 * n
    except (struct.error, IndexError, UnicodeDecodeError, RecordDecodeError):
        return None
    return sorted(pairs)


def encode_consumer_subscription(topics: list[str], user_data: bytes | None = None, version: int = 0) -> bytes:
    """ConsumerProtocolSubscription v0 layout with an int16 version prefix (tests and tools)."""
    return b"".join((_h.pack(version), _i.pack(len(topics)), *(_str(t) for t in topics), _bytes(user_data)))


# ---------------------------------------------------------------------------------------------
# Log walking (start-up replay)
#
# Record inside a magic-v2 batch (after the 61-byte header; uncompressed or decompressed):
#     length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
#     keyLength varint | key | valueLength varint | value | headerCount varint | headers
# Varints are zig-zag base-128; -1 lengths are null. Control batches (attribute bit 5) hold one
# record whose key is int16 version | int16 type (0 = ABORT, 1 = COMMIT).
# This walker serves tools and tests; the broker's start-up loader uses the flat
# `records.scan.scan_key_values` loop instead.
# ---------------------------------------------------------------------------------------------

LogRecord = tuple[int, int, "bytes | ControlMarker | None", "bytes | None", int]
"""(offset, timestamp, key, value, producer_id) as yielded by iter_log_records."""


def _zigzag_varint(d: bytes, p: int) -> tuple[int, int]:
    """Zig-zag (signed) varint of at most 10 bytes at p, as records use."""
    result, p = _read_varint_bits(d, p, 10)
    return (result >> 1) ^ -(result & 1), p


def _read_record(d: bytes, p: int, end: int) -> tuple[int, int, int, bytes | None, bytes | None]:
    """General record decode at p: (record end, timestampDelta, offsetDelta, key, value)."""
    zz = _zigzag_varint
    length, p = zz(d, p)
    rec_end = p + length
    ts_delta, p = zz(d, p + 1)  # + 1 skips the attributes byte
    off_delta, p = zz(d, p)
    klen, p = zz(d, p)
    key = None
    if klen >= 0:
        key = d[p : p + klen]
        p += klen
    vlen, p = zz(d, p)
    value = None
    if vlen >= 0:
        value = d[p : p + vlen]
        p += vlen
    if length < 0 or klen < -1 or vlen < -1 or p > rec_end or rec_end > end:
        raise RecordDecodeError(f"malformed record (offset delta {off_delta})")
    return rec_end, ts_delta, off_delta, key, value


_BatchArea = tuple[int, int, bytes, int, int, int, int, int, int, int, int]


def _batches(
    buf: bytes | bytearray | memoryview,
    pos: int,
    verify: bool,
    decompress: Callable[[int, bytes], bytes] | None,
) -> Generator[_BatchArea, None, None]:
    """Per complete batch: (batch pos, size, d, p, end, baseOffset, attributes, baseTimestamp,
    maxTimestamp, producerId, recordsCount) where d[p:end] is the (decompressed) record area."""
    is_bytes = type(buf) is bytes
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = len(mv)
    hdr = _batch_header_unpack
    while n - pos >= BATCH_HEADER_SIZE:
        (base_offset, batch_length, _epoch, magic, crc, attributes, _lod, base_ts, max_ts,
         producer_id, _pepoch, _bseq, count) = hdr(mv, pos)
        size = batch_length + LOG_OVERHEAD
        if batch_length < MIN_BATCH_LENGTH or pos + size > n:
            return  # torn tail: incomplete batch, or zero fill
        if magic != 2:
            raise RecordDecodeError(f"batch at byte {pos} (offset {base_offset}) has magic {magic}, not 2")
        if count < 0:  # would read as an empty batch
            raise RecordDecodeError(f"batch at byte {pos} (offset {base_offset}) has recordsCount {count}")
        if verify and crc32c(mv[pos + CRC_START : pos + size]) != crc:
            raise RecordDecodeError(f"batch at byte {pos} (offset {base_offset}) failed its CRC-32C check")
        codec = attributes & _COMPRESSION_MASK
        if codec != COMPRESSION_NONE:
            d = (decompress or _default_decompress)(codec, bytes(mv[pos + BATCH_HEADER_SIZE : pos + size]))
            if type(d) is not bytes:
                d = bytes(d)
            yield pos, size, d, 0, len(d), base_offset, attributes, base_ts, max_ts, producer_id, count
        elif is_bytes:
            # Work in place on the caller's bytes: slicing bytes is the cheapest way to cut
            # out small keys and values.
            yield (pos, size, buf, pos + BATCH_HEADER_SIZE, pos + size, base_offset,  # type: ignore[misc]
                   attributes, base_ts, max_ts, producer_id, count)
        else:
            d = bytes(mv[pos + BATCH_HEADER_SIZE : pos + size])  # one copy per batch
            yield pos, size, d, 0, len(d), base_offset, attributes, base_ts, max_ts, producer_id, count
        pos += size


def _control_markers(area: _BatchArea) -> list[LogRecord]:
    """The COMMIT / ABORT markers of one control batch as LogRecords (other control types skipped)."""
    bpos, _size, d, p, end, base_offset, attributes, base_ts, max_ts, producer_id, count = area
    out: list[LogRecord] = []
    try:
        for _ in range(count):
            p, ts_delta, off_delta, key, _value = _read_record(d, p, end)
            # control key: int16 version | int16 type (0 ABORT, 1 COMMIT)
            if key is None or len(key) < 4:
                raise RecordDecodeError(f"control record in batch at byte {bpos} has a short key")
            cversion, ctype = _hh_unpack(key, 0)
            if cversion < 0:
                raise RecordDecodeError(f"control record version {cversion} in batch at byte {bpos}")
            if ctype == 0 or ctype == 1:
                ts = max_ts if attributes & TIMESTAMP_TYPE_MASK else base_ts + ts_delta
                out.append((base_offset + off_delta, ts, ControlMarker(ctype), None, producer_id))
    except IndexError as exc:
        raise RecordDecodeError(f"malformed control batch at byte {bpos}: {exc}") from exc
    if p != end:
        raise RecordDecodeError(f"control batch at byte {bpos} has {end - p} bytes after its records")
    return out


def _gunzip(data: bytes) -> bytes:
    """Decompress a gzip stream (one or more members) with zlib, checking each member's CRC."""
    out = []
    while data:
        z = zlib.decompressobj(31)  # wbits 16 + 15: gzip header and trailer
        out.append(z.decompress(data))
        if not z.eof:
            raise RecordDecodeError("truncated gzip batch")
        data = z.unused_data
    return b"".join(out)


def _default_decompress(codec: int, data: bytes) -> bytes:
    """gzip via zlib from the standard library; other codecs need a `decompress` callback."""
    if codec == COMPRESSION_GZIP:
        try:
            return _gunzip(data)
        except zlib.error as exc:
            raise RecordDecodeError(f"corrupt gzip batch: {exc}") from exc
    name = _CODEC_NAMES.get(codec, f"unknown codec {codec}")
    raise RecordDecodeError(
        f"batch compressed with {name}: only gzip is built in; pass decompress=(codec, data) -> bytes"
    )


def iter_log_records(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    verify: bool = False,
    markers: bool = True,
    decompress: Callable[[int, bytes], bytes] | None = None,
) -> Generator[LogRecord, None, int]:
    """Yield (offset, timestamp, key, value, producer_id) for every record of the v2 batches in buf.

    * Data records: key and value are `bytes` (or None when null). producer_id is the batch's
      (-1 for a plain batch, the producer id for a transactional one).
    * Control batches (transaction markers): when `markers` is true, each COMMIT or ABORT control
      record is yielded as (offset, timestamp, ControlMarker.COMMIT/ABORT, None, producer_id):
      the key slot holds a ControlMarker instead of bytes, so `type(key) is bytes` tells data
      from markers. Other control types are skipped; markers=False skips control batches whole.
    * Stops cleanly at a torn tail (incomplete header or batch, or a batchLength too small to be
      a batch, e.g. zero fill); the generator's return value (`yield from`) is the byte position
      where it stopped, i.e. where the next read should continue.
    * Raises RecordDecodeError for a complete batch that is not magic 2, fails the CRC-32C
      check (only with verify=True), or holds malformed records.
    * Compressed batches: gzip is decompressed with the standard library (zlib); for other codecs pass
      `decompress(codec, data) -> bytes`, otherwise RecordDecodeError.
    LogAppendTime batches give every record the batch's maxTimestamp.
    """
    stop = pos
    for area in _batches(buf, pos, verify, decompress):
        bpos, size, d, p, end, base_offset, attributes, base_ts, max_ts, producer_id, count = area
        if attributes & CONTROL_MASK:
            if markers:
                yield from _control_markers(area)
            stop = bpos + size
            continue
        lat = attributes & TIMESTAMP_TYPE_MASK
        try:
            for _ in range(count):
                p, ts_delta, off_delta, key, value = _read_record(d, p, end)
                yield base_offset + off_delta, max_ts if lat else base_ts + ts_delta, key, value, producer_id
        except IndexError as exc:
            raise RecordDecodeError(f"malformed records in batch at byte {bpos}: {exc}") from exc
        if p != end:
            raise RecordDecodeError(f"batch at byte {bpos} has {end - p} bytes after its {count} records")
        stop = bpos + size
    return stop
