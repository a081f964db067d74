"""Transactional offset commits end to end (KOC §1.2, §1.3, §5.4; reference A5, A10), with
confluent-kafka's `send_offsets_to_transaction`: offsets are invisible until the transaction
commits, dropped when it aborts, answered UNSTABLE_OFFSET_COMMIT (88) to a require_stable
OffsetFetch while open, and a restart (kill -9) loads pending offsets and markers back."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker_process import wait_for
from clients import create_topic
from group_helpers import GROUP_BROKER, Member, member_conf, poll_until, raw_offset_fetch, unique

UNSTABLE_OFFSET_COMMIT = 88  # §0
ILLEGAL_GENERATION = 22


def _producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txid"),
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(30)
    return producer


def _send_offsets(producer: Producer, consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    producer.begin_transaction()
    producer.send_offsets_to_transaction([TopicPartition(topic, p, o) for p, o in offsets.items()],
                                         consumer.consumer_group_metadata(), 30)


def _stable(bootstrap: str, group: str, topic: str, partitions: list[int]) -> dict[int, tuple[int, int]]:
    """{partition: (offset, error)} of a require_stable OffsetFetch (v8)."""
    return {p: (row[0], row[3]) for p, row in raw_offset_fetch(bootstrap, group, topic, partitions).items()}


def test_send_offsets_commit_abort_and_restart(broker_factory):
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("txo"), unique("gtxo")
    create_topic(broker.bootstrap, topic, partitions=2)
    consumer = Consumer(member_conf(broker.bootstrap, group))  # a standalone group: never subscribes
    producer = _producer(broker.bootstrap)
    try:
        _send_offsets(producer, consumer, topic, {0: 5, 1: 6})
        # open: the previous value (none) for a plain fetch, 88 for a stable one (§1.3)
        assert _stable(broker.bootstrap, group, topic, [0, 1]) == {0: (-1, UNSTABLE_OFFSET_COMMIT),
                                                                  1: (-1, UNSTABLE_OFFSET_COMMIT)}
        assert {p: row[0] for p, row in raw_offset_fetch(broker.bootstrap, group, topic, [0, 1],
                                                         require_stable=False).items()} == {0: -1, 1: -1}
        producer.commit_transaction(30)
        # the marker is written to the offsets partition before EndTxn's answer (A7, single node)
        assert wait_for(lambda: _stable(broker.bootstrap, group, topic, [0, 1]) == {0: (5, 0), 1: (6, 0)},
                        timeout=10, message="the committed transaction's offsets")

        _send_offsets(producer, consumer, topic, {0: 50})
        producer.abort_transaction(30)
        assert wait_for(lambda: _stable(broker.bootstrap, group, topic, [0, 1]) == {0: (5, 0), 1: (6, 0)},
                        timeout=10, message="the aborted offsets dropped")

        _send_offsets(producer, consumer, topic, {1: 60})  # left open across a kill -9
        broker.kill9()
        broker.start()
        # loaded back pending (88), unless the restarted transaction coordinator already aborted it
        # (a restarted producer's transaction times out or is aborted by InitProducerId): either way
        # never 60 without a COMMIT marker
        rows = wait_for(lambda: _try_stable(broker.bootstrap, group, topic), timeout=30,
                        message="the offsets partition loaded")
        assert rows[0] == (5, 0) and rows[1] in ((6, 0), (-1, UNSTABLE_OFFSET_COMMIT))
    finally:
        consumer.close()


def _try_stable(bootstrap: str, group: str, topic: str) -> dict[int, tuple[int, int]] | None:
    """_stable, or None while the restarted broker is still loading (or not yet listening)."""
    try:
        return _stable(bootstrap, group, topic, [0, 1])
    except (AssertionError, OSError, ConnectionError):
        return None


def test_group_member_commits_with_its_generation_and_a_stale_generation_is_refused(broker_factory):
    """KIP-447 (A5): librdkafka sends TxnOffsetCommit v3 with the member's generation and id; they
    are checked against the group. After a rebalance the old metadata is ILLEGAL_GENERATION and
    the transaction must abort; the committed offsets stay."""
    broker = broker_factory(GROUP_BROKER)
    topic, group = unique("txg"), unique("gtxg")
    create_topic(broker.bootstrap, topic, partitions=2)
    first = Member(broker.bootstrap, group, [topic], "first")
    producer = _producer(broker.bootstrap)
    second = None
    try:
        poll_until([first], lambda: len(first.partitions()) == 2, message="first owns both partitions")
        old = first.consumer.consumer_group_metadata()
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], old, 30)
        producer.commit_transaction(30)
        assert wait_for(lambda: _stable(broker.bootstrap, group, topic, [0, 1]) == {0: (3, 0), 1: (4, 0)},
                        timeout=10, message="the member's transactional offsets")

        second = Member(broker.bootstrap, group, [topic], "second")
        poll_until([first, second], lambda: len(first.partitions()) == 1 and len(second.partitions()) == 1,
                   message="a rebalance to one partition each")
        producer.begin_transaction()
        with pytest.raises(KafkaException) as caught:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 30)], old, 30)
        assert caught.value.args[0].code() == ILLEGAL_GENERATION, caught.value
        producer.abort_transaction(30)
        assert _stable(broker.bootstrap, group, topic, [0, 1]) == {0: (3, 0), 1: (4, 0)}
    finally:
        first.close()
        if second is not None:
            second.close()
