"""What the partitions-at-scale benches measure of a broker and through a client (single broker:
bench/partition_scale.py; cluster: bench/cluster_partition_scale.py)."""

from __future__ import annotations

import random
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from offsetd.dev.proc_stats import open_fds as fds
from offsetd.dev.proc_stats import rss_mb

__all__ = ["fds", "metadata_s", "rss_mb", "sample_round_trip"]


def metadata_s(bootstrap: str, expected: int, prefix: str) -> float:
    """Seconds for one Metadata request naming every topic (a fresh client, as a new user's);
    the topics named `prefix`... must hold `expected` partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    md = admin.list_topics(timeout=120)
    took = time.monotonic() - started
    got = sum(len(t.partitions) for name, t in md.topics.items() if name.startswith(prefix))
    assert got == expected, f"Metadata named {got} partitions, not {expected}"
    return took


def sample_round_trip(bootstrap: str, partitions: int, per_topic: int, share: float, prefix: str,
                      group: str) -> float:
    """Produce one record to each of a random `share` of the partitions (topics `prefix`N of
    `per_topic`) and read them back; seconds."""
    rng = random.Random(26)
    sample = rng.sample(range(partitions), max(1, int(partitions * share)))
    tps = [(f"{prefix}{p // per_topic}", p % per_topic) for p in sample]
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failed: list[object] = []
    for topic, partition in tps:
        producer.produce(topic, f"{topic}/{partition}".encode(), partition=partition,
                         on_delivery=lambda err, _msg: err and failed.append(err))
    left = producer.flush(300)
    assert not failed and not left, f"{len(failed)} failed, {left} undelivered: {failed[:3]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, 0) for t, p in tps])
    seen: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 300
    while len(seen) < len(tps) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                seen.add((msg.topic(), msg.partition()))
    consumer.close()
    assert len(seen) == len(tps), f"read back {len(seen)} of {len(tps)} partitions"
    return time.monotonic() - started
