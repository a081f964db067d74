"""Helpers for the Spark suite: unique names, group offsets through AdminClient, standalone commits."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

sys.path.insert(0, str(Path(__file__).parent.parent / "integration"))

from clients import create_topic, produce  # noqa: E402,F401  (re-exported for the tests)


def unique(prefix: str) -> str:
    """A topic or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """A group's committed offsets as kafka-consumer-groups sees them (AdminClient)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in future.result(15).topic_partitions if tp.offset >= 0}


def log_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[tuple[str, int], int]:
    """Log end offsets through AdminClient.list_offsets."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)})
    return {(tp.topic, tp.partition): f.result(15).offset for tp, f in futures.items()}


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int], metadata: str | None = None) -> None:
    """One standalone (member-less) commit, like an assign() consumer or an admin tool."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = [TopicPartition(t, p, o, metadata=metadata) if metadata is not None else TopicPartition(t, p, o)
               for (t, p), o in offsets.items()]
        result = consumer.commit(offsets=tps, asynchronous=False)
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()


def records(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    """Produce `count` records round-robin over partitions, keys k<i>, values v<i>."""
    produce(bootstrap, topic, [{"key": f"k{i}", "value": f"v{i}", "partition": i % partitions}
                               for i in range(count)])


def records_at(bootstrap: str, topic: str, timestamps: dict[int, list[int]]) -> None:
    """Produce one record per (partition, CreateTime epoch ms), values p<partition>-<i>, in order."""
    produce(bootstrap, topic, [{"value": f"p{p}-{i}", "partition": p, "timestamp": ts}
                               for p, stamps in timestamps.items() for i, ts in enumerate(stamps)])
