"""Runs a sans-IO transaction coordinator shard against its `__transaction_state` partition.

The same shape as coordinator_runtime.ShardRuntime: results queue up while a write is in flight and
go out as one record batch (append, fsync off the loop through server/group_commit.py, replay,
then answer); loading replays the partition.
What is particular to transactions: a result may carry marker jobs (reference A7). They run once
the Prepare* record that asked for them is durable — after the EndTxn answer went out. The shard
installs Complete* at once, so the id's next transaction does not wait for the markers; but until
every partition holds its marker no record of the id is appended (it is held back, the other ids'
records go on): the log never shows the transaction complete, or the next one begun, before its
markers are durable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

from ..coordinator.write_errors import NOT_LEADER_OR_FOLLOWER, CoordinatorWriteError
from ..records.batch import build_coordinator_batch, decode_records, iter_batches, parse_header
from ..records.transaction_log import decode_key, encode_key
from ..storage.partition_log import PartitionLog
from ..transaction.result import MarkerJob, Record, TxnResult
from ..transaction.shard import TransactionCoordinatorShard
from .coordinator_runtime import LATER, ShardState, append_then, deliver
from .group_commit import GroupCommit

log = logging.getLogger("offsetd.transactions")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # transaction.state.log.load.buffer.size
# How long records installed already (Complete*) wait for another write of the partition to be
# appended with (usually the id's next transaction's first write, which supersedes them).
APPLIED_LINGER_S = 0.01
# A marker job that raised is run again after this long (its transactional id's records wait).
MARKERS_RETRY_S = 1.0

# Runs one marker job to completion: every partition written, or stopped early when the second
# argument says this broker no longer coordinates the transaction (server/transaction_markers.py).
# None: every marker was written at once; else an awaitable of the rest.
MarkerRunner = Callable[[MarkerJob, Callable[[], bool]], "Awaitable[None] | None"]


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
        self._linger: asyncio.TimerHandle | None = None  # writes applied records (Complete*) alone
        # encoded transactional id -> its markers in flight: Complete* is installed, but no
        # record of the id may reach the log before every marker is (see _start_markers)
        self._holds: dict[bytes, asyncio.Future[None]] = {}
        self._held_back: list[TxnResult] = []  # queued results of held ids, in queue order

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

    def changed(self, transactional_id: str, timeout_s: float) -> "asyncio.Future[None]":
        """Resolves when a record of `transactional_id` is next replayed (its state moved on), the
        shard is unloaded, or after `timeout_s`."""
        loop = asyncio.get_running_loop()
        watcher: asyncio.Future[None] = loop.create_future()
        self._watchers.setdefault(transactional_id, []).append(watcher)
        timer = loop.call_later(timeout_s, _settle, watcher)
        watcher.add_done_callback(lambda _: timer.cancel())
        return watcher

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
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        self._holds.clear()
        queued, self._queue, self._held_back = self._held_back + self._queue, [], []
        _fail(queued, CoordinatorWriteError(NOT_LEADER_OR_FOLLOWER, "the coordinator moved to another broker"))
        self.shard.reset()

    def stop(self) -> None:
        """Shutdown: write what lingers (Complete*, no fsync), stop the timers."""
        self._cancel_timer()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
            if not self._writing and self._queue:
                self._write_queued(linger=False)

    # ------------------------------------------------------------------------ writes

    def submit(self, result: TxnResult) -> None:
        """Queue a result for durability, or complete it at once when it writes nothing. Records
        already installed (Complete*) wait up to APPLIED_LINGER_S for a write to go with."""
        if not result.records:
            deliver(result)
            self._markers_after_answers(result.markers)
        else:
            self._queue.append(result)
            if not self._writing:
                self._write_queued()
        self._reschedule()

    def _write_lingering(self) -> None:
        self._linger = None
        if not self._writing and self._queue:
            self._write_queued(linger=False)

    def _write_queued(self, linger: bool = True) -> None:
        """Write what is queued as one batch, and what queues up meanwhile as the next: a chain
        of callbacks, no task. An append that completes at once (no fsync) is finished here and
        the next batch written; one awaiting its fsync goes on in _written, called from the
        fsync's completion. A queue of applied results only (Complete*) waits, with `linger`, up
        to APPLIED_LINGER_S for a write to go with; results of an id whose markers are not all in
        are held back until they are."""
        self._writing = True
        try:
            while self._queue:
                if linger and all(queued.applied for queued in self._queue):
                    if self._linger is None:
                        self._linger = asyncio.get_running_loop().call_later(APPLIED_LINGER_S, self._write_lingering)
                    break
                linger = True
                if self._holds:
                    self._hold_back()
                    if not self._queue:
                        break
                if self._linger is not None:  # what lingers goes with this batch
                    self._linger.cancel()
                    self._linger = None
                batch, self._queue = self._queue, []
                if not self._write(batch):
                    return  # in flight, or a rebuild from the log owns the writer
        except BaseException:
            self._writing = False
            raise
        self._writing = False

    def _hold_back(self) -> None:
        """Move the queued results with a record of a held id (its markers not all in) aside;
        the rest is written now. A later result of a held id is held back too, so each id's
        records keep their order."""
        holds = self._holds
        kept: list[TxnResult] = []
        for result in self._queue:
            if any(key in holds for key, _ in result.records):
                self._held_back.append(result)
            else:
                kept.append(result)
        self._queue = kept

    def _released(self, _held: "asyncio.Future[None]") -> None:
        """A hold ended: what was held back goes first in the queue (a result of an id still
        held is held back again)."""
        if self._held_back:
            self._queue = self._held_back + self._queue
            self._held_back = []
            if not self._writing:
                self._write_queued()

    def _write(self, batch: list[TxnResult]) -> bool:
        """Append one batch; True when it is finished already (no fsync, or it failed at once)."""
        records = _records(batch)
        generation = self.generation
        now = self.clock()
        data = build_coordinator_batch(records, now)
        outcome = append_then(self.plog, data, now, self.fsync and any(result.durable for result in batch),
                              self.group_commit, [parse_header(data)],
                              lambda done: self._written(batch, records, generation, done))
        if outcome is LATER:
            return False  # _written goes on from the append's completion
        return self._finish(batch, records, generation, outcome)

    def _written(self, batch: list[TxnResult], records: list[Record], generation: int, outcome: object) -> None:
        """A batch's append completed (`outcome`: its AppendResult or the exception): finish it
        and write what queued up meanwhile."""
        try:
            go_on = self._finish(batch, records, generation, outcome)
        except BaseException:
            self._writing = False
            raise
        if go_on:
            self._write_queued()

    def _finish(self, batch: list[TxnResult], records: list[Record], generation: int, outcome: object) -> bool:
        """Replay a durable batch and answer its requests, or fail them and everything queued
        when the write failed; False when the writer must stop (a rebuild from the log owns it)."""
        if isinstance(outcome, BaseException):
            failed, self._queue, self._held_back = batch + self._held_back + self._queue, [], []
            _fail(failed, CoordinatorWriteError.from_exception(outcome))
            if generation != self.generation or self.state is ShardState.UNLOADED:
                return True
            if not self.plog.leader:
                self.unload()
                return True
            log.error("__transaction_state-%d: write failed: %s; rebuilding its transactions from the log",
                      self.partition, outcome)
            self.state = ShardState.LOADING  # answered COORDINATOR_LOAD_IN_PROGRESS until rebuilt
            self._holds.clear()
            asyncio.ensure_future(self._reload())  # memory is a replay of the log: undo what the write decided
            return False
        if generation != self.generation:
            _deliver_all(batch)  # durable, but this broker no longer coordinates them
            return True
        replay = self.shard.replay
        for result in batch:
            if not result.applied:
                for key, value in result.records:
                    replay(key, value)
        if self._watchers:
            self._wake({decode_key(key) for key, _ in records})
        for result in batch:
            deliver(result)
            if result.markers:
                self._markers_after_answers(result.markers)
        self._reschedule()
        return True

    async def _reload(self) -> None:
        """After a failed write: replay the log into the emptied shard, then write what queued
        up meanwhile (the writer stays busy until then)."""
        try:
            await self.load()
        finally:
            self._writing = False
            if self._queue:
                self._write_queued()

    # ----------------------------------------------------------------------- markers

    def _markers_after_answers(self, jobs: list[MarkerJob]) -> None:
        """Start the markers once the answers just delivered are written: a token's callbacks
        were scheduled first, so the EndTxn answer goes out before the markers' writes (their
        local appends and the `__consumer_offsets` marker's round took ~0.2 ms of the loop before
        it). Nothing of the id can be written meanwhile: it is still in Prepare* until
        _start_markers installs Complete*."""
        if jobs:
            asyncio.get_running_loop().call_soon(self._start_current_markers, jobs, self.generation)

    def _start_current_markers(self, jobs: list[MarkerJob], generation: int) -> None:
        if generation == self.generation and self.state is ShardState.ACTIVE:
            self._start_markers(jobs)  # else the next owner loads Prepare* and sends them again

    def _start_markers(self, jobs: list[MarkerJob]) -> None:
        """Write each job's markers and let the shard complete its transaction (Complete*) at
        once: the id's next transaction need not wait for the markers' fsyncs, which overlap with
        the client's next requests. Until every marker is in, no record of the id reaches the log
        (`_holds`): a power loss leaves Prepare* there (its markers are sent again) or what
        follows the markers, never the next transaction's state without them."""
        generation = self.generation
        for job in jobs:
            try:
                pending = self.markers(job, lambda: generation == self.generation and self.plog.leader)
            except Exception:
                log.exception("__transaction_state-%d: markers of %s failed", self.partition, job.transactional_id)
                continue
            if pending is not None:
                key = encode_key(job.transactional_id)
                held = self._holds[key] = asyncio.ensure_future(pending)
                held.add_done_callback(lambda done, job=job, key=key: self._markers_done(job, generation, key, done))  # type: ignore[misc]
                held.add_done_callback(self._released)
            self._markers_written(job, generation)

    def _markers_done(self, job: MarkerJob, generation: int, key: bytes, done: "asyncio.Future[None]") -> None:
        """The markers of a job are in (or this broker stopped coordinating it): release the id's
        records. A job that failed is run again after a second; its records wait meanwhile."""
        if done.cancelled() or generation != self.generation:
            return
        if done.exception() is not None:
            log.error("__transaction_state-%d: markers of %s failed; retrying", self.partition,
                      job.transactional_id, exc_info=done.exception())
            asyncio.get_running_loop().call_later(MARKERS_RETRY_S, self._retry_markers, job, generation)
            return
        if self._holds.get(key) is done:
            del self._holds[key]

    def _retry_markers(self, job: MarkerJob, generation: int) -> None:
        if generation == self.generation and self.state is ShardState.ACTIVE:
            self._start_markers([job])  # Complete* is installed already: markers_written writes nothing

    def _markers_written(self, job: MarkerJob, generation: int) -> None:
        if generation != self.generation or self.state is not ShardState.ACTIVE:
            return  # the next owner loads Prepare* and sends the markers again
        self.submit(self.shard.markers_written(job.transactional_id, job.producer_id, job.producer_epoch,
                                               self.clock()))
        if self._watchers:  # Complete* is installed already: a request held for it goes on
            self._wake((job.transactional_id,))

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


def _records(batch: list[TxnResult]) -> list[Record]:
    """The records of a batch in order, less each applied record (Complete*) that a later
    record of the batch for the same transactional id supersedes."""
    records = [record for result in batch for record in result.records]
    if len(records) < 2 or not any(result.applied for result in batch):
        return records
    later: set[bytes] = set()
    kept: list[Record] = []
    for result in reversed(batch):
        for key, value in reversed(result.records):
            if not (result.applied and key in later):
                kept.append((key, value))
            later.add(key)
    kept.reverse()
    return kept


def _settle(watcher: "asyncio.Future[None]") -> None:
    if not watcher.done():
        watcher.set_result(None)


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


