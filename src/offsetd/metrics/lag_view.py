"""The broker's own look at consumer lag: committed offsets from its coordinator shards, log ends
and record timestamps from its logs (broker/log_ends.LogEnds). No client round trip, no request to
another broker.

A look at 2,000 groups x 10 partitions must take well under 100 ms, so nothing is decoded twice:
the shards keep offsets as the raw `__consumer_offsets` key and value bytes, and a value's bytes
never change once written (a new commit stores a new object), so decoded keys and values are kept
in dicts keyed by those bytes and dropped when they stop being used. The work is cooperative
(pauses between ~5 ms slices) so Kafka clients keep being served; callers arriving within
`COALESCE_MS` of a look share it (Prometheus, the alert rules and the console ask independently).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Sequence

from ..lag.compute import LogBounds, offset_lag, record_needed, time_lag_ms
from ..lag.model import GroupLag, GroupMember, LagSnapshot, PartitionLag
from ..records.offsets import decode_key, decode_offset_commit_value, parse_assignment_partitions
from .snapshot import Slicer

COALESCE_MS = 1000


class BrokerLagSource:
    """LagSource over this broker's coordinator shards (the groups it coordinates) and LogEnds."""

    def __init__(self, runtimes: Sequence[Any], logs: Any, clock: Callable[[], int]) -> None:
        self.runtimes = runtimes  # server.coordinator_runtime.ShardRuntime, one per offsets partition
        self.logs = logs
        self.clock = clock
        self._keys: dict[bytes, tuple[str, int]] = {}   # offset key bytes -> (topic, partition)
        self._values: dict[bytes, Any] = {}             # offset value bytes -> OffsetCommitValue
        self._last: LagSnapshot | None = None
        self._last_at = float("-inf")
        self._taking: asyncio.Future[LagSnapshot] | None = None

    async def snapshot(self) -> LagSnapshot:
        """A look at lag no older than COALESCE_MS (a look in progress is shared)."""
        if self._last is not None and time.monotonic() * 1000 - self._last_at < COALESCE_MS:
            return self._last
        if self._taking is None:
            self._taking = asyncio.ensure_future(self._take())
        taking = self._taking
        try:
            return await asyncio.shield(taking)
        finally:
            if taking.done() and self._taking is taking:
                self._taking = None

    async def _take(self) -> LagSnapshot:
        started = time.perf_counter()
        await self.logs.refresh()
        snapshot = LagSnapshot(taken_at_ms=self.clock())
        slicer = Slicer()
        keys, values = {}, {}  # the caches' entries still in use: the rest is dropped afterwards
        for runtime in self.runtimes:
            if runtime.state.value != "active":
                continue  # loading: a partial replay; failed or not owned here: not ours to show
            for group_id in list(runtime.shard.groups):
                group = self._group(runtime.shard, group_id, keys, values)
                if group is not None:
                    snapshot.groups.append(group)
                if slicer.due():
                    await asyncio.sleep(0)
        self._keys, self._values = keys, values
        await self._time_lags(snapshot, slicer)
        snapshot.groups.sort(key=lambda g: g.group)
        snapshot.partitions = self.logs.ends()
        snapshot.seconds = time.perf_counter() - started
        self._last, self._last_at = snapshot, time.monotonic() * 1000
        return snapshot

    def _group(self, shard: Any, group_id: str, keys: dict[bytes, tuple[str, int]],
               values: dict[bytes, Any]) -> GroupLag | None:
        """One group of one shard, its time lags still to be filled (None: gone, or Dead)."""
        group = shard.groups.get(group_id)
        if group is None or group.state.value == "Dead":
            return None
        owners: dict[tuple[str, int], Any] = {}
        members = []
        for member in group.members.values():
            assigned = parse_assignment_partitions(member.assignment) or []
            members.append(GroupMember(member.member_id, member.group_instance_id, member.client_id,
                                       member.client_host, assigned))
            for tp in assigned:
                owners[tp] = member
        row = GroupLag(group_id, group.state.value, group.protocol_type or "", len(group.members),
                       retention_ms=shard.retention_ms(group_id), member_list=members)
        stored = shard.offsets.get(group_id)
        if stored:
            expires = shard.expiry_rule(group_id)
            bounds_of = self.logs.bounds
            for key, raw in stored.items():
                tp = keys.get(key) or self._keys.get(key)
                if tp is None:
                    k = decode_key(key)
                    tp = (k.topic, k.partition)  # type: ignore[union-attr]
                keys[key] = tp
                value = values.get(raw) or self._values.get(raw)
                if value is None:
                    value = decode_offset_commit_value(raw)
                values[raw] = value
                bounds: LogBounds | None = bounds_of(tp[0], tp[1])
                member = owners.get(tp)
                row.partitions.append(PartitionLag(
                    tp[0], tp[1], value.offset, bounds.start if bounds else None, bounds.end if bounds else None,
                    offset_lag(value.offset, bounds), None, value.commit_timestamp,
                    expires(key, tp[0], value) if expires else None,
                    member.member_id if member else None, member.client_id if member else None,
                    member.client_host if member else None))
            row.partitions.sort(key=lambda p: (p.topic, p.partition))
            row.earliest_expiry_ms = min((p.expires_at_ms for p in row.partitions if p.expires_at_ms is not None),
                                         default=None)
        return row

    async def _time_lags(self, snapshot: LagSnapshot, slicer: Slicer) -> None:
        """Time lag of every partition with lag: the age of its first unconsumed record."""
        now = snapshot.taken_at_ms
        for group in snapshot.groups:
            for p in group.partitions:
                if p.lag is None:
                    continue
                bounds = LogBounds(p.log_start, p.log_end)  # type: ignore[arg-type]
                needed = record_needed(p.committed, bounds)
                stamp = None
                if needed is not None:
                    (stamp,) = await self.logs.timestamps(p.topic, p.partition, [needed])
                p.time_lag_ms = time_lag_ms(p.committed, bounds, stamp, now)
            if slicer.due():
                await asyncio.sleep(0)
