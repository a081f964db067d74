"""Consumer groups with kafka-python and aiokafka: two-member groups share the partitions, consume
what was produced, commit (with metadata) and read the committed offsets back, also across
clients (reference §1.1, §1.3, §1.6-§1.9)."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTP
from confluent_kafka import Consumer, TopicPartition as CfTP
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata

from clients import create_topic, kafka_python_subscriber, produce
from group_helpers import (GROUP_BROKER, Member, ThreadedKafkaPythonMember, balanced, member_conf, poll_until,
                           unique)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PARTITIONS, PER_PARTITION = 4, 10


def _produce_all(bootstrap: str, topic: str) -> None:
    produce(bootstrap, topic, [{"value": f"{p}-{i}".encode(), "partition": p}
                               for p in range(PARTITIONS) for i in range(PER_PARTITION)])


def _confluent_committed(bootstrap: str, group: str, topic: str) -> dict[int, tuple]:
    consumer = Consumer(member_conf(bootstrap, group))
    try:
        got = consumer.committed([CfTP(topic, p) for p in range(PARTITIONS)], timeout=10)
        return {tp.partition: (tp.offset, tp.metadata) for tp in got}
    finally:
        consumer.close()


def _complete(records: list, partitions: set[int]) -> bool:
    """True when `records` hold every produced offset of each of `partitions` (a member may also
    hold records of partitions it owned before a rebalance)."""
    seen = {(r.partition, r.offset) for r in records}
    return all((p, o) in seen for p in partitions for o in range(PER_PARTITION))


def _kp_consumer(bootstrap: str, group: str, topic: str, client_id: str) -> KafkaConsumer:
    return kafka_python_subscriber(topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                                   enable_auto_commit=False, auto_offset_reset="earliest",
                                   heartbeat_interval_ms=300, session_timeout_ms=10000)


def test_kafka_python_group_consume_commit_read_back(broker_factory):
    """kafka-python in a group with a librdkafka member (both offer "range"; §1.6 protocol
    selection across clients): they split 4 partitions 2/2, each reads its partitions fully; the
    kafka-python member commits its positions (sync) and committed() returns them; an explicit
    commit with metadata reads back through kafka-python's admin client (one multi-group
    OffsetFetch) and through librdkafka (cross-client OffsetFetch, §1.3).

    (Two kafka-python 3.0.12 consumers in one process occasionally hang inside the client's IO
    loop, a task neither ready nor in flight while the broker has answered everything, so the
    second member here is confluent-kafka.)"""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("kp"), unique("gkp")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    _produce_all(broker.bootstrap, topic)
    kp = ThreadedKafkaPythonMember(lambda: _kp_consumer(broker.bootstrap, group, topic, "kp0"), "kp0")
    cf = Member(broker.bootstrap, group, [topic], "cf0", **{"partition.assignment.strategy": "range"})
    members = [kp, cf]
    try:
        poll_until(members, lambda: balanced(members, PARTITIONS, per_member=2)
                   and _complete(kp.records, kp.partitions()) and _complete(cf.messages_as_records(), cf.partitions()),
                   timeout=30, message="a kafka-python and a librdkafka member, 2 partitions each, read fully")
        assert not kp.errors and not cf.errors, (kp.errors, cf.errors)
        kp.call(lambda c: c.commit())
        for p in kp.partitions():
            assert kp.call(lambda c, p=p: c.committed(TopicPartition(topic, p))) == PER_PARTITION
        p0 = min(kp.partitions())
        kp.call(lambda c: c.commit({TopicPartition(topic, p0): OffsetAndMetadata(7, "kp-meta", -1)}))
        assert kp.call(lambda c: c.committed(TopicPartition(topic, p0))) == 7
        kp_partitions = kp.partitions()
    finally:
        for m in members:
            m.close()

    # kafka-python's admin fetches several groups in one OffsetFetch (v8+ multi-group layout, §1.3);
    # a group that does not exist answers an empty "all topics" list, not an error
    unknown = unique("gnone")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        offsets = admin.list_group_offsets({group: None, unknown: None})
    finally:
        admin.close()
    assert {tp.partition: (om.offset, om.metadata) for tp, om in offsets[group].items() if tp.topic == topic} == {
        p: (7, "kp-meta") if p == p0 else (PER_PARTITION, "") for p in kp_partitions}
    assert not offsets[unknown]
    committed = _confluent_committed(broker.bootstrap, group, topic)
    assert {p: committed[p] for p in kp_partitions} == {
        p: (7, "kp-meta") if p == p0 else (PER_PARTITION, None) for p in kp_partitions}
    assert all(committed[p][0] == -1001 for p in set(range(PARTITIONS)) - kp_partitions)


def test_aiokafka_group_consume_commit_read_back(broker_factory):
    """aiokafka: two AIOKafkaConsumers in one group split 4 partitions (2 each), each reads its
    partitions fully, commits (sync, OffsetCommit v3 with RetentionTimeMs -1), and committed()
    returns the positions; a commit with metadata reads back through librdkafka (§1.1, §1.3)."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("aio"), unique("gaio")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    _produce_all(broker.bootstrap, topic)

    async def run():
        consumers = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                      client_id=f"aio{i}", enable_auto_commit=False,
                                      auto_offset_reset="earliest", heartbeat_interval_ms=300,
                                      session_timeout_ms=10000) for i in range(2)]
        received: dict[int, list] = {0: [], 1: []}
        for consumer in consumers:
            await consumer.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                for i, consumer in enumerate(consumers):
                    batches = await consumer.getmany(timeout_ms=100)
                    for records in batches.values():
                        received[i].extend(records)
                assignments = [{tp.partition for tp in c.assignment()} for c in consumers]
                if (all(len(a) == 2 for a in assignments) and set().union(*assignments) == set(range(PARTITIONS))
                        and all(_complete(received[i], assignments[i]) for i in range(2))):
                    break
                assert time.monotonic() < deadline, f"assignments {assignments}"
            for i, consumer in enumerate(consumers):
                await asyncio.wait_for(consumer.commit(), 15)  # aiokafka retries failed commits forever
                for p in assignments[i]:
                    assert await consumer.committed(AioTP(topic, p)) == PER_PARTITION
            p0 = min(assignments[0])
            await asyncio.wait_for(consumers[0].commit({AioTP(topic, p0): (3, "aio-meta")}), 15)
            assert await consumers[0].committed(AioTP(topic, p0)) == 3
            return p0
        finally:
            for consumer in consumers:
                await consumer.stop()

    p0 = asyncio.run(asyncio.wait_for(run(), 60))
    assert _confluent_committed(broker.bootstrap, group, topic) == {
        p: (3, "aio-meta") if p == p0 else (PER_PARTITION, None) for p in range(PARTITIONS)}
