"""A group's lag history and Burrow-style health for the console, from what the broker holds: the
group's commits read back from its `__consumer_offsets` partition (the shard's own log, read
committed) and the data partitions' ends by time and record timestamps (broker/log_ends.LogEnds).

`build_history` does the I/O steps of lag/history.HistoryPlan through two callables, so the
any-cluster console (admin/console_source.py) shares it with ListOffsets-backed callables; the
health grade is admin/health.py's pure evaluation on the same commits and ends.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence

from ..admin.health import (Commit, EvaluationConfig, PartitionHealth, build_window, evaluate_group,
                            evaluate_partition, health_json)
from ..lag.compute import LogBounds, offset_lag
from ..lag.history import MAX_POINTS, CommitHistory, HistoryPlan, TopicPartition
from ..records.batch import iter_batches
from ..records.compression import decompress
from ..records.log_walker import ControlMarker, iter_log_records
from ..records.offset_commit_value import decode_offset_commit_value
from ..records.offsets import GroupMetadataKey, OffsetCommitKey, decode_key, encode_key, partition_for
from ..storage.log_dir import NotLeader, StorageError
from ..storage.log_read import OffsetOutOfRange

READ_CHUNK_BYTES = 1 << 20
CACHED_GROUPS = 64  # groups whose offsets-log read is kept for the next ask
TimesQuery = Callable[[str, int, list[int]], Awaitable[list[int | None]]]


class HistoryUnavailable(Exception):
    """The group's `__consumer_offsets` partition is loading or failed (answered 503)."""

    def __init__(self, error: str, partition: int) -> None:
        super().__init__(error)
        self.error = error
        self.partition = partition


async def build_history(group: str, commits: CommitHistory, bounds_now: dict[TopicPartition, LogBounds | None],
                        offsets_for_times: TimesQuery, timestamps: TimesQuery, since_ms: int, now_ms: int,
                        points: int = MAX_POINTS, config: EvaluationConfig | None = None) -> dict[str, Any]:
    """The /v1/groups/{group}/history answer: lag/history's series plus `health` (the grade of
    `offsetd groups --describe --health`, from the same commits). `offsets_for_times(topic,
    partition, times)` answers ListOffsets by time (None: no such record); `timestamps(topic,
    partition, offsets)` the records' timestamps."""
    config = config or EvaluationConfig()
    samples = [now_ms - k * config.sample_interval_ms for k in range(1, config.intervals + 1)]
    windows = {tp: build_window((Commit(o, ts, None) for ts, o in rows), config.intervals, config.min_distance_ms)
               for tp, rows in commits.partitions.items()}
    plan = HistoryPlan(commits, since_ms, now_ms, points,
                       {tp: [c.timestamp_ms for c in window] + samples for tp, window in windows.items()})
    for tp in plan.partitions:  # a partition at a time, letting the loop serve clients in between
        bounds = bounds_now.get(tp)
        plan.set_partition_ends(tp, await offsets_for_times(tp[0], tp[1], plan.end_times(tp)) if bounds else [],
                                bounds)
        await asyncio.sleep(0)
    stamps = {tp: await timestamps(tp[0], tp[1], offsets) for tp in plan.partitions
              if (offsets := plan.record_offsets(tp))}
    series: dict[str, Any] = {}
    for _ in plan.series_steps(stamps, series):
        await asyncio.sleep(0)
    graded = []
    for tp in plan.partitions:
        bounds, committed = bounds_now.get(tp), plan.committed_at(tp, now_ms)
        lag = offset_lag(committed, bounds)
        if committed is None or lag is None or bounds is None:
            continue
        window = tuple(Commit(c.offset, c.timestamp_ms, _lag_then(plan, tp, c, bounds)) for c in windows[tp])
        ends = [e for t in samples if (e := plan.ends_at(tp, t)) is not None]
        status = evaluate_partition(window, lag, ends, now_ms, config.allowed_lag, config.intervals,
                                    config.minimum_complete)
        graded.append(PartitionHealth(tp[0], tp[1], committed, bounds.end, lag, status.status, status.complete,
                                      window))
    series["group"] = group
    series["health"] = health_json([evaluate_group(group, graded)])[0]
    return series


def _lag_then(plan: HistoryPlan, tp: TopicPartition, commit: Commit, bounds: LogBounds) -> int | None:
    """The lag right after `commit`: the log end at its time minus its offset (None: end unknown)."""
    end = plan.ends_at(tp, commit.timestamp_ms)
    return None if end is None else offset_lag(commit.offset, LogBounds(min(bounds.start, end), end))


def read_commits(records: Any, group: str, history: CommitHistory, pending: dict[int, list[Any]]) -> None:
    """Feed one chunk of `__consumer_offsets` records (read committed) into `history`: the group's
    commits and tombstones, a transaction's commits only when its COMMIT marker comes (`pending`
    holds them per producer meanwhile; an ABORT drops them)."""
    # Every key version this reads starts with int16 version + the group as an int16-length string:
    # comparing those bytes skips other groups' records without decoding them.
    needle = encode_key(GroupMetadataKey(group))[2:]
    end = 2 + len(needle)
    for offset, timestamp, key, value, producer_id in records:
        if type(key) is ControlMarker:
            held = pending.pop(producer_id, [])
            if key is ControlMarker.COMMIT:
                for entry in held:
                    _apply(history, *entry)
            continue
        if key is None or key[2:end] != needle:
            continue
        decoded = decode_key(key)
        if type(decoded) not in (OffsetCommitKey, GroupMetadataKey) or decoded.group != group:
            continue
        entry = (decoded, value, timestamp)
        if producer_id >= 0 and type(decoded) is OffsetCommitKey:
            pending.setdefault(producer_id, []).append(entry)
        else:
            _apply(history, *entry)


def _apply(history: CommitHistory, key: Any, value: bytes | None, timestamp: int) -> None:
    if type(key) is GroupMetadataKey:
        if value is None:
            history.delete_group()
    elif value is None:
        history.delete(key.topic, key.partition)
    else:
        commit = decode_offset_commit_value(value)
        history.commit(key.topic, key.partition, commit.offset,
                       commit.commit_timestamp if commit.commit_timestamp >= 0 else timestamp)


@dataclass(slots=True)
class _Read:
    """How far one group's commits have been read from its shard's log, and what they were."""

    generation: int  # the shard runtime's load generation the read belongs to
    position: int    # the next offset to read
    history: CommitHistory = field(default_factory=CommitHistory)
    pending: dict[int, list[Any]] = field(default_factory=dict)  # open transactions' commits, by producer


class BrokerHistory:
    """Histories of the groups this broker coordinates (`history(group, since_ms)`), read from the
    shard runtimes' partition logs and LogEnds; a chunk at a time, yielding to the loop between."""

    def __init__(self, runtimes: Sequence[Any], log_ends: Any, clock: Callable[[], int]) -> None:
        self.runtimes = runtimes
        self.log_ends = log_ends
        self.clock = clock
        self._reading = asyncio.Lock()  # one offsets-log read at a time, however many consoles ask
        self._reads: OrderedDict[str, _Read] = OrderedDict()  # group -> its read so far, least recent first

    def _runtime(self, group: str) -> Any:
        runtime = self.runtimes[partition_for(group, len(self.runtimes))]
        state = runtime.state.value
        if state != "active":
            raise HistoryUnavailable("COORDINATOR_LOAD_IN_PROGRESS" if state == "loading"
                                     else "COORDINATOR_NOT_AVAILABLE", runtime.shard.partition)
        return runtime

    async def commits(self, group: str) -> CommitHistory:
        """The group's commits as its `__consumer_offsets` partition holds them now. The last
        CACHED_GROUPS groups asked about keep their read: the next ask reads only what was
        appended since (a console polling a group, or grading the groups in view, rereads nothing)."""
        runtime = self._runtime(group)
        plog = runtime.plog
        read = self._reads.pop(group, None)
        if (read is None or read.generation != runtime.generation or read.position > plog.last_stable_offset
                or read.position < plog.log_start_offset):  # reloaded, truncated, or deleted past us: start over
            read = _Read(runtime.generation, plog.log_start_offset)
        offset = read.position
        while offset < plog.last_stable_offset:
            try:
                data, _aborted = plog.read_committed(offset, READ_CHUNK_BYTES)
            except OffsetOutOfRange as exc:  # retention or the cleaner moved the start while we paused
                if offset >= exc.log_start_offset:
                    break
                offset = exc.log_start_offset
                continue
            except (NotLeader, StorageError) as exc:  # cluster mode: the partition moved on; a failed disk
                raise HistoryUnavailable("COORDINATOR_NOT_AVAILABLE", runtime.shard.partition) from exc
            if not data:
                break
            chunk = bytes(data)
            # A read starts at the batch holding `offset`: skip its records read before.
            read_commits((r for r in iter_log_records(chunk, decompress=decompress) if r[0] >= offset), group,
                         read.history, read.pending)
            last = offset - 1
            for _, header in iter_batches(chunk):
                last = header.base_offset + header.last_offset_delta
            if last < offset:
                break
            offset = last + 1
            await asyncio.sleep(0)
        read.position = offset
        self._reads[group] = read
        while len(self._reads) > CACHED_GROUPS:
            self._reads.popitem(last=False)
        return read.history

    async def history(self, group: str, since_ms: int, points: int = MAX_POINTS) -> dict[str, Any]:
        """The group's lag series since `since_ms` and its health; raises HistoryUnavailable."""
        await self.log_ends.refresh()  # cluster mode: partitions led elsewhere, from PostgreSQL
        async with self._reading:
            commits = await self.commits(group)
        # From here to the plan's copy of the commits (build_history's first lines) nothing awaits,
        # so a concurrent read of the same group cannot change them underneath.
        bounds = {tp: self.log_ends.bounds(*tp) for tp in commits.partitions}
        return await build_history(group, commits, bounds, self.log_ends.offsets_for_times,
                                   self.log_ends.timestamps, since_ms, self.clock(), points)
