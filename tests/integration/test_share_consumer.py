"""Share groups driven by a client we did not write: confluent-kafka's ShareConsumer (librdkafka
2.16), heartbeating with ShareGroupHeartbeat and reading with ShareFetch/ShareAcknowledge
(reference share-groups.md §7-§8; confluent-kafka-python's own share-consumer suite sets
share.auto.offset.reset=earliest on the GROUP resource, as done here)."""

from __future__ import annotations

from confluent_kafka import AcknowledgeType, ShareConsumer

from clients import create_topic
from group_helpers import unique
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
