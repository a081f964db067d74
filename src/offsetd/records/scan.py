"""The offsets log's record scanners: every key and value of a `__consumer_offsets` segment, in order.

They walk millions of records, so each is one flat loop with the varints inlined, and the build
compiles this module with mypyc (setup.py; about 6x faster than the interpreter here). It stays
plain, fully typed Python, so it also runs uncompiled (`OFFSETD_PURE_PYTHON=1` builds).
* `scan_key_values`: the broker's start-up loader (a callback per record, straight into the table;
  transactional and control batches, rare, go whole to a second callback);
* `scan_columns`: the Spark offsets-log source (parallel lists, no Python call per record).
Record layout (reference §4.2): length, attributes, timestampDelta, offsetDelta (varints), key
(zigzag varint length + bytes, -1 = null), value (same), header count + headers.
"""

from __future__ import annotations

from typing import Callable, Optional

from crc32c import crc32c

from offsetd.records.batch import (
    _COMPRESSION_MASK, _HEADER_UNPACK_FROM, BATCH_HEADER_SIZE, CONTROL_MASK, CORRUPT_MESSAGE, CRC_START,
    LOG_OVERHEAD, MIN_BATCH_LENGTH, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK, InvalidBatch,
)
from offsetd.records.varint import decode_varint

OnRecord = Callable[[Optional[bytes], Optional[bytes]], None]
OnBatch = Callable[[memoryview], None]


def scan_key_values(buf: bytes, on_record: OnRecord, on_batch: Optional[OnBatch] = None) -> tuple[int, int]:
    """Call on_record(key, value) for every record of the plain (non-transactional, non-control,
    non-idempotent) uncompressed batches in `buf`, in log order; returns (records seen, bytes
    consumed). Every other batch (transactional, control or with a producer id: the coordinator
    needs its producer id and offsets, KOC §5.1) goes whole, CRC-checked, to on_batch in its
    place in log order, or is skipped when on_batch is None; its records count as seen.

    Each batch's CRC-32C is checked and its records must end exactly at the batch end, else
    InvalidBatch (a corrupt log must stop the load, never feed it wrong offsets). Compressed
    batches raise InvalidBatch too (Kafka writes the offsets topic uncompressed). A torn tail
    (a batch running past the end of `buf`) ends the scan; the caller sees it in bytes consumed.
    """
    n = len(buf)
    view = memoryview(buf)
    pos = 0
    seen = 0
    while n - pos >= BATCH_HEADER_SIZE:
        header = _HEADER_UNPACK_FROM(buf, pos)
        attributes: int = header[5]
        producer_id: int = header[9]
        count: int = header[12]
        end = _checked_end(buf, view, pos, header[1], header[4])
        if end < 0:
            break
        if count < 0:
            raise InvalidBatch(CORRUPT_MESSAGE, f"batch at byte {pos} has a negative record count {count}")
        if attributes & (CONTROL_MASK | TRANSACTIONAL_MASK) or producer_id >= 0:
            if on_batch is not None:
                on_batch(view[pos:end])
                seen += count
            pos = end
            continue
        if attributes & _COMPRESSION_MASK:
            raise InvalidBatch(CORRUPT_MESSAGE, f"compressed batch at byte {pos}: not expected in this log")
        p = pos + BATCH_HEADER_SIZE
        try:
            for _ in range(count):
                _, _, key_at, key_size, value_at, value_size, p = _record(buf, p)
                on_record(buf[key_at : key_at + key_size] if key_size >= 0 else None,
                          buf[value_at : value_at + value_size] if value_size >= 0 else None)
        except (IndexError, ValueError) as exc:  # ValueError: a varint too long, or beyond int64
            raise InvalidBatch(CORRUPT_MESSAGE, f"records of the batch at byte {pos} are malformed "
                               f"({type(exc).__name__}: they run past its end or hold an impossible length)") from None
        _check_filled(pos, p, end)
        seen += count
        pos = end
    return seen, pos


def scan_columns(buf: bytes, pos: int, max_records: int, key_ids: dict[bytes, int], ids: list[int],
                 values: list[Optional[bytes]], runs: list[int]) -> int:
    """Scan the plain uncompressed batches of `buf` from byte `pos` into parallel columns, whole
    batches at a time, until at least `max_records` records were added, a control, transactional
    or compressed batch starts (the caller decodes that one), or the end (a torn tail ends the
    scan as in scan_key_values). Returns the byte position reached.

    Per record with a key: ids gets the key's number in `key_ids` (raw key bytes -> number,
    new keys numbered in order of first appearance) and values its value (None = tombstone).
    Records with a null key are skipped, as a coordinator skips them. Log offsets and record
    timestamps come out run-length encoded in `runs` as flat triples (first offset, records,
    timestamp): consecutive offsets with one timestamp are one run. A coordinator writes every
    batch as one such run (all timestamp deltas 0, offset delta = index), so there are few.
    CRC-32C and exact framing are checked as in scan_key_values; a batch of another magic
    than 2 is InvalidBatch."""
    n = len(buf)
    view = memoryview(buf)
    added = 0
    run_offset = -1
    run_count = 0
    run_stamp = 0
    while n - pos >= BATCH_HEADER_SIZE and added < max_records:
        header = _HEADER_UNPACK_FROM(buf, pos)
        base_offset: int = header[0]
        magic: int = header[3]
        attributes: int = header[5]
        base_stamp: int = header[7]
        max_stamp: int = header[8]
        count: int = header[12]
        end = _checked_end(buf, view, pos, header[1], header[4])
        if end < 0:
            break
        if magic != 2:
            raise InvalidBatch(CORRUPT_MESSAGE, f"batch at byte {pos} has magic {magic}, not 2")
        if attributes & (CONTROL_MASK | TRANSACTIONAL_MASK | _COMPRESSION_MASK):
            break
        if count < 0:
            raise InvalidBatch(CORRUPT_MESSAGE, f"batch at byte {pos} has a negative record count {count}")
        log_append_time = attributes & TIMESTAMP_TYPE_MASK != 0
        p = pos + BATCH_HEADER_SIZE
        try:
            for _ in range(count):
                stamp_delta, offset_delta, key_at, key_size, value_at, value_size, p = _record(buf, p)
                if key_size < 0:
                    continue
                key = buf[key_at : key_at + key_size]
                kid = key_ids.get(key, -1)
                if kid < 0:
                    kid = len(key_ids)
                    key_ids[key] = kid
                ids.append(kid)
                values.append(buf[value_at : value_at + value_size] if value_size >= 0 else None)
                offset = base_offset + offset_delta
                stamp = max_stamp if log_append_time else base_stamp + stamp_delta
                if offset == run_offset + run_count and stamp == run_stamp:
                    run_count += 1
                else:
                    if run_count:
                        runs.extend((run_offset, run_count, run_stamp))
                    run_offset, run_count, run_stamp = offset, 1, stamp
                added += 1
        except (IndexError, ValueError) as exc:  # ValueError: a varint too long, or beyond int64
            raise InvalidBatch(CORRUPT_MESSAGE, f"records of the batch at byte {pos} are malformed "
                               f"({type(exc).__name__}: they run past its end or hold an impossible length)") from None
        _check_filled(pos, p, end)
        pos = end
    if run_count:
        runs.extend((run_offset, run_count, run_stamp))
    return pos


def _checked_end(buf: bytes, view: memoryview, pos: int, batch_length: int, crc: int) -> int:
    """The end of the batch at pos, or -1 when it is torn (too short, or runs past the buffer);
    InvalidBatch when its CRC-32C (over attributes .. end) does not match."""
    end = pos + LOG_OVERHEAD + batch_length
    if batch_length < MIN_BATCH_LENGTH or end > len(buf):
        return -1
    if crc32c(view[pos + CRC_START : end]) != crc:
        raise InvalidBatch(CORRUPT_MESSAGE, f"record batch at byte {pos} failed its CRC-32C check")
    return end


def _check_filled(pos: int, p: int, end: int) -> None:
    """The records of the batch at pos must end exactly at its end."""
    if p != end:
        raise InvalidBatch(CORRUPT_MESSAGE, f"records of the batch at byte {pos} do not fill it exactly")


def _record(buf: bytes, p: int) -> tuple[int, int, int, int, int, int, int]:
    """One record at p: (timestampDelta, offsetDelta, key start, key size, value start, value
    size, position after it); a size of -1 is null. IndexError when it runs past buf."""
    while buf[p] & 0x80:  # record length: not needed
        p += 1
    p += 2  # its last byte, then attributes
    stamp_delta, p = _zigzag(buf, p)
    offset_delta, p = _zigzag(buf, p)
    key_size, p = _zigzag(buf, p)
    key_at = p
    p += max(key_size, 0)
    value_size, p = _zigzag(buf, p)
    value_at = p
    p += max(value_size, 0)
    if buf[p]:  # headers: rare in this log; skip them properly
        p = _skip_headers(buf, p)
    else:
        p += 1
    if p > len(buf):
        raise IndexError(p)
    return stamp_delta, offset_delta, key_at, key_size, value_at, value_size, p


def _zigzag(buf: bytes, p: int) -> tuple[int, int]:
    """The zigzag varint at p (a delta, or a key or value length: -1 = null) and the position after it."""
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
