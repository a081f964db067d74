"""Group commit across partitions: the fsyncs that make coordinator writes durable run off the
event loop, all at once.

A coordinator shard (`__consumer_offsets` or `__transaction_state` partition) writes its queued
results as one batch and may answer them only once that batch is fdatasync'ed. Done on the event
loop, those fsyncs queue behind each other (one per partition a turn wrote to) while every other
request waits. Here the batch is written on the loop (`PartitionLog.begin_append`: in the file, not
yet in the log), its fdatasync runs off the loop, and the log takes it in when the fsync returns
(`finish_append`). So the fsyncs of all the partitions written in a turn run at once, and meanwhile
the loop serves Fetch, Metadata, Produce and the next commits. The fsync goes through Linux native
AIO (server/aio_fsync.py): the kernel's workers run it and no Python thread competes with the loop
for the GIL; where AIO is refused, a pool of threads runs it instead. Per partition there is one
fsync in flight: the shard's runtime queues what arrives meanwhile and writes it as the next batch,
covered by the next fsync (classic group commit). A failed fsync cuts the batch off and fails its
requests (storage/log_dir.py takes the directory offline); a batch is acknowledged only after its
own fsync, and never before an earlier batch of its partition.

With the coordinators' journal (`journal`, the default: server/journal_commit.py) what is fsynced
is not the batch's segment but the journal, which holds a copy of it: one fdatasync of one file
for every partition written meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from ..records.batch import BatchHeader
from ..storage.deferred_append import PendingAppend
from ..storage.log_append import AppendResult
from ..storage.partition_log import PartitionLog
from ..storage.segment import Segment
from .aio_fsync import AioFsync
from .journal_commit import JOURNAL_BYTES, Done, JournalCommit

__all__ = ["GroupCommit"]

log = logging.getLogger("offsetd.server")

#: fsyncs in flight at once on threads (where native AIO is not available): more partitions than
#: this wait for a free thread. On this project's VM 50 fdatasyncs take ~4 ms with 8 to 50 threads.
FSYNC_THREADS = 16


class GroupCommit:
    """Durable appends to the local partition logs of the coordinators, their fsyncs off the loop:
    through native AIO (server/aio_fsync.py) when `aio` and the kernel allows it, else on threads."""

    def __init__(self, threads: int = FSYNC_THREADS, *, aio: bool = True, journal: Path | None = None,
                 journal_bytes: int = JOURNAL_BYTES) -> None:
        """`journal`: the log directory whose coordinators' journal makes the appends durable
        (server/journal_commit.py), one fdatasync a round; None: each segment is fdatasync'ed."""
        self._aio: AioFsync | None = None
        if aio:
            try:
                self._aio = AioFsync()
            except OSError as exc:
                log.info("fsyncs of the coordinators on threads (native AIO: %s)", exc)
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self.journal = (JournalCommit(journal, self._sync, self._sync_segment, journal_bytes,
                                      self._aio.submit_write if self._aio is not None else None)
                        if journal is not None else None)

    async def append(self, plog: PartitionLog, records: bytes, now_ms: int,
                     validated: list[BatchHeader] | None = None) -> AppendResult:
        """`plog.append(records, now_ms, validated, sync=True)` with the fsync off the event loop;
        raises what append raises (StorageError when the write or its fsync failed: nothing was
        appended)."""
        pending = plog.begin_append(records, now_ms, validated)
        if isinstance(pending, AppendResult):
            return pending
        synced: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def settle(error: BaseException | None, segment_synced: bool) -> None:
            if synced.done():
                return
            if error is None:
                synced.set_result(segment_synced)
            else:
                synced.set_exception(error)
        try:
            self._submit(plog, pending, settle)
            segment_synced = await synced
        except OSError as exc:
            return plog.finish_append(pending, exc)
        except asyncio.CancelledError:  # the loop is shutting down: the batch is not acknowledged
            plog.abandon_append(pending)
            raise
        return plog.finish_append(pending, segment_synced=segment_synced)

    def start(self, plog: PartitionLog, records: bytes, now_ms: int,
              on_durable: Callable[[AppendResult | BaseException], None],
              validated: list[BatchHeader] | None = None) -> AppendResult | None:
        """append() without a coroutine, for a writer that is a chain of callbacks: the
        AppendResult at once for a duplicate (raises what begin_append raises), else None and
        later on_durable(the AppendResult, or the exception append() would have raised), called
        straight from the fsync's completion (native AIO; a thread's: one turn later).
        `validated`: the headers of the writer's own batches (as for PartitionLog.append), which
        are then not checked again."""
        pending = plog.begin_append(records, now_ms, validated)
        if isinstance(pending, AppendResult):
            return pending

        def finished(error: BaseException | None, segment_synced: bool) -> None:
            if isinstance(error, asyncio.CancelledError):  # shutting down: the batch is not acknowledged
                plog.abandon_append(pending)
                on_durable(error)
                return
            try:
                appended = plog.finish_append(pending, error if isinstance(error, OSError) else None,
                                              segment_synced=segment_synced)
            except Exception as exc:
                on_durable(exc)
                return
            on_durable(appended if error is None or isinstance(error, OSError) else error)

        try:
            self._submit(plog, pending, finished)
        except BaseException:
            plog.abandon_append(pending)
            raise
        return None

    def persist(self, plog: PartitionLog, batches: bytes, on_done: Callable[[BaseException | None], None]) -> None:
        """Make durable `batches` that `plog` has just appended without an fsync (a transaction's
        marker in a data partition, whose transaction's next record must not be durable before
        it): a copy in the journal's next round, restored at start-up if the segment lost it, or
        else an fdatasync of the segment. on_done(None, or the error) when it is."""
        segment = plog.active_segment
        if self.journal is not None:
            self.journal.submit_copy(plog.dir.name, segment, batches, lambda error, _synced: on_done(error))
        else:
            self._sync(segment.file.fileno(), on_done)

    def _submit(self, plog: PartitionLog, pending: PendingAppend, on_done: Done) -> None:
        """Make the pending batch durable: through the journal, else its segment's fdatasync."""
        if self.journal is not None:
            self.journal.submit(plog, pending, on_done)
        else:
            self._sync_segment(pending.segment, on_done)

    def _sync_segment(self, segment: Segment, on_done: Done) -> None:
        """Start the fdatasync of a pending batch's segment; on_done(None, or its exception; True)
        when it completes. The segment's descriptor is the file pool's, which the loop may close at
        any later pool call."""
        self._sync(segment.file.fileno(), lambda error: on_done(error, True))

    def _sync(self, fd: int, on_done: Callable[[BaseException | None], None]) -> None:
        """Start an fdatasync of `fd`; on_done(None, or its exception) when it completes: straight
        from native AIO's completion, or one turn after a thread ran it where AIO refuses it."""
        if self._aio is not None:
            try:
                self._aio.submit(fd, on_done)  # once submitted, the kernel holds its own reference
                return
            except OSError as exc:  # EAGAIN (the context is full), or a file AIO cannot sync
                log.debug("fsync on a thread: %s", exc)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="fsync")
        dup = os.dup(fd)  # the thread's own: the loop may close the pooled one meanwhile (an eviction)
        try:
            synced = asyncio.get_running_loop().run_in_executor(self._pool, _sync_and_close, dup)
        except BaseException:
            os.close(dup)
            raise
        synced.add_done_callback(
            lambda f: on_done(asyncio.CancelledError() if f.cancelled() else f.exception()))

    def stop(self) -> None:
        """Let the fsyncs in flight finish (shutdown; their appends are not taken in afterwards)."""
        if self.journal is not None:
            self.journal.close()
        if self._aio is not None:
            self._aio.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def _sync_and_close(fd: int) -> None:
    """fdatasync `fd` and close it (on a thread: a duplicate of the pooled descriptor of its own)."""
    try:
        getattr(os, "fdatasync", os.fsync)(fd)
    finally:
        os.close(fd)
