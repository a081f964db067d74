"""Share groups driven by a client we did not write: confluent-kafka's ShareConsumer (librdkafka
2.16), heartbeating with ShareGroupHeartbeat and reading with ShareFetch/ShareAcknowledge
(reference share-groups.md §7-§8; confluent-kafka-python's own share-consumer suite sets
share.auto.offset.reset=earliest on the GROUP resource, as done here)."""

from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AclOperation, AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType,
)

from clients import create_topic
from group_helpers import unique
from integration.acl_helpers import GROUP, TOPIC, binding, conf, grant, secured_overrides
from share_helpers import BROKER, group_configs, poll_until, produce, share_consumer


def test_two_share_consumers_read_every_record_once(broker_factory) -> None:
    broker = broker_factory(BROKER)
    topic, group = unique("sc"), unique("q")
    create_topic(broker.bootstrap, topic, 4)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    values = [f"v{i}".encode() for i in range(200)]
    produce(broker.bootstrap, topic, values, 4)
    a, b = share_consumer(broker.bootstrap, group, topic), share_consumer(broker.bootstrap, group, topic)
    try:
        seen = poll_until([a, b], lambda s: len({m.value() for _, m in s}) == len(values))
        read = [m.value() for _, m in seen]
        assert sorted(read) == sorted(values)  # each once: implicit acknowledgement accepted them
        assert {m.delivery_count() for _, m in seen} == {1}
    finally:
        a.close()
        b.close()


def test_released_records_come_back_and_rejected_ones_never(broker_factory) -> None:
    broker = broker_factory(BROKER)
    topic, group = unique("sc-ack"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic, [b"keep", b"again", b"drop"], 1)
    consumer = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    verdict = {b"keep": AcknowledgeType.ACCEPT, b"again": AcknowledgeType.RELEASE, b"drop": AcknowledgeType.REJECT}
    deliveries: list[tuple[bytes, int]] = []

    def judge(c: ShareConsumer, msg) -> None:
        deliveries.append((msg.value(), msg.delivery_count()))
        c.acknowledge(msg, AcknowledgeType.ACCEPT if msg.delivery_count() > 1 else verdict[msg.value()])

    try:
        poll_until([consumer], lambda s: (b"again", 2) in deliveries, on_message=judge)
        consumer.commit_sync(15)
        assert sorted(deliveries) == [(b"again", 1), (b"again", 2), (b"drop", 1), (b"keep", 1)]
    finally:
        consumer.close()


def test_a_record_whose_lock_runs_out_goes_to_another_consumer(broker_factory) -> None:
    broker = broker_factory(BROKER)
    topic, group = unique("sc-lock"), unique("q")
    create_topic(broker.bootstrap, topic, 1)
    group_configs(broker.bootstrap, group, share_auto_offset_reset="earliest")
    produce(broker.bootstrap, topic, [b"slow"], 1)
    holder = share_consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    other = share_consumer(broker.bootstrap, group, topic)
    try:
        poll_until([holder], lambda s: len(s) == 1)  # acquired, never acknowledged: the lock runs out
        seen = poll_until([other], lambda s: len(s) == 1, timeout=30)
        assert [(m.value(), m.delivery_count()) for _, m in seen] == [(b"slow", 2)]
    finally:
        other.close()
        holder.close()


def test_share_groups_under_sasl_and_acls(broker_factory) -> None:
    """SASL_PLAINTEXT with ACLs: alice reads with READ on the group and the topic (DESCRIBE for the
    heartbeat); bob, without READ on the group, is refused and reads nothing."""
    broker = broker_factory(secured_overrides(**BROKER))
    topic, group = unique("sc-acl"), unique("q")
    admin = AdminClient(conf(broker.bootstrap, "admin"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    producer = Producer(conf(broker.bootstrap, "admin", **{"linger.ms": 5}))
    for i in range(5):
        producer.produce(topic, f"s{i}".encode(), partition=0)
    assert producer.flush(15) == 0
    grant(broker.bootstrap, binding("alice", GROUP, group, AclOperation.READ),
          binding("alice", TOPIC, topic, AclOperation.READ), binding("alice", TOPIC, topic, AclOperation.DESCRIBE),
          binding("bob", TOPIC, topic, AclOperation.READ), binding("bob", TOPIC, topic, AclOperation.DESCRIBE))
    alice = ShareConsumer(conf(broker.bootstrap, "alice", **{"group.id": group}))
    alice.subscribe([topic])
    bob = ShareConsumer(conf(broker.bootstrap, "bob", **{"group.id": group}))
    bob.subscribe([topic])
    try:
        seen = poll_until([alice], lambda s: len(s) == 5)
        assert sorted(m.value() for _, m in seen) == [f"s{i}".encode() for i in range(5)]
        refused = None
        deadline = time.monotonic() + 20
        while refused is None:
            assert time.monotonic() < deadline, "bob was never refused"
            try:
                for msg in bob.poll(0.5):
                    assert msg.error() is not None, f"bob read {msg.value()!r}"
                    refused = msg.error()
            except KafkaException as exc:
                refused = exc.args[0]
        assert "authoriz" in str(refused).lower()
    finally:
        alice.close()
        bob.close()
