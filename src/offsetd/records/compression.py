"""Record-batch payload codecs (via cramjam) and per-record timestamps of a batch of any codec.

The produce and fetch paths never call this module: batches stay opaque there. It serves the
lookups that need to see inside one batch (ListOffsets by timestamp and by max timestamp), which
decompress only the batch they land on, as Kafka does.

Codecs, by the id in bits 0-2 of a batch's attributes:

* 1 gzip: a gzip stream (RFC 1952).
* 2 snappy: either Xerial's framing (Java clients: the 8-byte magic `\\x82SNAPPY\\x00`, a version
  and a compatible-version int32, then blocks each prefixed by its big-endian int32 length) or
  one raw snappy block (librdkafka, and other clients without the Java framing).
* 3 lz4: the LZ4 frame format.
* 4 zstd: a zstd frame.

The codecs themselves are cramjam's; this module only adds Xerial's block framing.
"""

from __future__ import annotations

import struct
from typing import Any, Callable

import cramjam

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CORRUPT_MESSAGE,
    InvalidBatch,
    parse_header,
)
from offsetd.records.varint import VarintError, decode_varint

__all__ = [
    "XERIAL_MAGIC",
    "CODEC_NAMES",
    "decompress",
    "batch_record_timestamps",
]

XERIAL_MAGIC = b"\x82SNAPPY\x00"
"""The first 8 bytes of a Xerial-framed snappy stream (what Java clients write)."""
_XERIAL_HEADER_SIZE = len(XERIAL_MAGIC) + 8  # magic, version int32, compatible version int32
_INT32 = struct.Struct(">i")

CODEC_NAMES = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}


def _snappy(data: bytes) -> bytes:
    """Decompress Xerial-framed snappy (Java clients) or one raw snappy block (librdkafka)."""
    if not data.startswith(XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < _XERIAL_HEADER_SIZE:
        raise InvalidBatch(CORRUPT_MESSAGE, "snappy: truncated Xerial header")
    out: list[bytes] = []
    pos, end = _XERIAL_HEADER_SIZE, len(data)
    while pos < end:
        if pos + 4 > end:
            raise InvalidBatch(CORRUPT_MESSAGE, "snappy: truncated Xerial block length")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > end:
            raise InvalidBatch(CORRUPT_MESSAGE, f"snappy: Xerial block of {n} bytes overruns the data")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)


_DECOMPRESSORS: dict[int, Callable[[bytes], Any]] = {  # each returns a cramjam Buffer (or bytes)
    COMPRESSION_GZIP: cramjam.gzip.decompress,
    COMPRESSION_SNAPPY: _snappy,
    COMPRESSION_LZ4: cramjam.lz4.decompress,
    COMPRESSION_ZSTD: cramjam.zstd.decompress,
}


def decompress(codec: int, data: bytes) -> bytes:
    """The records section of a batch compressed with `codec`, decompressed.

    Raises InvalidBatch(CORRUPT_MESSAGE) for an unknown codec or data the codec rejects.
    """
    if codec == COMPRESSION_NONE:
        return data
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise InvalidBatch(CORRUPT_MESSAGE, f"unknown compression codec {codec}")
    try:
        return bytes(fn(data))
    except InvalidBatch:
        raise
    except Exception as exc:  # cramjam.DecompressionError and its argument errors
        name = CODEC_NAMES.get(codec, str(codec))
        raise InvalidBatch(CORRUPT_MESSAGE, f"{name}: cannot decompress the batch: {exc}") from exc


def _walk_timestamps(
    buf: bytes, pos: int, count: int, base_offset: int, base_ts: int, fixed_ts: int | None
) -> list[tuple[int, int]]:
    """(offset, timestamp) of `count` records laid out in buf from pos, keys and values skipped."""
    end = len(buf)
    out: list[tuple[int, int]] = []
    append = out.append
    try:
        for _ in range(count):
            # record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint;
            # one-byte varints (the common case for all three) are decoded inline
            b = buf[pos]
            length, p = ((b >> 1) ^ -(b & 1), pos + 1) if b < 0x80 else decode_varint(buf, pos)
            rec_end = p + length
            if length <= 0 or rec_end > end:
                raise InvalidBatch(CORRUPT_MESSAGE, f"record length {length} overruns the batch")
            b = buf[p + 1]
            ts_delta, p = ((b >> 1) ^ -(b & 1), p + 2) if b < 0x80 else decode_varint(buf, p + 1)
            b = buf[p]
            off_delta = (b >> 1) ^ -(b & 1) if b < 0x80 else decode_varint(buf, p)[0]
            append((base_offset + off_delta, base_ts + ts_delta if fixed_ts is None else fixed_ts))
            pos = rec_end
    except (VarintError, IndexError) as exc:
        raise InvalidBatch(CORRUPT_MESSAGE, f"malformed record in batch: {exc}") from exc
    return out


def batch_record_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of one whole batch, of any codec, in log order.

    A compressed batch is decompressed (only its records section). With LogAppendTime every
    record has the batch's maxTimestamp. Raises InvalidBatch(CORRUPT_MESSAGE) when malformed.
    """
    h = parse_header(batch, 0)
    if h.records_count < 0:
        raise InvalidBatch(CORRUPT_MESSAGE, f"batch has recordsCount {h.records_count}")
    if len(batch) < h.size:
        raise InvalidBatch(CORRUPT_MESSAGE, f"batch declares {h.size} bytes but only {len(batch)} given")
    payload = bytes(batch[BATCH_HEADER_SIZE : h.size])
    records = decompress(h.compression, payload)
    fixed_ts = h.max_timestamp if h.timestamp_type == 1 else None
    return _walk_timestamps(records, 0, h.records_count, h.base_offset, h.base_timestamp, fixed_ts)
