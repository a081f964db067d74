"""One cleaning's work on bytes: Kafka's two passes, map then copy, over the source segments of a
CleaningJob, writing `*.cleaned` segments. storage/cleaner.py decides what to clean, runs this in
prepare() (any thread or process) and swaps the result into the log.

How (Kafka's two passes)
------------------------
1. Map: the dirty part of the range is scanned once (every batch CRC-checked) to build
   key -> offset of its latest record (a dict of key bytes, roughly 100-150 bytes per distinct
   key; `max_map_keys` is a soft bound: when the map grows past it, the range ends after the
   segment being mapped and the rest waits for the next cleaning). The same pass notes null-key
   and tombstone offsets, so the surviving offsets of the dirty part are known afterwards.
2. Copy: every batch of the whole range (clean part too: its records may be superseded by dirty
   ones) is re-read. A dirty batch holding no surviving offset is skipped on its header alone,
   one whose records all survive (no tombstone among them) is copied without decoding; other
   batches, and all of the clean part (CRC-checked here), are decoded and each record is kept
   when
   - its key is null (compacted topics should not have any; Kafka rejects them at produce time,
     offsetd keeps them as they are), or
   - no later record with its key exists in the map, unless it is a tombstone (null value) whose
     timestamp is more than `delete.retention.ms` before now.
   Tombstone age: the record's timestamp (the batch's max timestamp for LogAppendTime, the
   source segment's largest timestamp if it has none). This is a wall-clock rule like KIP-534's,
   except that Kafka counts from the first cleaning that saw the tombstone (kept in the batch
   header), not from its timestamp; for `__consumer_offsets` the broker sets the timestamps.
   A client giving a tombstone an old CreateTime shortens its life accordingly.
   A tombstone is never dropped while an older record of its key could survive: the records of
   batches kept whole (see below) "pin" their keys, and an undecodable batch pins every key.

Output batches
--------------
Surviving records keep their offsets and timestamps.
* Plain batches (uncompressed, CreateTime, no producer id, not transactional, attributes 0, the
  whole `__consumer_offsets` case): survivors of consecutive batches are regrouped into new
  uncompressed v2 batches of up to `max_batch_bytes` (64 KiB; also bounded by max.message.bytes
  and segment.bytes) with the base offset of their first record, explicit offset deltas (so
  `lastOffsetDelta + 1` may exceed the record count, as in any compacted Kafka log) and a fresh
  CRC-32C. Record bytes from the key on are copied; only the record's length, timestamp delta
  and offset delta varints are re-encoded. A batch whose records all survive
  is copied byte for byte when it has >= 8 records or >= 2 KiB (regrouping would save little).
  A new batch also starts where the partition leader epoch changes.
* Other uncompressed batches (idempotent producer, LogAppendTime): filtered one by one like
  Kafka's cleaner: same base offset, lastOffsetDelta, base timestamp, producer id / epoch /
  base sequence and attributes, only the surviving records (copied byte for byte), the record
  count, max timestamp (CreateTime) and CRC are new; a batch left empty is dropped.
* Compressed batches (any codec, decompressed by records/compression.py) take part in the map
  and are never rewritten: kept whole when any record in them survives, dropped otherwise. One
  that cannot be decompressed (a client could not read it either) is kept whole, and its keys
  being unknown, it pins every key (see above).
* Transactions (reference A9): the cleanable range also ends at the segment holding the last
  stable offset, so every transaction in it is over. Batches of aborted transactions (the
  `.txnindex` entries, passed in the job as producer id -> [(first, last offset)]) are dropped
  whole and never enter the map. Uncompressed batches of committed transactions are compacted
  like idempotent-producer batches (filtered, header kept); compressed ones are kept whole.
  Control batches (markers) are always kept.

Output segments
---------------
One cleaning rewrites the range into as few segments as `segment.bytes` allows: surviving
batches are streamed in order into the current output segment, and a new output segment starts
(based at the offset of the batch that starts it, which need not be a source segment's base)
when the next batch would overflow `segment.bytes` or the index's int32 relative offsets. The
first output keeps the log start offset as its base, even when it ends up empty (the log start
offset never moves); offsets of dropped records become gaps that reads skip. Indexes are rebuilt
with `index.interval.bytes`, and each new .log file gets the newest mtime of its sources (the
time-based retention fallback). Files are written as `<base>.log.cleaned` (+ `.index.cleaned`,
`.timeindex.cleaned`) and fsynced, then `PartitionLog.replace_segments` swaps them in
crash-safely (storage/segment_swap.py).
"""

from __future__ import annotations

import logging
import os
import struct
import time
from bisect import bisect_left, bisect_right
from itertools import chain
from pathlib import Path

from crc32c import crc32c

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CRC_START,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    InvalidBatch,
)
from offsetd.records.compression import decompress
from offsetd.records.varint import VarintError, decode_varint, encode_varint
from offsetd.storage.cleaning_job import CleanerError, CleanerStats, CleaningJob, SourceSegment
from offsetd.storage.index import OffsetIndex, TimeIndex
from offsetd.storage.log_config import LogConfig
from offsetd.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, segment_file_name
from offsetd.storage.segment_swap import CLEANED_SUFFIX

log = logging.getLogger("offsetd.storage.cleaner")  # one logger for the cleaner and its passes

_INT32_MAX = 2**31 - 1
_COMPRESSION_MASK = 0x07
_SPECIAL = _COMPRESSION_MASK | TRANSACTIONAL_MASK | CONTROL_MASK
# A plain batch whose records all survive is copied as it is when it is at least this large or
# has at least this many records (regrouping saves at most one 61-byte header per batch).
_VERBATIM_MIN_BYTES = 2048
_VERBATIM_MIN_RECORDS = 8
_WRITE_BUFFER = 4 << 20

_HEADER_UNPACK_FROM = struct.Struct(">qiibIhiqqqhii").unpack_from
_LENGTH_UNPACK_FROM = struct.Struct(">i").unpack_from
# baseOffset, batchLength, magic, crc, attributes, recordsCount: what pass 1 needs of a header
_MAP_HEADER_UNPACK_FROM = struct.Struct(">qi4xbIh34xi").unpack_from
_TIMESTAMPS_UNPACK_FROM = struct.Struct(">qq").unpack_from  # baseTimestamp @27, maxTimestamp @35
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# recordsCount: what pass 2 needs first; then baseTimestamp, maxTimestamp, producerId @27
_COPY_HEADER_UNPACK_FROM = struct.Struct(">qiibIhi30xi").unpack_from
_TS_PID_UNPACK_FROM = struct.Struct(">qqq").unpack_from
_PID_UNPACK_FROM = struct.Struct(">q").unpack_from  # producerId @43
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc (the part the CRC does not cover)
_PREFIX = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount (the header part covered by the CRC)
_CRC_PART = struct.Struct(">hiqqqhii")
assert _PREFIX.size + _CRC_PART.size == BATCH_HEADER_SIZE

_V = tuple(encode_varint(i) for i in range(16384))  # zig-zag varints of small non-negative ints


def _cleaned_name(base: int, suffix: str) -> str:
    return segment_file_name(base, suffix) + CLEANED_SUFFIX



# ---------------------------------------------------------------------------------------------
# Record decoding (slow paths: compressed and transactional batches)
# ---------------------------------------------------------------------------------------------


_zz = decode_varint  # the general case; the hot loops inline one- and two-byte varints


def _parse_records(
    d: bytes, p: int, end: int, count: int, base_ts: int, max_ts: int, log_append_time: bool
) -> list[tuple[int, int, bytes | None, bool]]:
    """(offset delta, timestamp, key, is tombstone) of each record in d[p:end]."""
    out = []
    for _ in range(count):
        length, p = decode_varint(d, p)
        rec_end = p + length
        ts_delta, p = decode_varint(d, p + 1)
        off_delta, p = decode_varint(d, p)
        klen, p = decode_varint(d, p)
        key = None
        if klen >= 0:
            key = d[p : p + klen]
            p += klen
        vlen, p = decode_varint(d, p)
        if length <= 0 or rec_end > end or p > rec_end or p + max(vlen, 0) > rec_end:
            raise CleanerError(f"malformed record (offset delta {off_delta})")
        out.append((off_delta, max_ts if log_append_time else base_ts + ts_delta, key, vlen < 0))
        p = rec_end
    if p != end:
        raise CleanerError(f"{end - p} bytes after the last record of a batch")
    return out


# ---------------------------------------------------------------------------------------------
# Output segment writer
# ---------------------------------------------------------------------------------------------


class _Output:
    """One cleaned segment being written: `<base>.log.cleaned` plus its two indexes."""

    def __init__(self, pdir: Path, base: int, config: LogConfig) -> None:
        self.pdir = pdir
        self.base = base
        self.log_path = pdir / _cleaned_name(base, LOG_SUFFIX)
        self.fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.offset_index = OffsetIndex(pdir / _cleaned_name(base, INDEX_SUFFIX), base)
        self.time_index = TimeIndex(pdir / _cleaned_name(base, TIMEINDEX_SUFFIX), base)
        self.interval = config.index_interval_bytes
        self.size = 0
        self.parts: list[bytes | memoryview] = []
        self.buffered = 0
        self.bytes_since_index = 0
        self.max_ts = -1
        self.offset_of_max_ts = -1
        self.mtime_ns = 0
        self.batches = 0

    def add(self, parts: tuple, size: int, last_offset: int, max_ts: int) -> None:
        """Append one batch given as byte parts; index it as Segment._track does."""
        if max_ts > self.max_ts:
            self.max_ts = max_ts
            self.offset_of_max_ts = last_offset
        if self.bytes_since_index > self.interval:
            self.offset_index.append(last_offset, self.size, write=False)
            if self.max_ts >= 0:
                self.time_index.maybe_append(self.max_ts, self.offset_of_max_ts, write=False)
            self.bytes_since_index = 0
        self.bytes_since_index += size
        self.parts.extend(parts)
        self.size += size
        self.buffered += size
        self.batches += 1
        if self.buffered >= _WRITE_BUFFER:
            self._drain()

    def _drain(self) -> None:
        if not self.parts:
            return
        view = memoryview(b"".join(self.parts))
        while view:
            view = view[os.write(self.fd, view) :]
        self.parts = []
        self.buffered = 0

    def finish(self) -> None:
        """Write the rest, fsync the log and both indexes, give the log its sources' mtime."""
        self._drain()
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        if self.max_ts >= 0:
            self.time_index.maybe_append(self.max_ts, self.offset_of_max_ts, write=False)
        for idx in (self.offset_index, self.time_index):
            idx.rewrite(fsync=True)
            idx.close()
        if self.mtime_ns:
            os.utime(self.log_path, ns=(self.mtime_ns, self.mtime_ns))

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.offset_index.delete_file()
        self.time_index.delete_file()
        self.log_path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# One cleaning (runs in prepare())
# ---------------------------------------------------------------------------------------------


class Compaction:
    """The state of one prepare(): pass 1 (build_map) then pass 2 (copy) over the job's sources.

    Touches only the job's source files (read) and its own `*.cleaned` files (written)."""

    def __init__(self, job: CleaningJob, max_map_keys: int, chunk_bytes: int, max_batch_bytes: int) -> None:
        self.job = job
        self.pdir = Path(job.dir)
        self.config = job.config
        self.now = job.now_ms
        self.dr = job.config.delete_retention_ms
        self.max_map_keys = max_map_keys
        self.chunk_bytes = chunk_bytes
        self.target_batch = max(1024, min(max_batch_bytes, job.config.max_message_bytes))
        self.segment_limit = min(job.config.segment_bytes, _INT32_MAX)
        self.map: dict[bytes, int] = {}
        self.null_key_offsets: list[int] = []
        self.tomb_offsets: list[int] = []
        self.mapped_from = len(job.sources)  # index of the first source pass 1 read
        self.survivors: list[int] = []  # sorted surviving offsets of the mapped sources
        self.tomb_survivors: list[int] = []  # the tombstones among them
        self.mapped = False  # the source being copied was mapped (pass 1 read and checked it)
        self.si = 0  # cursors into survivors / tomb_survivors
        self.ti = 0
        self.pinned: set[bytes] = set()
        self.unknown_opaque = False
        self.deadline = -1
        self.stats = CleanerStats()
        self.src: SourceSegment | None = None
        self.seg_ts = -1
        self.outputs: list[_Output] = []
        self.out: _Output | None = None
        self.new_bases: list[int] = []
        # the pending merged batch
        self.p_parts: list[bytes] = []
        self.p_size = 0
        self.p_count = 0
        self.p_base_off = 0
        self.p_base_ts = 0
        self.p_max_ts = -1
        self.p_last_off = 0
        self.p_epoch = -1
        self.aborted = job.aborted
        self.aborted_firsts = {pid: [r[0] for r in ranges] for pid, ranges in job.aborted.items()}
        self.aborted_dropped = 0

    def _is_aborted(self, pid: int, offset: int) -> bool:
        """True when `offset` of producer `pid` lies in one of its aborted transactions."""
        firsts = self.aborted_firsts.get(pid)
        if not firsts:
            return False
        i = bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= self.aborted[pid][i][1]

    def _committed_plain(self, buf: bytes, pos: int, base: int, attrs: int) -> bool:
        """An uncompressed batch of a committed transaction: compacted like any batch (every
        transaction of the cleanable range is over, so not aborted means committed)."""
        return (attrs & (_COMPRESSION_MASK | CONTROL_MASK)) == 0 and not self._is_aborted(
            _PID_UNPACK_FROM(buf, pos + 43)[0], base)

    # ------------------------------------------------------------------ reading

    def _scan(self, src: SourceSegment, fn) -> None:
        """Feed the batches of a source segment to fn(buf) -> bytes consumed, in chunks."""
        try:
            fd = os.open(src.path, os.O_RDONLY)
        except FileNotFoundError as exc:
            raise CleanerError(f"{src.path} disappeared (deleted by retention?)") from exc
        try:
            pos = 0
            size = src.size
            while pos < size:
                want = min(self.chunk_bytes, size - pos)
                buf = os.pread(fd, want, pos)
                if len(buf) < want:
                    raise CleanerError(f"{src.path}: short read at byte {pos}")
                used = self._call(fn, buf, src, pos)
                if used == 0:  # a batch larger than the chunk, or garbage
                    if len(buf) < LOG_OVERHEAD:
                        raise CleanerError(f"{src.path}: {len(buf)} stray bytes at byte {pos}")
                    length = _LENGTH_UNPACK_FROM(buf, 8)[0]
                    if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size:
                        raise CleanerError(f"{src.path}: invalid batch length {length} at byte {pos}")
                    buf = os.pread(fd, LOG_OVERHEAD + length, pos)
                    used = self._call(fn, buf, src, pos)
                    if used == 0:
                        raise CleanerError(f"{src.path}: unreadable batch at byte {pos}")
                pos += used
        finally:
            os.close(fd)

    @staticmethod
    def _call(fn, buf: bytes, src: SourceSegment, pos: int) -> int:
        try:
            return fn(buf)
        except CleanerError as exc:
            raise CleanerError(f"{src.path} near byte {pos}: {exc}") from None
        except (IndexError, struct.error, VarintError, ValueError) as exc:
            raise CleanerError(f"{src.path}: malformed batch near byte {pos}: {exc!r}") from exc

    def _decode(self, buf: bytes, pos: int, end: int, attrs: int, count: int, bts: int, mts: int):
        """Records of a batch as (offset delta, ts, key, tombstone), None when undecodable."""
        codec = attrs & _COMPRESSION_MASK
        lat = bool(attrs & TIMESTAMP_TYPE_MASK)
        if codec == 0:
            return _parse_records(buf, pos + BATCH_HEADER_SIZE, end, count, bts, mts, lat)
        try:
            d = decompress(codec, buf[pos + BATCH_HEADER_SIZE : end])
        except InvalidBatch:
            return None  # a client could not read it either; keep it as it is
        return _parse_records(d, 0, len(d), count, bts, mts, lat)

    # ------------------------------------------------------------------ pass 1: the map

    def build_map(self) -> int:
        """Map the dirty sources; return how many sources this cleaning covers.

        Besides key -> latest offset, pass 1 notes the offsets of null-key records (always
        kept) and of tombstones, so pass 2 knows the surviving offsets of the mapped sources
        (`self.survivors`, sorted) and which of them are tombstones: it skips batches without
        survivors on their header alone and copies batches whose records all survive as they are.
        Pass 1 also checks every mapped batch's CRC (a corrupt batch must not feed the map).
        """
        started = time.perf_counter()
        sources = self.job.sources
        first_dirty = self.job.first_dirty_offset
        covered = len(sources)
        for i, src in enumerate(sources):
            if src.next_offset <= first_dirty:
                continue
            self.mapped_from = min(self.mapped_from, i)
            self._scan(src, self._map_chunk)
            if len(self.map) > self.max_map_keys and i + 1 < len(sources):
                covered = i + 1
                log.info(
                    "%s: offset map full (%d keys) after segment %d; cleaning up to offset %d",
                    self.pdir.name, len(self.map), src.base_offset, src.next_offset,
                )
                break
        latest = self.map.values()
        latest_set = set(latest)
        self.survivors = sorted(chain(latest, self.null_key_offsets))
        self.tomb_survivors = sorted(o for o in self.tomb_offsets if o in latest_set)
        self.null_key_offsets = self.tomb_offsets = []
        self.stats.map_keys = len(self.map)
        self.stats.map_seconds = time.perf_counter() - started
        return covered

    def _map_chunk(self, buf: bytes) -> int:
        m = self.map
        nulls = self.null_key_offsets
        tombs = self.tomb_offsets
        n = len(buf)
        view = memoryview(buf)
        pos = 0
        unpack = _MAP_HEADER_UNPACK_FROM
        zz = _zz
        while n - pos >= BATCH_HEADER_SIZE:
            base, blen, magic, crc, attrs, count = unpack(buf, pos)
            end = pos + LOG_OVERHEAD + blen
            if blen < MIN_BATCH_LENGTH:
                raise CleanerError(f"invalid batch length {blen}")
            if end > n:
                break
            if magic != 2:
                raise CleanerError(f"batch with magic {magic}")
            if crc32c(view[pos + CRC_START : end]) != crc:
                raise CleanerError(f"batch at offset {base} failed its CRC-32C check")
            if attrs & _SPECIAL and not (attrs & TRANSACTIONAL_MASK and self._committed_plain(buf, pos, base, attrs)):
                if not attrs & (TRANSACTIONAL_MASK | CONTROL_MASK):
                    bts, mts = _TIMESTAMPS_UNPACK_FROM(buf, pos + 27)
                    recs = self._decode(buf, pos, end, attrs, count, bts, mts)
                    for od, _ts, key, _t in recs or ():
                        if key is not None:
                            m[key] = base + od
                pos = end
                continue
            # Lengths and offset deltas are never negative: a one-byte zig-zag varint b is b >> 1
            # (garbage is caught by the "records fill the batch" check).
            p = pos + BATCH_HEADER_SIZE
            for _ in range(count):
                b = buf[p]  # record length
                if b < 0x80:
                    rec_end = p + 1 + (b >> 1)
                    p += 2  # the length byte, attributes
                else:
                    c = buf[p + 1]
                    if c < 0x80:
                        rec_end = p + 2 + (((b & 0x7F) | (c << 7)) >> 1)
                        p += 3
                    else:
                        length, p = zz(buf, p)
                        rec_end = p + length
                        p += 1
                while buf[p] & 0x80:  # timestampDelta
                    p += 1
                b = buf[p + 1]  # offsetDelta
                if b < 0x80:
                    off = base + (b >> 1)
                    p += 2
                else:
                    od, p = zz(buf, p + 1)
                    off = base + od
                b = buf[p]  # key length
                if not b & 0x81:  # one byte, even: 0..63
                    p += 1
                    e = p + (b >> 1)
                    m[buf[p:e]] = off
                    if buf[e] == 1:  # value length -1: a tombstone
                        tombs.append(off)
                elif b == 1:  # zig-zag -1: a null key
                    nulls.append(off)
                else:
                    klen, p = zz(buf, p)
                    if klen < 0:
                        if klen != -1:
                            raise CleanerError(f"key length {klen}")
                        nulls.append(off)
                    else:
                        e = p + klen
                        m[buf[p:e]] = off
                        if buf[e] == 1:
                            tombs.append(off)
                p = rec_end
            if p != end:
                raise CleanerError(f"records of the batch at offset {base} do not fill it exactly")
            pos = end
        return pos

    # ------------------------------------------------------------------ pass 2: the copy

    def copy(self, covered: int) -> None:
        started = time.perf_counter()
        try:
            for i, src in enumerate(self.job.sources[:covered]):
                self.mapped = i >= self.mapped_from
                self._begin_source(src)
                self._scan(src, self._copy_chunk)
                self.stats.source_segments += 1
                self.stats.source_bytes += src.size
            self._finish_output()
        except BaseException:
            self.discard()
            raise
        self.stats.copy_seconds = time.perf_counter() - started

    def _begin_source(self, src: SourceSegment) -> None:
        self.src = src
        self.seg_ts = src.largest_timestamp
        if self.out is None and not self.outputs:
            # The first output keeps the log start offset as its base, even if it stays empty.
            self._open_output(src.base_offset)
        if self.out is not None:
            self.out.mtime_ns = max(self.out.mtime_ns, src.mtime_ns)

    def _open_output(self, base: int) -> None:
        out = self.out = _Output(self.pdir, base, self.config)
        out.mtime_ns = self.src.mtime_ns
        self.outputs.append(out)

    def _add(self, parts: tuple, size: int, base_offset: int, last_offset: int, max_ts: int) -> None:
        """Append a batch to the current output, first starting a new output segment (based at
        this batch) when the batch would overflow segment.bytes or the int32 relative offsets."""
        out = self.out
        if (out.size > 0 and out.size + size > self.segment_limit) or last_offset - out.base > _INT32_MAX:
            self._close_output()
            self._open_output(base_offset)
            out = self.out
        out.add(parts, size, last_offset, max_ts)

    def _finish_output(self) -> None:
        self._flush_pending()
        self._close_output()

    def _close_output(self) -> None:
        out = self.out
        if out is None:
            return
        self.out = None
        out.finish()
        self.new_bases.append(out.base)
        self.stats.output_segments += 1
        self.stats.output_bytes += out.size
        self.stats.batches_written += out.batches

    def discard(self) -> None:
        for out in self.outputs:
            out.discard()
        self.outputs = []
        self.out = None

    def _write(self, parts: tuple, size: int, base_offset: int, last_offset: int, max_ts: int) -> None:
        if self.p_count:
            self._flush_pending()
        self._add(parts, size, base_offset, last_offset, max_ts)

    def _flush_pending(self) -> None:
        if not self.p_count:
            return
        body = b"".join(self.p_parts)
        crc_part = _CRC_PART.pack(
            0, self.p_last_off - self.p_base_off, self.p_base_ts, self.p_max_ts, -1, -1, -1, self.p_count
        )
        crc = crc32c(body, crc32c(crc_part))
        prefix = _PREFIX.pack(self.p_base_off, MIN_BATCH_LENGTH + len(body), self.p_epoch, 2, crc)
        self._add((prefix, crc_part, body), BATCH_HEADER_SIZE + len(body), self.p_base_off, self.p_last_off,
                  self.p_max_ts)
        self.p_parts = []
        self.p_size = 0
        self.p_count = 0
        self.p_max_ts = -1

    def _merge(self, buf: bytes, kept: list, epoch: int) -> None:
        """Add surviving records of a plain batch to the pending merged batch."""
        V = _V
        enc = encode_varint
        target = self.target_batch
        limit = self.segment_limit
        for rs, ap, tp, rec_end, off, ts in kept:
            # the batch with this record (whose varints may grow by up to 16 bytes)
            grown = BATCH_HEADER_SIZE + self.p_size + (rec_end - rs) + 16
            if self.p_count and (
                epoch != self.p_epoch or grown > target or self.out.size + grown > limit
            ):
                self._flush_pending()  # (a batch that would overflow the segment starts the next one)
            if not self.p_count:
                self.p_base_off = off
                self.p_base_ts = ts
                self.p_epoch = epoch
            dt = ts - self.p_base_ts
            do = off - self.p_base_off
            body = b"".join((
                buf[ap : ap + 1],
                V[dt] if 0 <= dt < 16384 else enc(dt),
                V[do] if do < 16384 else enc(do),
                buf[tp:rec_end],
            ))
            n = len(body)
            rec = (V[n] if n < 16384 else enc(n)) + body
            self.p_parts.append(rec)
            self.p_size += len(rec)
            self.p_count += 1
            self.p_last_off = off
            if ts > self.p_max_ts:
                self.p_max_ts = ts

    def _filtered(self, buf: bytes, kept: list, header: tuple) -> None:
        """Kafka-style per-batch filtering: the original header with only the survivors."""
        (base, _blen, epoch, _m, _crc, attrs, lod, bts, mts, pid, pe, bseq, _count) = header
        body = b"".join([buf[rs:rec_end] for rs, _ap, _tp, rec_end, _off, _ts in kept])
        max_ts = mts if attrs & TIMESTAMP_TYPE_MASK else max(k[5] for k in kept)
        crc_part = _CRC_PART.pack(attrs, lod, bts, max_ts, pid, pe, bseq, len(kept))
        crc = crc32c(body, crc32c(crc_part))
        prefix = _PREFIX.pack(base, MIN_BATCH_LENGTH + len(body), epoch, 2, crc)
        self._write((prefix, crc_part, body), BATCH_HEADER_SIZE + len(body), base, base + lod, max_ts)

    def _special(self, buf: bytes, pos: int, end: int, header: tuple) -> None:
        """Compressed, transactional and control batches: kept whole or dropped whole."""
        (base, _blen, _e, _m, _crc, attrs, lod, bts, mts, pid, _pe, _bs, count) = header
        size = end - pos
        whole = (memoryview(buf)[pos:end],)
        if attrs & TRANSACTIONAL_MASK and not attrs & CONTROL_MASK and self._is_aborted(pid, base):
            self.aborted_dropped += count  # an aborted transaction's batch: gone
            return
        if attrs & CONTROL_MASK:
            self._write(whole, size, base, base + lod, mts)
            self.stats.records_kept += count
            return
        recs = self._decode(buf, pos, end, attrs, count, bts, mts)
        if attrs & TRANSACTIONAL_MASK or recs is None:
            self._write(whole, size, base, base + lod, mts)
            self.stats.records_kept += count
            if recs is None:
                self.unknown_opaque = True  # unknown keys: no later tombstone may go
            else:
                self.pinned.update(k for _od, _ts, k, _t in recs if k is not None)
            return
        # A decodable compressed batch: keep it whole if any record in it survives.
        m_get = self.map.get
        survives = False
        expired = 0
        deadline = -1
        for od, ts, key, tomb in recs:
            if key is None:
                survives = True
                continue
            latest = m_get(key)
            if latest is not None and latest > base + od:
                continue
            if tomb and not self.unknown_opaque and key not in self.pinned:
                t = ts if ts >= 0 else self.seg_ts
                if self.now - t > self.dr:
                    expired += 1
                    continue
                if deadline < 0 or t + self.dr < deadline:
                    deadline = t + self.dr
            survives = True
        if survives:
            self._write(whole, size, base, base + lod, mts)
            self.stats.records_kept += count
            self.pinned.update(k for _od, _ts, k, _t in recs if k is not None)
            if deadline >= 0 and (self.deadline < 0 or deadline < self.deadline):
                self.deadline = deadline
        else:
            self.stats.tombstones_dropped += expired

    def _copy_chunk(self, buf: bytes) -> int:
        n = len(buf)
        view = memoryview(buf)
        pos = 0
        unpack = _COPY_HEADER_UNPACK_FROM
        zz = _zz
        m_get = self.map.get
        pinned = self.pinned
        now = self.now
        dr = self.dr
        seg_ts = self.seg_ts
        mapped = self.mapped
        surv = self.survivors
        nsurv = len(surv)
        tsurv = self.tomb_survivors
        si = self.si
        ti = self.ti
        read = kept_total = dropped = 0
        try:
            while n - pos >= BATCH_HEADER_SIZE:
                base, blen, epoch, magic, crc, attrs, lod, count = unpack(buf, pos)
                end = pos + LOG_OVERHEAD + blen
                if blen < MIN_BATCH_LENGTH:
                    raise CleanerError(f"invalid batch length {blen}")
                if end > n:
                    break
                if magic != 2:
                    raise CleanerError(f"batch with magic {magic}")
                if not mapped and crc32c(view[pos + CRC_START : end]) != crc:
                    raise CleanerError(f"batch at offset {base} failed its CRC-32C check")
                read += count
                if attrs & _SPECIAL and not (attrs & TRANSACTIONAL_MASK
                                             and self._committed_plain(buf, pos, base, attrs)):
                    self._special(buf, pos, end, _HEADER_UNPACK_FROM(buf, pos))
                    pos = end
                    continue
                if mapped:
                    # Survivors of this batch are the known surviving offsets in its range.
                    last = base + lod
                    if si < nsurv and surv[si] < base:  # survivors of compressed batches
                        si = bisect_left(surv, base, si)
                    if si == nsurv or surv[si] > last:
                        pos = end
                        continue
                    j = bisect_right(surv, last, si)
                    k = j - si
                    si = j
                    bts, mts, pid = _TS_PID_UNPACK_FROM(buf, pos + 27)
                    if k == count and (
                        attrs or pid >= 0 or count >= _VERBATIM_MIN_RECORDS or end - pos >= _VERBATIM_MIN_BYTES
                    ):
                        ti = bisect_left(tsurv, base, ti)
                        if ti == len(tsurv) or tsurv[ti] > last:  # and no tombstone among them
                            kept_total += count
                            self._write((view[pos:end],), end - pos, base, last, mts)
                            pos = end
                            continue
                else:
                    bts, mts, pid = _TS_PID_UNPACK_FROM(buf, pos + 27)
                lat = attrs & TIMESTAMP_TYPE_MASK
                blocked = self.unknown_opaque
                kept = []
                p = pos + BATCH_HEADER_SIZE
                for _ in range(count):
                    rs = p
                    b = buf[p]  # record length
                    if b < 0x80:
                        p += 1
                        rec_end = p + ((b >> 1) ^ -(b & 1))
                    else:
                        c = buf[p + 1]
                        if c < 0x80:
                            v = (b & 0x7F) | (c << 7)
                            p += 2
                            rec_end = p + ((v >> 1) ^ -(v & 1))
                        else:
                            length, p = zz(buf, p)
                            rec_end = p + length
                    ap = p  # attributes
                    b = buf[p + 1]  # timestampDelta
                    if b < 0x80:
                        tsd = (b >> 1) ^ -(b & 1)
                        p += 2
                    else:
                        tsd, p = zz(buf, p + 1)
                    b = buf[p]  # offsetDelta
                    if b < 0x80:
                        off = base + ((b >> 1) ^ -(b & 1))
                        p += 1
                    else:
                        od, p = zz(buf, p)
                        off = base + od
                    tp = p  # key length: the record's tail from here is copied as is
                    b = buf[p]
                    if not b & 0x81:  # one byte, even: 0..63
                        p += 1
                        key = buf[p : p + (b >> 1)]
                        p += b >> 1
                    elif b == 1:
                        key = None
                        p += 1
                    else:
                        klen, p = zz(buf, p)
                        if klen < 0:
                            if klen != -1:
                                raise CleanerError(f"key length {klen}")
                            key = None
                        else:
                            key = buf[p : p + klen]
                            p += klen
                    ts = mts if lat else bts + tsd
                    if key is not None:
                        latest = m_get(key)
                        if latest is not None and latest > off:
                            p = rec_end  # superseded
                            continue
                        if buf[p] == 1 and not blocked and key not in pinned:  # a tombstone
                            t = ts if ts >= 0 else seg_ts
                            if now - t > dr:
                                dropped += 1
                                p = rec_end
                                continue
                            if self.deadline < 0 or t + dr < self.deadline:
                                self.deadline = t + dr
                    kept.append((rs, ap, tp, rec_end, off, ts))
                    p = rec_end
                if p != end:
                    raise CleanerError(f"records of the batch at offset {base} do not fill it exactly")
                if kept:
                    kept_total += len(kept)
                    if len(kept) == count and (
                        attrs or pid >= 0 or count >= _VERBATIM_MIN_RECORDS or end - pos >= _VERBATIM_MIN_BYTES
                    ):
                        self._write((view[pos:end],), end - pos, base, base + lod, mts)
                    elif attrs == 0 and pid < 0:
                        self._merge(buf, kept, epoch)
                    else:
                        self._filtered(buf, kept, _HEADER_UNPACK_FROM(buf, pos))
                pos = end
        finally:
            self.si = si
            self.ti = ti
            self.stats.records_read += read
            self.stats.records_kept += kept_total
            self.stats.tombstones_dropped += dropped
        return pos
