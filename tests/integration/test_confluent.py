"""Produce/consume round trips with confluent-kafka (librdkafka) against a real broker process."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from clients import consume_all, create_topic, produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_keys_headers_timestamps_every_codec(shared_broker, codec):
    topic = f"rt-{codec}"
    create_topic(shared_broker.bootstrap, topic, partitions=3)
    messages = [{"key": f"k{i}".encode(), "value": f"value-{i}".encode() * 3, "partition": i % 3,
                 "headers": [("h", f"{i}".encode()), ("empty", b"")], "timestamp": 1_700_000_000_000 + i}
                for i in range(300)]
    delivered = produce(shared_broker.bootstrap, topic, messages, **{"compression.type": codec})
    assert sorted(m.offset() for m in delivered if m.partition() == 0) == list(range(100))
    received = consume_all(shared_broker.bootstrap, topic, [0, 1, 2], 300)
    got = {m.key(): (m.value(), m.headers(), m.timestamp()[1], m.partition()) for m in received}
    for i in range(300):
        value, headers, ts, partition = got[f"k{i}".encode()]
        assert value == f"value-{i}".encode() * 3
        assert headers == [("h", f"{i}".encode()), ("empty", b"")]
        assert ts == 1_700_000_000_000 + i and partition == i % 3
    # per-partition order is production order
    for p in range(3):
        keys = [m.key() for m in received if m.partition() == p]
        assert keys == [f"k{i}".encode() for i in range(p, 300, 3)]


def test_many_partitions_and_null_keys_values(shared_broker):
    topic = "many-parts"
    create_topic(shared_broker.bootstrap, topic, partitions=32)
    produce(shared_broker.bootstrap, topic, [{"value": None if i % 7 == 0 else b"x" * i, "partition": i % 32}
                                               for i in range(640)])
    received = consume_all(shared_broker.bootstrap, topic, list(range(32)), 640)
    assert sum(1 for m in received if m.value() is None) == len([i for i in range(640) if i % 7 == 0])
    assert {m.partition() for m in received} == set(range(32))


def test_idempotent_producer(shared_broker):
    topic = "idem"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    produce(shared_broker.bootstrap, topic, [{"value": str(i).encode(), "partition": i % 2} for i in range(2000)],
            **{"enable.idempotence": True, "acks": "all"})
    received = consume_all(shared_broker.bootstrap, topic, [0, 1], 2000)
    assert sorted(int(m.value()) for m in received) == list(range(2000))


def test_offsets_for_times_and_watermarks(shared_broker):
    topic = "times"
    create_topic(shared_broker.bootstrap, topic)
    base = 1_600_000_000_000
    produce(shared_broker.bootstrap, topic, [{"value": b"v", "timestamp": base + 10 * i} for i in range(50)],
            **{"batch.num.messages": 7})
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "t"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 50)
        cases = {base: 0, base + 15: 2, base + 490: 49, base + 491: -1, base - 5: 0, base + 200: 20}
        for ts, offset in cases.items():
            [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.offset == offset, (ts, tp.offset)
    finally:
        consumer.close()


def test_admin_create_describe_partitions_delete(shared_broker):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    fut = admin.create_topics([NewTopic("adm", 2, 1, config={"retention.ms": "3600000"})])["adm"]
    fut.result(10)
    dup = admin.create_topics([NewTopic("adm", 2, 1)])["adm"]
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS|already exists"):
        dup.result(10)
    bad = admin.create_topics([NewTopic("bad name!", 1, 1)])["bad name!"]
    with pytest.raises(Exception, match="INVALID_TOPIC|illegal"):
        bad.result(10)
    rf = admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"]
    with pytest.raises(Exception, match="INVALID_REPLICATION_FACTOR|Replication factor"):
        rf.result(10)
    cfg = admin.create_topics([NewTopic("badcfg", 1, 1, config={"no.such": "1"})])["badcfg"]
    with pytest.raises(Exception, match="INVALID_CONFIG|Unknown topic config"):
        cfg.result(10)

    [res] = admin.describe_configs([ConfigResource("topic", "adm")]).values()
    configs = res.result(10)
    assert configs["retention.ms"].value == "3600000" and not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"

    [broker_res] = admin.describe_configs([ConfigResource("broker", "1")]).values()
    assert "log.segment.bytes" in broker_res.result(10)

    admin.create_partitions([NewPartitions("adm", 5)])["adm"].result(10)
    assert len(admin.list_topics(timeout=10).topics["adm"].partitions) == 5
    shrink = admin.create_partitions([NewPartitions("adm", 3)])["adm"]
    with pytest.raises(Exception, match="INVALID_PARTITIONS|higher than"):
        shrink.result(10)

    admin.delete_topics(["adm"])["adm"].result(10)
    assert "adm" not in admin.list_topics(timeout=10).topics
    gone = admin.delete_topics(["adm"])["adm"]
    with pytest.raises(Exception, match="UNKNOWN_TOPIC"):
        gone.result(10)


def test_auto_create_on_metadata(shared_broker):
    produce(shared_broker.bootstrap, "auto-created", [{"value": b"a"}])
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    assert len(admin.list_topics(timeout=10).topics["auto-created"].partitions) == 1
