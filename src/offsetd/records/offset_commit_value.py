"""The value of an OffsetCommit record (key versions 0 and 1): a group's committed offset of one
partition, in value versions 0..4 (reference §4.5)."""

from __future__ import annotations

import struct
from typing import NamedTuple

from offsetd.records.coordinator_serde import (
    INT16,
    INT64,
    NO_TAGGED_FIELDS,
    RecordDecodeError,
    as_bytes,
    check_end,
    read_required_string,
    skip_tagged_fields,
    write_compact_string,
    write_string,
)

__all__ = ["OffsetCommitValue", "encode_offset_commit_value", "decode_offset_commit_value", "offset_commit_value_bytes"]

# Precompiled structs. Names spell the format: h int16, i int32, q int64.
_hqih = struct.Struct(">hqih")  # value v3: version, offset, leaderEpoch, metadata length
_hqi = struct.Struct(">hqi")  # value v4 prefix: version, offset, leaderEpoch
_qq = struct.Struct(">qq")
_hq = struct.Struct(">hq")  # value v0-v2 prefix: version, offset
_hqihq = struct.Struct(">hqihq")  # value v3 with empty metadata: version, offset, leaderEpoch, 0, commitTimestamp
_h_unpack = INT16.unpack_from
_q_unpack = INT64.unpack_from
_hqih_unpack = _hqih.unpack_from


# A NamedTuple: the coordinator builds one per committed partition, and a NamedTuple costs a
# fraction of a frozen dataclass to construct.
class OffsetCommitValue(NamedTuple):
    """Value of an OffsetCommit record; -1 means absent for leader_epoch and the timestamps."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1


# ---------------------------------------------------------------------------------------------
# OffsetCommit values (§4.5)
#
#   v0, v2  int16 ver | int64 offset | string metadata | int64 commitTimestamp
#   v1      int16 ver | int64 offset | string metadata | int64 commitTimestamp | int64 expireTs
#   v3      int16 ver | int64 offset | int32 leaderEpoch | string metadata | int64 commitTimestamp
#   v4      as v3 with a compact string and a trailing tagged-field section
# ---------------------------------------------------------------------------------------------


def offset_commit_value_bytes(offset: int, leader_epoch: int, metadata: str | None, commit_timestamp: int,
                              expire_timestamp: int = -1) -> bytes:
    """An OffsetCommit value as the coordinator writes it: v3, or v1 when an expire timestamp is
    set. The commit path calls this per committed partition, without an OffsetCommitValue."""
    if expire_timestamp != -1:
        return _value_v1(offset, metadata, commit_timestamp, expire_timestamp)
    return _value_v3(offset, leader_epoch, metadata, commit_timestamp)


def _value_v3(offset: int, leader_epoch: int, metadata: str | None, commit_timestamp: int) -> bytes:
    if not metadata:  # the usual commit: one pack, the empty string's length included
        return _hqihq.pack(3, offset, leader_epoch, 0, commit_timestamp)
    return b"".join((_hqi.pack(3, offset, leader_epoch), write_string(metadata), INT64.pack(commit_timestamp)))


def _value_v1(offset: int, metadata: str | None, commit_timestamp: int, expire_timestamp: int) -> bytes:
    # v1 has no leader epoch: it is dropped, as Kafka does.
    return b"".join((_hq.pack(1, offset), write_string(metadata or ""), _qq.pack(commit_timestamp, expire_timestamp)))


def encode_offset_commit_value(v: OffsetCommitValue, version: int | None = None) -> bytes:
    """Serialize at `version`; None picks v3, or v1 when an expire timestamp is set."""
    if version is None:
        return offset_commit_value_bytes(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
    if version == 3:
        return _value_v3(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
    if version == 1:
        return _value_v1(v.offset, v.metadata, v.commit_timestamp, v.expire_timestamp)
    md = v.metadata if v.metadata is not None else ""
    if version == 0 or version == 2:
        return b"".join((INT16.pack(version), INT64.pack(v.offset), write_string(md), INT64.pack(v.commit_timestamp)))
    if version == 4:
        return b"".join((_hqi.pack(4, v.offset, v.leader_epoch), write_compact_string(md),
                         INT64.pack(v.commit_timestamp), NO_TAGGED_FIELDS))
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
            check_end(d, p + 8, "OffsetCommit value v3")
            return offset, epoch, metadata, commit_ts, -1
        if 0 <= version <= 2:
            (offset,) = _q_unpack(d, 2)
            metadata, p = read_required_string(d, 10, False, "metadata")
            (commit_ts,) = _q_unpack(d, p)
            p += 8
            expire_ts = -1
            if version == 1:
                (expire_ts,) = _q_unpack(d, p)
                p += 8
            check_end(d, p, f"OffsetCommit value v{version}")
            return offset, -1, metadata, commit_ts, expire_ts
        if version == 4:
            _, offset, epoch = _hqi.unpack_from(d, 0)
            metadata, p = read_required_string(d, 14, True, "metadata")
            (commit_ts,) = _q_unpack(d, p)
            p = skip_tagged_fields(d, p + 8)
            check_end(d, p, "OffsetCommit value v4")
            return offset, epoch, metadata, commit_ts, -1
    except (struct.error, IndexError) as exc:
        raise RecordDecodeError(f"truncated OffsetCommit value: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise RecordDecodeError(f"invalid UTF-8 in OffsetCommit value: {exc}") from exc
    raise RecordDecodeError(f"unknown OffsetCommit value version {version}")


def decode_offset_commit_value(data: bytes | bytearray | memoryview) -> OffsetCommitValue:
    """Decode an OffsetCommit value of version 0..4 (v4: unknown tagged fields are skipped)."""
    return OffsetCommitValue(*_decode_offset_commit_tuple(as_bytes(data)))
