"""`__transaction_state` record codecs and the transactional id -> partition hash.

Pure code: bytes in, values out. Layouts follow Kafka's TransactionLogKey/TransactionLogValue
schemas (transactions reference A9); integers are big-endian.

    key v0     int16 0 | TransactionalId (int16-length string)
    value v0   int16 0 | ProducerId i64 | ProducerEpoch i16 | TransactionTimeoutMs i32 |
               TransactionStatus i8 | TransactionPartitions (i32 count, -1 = null, of
               {Topic int16-length string, PartitionIds i32 count + i32s}) |
               LastUpdateTimestampMs i64 | TransactionStartTimestampMs i64
    value v1   the same fields in the flexible encoding (compact strings and arrays: uvarint of
               n + 1, 0 = null; every struct ends with a tagged-field section). Value tags:
               0 PreviousProducerId i64, 1 NextProducerId i64, 2 ClientTransactionVersion i16.

A null value is a tombstone (an expired transactional id). offsetd writes value v0 (it does not
advertise `transaction.version`, so the cluster is TV0) and reads v0 and v1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .coordinator_serde import RecordDecodeError
from .offsets import partition_for as _hash_partition
from .varint import encode_uvarint

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "DEFAULT_NUM_PARTITIONS",
    "TransactionLogValue",
    "partition_for",
    "encode_key",
    "decode_key",
    "encode_value",
    "decode_value",
    "RecordDecodeError",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_NUM_PARTITIONS = 50
"""Kafka's default `transaction.state.log.num.partitions`."""

_KEY_V0 = 0
_VALUE_V0 = 0
_VALUE_V1 = 1

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start timestamps

# Value v1 tagged fields.
_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """One transactional id's persisted metadata (`partitions` None = null, written for Empty)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def partition_for(transactional_id: str, num_partitions: int = DEFAULT_NUM_PARTITIONS) -> int:
    """`__transaction_state` partition of an id: Kafka `Utils.abs(String.hashCode) % n`, as for groups."""
    return _hash_partition(transactional_id, num_partitions)


# ------------------------------------------------------------------------------------- keys


def encode_key(transactional_id: str) -> bytes:
    """Key v0 of a transactional id."""
    raw = transactional_id.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"transactional id of {len(raw)} UTF-8 bytes does not fit an int16 length")
    return _h.pack(_KEY_V0) + _h.pack(len(raw)) + raw


def decode_key(data: bytes | bytearray | memoryview) -> str | None:
    """The transactional id of a key, or None for a key version this reader skips (A9)."""
    d = bytes(data)
    try:
        (version,) = _h.unpack_from(d, 0)
        if version != _KEY_V0:
            return None
        (n,) = _h.unpack_from(d, 2)
    except struct.error as exc:
        raise RecordDecodeError(f"transaction log key truncated: {exc}") from None
    if n < 0 or 4 + n != len(d):
        raise RecordDecodeError(f"transaction log key: id length {n} for {len(d)} bytes")
    return d[4:].decode("utf-8")


# ----------------------------------------------------------------------------------- values


def _sorted_partitions(value: TransactionLogValue) -> list[tuple[str, list[int]]] | None:
    if value.partitions is None:
        return None
    return [(topic, sorted(parts)) for topic, parts in sorted(value.partitions)]


def encode_value(value: TransactionLogValue, version: int = _VALUE_V0) -> bytes:
    """Value v0 (default) or v1 of `value`; topics and partitions are written sorted."""
    if version not in (_VALUE_V0, _VALUE_V1):
        raise ValueError(f"unsupported transaction log value version {version}")
    flexible = version == _VALUE_V1
    out = bytearray(_HEAD.pack(version, value.producer_id, value.producer_epoch,
                               value.transaction_timeout_ms, value.transaction_status))
    partitions = _sorted_partitions(value)
    if partitions is None:
        out += b"\x00" if flexible else _i.pack(-1)
    else:
        out += encode_uvarint(len(partitions) + 1) if flexible else _i.pack(len(partitions))
        for topic, parts in partitions:
            raw = topic.encode("utf-8")
            if flexible:
                out += encode_uvarint(len(raw) + 1) + raw + encode_uvarint(len(parts) + 1)
            else:
                out += _h.pack(len(raw)) + raw + _i.pack(len(parts))
            for p in parts:
                out += _i.pack(p)
            if flexible:
                out += b"\x00"  # the partition entry's empty tagged-field section
    out += _TAIL.pack(value.last_update_timestamp_ms, value.start_timestamp_ms)
    if flexible:
        tags = []
        if value.previous_producer_id != -1:
            tags.append((_TAG_PREVIOUS_PRODUCER_ID, _q.pack(value.previous_producer_id)))
        if value.next_producer_id != -1:
            tags.append((_TAG_NEXT_PRODUCER_ID, _q.pack(value.next_producer_id)))
        if value.client_transaction_version != 0:
            tags.append((_TAG_CLIENT_TRANSACTION_VERSION, _h.pack(value.client_transaction_version)))
        out += encode_uvarint(len(tags))
        for tag, body in tags:
            out += encode_uvarint(tag) + encode_uvarint(len(body)) + body
    return bytes(out)


def _uvarint(d: bytes, p: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes at p."""
    result = 0
    for shift in range(0, 35, 7):
        b = d[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
    raise RecordDecodeError("varint longer than 5 bytes")


def _count(d: bytes, p: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """An array count or string length (compact n + 1 when flexible); -1 = null."""
    if flexible:
        n, p = _uvarint(d, p)
        return n - 1, p
    return fixed.unpack_from(d, p)[0], p + fixed.size


def _skip_tags(d: bytes, p: int) -> int:
    count, p = _uvarint(d, p)
    for _ in range(count):
        _tag, p = _uvarint(d, p)
        size, p = _uvarint(d, p)
        p += size
    return p


def decode_value(data: bytes | bytearray | memoryview) -> TransactionLogValue:
    """Decode value v0 or v1; any other version raises RecordDecodeError (A9: ends the load)."""
    d = bytes(data)
    try:
        return _decode_value(d)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise RecordDecodeError(f"transaction log value truncated or garbled: {exc}") from None


def _decode_value(d: bytes) -> TransactionLogValue:
    version, pid, epoch, timeout, status = _HEAD.unpack_from(d, 0)
    if version not in (_VALUE_V0, _VALUE_V1):
        raise RecordDecodeError(f"unknown transaction log value version {version}")
    flexible = version == _VALUE_V1
    p = _HEAD.size
    n, p = _count(d, p, flexible, _i)
    partitions: list[tuple[str, tuple[int, ...]]] | None = None
    if n >= 0:
        partitions = []
        for _ in range(n):
            length, p = _count(d, p, flexible, _h)
            if length < 0 or p + length > len(d):
                raise RecordDecodeError(f"bad topic length {length}")
            topic = d[p:p + length].decode("utf-8")
            p += length
            count, p = _count(d, p, flexible, _i)
            if count < 0 or p + 4 * count > len(d):
                raise RecordDecodeError(f"bad partition count {count}")
            parts = struct.unpack_from(f">{count}i", d, p)
            p += 4 * count
            if flexible:
                p = _skip_tags(d, p)
            partitions.append((topic, tuple(parts)))
    elif n != -1:
        raise RecordDecodeError(f"bad partition array count {n}")
    last_update, start = _TAIL.unpack_from(d, p)
    p += _TAIL.size
    extra = {"previous_producer_id": -1, "next_producer_id": -1, "client_transaction_version": 0}
    if flexible:
        count, p = _uvarint(d, p)
        for _ in range(count):
            tag, p = _uvarint(d, p)
            size, p = _uvarint(d, p)
            body = d[p:p + size]
            p += size
            if tag == _TAG_PREVIOUS_PRODUCER_ID:
                extra["previous_producer_id"] = _q.unpack(body)[0]
            elif tag == _TAG_NEXT_PRODUCER_ID:
                extra["next_producer_id"] = _q.unpack(body)[0]
            elif tag == _TAG_CLIENT_TRANSACTION_VERSION:
                extra["client_transaction_version"] = _h.unpack(body)[0]
    if p != len(d):
        raise RecordDecodeError(f"transaction log value: {len(d) - p} trailing bytes")
    return TransactionLogValue(pid, epoch, timeout, status,
                               None if partitions is None else tuple(partitions),
                               last_update, start, **extra)
