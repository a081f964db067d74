"""The broker's own look at consumer lag: committed offsets from its coordinator shards, log ends
and record timestamps from its logs (broker/log_ends.LogEnds). No client round trip, no request to
another broker.

A look runs at every scrape, so it costs what changed since the last one: each group's row is
kept with what it was computed from (its stored offset keys and values, as the shard keeps them
in bytes; its state, members and expiry inputs; the bounds of the data partitions it reads), and
a look that finds all of that unchanged reuses the row, updating only the time lags of its
partitions with lag (from record timestamps kept too). A changed group decodes what changed.
The work is cooperative (pauses between ~5 ms slices) so Kafka clients keep being served;
callers arriving while a look is being taken share it (Prometheus, the alert rules and the
console ask independently), and a look never outlives its answer, so a commit acknowledged
before a request is in what it gets. With `metrics.group.filter` a look covers only the groups
whose id the expression matches (kafka_exporter's `--group.filter`), which is what keeps it
small at a million groups.
"""

from __future__ import annotations

import asyncio
import gc
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Awaitable, Callable, Iterator, Sequence

from ..lag.compute import LogBounds, first_unconsumed, offset_lag
from ..lag.model import GroupLag, GroupMember, LagSnapshot, PartitionLag
from ..records.consumer_protocol import parse_assignment_partitions
from ..records.offset_commit_value import OffsetCommitValue, decode_offset_commit_value
from ..records.offsets import decode_key
from .snapshot import Slicer

_revisions = count(1)  # GroupLag.revision: unique in the process, so no two sources' rows share one


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
    which in cluster mode asks the share coordinators on other brokers). `group_filter`
    (`metrics.group.filter`) keeps a look to the groups whose whole id it matches; None: every group."""

    def __init__(self, runtimes: Sequence[Any], logs: Any, clock: Callable[[], int],
                 share_states: Callable[[str], Awaitable[dict[Any, Any]]] | None = None,
                 group_filter: re.Pattern[str] | None = None) -> None:
        self.runtimes = runtimes  # server.coordinator_runtime.ShardRuntime, one per offsets partition
        self.logs = logs
        self.clock = clock
        self.share_states = share_states
        self.group_filter = group_filter
        self._kept: dict[str, _Kept] = {}  # group id -> its row as the last look left it
        self._bounds: dict[tuple[str, int], LogBounds | None] = {}  # what the last look read
        self.snapshot = SharedLook(self._take)  # a fresh look (one in progress when asked is shared)

    async def _take(self) -> LagSnapshot:
        with collector_paused():
            return await self._look()

    async def _look(self) -> LagSnapshot:
        started = time.perf_counter()
        await self.logs.refresh()
        snapshot = LagSnapshot(taken_at_ms=self.clock(), cluster=getattr(self.logs.topics, "cluster_id", "") or "")
        slicer = Slicer()
        look = _Look(self.logs, self._kept, self._bounds, snapshot.taken_at_ms)
        wanted = self.group_filter.fullmatch if self.group_filter is not None else None
        for runtime in self.runtimes:
            if runtime.state.value != "active":
                continue  # loading: a partial replay; failed or not owned here: not ours to show
            shard = runtime.shard
            look.in_flight(shard)
            for group_id in shard.group_ids() if wanted is None else filter(wanted, shard.group_ids()):
                group = look.group(shard, group_id)
                if group is not None:
                    snapshot.groups.append(group)
                if slicer.due():
                    await asyncio.sleep(0)
            if self.share_states is not None:
                for share in list(shard.share.groups.values()):
                    if wanted is None or wanted(share.group_id):
                        snapshot.groups.append(look.share_group(share, await self.share_states(share.group_id)))
        await look.time_lags(slicer)
        self._kept, self._bounds = look.kept, look.bounds  # groups no longer there are dropped
        snapshot.groups.sort(key=_group_id)
        snapshot.partitions = self.logs.ends()
        snapshot.seconds = time.perf_counter() - started
        return snapshot


def _group_id(group: GroupLag) -> str:
    return group.group


@dataclass(slots=True, eq=False)
class _Kept:
    """A group's row as a look computed it, with what it was computed from: the group's stored
    offset keys and values (bytes, compared by value), a signature of everything else of the
    group the row reads (state, members and assignments, retention, the expiry rule's inputs),
    and the data partitions whose bounds it read. A later look that finds all of these equal
    and none of those bounds changed reuses the row, recomputing only the time lags (`timed`:
    index in row.partitions, then the record timestamp, < 0 for a record without one, flat).
    Tuples, not lists, wherever they can be: the collector stops tracking tuples of atoms, and
    a kept look is tens of thousands of objects."""

    keys: tuple[bytes, ...]
    values: tuple[bytes, ...]
    signature: tuple[Any, ...]
    tps: tuple[tuple[str, int], ...]           # aligned with keys
    decoded: tuple[OffsetCommitValue, ...]     # aligned with keys
    row: GroupLag
    timed: list[int] = field(default_factory=list)
    settled: bool = True  # False: an input not in the above may change (in-flight keys, unread timestamps)


class _Look:
    """One look at lag: the rows kept from the last look, the bounds of each data partition read
    once (and compared with the last look's, to find the groups whose rows they change), and
    the partitions whose first unconsumed record's timestamp is not known yet (read together
    afterwards, the slow part of a first look)."""

    def __init__(self, logs: Any, kept: dict[str, _Kept], bounds: dict[tuple[str, int], LogBounds | None],
                 now: int) -> None:
        self.logs = logs
        self.now = now
        self.previous = kept
        self.kept: dict[str, _Kept] = {}
        self.bounds: dict[tuple[str, int], LogBounds | None] = {}
        self.moved: set[tuple[str, int]] = set()  # data partitions whose bounds changed since the last look
        for tp, was in bounds.items():
            now_bounds = self.bounds[tp] = logs.bounds(*tp)
            if now_bounds != was:
                self.moved.add(tp)
        self.busy: Any = ()  # OffsetCommit keys of the current shard whose expiry is undecided now
        # partitions with lag: (row, first unconsumed offset, its timestamp if already known, kept entry, index)
        self.pending: list[tuple[PartitionLag, int, int | None, _Kept | None, int]] = []

    def in_flight(self, shard: Any) -> None:
        """The shard's keys whose expiry reads as None while they last: a commit written but not
        replayed yet, or a pending transactional offset (offset_ops.expiry_rule)."""
        in_flight, txn = shard.table.in_flight, shard.txn.keys
        self.busy = in_flight.keys() | txn.keys() if in_flight and txn else (in_flight or txn).keys()

    def group(self, shard: Any, group_id: str) -> GroupLag | None:
        """One group of one shard, classic or consumer (None: gone, or Dead): the kept row when
        nothing it reads changed, else computed afresh."""
        consumer = shard.consumer.groups.get(group_id)
        retention = shard.retention_ms(group_id)
        if consumer is not None:  # KIP-848: assignments by topic id, named by the group's metadata
            names = {tm.topic_id: tm.topic_name for tm in consumer.subscription_metadata.values()}
            roster: Any = tuple((m, m.instance_id, tuple(sorted((names[t], p) for t, ps in m.assigned_partitions.items()
                                                               if t in names for p in ps)))
                                for m in consumer.members.values())
            signature: tuple[Any, ...] = (
                "consumer", consumer.state().value, retention, frozenset(consumer.subscribed_topics()),
                tuple((m.member_id, i, m.client_id, m.client_host, a) for m, i, a in roster))
        else:
            group = shard.groups.get(group_id)
            if group is None or group.state.value == "Dead":
                return None
            subscribed = group.subscribed_topics
            signature = ("classic", group.state.value, group.protocol_type or "", retention, group.state_timestamp,
                         None if subscribed is None else frozenset(subscribed),
                         tuple((m.member_id, m.group_instance_id, m.client_id, m.client_host, m.assignment)
                               for m in group.members.values()))
            roster = None
        stored = shard.offsets.get(group_id)
        keys = tuple(stored) if stored else ()
        values = tuple(stored.values()) if stored else ()
        kept = self.previous.get(group_id)
        busy = bool(self.busy) and not self.busy.isdisjoint(keys)
        if (kept is not None and kept.settled and not busy and kept.signature == signature and kept.keys == keys
                and kept.values == values and (not self.moved or self.moved.isdisjoint(kept.tps))):
            self.kept[group_id] = kept
            if kept.timed:
                kept.row = self.retimed(kept)
            return kept.row
        if roster is None:
            roster = tuple((m, m.group_instance_id, tuple(parse_assignment_partitions(m.assignment) or ()))
                           for m in shard.groups[group_id].members.values())
        return self.compute(shard, group_id, signature, roster, retention, keys, values, kept, not busy)

    def compute(self, shard: Any, group_id: str, signature: tuple[Any, ...], roster: Any, retention: int,
                keys: tuple[bytes, ...], values: tuple[bytes, ...], previous: _Kept | None, settled: bool) -> GroupLag:
        """A group's row from its stored offsets (what the last look decoded reused)."""
        state, protocol_type = signature[1], ("consumer" if signature[0] == "consumer" else signature[2])
        owners: dict[tuple[str, int], Any] = {}
        members = []
        for member, instance_id, assigned in roster:
            members.append(GroupMember(member.member_id, instance_id, member.client_id, member.client_host,
                                       list(assigned)))
            for tp in assigned:
                owners[tp] = member
        row = GroupLag(group_id, state, protocol_type, len(members), retention_ms=retention, member_list=members,
                       revision=next(_revisions))
        known = {} if previous is None else {key: i for i, key in enumerate(previous.keys)}
        tps: list[tuple[str, int]] = []
        decoded: list[OffsetCommitValue] = []
        for key, raw in zip(keys, values):
            i = known.get(key)
            if i is None:
                k = decode_key(key)
                tps.append((k.topic, k.partition))  # type: ignore[union-attr]
                decoded.append(decode_offset_commit_value(raw))
            else:
                tps.append(previous.tps[i])  # type: ignore[union-attr]
                decoded.append(previous.decoded[i] if previous.values[i] == raw  # type: ignore[union-attr]
                               else decode_offset_commit_value(raw))
        kept = self.kept[group_id] = _Kept(keys, values, signature, tuple(tps), tuple(decoded), row, settled=settled)
        if decoded:
            expires = shard.expiry_rule(group_id)
            row.partitions = [self.partition(keys[i], tps[i], decoded[i], owners, expires)
                              for _, i in sorted(zip(tps, range(len(tps))))]
            for index, p in enumerate(row.partitions):
                if p.lag:
                    needed = first_unconsumed(p.committed, self.bounds[(p.topic, p.partition)])  # type: ignore[arg-type]
                    self.pending.append((p, needed, self.logs.cached_timestamp(p.topic, p.partition, needed),
                                         kept, index))
            row.earliest_expiry_ms = min((p.expires_at_ms for p in row.partitions if p.expires_at_ms is not None),
                                         default=None)
        return row

    def retimed(self, kept: _Kept) -> GroupLag:
        """A kept row with its time lags as of this look, updated in place (new rows would be
        tens of thousands of objects per look for the collector to walk afterwards: a reader
        keeping a row across looks copies the time lags it needs)."""
        partitions, now, timed = kept.row.partitions, self.now, kept.timed
        for i in range(0, len(timed), 2):
            stamp = timed[i + 1]
            partitions[timed[i]].time_lag_ms = None if stamp < 0 else max(0, now - stamp)
        return kept.row

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
                    self.pending.append((p, needed, self.logs.cached_timestamp(topic.name, index, needed), None, 0))
            row.partitions.append(p)
        return row

    def partition(self, key: bytes, tp: tuple[str, int], value: OffsetCommitValue, owners: dict[tuple[str, int], Any],
                  expires: Any) -> PartitionLag:
        """One committed offset with its lag (lag.compute's rules written out: this runs for every
        partition of every changed group); a partition with lag gets its time lag afterwards."""
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
        return row

    async def time_lags(self, slicer: Slicer) -> None:
        """Fill the time lags; timestamps no earlier look read are read now, one call per partition.
        A kept group remembers each timestamp, or is computed afresh next time if one is unread."""
        wanted: dict[tuple[str, int], set[int]] = {}
        for row, offset, stamp, _, _ in self.pending:
            if stamp is None:
                wanted.setdefault((row.topic, row.partition), set()).add(offset)
        read: dict[tuple[str, int, int], int | None] = {}
        for (topic, partition), offsets in wanted.items():
            ordered = sorted(offsets)
            for offset, found in zip(ordered, await self.logs.timestamps(topic, partition, ordered)):
                read[(topic, partition, offset)] = found
            if slicer.due():
                await asyncio.sleep(0)
        now = self.now
        for n, (row, offset, stamp, kept, index) in enumerate(self.pending):
            if n % 1000 == 999 and slicer.due():
                await asyncio.sleep(0)
            if stamp is None:
                stamp = read.get((row.topic, row.partition, offset))
            if kept is not None:
                if stamp is None:
                    kept.settled = False
                else:
                    kept.timed += (index, stamp)
            # lag.compute.time_lag_ms for a partition with lag: the record's age, never negative
            row.time_lag_ms = None if stamp is None or stamp < 0 else max(0, now - stamp)
