"""The log of one topic partition: Kafka's segment directory, appends, reads, retention, recovery.

Layout: `<log.dirs>/<topic>-<partition>/` holds segments named by base offset
(`00000000000000000000.log` + `.index` + `.timeindex`), exactly as Kafka writes them.

* The log start offset is not stored: it is the first segment's base offset (retention only
  deletes whole segments; `truncate_fully_and_start_at` creates a segment at the new start).
* The last segment is the active one. Rolling does not fsync on the produce path: the rolled
  segment is fsynced by the next flush() or, at the latest, by the next roll. The file
  `offsetd-recovery-point` holds the base offset of the oldest segment that may hold unsynced
  data (so at most the active segment and the one rolled before it). On open those segments
  are verified batch by batch (header + CRC) and cut back at the first bad batch (segments
  after a damaged one are deleted, as Kafka does); older segments only get their indexes
  rebuilt when those are missing or corrupt. Without the file only the active segment is
  verified.
* Idempotent producer state is rebuilt on open from the active segment's headers. A clean
  close also writes `offsetd-producer-state.json` (state at the log end offset), which the next
  open uses when it is still consistent with the log, so state survives segment rolls across
  restarts. The file is removed once loaded, so a crash never leaves a stale snapshot behind.
* Transactions (storage/transactions.py): producer state tracks open transactions; the last
  stable offset (LSO) is the first offset of the oldest open one, else the log end. ABORT
  markers add entries to the segment's `.txnindex`. Open transactions survive restarts through
  the producer snapshot, the transaction snapshot written at rolls and the recovery scan.
* The log cleaner (storage/cleaner.py) replaces a run of sealed segments with cleaned ones via
  `replace_segments`, through storage/segment_swap.py's crash-safe swap; `open()` first finishes
  an interrupted swap or clears an uncommitted one.

Pure synchronous file I/O; no asyncio, no clock reads (time is always passed in).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from offsetd.records.batch import (
    INVALID_RECORD,
    BatchHeader,
    InvalidBatch,
)
from offsetd.records.compression import batch_record_timestamps
from offsetd.storage.durable_file import fsync_dir as _fsync_dir
from offsetd.storage.file_records import FileRecords
from offsetd.storage.durable_file import write_durably as _write_durably
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import LogDirectory
from offsetd.storage.producer_state import ProducerStateManager
from offsetd.storage.segment_swap import CLEANED_SUFFIX, commit_swap, missing_cleaned_file, recover_interrupted_swap
from offsetd.storage.transactions import (
    PartitionTransactions,
    ProducerRecovery,
    remove_txn_snapshot,
    validate_log_batches,
    write_txn_snapshot,
)
from offsetd.storage.txn_index import TXNINDEX_SUFFIX, index_path
from offsetd.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    Segment,
    segment_file_name,
)

__all__ = [
    "PartitionLog",
    "AppendResult",
    "PreparedAppend",
    "OffsetOutOfRange",
    "PRODUCER_STATE_FILE",
    "RECOVERY_POINT_FILE",
]

log = logging.getLogger("offsetd.storage")

PRODUCER_STATE_FILE = "offsetd-producer-state.json"
RECOVERY_POINT_FILE = "offsetd-recovery-point"
OFFSET_OUT_OF_RANGE = 1
_INT32_MAX = 2**31 - 1
_pack_int64 = struct.Struct(">q").pack
_pack_int32 = struct.Struct(">i").pack


@dataclass(slots=True)
class AppendResult:
    """Outcome of one append: offsets assigned (or, for a duplicate, originally assigned)."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int = -1
    log_start_offset: int = 0
    duplicate: bool = False


@dataclass(slots=True)
class PreparedAppend:
    """An append decided but not yet written (PartitionLog.prepare_append): offsets
    [first, next_offset), the iovecs to write and the producer state to commit after."""

    first: int
    next_offset: int
    size: int
    parts: list[bytes | memoryview]
    batches: list[tuple[int, BatchHeader, int]]
    messages: int
    pending: object
    replica: bool = False  # copied with its own offsets (may start past the log end: a compacted gap)

    def data(self) -> bytes:
        """The bytes as they will be stored (base offsets and leader epoch patched)."""
        return b"".join(self.parts)


class OffsetOutOfRange(Exception):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


def _parse_base(name: str, suffix: str) -> int | None:
    """Base offset from a Kafka segment file name, None if the name is not one."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def _pread_all(ranges: list[tuple[Segment, int, int]]) -> bytes:
    """The bytes of `PartitionLog._read_ranges`' ranges (one pread per segment)."""
    if len(ranges) == 1:
        seg, pos, length = ranges[0]
        return seg.pread(length, pos)
    return b"".join(seg.pread(length, pos) for seg, pos, length in ranges)


class PartitionLog:
    """Append-only, segmented log of one partition (single broker: LEO is the high watermark)."""

    # The embedded engine's one broker leads every partition; cluster mode's log says otherwise.
    leader = True
    leader_epoch = -1

    def __init__(
        self,
        dir: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[Segment],
        producers: ProducerStateManager,
        log_dir: LogDirectory | None = None,
        transactions: PartitionTransactions | None = None,
    ) -> None:
        self.dir = dir
        # The health of the log directory this partition lives in, shared with its neighbours.
        self.log_dir = log_dir if log_dir is not None else LogDirectory(dir.parent)
        self.topic = topic
        self.partition = partition
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._producers = producers
        self._txns = transactions if transactions is not None else PartitionTransactions(dir)
        self.log_start_offset: int = segments[0].base_offset
        self.log_end_offset: int = segments[-1].next_offset
        self._unflushed_messages = 0
        self._closed = False
        self._unsynced_sealed: list[Segment] = [s for s in segments[:-1] if s.needs_flush]
        self._recovery_point: int | None = None
        # Bumped whenever segments are removed or replaced (not by rolls): a cleaning prepared
        # against an older layout is discarded instead of committed.
        self._layout_version = 0

    # ----------------------------------------------------------------- open / close

    @classmethod
    def open(
        cls, directory: Path, topic: str, partition: int, config: LogConfig, now_ms: int,
        log_dir: LogDirectory | None = None,
    ) -> "PartitionLog":
        """Open (or create) `<directory>/<topic>-<partition>/` and recover it.

        `directory` is one of `log.dirs` (the partition directory name is derived). Segments
        from the recovery point on (the active one, plus one rolled but not yet fsynced) are
        verified; torn or CRC-corrupt tails are truncated and logged on "offsetd.storage";
        missing/corrupt indexes of older segments are rebuilt. `now_ms` seeds segment ages.
        """
        directory = Path(directory)
        pdir = directory / f"{topic}-{partition}"
        if not pdir.is_dir():
            pdir.mkdir(parents=True, exist_ok=True)
            _fsync_dir(directory)
        recover_interrupted_swap(pdir)
        names = os.listdir(pdir)
        bases = sorted(b for b in (_parse_base(n, LOG_SUFFIX) for n in names) if b is not None)
        base_set = set(bases)
        for n in names:  # index files whose .log is gone are leftovers of a deletion
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
                b = _parse_base(n, suffix)
                if b is not None and b not in base_set:
                    os.unlink(pdir / n)
        snapshot = cls._take_snapshot_file(pdir)
        recovery_point = cls._read_recovery_point(pdir)

        segments: list[Segment] = []
        if not bases:
            segments.append(Segment.create(pdir, 0, config))
            _fsync_dir(pdir)
            producers = ProducerStateManager()
        else:
            last = len(bases) - 1
            first_recover = last
            if recovery_point is not None:
                first_recover = next(i for i, b in enumerate(bases) if b >= recovery_point or i == last)
            scan = ProducerRecovery(pdir, now_ms, snapshot, bases[-1])
            for i in range(first_recover):
                segments.append(Segment.open_sealed(pdir, bases[i], config, bases[i + 1]))
                scan.sealed(segments[-1], bases[i + 1])
            for i in range(first_recover, last + 1):
                scan.begin(pdir / segment_file_name(bases[i], LOG_SUFFIX), bases[i])
                seg = Segment.recover(pdir, bases[i], config, now_ms, scan.on_batch)
                segments.append(seg)
                if i == last:
                    break
                if seg.truncated_bytes:
                    # Later segments would follow a hole: drop them, as Kafka's recovery does.
                    for later in bases[i + 1 :]:
                        log.warning(
                            "recovery of %s: deleting segment %d that follows a damaged segment",
                            pdir,
                            later,
                        )
                        Segment(pdir, later, config).delete()
                        index_path(pdir, later).unlink(missing_ok=True)
                    break
                seg.seal()
                seg.flush()
            producers = scan.finish(segments)
        transactions = PartitionTransactions.load(pdir, [s.base_offset for s in segments])
        plog = cls(pdir, topic, partition, config, segments, producers, log_dir, transactions)
        plog._recovery_point = recovery_point
        plog._advance_recovery_point()
        log.debug(
            "opened %s: %d segment(s), offsets [%d, %d), %d producer(s)",
            pdir,
            len(segments),
            plog.log_start_offset,
            plog.log_end_offset,
            len(producers),
        )
        return plog

    @staticmethod
    def _take_snapshot_file(pdir: Path) -> tuple[int, dict] | None:
        """Read and remove the producer-state snapshot; None when absent or unreadable."""
        path = pdir / PRODUCER_STATE_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            os.unlink(path)
            data = json.loads(raw)
            if data.get("version") != 1:
                raise ValueError(f"unknown version {data.get('version')}")
            return int(data["offset"]), data["producers"]
        except (ValueError, KeyError, TypeError, OSError) as exc:
            log.warning("ignoring unreadable producer state %s: %s", path, exc)
            return None

    def _write_snapshot(self) -> None:
        """Persist producer state as of the log end offset (on clean close)."""
        if not self._producers.producers:
            return
        _write_durably(self.dir / PRODUCER_STATE_FILE, json.dumps(
            {"version": 1, "offset": self.log_end_offset, "producers": self._producers.to_snapshot()}))

    @staticmethod
    def _read_recovery_point(pdir: Path) -> int | None:
        """Base offset of the oldest segment that may hold unsynced data; None if unknown."""
        try:
            return int((pdir / RECOVERY_POINT_FILE).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _advance_recovery_point(self) -> None:
        """Persist the recovery point (oldest unsynced sealed segment, else the active one)."""
        rp = self._unsynced_sealed[0].base_offset if self._unsynced_sealed else self._segments[-1].base_offset
        if rp == self._recovery_point:
            return
        try:
            _write_durably(self.dir / RECOVERY_POINT_FILE, f"{rp}\n")
        except OSError as exc:
            # The file keeps an older point, which only makes the next start verify more
            # segments; it is written again at the next roll, flush or close.
            log.warning("%s: recovery point not advanced to %d: %s", self.dir, rp, exc)
            (self.dir / (RECOVERY_POINT_FILE + ".tmp")).unlink(missing_ok=True)
            return
        self._recovery_point = rp

    def close(self) -> None:
        """Flush everything, save producer state and close all file descriptors."""
        if self._closed:
            return
        for seg in self._segments:
            seg.close()
        self._unsynced_sealed.clear()
        self._advance_recovery_point()
        self._write_snapshot()
        self._closed = True

    def delete(self) -> None:
        """Close and remove the partition directory (DeleteTopics)."""
        if not self._closed:
            for seg in self._segments:
                if seg.fd >= 0:
                    os.close(seg.fd)
                    seg.fd = -1
                seg.offset_index.delete_file()
                seg.time_index.delete_file()
            self._closed = True
        shutil.rmtree(self.dir, ignore_errors=True)
        _fsync_dir(self.dir.parent)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.topic}-{self.partition} is closed")

    # ----------------------------------------------------------------- properties

    @property
    def size_bytes(self) -> int:
        """Total bytes of all segments' .log files."""
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[Segment]:
        """The segments, oldest first (a copy of the list; the last one is active)."""
        return list(self._segments)

    @property
    def closed(self) -> bool:
        """True once close() or delete() ran."""
        return self._closed

    @property
    def layout_version(self) -> int:
        """Changes whenever segments are deleted or replaced (rolls only add a segment)."""
        return self._layout_version

    @property
    def segment_base_offsets(self) -> list[int]:
        """Base offsets of the segments, oldest first (the last one is active)."""
        return list(self._bases)

    @property
    def active_segment(self) -> Segment:
        """The segment appends go to."""
        return self._segments[-1]

    @property
    def producer_state(self) -> ProducerStateManager:
        """Idempotent producer bookkeeping of this partition."""
        return self._producers

    @property
    def transactions(self) -> PartitionTransactions:
        """The aborted-transaction index of every segment (the cleaner reads it)."""
        return self._txns

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, else the log end (HW = LEO here); never
        below the log start offset (retention may delete an open transaction's first batches)."""
        first = self._producers.first_unstable_offset()
        if first is None:
            return self.log_end_offset
        return max(min(first, self.log_end_offset), self.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions a read_committed fetch of
        [fetch_offset, upper_bound) must be told about (A9)."""
        return self._txns.aborted_transactions(fetch_offset, upper_bound, self._bases)

    def ongoing_transaction(self, producer_id: int) -> int | None:
        """First offset of the producer's open transaction, None when it has none."""
        return self._producers.ongoing.get(producer_id)

    def producers(self) -> list[dict]:
        """Every known producer (DescribeProducers)."""
        return self._producers.describe()

    # ----------------------------------------------------------------- append

    def append(
        self,
        records: bytes | bytearray | memoryview,
        now_ms: int,
        validated: list[BatchHeader] | None = None,
        *,
        leader_epoch: int | None = None,
        sync: bool = False,
    ) -> AppendResult:
        """Append one Produce `records` blob (1+ batches), assigning offsets from log_end_offset.

        Validates with storage/transactions.validate_log_batches (validate_batches, markers
        allowed) unless `validated` (the result of one of them for this blob) is given.
        Base offsets (and partitionLeaderEpoch when `leader_epoch` is not None) are patched in
        the written bytes, not in `records`. Applies idempotent-producer rules (a retried batch
        returns the original offsets with duplicate=True; errors raise ProduceError), rolls the
        segment first when needed, writes with one writev and fsyncs when `sync` is set or
        flush_interval_messages is reached. Raises InvalidBatch for bad input.

        Atomic: batch, indexes, log end offset and producer state advance together or not at
        all. A failed write or fsync is undone back to the previous log end and raised as
        StorageError (storage/log_dir.py decides whether the directory stays online).
        """
        prepared = self.prepare_append(records, validated, leader_epoch=leader_epoch)
        if isinstance(prepared, AppendResult):
            return prepared
        return self.apply_append(prepared, now_ms, sync=sync)

    def prepare_append(
        self,
        records: bytes | bytearray | memoryview,
        validated: list[BatchHeader] | None = None,
        *,
        leader_epoch: int | None = None,
        replica: bool = False,
    ) -> "PreparedAppend | AppendResult":
        """The first half of append(): validation, producer rules and offset assignment, with
        no I/O. A duplicate gives its original AppendResult. The PostgreSQL engine stores
        `PreparedAppend.data()` before apply_append() writes it here; nothing may be appended in
        between (apply_append checks). `replica`: batches copied from the log of record (already
        accepted there), so producer rules are not judged again, only recorded."""
        self._check_open()
        mv = records if isinstance(records, memoryview) else memoryview(records)
        if mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        if validated is None:  # the broker's own writers: markers allowed
            validated = validate_log_batches(mv, self.config.max_message_bytes)
        if not validated:
            raise InvalidBatch(INVALID_RECORD, "produce request contains no record batch")
        if replica:  # stored offsets are kept: a compacted log has gaps, never overlaps
            first = validated[0].base_offset
            if first < self.log_end_offset:
                raise InvalidBatch(INVALID_RECORD, f"replica batch at {first} below the log end {self.log_end_offset}")
            pending, dup = self._producers.replica_pending(validated, mv), None
        else:
            first = self.log_end_offset
            pending, dup = self._producers.validate(validated, first, mv)
        if dup is not None:
            return AppendResult(dup.base_offset, dup.last_offset, -1, self.log_start_offset, True)

        # iovecs: the patched 8-byte baseOffset, then the batch bytes as received.
        parts: list[bytes | memoryview] = []
        batches: list[tuple[int, BatchHeader, int]] = []
        pos = 0
        offset = first
        messages = 0
        for h in validated:
            size = h.batch_length + 12
            if replica:
                if h.base_offset < offset:
                    raise InvalidBatch(INVALID_RECORD, f"replica batches out of order at {h.base_offset}")
                offset = h.base_offset
                parts.append(mv[pos : pos + size])
            elif leader_epoch is None:
                parts.append(_pack_int64(offset))
                parts.append(mv[pos + 8 : pos + size])
            else:
                parts.append(_pack_int64(offset))
                parts.append(mv[pos + 8 : pos + 12])
                parts.append(_pack_int32(leader_epoch))
                parts.append(mv[pos + 16 : pos + size])
            batches.append((pos, h, offset))
            pos += size
            offset += h.last_offset_delta + 1
            messages += h.records_count
        if pos != len(mv):
            raise ValueError(f"validated headers cover {pos} bytes but the blob has {len(mv)}")
        return PreparedAppend(first, offset, pos, parts, batches, messages, pending, replica)

    def apply_append(self, prepared: "PreparedAppend", now_ms: int, *, sync: bool = False) -> AppendResult:
        """The second half of append(): roll if due, write, index, fsync when asked, and only then
        move the log end offset and commit the producer state. Atomic, as append()."""
        if prepared.first != self.log_end_offset and not (prepared.replica and prepared.first > self.log_end_offset):
            raise ValueError(f"{self.dir}: an append prepared at offset {prepared.first} applied at "
                             f"{self.log_end_offset}")
        pos, offset = prepared.size, prepared.next_offset
        log_dir = self.log_dir
        log_dir.check()
        try:
            if self._should_roll(pos, offset - 1, now_ms):
                self.roll(now_ms)
        except OSError as exc:  # roll() leaves the old active segment in place when it fails
            raise log_dir.failed(exc, self._append_what) from exc
        segment = self._segments[-1]
        mark = segment.mark()
        try:
            segment.append(prepared.parts, pos, prepared.batches, now_ms)
            if sync or self._unflushed_messages + prepared.messages >= self.config.flush_interval_messages:
                self.flush()  # counts from zero again
            else:
                self._unflushed_messages += prepared.messages
        except OSError as exc:
            try:
                segment.rollback(mark)
            except OSError as undo:
                log.error("%s: undoing a failed append failed: %s", self.dir, undo)
                raise log_dir.failed(exc, self._append_what, undone=False) from exc
            raise log_dir.failed(exc, self._append_what) from exc
        # Only now, with the batch written (and fsynced when asked), does the log end move.
        self.log_end_offset = offset
        if prepared.pending:
            aborted = self._producers.commit(prepared.pending, now_ms)
            if aborted:
                try:
                    self._txns.record(aborted, self._bases)
                except OSError as exc:  # the scan past the recovery point derives it again
                    log.error("%s: writing the aborted-transaction index: %s", self.dir, exc)
        log_dir.succeeded()
        return AppendResult(prepared.first, offset - 1, -1, self.log_start_offset)

    @property
    def _append_what(self) -> str:
        """How a failed append is named in errors and log lines (built only when one fails)."""
        return f"append to {self.topic}-{self.partition}"

    def _should_roll(self, size: int, last_offset: int, now_ms: int) -> bool:
        """Kafka's roll rules: segment full, segment_ms elapsed since its first batch, or
        offsets no longer fitting the index's int32 relative offset."""
        seg = self._segments[-1]
        if seg.size == 0:
            return False
        if seg.size + size > min(self.config.segment_bytes, _INT32_MAX):  # index positions are int32
            return True
        if seg.rolling_base_ms is not None and now_ms - seg.rolling_base_ms > self.config.segment_ms:
            return True
        return last_offset - seg.base_offset > _INT32_MAX

    def roll(self, now_ms: int | None = None) -> None:
        """Seal the active segment and start a new one at log_end_offset; no-op if empty.

        The sealed segment is not fsynced here (it stays below the recovery point until the
        next flush() or roll), so rolling costs no fsync of fresh data on the produce path.
        """
        self._check_open()
        old = self._segments[-1]
        if old.size == 0:
            return
        # Bound the unsynced tail: segments rolled earlier are fsynced now (by this time the
        # kernel has usually written them back already, so this is cheap).
        for seg in self._unsynced_sealed:
            seg.flush()
        # If sealing or creating the new segment fails (a full disk), the old one stays active
        # as it was.
        mark = old.mark()
        try:
            old.seal()
            new = Segment.create(self.dir, self.log_end_offset, self.config)
        except OSError:
            old.sealed = False
            old.rollback(mark)
            raise
        self._unsynced_sealed = [old]
        self._segments.append(new)
        self._bases.append(new.base_offset)
        _fsync_dir(self.dir)
        self._advance_recovery_point()
        try:
            write_txn_snapshot(self.dir, self.log_end_offset, self._producers)
        except OSError as exc:  # an older snapshot only means a longer scan after a crash
            log.warning("%s: transaction snapshot not written at %d: %s", self.dir, self.log_end_offset, exc)

    def flush(self) -> None:
        """fsync unsynced data (log.flush.interval.*); the shell's timer calls this too.

        Rolled segments get log + indexes fsynced; the active segment only its log (its index
        files are rebuilt on open, and fsynced on close). Then the recovery point advances.
        """
        if self._unsynced_sealed:
            for seg in self._unsynced_sealed:
                seg.flush()
            self._unsynced_sealed.clear()
            self._advance_recovery_point()
        active = self._segments[-1]
        if active.dirty:
            active.flush()
        self._unflushed_messages = 0

    # ----------------------------------------------------------------- reads

    def _segment_index(self, offset: int) -> int:
        """Index into self._segments of the segment holding `offset` (clamped to the first)."""
        return max(bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> bytes:
        """Whole batches from the one containing `offset`, at most `max_bytes` in total.

        If the first batch alone is larger than max_bytes it is returned whole when
        min_one_batch (so consumers make progress), else b"". Continues into following segments
        while budget remains. offset == log_end_offset gives b"". Raises OffsetOutOfRange.
        """
        return _pread_all(self._read_ranges(offset, max_bytes, min_one_batch))

    def read_file(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
                  min_file_bytes: int = 0) -> bytes | FileRecords:
        """What `read` returns, as file ranges held open by descriptors of their own (a Fetch
        sends them with sendfile); plain bytes when there are fewer than `min_file_bytes` (a
        pread is cheaper than a descriptor and a syscall per range) or when FileRecords may hold
        no more descriptors (its budget, or EMFILE)."""
        return self._ranges_data(self._read_ranges(offset, max_bytes, min_one_batch), min_file_bytes)

    def read_committed(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
                       min_file_bytes: int | None = None) -> tuple[bytes | FileRecords, list[tuple[int, int]]]:
        """A read_committed Fetch (A9): whole batches from `offset` below the last stable offset,
        and the aborted transactions overlapping them (`aborted_transactions` up to the end of
        the returned data). As `read_file` when `min_file_bytes` is given, else as `read`."""
        ranges = self._read_ranges(offset, max_bytes, min_one_batch, self.last_stable_offset)
        data = self._ranges_data(ranges, min_file_bytes) if min_file_bytes is not None else _pread_all(ranges)
        if not ranges:
            return data, []
        seg, pos, length = ranges[-1]
        end = pos + length
        if end < seg.size:
            upper = seg.header_at(end).base_offset
        else:
            i = self._segment_index(seg.base_offset) + 1
            upper = self._bases[i] if i < len(self._bases) else self.log_end_offset
        return data, self.aborted_transactions(offset, upper)

    @staticmethod
    def _ranges_data(ranges: list[tuple[Segment, int, int]], min_file_bytes: int) -> bytes | FileRecords:
        """The ranges as FileRecords, or bytes below `min_file_bytes` or when no descriptor is left."""
        if not ranges or sum(r[2] for r in ranges) < min_file_bytes:
            return _pread_all(ranges)
        held = FileRecords.hold([(seg.fd, pos, length) for seg, pos, length in ranges])
        return _pread_all(ranges) if held is None else held

    def _read_ranges(self, offset: int, max_bytes: int, min_one_batch: bool,
                     max_offset: int | None = None) -> list[tuple[Segment, int, int]]:
        """(segment, position, length) of the whole batches `read` returns, in log order; no
        record byte is read, only batch headers to find the boundaries. `max_offset` (the LSO, a
        batch boundary) excludes the batches starting at or after it, even a first one."""
        self._check_open()
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        ranges: list[tuple[Segment, int, int]] = []
        if max_offset is None or max_offset > self.log_end_offset:
            max_offset = self.log_end_offset
        if offset >= max_offset:
            return ranges
        # The segment holding max_offset and the byte where its batch starts (None: no bound).
        stop_seg: Segment | None = None
        stop_pos = 0
        if max_offset < self.log_end_offset:
            stop_seg = self._segments[self._segment_index(max_offset)]
            found = stop_seg.find_batch(max_offset)
            stop_pos = stop_seg.size if found is None else found
        remaining = max_bytes
        searching = True
        for seg in self._segments[self._segment_index(offset) :]:
            if seg.size == 0:
                if seg is stop_seg:
                    break
                continue
            if searching:
                pos = seg.find_batch(offset)
                if pos is None:
                    if seg is stop_seg:
                        break
                    continue  # offset lies in a gap after this segment's last batch
                searching = False
            else:
                pos = 0
            seg_end = stop_pos if seg is stop_seg else seg.size
            if seg_end <= pos:
                break
            limit = pos + max(remaining, 0)
            end = seg_end if limit >= seg_end else seg.last_boundary(pos, limit)
            if end == pos:
                if not ranges and min_one_batch:
                    ranges.append((seg, pos, min(seg.header_at(pos).size, seg_end - pos)))
                break
            ranges.append((seg, pos, end - pos))
            remaining -= end - pos
            if end < seg.size or remaining <= 0 or seg is stop_seg:
                break
        return ranges

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >= ts (ListOffsets).

        The time index gives the batch to start from; batches whose maxTimestamp is below ts are
        skipped by their headers, and the first one that may hold a match is decoded (and
        decompressed, whatever its codec) to find the exact record. Only when that batch has no
        qualifying record (e.g. all of them below the log start offset) are the next ones read.
        None when no record qualifies. Raises InvalidBatch when a batch cannot be decoded.
        """
        self._check_open()
        start_offset = self.log_start_offset
        for seg in self._segments:
            if seg.size == 0 or seg.max_timestamp < ts:
                continue
            hint = seg.time_index.lookup(ts)
            start = seg.offset_index.lookup(hint) if hint is not None else 0
            for pos, h in seg.iter_headers(start, 16 * 1024):
                if h.max_timestamp < ts or h.last_offset < start_offset:
                    continue
                for rec_offset, rec_ts in batch_record_timestamps(seg.pread(h.size, pos)):
                    if rec_ts >= ts and rec_offset >= start_offset:
                        return rec_offset, rec_ts
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3, KIP-734).

        Ties go to the earliest such record, as Kafka: the first segment reaching the largest
        timestamp, its first batch whose maxTimestamp equals it, and in that batch (decompressed
        if need be) the first record carrying it. (-1, -1) when the log has no timestamped
        record. Raises InvalidBatch when the batch cannot be decoded.
        """
        self._check_open()
        best: Segment | None = None
        for seg in self._segments:
            if seg.size and seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return -1, -1
        target = best.max_timestamp
        start = best.find_batch(best.offset_of_max_timestamp)
        if start is None:
            start = 0
        for pos, h in best.iter_headers(start, 16 * 1024):
            if h.max_timestamp != target:
                continue
            for rec_offset, rec_ts in batch_record_timestamps(best.pread(h.size, pos)):
                if rec_ts == target and rec_offset >= self.log_start_offset:
                    return rec_offset, rec_ts
        return -1, -1

    # ----------------------------------------------------------------- retention

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest segments past retention_ms (by largest timestamp) or while the log
        exceeds retention_bytes; advance log_start_offset; return how many were deleted.

        Like Kafka, an expired active segment is rolled first and deleted too (the log then
        stays empty at its log end offset). No deletion when cleanup_policy lacks "delete".
        Also expires idle producer ids (producer_id_expiration_ms).
        """
        self._check_open()
        self._producers.expire(now_ms, self.config.producer_id_expiration_ms)
        if not self.config.deletes:
            return 0
        deleted = 0
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while self._deletable(0) and now_ms - self._segments[0].largest_timestamp > retention_ms:
                self._delete_oldest_segment(now_ms)
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes
            while self._deletable(0) and excess - self._segments[0].size >= 0:
                excess -= self._segments[0].size
                self._delete_oldest_segment(now_ms)
                deleted += 1
        if deleted:
            log.info(
                "retention deleted %d segment(s) of %s-%d; log start offset now %d",
                deleted,
                self.topic,
                self.partition,
                self.log_start_offset,
            )
        return deleted

    def _deletable(self, i: int) -> bool:
        """Retention may delete segment i: it holds data, or it is a sealed segment the cleaner
        emptied (an empty active segment is the log's end and stays)."""
        return self._segments[i].size > 0 or i < len(self._segments) - 1

    def _delete_oldest_segment(self, now_ms: int) -> None:
        """Remove the first segment (rolling first if it is the active one)."""
        if len(self._segments) == 1:
            self.roll(now_ms)
        seg = self._segments.pop(0)
        self._bases.pop(0)
        if seg in self._unsynced_sealed:
            self._unsynced_sealed.remove(seg)
        seg.delete()
        self._txns.drop(seg.base_offset)
        self._layout_version += 1
        self.log_start_offset = max(self.log_start_offset, self._segments[0].base_offset)
        _fsync_dir(self.dir)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at `offset` (start = end = offset)."""
        self._check_open()
        for seg in self._segments:
            seg.delete()
        self._txns.clear()
        remove_txn_snapshot(self.dir)
        seg = Segment.create(self.dir, offset, self.config)
        self._segments = [seg]
        self._bases = [offset]
        self.log_start_offset = offset
        self.log_end_offset = offset
        self._producers.clear()
        self._unflushed_messages = 0
        self._unsynced_sealed = []
        self._layout_version += 1
        _fsync_dir(self.dir)
        self._advance_recovery_point()

    # ----------------------------------------------------------------- cleaner swap

    def replace_segments(self, old: list[Segment], new_bases: list[int]) -> list[Segment]:
        """Swap the contiguous run `old` of sealed segments for cleaned ones (the log cleaner).

        The new segments must already be on disk, fsynced, as `<base>.log.cleaned` with
        `.index.cleaned` / `.timeindex.cleaned`, for each base in `new_bases` (strictly
        increasing, the first equal to old[0]'s base so the log start offset is kept, all below
        the base of the segment after the run). Their records must be exactly the surviving
        records of `old`, with their original offsets. Crash-safe (see the module docstring):
        after the manifest is durable the swap always completes, if need be at the next open().
        Raises ValueError, touching nothing, when `old` is not a run of this log's sealed
        segments. Must run on the thread that owns the log. Returns the new segments.
        """
        self._check_open()
        n = len(old)
        i = next((k for k, s in enumerate(self._segments) if s is old[0]), None) if n else None
        if i is None or i + n >= len(self._segments) or any(
            a is not b for a, b in zip(self._segments[i : i + n], old)
        ):
            raise ValueError("replace_segments: not a run of this log's sealed segments")
        next_base = self._segments[i + n].base_offset
        if (
            not new_bases
            or new_bases[0] != old[0].base_offset
            or any(a >= b for a, b in zip(new_bases, new_bases[1:]))
            or new_bases[-1] >= next_base
        ):
            raise ValueError(f"replace_segments: bad new base offsets {new_bases[:5]}...")
        missing = missing_cleaned_file(self.dir, list(new_bases))
        if missing:
            raise ValueError(f"replace_segments: {missing} is missing")
        old_bases = [s.base_offset for s in old]
        # The moved .txnindex entries travel with the swap as `.txnindex.cleaned` files.
        new_entries = self._txns.replace(old_bases, list(new_bases), CLEANED_SUFFIX)
        commit_swap(self.dir, old_bases, list(new_bases))
        for seg in old:  # their files are gone (a new segment may reuse a name): close only
            if seg.fd >= 0:
                os.close(seg.fd)
                seg.fd = -1
            seg.offset_index.close()
            seg.time_index.close()
        nexts = list(new_bases[1:]) + [next_base]
        new = [Segment.open_sealed(self.dir, b, self.config, nb) for b, nb in zip(new_bases, nexts)]
        self._segments[i : i + n] = new
        self._bases = [s.base_offset for s in self._segments]
        self._unsynced_sealed = [s for s in self._unsynced_sealed if all(s is not o for o in old)]
        self._txns.swapped(old_bases, new_entries)
        self._layout_version += 1
        self._advance_recovery_point()
        return new
