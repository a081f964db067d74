"""The coordinators' settings from the broker's Kafka keys: the group coordinator's (classic,
KIP-848 consumer and KIP-932 share groups) and what the share-fetch side reads of share groups."""

from __future__ import annotations

from ..config import BrokerConfig
from ..coordinator.config import ConsumerGroupConfig, GroupCoordinatorConfig, ShareGroupConfig


def coordinator_config(config: BrokerConfig) -> GroupCoordinatorConfig:
    """The coordinator's settings from the broker's Kafka keys."""
    return GroupCoordinatorConfig(
        num_partitions=config.get("offsets.topic.num.partitions"),
        session_timeout_min_ms=config.get("group.min.session.timeout.ms"),
        session_timeout_max_ms=config.get("group.max.session.timeout.ms"),
        initial_rebalance_delay_ms=config.get("group.initial.rebalance.delay.ms"),
        group_max_size=config.get("group.max.size"),
        metadata_max_bytes=config.get("offset.metadata.max.bytes"),
        retention_ms=config.get("offsets.retention.minutes") * 60 * 1000,
        retention_check_interval_ms=config.get("offsets.retention.check.interval.ms"),
        consumer=ConsumerGroupConfig(
            session_timeout_ms=config.get("group.consumer.session.timeout.ms"),
            heartbeat_interval_ms=config.get("group.consumer.heartbeat.interval.ms"),
            max_size=config.get("group.consumer.max.size"),
            assignors=config.get("group.consumer.assignors"),
            migration_policy=config.get("group.consumer.migration.policy")),
        share=share_group_config(config),
    )


def share_group_config(config: BrokerConfig) -> ShareGroupConfig:
    """Share groups' settings from the broker's Kafka keys (the coordinator's and the fetch side's)."""
    return ShareGroupConfig(
        enabled=config.get("group.share.enable"),
        session_timeout_ms=config.get("group.share.session.timeout.ms"),
        heartbeat_interval_ms=config.get("group.share.heartbeat.interval.ms"),
        max_size=config.get("group.share.max.size"),
        assignor=config.get("group.share.assignors"),
        record_lock_duration_ms=config.get("group.share.record.lock.duration.ms"),
        delivery_count_limit=config.get("group.share.delivery.count.limit"),
        partition_max_record_locks=config.get("group.share.partition.max.record.locks"),
        max_share_sessions=config.get("group.share.max.share.sessions"))
