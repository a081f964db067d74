"""The start-up loader's scanner: every key and value of a `__consumer_offsets` segment, in order.

It walks millions of records per shard, so it is one flat loop with the varints inlined, and the
build compiles this module with mypyc (setup.py; about 6x faster than the interpreter here). It
stays plain, fully typed Python, so it also runs uncompiled (`OFFSETD_PURE_PYTHON=1` builds).
"""

from __future__ import annotations

from typing import Callable, Optional

from crc32c import crc32c

from offsetd.records.batch import (
    _COMPRESSION_MASK, _HEADER_UNPACK_FROM, BATCH_HEADER_SIZE, CONTROL_MASK, CORRUPT_MESSAGE, CRC_START,
    LOG_OVERHEAD, MIN_BATCH_LENGTH, TRANSACTIONAL_MASK, InvalidBatch,
)
from offsetd.records.varint import decode_varint

OnRecord = Callable[[Optional[bytes], Optional[bytes]], None]


def scan_key_values(buf: bytes, on_record: OnRecord) -> tuple[int, int]:
    """Call on_record(key, value) for every record of the plain (non-transactional, non-control)
    uncompressed batches in `buf`, in log order; returns (records seen, bytes consumed).

    Each batch's CRC-32C is checked and its records must end exactly at the batch end, else
    InvalidBatch (a corrupt log must stop the load, never feed it wrong offsets). Compressed
    batches raise InvalidBatch too (Kafka writes the offsets topic uncompressed). A torn tail
    (a batch running past the end of `buf`) ends the scan; the caller sees it in bytes consumed.
    Record layout: length, attributes, timestampDelta, offsetDelta (varints), key (zigzag varint
    length + bytes, -1 = null), value (same), header count + headers.
    """
    n = len(buf)
    view = memoryview(buf)
    pos = 0
    seen = 0
    while n - pos >= BATCH_HEADER_SIZE:
        header = _HEADER_UNPACK_FROM(buf, pos)
        batch_length: int = header[1]
        crc: int = header[4]
        attributes: int = header[5]
        producer_id: int = header[9]
        count: int = header[12]
        end = pos + LOG_OVERHEAD + batch_length
        if batch_length < MIN_BATCH_LENGTH or end > n:
            break
        if crc32c(view[pos + CRC_START : end]) != crc:
            raise InvalidBatch(CORRUPT_MESSAGE, f"record batch at byte {pos} failed its CRC-32C check")
        if attributes & (CONTROL_MASK | TRANSACTIONAL_MASK) or producer_id >= 0:
            pos = end
            continue
        if attributes & _COMPRESSION_MASK:
            raise InvalidBatch(CORRUPT_MESSAGE, f"compressed batch at byte {pos}: not expected in this log")
        p = pos + BATCH_HEADER_SIZE
        try:
            for _ in range(count):
                while buf[p] & 0x80:  # record length: not needed
                    p += 1
                p += 2  # its last byte, then attributes
                while buf[p] & 0x80:  # timestampDelta
                    p += 1
                p += 1
                while buf[p] & 0x80:  # offsetDelta
                    p += 1
                p += 1
                size, p = _zigzag(buf, p)  # key length
                key: Optional[bytes] = None
                if size >= 0:
                    key = buf[p : p + size]
                    p += size
                size, p = _zigzag(buf, p)  # value length
                value: Optional[bytes] = None
                if size >= 0:
                    value = buf[p : p + size]
                    p += size
                if buf[p]:  # headers: rare in this log; skip them properly
                    p = _skip_headers(buf, p)
                else:
                    p += 1
                on_record(key, value)
        except IndexError:
            raise InvalidBatch(CORRUPT_MESSAGE, f"records of the batch at byte {pos} run past its end") from None
        if p != end:
            raise InvalidBatch(CORRUPT_MESSAGE, f"records of the batch at byte {pos} do not fill it exactly")
        seen += count
        pos = end
    return seen, pos


def _zigzag(buf: bytes, p: int) -> tuple[int, int]:
    """A zigzag varint at p (a key or value length, -1 = null) and the position after it."""
    b = buf[p]
    p += 1
    if b & 0x80:
        size = b & 0x7F
        shift = 7
        while True:
            b = buf[p]
            p += 1
            size |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
    else:
        size = b
    return (size >> 1) ^ -(size & 1), p


def _skip_headers(buf: bytes, p: int) -> int:
    """The position after a record's headers (count, then key and value of each)."""
    count, p = decode_varint(buf, p)
    for _ in range(count):
        for _ in range(2):  # header key, header value
            size, p = decode_varint(buf, p)
            p += max(size, 0)
    return p
