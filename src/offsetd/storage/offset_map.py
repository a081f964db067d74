"""Pass 1 of a cleaning, the offset map: key -> offset of its latest record over the dirty part of
the range, from which pass 2 (storage/compaction.py) knows which records survive.

The dirty part of the range is scanned once (every batch CRC-checked) to build key -> offset of
its latest record (a dict of key bytes, roughly 100-150 bytes per distinct key; `max_map_keys` is
a soft bound: when the map grows past it, the range ends after the segment being mapped and the
rest waits for the next cleaning). The same pass notes null-key and tombstone offsets, so the
surviving offsets of the dirty part are known afterwards. Batches of aborted transactions never
enter the map; compressed ones enter it through records/compression.py.
"""

from __future__ import annotations

import logging
import struct
import time
from itertools import chain
from pathlib import Path

from crc32c import crc32c

from offsetd.records.batch import (
    BATCH_HEADER_SIZE,
    CONTROL_MASK,
    CRC_START,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
)
from offsetd.records.varint import decode_varint
from offsetd.storage.cleaning_job import CleanerError, CleanerStats, CleaningJob
from offsetd.storage.source_batches import SPECIAL_MASK as _SPECIAL
from offsetd.storage.source_batches import AbortedTransactions, decode_records, scan_source

__all__ = ["OffsetMap"]

log = logging.getLogger("offsetd.storage.cleaner")  # one logger for the cleaner and its passes

# baseOffset, batchLength, magic, crc, attributes, recordsCount: what pass 1 needs of a header
_MAP_HEADER_UNPACK_FROM = struct.Struct(">qi4xbIh34xi").unpack_from
_TIMESTAMPS_UNPACK_FROM = struct.Struct(">qq").unpack_from  # baseTimestamp @27, maxTimestamp @35

_zz = decode_varint  # the general case; the hot loop inlines one- and two-byte varints


class OffsetMap:
    """Pass 1 over a job's sources: the map (key -> latest offset), the first source it read, and
    the sorted surviving offsets of the mapped sources (with the tombstones among them)."""

    def __init__(self, job: CleaningJob, max_map_keys: int, chunk_bytes: int, aborted: AbortedTransactions,
                 stats: CleanerStats) -> None:
        self.job = job
        self.pdir = Path(job.dir)
        self.max_map_keys = max_map_keys
        self.chunk_bytes = chunk_bytes
        self.aborted = aborted
        self.stats = stats
        self.map: dict[bytes, int] = {}
        self.null_key_offsets: list[int] = []
        self.tomb_offsets: list[int] = []
        self.mapped_from = len(job.sources)  # index of the first source pass 1 read
        self.survivors: list[int] = []  # sorted surviving offsets of the mapped sources
        self.tomb_survivors: list[int] = []  # the tombstones among them

    def build(self) -> int:
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
            scan_source(src, self._map_chunk, self.chunk_bytes)
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
        """Map the whole batches at the start of `buf`; return how many bytes they take."""
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
            if attrs & _SPECIAL and not (attrs & TRANSACTIONAL_MASK and self.aborted.committed_plain(buf, pos, base, attrs)):
                if not attrs & (TRANSACTIONAL_MASK | CONTROL_MASK):
                    bts, mts = _TIMESTAMPS_UNPACK_FROM(buf, pos + 27)
                    recs = decode_records(buf, pos, end, attrs, count, bts, mts)
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
