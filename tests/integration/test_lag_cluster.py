"""Lag in cluster mode (PostgreSQL): the broker coordinating a group reports its lag on partitions
that other brokers lead from PostgreSQL's copy of the log (offsets, and the batch holding the
first unconsumed record), never from another broker; the numbers equal `offsetd groups
--describe`, and each broker reports only the groups it coordinates."""

from __future__ import annotations

import json
import re
import urllib.request

from confluent_kafka import Consumer, Producer, TopicPartition

from broker_process import wait_for
from clients import create_topic
from integration.cluster_helpers import FAST, coordinator_of, leader_of, wait_settled
from integration.test_lag_metrics import describe

_LISTENING = re.compile(r"metrics listening on (http://127\.0\.0\.1:\d+)")


def lag_of(url: str, group: str) -> dict:
    with urllib.request.urlopen(f"{url}/v1/lag?group={group}", timeout=15) as response:
        groups = json.loads(response.read())["groups"]
    return groups[0] if groups else {}


def test_lag_of_partitions_led_elsewhere_comes_from_postgresql(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, size=2, overrides={**FAST, "metrics.listener": "http://127.0.0.1:0"})
    wait_settled(cluster, 2)
    urls = {n: _LISTENING.search(cluster.broker(n).log()).group(1) for n in (1, 2)}  # type: ignore[union-attr]
    topic = "spread"
    create_topic(cluster.bootstrap, topic, 6)
    leaders = wait_for(lambda: (lambda ls: ls if all(l in (1, 2) for l in ls) else None)(
        [leader_of(cluster.bootstrap, topic, p) for p in range(6)]), timeout=30, message="leaders of every partition")
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(60):
        producer.produce(topic, value=b"x", partition=i % 6)
    assert producer.flush(30) == 0
    group = next(g for g in (f"lagging-{i}" for i in range(100))
                 if coordinator_of(cluster.bootstrap, g) in (1, 2)
                 and any(l != coordinator_of(cluster.bootstrap, g) for l in leaders))
    coordinator = coordinator_of(cluster.bootstrap, group)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, p) for p in range(6)], asynchronous=False)
    consumer.close()
    rows = describe(cluster.broker(coordinator), group)

    looked = wait_for(lambda: lag_of(urls[coordinator], group), timeout=15, message="the coordinator's look")
    assert {(p["topic"], p["partition"]): (p["committed"], p["log_end"], p["lag"]) for p in looked["partitions"]} == {
        (r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows} == {
        (topic, p): (p, 10, 10 - p) for p in range(6)}
    elsewhere = [p for p in looked["partitions"] if leaders[p["partition"]] != coordinator]
    assert elsewhere and all(p["time_lag_ms"] is not None and p["time_lag_ms"] >= 0 for p in elsewhere)
    other = 2 if coordinator == 1 else 1
    assert lag_of(urls[other], group) == {}  # not coordinated there
