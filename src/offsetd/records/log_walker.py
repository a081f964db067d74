"""The log walker: every record of a partition's magic-v2 batches, with transaction markers, for
tools and tests that read `__consumer_offsets` (and any other log) record by record.

Pure code over bytes; the broker's start-up loader uses the flat, compiled loop of records/scan.py
instead.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum
from typing import Callable, Generator

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
from offsetd.records.coordinator_serde import RecordDecodeError, read_varint_bits

__all__ = ["ControlMarker", "LogRecord", "iter_log_records"]

_hh_unpack = struct.Struct(">hh").unpack_from

# Magic-v2 batch header (see batch.py): baseOffset q, batchLength i, partitionLeaderEpoch i,
# magic b, crc I, attributes h, lastOffsetDelta i, baseTimestamp q, maxTimestamp q,
# producerId q, producerEpoch h, baseSequence i, recordsCount i -> 61 bytes.
_BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
assert _BATCH_HEADER.size == BATCH_HEADER_SIZE
_batch_header_unpack = _BATCH_HEADER.unpack_from
_COMPRESSION_MASK = 0x07
_CODEC_NAMES = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


class ControlMarker(IntEnum):
    """Transaction end marker (control record type) as yielded by `iter_log_records`."""

    ABORT = 0
    COMMIT = 1


# ---------------------------------------------------------------------------------------------
# Log walking
#
# Record inside a magic-v2 batch (after the 61-byte header; uncompressed or decompressed):
#     length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
#     keyLength varint | key | valueLength varint | value | headerCount varint | headers
# Varints are zig-zag base-128; -1 lengths are null. Control batches (attribute bit 5) hold one
# record whose key is int16 version | int16 type (0 = ABORT, 1 = COMMIT).
# ---------------------------------------------------------------------------------------------

LogRecord = tuple[int, int, "bytes | ControlMarker | None", "bytes | None", int]
"""(offset, timestamp, key, value, producer_id) as yielded by iter_log_records."""


def _zigzag_varint(d: bytes, p: int) -> tuple[int, int]:
    """Zig-zag (signed) varint of at most 10 bytes at p, as records use."""
    result, p = read_varint_bits(d, p, 10)
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
