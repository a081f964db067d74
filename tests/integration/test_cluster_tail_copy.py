"""A partition's new owner copies only the tail of a long log (local.retention.bytes, issue 26):
after a kill -9 of its leader, clients nobody here wrote read the whole log from the start (the
part below the copy comes from PostgreSQL), read_committed skips the aborted transactions on both
sides of the copy's start, a transaction open across the takeover still holds the LSO, and
ListOffsets by time finds records only PostgreSQL holds."""

from __future__ import annotations

import shutil
import subprocess
import time

import kafka
from broker_process import wait_for
from confluent_kafka import Consumer, Producer, TopicPartition
from integration.clients import create_topic, poll_values
from integration.cluster_helpers import FAST, leader_of, wait_settled

TOPIC = "tail"
# A record a second from tomorrow: after every marker's timestamp (now), so the first offset at a
# record's time is that record's (ListOffsets by time counts markers too, as Kafka does).
T0 = (int(time.time()) + 86_400) * 1000
VALUE = b"x" * 300


def _transactions(bootstrap: str, count: int, per: int) -> tuple[list[bytes], list[bytes]]:
    """`count` transactions of `per` records (every third aborted), record i at timestamp T0 + i
    seconds; (committed values, aborted values)."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tail-writer", "linger.ms": 5})
    producer.init_transactions(30)
    committed: list[bytes] = []
    aborted: list[bytes] = []
    n = 0
    for t in range(count):
        producer.begin_transaction()
        values = []
        for _ in range(per):
            values.append(b"%06d-" % n + VALUE)
            producer.produce(TOPIC, values[-1], partition=0, timestamp=T0 + 1000 * n)
            n += 1
        if t % 3 == 1:
            assert producer.flush(30) == 0  # stored, then aborted (an abort purges what is unsent)
            producer.abort_transaction(30)
            aborted += values
        else:
            producer.commit_transaction(30)
            committed += values
    return committed, aborted


def _read_committed(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tail-committed", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 0})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    try:
        return poll_values(consumer, expected, timeout=60)
    finally:
        consumer.close()


def _read_uncommitted_kafka_python(bootstrap: str, count: int) -> list[bytes]:
    """The first `count` data records through kafka-python (old protocol: api_version 2.0)."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, api_version=(2, 0, 0), enable_auto_commit=False,
                                   isolation_level="read_uncommitted", consumer_timeout_ms=60_000)
    tp = kafka.TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    values: list[bytes] = []
    try:
        for message in consumer:
            values.append(message.value)
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


def test_a_new_owner_copies_the_tail_and_clients_still_read_everything(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, size=2, overrides={**FAST, "transaction.state.log.num.partitions": "2"})
    wait_settled(cluster, 2)
    create_topic(cluster.bootstrap, TOPIC, 1, {"local.retention.bytes": "40000"})
    committed, aborted = _transactions(cluster.bootstrap, 15, 40)  # ~190 kB: most of it below the tail
    # A transaction left open across the takeover: read_committed stops at its first offset.
    lingering = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "tail-open"})
    lingering.init_transactions(30)
    lingering.begin_transaction()
    lingering.produce(TOPIC, b"open", partition=0)
    lingering.flush(30)

    victim = leader_of(cluster.bootstrap, TOPIC, 0)
    cluster.kill9(victim)
    survivor = next(n for n in cluster.live_node_ids() if n != victim)
    wait_for(lambda: leader_of(cluster.bootstrap, TOPIC, 0) == survivor, timeout=30, message="a new leader")
    wait_for(lambda: "copying the tail" in cluster.broker(survivor).log(), timeout=30,
             message="the new owner copied the tail only")

    # ListOffsets by time for a record far below the copy, before anything there was read: the
    # broker answers OFFSET_NOT_AVAILABLE while it reads that append, and librdkafka asks again.
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "tail-times", "log_level": 0})
    try:
        asked = consumer.offsets_for_times([TopicPartition(TOPIC, 0, T0 + 1000 * 85)], timeout=30)
        found = asked[0].offset
        assert found == 85 + 2, asked  # two markers before it
        consumer.assign([TopicPartition(TOPIC, 0, found)])
        message = wait_for(lambda: consumer.poll(0.5), timeout=30, message="the record at that time")
        assert message.value().startswith(b"000085-")  # in a committed transaction
    finally:
        consumer.close()

    # The open transaction holds the LSO: the committed records before it are read, nothing more.
    values = _read_committed(cluster.bootstrap, len(committed))
    assert values == committed, (len(values), len(committed))
    lingering.commit_transaction(30)
    assert _read_committed(cluster.bootstrap, len(committed) + 1) == committed + [b"open"]

    everything = _read_uncommitted_kafka_python(cluster.bootstrap, len(committed) + len(aborted) + 1)
    assert everything == sorted(committed + aborted) + [b"open"]


def test_a_leader_keeps_its_copy_to_local_retention_and_kcat_reads_everything(pg_dsn, cluster_factory) -> None:
    """The copy's oldest segments past local.retention.bytes leave it at a retention check; kcat
    (librdkafka, read_committed) and kafka-python then read every record from offset 0."""
    cluster = cluster_factory(pg_dsn, size=1, overrides={**FAST, "log.retention.check.interval.ms": "300"})
    wait_settled(cluster, 1)
    create_topic(cluster.bootstrap, "trimmed", 1, {"local.retention.bytes": "30000", "segment.bytes": "20000"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                         "batch.size": 4000})  # batches of ~12 records: many segments of 20 kB
    values = [b"%05d-" % i + VALUE for i in range(600)]  # ~190 kB
    for value in values:
        producer.produce("trimmed", value, partition=0)
    assert producer.flush(30) == 0
    broker = cluster.broker(cluster.live_node_ids()[0])
    wait_for(lambda: "trimmed-0: the copy keeps offsets from" in broker.log(), timeout=30,
             message="the copy kept to local.retention.bytes")
    out = subprocess.run([shutil.which("kcat") or "kcat", "-C", "-b", cluster.bootstrap, "-t", "trimmed", "-p", "0",
                          "-o", "beginning", "-e", "-X", "isolation.level=read_committed", "-f", "%s\\n"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.split(b"\n")[:-1] == values
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap, api_version=(2, 0, 0),
                                   enable_auto_commit=False, consumer_timeout_ms=30_000)
    consumer.assign([kafka.TopicPartition("trimmed", 0)])
    consumer.seek(kafka.TopicPartition("trimmed", 0), 0)
    try:
        read = [m.value for _, m in zip(values, consumer)]
    finally:
        consumer.close()
    assert read == values
