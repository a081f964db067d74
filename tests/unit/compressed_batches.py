"""Compressed magic-v2 batches for the unit tests, built by kafka-python's record builder (its own
codecs: python-snappy with Xerial framing, lz4, zstandard, gzip), plus raw-snappy and
multi-block Xerial variants assembled here from python-snappy blocks."""

from __future__ import annotations

import struct

import snappy
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kp_batch(codec: int, timestamps: list[int], base_offset: int = 0) -> bytes:
    """A batch of len(timestamps) compressible records compressed with `codec` by kafka-python."""
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 22)
    for i, ts in enumerate(timestamps):
        b.append(i, timestamp=ts, key=None, value=b"value-%d-" % i + b"x" * 40, headers=[])
    raw = bytearray(b.build())
    assert raw[22] & 0x07 == codec, "kafka-python left the batch uncompressed (too small to gain)"
    struct.pack_into(">q", raw, 0, base_offset)
    return bytes(raw)


def recompress(batch: bytes, codec: int, payload: bytes) -> bytes:
    """`batch` with its records section replaced by `payload`, codec bits, length and CRC fixed up."""
    header = bytearray(batch[:61])
    attrs = (struct.unpack_from(">h", header, 21)[0] & ~0x07) | codec
    struct.pack_into(">h", header, 21, attrs)
    struct.pack_into(">i", header, 8, 61 - 12 + len(payload))
    body = bytes(header[21:]) + payload
    struct.pack_into(">I", header, 17, crc32c(body))
    return bytes(header[:21]) + body


def log_append_time(batch: bytes, append_ms: int) -> bytes:
    """`batch` turned into a LogAppendTime batch stamped `append_ms` (as a broker would), CRC fixed."""
    header = bytearray(batch[:61])
    struct.pack_into(">h", header, 21, struct.unpack_from(">h", header, 21)[0] | 0x08)
    struct.pack_into(">q", header, 35, append_ms)
    return recompress(bytes(header) + batch[61:], struct.unpack_from(">h", header, 21)[0] & 0x07, batch[61:])


def snappy_variant(timestamps: list[int], framing: str, block: int = 64) -> bytes:
    """A snappy batch whose payload is one raw block (librdkafka) or Xerial blocks of `block` bytes."""
    plain = kp_batch(0, timestamps)
    records = plain[61:]
    if framing == "raw":
        payload = snappy.compress(records)
    else:
        chunks = [records[i : i + block] for i in range(0, len(records), block)]
        payload = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
            struct.pack(">i", len(c)) + c for c in map(snappy.compress, chunks))
    return recompress(plain, 2, payload)
