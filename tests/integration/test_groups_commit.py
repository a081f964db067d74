"""Offset commit and fetch with confluent-kafka: sync and async commits with metadata and leader
epoch, read back with committed(), surviving kill -9; the standalone (simple) consumer path; and
OFFSET_METADATA_TOO_LARGE per partition (reference §1.1, §1.3, §5, §7.12)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from clients import create_topic, produce
from group_helpers import GROUP_BROKER, Member, member_conf, poll_until, raw_offset_commit, raw_offset_fetch, unique


def _committed(consumer: Consumer, topic: str, partitions) -> dict[int, tuple]:
    result = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    for tp in result:
        assert tp.error is None, tp.error
    return {tp.partition: (tp.offset, tp.metadata, tp.leader_epoch) for tp in result}


def test_commit_sync_async_metadata_epoch_survive_kill9(broker_factory):
    """§1.1: a group member's sync commit (offset, metadata, leader epoch) and a later async commit
    are acknowledged and read back exactly by committed() (OffsetFetch §1.3); §5/issue 3: after
    kill -9 of the broker, the offsets log is replayed and a NEW consumer in the same group
    resumes exactly at the last committed offsets, which read back with metadata and epoch."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("commit"), unique("gcommit")
    create_topic(broker.bootstrap, topic, partitions=3)
    produce(broker.bootstrap, topic, [{"value": f"{p}-{i}".encode(), "partition": p}
                                      for p in range(3) for i in range(10)])
    results: list = []
    # a short session so the dead consumer's membership (reloaded from the log) expires quickly
    first = Member(broker.bootstrap, group, [topic], "first",
                   **{"session.timeout.ms": 2000, "on_commit": lambda err, parts: results.append((err, parts))})
    try:
        poll_until([first], lambda: len(first.messages) == 30, timeout=20, message="30 messages consumed")
        epochs = {m.partition(): m.leader_epoch() for m in first.messages}

        sync = first.consumer.commit(offsets=[TopicPartition(topic, p, 2 + p, metadata=f"sync-{p}", leader_epoch=7)
                                              for p in range(3)], asynchronous=False)
        assert sorted((tp.partition, tp.offset, tp.error) for tp in sync) == [(p, 2 + p, None) for p in range(3)]
        assert _committed(first.consumer, topic, range(3)) == {p: (2 + p, f"sync-{p}", 7) for p in range(3)}

        final = {p: 5 + p for p in range(3)}
        first.consumer.commit(offsets=[TopicPartition(topic, p, final[p], metadata=f"async-ü-{p}",
                                                      leader_epoch=epochs[p]) for p in range(3)],
                              asynchronous=True)
        poll_until([first], lambda: results, timeout=10, message="the async commit callback")
        err, parts = results[0]
        assert err is None, err
        assert sorted((tp.partition, tp.offset, tp.error) for tp in parts) == [(p, final[p], None) for p in range(3)]
        expected = {p: (final[p], f"async-ü-{p}", epochs[p]) for p in range(3)}
        assert _committed(first.consumer, topic, range(3)) == expected

        broker.kill9()  # nothing else happened since the acknowledgement
        first.close()   # the broker is down: no LeaveGroup reaches it
        broker.start()
        # __consumer_offsets is preallocated: recovery trims its zero-filled tail as such, not as damage
        assert "preallocated bytes" in broker.log() and "truncating" not in broker.log()

        second = Member(broker.bootstrap, group, [topic], "second")
        try:
            poll_until([second], lambda: {m.partition() for m in second.messages} == {0, 1, 2}, timeout=20,
                       message="the new consumer fetching every partition")
            first_offsets = {}
            for m in second.messages:
                first_offsets.setdefault(m.partition(), m.offset())
            assert first_offsets == final
            assert _committed(second.consumer, topic, range(3)) == expected
        finally:
            second.close()
    finally:
        first.close()


def test_standalone_consumer_commit_creates_offsets_only_group(broker_factory):
    """§1.1 step 7: a commit with generation -1 from an assign()-only consumer to a group that does
    not exist creates a simple group (Empty, no protocol type). §1.10: ListGroups shows it in state
    Empty with protocol type "" (confluent: is_simple_consumer_group); committed() reads it back."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("simple"), unique("gsimple")
    create_topic(broker.bootstrap, topic, partitions=2)
    consumer = Consumer(member_conf(broker.bootstrap, group))
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        out = consumer.commit(offsets=[TopicPartition(topic, 0, 11, metadata="standalone"),
                                       TopicPartition(topic, 1, 22)], asynchronous=False)
        assert sorted((tp.partition, tp.offset, tp.error) for tp in out) == [(0, 11, None), (1, 22, None)]
        assert _committed(consumer, topic, [0, 1]) == {0: (11, "standalone", None), 1: (22, None, None)}
    finally:
        consumer.close()

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    listed = admin.list_consumer_groups(request_timeout=10).result(15)
    assert not listed.errors, listed.errors
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1, [g.group_id for g in listed.valid]
    assert mine[0].state == ConsumerGroupState.EMPTY
    assert mine[0].is_simple_consumer_group is True

    # another consumer of the same group id (not a member of anything) reads the offsets too
    reader = Consumer(member_conf(broker.bootstrap, group))
    try:
        assert _committed(reader, topic, [0, 1]) == {0: (11, "standalone", None), 1: (22, None, None)}
    finally:
        reader.close()


@pytest.mark.parametrize("filler", ["x", "é", "😀"], ids=["ascii", "two-byte-utf8", "surrogate-pair"])
def test_offset_metadata_limit_counts_utf16_units_per_partition(broker_factory, filler):
    """§1.1 step 10 / §7.12: metadata longer than offset.metadata.max.bytes (4096) counted in UTF-16
    code units gets OFFSET_METADATA_TOO_LARGE(12) for that partition only, and nothing is written
    for it; the other partitions of the same request commit. Exactly 4096 units is accepted even
    when it is 8192 UTF-8 bytes (é) or 2048 surrogate pairs (😀)."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("meta"), unique("gmeta")
    create_topic(broker.bootstrap, topic, partitions=3)
    units = len(filler.encode("utf-16-le")) // 2
    at_limit = filler * (4096 // units)
    over_limit = at_limit + "a"
    assert len(at_limit.encode("utf-16-le")) // 2 == 4096 and len(over_limit.encode("utf-16-le")) // 2 == 4097

    errors = raw_offset_commit(broker.bootstrap, group, topic,
                               {0: (100, "ok", -1), 1: (101, over_limit, -1), 2: (102, at_limit, -1)})
    assert errors == {0: 0, 1: 12, 2: 0}
    assert raw_offset_fetch(broker.bootstrap, group, topic, [0, 1, 2]) == {
        0: (100, -1, "ok", 0), 1: (-1, -1, "", 0), 2: (102, -1, at_limit, 0)}


def test_offset_metadata_too_large_surfaces_per_partition_in_confluent(broker_factory):
    """§1.1 step 10 through librdkafka: the broker answers OFFSET_METADATA_TOO_LARGE for the
    oversized partition only, but librdkafka promotes any partition error to the whole request (the
    async callback's error and every partition's error; a sync commit raises it), so the per-partition
    outcome is checked with committed(): the other partition is committed, the oversized one is not."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("metacf"), unique("gmetacf")
    create_topic(broker.bootstrap, topic, partitions=2)
    results: list = []
    consumer = Consumer({**member_conf(broker.bootstrap, group),
                         "on_commit": lambda err, parts: results.append((err, parts))})
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        consumer.commit(offsets=[TopicPartition(topic, 0, 10, metadata="ok"),
                                 TopicPartition(topic, 1, 20, metadata="m" * 5000)], asynchronous=True)
        deadline = time.monotonic() + 15
        while not results and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert results, "no commit callback"
        err, parts = results[0]
        assert err is not None and err.code() == KafkaError.OFFSET_METADATA_TOO_LARGE
        assert {tp.partition for tp in parts} == {0, 1}
        committed = _committed(consumer, topic, range(2))
        assert committed[0] == (10, "ok", None)
        assert committed[1][0] == -1001  # OFFSET_INVALID: nothing committed

        with pytest.raises(KafkaException) as raised:
            consumer.commit(offsets=[TopicPartition(topic, 0, 11, metadata="ok2"),
                                     TopicPartition(topic, 1, 21, metadata="m" * 5000)], asynchronous=False)
        assert raised.value.args[0].code() == KafkaError.OFFSET_METADATA_TOO_LARGE
        committed = _committed(consumer, topic, range(2))
        assert committed[0] == (11, "ok2", None)
        assert committed[1][0] == -1001
    finally:
        consumer.close()
