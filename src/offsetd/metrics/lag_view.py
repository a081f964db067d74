"""The broker's own look at consumer lag: committed offsets from its coordinator shards, log ends
and record timestamps from its logs (broker/log_ends.LogEnds). No client round trip, no request to
another broker.

A look runs at every scrape over every committed partition, so nothing is decoded twice: the
shards keep offsets as the raw `__consumer_offsets` key and value bytes, and a value's bytes
never change once written (a new commit stores a new object), so decoded keys and values are kept
in dicts keyed by those bytes and dropped when they stop being used. The work is cooperative
(pauses between ~5 ms slices) so Kafka clients keep being served; callers arriving while a look
is being taken share it (Prometheus, the alert rules and the console ask independently), and a
look never outlives its answer, so a commit acknowledged before a request is in what it gets.
"""

from __future__ import annotations

import asyncio
import gc
import time
from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, Sequence

from ..lag.compute import LogBounds, first_unconsumed, offset_lag
from ..lag.model import GroupLag, GroupMember, LagSnapshot, PartitionLag
from ..records.consumer_protocol import parse_assignment_partitions
from ..records.offset_commit_value import decode_offset_commit_value
from ..records.offsets import decode_key
from .snapshot import Slicer


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a look is taken and rendered: a look allocates ~100k
    short-lived objects (freed by reference counting), which would otherwise set off repeated
    full collections that walk the whole coordinator state (a quarter of a large scrape)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SharedLook:
    """At most one look at a time: callers arriving while one is taken wait for it and share it."""

    def __init__(self, take: Callable[[], Awaitable[LagSnapshot]]) -> None:
        self._take = take
        self._taking: asyncio.Future[LagSnapshot] | None = None

    async def __call__(self) -> LagSnapshot:
        if self._taking is None:
            self._taking = asyncio.ensure_future(self._take())
        taking = self._taking
        try:
            return await asyncio.shield(taking)
        finally:
            if taking.done() and self._taking is taking:
                self._taking = None


class BrokerLagSource:
    """LagSource over this broker's coordinator shards (the groups it coordinates) and LogEnds;
    share groups' partitions from `share_states` (group id -> {(group, topic id, partition): the
    share coordinator's state}, awaited: server/share_group_offsets.ShareGroupOffsetsApi.share_states,
    which in cluster mode asks the share coordinators on other brokers)."""

    def __init__(self, runtimes: Sequence[Any], logs: Any, clock: Callable[[], int],
                 share_states: Callable[[str], Awaitable[dict[Any, Any]]] | None = None) -> None:
        self.runtimes = runtimes  # server.coordinator_runtime.ShardRuntime, one per offsets partition
        self.logs = logs
        self.clock = clock
        self.share_states = share_states
        self._keys: dict[bytes, tuple[str, int]] = {}   # offset key bytes -> (topic, partition)
        self._values: dict[bytes, Any] = {}             # offset value bytes -> OffsetCommitValue
        self.snapshot = SharedLook(self._take)  # a fresh look (one in progress when asked is shared)

    async def _take(self) -> LagSnapshot:
        with collector_paused():
            return await self._look()

    async def _look(self) -> LagSnapshot:
        started = time.perf_counter()
        await self.logs.refresh()
        snapshot = LagSnapshot(taken_at_ms=self.clock(), cluster=getattr(self.logs.topics, "cluster_id", "") or "")
        slicer = Slicer()
        look = _Look(self.logs, self._keys, self._values)
        for runtime in self.runtimes:
            if runtime.state.value != "active":
                continue  # loading: a partial replay; failed or not owned here: not ours to show
            for group_id in runtime.shard.group_ids():
                group = look.group(runtime.shard, group_id)
                if group is not None:
                    snapshot.groups.append(group)
                if slicer.due():
                    await asyncio.sleep(0)
            if self.share_states is not None:
                for share in list(runtime.shard.share.groups.values()):
                    snapshot.groups.append(look.share_group(share, await self.share_states(share.group_id)))
        self._keys, self._values = look.keys, look.values  # what is no longer stored is dropped
        await look.time_lags(snapshot.taken_at_ms, slicer)
        snapshot.groups.sort(key=lambda g: g.group)
        snapshot.partitions = self.logs.ends()
        snapshot.seconds = time.perf_counter() - started
        return snapshot


class _Look:
    """One look at lag: the decode caches carried over from the last look, the bounds of each
    data partition read once, and the partitions whose first unconsumed record's timestamp is
    not known yet (read together afterwards, the slow part of a first look)."""

    def __init__(self, logs: Any, keys: dict[bytes, tuple[str, int]], values: dict[bytes, Any]) -> None:
        self.logs = logs
        self.previous_keys, self.previous_values = keys, values
        self.keys: dict[bytes, tuple[str, int]] = {}
        self.values: dict[bytes, Any] = {}
        self.bounds: dict[tuple[str, int], LogBounds | None] = {}
        # partitions with lag: (row, first unconsumed offset, its timestamp if already known)
        self.pending: list[tuple[PartitionLag, int, int | None]] = []

    def group(self, shard: Any, group_id: str) -> GroupLag | None:
        """One group of one shard, classic or consumer (None: gone, or Dead)."""
        consumer = shard.consumer.groups.get(group_id)
        if consumer is not None:  # KIP-848: assignments by topic id, named by the group's metadata
            names = {tm.topic_id: tm.topic_name for tm in consumer.subscription_metadata.values()}
            state, protocol_type = consumer.state().value, "consumer"
            roster = [(m, m.instance_id, sorted((names[t], p) for t, ps in m.assigned_partitions.items()
                                                if t in names for p in ps))
                      for m in consumer.members.values()]
        else:
            group = shard.groups.get(group_id)
            if group is None or group.state.value == "Dead":
                return None
            state, protocol_type = group.state.value, group.protocol_type or ""
            roster = [(m, m.group_instance_id, parse_assignment_partitions(m.assignment) or [])
                      for m in group.members.values()]
        owners: dict[tuple[str, int], Any] = {}
        members = []
        for member, instance_id, assigned in roster:
            members.append(GroupMember(member.member_id, instance_id, member.client_id, member.client_host, assigned))
            for tp in assigned:
                owners[tp] = member
        row = GroupLag(group_id, state, protocol_type, len(members),
                       retention_ms=shard.retention_ms(group_id), member_list=members)
        stored = shard.offsets.get(group_id)
        if stored:
            expires = shard.expiry_rule(group_id)
            row.partitions = [self.partition(key, raw, owners, expires) for key, raw in stored.items()]
            row.partitions.sort(key=lambda p: (p.topic, p.partition))
            row.earliest_expiry_ms = min((p.expires_at_ms for p in row.partitions if p.expires_at_ms is not None),
                                         default=None)
        return row

    def share_group(self, group: Any, states: dict[Any, Any]) -> GroupLag:
        """A KIP-932 share group: per share-partition its start offset (SPSO) as the committed
        offset, the lag Kafka's DescribeShareGroupOffsets gives (log end - SPSO - records done
        past it: what no member has acknowledged yet), and the age of the record at SPSO."""
        topics = self.logs.topics
        members = [GroupMember(m.member_id, None, m.client_id, m.client_host,
                               sorted((t.name, p) for tid, ps in m.assigned_partitions.items()
                                      if (t := topics.by_id(tid)) is not None for p in ps))
                   for m in group.members.values()]
        row = GroupLag(group.group_id, group.state().value, "share", len(members), member_list=members)
        for (_, topic_id, index), state in sorted(states.items(), key=lambda kv: (str(kv[0][1]), kv[0][2])):
            topic = topics.by_id(topic_id)
            if topic is None:
                continue
            p = PartitionLag(topic.name, index, state.start_offset, None, None, None, None)
            bounds = self.logs.bounds(topic.name, index)
            if bounds is not None:
                p.log_start, p.log_end = bounds.start, bounds.end
                done = max(state.delivery_complete_count, 0)
                p.lag = max(bounds.end - max(state.start_offset, bounds.start) - done, 0)
                if p.lag == 0:
                    p.time_lag_ms = 0
                else:
                    needed = first_unconsumed(state.start_offset, bounds)
                    self.pending.append((p, needed, self.logs.cached_timestamp(topic.name, index, needed)))
            row.partitions.append(p)
        return row

    def partition(self, key: bytes, raw: bytes, owners: dict[tuple[str, int], Any], expires: Any) -> PartitionLag:
        """One committed offset, with its lag (lag.compute's rules written out: this runs for
        every partition of every group at each scrape) and its time lag when already known."""
        tp = self.previous_keys.get(key)
        if tp is None:
            k = decode_key(key)
            tp = (k.topic, k.partition)  # type: ignore[union-attr]
        self.keys[key] = tp
        value = self.previous_values.get(raw)
        if value is None:
            value = decode_offset_commit_value(raw)
        self.values[raw] = value
        if tp in self.bounds:
            bounds = self.bounds[tp]
        else:
            bounds = self.bounds[tp] = self.logs.bounds(*tp)
        member = owners.get(tp)
        committed = value.offset
        row = PartitionLag(tp[0], tp[1], committed, None, None, None, None, value.commit_timestamp,
                           expires(key, tp[0], value) if expires else None,
                           member.member_id if member else None, member.client_id if member else None,
                           member.client_host if member else None)
        if bounds is not None:
            row.log_start, row.log_end = bounds.start, bounds.end
            row.lag = offset_lag(committed, bounds)
            if row.lag == 0:
                row.time_lag_ms = 0
            else:
                needed = first_unconsumed(committed, bounds)
                self.pending.append((row, needed, self.logs.cached_timestamp(tp[0], tp[1], needed)))
        return row

    async def time_lags(self, now: int, slicer: Slicer) -> None:
        """Fill the time lags; timestamps no earlier look read are read now, one call per partition."""
        wanted: dict[tuple[str, int], set[int]] = {}
        for row, offset, stamp in self.pending:
            if stamp is None:
                wanted.setdefault((row.topic, row.partition), set()).add(offset)
        read: dict[tuple[str, int, int], int | None] = {}
        for (topic, partition), offsets in wanted.items():
            ordered = sorted(offsets)
            for offset, found in zip(ordered, await self.logs.timestamps(topic, partition, ordered)):
                read[(topic, partition, offset)] = found
            if slicer.due():
                await asyncio.sleep(0)
        for row, offset, stamp in self.pending:
            if stamp is None:
                stamp = read.get((row.topic, row.partition, offset))
            # lag.compute.time_lag_ms for a partition with lag: the record's age, never negative
            row.time_lag_ms = None if stamp is None or stamp < 0 else max(0, now - stamp)
