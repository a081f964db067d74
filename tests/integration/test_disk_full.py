"""Issue 16's trial with real clients and a real full disk: the broker's `log.dirs` is a small tmpfs
that the test fills and frees. Commits and acks=all produces are refused with Kafka's codes while
it is full (never a dropped connection), work again once space is freed, without a restart, and
after a restart everything acknowledged reads back, with no recovery cutting anything."""

from __future__ import annotations

import time

from broker_process import BrokerProcess, wait_for
from clients import consume_all, create_topic
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

# One offsets partition keeps the test's commits on one log; tiny segments are not needed.
DISK_BROKER = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


def _committer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "socket.timeout.ms": 5000})


def _commit(consumer: Consumer, topic: str, offset: int) -> KafkaError | None:
    """One synchronous commit of partition 0; the error it failed with, or None."""
    try:
        result = consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    except KafkaException as exc:
        return exc.args[0]
    return result[0].error


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = _committer(bootstrap, group)
    try:
        [tp] = consumer.committed([TopicPartition(topic, 0)], timeout=15)
        return tp.offset
    finally:
        consumer.close()


def test_commits_on_a_full_disk_are_refused_then_served_and_none_acknowledged_is_lost(small_disk):
    broker = BrokerProcess(small_disk.path, DISK_BROKER).start()  # its log file lies beside the tmpfs
    try:
        create_topic(broker.bootstrap, "t")
        consumer = _committer(broker.bootstrap, "g")
        assert _commit(consumer, "t", 1) is None
        small_disk.fill()
        acknowledged, refusals = 1, []
        for offset in range(2, 3000):  # until the log needs a page the disk does not have
            started = time.monotonic()
            error = _commit(consumer, "t", offset)
            if error is None:
                acknowledged = offset
                continue
            refusals.append((error, time.monotonic() - started))
            if len(refusals) == 5:
                break
        assert len(refusals) == 5, "the full disk never refused a commit"
        for error, seconds in refusals:  # §0.1: KAFKA_STORAGE_ERROR -> NOT_COORDINATOR (librdkafka
            # retries it itself first: rediscovers the coordinator, commits again, then gives up)
            assert error.code() == KafkaError.NOT_COORDINATOR, error
            assert seconds < 5, f"a refusal took {seconds:.1f} s"
        assert broker.alive()
        assert _committed(broker.bootstrap, "g", "t") == acknowledged

        small_disk.free()
        freed = time.monotonic()
        wait_for(lambda: _commit(consumer, "t", 1000) is None, timeout=10, interval=0.05,
                 message="a commit after space was freed")
        assert time.monotonic() - freed < 5
        for offset in range(1001, 1010):
            assert _commit(consumer, "t", offset) is None
        consumer.close()
        assert broker.stop() == 0
        broker.start()
        assert _committed(broker.bootstrap, "g", "t") == 1009
        assert "out of order" not in broker.log() and "truncating" not in broker.log()
    finally:
        if broker.alive():
            broker.stop()


def test_produce_on_a_full_disk_gets_kafka_storage_error_and_loses_nothing_acknowledged(small_disk):
    broker = BrokerProcess(small_disk.path, DISK_BROKER).start()  # its log file lies beside the tmpfs
    try:
        create_topic(broker.bootstrap, "p")
        outcomes: dict[int, KafkaError | int] = {}

        def delivered(err: KafkaError | None, msg) -> None:
            outcomes[int(msg.value().split()[0])] = err if err is not None else msg.offset()

        # No retries: each refusal reaches the application with its code (librdkafka would
        # otherwise retry KAFKA_STORAGE_ERROR, a retriable error, until message.timeout.ms).
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0,
                             "linger.ms": 0, "message.timeout.ms": 10000})
        sent = 0

        def send(count: int) -> None:
            nonlocal sent
            for _ in range(count):
                producer.produce("p", str(sent).encode() + b" " + b"x" * 500, partition=0, on_delivery=delivered)
                sent += 1
                producer.flush(10)

        send(5)
        small_disk.fill()
        deadline = time.monotonic() + 30
        while not any(isinstance(o, KafkaError) for o in outcomes.values()) and time.monotonic() < deadline:
            send(1)
        refused = [o for o in outcomes.values() if isinstance(o, KafkaError)]
        assert refused, "the full disk never refused a produce"
        assert all(e.code() == KafkaError.KAFKA_STORAGE_ERROR for e in refused), refused
        first_of_three = sent
        send(3)  # still full: refused as well, and nothing half-written
        still = [outcomes.get(n) for n in range(first_of_three, sent)]
        assert all(isinstance(o, KafkaError) and o.code() == KafkaError.KAFKA_STORAGE_ERROR for o in still), still

        # A producer with librdkafka's default retries treats it as retriable: it keeps trying
        # while the disk is full and delivers once space is freed.
        retrying = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                             "retry.backoff.ms": 50, "message.timeout.ms": 30000})
        retrying.produce("p", str(sent).encode() + b" " + b"x" * 500, partition=0, on_delivery=delivered)
        sent += 1
        retrying.flush(1.5)
        assert sent - 1 not in outcomes, outcomes.get(sent - 1)
        small_disk.free()
        assert retrying.flush(15) == 0
        assert isinstance(outcomes[sent - 1], int), outcomes[sent - 1]
        send(5)
        assert len(outcomes) == sent
        acked = {value: o for value, o in outcomes.items() if not isinstance(o, KafkaError)}
        assert sorted(acked.values()) == list(range(len(acked))), "acknowledged offsets have gaps"
        assert broker.stop() == 0
        broker.start()
        read = consume_all(broker.bootstrap, "p", [0], len(acked))
        assert {int(m.value().split()[0]): m.offset() for m in read} == acked
    finally:
        if broker.alive():
            broker.stop()
