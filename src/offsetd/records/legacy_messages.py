"""Message formats v0 and v1 (Kafka's pre-0.11 message sets) and their conversion to and from v2.

Produce v0-2 carry message sets; Kafka 3.9 stores only magic-v2 batches, so it up-converts them
on append, and down-converts stored batches for Fetch v0-3. Both conversions are here, pure (no
I/O), with the codecs of cramjam; only Xerial's snappy framing and lz4's frame-descriptor
checksum (a hash, for magic 0's historical variant) are written out by hand.

A message set is a sequence of entries (big-endian):

    @0  offset      int64   absolute; inside a magic-1 compressed wrapper: relative (0..n-1)
    @8  messageSize int32   bytes after this field
    @12 crc         uint32  CRC-32 (zlib's) of bytes @16 .. end of the message
    @16 magic       int8    0 or 1 (the same byte as a v2 batch's magic: entries tell themselves apart)
    @17 attributes  int8    bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 LogAppendTime (v1)
    @18 timestamp   int64   magic 1 only
        key         int32 length (-1 = null) + bytes
        value       int32 length (-1 = null) + bytes

A compressed message is a wrapper whose key is null and whose value is an inner message set,
compressed; the wrapper's offset is the offset of its last inner message. Inner offsets are
absolute in magic 0 and relative to the first inner message in magic 1.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import cramjam
from crc32c import crc32c

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CORRUPT_MESSAGE,
    CRC_START,
    INVALID_RECORD,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    InvalidBatch,
    Record,
    build_batch,
    decode_records,
    iter_batches,
)
from offsetd.records.compression import XERIAL_MAGIC, decompress

__all__ = [
    "UNSUPPORTED_COMPRESSION_TYPE",
    "LegacyMessage",
    "parse_message_set",
    "flatten",
    "build_message_set",
    "up_convert",
    "down_convert",
    "fit_to_size",
    "batch_records",
    "xxh32",
]

UNSUPPORTED_COMPRESSION_TYPE = 76
"""Kafka's error for zstd with a message format or request version that predates it."""

_ENTRY = struct.Struct(">qiIbb")  # offset, messageSize, crc, magic, attributes
_TIMESTAMP = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_HEAD = struct.Struct(">qi")  # offset, messageSize: the log overhead of every entry
_CODEC_MASK = 0x07
# messageSize of a message with empty key and value: crc, magic, attributes, [timestamp], 2 lengths
_MIN_SIZE = {0: 4 + 1 + 1 + 4 + 4, 1: 4 + 1 + 1 + 8 + 4 + 4}
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # magic, version 1, compatible version 1
_XERIAL_BLOCK = 32 * 1024  # the block size of Xerial's SnappyOutputStream, which Kafka uses


@dataclass(slots=True)
class LegacyMessage:
    """One message of a v0/v1 message set (a wrapper's value is still compressed)."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        """Compression codec of a wrapper (0 for a plain message)."""
        return self.attributes & _CODEC_MASK

    @property
    def log_append_time(self) -> bool:
        """True when a magic-1 message's timestamp is the broker's append time."""
        return self.magic > 0 and bool(self.attributes & TIMESTAMP_TYPE_MASK)


# ------------------------------------------------------------------------------------- xxh32

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of `data` (lz4's frame checksums; here only ever of a frame descriptor's few bytes)."""
    n, pos = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i, lane in enumerate(struct.unpack_from("<4I", data, pos)):
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def _lz4_descriptor_end(frame: bytes) -> int:
    """Position of the header-checksum byte of an lz4 frame: after magic (4), FLG, BD and the
    optional content size (8, FLG bit 3) and dictionary id (4, FLG bit 0)."""
    if len(frame) < 7:
        raise InvalidBatch(CORRUPT_MESSAGE, "lz4: truncated frame header")
    flg = frame[4]
    return 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)


def _lz4_set_checksum(frame: bytes, broken: bool) -> bytes:
    """The frame with its header checksum (HC) recomputed. Kafka's magic-0 lz4 (KAFKA-3160)
    hashed the 4 magic bytes too (`broken`); the frame format hashes the descriptor only."""
    end = _lz4_descriptor_end(frame)
    hc = (xxh32(bytes(frame[0 if broken else 4 : end])) >> 8) & 0xFF
    return bytes(frame[:end]) + bytes((hc,)) + bytes(frame[end + 1 :])


# ------------------------------------------------------------------------------------ codecs


def _snappy_xerial(data: bytes) -> bytes:
    """Snappy in Xerial's framing (what Kafka's Java side writes and every client reads)."""
    out = [_XERIAL_HEADER]
    for pos in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[pos : pos + _XERIAL_BLOCK]))
        out += (_INT32.pack(len(block)), block)
    return b"".join(out)


_COMPRESSORS: dict[int, Callable[[bytes], bytes]] = {
    COMPRESSION_GZIP: lambda d: bytes(cramjam.gzip.compress(d)),
    COMPRESSION_SNAPPY: _snappy_xerial,
    COMPRESSION_LZ4: lambda d: bytes(cramjam.lz4.compress(d)),
    COMPRESSION_ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}


def _compress(codec: int, data: bytes, magic: int) -> bytes:
    """`data` compressed with `codec` as Kafka writes it for that magic (magic 0 lz4: broken HC)."""
    out = _COMPRESSORS[codec](data)
    return _lz4_set_checksum(out, broken=True) if codec == COMPRESSION_LZ4 and magic == 0 else out


def _decompress_legacy(codec: int, data: bytes, magic: int) -> bytes:
    """A wrapper's value decompressed; magic 0 lz4 has its broken header checksum mended first."""
    if codec >= COMPRESSION_ZSTD:  # zstd postdates v0/v1; 5-7 are no codec at all
        raise InvalidBatch(UNSUPPORTED_COMPRESSION_TYPE if codec == COMPRESSION_ZSTD else CORRUPT_MESSAGE,
                           f"compression codec {codec} is not allowed in message format v{magic}")
    if codec == COMPRESSION_LZ4 and magic == 0:
        data = _lz4_set_checksum(data, broken=False)
    return decompress(codec, data)


# ----------------------------------------------------------------------- message set reading


def _read_bytes(buf: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    """An int32-length-prefixed byte string (-1: null) at pos, bounded by end."""
    if pos + 4 > end:
        raise InvalidBatch(CORRUPT_MESSAGE, "message truncated in a key or value length")
    (n,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > end:
        raise InvalidBatch(CORRUPT_MESSAGE, f"message key or value of {n} bytes overruns the message")
    return buf[pos : pos + n], pos + n


def parse_message_set(buf: bytes, *, partial_tail: bool = False) -> list[LegacyMessage]:
    """The messages of a v0/v1 message set, each checked against its CRC-32.

    Raises InvalidBatch(CORRUPT_MESSAGE) for a bad CRC, a magic other than 0/1, or a malformed
    message. A truncated last entry is an error unless `partial_tail` (a fetched set may end in one).
    """
    out: list[LegacyMessage] = []
    pos, n = 0, len(buf)
    while pos < n:
        if n - pos < _ENTRY.size:
            if partial_tail:
                break
            raise InvalidBatch(CORRUPT_MESSAGE, f"truncated message at byte {pos}")
        offset, size, crc, magic, attributes = _ENTRY.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + size
        if magic not in _MIN_SIZE:
            raise InvalidBatch(CORRUPT_MESSAGE, f"message at byte {pos} has magic {magic}; expected 0 or 1")
        if size < _MIN_SIZE[magic]:
            raise InvalidBatch(CORRUPT_MESSAGE, f"message at byte {pos} has size {size}")
        if end > n:
            if partial_tail:
                break
            raise InvalidBatch(CORRUPT_MESSAGE, f"message at byte {pos} declares {size} bytes, {n - pos - 12} left")
        computed = zlib.crc32(buf[pos + 16 : end])
        if computed != crc:
            raise InvalidBatch(CORRUPT_MESSAGE, f"message at offset {offset} failed its CRC check "
                                                f"(stored {crc:#010x}, computed {computed:#010x})")
        p = pos + _ENTRY.size
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _TIMESTAMP.unpack_from(buf, p)
            p += 8
        key, p = _read_bytes(buf, p, end)
        value, p = _read_bytes(buf, p, end)
        if p != end:
            raise InvalidBatch(CORRUPT_MESSAGE, f"message at offset {offset} has {end - p} trailing bytes")
        out.append(LegacyMessage(offset, magic, attributes, timestamp, key, value))
        pos = end
    return out


def flatten(messages: Iterable[LegacyMessage]) -> Iterable[tuple[LegacyMessage, int]]:
    """(message, absolute offset) of every plain message, wrappers opened (inner CRCs checked).
    Inner magic-1 offsets are made absolute from the wrapper's (its last inner message's) offset;
    an inner message takes its wrapper's timestamp under LogAppendTime, as Kafka reads it."""
    for m in messages:
        if m.codec == COMPRESSION_NONE:
            yield m, m.offset
            continue
        if m.value is None:
            raise InvalidBatch(CORRUPT_MESSAGE, f"compressed message at offset {m.offset} has a null value")
        inner = parse_message_set(_decompress_legacy(m.codec, m.value, m.magic))
        if not inner:
            raise InvalidBatch(CORRUPT_MESSAGE, f"compressed message at offset {m.offset} is empty")
        shift = m.offset - inner[-1].offset if m.magic > 0 else 0
        for i in inner:
            if i.magic != m.magic or i.codec != COMPRESSION_NONE:  # Kafka: InvalidRecordException
                raise InvalidBatch(INVALID_RECORD, f"inner message of the wrapper at offset {m.offset} has "
                                                   f"magic {i.magic} / codec {i.codec}")
            if m.log_append_time:
                i.timestamp = m.timestamp
            yield i, i.offset + shift


# ---------------------------------------------------------------------------- up-conversion


def _v2_batch(records: Sequence[tuple[bytes | None, bytes | None, int]], codec: int, base_offset: int = 0,
              attributes: int = 0) -> bytes:
    """One magic-v2 batch of (key, value, timestamp), compressed with `codec` (records section)."""
    plain = build_batch([(k, v, ts, ()) for k, v, ts in records], base_offset=base_offset, attributes=attributes)
    if codec == COMPRESSION_NONE:
        return plain
    body = _compress(codec, plain[BATCH_HEADER_SIZE:], 2)
    header = bytearray(plain[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", header, 8, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body))  # batchLength
    struct.pack_into(">h", header, CRC_START, attributes | codec)
    struct.pack_into(">I", header, 17, crc32c(bytes(header[CRC_START:]) + body))
    return bytes(header) + body


def up_convert(buf: bytes) -> bytes:
    """A Produce v0-2 message set as one magic-v2 batch, as Kafka 3.9 appends it.

    Every message (wrappers opened, CRCs checked) becomes one record with its key, value (null
    kept) and timestamp (magic 0: none, -1); offsets are reassigned 0..n-1 (the log assigns the
    real ones). As Kafka, the batch takes the codec of the compressed messages (the last one, if
    several), recompressed; CreateTime; no producer id. zstd (not defined for v0/v1) is
    UNSUPPORTED_COMPRESSION_TYPE. A set that starts with a magic-2 batch is returned as it is:
    Kafka 3.9 takes v2 batches on Produce v0-2 too (it checks their format only from v3).
    """
    if len(buf) > 16 and buf[16] == 2:
        return buf
    messages = parse_message_set(buf)
    if not messages:
        raise InvalidBatch(CORRUPT_MESSAGE, "message set holds no message")
    codec = COMPRESSION_NONE
    for m in messages:
        codec = m.codec or codec
    records = [(m.key, m.value, m.timestamp if m.magic > 0 else NO_TIMESTAMP) for m, _ in flatten(messages)]
    return _v2_batch(records, codec)


# -------------------------------------------------------------------------- down-conversion


def batch_records(batch: bytes) -> list[Record]:
    """The records of one whole v2 batch of any codec (decompressed when needed)."""
    header = struct.unpack_from(">qi", batch, 0)
    (attributes,) = struct.unpack_from(">h", batch, CRC_START)
    codec = attributes & _CODEC_MASK
    end = LOG_OVERHEAD + header[1]
    if codec == COMPRESSION_NONE:
        return decode_records(batch[:end])
    body = decompress(codec, bytes(batch[BATCH_HEADER_SIZE:end]))
    plain = bytearray(batch[:BATCH_HEADER_SIZE])
    struct.pack_into(">i", plain, 8, BATCH_HEADER_SIZE - LOG_OVERHEAD + len(body))
    struct.pack_into(">h", plain, CRC_START, attributes & ~_CODEC_MASK)
    return decode_records(bytes(plain) + body)


def _message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
             value: bytes | None) -> bytes:
    """One message-set entry with its CRC-32."""
    parts = [struct.pack(">bb", magic, attributes)]
    if magic > 0:
        parts.append(_TIMESTAMP.pack(timestamp))
    for data in (key, value):
        parts.append(_INT32.pack(-1) if data is None else _INT32.pack(len(data)) + data)
    body = b"".join(parts)
    return _HEAD.pack(offset, 4 + len(body)) + struct.pack(">I", zlib.crc32(body)) + body


def build_message_set(records: Sequence[tuple[int, bytes | None, bytes | None, int]], magic: int,
                      codec: int = COMPRESSION_NONE, log_append_time: bool = False) -> bytes:
    """A v0/v1 message set of (offset, key, value, timestamp), as Kafka's builder writes it.

    Uncompressed: one message per record. Compressed: one wrapper (offset of the last record;
    magic 1: timestamp = the largest, inner offsets relative to the first record) around the
    inner set. Magic 0 has no timestamp and no timestamp-type bit; with LogAppendTime (magic 1)
    the bit is set on every message.
    """
    ts_bit = TIMESTAMP_TYPE_MASK if log_append_time and magic > 0 else 0
    if codec == COMPRESSION_NONE:
        return b"".join(_message(o, magic, ts_bit, ts, k, v) for o, k, v, ts in records)
    if codec == COMPRESSION_ZSTD:
        raise InvalidBatch(UNSUPPORTED_COMPRESSION_TYPE, f"zstd batches cannot be sent in message format v{magic}")
    base = records[0][0] if magic > 0 else 0
    inner = b"".join(_message(o - base, magic, ts_bit, ts, k, v) for o, k, v, ts in records)
    max_ts = max(ts for _, _, _, ts in records)
    return _message(records[-1][0], magic, codec | ts_bit, max_ts, None, _compress(codec, inner, magic))


def down_convert(buf: bytes, magic: int, first_offset: int) -> tuple[bytes, int]:
    """Stored v2 batches as a v0/v1 message set for Fetch v0-3, as Kafka 3.9 down-converts them;
    returns it with the size of the first non-empty converted batch (see fit_to_size).

    Control batches are dropped; uncompressed records below `first_offset` are dropped (a
    compressed batch is kept whole: clients skip what they did not ask for); each compressed batch
    becomes one wrapper with the same codec. Keys, null values, offsets and timestamps (v1) are
    kept; headers have no place in v0/v1. A trailing partial batch is ignored. A zstd batch is
    InvalidBatch(UNSUPPORTED_COMPRESSION_TYPE).
    """
    out: list[bytes] = []
    first_size = 0
    for pos, h in iter_batches(buf):
        if h.is_control:
            continue
        records = batch_records(buf[pos : pos + h.size])
        if h.compression == COMPRESSION_NONE:
            records = [r for r in records if r.offset >= first_offset]
        if not records:
            continue
        lat = h.timestamp_type == 1
        converted = build_message_set([(r.offset, r.key, r.value, r.timestamp) for r in records], magic,
                                      h.compression, lat)
        first_size = first_size or len(converted)
        out.append(converted)
    return b"".join(out), first_size


def fit_to_size(converted: bytes, original_size: int, first_size: int) -> bytes:
    """The converted records cut or padded to the size Kafka's lazy down-conversion sends:
    max(original size, first converted batch). What runs over is cut mid-message; what is left
    over is an "overflow" entry (offset -1, a length past the end) cut at the end, which clients
    skip as a partial message (KIP-283)."""
    size = max(original_size, first_size) if converted else 0
    if len(converted) >= size:
        return converted[:size]
    remaining = size - len(converted)
    overflow = _HEAD.pack(-1, max(remaining + 1, BATCH_HEADER_SIZE))
    return converted + (overflow + bytes(max(remaining - len(overflow), 0)))[:remaining]
