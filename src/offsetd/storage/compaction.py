"""One cleaning's work on bytes, Kafka's two passes over the source segments of a CleaningJob: the
map (storage/offset_map.py), then the copy of the surviving records, here, rebuilding batches that
storage/cleaned_segment.py writes as `*.cleaned` segments. storage/cleaner.py decides what to
clean, runs this in prepare() (any thread or process) and swaps the result into the log.

The copy (pass 2)
-----------------
Every batch of the whole range (clean part too: its records may be superseded by dirty ones) is
re-read. A dirty batch holding no surviving offset is skipped on its header alone, one whose
records all survive (no tombstone among them) is copied without decoding; other batches, and all
of the clean part (CRC-checked here), are decoded and each record is kept when
- its key is null (compacted topics should not have any; Kafka rejects them at produce time,
  offsetd keeps them as they are), or
- no later record with its key exists in the map, unless it is a tombstone (null value) whose
  timestamp is more than `delete.retention.ms` before now.
Tombstone age: the record's timestamp (the batch's max timestamp for LogAppendTime, the source
segment's largest timestamp if it has none). This is a wall-clock rule like KIP-534's, except that
Kafka counts from the first cleaning that saw the tombstone (kept in the batch header), not from
its timestamp; for `__consumer_offsets` the broker sets the timestamps. A client giving a
tombstone an old CreateTime shortens its life accordingly. A tombstone is never dropped while an
older record of its key could survive: the records of batches kept whole (see below) "pin" their
keys, and an undecodable batch pins every key.

Output batches
--------------
Surviving records keep their offsets and timestamps.
* Plain batches (uncompressed, CreateTime, no producer id, not transactional, attributes 0, the
  whole `__consumer_offsets` case): survivors of consecutive batches are regrouped into new
  uncompressed v2 batches of up to `max_batch_bytes` (64 KiB; also bounded by max.message.bytes
  and segment.bytes) with the base offset of their first record, explicit offset deltas (so
  `lastOffsetDelta + 1` may exceed the record count, as in any compacted Kafka log) and a fresh
  CRC-32C. Record bytes from the key on are copied; only the record's length, timestamp delta
  and offset delta varints are re-encoded. A batch whose records all survive is copied byte for
  byte when it has >= 8 records or >= 2 KiB (regrouping would save little). A new batch also
  starts where the partition leader epoch changes.
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
"""

from __future__ import annotations

import struct
import time
from bisect import bisect_left, bisect_right
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
)
from offsetd.records.varint import decode_varint, encode_varint
from offsetd.storage.cleaned_segment import CleanedSegments
from offsetd.storage.cleaning_job import CleanerError, CleanerStats, CleaningJob, SourceSegment
from offsetd.storage.offset_map import OffsetMap
from offsetd.storage.source_batches import SPECIAL_MASK as _SPECIAL
from offsetd.storage.source_batches import AbortedTransactions, decode_records, scan_source

# A plain batch whose records all survive is copied as it is when it is at least this large or
# has at least this many records (regrouping saves at most one 61-byte header per batch).
_VERBATIM_MIN_BYTES = 2048
_VERBATIM_MIN_RECORDS = 8

_HEADER_UNPACK_FROM = struct.Struct(">qiibIhiqqqhii").unpack_from
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# recordsCount: what pass 2 needs first; then baseTimestamp, maxTimestamp, producerId @27
_COPY_HEADER_UNPACK_FROM = struct.Struct(">qiibIhi30xi").unpack_from
_TS_PID_UNPACK_FROM = struct.Struct(">qqq").unpack_from
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc (the part the CRC does not cover)
_PREFIX = struct.Struct(">qiibI")
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
# baseSequence, recordsCount (the header part covered by the CRC)
_CRC_PART = struct.Struct(">hiqqqhii")
assert _PREFIX.size + _CRC_PART.size == BATCH_HEADER_SIZE

_V = tuple(encode_varint(i) for i in range(16384))  # zig-zag varints of small non-negative ints

_zz = decode_varint  # the general case; the hot loop inlines one- and two-byte varints


class Compaction:
    """The state of one prepare(): pass 1 (build_map) then pass 2 (copy) over the job's sources;
    reads only the job's source files and writes only its own `*.cleaned` files."""

    def __init__(self, job: CleaningJob, max_map_keys: int, chunk_bytes: int, max_batch_bytes: int) -> None:
        self.job = job
        self.pdir = Path(job.dir)
        self.config = job.config
        self.now = job.now_ms
        self.dr = job.config.delete_retention_ms
        self.max_map_keys = max_map_keys
        self.chunk_bytes = chunk_bytes
        self.target_batch = max(1024, min(max_batch_bytes, job.config.max_message_bytes))
        # pass 1's results (build_map)
        self.map: dict[bytes, int] = {}
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
        self.seg_ts = -1
        self.output = CleanedSegments(self.pdir, self.config, self.stats)
        # the pending merged batch
        self.p_parts: list[bytes] = []
        self.p_size = 0
        self.p_count = 0
        self.p_base_off = 0
        self.p_base_ts = 0
        self.p_max_ts = -1
        self.p_last_off = 0
        self.p_epoch = -1
        self.aborted = AbortedTransactions(job.aborted)
        self.aborted_dropped = 0

    @property
    def new_bases(self) -> list[int]:
        """Base offsets of the cleaned segments written, in order."""
        return self.output.new_bases

    def build_map(self) -> int:
        """Pass 1 (storage/offset_map.py): map the dirty sources; return how many sources this
        cleaning covers."""
        offset_map = OffsetMap(self.job, self.max_map_keys, self.chunk_bytes, self.aborted, self.stats)
        covered = offset_map.build()
        self.map = offset_map.map
        self.mapped_from = offset_map.mapped_from
        self.survivors = offset_map.survivors
        self.tomb_survivors = offset_map.tomb_survivors
        return covered

    # ------------------------------------------------------------------ pass 2: the copy

    def copy(self, covered: int) -> None:
        """Pass 2: the survivors of the first `covered` sources into cleaned segments (on failure
        none is left behind)."""
        started = time.perf_counter()
        try:
            for i, src in enumerate(self.job.sources[:covered]):
                self.mapped = i >= self.mapped_from
                self._begin_source(src)
                scan_source(src, self._copy_chunk, self.chunk_bytes)
                self.stats.source_segments += 1
                self.stats.source_bytes += src.size
            self._finish_output()
        except BaseException:
            self.discard()
            raise
        self.stats.copy_seconds = time.perf_counter() - started

    def _begin_source(self, src: SourceSegment) -> None:
        """Copy from `src` next."""
        self.seg_ts = src.largest_timestamp
        self.output.begin_source(src)

    def _finish_output(self) -> None:
        """Write the pending merged batch and finish the last output segment."""
        self._flush_pending()
        self.output.close()

    def discard(self) -> None:
        """Delete the cleaned segments written so far (the cleaning failed or was abandoned)."""
        self.output.discard()

    def _write(self, parts: tuple, size: int, base_offset: int, last_offset: int, max_ts: int) -> None:
        """Write a batch as it is given, after the pending merged batch."""
        if self.p_count:
            self._flush_pending()
        self.output.add(parts, size, base_offset, last_offset, max_ts)

    def _flush_pending(self) -> None:
        """Write the pending merged batch, its header and CRC-32C built now."""
        if not self.p_count:
            return
        body = b"".join(self.p_parts)
        crc_part = _CRC_PART.pack(
            0, self.p_last_off - self.p_base_off, self.p_base_ts, self.p_max_ts, -1, -1, -1, self.p_count
        )
        crc = crc32c(body, crc32c(crc_part))
        prefix = _PREFIX.pack(self.p_base_off, MIN_BATCH_LENGTH + len(body), self.p_epoch, 2, crc)
        self.output.add((prefix, crc_part, body), BATCH_HEADER_SIZE + len(body), self.p_base_off, self.p_last_off,
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
        limit = self.output.segment_limit
        for rs, ap, tp, rec_end, off, ts in kept:
            # the batch with this record (whose varints may grow by up to 16 bytes)
            grown = BATCH_HEADER_SIZE + self.p_size + (rec_end - rs) + 16
            if self.p_count and (
                epoch != self.p_epoch or grown > target or self.output.out.size + grown > limit
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
        if attrs & TRANSACTIONAL_MASK and not attrs & CONTROL_MASK and self.aborted.is_aborted(pid, base):
            self.aborted_dropped += count  # an aborted transaction's batch: gone
            return
        if attrs & CONTROL_MASK:
            self._write(whole, size, base, base + lod, mts)
            self.stats.records_kept += count
            return
        recs = decode_records(buf, pos, end, attrs, count, bts, mts)
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
        """Copy the survivors of the whole batches at the start of `buf`; return their bytes."""
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
                                             and self.aborted.committed_plain(buf, pos, base, attrs)):
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
