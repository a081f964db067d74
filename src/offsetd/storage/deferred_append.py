"""Appends whose fsync the caller runs elsewhere (group commit, server/group_commit.py): the batch
is written to its segment on the owning thread, fdatasync'ed off it, and only then taken into the
log. Until then reads, the log end and the indexes do not see it and no other append or roll runs.

`DeferredAppends` is a base of PartitionLog (storage/partition_log.py): it uses the log's append
steps (`prepare_append`, `_segment_for`, `_flush_sealed`, `_undo`, `_advance`) and its `_pending`.
The fsync is given the segment's pooled descriptor (storage/file_pool.py), which the owning thread
may close at its next pool call: an fsync elsewhere needs its own (a native AIO request holds the
kernel's reference once submitted; a thread needs an `os.dup`).
"""

from __future__ import annotations

import logging

from offsetd.records.batch import BatchHeader
from offsetd.storage.log_append import AppendResult, PreparedAppend
from offsetd.storage.segment import Segment

__all__ = ["DeferredAppends", "PendingAppend"]

log = logging.getLogger("offsetd.storage")


class PendingAppend:
    """An append written to its segment but not yet in the log (PartitionLog.begin_append)."""

    __slots__ = ("prepared", "segment", "now_ms")

    def __init__(self, prepared: PreparedAppend, segment: Segment, now_ms: int) -> None:
        self.prepared = prepared
        self.segment = segment
        self.now_ms = now_ms


class DeferredAppends:
    """PartitionLog's begin_append, finish_append and abandon_append (see the module's docstring)."""

    _pending: PendingAppend | None  # begin_append's batch, awaiting its fsync (PartitionLog.__init__)

    def begin_append(self, records: bytes | bytearray | memoryview, now_ms: int,
                     validated: "list[BatchHeader] | None" = None) -> "PendingAppend | AppendResult":
        """append(sync=True) up to its fsync, which the caller runs (on the descriptor of
        `pending.segment.file`, see the module's docstring) and then hands to finish_append. Until
        then the batch is in the file but not in the log: reads, the log end and the indexes do not
        see it, and no other append or roll may run. The leader epoch is patched and a new epoch
        checkpointed as append() does. A duplicate (idempotent retry) gives its AppendResult at once.
        `validated`: as for append()."""
        prepared = self.prepare_append(records, validated,
                                       leader_epoch=self.leader_epoch if self.leader_epoch >= 0 else None)
        if isinstance(prepared, AppendResult):
            return prepared
        segment = self._segment_for(prepared, now_ms)
        try:
            self._flush_sealed()  # and a new log's directory: its segment's entry is durable too
            segment.write_ahead(prepared.parts, prepared.size)
            segment.preallocate(segment.size + prepared.size)  # zeros ahead, made durable by the same fsync
        except OSError as exc:
            self._undo(segment, segment.mark(), exc)
        self._pending = PendingAppend(prepared, segment, now_ms)
        return self._pending

    def finish_append(self, pending: "PendingAppend", error: OSError | None = None, *,
                      segment_synced: bool = True) -> AppendResult:
        """The rest of begin_append once its fsync returned, or raised `error` (or an fsync of the
        file by the pool, when it closed the descriptor meanwhile, failed): the batch joins the log
        and the log end moves, or it is cut off and StorageError raised (as append).
        `segment_synced` False: a copy was made durable elsewhere (the coordinators' journal,
        storage/coordinator_journal.py) and the segment file stays to be fsynced."""
        if pending is not self._pending:
            raise ValueError(f"{self.dir}: finishing an append that is not the one awaiting its fsync")
        self._pending = None
        self._check_open()  # closed meanwhile: close() cut the batch off with the preallocated zeros
        segment, prepared = pending.segment, pending.prepared
        mark = segment.mark()
        try:
            if error is None and segment.file.error is not None:  # never acknowledge a failed sync
                error, segment.file.error = segment.file.error, None
            if error is not None:
                raise error
            segment.add_written(prepared.size, prepared.batches, pending.now_ms)
        except OSError as exc:
            self._undo(segment, mark, exc)
        if segment_synced:
            segment.dirty = False  # the fsync began after every write to the file
        self._unflushed_messages = 0
        return self._advance(prepared, pending.now_ms)

    def abandon_append(self, pending: "PendingAppend") -> None:
        """Drop begin_append's batch whose fsync will not be waited for (shutdown): cut it off."""
        if pending is self._pending:
            self._pending = None
            try:
                pending.segment.discard_ahead()
            except OSError as exc:  # beyond the segment's size: the next append overwrites it
                log.warning("%s: cutting off an abandoned append: %s", self.dir, exc)
