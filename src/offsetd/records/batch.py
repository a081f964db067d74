"""Magic-v2 record batches: header parse / validate / patch, and a small builder and decoder.

This module is pure (no I/O). The produce and fetch paths treat batches as opaque: they only
look at the 61-byte header and check the CRC, never at the records inside, so all work here is
O(batches). `build_batch` and `decode_records` handle uncompressed batches for tests, for the
`__consumer_offsets` codecs and for time-index lookups.

Batch layout (big-endian; offsets in bytes from the start of the batch):

    @0  baseOffset            int64   patched by the broker to the assigned offset (not in CRC)
    @8  batchLength           int32   bytes after this field: total size = 12 + batchLength
    @12 partitionLeaderEpoch  int32   patched by the broker (not in CRC)
    @16 magic                 int8    must be 2
    @17 crc                   uint32  CRC-32C of bytes @21 .. end of batch
    @21 attributes            int16   bits 0-2 codec, bit 3 timestampType, bit 4 transactional,
                                      bit 5 control
    @23 lastOffsetDelta       int32
    @27 baseTimestamp         int64
    @35 maxTimestamp          int64
    @43 producerId            int64
    @51 producerEpoch         int16
    @53 baseSequence          int32
    @57 recordsCount          int32
    @61 records...

Each record (uncompressed):
    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint + key, valueLength varint + value,
    headerCount varint + (headerKeyLength varint + key utf-8, headerValueLength varint + value)*
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from crc32c import crc32c

from offsetd.records.varint import VarintError, decode_varint, encode_varint

__all__ = [
    "BATCH_HEADER_SIZE",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "CRC_START",
    "CORRUPT_MESSAGE",
    "MESSAGE_TOO_LARGE",
    "INVALID_RECORD",
    "COMPRESSION_NONE",
    "COMPRESSION_GZIP",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_LZ4",
    "COMPRESSION_ZSTD",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "CONTROL_MASK",
    "NO_TIMESTAMP",
    "InvalidBatch",
    "BatchHeader",
    "Record",
    "parse_header",
    "validate_batches",
    "patch_base_offset",
    "patch_leader_epoch",
    "batch_crc_ok",
    "iter_batches",
    "build_batch",
    "decode_records",
]

BATCH_HEADER_SIZE = 61
"""Size of the fixed magic-v2 batch header; records start at this offset."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted by batchLength."""
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD
"""Smallest legal batchLength (a header with no records)."""
CRC_START = 21
"""The CRC covers the batch from the attributes field to its end."""

# Kafka error codes used by batch validation.
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_RECORD = 87

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
_COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
NO_TIMESTAMP = -1
_INT32_MAX = 2**31 - 1

# baseOffset q, batchLength i, partitionLeaderEpoch i, magic b, crc I, attributes h,
# lastOffsetDelta i, baseTimestamp q, maxTimestamp q, producerId q, producerEpoch h,
# baseSequence i, recordsCount i  -> 61 bytes
_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _HEADER.size == BATCH_HEADER_SIZE
_HEADER_UNPACK_FROM = _HEADER.unpack_from
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
# After the CRC: attributes .. recordsCount (the part of the header covered by the CRC).
_CRC_PART = struct.Struct(">hiqqqhii")


class InvalidBatch(ValueError):
    """A produce blob or stored batch failed validation; `error_code` is the Kafka error code."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(slots=True)
class BatchHeader:
    """The 61-byte header of one magic-v2 record batch, as parsed (no records)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch including baseOffset and batchLength."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        """Compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & _COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        """True when the batch belongs to a transaction."""
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """True for control batches (transaction markers)."""
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset(self) -> int:
        """Offset of the last record of the batch."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset right after this batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last record (int32 wraparound as in Kafka), -1 if none."""
        if self.base_sequence < 0:
            return -1
        delta = self.last_offset_delta
        if self.base_sequence > _INT32_MAX - delta:
            return delta - (_INT32_MAX - self.base_sequence) - 1
        return self.base_sequence + delta


@dataclass(slots=True)
class Record:
    """One decoded record of an uncompressed batch."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at `pos`; raise InvalidBatch(CORRUPT_MESSAGE) if fewer than 61 bytes."""
    if len(buf) - pos < BATCH_HEADER_SIZE:
        raise InvalidBatch(
            CORRUPT_MESSAGE,
            f"truncated record batch header at byte {pos}: "
            f"{max(len(buf) - pos, 0)} of {BATCH_HEADER_SIZE} bytes",
        )
    return BatchHeader(*_HEADER_UNPACK_FROM(buf, pos))


def batch_crc_ok(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC-32C matches the batch bytes at `pos` (which must be complete)."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return crc32c(mv[pos + CRC_START : pos + LOG_OVERHEAD + header.batch_length]) == header.crc


def validate_batches(buf: bytes | bytearray | memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Check every batch of a Produce `records` blob and return their headers, in order.

    Per batch: sane batchLength, size <= max_batch_bytes (else MESSAGE_TOO_LARGE), complete,
    magic 2, CRC-32C, recordsCount > 0 and lastOffsetDelta == recordsCount - 1 (else
    INVALID_RECORD, Kafka's rule; offsets are assigned from lastOffsetDelta so it must be
    consistent). An empty blob is INVALID_RECORD. Other failures are CORRUPT_MESSAGE.
    Cost: one struct unpack and one CRC pass per batch; records are never decoded.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    n = len(mv)
    if n == 0:
        raise InvalidBatch(INVALID_RECORD, "produce request contains no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    unpack = _HEADER_UNPACK_FROM
    while pos < n:
        remaining = n - pos
        if remaining < BATCH_HEADER_SIZE:
            raise InvalidBatch(
                CORRUPT_MESSAGE,
                f"truncated record batch at byte {pos}: {remaining} bytes left, "
                f"header needs {BATCH_HEADER_SIZE}",
            )
        h = BatchHeader(*unpack(mv, pos))
        if h.batch_length < MIN_BATCH_LENGTH:
            raise InvalidBatch(
                CORRUPT_MESSAGE,
                f"record batch at byte {pos} has batchLength {h.batch_length} "
                f"(minimum {MIN_BATCH_LENGTH})",
            )
        size = h.batch_length + LOG_OVERHEAD
        if size > max_batch_bytes:
            raise InvalidBatch(
                MESSAGE_TOO_LARGE,
                f"record batch at byte {pos} is {size} bytes, larger than the "
                f"{max_batch_bytes}-byte limit (message.max.bytes / max.message.bytes)",
            )
        if size > remaining:
            raise InvalidBatch(
                CORRUPT_MESSAGE,
                f"record batch at byte {pos} declares {size} bytes but only {remaining} remain",
            )
        if h.magic != 2:
            raise InvalidBatch(
                CORRUPT_MESSAGE,
                f"record batch at byte {pos} has magic {h.magic}; only magic 2 is supported",
            )
        crc = crc32c(mv[pos + CRC_START : pos + size])
        if crc != h.crc:
            raise InvalidBatch(
                CORRUPT_MESSAGE,
                f"record batch at byte {pos} failed CRC-32C check "
                f"(stored {h.crc:#010x}, computed {crc:#010x})",
            )
        if h.records_count <= 0:
            raise InvalidBatch(
                INVALID_RECORD,
                f"record batch at byte {pos} has recordsCount {h.records_count}; must be > 0",
            )
        if h.last_offset_delta != h.records_count - 1:
            raise InvalidBatch(
                INVALID_RECORD,
                f"record batch at byte {pos} has lastOffsetDelta {h.last_offset_delta} "
                f"inconsistent with recordsCount {h.records_count}",
            )
        if h.attributes & CONTROL_MASK:
            raise InvalidBatch(
                INVALID_RECORD,
                f"record batch at byte {pos} is a control batch; clients may not produce control records",
            )
        headers.append(h)
        pos += size
    return headers


def patch_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Overwrite baseOffset (@0) of the batch at `pos`; the CRC does not cover it."""
    _INT64.pack_into(buf, pos, base_offset)


def patch_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Overwrite partitionLeaderEpoch (@12) of the batch at `pos`; the CRC does not cover it."""
    _INT32.pack_into(buf, pos + 12, epoch)


def iter_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) for each complete batch from `pos`; stop at a torn tail.

    Stops silently at an incomplete header, an insane batchLength or an incomplete batch.
    With verify=True it also stops at the first batch whose magic is not 2 or whose CRC fails.
    """
    n = len(buf)
    mv: memoryview | None = None
    unpack = _HEADER_UNPACK_FROM
    while n - pos >= BATCH_HEADER_SIZE:
        h = BatchHeader(*unpack(buf, pos))
        size = h.batch_length + LOG_OVERHEAD
        if h.batch_length < MIN_BATCH_LENGTH or pos + size > n:
            return
        if verify:
            if mv is None:
                mv = buf if isinstance(buf, memoryview) else memoryview(buf)
            if h.magic != 2 or crc32c(mv[pos + CRC_START : pos + size]) != h.crc:
                return
        yield pos, h
        pos += size


_NULL = encode_varint(-1)
_SMALL_VARINTS = tuple(encode_varint(i) for i in range(16384))  # lengths and deltas of most records


def _varint(value: int) -> bytes:
    """encode_varint with the common small non-negative values precomputed (batch building is on
    the coordinator's commit path)."""
    return _SMALL_VARINTS[value] if 0 <= value < 16384 else encode_varint(value)


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = [_varint(len(headers))]
    for hkey, hval in headers:
        raw = hkey.encode("utf-8")
        out += (_varint(len(raw)), raw, _NULL if hval is None else _varint(len(hval)) + hval)
    return b"".join(out)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, int | None, Sequence[tuple[str, bytes | None]]]],
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build one uncompressed magic-v2 batch with a valid CRC from (key, value, ts, headers) tuples.

    baseTimestamp is the first record's timestamp (None means -1), offset deltas are 0..n-1.
    `attributes` may set timestampType/transactional/control bits but not a compression codec.
    """
    if not records:
        raise ValueError("build_batch needs at least one record")
    if attributes & _COMPRESSION_MASK:
        raise ValueError("build_batch only builds uncompressed batches")
    timestamps = [NO_TIMESTAMP if r[2] is None else r[2] for r in records]
    base_ts = timestamps[0]
    max_ts = max(timestamps)
    v = _varint
    chunks: list[bytes] = []
    for delta, ((key, value, _ts, headers), ts) in enumerate(zip(records, timestamps)):
        # attributes (always 0), timestampDelta, offsetDelta, key, value, headers
        rec = b"".join((b"\x00", v(ts - base_ts), v(delta),
                        _NULL if key is None else v(len(key)) + key,
                        _NULL if value is None else v(len(value)) + value,
                        _encode_headers(headers) if headers else b"\x00"))
        chunks.append(v(len(rec)))
        chunks.append(rec)
    return _sealed(chunks, len(records), base_ts, max_ts, base_offset, producer_id, producer_epoch, base_sequence,
                   attributes, partition_leader_epoch)


def build_coordinator_batch(records: Sequence[tuple[bytes, bytes | None] | tuple[bytes, bytes | None, Any]],
                            timestamp: int, producer_id: int = -1, producer_epoch: int = -1,
                            attributes: int = 0) -> bytes:
    """build_batch for a coordinator's own records, on the commit path: (key, value or None, ...)
    tuples (items past the second ignored), every record at `timestamp`, no headers, offsets
    from 0, no sequence."""
    if not records:
        raise ValueError("build_coordinator_batch needs at least one record")
    v = _varint
    chunks: list[bytes] = []
    for delta, record in enumerate(records):
        key, value = record[0], record[1]
        # attributes 0, timestampDelta 0, offsetDelta, key, value, no headers
        if value is None:
            rec = b"".join((b"\x00\x00", v(delta), v(len(key)), key, _NULL, b"\x00"))
        else:
            rec = b"".join((b"\x00\x00", v(delta), v(len(key)), key, v(len(value)), value, b"\x00"))
        chunks.append(v(len(rec)))
        chunks.append(rec)
    return _sealed(chunks, len(records), timestamp, timestamp, 0, producer_id, producer_epoch, -1, attributes, -1)


def _sealed(chunks: list[bytes], count: int, base_ts: int, max_ts: int, base_offset: int, producer_id: int,
            producer_epoch: int, base_sequence: int, attributes: int, partition_leader_epoch: int) -> bytes:
    """The batch of encoded records `chunks`: header fields, then the CRC over them."""
    body = b"".join(chunks)
    crc_part = _CRC_PART.pack(
        attributes, count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count
    ) + body
    crc = crc32c(crc_part)
    batch_length = BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body)
    prefix = struct.pack(">qiibI", base_offset, batch_length, partition_leader_epoch, 2, crc)
    return prefix + crc_part


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decode all records of one uncompressed batch (header included in `batch`).

    Raises InvalidBatch(CORRUPT_MESSAGE) on malformed records and ValueError for compressed
    batches (codecs are never decoded by this package). With LogAppendTime every record gets the
    batch's maxTimestamp, as clients do.
    """
    h = parse_header(batch, 0)
    if h.compression != COMPRESSION_NONE:
        raise ValueError(f"decode_records: compressed batch (codec {h.compression}) not supported")
    if h.records_count < 0:  # would read as an empty batch
        raise InvalidBatch(CORRUPT_MESSAGE, f"batch has recordsCount {h.records_count}")
    end = h.size
    if len(batch) < end:
        raise InvalidBatch(CORRUPT_MESSAGE, f"batch declares {end} bytes but only {len(batch)} given")
    buf = batch if isinstance(batch, (bytes, bytearray)) else bytes(batch[:end])
    log_append_time = h.timestamp_type == 1
    out: list[Record] = []
    pos = BATCH_HEADER_SIZE
    try:
        for _ in range(h.records_count):
            length, pos = decode_varint(buf, pos)
            rec_end = pos + length
            if length < 0 or rec_end > end:
                raise InvalidBatch(CORRUPT_MESSAGE, f"record length {length} overruns the batch")
            attrs = buf[pos]
            pos += 1
            ts_delta, pos = decode_varint(buf, pos)
            off_delta, pos = decode_varint(buf, pos)
            klen, pos = decode_varint(buf, pos)
            key = None
            if klen >= 0:
                key = bytes(buf[pos : pos + klen])
                pos += klen
            vlen, pos = decode_varint(buf, pos)
            value = None
            if vlen >= 0:
                value = bytes(buf[pos : pos + vlen])
                pos += vlen
            hcount, pos = decode_varint(buf, pos)
            headers: list[tuple[str, bytes | None]] = []
            for _h in range(hcount):
                hklen, pos = decode_varint(buf, pos)
                if hklen < 0:
                    raise InvalidBatch(CORRUPT_MESSAGE, "null record header key")
                hkey = bytes(buf[pos : pos + hklen]).decode("utf-8")
                pos += hklen
                hvlen, pos = decode_varint(buf, pos)
                hval = None
                if hvlen >= 0:
                    hval = bytes(buf[pos : pos + hvlen])
                    pos += hvlen
                headers.append((hkey, hval))
            if pos != rec_end:
                raise InvalidBatch(
                    CORRUPT_MESSAGE, f"record at offset delta {off_delta} length mismatch"
                )
            ts = h.max_timestamp if log_append_time else h.base_timestamp + ts_delta
            out.append(Record(h.base_offset + off_delta, ts, key, value, headers, attrs))
    except (VarintError, IndexError, UnicodeDecodeError) as exc:
        raise InvalidBatch(CORRUPT_MESSAGE, f"malformed record in batch: {exc}") from exc
    if pos != end:
        raise InvalidBatch(CORRUPT_MESSAGE, f"{end - pos} trailing bytes after the last record")
    return out

