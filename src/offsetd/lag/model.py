"""What one look at consumer lag holds, whoever took it: the broker from its own offsets table and
log ends (metrics/lag_view.py), or a tool through the admin clients against any Kafka cluster
(admin/lag_source.py). The exporter, the alert rules and the console all read these rows, so a
number is computed once and means the same everywhere. Plain data; nothing here does I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class PartitionLag:
    """One partition a group has committed to (or is assigned): kafka_exporter's
    `kafka_consumergroup_*{consumergroup,topic,partition}` row."""

    topic: str
    partition: int
    committed: int | None              # None: no commit (kafka_exporter prints -1; we omit the series)
    log_start: int | None              # None: the partition's offsets are unknown (deleted topic, not led here)
    log_end: int | None                # the last stable offset (read_committed end)
    lag: int | None                    # lag.compute.offset_lag
    time_lag_ms: int | None            # lag.compute.time_lag_ms: age of the first unconsumed record
    commit_timestamp_ms: int | None = None
    expires_at_ms: int | None = None   # when this offset expires if nothing changes (None: never)
    consumer_id: str | None = None     # the member the partition is assigned to, if any
    client_id: str | None = None
    host: str | None = None


@dataclass(slots=True)
class GroupLag:
    """One consumer group and the lag of each of its partitions."""

    group: str
    state: str                         # Kafka's GroupState names: Stable, Empty, PreparingRebalance, ...
    protocol_type: str                 # "consumer" / "share" for KIP-848 / KIP-932 groups, "" for offsets-only
    members: int
    partitions: list[PartitionLag] = field(default_factory=list)  # by topic, partition
    earliest_expiry_ms: int | None = None  # min(expires_at_ms) (None: nothing will expire)
    retention_ms: int | None = None    # the group's offsets retention (per-group override included)
    coordinator: int | None = None     # broker id of the group's coordinator, when known
    member_list: list["GroupMember"] = field(default_factory=list)  # filled where the console needs it
    # The same value in two looks of one source when the rows are equal but for time lags (the
    # broker's look hands out the same row again, its partitions' time lags updated in place, so
    # a reader keeping a row across looks copies what it needs); None: no such promise.
    # Renderers may cache by it.
    revision: int | None = None

    @property
    def total_lag(self) -> int | None:
        """Sum of the partitions' lag; None when no partition has one."""
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None

    @property
    def max_time_lag_ms(self) -> int | None:
        """The worst partition's time lag; None when no partition has one."""
        return max((p.time_lag_ms for p in self.partitions if p.time_lag_ms is not None), default=None)


@dataclass(slots=True)
class TopicPartitionEnds:
    """One partition's log offsets (kafka_exporter's `kafka_topic_partition_*` row)."""

    topic: str
    partition: int
    log_start: int
    log_end: int                       # the last stable offset
    high_watermark: int                # the log end offset, markers and open transactions included
    leader: int | None = None


@dataclass(slots=True)
class LagSnapshot:
    """Everything one look saw, at `taken_at_ms` (wall clock)."""

    taken_at_ms: int
    groups: list[GroupLag] = field(default_factory=list)          # by group id
    partitions: list[TopicPartitionEnds] = field(default_factory=list)  # by topic, partition
    seconds: float = 0.0               # how long taking it took
    cluster: str = ""                  # the cluster id (kafka-lag-exporter's cluster_name label)
    expiry_known: bool = True          # False: the source cannot tell when offsets expire (any Kafka cluster)


@dataclass(slots=True)
class GroupMember:
    """A member of a group with what it was assigned (the console's members table)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]] = field(default_factory=list)  # (topic, partition), sorted


class LagSource(Protocol):
    """Where a look at lag comes from: the broker's own state (metrics/lag_view.BrokerLagSource) or
    the admin clients against any cluster (admin/lag_source.AdminLagSource). A source may hand
    the same snapshot to callers arriving within a short time of each other."""

    async def snapshot(self) -> LagSnapshot: ...
