"""Helpers for the share-group tests driven by confluent-kafka's ShareConsumer
(test_share_consumer*.py): group configs through AdminClient on a GROUP resource, producing,
subscribing, and polling several consumers against a deadline."""

from __future__ import annotations

import time

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

# Short locks so a test sees one run out: the broker's lower bound is the minimum it allows.
BROKER = {"group.share.min.record.lock.duration.ms": "1000", "group.share.record.lock.duration.ms": "1000",
          "group.share.heartbeat.interval.ms": "5000", "group.share.min.heartbeat.interval.ms": "1000"}


def group_configs(bootstrap: str, group: str, **configs: str) -> None:
    """Set group configs (share_auto_offset_reset="earliest" for share.auto.offset.reset) with
    IncrementalAlterConfigs on the GROUP resource, as confluent-kafka's own suite does."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result(15)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int, *, each_alone: bool = False,
            timestamp_ms: int = 0) -> None:
    """Produce `values` round robin over the partitions; `each_alone`: one record per log batch
    (a flush after each), `timestamp_ms`: the records' CreateTime (0: now)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if each_alone else 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions, timestamp=timestamp_ms)
        if each_alone:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0


def share_consumer(bootstrap: str, group: str, topic: str, **conf: str) -> ShareConsumer:
    """A ShareConsumer of `group` subscribed to `topic`."""
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **conf})
    consumer.subscribe([topic])
    return consumer


def poll_until(consumers: list[ShareConsumer], condition, timeout: float = 45.0, on_message=None) -> list:
    """Poll every consumer (0.2 s each) until `condition(messages so far)`; the messages."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while not condition(seen):
        assert time.monotonic() < deadline, f"timed out; {len(seen)} messages read"
        for consumer in consumers:
            for msg in consumer.poll(0.2):
                assert msg.error() is None, msg.error()
                seen.append((consumer, msg))
                if on_message is not None:
                    on_message(consumer, msg)
    return seen
