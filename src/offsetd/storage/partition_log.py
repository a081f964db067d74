"""The log of one topic partition: Kafka's segment directory (`<log.dirs>/<topic>-<partition>/`,
segments named by base offset exactly as Kafka writes them) and the state that moves with it.

PartitionLog owns the segment list (the last one active), the log start and end offsets, producer
state and transactions (storage/transactions.py), and is the one place that changes them: appends
(decided by storage/log_append.py), rolls and flushes, retention (storage/log_retention.py),
truncation and the cleaner's swap (storage/segment_swap.py), and the leader-epoch history
(storage/leader_epoch_cache.py, kept in `leader-epoch-checkpoint`). Opening is storage/log_loader.py's
recovery; reads go through storage/log_read.py and storage/time_lookup.py. The log start offset is
not stored: it is the first segment's base offset. Rolling does not fsync on the produce path: the
rolled segment is fsynced by the next flush() or, at the latest, by the next roll.

Pure synchronous file I/O; no asyncio, no clock reads (time is always passed in).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import NoReturn

from offsetd.records.batch import BatchHeader
from offsetd.storage.deferred_append import DeferredAppends, PendingAppend
from offsetd.storage.durable_file import fsync_dir as _fsync_dir
from offsetd.storage.file_records import FileRecords
from offsetd.storage.log_append import AppendResult, PreparedAppend, prepare_append, should_roll
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import LogDirectory
from offsetd.storage.leader_epoch_cache import LeaderEpochCache
from offsetd.storage.log_loader import (
    load_log,
    read_epoch_checkpoint,
    write_epoch_checkpoint,
    write_producer_snapshot,
    write_recovery_point,
)
from offsetd.storage.log_read import pread_all, ranges_data, ranges_end_offset, read_ranges
from offsetd.storage.log_retention import retention_deletions
from offsetd.storage.producer_state import ProducerStateManager
from offsetd.storage.segment import Segment, SegmentMark
from offsetd.storage.segment_swap import CLEANED_SUFFIX, check_replacement, commit_swap
from offsetd.storage.time_lookup import max_timestamp, offset_for_timestamp
from offsetd.storage.transactions import PartitionTransactions, remove_txn_snapshot, write_txn_snapshot

__all__ = ["PartitionLog"]

log = logging.getLogger("offsetd.storage")

class PartitionLog(DeferredAppends):
    """Append-only, segmented log of one partition (single broker: LEO is the high watermark)."""

    # The embedded engine's one broker leads every partition; cluster mode's log says otherwise.
    leader = True
    # Its directory has been read (storage/unopened_log.py's UnopenedLog says False until then).
    opened = True
    needs_recovery = False  # an opened log was verified as it opened
    durable = True  # its checkpoints are fsynced (open's `durable`: False for cluster mode's copies)

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
        self._pending: PendingAppend | None = None  # begin_append's batch, awaiting its fsync
        # A new partition's directory entries (its first segment's files) are fsynced by its first
        # flush, close or roll, not at creation: a crash before then loses an empty log, which the
        # next open makes again. Creating 100,000 partitions saves as many fsyncs.
        self._dir_unsynced = False
        # Bumped whenever segments are removed or replaced (not by rolls): a cleaning prepared
        # against an older layout is discarded instead of committed.
        self._layout_version = 0
        # The epoch this broker leads at (-1: none; lead_next_epoch) and the history of epochs,
        # saved to leader-epoch-checkpoint before the first append of a new epoch.
        self.leader_epoch = -1
        self.epochs = LeaderEpochCache()
        self._epochs_unsaved = False
        self._newest_saved_epoch = -1  # an epoch once saved may have written batches a crash took

    # ----------------------------------------------------------------- open / close

    @classmethod
    def open(
        cls, directory: Path, topic: str, partition: int, config: LogConfig, now_ms: int,
        log_dir: LogDirectory | None = None, *, clean: bool = False, sync_parent: bool = True, durable: bool = True,
    ) -> "PartitionLog":
        """Open (or create) `<directory>/<topic>-<partition>/` and recover it.

        `directory` is one of `log.dirs` (the partition directory name is derived). Segments
        from the recovery point on (the active one, plus one rolled but not yet fsynced) are
        verified; torn or CRC-corrupt tails are truncated and logged on "offsetd.storage";
        missing/corrupt indexes of older segments are rebuilt. `now_ms` seeds segment ages.
        `clean`: the broker shut down cleanly, nothing is verified (storage/log_loader.py).
        `sync_parent` False: the caller fsyncs `directory` itself before appending (a new topic's
        partitions share one fsync). `durable` False: a copy whose log of record is elsewhere
        (cluster mode: PostgreSQL), whose epoch checkpoint and new directory need no fsync.
        """
        pdir = Path(directory) / f"{topic}-{partition}"
        loaded = load_log(pdir, config, now_ms, clean, sync_parent)
        segments, producers = loaded.segments, loaded.producers
        plog = cls(pdir, topic, partition, config, segments, producers, log_dir, loaded.transactions)
        plog._recovery_point = loaded.recovery_point
        plog.durable = durable
        plog._dir_unsynced = loaded.fresh and durable
        plog._advance_recovery_point()
        plog.epochs, plog._newest_saved_epoch = read_epoch_checkpoint(pdir, plog.log_start_offset,
                                                                      plog.log_end_offset)
        log.debug(
            "opened %s: %d segment(s), offsets [%d, %d), %d producer(s)",
            pdir,
            len(segments),
            plog.log_start_offset,
            plog.log_end_offset,
            len(producers),
        )
        return plog

    # ----------------------------------------------------------------- leader epochs

    def lead_next_epoch(self, at_least: int = 0) -> int:
        """The embedded engine's leadership at open: the epoch after the newest one that wrote to
        this log (even if a crash took what it wrote, so a consumer that read it sees the
        divergence), starting at the log end, and never below `at_least` (the epoch Metadata
        already announced for a log opened on first use). Nothing is written until an append
        happens in it, so a start without appends leads at the same epoch next time."""
        self.leader_epoch = max(self.epochs.latest_epoch + 1, self._newest_saved_epoch + 1, at_least)
        self._epochs_unsaved |= self.epochs.assign(self.leader_epoch, self.log_end_offset)
        return self.leader_epoch

    def set_epoch_history(self, entries: list[tuple[int, int]], leader_epoch: int) -> None:
        """Cluster mode: the history as the log of record holds it, this broker leading at
        `leader_epoch` from the log end if the history lacks it (saved here with the next append)."""
        self.epochs = LeaderEpochCache(entries)
        self.epochs.truncate_from_start(self.log_start_offset)
        self.epochs.assign(leader_epoch, self.log_end_offset)
        self.leader_epoch = leader_epoch
        self._epochs_unsaved = True

    @property
    def next_leader_epoch(self) -> int:
        """The epoch the next start leads this log at (lead_next_epoch): the one after the newest
        saved, or the current one when nothing was appended in it (the clean shutdown's record,
        storage/log_dir_epochs.py)."""
        return max(self._newest_saved_epoch + 1, self.leader_epoch)

    def _save_epochs(self) -> None:
        self._epochs_unsaved = not write_epoch_checkpoint(self.dir, self.epochs, durable=self.durable)
        if not self._epochs_unsaved:
            self._newest_saved_epoch = max(self._newest_saved_epoch, self.epochs.latest_epoch)

    def _advance_recovery_point(self) -> None:
        """Persist the recovery point (oldest unsynced sealed segment, else the active one). No
        file means "the active segment" to the loader, so a log without one (a new log) writes
        none until its recovery point falls behind its active segment."""
        rp = self._unsynced_sealed[0].base_offset if self._unsynced_sealed else self._segments[-1].base_offset
        if rp == self._recovery_point or (self._recovery_point is None and rp == self._segments[-1].base_offset):
            return
        if write_recovery_point(self.dir, rp):
            self._recovery_point = rp

    def close(self) -> None:
        """Flush everything, save producer state and close all file descriptors."""
        if self._closed:
            return
        for seg in self._segments:
            seg.close()
        self._sync_dir()
        self._unsynced_sealed.clear()
        self._advance_recovery_point()
        write_producer_snapshot(self.dir, self.log_end_offset, self._producers)
        self._closed = True

    def delete(self) -> None:
        """Close and remove the partition directory (DeleteTopics)."""
        if not self._closed:
            for seg in self._segments:
                seg.forget_files()
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
        Base offsets and partitionLeaderEpoch (`leader_epoch`, else the epoch this log leads at,
        when it leads at one) are patched in the written bytes, not in `records`. Applies
        idempotent-producer rules (a retried batch returns the original offsets with
        duplicate=True; errors raise ProduceError), rolls the segment first when needed, writes
        with one writev and fsyncs when `sync` is set or flush_interval_messages is reached.
        Raises InvalidBatch for bad input.

        Atomic: batch, indexes, log end offset and producer state advance together or not at
        all. A failed write or fsync is undone back to the previous log end and raised as
        StorageError (storage/log_dir.py decides whether the directory stays online).
        """
        if leader_epoch is None and self.leader_epoch >= 0:
            leader_epoch = self.leader_epoch
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
        after: "tuple[ProducerStateManager, int] | None" = None,
    ) -> "PreparedAppend | AppendResult":
        """The first half of append(): validation, producer rules and offset assignment, with
        no I/O (storage/log_append.py). A duplicate gives its original AppendResult. The PostgreSQL
        engine stores `PreparedAppend.data()` before apply_append() writes it here; nothing may be
        appended in between (apply_append checks). `replica`: batches copied from the log of record
        (already accepted there), so producer rules are not judged again, only recorded. `after`:
        (producer state, log end) of appends decided but not yet applied (the PostgreSQL engine's
        pipeline): this one is decided as if they were in the log."""
        self._check_open()
        producers, end = after if after is not None else (self._producers, self.log_end_offset)
        return prepare_append(records, validated, producers, self.config.max_message_bytes,
                              self.log_start_offset, end, leader_epoch=leader_epoch, replica=replica)

    def apply_append(self, prepared: "PreparedAppend", now_ms: int, *, sync: bool = False) -> AppendResult:
        """The second half of append(): roll if due, write, index, fsync when asked, and only then
        move the log end offset and commit the producer state. Atomic, as append()."""
        segment = self._segment_for(prepared, now_ms)
        mark = segment.mark()
        try:
            segment.append(prepared.parts, prepared.size, prepared.batches, now_ms)
            if sync or self._unflushed_messages + prepared.messages >= self.config.flush_interval_messages:
                self.flush()  # counts from zero again
            else:
                self._unflushed_messages += prepared.messages
        except OSError as exc:
            self._undo(segment, mark, exc)
        return self._advance(prepared, now_ms)

    def _segment_for(self, prepared: PreparedAppend, now_ms: int) -> Segment:
        """The segment a prepared append goes to (the active one, after a roll if one is due)."""
        if prepared.first != self.log_end_offset and not (prepared.replica and prepared.first > self.log_end_offset):
            raise ValueError(f"{self.dir}: an append prepared at offset {prepared.first} applied at "
                             f"{self.log_end_offset}")
        if self._pending is not None:
            raise ValueError(f"{self.dir}: an append while another awaits its fsync")
        self.log_dir.check()
        try:
            if should_roll(self._segments[-1], self.config, prepared.size, prepared.next_offset - 1, now_ms):
                self.roll(now_ms)
        except OSError as exc:  # roll() leaves the old active segment in place when it fails
            raise self.log_dir.failed(exc, self._append_what) from exc
        # A new epoch's first batch: its start is on disk before the batch is (a crash between the
        # two leaves an epoch whose start is the log end, which the next open cuts).
        if self.epochs.assign(prepared.leader_epoch, prepared.batches[0][2]) or self._epochs_unsaved:
            self._save_epochs()
        return self._segments[-1]

    def _undo(self, segment: Segment, mark: SegmentMark, exc: OSError) -> NoReturn:
        """Cut a failed append back to `mark` and raise it as StorageError (log_dir decides)."""
        try:
            segment.rollback(mark)
        except OSError as undo:
            log.error("%s: undoing a failed append failed: %s", self.dir, undo)
            raise self.log_dir.failed(exc, self._append_what, undone=False) from exc
        raise self.log_dir.failed(exc, self._append_what) from exc

    def _advance(self, prepared: PreparedAppend, now_ms: int) -> AppendResult:
        """Only now, with the batch written (and fsynced when asked), does the log end move."""
        self.log_end_offset = prepared.next_offset
        if prepared.pending:
            aborted = self._producers.commit(prepared.pending, now_ms)
            if aborted:
                try:
                    self._txns.record(aborted, self._bases)
                except OSError as exc:  # the scan past the recovery point derives it again
                    log.error("%s: writing the aborted-transaction index: %s", self.dir, exc)
        self.log_dir.succeeded()
        return AppendResult(prepared.first, prepared.next_offset - 1, -1, self.log_start_offset)

    @property
    def _append_what(self) -> str:
        """How a failed append is named in errors and log lines (built only when one fails)."""
        return f"append to {self.topic}-{self.partition}"

    def roll(self, now_ms: int | None = None) -> None:
        """Seal the active segment and start a new one at log_end_offset; no-op if empty.

        The sealed segment is not fsynced here (it stays below the recovery point until the
        next flush() or roll), so rolling costs no fsync of fresh data on the produce path.
        """
        self._check_open()
        old = self._segments[-1]
        if old.size == 0 or self._pending is not None:  # sealing would cut off the batch awaiting its fsync
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
        self._dir_unsynced = False
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
        self._flush_sealed()
        active = self._segments[-1]
        if active.dirty:
            active.flush()
        self._unflushed_messages = 0

    def _flush_sealed(self) -> None:
        """fsync a new log's directory and the rolled segments not yet fsynced (log and indexes);
        the recovery point advances."""
        if self._dir_unsynced:
            self._sync_dir()
        if self._unsynced_sealed:
            for seg in self._unsynced_sealed:
                seg.flush()
            self._unsynced_sealed.clear()
            self._advance_recovery_point()

    def _sync_dir(self) -> None:
        """fsync the partition directory of a new log once (its segment files' entries)."""
        if self._dir_unsynced:
            _fsync_dir(self.dir)
            self._dir_unsynced = False

    # ----------------------------------------------------------------- reads

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> bytes:
        """Whole batches from the one containing `offset`, at most `max_bytes` in total.

        If the first batch alone is larger than max_bytes it is returned whole when
        min_one_batch (so consumers make progress), else b"". Continues into following segments
        while budget remains. offset == log_end_offset gives b"". Raises OffsetOutOfRange.
        """
        return pread_all(self._read_ranges(offset, max_bytes, min_one_batch))

    def read_file(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
                  min_file_bytes: int = 0) -> bytes | FileRecords:
        """What `read` returns, as file ranges held open by descriptors of their own (a Fetch
        sends them with sendfile); plain bytes when there are fewer than `min_file_bytes` (a
        pread is cheaper than a descriptor and a syscall per range) or when FileRecords may hold
        no more descriptors (its budget, or EMFILE)."""
        return ranges_data(self._read_ranges(offset, max_bytes, min_one_batch), min_file_bytes)

    def read_committed(self, offset: int, max_bytes: int, *, min_one_batch: bool = True,
                       min_file_bytes: int | None = None) -> tuple[bytes | FileRecords, list[tuple[int, int]]]:
        """A read_committed Fetch (A9): whole batches from `offset` below the last stable offset,
        and the aborted transactions overlapping them (`aborted_transactions` up to the end of
        the returned data). As `read_file` when `min_file_bytes` is given, else as `read`."""
        ranges = self._read_ranges(offset, max_bytes, min_one_batch, self.last_stable_offset)
        data = ranges_data(ranges, min_file_bytes) if min_file_bytes is not None else pread_all(ranges)
        if not ranges:
            return data, []
        return data, self.aborted_transactions(offset, ranges_end_offset(ranges, self._bases, self.log_end_offset))

    def _read_ranges(self, offset: int, max_bytes: int, min_one_batch: bool,
                     max_offset: int | None = None) -> list[tuple[Segment, int, int]]:
        """(segment, position, length) of the whole batches to read (storage/log_read.py)."""
        self._check_open()
        return read_ranges(self._segments, self._bases, offset, max_bytes, min_one_batch,
                           self.log_start_offset, self.log_end_offset, max_offset)

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >= ts (ListOffsets), None
        when no record qualifies (storage/time_lookup.py). Raises InvalidBatch."""
        self._check_open()
        return offset_for_timestamp(self._segments, self.log_start_offset, ts)

    def max_timestamp(self) -> tuple[int, int]:
        """(offset, timestamp) of the record with the largest timestamp, the earliest on ties
        (ListOffsets -3, KIP-734); (-1, -1) when none (storage/time_lookup.py)."""
        self._check_open()
        return max_timestamp(self._segments, self.log_start_offset)

    # ----------------------------------------------------------------- retention

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest segments past retention_ms (by largest timestamp) or while the log
        exceeds retention_bytes (storage/log_retention.py); advance log_start_offset; return how
        many were deleted.

        Like Kafka, an expired active segment is rolled first and deleted too (the log then
        stays empty at its log end offset). No deletion when cleanup_policy lacks "delete".
        Also expires idle producer ids (producer_id_expiration_ms).
        """
        self._check_open()
        self._producers.expire(now_ms, self.config.producer_id_expiration_ms)
        if not self.config.deletes:
            return 0
        deleted = retention_deletions(self._segments, self.config, now_ms)
        for _ in range(deleted):
            self.delete_oldest_segment(now_ms)
        if deleted:
            log.info(
                "retention deleted %d segment(s) of %s-%d; log start offset now %d",
                deleted,
                self.topic,
                self.partition,
                self.log_start_offset,
            )
        return deleted

    def delete_oldest_segment(self, now_ms: int) -> None:
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
        if self.epochs.truncate_from_start(self.log_start_offset):
            self._save_epochs()
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
        had_epochs = bool(self.epochs.entries)
        self.epochs.clear()
        if self.epochs.assign(self.leader_epoch, offset) or had_epochs:
            self._save_epochs()
        _fsync_dir(self.dir)
        self._advance_recovery_point()

    # ----------------------------------------------------------------- cleaner swap

    def replace_segments(self, old: list[Segment], new_bases: list[int]) -> list[Segment]:
        """Swap the contiguous run `old` of sealed segments for cleaned ones (the log cleaner).

        The new segments must already be on disk, fsynced, as `<base>.log.cleaned` with
        `.index.cleaned` / `.timeindex.cleaned`, for each base in `new_bases` (strictly
        increasing, the first equal to old[0]'s base so the log start offset is kept, all below
        the base of the segment after the run). Their records must be exactly the surviving
        records of `old`, with their original offsets. Crash-safe (storage/segment_swap.py):
        after the manifest is durable the swap always completes, if need be at the next open().
        Raises ValueError, touching nothing, when `old` is not a run of this log's sealed
        segments. Must run on the thread that owns the log. Returns the new segments.
        """
        self._check_open()
        i = check_replacement(self.dir, self._segments, old, new_bases)
        n = len(old)
        next_base = self._segments[i + n].base_offset
        old_bases = [s.base_offset for s in old]
        # The moved .txnindex entries travel with the swap as `.txnindex.cleaned` files.
        new_entries = self._txns.replace(old_bases, list(new_bases), CLEANED_SUFFIX)
        commit_swap(self.dir, old_bases, list(new_bases))
        for seg in old:  # their files are gone (a new segment may reuse a name): close only
            seg.forget_files()
        nexts = list(new_bases[1:]) + [next_base]
        new = [Segment.open_sealed(self.dir, b, self.config, nb) for b, nb in zip(new_bases, nexts)]
        self._segments[i : i + n] = new
        self._bases = [s.base_offset for s in self._segments]
        self._unsynced_sealed = [s for s in self._unsynced_sealed if all(s is not o for o in old)]
        self._txns.swapped(old_bases, new_entries)
        self._layout_version += 1
        self._advance_recovery_point()
        return new
