"""Group coordinator settings (Kafka's key names in comments; defaults are Kafka's)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ConsumerGroupConfig:
    """Settings of the consumer protocol (Kafka's keys and defaults, B1)."""

    session_timeout_ms: int = 45000          # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000        # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1                # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; first = default
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy (upgrade, downgrade, disabled)


@dataclass(frozen=True)
class ShareGroupConfig:
    """Settings of KIP-932 share groups (Kafka's keys and defaults, share-groups.md §1): the
    coordinator's membership ones, and those the share-fetch side reads."""

    enabled: bool = True                      # group.share.enable
    session_timeout_ms: int = 45000           # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5000         # group.share.heartbeat.interval.ms
    max_size: int = 200                       # group.share.max.size
    assignor: str = "simple"                  # group.share.assignors
    record_lock_duration_ms: int = 30000      # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5             # group.share.delivery.count.limit
    partition_max_record_locks: int = 2000    # group.share.partition.max.record.locks
    max_share_sessions: int = 2000            # group.share.max.share.sessions


@dataclass(frozen=True)
class GroupCoordinatorConfig:
    """Settings one shard needs."""

    num_partitions: int = 50                    # offsets.topic.num.partitions
    session_timeout_min_ms: int = 6000          # group.min.session.timeout.ms
    session_timeout_max_ms: int = 1800000       # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000      # group.initial.rebalance.delay.ms
    group_max_size: int = 2**31 - 1             # group.max.size
    metadata_max_bytes: int = 4096              # offset.metadata.max.bytes
    retention_ms: int = 10080 * 60 * 1000       # offsets.retention.minutes
    retention_check_interval_ms: int = 600000   # offsets.retention.check.interval.ms
    consumer: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)  # group.consumer.*
    share: ShareGroupConfig = field(default_factory=ShareGroupConfig)  # group.share.*
