"""A look at lag through the admin clients, against offsetd or any Kafka cluster: the LagSource of
`offsetd lag` and `offsetd console --bootstrap-server`. The numbers are `offsetd groups --describe
--verbose`'s, computed by the same code (describe.offset_rows): ListGroups, DescribeGroups,
OffsetFetch per group, ListOffsets (read_committed) for the partitions shown, and the first
unconsumed record's timestamp for time lag. A plain Kafka cluster does not say when offsets
expire, so expiry is unknown (None) here; the broker's own view has it."""

from __future__ import annotations

import asyncio
import re
import time

from ..lag.compute import record_needed
from ..lag.model import GroupLag, GroupMember, LagSnapshot, PartitionLag, TopicPartitionEnds
from ..metrics.lag_view import SharedLook
from .cluster import Cluster
from .describe import offset_rows, partition_owners
from .model import TP
from .table import MISSING


class AdminLagSource:
    """LagSource over a Cluster (blocking clients, run on a worker thread); concurrent callers
    share the look in progress."""

    def __init__(self, cluster: Cluster, include: re.Pattern[str] | None = None) -> None:
        self.cluster = cluster
        self.include = include  # only groups whose whole id matches (None: all)
        self.snapshot = SharedLook(lambda: asyncio.to_thread(self.take))

    def take(self) -> LagSnapshot:
        """One look (blocking): every group the principal may describe, with lag per partition."""
        started = time.perf_counter()
        listed = [g.group for g in self.cluster.list_groups()
                  if self.include is None or self.include.fullmatch(g.group)]
        descriptions = [d for d in self.cluster.describe_groups(listed).values() if d.state != "Dead"]
        committed = {d.group: self.cluster.committed_offsets(d.group) for d in descriptions}
        shown = {tp for d in descriptions for tp, _ in partition_owners(d, committed[d.group])}
        bounds = self.cluster.log_bounds(shown)
        wanted: set[tuple[TP, int]] = set()
        for d in descriptions:
            for tp, commit in committed[d.group].items():
                needed = record_needed(commit.offset, bounds.get(tp))
                if needed is not None:
                    wanted.add((tp, needed))
        timestamps = self.cluster.first_record_timestamps(wanted)
        now = int(time.time() * 1000)
        snapshot = LagSnapshot(taken_at_ms=now, expiry_known=False)
        for d in sorted(descriptions, key=lambda d: d.group):
            rows = [r for r in offset_rows(d, committed[d.group], bounds, timestamps, now) if r.committed is not None]
            group = GroupLag(d.group, d.state, "consumer" if d.members or d.assignment_strategy else "", len(d.members),
                             coordinator=d.coordinator.id if d.coordinator else None,
                             member_list=[GroupMember(m.consumer_id, m.group_instance_id, m.client_id, m.host,
                                                      sorted((tp.topic, tp.partition) for tp in m.assignment))
                                          for m in d.members])
            for r in sorted(rows, key=lambda r: (r.tp.topic, r.tp.partition)):
                group.partitions.append(PartitionLag(
                    r.tp.topic, r.tp.partition, r.committed.offset if r.committed else None,
                    r.bounds.start if r.bounds else None, r.bounds.end if r.bounds else None, r.lag, r.lag_time_ms,
                    consumer_id=_or_none(r.consumer_id), client_id=_or_none(r.client_id), host=_or_none(r.host)))
            snapshot.groups.append(group)
        snapshot.partitions = [TopicPartitionEnds(tp.topic, tp.partition, b.start, b.end, b.end)
                               for tp, b in sorted(bounds.items()) if b is not None]
        snapshot.seconds = time.perf_counter() - started
        return snapshot


def _or_none(value: str) -> str | None:
    return None if value in (MISSING, "") else value
