"""Helpers for the share-group tests driven by confluent-kafka's ShareConsumer
(test_share_consumer*.py): group configs through AdminClient on a GROUP resource, producing,
subscribing, polling several consumers against a deadline, and the history of deliveries and
confirmed acknowledgements that a restart or failover is checked against."""

from __future__ import annotations

import collections
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
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


class History:
    """Every delivery per (partition, offset), and the acknowledgements the broker confirmed
    (commit_sync answered no error for the partition): a record accepted must never be
    delivered again; a record not confirmed may be."""

    def __init__(self) -> None:
        self.accepted: set[tuple[int, int]] = set()
        self.deliveries: collections.Counter[tuple[int, int]] = collections.Counter()

    def delivered(self, msg) -> None:
        """A delivery to the application: never of a record whose ACCEPT was confirmed."""
        key = (msg.partition(), msg.offset())
        assert key not in self.accepted, f"{key} ({msg.value()!r}) delivered again after its ACCEPT was confirmed"
        self.deliveries[key] += 1

    def commit(self, consumer: ShareConsumer, acked: list) -> None:
        """commit_sync the acknowledgements of `acked` messages; those of partitions answered without
        an error are confirmed accepted."""
        try:
            results = consumer.commit_sync(15)
        except Exception:  # noqa: BLE001 - a broker going away: nothing confirmed
            return
        failed = {tp.partition for tp, error in results.items() if error is not None}
        self.accepted |= {(m.partition(), m.offset()) for m in acked if m.partition() not in failed}


def read_accepting(history: History, consumer: ShareConsumer, done, timeout: float = 60.0) -> None:
    """Poll, ACCEPT and commit every batch until `done()`."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out; {len(history.accepted)} accepted"
        batch = list(consumer.poll(0.3))
        for msg in batch:
            assert msg.error() is None, msg.error()
            history.delivered(msg)
            consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
        if batch:
            history.commit(consumer, batch)
