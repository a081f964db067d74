"""Runs a sans-IO coordinator shard against its `__consumer_offsets` partition.

Write path (DESIGN.md "Request flow"): results queue up while a write is in flight; the next write
takes them all as one record batch (group commit), appends it, fsyncs off the event loop, replays
the records and only then completes the requests. Appends to the partition happen only here and
never while its fsync runs. Loading replays the partition in chunks, yielding to the loop.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from ..coordinator.result import CoordinatorResult
from ..coordinator.shard import GroupCoordinatorShard
from ..records.batch import build_batch, iter_batches
from ..records.offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    UnknownRecordKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_value,
    iter_log_records,
)
from ..storage.partition_log import PartitionLog

log = logging.getLogger("offsetd.coordinator")

LOAD_CHUNK_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size


class ShardState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


class ShardRuntime:
    """One shard, its log partition, its write queue and its timer."""

    def __init__(self, shard: GroupCoordinatorShard, plog: PartitionLog, *, fsync: bool,
                 clock: Callable[[], int], executor: ThreadPoolExecutor) -> None:
        self.shard = shard
        self.plog = plog
        self.fsync = fsync
        self.clock = clock
        self.executor = executor
        self.state = ShardState.LOADING
        self.load_time_ms = 0.0
        self.records_loaded = 0
        self._queue: list[CoordinatorResult] = []
        self._writing = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_deadline: int | None = None

    # ---------------------------------------------------------------------- loading

    async def load(self) -> None:
        """Replay the partition from its start (§5.1); a corrupt record fails this shard only."""
        started = time.perf_counter()
        offset, end = self.plog.log_start_offset, self.plog.log_end_offset
        shard, skipped = self.shard, 0
        try:
            while offset < end:
                chunk = self.plog.read(offset, LOAD_CHUNK_BYTES)
                if not chunk:
                    break
                for record_offset, _ts, key_bytes, value_bytes, producer_id in iter_log_records(chunk, markers=False):
                    if key_bytes is None:
                        continue
                    key = decode_key(key_bytes)
                    if type(key) is UnknownRecordKey:
                        skipped += 1
                        continue
                    if producer_id >= 0:
                        continue  # transactional offsets: transactions are not served (see README)
                    if value_bytes is None:
                        shard.replay(key, None)
                    elif type(key) is OffsetCommitKey:
                        shard.replay(key, decode_offset_commit_value(value_bytes))
                    else:
                        shard.replay(key, decode_group_metadata_value(value_bytes))
                    self.records_loaded += 1
                last = offset
                for _, header in iter_batches(chunk):
                    last = header.base_offset + header.last_offset_delta
                offset = last + 1
                await asyncio.sleep(0)  # let other shards and clients run between chunks
        except Exception as exc:
            self.state = ShardState.FAILED
            log.error("__consumer_offsets-%d: load failed near offset %d: %s; its groups are not served",
                      shard.partition, offset, exc)
            return
        if skipped:
            log.warning("__consumer_offsets-%d: skipped %d records with unknown key versions", shard.partition, skipped)
        shard.on_loaded(self.clock())
        self.load_time_ms = (time.perf_counter() - started) * 1000
        self.state = ShardState.ACTIVE
        self._reschedule()

    # ------------------------------------------------------------------------ writes

    def submit(self, result: CoordinatorResult) -> None:
        """Queue a result for durability, or complete it at once when it writes nothing."""
        if not result.records and not result.barrier:
            _deliver(result)
        else:
            self._queue.append(result)
            if not self._writing:
                self._writing = True
                asyncio.ensure_future(self._write_loop())
        self._reschedule()

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                records = [r for result in batch for r in result.records]
                try:
                    if records:
                        now = self.clock()
                        blob = build_batch([(encode_key(k), None if v is None else encode_value(v), now, [])
                                            for k, v in records])
                        self.plog.append(blob, now)
                        if self.fsync:
                            await loop.run_in_executor(self.executor, self.plog.flush)
                except Exception as exc:
                    log.error("__consumer_offsets-%d: write failed: %s", self.shard.partition, exc)
                    for result in batch:
                        for token, _ in result.completions:
                            if not token.done():
                                token.set_exception(exc)
                    continue
                for result in batch:
                    if result.replay:
                        for key, value in result.records:
                            self.shard.replay(key, value)
                for result in batch:
                    _deliver(result)
        finally:
            self._writing = False

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


def _deliver(result: CoordinatorResult) -> None:
    for token, response in result.completions:
        if not token.done():
            token.set_result(response() if callable(response) else response)


def new_token() -> "asyncio.Future[Any]":
    """A request token: a future the runtime completes with the response body."""
    return asyncio.get_running_loop().create_future()


__all__ = ["ShardRuntime", "ShardState", "new_token", "GroupMetadataKey"]
