"""Group commit across partitions: the fsyncs that make coordinator writes durable run on a pool of
threads, not on the event loop.

A coordinator shard (`__consumer_offsets` or `__transaction_state` partition) writes its queued
results as one batch and may answer them only once that batch is fdatasync'ed. Done on the event
loop, those fsyncs queue behind each other (one per partition a turn wrote to) while every other
request waits. Here the batch is written on the loop (`PartitionLog.begin_append`: in the file, not
yet in the log), its fdatasync runs on a thread (os.fdatasync releases the GIL), and the log takes
it in when the fsync returns (`finish_append`). So the fsyncs of all the partitions written in a
turn run at once, and meanwhile the loop serves Fetch, Metadata, Produce and the next commits. Per
partition there is one fsync in flight: the shard's runtime queues what arrives meanwhile and
writes it as the next batch, covered by the next fsync (classic group commit). A failed fsync cuts
the batch off and fails its requests (storage/log_dir.py takes the directory offline); a batch is
acknowledged only after its own fsync, and never before an earlier batch of its partition.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from ..storage.log_append import AppendResult
from ..storage.partition_log import PartitionLog

__all__ = ["GroupCommit"]

#: fsyncs in flight at once: more partitions than this wait for a free thread. The disk, not the
#: thread count, is the limit: on this project's VM 50 fdatasyncs take ~4 ms with 8 to 50 threads.
FSYNC_THREADS = 16


class GroupCommit:
    """Durable appends to the local partition logs of the coordinators, their fsyncs on threads."""

    def __init__(self, threads: int = FSYNC_THREADS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="fsync")

    async def append(self, plog: PartitionLog, records: bytes, now_ms: int) -> AppendResult:
        """`plog.append(records, now_ms, sync=True)` with the fsync off the event loop; raises what
        append raises (StorageError when the write or its fsync failed: nothing was appended)."""
        pending = plog.begin_append(records, now_ms)
        if isinstance(pending, AppendResult):
            return pending
        try:
            await asyncio.get_running_loop().run_in_executor(self._pool, pending.sync)
        except OSError as exc:
            return plog.finish_append(pending, exc)
        except asyncio.CancelledError:  # the loop is shutting down: the batch is not acknowledged
            plog.abandon_append(pending)
            raise
        return plog.finish_append(pending)

    def stop(self) -> None:
        """Let the fsyncs in flight finish (shutdown; their appends are not taken in afterwards)."""
        self._pool.shutdown(wait=True)
