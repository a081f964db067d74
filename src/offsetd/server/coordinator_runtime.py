"""Runs a sans-IO coordinator shard against its `__consumer_offsets` partition.

Write path (DESIGN.md "Request flow"): results queue up while a write is in flight; the writer
takes them all as one record batch (group commit), appends it, fsyncs it, replays the records and
only then completes the requests. A TxnOffsetCommit result is a transactional batch of its own, in
queue order among the plain ones (one append, one fsync for the drain); a transaction marker is
appended on its own (the log may refuse a stale one, KOC §5.4 / reference A7, which must not fail
the commits around it). The fsync runs off the loop (server/group_commit.py), so the fsyncs of all
the partitions a turn wrote to overlap and the loop keeps serving meanwhile; results that arrive
during it form the next batch. Appends to the partition happen only here. Loading replays the
partition in chunks, yielding to the loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from inspect import isawaitable
from typing import Any, Awaitable, Callable

from ..coordinator.result import CoordinatorResult
from ..coordinator.shard import GroupCoordinatorShard
from ..coordinator.write_errors import (
    COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, NOT_LEADER_OR_FOLLOWER, CoordinatorWriteError,
)
from ..records.batch import TRANSACTIONAL_MASK, BatchHeader, build_coordinator_batch, iter_batches, parse_header
from ..records.control import build_marker_batch
from ..records.offsets import encode_key, encode_value
from ..records.scan import scan_key_values
from ..storage.log_append import AppendResult
from ..storage.partition_log import PartitionLog
from ..storage.producer_state import ProduceError
from .group_commit import GroupCommit

log = logging.getLogger("offsetd.coordinator")

# What to replay once an append is durable, per batch in log order: (producer id, a marker's
# commit flag or None, the batch's encoded (key, value) records, and per result whose records they
# are, in order, (how many, replay them?)).
Plan = list[tuple[int, bool | None, list[tuple[bytes, bytes | None]], list[tuple[int, bool]]]]

LATER = object()  # append_then's answer when the append's outcome comes later, by callback

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size
SWEEP_CHUNK = 1000  # groups examined per event-loop turn by the retention sweep


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"
    UNLOADED = "unloaded"  # cluster mode: another broker owns this partition (NOT_COORDINATOR)


class ShardRuntime:
    """One shard, its log partition, its write queue and its timer."""

    def __init__(self, shard: GroupCoordinatorShard, plog: PartitionLog, *, fsync: bool,
                 clock: Callable[[], int], owned: bool = True, group_commit: GroupCommit | None = None) -> None:
        self.shard = shard
        self.plog = plog
        self.fsync = fsync
        # fsyncs off the event loop (the local engine); None: plog.append(sync=) does it (cluster
        # mode: PostgreSQL's COMMIT is the durability point)
        self.group_commit = group_commit
        self.clock = clock
        self.state = ShardState.LOADING if owned else ShardState.UNLOADED
        # Bumped by unload(): a write that was in flight then completes its requests (it is
        # durable) but must not replay into the emptied shard.
        self.generation = 0
        self.load_time_ms = 0.0
        self.records_loaded = 0
        self._queue: list[CoordinatorResult] = []
        self._drained: list[CoordinatorResult] = []  # taken from the queue, not written yet
        self._drained_generation = 0
        self._writing = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None
        self._sweeper: asyncio.Future[None] | None = None
        self._exclusive: list[tuple[Callable[[], Any], asyncio.Future[Any]]] = []

    # ---------------------------------------------------------------------- loading

    async def load(self) -> None:
        """Replay the partition from its start (§5.1); a corrupt record fails this shard only."""
        if not self.plog.leader:  # cluster mode: lost again before the load began
            self.state = ShardState.UNLOADED
            return
        self.state = ShardState.LOADING
        generation = self.generation
        started = time.perf_counter()
        offset, end = self.plog.log_start_offset, self.plog.log_end_offset
        shard, loaded = self.shard, 0
        replay = shard.table.replay  # what replay_raw calls, without its frame per record
        replay_batch = shard.replay_batch  # transactional records and markers (rare)
        try:
            while offset < end:
                chunk = self.plog.read(offset, LOAD_CHUNK_BYTES)
                if not chunk:
                    break
                seen, _ = scan_key_values(chunk, replay, replay_batch)
                loaded += seen
                last = offset
                for _, header in iter_batches(chunk):
                    last = header.base_offset + header.last_offset_delta
                offset = last + 1
                await asyncio.sleep(0)  # let other shards and clients run between chunks
                if generation != self.generation:
                    return  # unloaded meanwhile (cluster mode: the partition moved on)
        except Exception as exc:
            if generation != self.generation:
                return  # unloaded under the load (cluster mode: the partition is being claimed again)
            self.state = ShardState.FAILED
            log.error("__consumer_offsets-%d: load failed near offset %d: %s; its groups are not served",
                      shard.partition, offset, exc)
            return
        self.records_loaded = loaded
        if shard.skipped_records:
            log.warning("__consumer_offsets-%d: skipped %d records with unknown key versions",
                        shard.partition, shard.skipped_records)
        self.load_time_ms = (time.perf_counter() - started) * 1000
        log.log(logging.INFO if loaded else logging.DEBUG, "__consumer_offsets-%d: loaded %d records in %.3f s", shard.partition, loaded, self.load_time_ms / 1000)  # noqa: E501
        self.state = ShardState.ACTIVE
        self.submit(shard.on_loaded(self.clock()))
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_forever())

    async def _reload(self) -> None:
        """Replay the partition into an emptied shard: memory is a replay of the log, so this
        rolls back whatever a failed write's operations had changed (Kafka reverts to its last
        committed snapshot). Groups answer COORDINATOR_LOAD_IN_PROGRESS meanwhile."""
        self.state = ShardState.LOADING
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_deadline = None
        deliver(self.shard.abandon_parked(NOT_COORDINATOR))
        self.shard.reset()
        await self.load()

    # -------------------------------------------------------------------- expiration

    async def _sweep_forever(self) -> None:
        """The retention sweep (§2): first one interval after loading, then every interval."""
        interval = self.shard.config.retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("__consumer_offsets-%d: offsets expiration failed", self.shard.partition)

    async def sweep(self) -> None:
        """Expire offsets group by group, SWEEP_CHUNK groups per turn of the event loop."""
        if self.state is not ShardState.ACTIVE:  # never judge expiry on a half-replayed shard
            return
        group_ids = self.shard.group_ids()
        for start in range(0, len(group_ids), SWEEP_CHUNK):
            result = self.shard.expire_offsets(self.clock(), group_ids[start : start + SWEEP_CHUNK])
            if result.records:
                self.submit(result)
            await asyncio.sleep(0)

    def _fail(self, why: str) -> None:
        """Stop serving this shard's groups (NOT_COORDINATOR) until the broker restarts."""
        if self.state is ShardState.FAILED:
            return
        self.state = ShardState.FAILED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_deadline = None
        log.error("__consumer_offsets-%d: its groups are not served any more: %s", self.shard.partition, why)

    def unload(self) -> None:
        """This broker stops coordinating the partition's groups (cluster mode: it moved to
        another broker). Queued work fails with NOT_COORDINATOR, so clients look up the new
        coordinator; the groups are dropped from memory (the new owner loads them from the log)."""
        self.generation += 1
        self.state = ShardState.UNLOADED
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_deadline = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        queued, self._queue = self._queue, []
        error = CoordinatorWriteError(NOT_LEADER_OR_FOLLOWER, "the coordinator moved to another broker")
        for result in queued:
            for token, _ in result.completions:
                if not token.done():
                    token.set_exception(error)
        deliver(self.shard.abandon_parked(NOT_COORDINATOR))
        self.shard.reset()

    def stop(self) -> None:
        """Cancel the sweep and the timers (shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._timer is not None:
            self._timer.cancel()

    # ------------------------------------------------------------------------ writes

    def submit(self, result: CoordinatorResult) -> None:
        """Queue a result for durability, or complete it at once when it writes nothing."""
        if not result.records and not result.barrier and result.marker is None:
            deliver(result)
        else:
            self._queue.append(result)
            if not self._writing:  # the next turn writes what this one queued, as one batch
                self._writing = True
                asyncio.get_running_loop().call_soon(self._write_queued)
        self._reschedule()

    def exclusive(self, fn: Callable[[], Any]) -> "asyncio.Future[Any]":
        """Run fn() on the loop when no write of this shard is in flight (at once, or between two
        batches): the log cleaner swaps segments of this partition only then."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self._writing:
            self._exclusive.append((fn, future))
        else:
            _run_into(fn, future)
        return future

    def write_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int) -> Awaitable[None]:
        """Append a COMMIT or ABORT marker for `producer_id` (in order with this shard's other
        writes), fsync it, replay it (its pending offsets are promoted or dropped), then resolve.
        Fails with CoordinatorWriteError: 14 while loading, 16 when not coordinating, the
        log's remapped error (47, 52, ...) when it refuses the marker."""
        token = new_token()
        if self.state is not ShardState.ACTIVE or not self.plog.leader:
            code = COORDINATOR_LOAD_IN_PROGRESS if self.state is ShardState.LOADING else NOT_LEADER_OR_FOLLOWER
            token.set_exception(CoordinatorWriteError(code, f"__consumer_offsets-{self.shard.partition} is "
                                                            f"{self.state.value}: no marker written"))
            return token
        marker = CoordinatorResult(marker=(producer_id, producer_epoch, commit, coordinator_epoch))
        self.submit(marker.respond(token, _no_body))
        return token

    def _write_queued(self) -> None:
        """Write the queue unit by unit (a marker alone, else every result up to the next marker)
        until one must wait for its append: its completion carries on from there."""
        try:
            while True:
                while self._exclusive:
                    _run_into(*self._exclusive.pop(0))
                if not self._drained:
                    if not self._queue:
                        self._writing = False
                        return
                    self._drained, self._queue = self._queue, []
                    self._drained_generation = self.generation
                batch = self._drained
                cut = 1 if batch[0].marker is not None else next(
                    (i for i, r in enumerate(batch) if r.marker is not None), len(batch))
                unit, self._drained = batch[:cut], batch[cut:]
                if not self._write(unit, self._drained_generation):
                    return
        except BaseException:
            self._writing = False
            raise

    def _write(self, unit: list[CoordinatorResult], generation: int) -> bool:
        """Append the records of `unit` (plain results grouped into one batch, each
        transactional result and marker a batch of its own, in order); True when it is finished
        already, False when its completion goes on (`_written`) or a rebuild owns the writer."""
        now = self.clock()
        parts: list[bytes] = []
        plan: Plan = []  # what to replay once the append is durable
        plain: list[tuple[bytes, bytes | None]] = []
        plain_runs: list[tuple[int, bool]] = []
        for result in unit:
            if result.marker is not None:
                producer_id, producer_epoch, commit, coordinator_epoch = result.marker
                parts.append(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now))
                plan.append((producer_id, commit, [], []))
                continue
            encoded = _encoded(result.records)
            if result.producer_id < 0:
                plain.extend(encoded)
                plain_runs.append((len(encoded), result.replay))
                continue
            if encoded:
                if plain:
                    parts.append(build_coordinator_batch(plain, now))
                    plan.append((-1, None, plain, plain_runs))
                    plain, plain_runs = [], []
                parts.append(build_coordinator_batch(encoded, now, result.producer_id, result.producer_epoch,
                                                     TRANSACTIONAL_MASK))
                plan.append((result.producer_id, None, encoded, [(len(encoded), result.replay)]))
        if plain:
            parts.append(build_coordinator_batch(plain, now))
            plan.append((-1, None, plain, plain_runs))
        outcome: object = None
        if parts:
            # Atomic: batches and fsync, or nothing (undone back to the last good end).
            outcome = append_then(self.plog, b"".join(parts), now, self.fsync, self.group_commit,
                                  [parse_header(part) for part in parts],
                                  lambda done: self._written(unit, generation, plan, done))
            if outcome is LATER:
                return False  # _written goes on from the append's completion
        return self._finish(unit, generation, plan, outcome)

    def _written(self, unit: list[CoordinatorResult], generation: int, plan: Plan, outcome: object) -> None:
        """A unit's append completed (`outcome`: its AppendResult or the exception): finish it
        and write what queued up meanwhile."""
        try:
            go_on = self._finish(unit, generation, plan, outcome)
        except BaseException:
            self._writing = False
            raise
        if go_on:
            self._write_queued()

    def _finish(self, unit: list[CoordinatorResult], generation: int, plan: Plan, outcome: object) -> bool:
        """Replay a durable unit and answer its requests, or fail them and everything queued when
        the write failed (except a marker the log refused: only that one fails); False when the
        writer must stop (a rebuild from the log owns it and carries on)."""
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, Exception):  # cancelled: the loop is shutting down
                self._writing = False
                return False
            error = CoordinatorWriteError.from_exception(outcome)
            if unit[0].marker is not None and isinstance(outcome, ProduceError) and self.plog.leader:
                _fail(unit, error)  # refused before anything was written: nothing else changed
                return True
            # Every queued result was decided on state the failed write had changed.
            failed, self._queue, self._drained = unit + self._drained + self._queue, [], []
            _fail(failed, error)
            if self.plog.log_dir.offline:
                self._fail(f"its log directory is offline ({outcome})")
            elif generation != self.generation or self.state is ShardState.UNLOADED:
                pass  # unloaded meanwhile: nothing to rebuild here
            elif not self.plog.leader:  # fenced: another broker owns the partition now
                self.unload()
            else:
                log.error("__consumer_offsets-%d: write failed: %s; answered %d requests with error %d, "
                          "rebuilding its groups and offsets from the log", self.shard.partition, outcome,
                          sum(len(r.completions) for r in failed), error.error_code)
                asyncio.ensure_future(self._reload()).add_done_callback(lambda _: self._write_queued())
                return False
            return True
        base_offset = outcome.base_offset if isinstance(outcome, AppendResult) else 0  # test stand-ins: nothing
        if generation == self.generation:  # else unloaded while writing: durable, not ours
            self._replay(plan, base_offset)
        for result in unit:
            deliver(result)
        return True

    def _replay(self, plan: Plan, offset: int) -> None:
        """Replay durable batches written from `plan`, the first at log `offset`."""
        shard = self.shard
        for producer_id, commit, records, runs in plan:
            if commit is not None:
                shard.replay_marker(producer_id, commit)
                offset += 1
                continue
            if producer_id < 0:
                if all(replay for _, replay in runs):  # the usual batch: commits only
                    shard.table.replay_all(records)  # what shard.replay_raw calls, in compiled code
                else:
                    start = 0
                    for count, replay in runs:
                        if replay:
                            shard.table.replay_all(records[start:start + count])
                        start += count
                offset += len(records)
                continue
            if runs[0][1]:
                for key, value in records:
                    shard.replay_transactional(producer_id, key, value, offset)
                    offset += 1
            else:
                offset += len(records)

    # ------------------------------------------------------------------------ timers

    def _reschedule(self) -> None:
        if self.state is not ShardState.ACTIVE:
            return
        deadline = self.shard.next_deadline()
        if deadline == self._timer_deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline = deadline
        if deadline is not None:
            delay = max(deadline - self.clock(), 0) / 1000
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_deadline = None
        self.submit(self.shard.fire_timers(self.clock()))


def _run_into(fn: Callable[[], Any], future: "asyncio.Future[Any]") -> None:
    try:
        future.set_result(fn())
    except Exception as exc:
        future.set_exception(exc)


def _encoded(records: list[Any]) -> list[tuple[bytes, bytes | None]]:
    """A result's records as (key, value) bytes: commits come encoded already (the usual case:
    returned as they are), the other records as key and value objects."""
    for key, _ in records:
        if key.__class__ is not bytes:
            return [(k, v) if k.__class__ is bytes else (encode_key(k), None if v is None else encode_value(v))
                    for k, v in records]
    return records


def _no_body() -> None:
    """A marker write's response: nothing, once it is durable and replayed."""
    return None


def _fail(results: list[CoordinatorResult], error: CoordinatorWriteError) -> None:
    for result in results:
        for token, _ in result.completions:
            if not token.done():
                token.set_exception(error)


def append_then(plog: PartitionLog, records: bytes, now_ms: int, sync: bool, group_commit: GroupCommit | None,
                validated: list[BatchHeader], on_outcome: Callable[[object], None]) -> object:
    """Append a coordinator's batch (fsynced when `sync`) for a writer that is a chain of
    callbacks: its outcome (the AppendResult, or the exception) now, or LATER and
    on_outcome(outcome) when it completes - the fsync off the loop through `group_commit`, or
    (cluster mode) PostgreSQL's COMMIT. `validated`: the batches' headers, not checked again."""
    try:
        if sync and group_commit is not None:
            duplicate = group_commit.start(plog, records, now_ms, on_outcome, validated)
            return LATER if duplicate is None else duplicate
        appended = plog.append(records, now_ms, validated, sync=sync)
        if isawaitable(appended):
            asyncio.ensure_future(appended).add_done_callback(lambda done: on_outcome(_outcome(done)))
            return LATER
        return appended
    except Exception as exc:
        return exc


def _outcome(done: "asyncio.Future[Any]") -> object:
    """A finished append's result, or the exception it raised (CancelledError when cancelled)."""
    if done.cancelled():
        return asyncio.CancelledError()
    return done.exception() or done.result()


def durable_append(plog: PartitionLog, records: bytes, now_ms: int, sync: bool,
                   group_commit: GroupCommit | None,
                   validated: list[BatchHeader] | None = None) -> AppendResult | Awaitable[AppendResult]:
    """Append a coordinator's batch, fsynced when `sync`: through `group_commit` when there is
    one, else by the log itself (an AppendResult, or an awaitable of one in cluster mode).
    `validated`: the headers of the coordinator's own batches, not checked again."""
    if sync and group_commit is not None:
        return group_commit.append(plog, records, now_ms, validated)
    return plog.append(records, now_ms, validated, sync=sync)


def deliver(result: Any) -> None:
    """Complete a result's request tokens (group or transaction coordinator): its records are durable."""
    for token, response in result.completions:
        if not token.done():
            token.set_result(response() if callable(response) else response)


def new_token() -> "asyncio.Future[Any]":
    """A request token: a future the runtime completes with the response body."""
    return asyncio.get_running_loop().create_future()

