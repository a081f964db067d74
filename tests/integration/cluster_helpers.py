"""Helpers of the cluster tests: settle waits, coordinator lookup, and committing groups whose
every acknowledged commit is logged (for the history checks)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import asyncpg
import kafka
from broker_process import wait_for
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from offsetd.cluster.ownership import rendezvous_owner
from offsetd.records.offsets import partition_for

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
        "offsets.topic.num.partitions": "12"}


def wait_settled(cluster, brokers: int) -> None:
    """Until every broker sees `brokers` live brokers and every offsets partition led by its
    preferred owner (rendezvous hashing), so nothing moves any more unless a broker goes: each
    broker answers Metadata from its own view, so each is asked."""
    offsets_id = wait_for(lambda: pg_rows(cluster.dsn, "SELECT topic_id FROM offsetd_topic "
                                                       "WHERE name = '__consumer_offsets'"), timeout=30,
                          message="__consumer_offsets in the catalogue")[0][0]

    def settled_at(bootstrap: str) -> bool:
        md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
        topic = md.topics.get("__consumer_offsets")
        if len(md.brokers) != brokers or topic is None or len(topic.partitions) != 12:
            return False
        live = sorted(md.brokers)
        return all(p.leader == rendezvous_owner((offsets_id, p.id), live) for p in topic.partitions.values())
    wait_for(lambda: all(settled_at(cluster.broker(n).bootstrap) for n in cluster.live_node_ids()), timeout=30,
             message=f"offsets partitions led by their preferred owners among {brokers} brokers")


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's leader as Metadata reports it (-1: none right now)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return md.topics[topic].partitions[partition].leader


def coordinator_of(bootstrap: str, group: str) -> int:
    """The leader of the group's __consumer_offsets partition (Kafka's hash), from Metadata."""
    return leader_of(bootstrap, "__consumer_offsets", partition_for(group, 12))


def new_owner(cluster, group: str, old: int) -> int | None:
    """The group's coordinator if Metadata names a live broker other than `old`, else None. One
    answer per call: each broker answers from its own view, so two lookups in a row may disagree
    (one may still name the old owner, or none) while ownership moves."""
    node = coordinator_of(cluster.bootstrap, group)
    return node if node != old and node in cluster.live_node_ids() else None


@dataclass
class GroupHistory:
    """Everything one committing group did: values sent, values acknowledged (in order)."""

    group: str
    sent: list[int] = field(default_factory=list)
    acked: list[tuple[float, int]] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)


def commit_forever(bootstrap: str, history: GroupHistory, stop: threading.Event, client: str) -> None:
    """Commit 1, 2, 3, … for one partition, synchronously, logging each acknowledged value."""
    if client == "confluent":
        # A frozen broker keeps its TCP connections open: librdkafka gives up on a request after
        # socket.timeout.ms (60 s by default), then looks the coordinator up again.
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": history.group, "enable.auto.commit": False,
                             "log_level": 0, "socket.timeout.ms": 4000})

        def commit(value: int) -> None:
            consumer.commit(offsets=[TopicPartition("hist", 0, value)], asynchronous=False)
    else:
        consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=history.group, enable_auto_commit=False)

        def commit(value: int) -> None:
            consumer.commit({kafka.TopicPartition("hist", 0): kafka.OffsetAndMetadata(value, None, -1)})
    value = 0
    try:
        while not stop.is_set():
            value += 1
            history.sent.append(value)
            try:
                commit(value)
            except Exception as exc:  # noqa: BLE001 - retried with the next value, as an application would
                history.errors[type(exc).__name__] += 1
                time.sleep(0.05)
                continue
            history.acked.append((time.monotonic(), value))
    finally:
        consumer.close()


COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                      KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def committed(bootstrap: str, group: str) -> int:
    """The group's committed offset of hist-0, asked again while the coordinator is moving (a
    retriable NOT_COORDINATOR or load in progress, as an application would retry it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})

    def ask() -> int | None:
        try:
            return consumer.committed([TopicPartition("hist", 0)], timeout=15)[0].offset
        except KafkaException as exc:
            if exc.args[0].code() not in COORDINATOR_MOVING:
                raise
            return None
    try:
        return wait_for(lambda: (offset := ask()) is not None and (offset,), timeout=30,
                        message="an answer from the group's coordinator")[0]
    finally:
        consumer.close()


def pg_rows(dsn: str, sql: str, *args: object) -> list[tuple]:
    """Rows of a query against the cluster's PostgreSQL (to check what was written, and by whom)."""
    async def run() -> list[tuple]:
        conn = await asyncpg.connect(dsn)
        try:
            return [tuple(r) for r in await conn.fetch(sql, *args)]
        finally:
            await conn.close()
    return asyncio.run(run())
