"""Cluster produce with many appends per partition in flight (storage/append_pipeline.py): many
producers, idempotent ones among them, writing to one partition at once; every acknowledged record
is where its acknowledgement said, exactly once and in each producer's order, also across a kill -9
of the partition's leader."""

from __future__ import annotations

import threading
import time
from collections import Counter

from broker_process import wait_for
from confluent_kafka import Consumer, Producer, TopicPartition
from integration.clients import create_topic
from integration.cluster_helpers import FAST, leader_of, pg_rows, wait_settled

TOPIC = "many"


class Acks:
    """(producer, sequence number) -> offset of every acknowledged record, from delivery reports."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.offsets: dict[tuple[int, int], int] = {}
        self.errors: Counter[str] = Counter()

    def report(self, err, msg) -> None:
        with self.lock:
            if err is not None:
                self.errors[err.name()] += 1
                return
            who, n = msg.value().decode().split("-")
            self.offsets[(int(who), int(n))] = msg.offset()

    def __len__(self) -> int:
        return len(self.offsets)


def produce(bootstrap: str, who: int, idempotent: bool, acks: Acks, stop: threading.Event, limit: int) -> None:
    """Records `who-0`, `who-1`, … to partition 0 until `stop` (or `limit` records), then flush."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                         "linger.ms": 1, "message.timeout.ms": 60000, "log_level": 0,
                         **({} if idempotent else {"max.in.flight.requests.per.connection": 5})})
    n = 0
    while not stop.is_set() and n < limit:
        producer.produce(TOPIC, value=f"{who}-{n}".encode(), partition=0, on_delivery=acks.report)
        n += 1
        if n % 20 == 0:
            producer.poll(0.001)
    assert producer.flush(90) == 0


def read_back(bootstrap: str) -> list[tuple[int, str]]:
    """Every record of partition 0 up to its high watermark: (offset, value)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "log_level": 0})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=20)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        records: list[tuple[int, str]] = []
        deadline = time.monotonic() + 60
        while (not records or records[-1][0] < high - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                records.append((msg.offset(), msg.value().decode()))
        assert records and records[-1][0] == high - 1, f"read up to {records[-1:]} of {high}"
        return records
    finally:
        consumer.close()


def check(acks: Acks, records: list[tuple[int, str]], idempotent: set[int]) -> None:
    """Each acknowledged record is at its acknowledged offset; idempotent producers' records are
    there once each; each producer's records are in its order."""
    at = dict(records)
    wrong = [(key, offset, at.get(offset)) for key, offset in acks.offsets.items()
             if at.get(offset) != f"{key[0]}-{key[1]}"]
    assert not wrong, f"{len(wrong)} acknowledged records not at their offsets, e.g. {wrong[:5]}"
    seen = Counter(value for _, value in records)
    twice = [v for v, c in seen.items() if c > 1 and int(v.split("-")[0]) in idempotent]
    assert not twice, f"records of idempotent producers stored twice: {twice[:5]}"
    last: dict[int, int] = {}
    for offset, value in records:
        who, n = map(int, value.split("-"))
        if who in idempotent:
            assert n > last.get(who, -1), f"producer {who}: record {n} at {offset} after record {last[who]}"
            last[who] = n


def test_many_producers_on_one_partition_read_back_exactly_once_in_order(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, size=2, overrides=FAST)
    wait_settled(cluster, 2)
    create_topic(cluster.bootstrap, TOPIC, 1)
    acks, stop = Acks(), threading.Event()
    idempotent = {0, 1, 2, 3}
    threads = [threading.Thread(target=produce, args=(cluster.bootstrap, who, who in idempotent, acks, stop, 3000))
               for who in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not acks.errors, f"delivery errors: {dict(acks.errors)}"
    assert len(acks) == 6 * 3000
    records = read_back(cluster.bootstrap)
    assert len(records) == len(acks)  # nothing stored that was not acknowledged, nothing twice
    check(acks, records, idempotent | {4, 5})  # no retries without faults: every producer's order holds
    # Appends queued behind a statement went with the next one: fewer statements than appends is
    # not visible in PostgreSQL, but the rows are one per append, following one another.
    rows = pg_rows(pg_dsn, "SELECT b.base_offset, b.last_offset FROM offsetd_batch b JOIN offsetd_topic t "
                           "USING (topic_id) WHERE t.name = $1 ORDER BY b.base_offset", TOPIC)
    assert rows[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(rows, rows[1:]))
    assert rows[-1][1] == len(acks) - 1


def test_kill9_of_the_leader_mid_produce_loses_nothing_acknowledged(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, size=3, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, TOPIC, 1)
    acks, stop = Acks(), threading.Event()
    idempotent = {0, 1, 2}
    threads = [threading.Thread(target=produce, args=(cluster.bootstrap, who, who in idempotent, acks, stop,
                                                      10**9)) for who in range(5)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acks) >= 3000, timeout=60, message="records acknowledged before the kill")
        victim = leader_of(cluster.bootstrap, TOPIC, 0)
        cluster.kill9(victim)
        at_kill = len(acks)
        wait_for(lambda: len(acks) >= at_kill + 3000, timeout=60, message="records acknowledged after the kill")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert leader_of(cluster.bootstrap, TOPIC, 0) != victim
    records = read_back(cluster.bootstrap)
    check(acks, records, idempotent)
