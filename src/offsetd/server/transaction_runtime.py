"""Runs a sans-IO transaction coordinator shard against its `__transaction_state` partition.

The same shape as coordinator_runtime.ShardRuntime: results queue up while a write is in flight and
go out as one record batch (append, fsync off the loop through server/group_commit.py, replay,
then answer); loading replays the partition.
What is particular to transactions: a result may carry marker jobs (reference A7). They run once
the Prepare* record that asked for them is durable — after the EndTxn answer went out — and when
every partition of the transaction holds its marker, the shard writes Complete*.
"""

from __future__ import annotations

import asyncio
import logging
from inspect import isawaitable
from typing import Awaitable, Callable, Iterable

from ..coordinator.write_errors import NOT_LEADER_OR_FOLLOWER, CoordinatorWriteError
from ..records.batch import build_batch, decode_records, iter_batches
from ..records.transaction_log import decode_key
from ..storage.partition_log import PartitionLog
from ..transaction.result import MarkerJob, TxnResult
from ..transaction.shard import TransactionCoordinatorShard
from .coordinator_runtime import ShardState, deliver, durable_append
from .group_commit import GroupCommit

log = logging.getLogger("offsetd.transactions")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # transaction.state.log.load.buffer.size

# Runs one marker job to completion: every partition written, or stopped early when the second
# argument says this broker no longer coordinates the transaction (server/transaction_markers.py).
MarkerRunner = Callable[[MarkerJob, Callable[[], bool]], Awaitable[None]]


class TxnShardRuntime:
    """One transaction coordinator shard, its log partition, write queue and timer."""

    def __init__(self, shard: TransactionCoordinatorShard, plog: PartitionLog, *, fsync: bool,
                 clock: Callable[[], int], markers: MarkerRunner, owned: bool = True,
                 group_commit: GroupCommit | None = None) -> None:
        self.shard = shard
        self.plog = plog
        self.fsync = fsync
        self.group_commit = group_commit  # as ShardRuntime's: fsyncs off the event loop
        self.clock = clock
        self.markers = markers
        self.state = ShardState.LOADING if owned else ShardState.UNLOADED
        self.generation = 0  # bumped by unload(): late completions must not touch the emptied shard
        self._queue: list[TxnResult] = []
        self._writing = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self._watchers: dict[str, list[asyncio.Future[None]]] = {}  # transactional id -> changed()

    @property
    def partition(self) -> int:
        return self.shard.partition

    # ---------------------------------------------------------------------- loading

    async def load(self) -> None:
        """Replay the partition from its start; the last record per transactional id wins (A9)."""
        if not self.plog.leader:
            self.state = ShardState.UNLOADED
            return
        self.state = ShardState.LOADING
        generation = self.generation
        self.shard.reset()
        offset, end = self.plog.log_start_offset, self.plog.log_end_offset
        try:
            while offset < end:
                chunk = self.plog.read(offset, LOAD_CHUNK_BYTES)
                if not chunk:
                    break
                for pos, header in iter_batches(chunk):
                    if not header.is_control:
                        for record in decode_records(chunk[pos:pos + header.size]):
                            self.shard.replay(record.key, record.value)
                    offset = header.base_offset + header.last_offset_delta + 1
                await asyncio.sleep(0)
                if generation != self.generation:
                    return
        except Exception as exc:
            if generation != self.generation:
                return
            self.state = ShardState.FAILED
            log.error("__transaction_state-%d: load failed near offset %d: %s; its transactions are not served",
                      self.partition, offset, exc)
            return
        self.shard.coordinator_epoch = max(self.plog.leader_epoch, 0)
        self.state = ShardState.ACTIVE
        self.submit(self.shard.on_loaded(self.clock()))

    def changed(self, transactional_id: str, timeout_s: float) -> Awaitable[None]:
        """Resolves when a record of `transactional_id` is next replayed (its state moved on), the
        shard is unloaded, or after `timeout_s`."""
        watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._watchers.setdefault(transactional_id, []).append(watcher)
        return asyncio.wait([watcher], timeout=timeout_s)

    def _wake(self, transactional_ids: Iterable[str | None]) -> None:
        for transactional_id in transactional_ids:
            for watcher in self._watchers.pop(transactional_id, ()):  # type: ignore[arg-type]
                if not watcher.done():
                    watcher.set_result(None)

    def unload(self) -> None:
        """Another broker coordinates these transactions now (cluster mode): fail queued work with
        NOT_COORDINATOR and forget the state (the new owner loads it from the log)."""
        self._wake(list(self._watchers))
        self.generation += 1
        self.state = ShardState.UNLOADED
        self._cancel_timer()
        queued, self._queue = self._queue, []
        _fail(queued, CoordinatorWriteError(NOT_LEADER_OR_FOLLOWER, "the coordinator moved to another broker"))
        self.shard.reset()

    def stop(self) -> None:
        self._cancel_timer()

    # ------------------------------------------------------------------------ writes

    def submit(self, result: TxnResult) -> None:
        """Queue a result for durability, or complete it at once when it writes nothing."""
        if not result.records:
            deliver(result)
            self._start_markers(result.markers)
        else:
            self._queue.append(result)
            if not self._writing:
                self._writing = True
                asyncio.ensure_future(self._write_loop())
        self._reschedule()

    async def _write_loop(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                records = [record for result in batch for record in result.records]
                generation = self.generation
                try:
                    now = self.clock()
                    appended = durable_append(self.plog, build_batch([(k, v, now, []) for k, v in records]), now,
                                              self.fsync and any(result.durable for result in batch),
                                              self.group_commit)
                    if isawaitable(appended):
                        await appended
                except Exception as exc:
                    error = CoordinatorWriteError.from_exception(exc)
                    failed, self._queue = batch + self._queue, []
                    _fail(failed, error)
                    if generation != self.generation or self.state is ShardState.UNLOADED:
                        continue
                    if not self.plog.leader:
                        self.unload()
                        continue
                    log.error("__transaction_state-%d: write failed: %s; rebuilding its transactions from the log",
                              self.partition, exc)
                    await self.load()  # memory is a replay of the log: undo what the failed write decided
                    continue
                if generation != self.generation:
                    _deliver_all(batch)  # durable, but this broker no longer coordinates them
                    continue
                for key, value in records:
                    self.shard.replay(key, value)
                if self._watchers:
                    self._wake({decode_key(key) for key, _ in records})
                for result in batch:
                    deliver(result)
                    self._start_markers(result.markers)
                self._reschedule()
        finally:
            self._writing = False

    # ----------------------------------------------------------------------- markers

    def _start_markers(self, jobs: list[MarkerJob]) -> None:
        for job in jobs:
            asyncio.ensure_future(self._run_markers(job, self.generation))

    async def _run_markers(self, job: MarkerJob, generation: int) -> None:
        """Write the job's markers, then let the shard complete the transaction (Complete*)."""
        try:
            await self.markers(job, lambda: generation == self.generation and self.plog.leader)
        except Exception:
            log.exception("__transaction_state-%d: markers of %s failed", self.partition, job.transactional_id)
            return
        if generation != self.generation or self.state is not ShardState.ACTIVE:
            return  # the next owner loads Prepare* and sends the markers again
        self.submit(self.shard.markers_written(job.transactional_id, job.producer_id, job.producer_epoch,
                                               self.clock()))

    # ------------------------------------------------------------------------ timers

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._timer_deadline = None

    def _reschedule(self) -> None:
        if self.state is not ShardState.ACTIVE:
            return
        deadline = self.shard.next_deadline()
        if deadline == self._timer_deadline:
            return
        self._cancel_timer()
        self._timer_deadline = deadline
        if deadline is not None:
            delay = max(deadline - self.clock(), 0) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = self._timer_deadline = None
        if self.state is ShardState.ACTIVE:
            self.submit(self.shard.fire_timers(self.clock()))


def _deliver_all(results: list[TxnResult]) -> None:
    for result in results:
        deliver(result)


def _fail(results: list[TxnResult], error: Exception) -> None:
    for result in results:
        for token, _ in result.completions:
            if not token.done():
                token.set_exception(error)


def state_error(runtime: "TxnShardRuntime | None") -> int:
    """Loading -> COORDINATOR_LOAD_IN_PROGRESS; failed, unowned or fenced -> NOT_COORDINATOR."""
    if runtime is None:
        return 15  # COORDINATOR_NOT_AVAILABLE: __transaction_state does not exist yet
    if runtime.state is ShardState.LOADING:
        return 14
    if runtime.state is not ShardState.ACTIVE or not runtime.plog.leader:
        return 16
    return 0


