"""Transactions in cluster mode: three brokers on one PostgreSQL, the transaction coordinator on one,
data partitions and the group's offsets partition led by others (markers cross brokers as
WriteTxnMarkers), and the coordinator's broker killed -9 in the middle of a transaction."""

from __future__ import annotations

import datetime
import time

from broker_process import wait_for
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from integration.clients import create_topic, poll_values
from integration.cluster_helpers import FAST, leader_of, wait_settled
from kio.index import load_request_schema
from raw_client import RawClient

from offsetd.records.batch import build_batch

from offsetd.records.offsets import partition_for

TXN = {**FAST, "transaction.state.log.num.partitions": "6"}
INPUTS = 400
PARTITIONS = 8  # of "in" and "out": spread over the brokers whatever the placement


def _fill(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(20) == 0


def _read_committed(bootstrap: str, topic: str, expected: int, group: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        return poll_values(consumer, expected)
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        return sum(max(tp.offset, 0) for tp in consumer.committed([TopicPartition(topic, i) for i in range(PARTITIONS)], 20))
    finally:
        consumer.close()


def _transform(bootstrap: str, group: str, txn_id: str, stop_after: int | None = None) -> tuple[int, Producer]:
    """Consume 'in', produce to 'out' with the offsets in the same transaction; returns how many
    inputs were committed, and the producer (a caller keeps a zombie alive with it). With
    stop_after, leaves a transaction open after about that many."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    consumer.subscribe(["in"])
    done = 0
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            batch = consumer.consume(50, 1.0)
            if not batch:
                if done and _committed(bootstrap, group, "in") == INPUTS:
                    return done, producer
                continue
            producer.begin_transaction()
            for message in batch:
                producer.produce("out", message.value() + b"!", partition=message.partition())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata())
            if stop_after is not None and done + len(batch) > stop_after:
                producer.flush(10)  # the open transaction's data is stored, undecided
                return done, producer
            producer.commit_transaction(30)
            done += len(batch)
    finally:
        consumer.close()
    return done, producer


def test_exactly_once_across_brokers_survives_a_kill9_of_the_transaction_coordinator(pg_dsn, cluster_factory):
    cluster = cluster_factory(pg_dsn, overrides=TXN)
    wait_settled(cluster, 3)
    for topic in ("in", "out"):
        create_topic(cluster.bootstrap, topic, PARTITIONS)
    wait_for(lambda: all(leader_of(cluster.bootstrap, t, p) in (1, 2, 3) for t in ("in", "out")
                         for p in range(PARTITIONS)), timeout=20, message="every partition has a leader")
    # Markers cross brokers as long as the transaction coordinator is not the leader of every "out"
    # partition (the remote path on its own: the next test, which picks its partition).
    _fill(cluster.bootstrap, "in", INPUTS)

    # a first instance commits some transactions, then leaves one open and stops answering
    done, zombie = _transform(cluster.bootstrap, "eos", "eos-app", stop_after=150)
    assert 0 < done <= 150
    coordinator = wait_for(lambda: _txn_coordinator(cluster.bootstrap, "eos-app"), timeout=20,
                           message="the transaction coordinator is known")
    cluster.kill9(coordinator)
    # a second instance with the same transactional.id: its init fences the first and aborts its
    # open transaction (on the new coordinator, which loaded the state from PostgreSQL)
    _transform(cluster.bootstrap, "eos", "eos-app")
    out = _read_committed(cluster.bootstrap, "out", INPUTS, "eos-reader")
    assert sorted(out) == sorted(f"{i}!".encode() for i in range(INPUTS))  # each input exactly once
    assert _committed(cluster.bootstrap, "eos", "in") == INPUTS
    del zombie


def _txn_coordinator(bootstrap: str, transactional_id: str) -> int | None:
    """The leader of the id's __transaction_state partition (6 partitions here), from Metadata."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics("__transaction_state", timeout=10)
    topic = metadata.topics.get("__transaction_state")
    if topic is None or topic.error is not None:
        return None
    leader = topic.partitions[partition_for(transactional_id, 6)].leader
    return leader if leader > 0 else None



def test_a_leader_asks_the_remote_coordinator_before_a_first_transactional_batch(pg_dsn, cluster_factory):
    """Produce of a transactional batch to a partition the transaction did not add is refused
    (INVALID_TXN_STATE) by its leader, which asked the coordinator on another broker (AddPartitionsToTxn
    v4 VerifyOnly); once added, the same batch is stored."""
    cluster = cluster_factory(pg_dsn, overrides=TXN)
    wait_settled(cluster, 3)
    # placement is by hash of the new topic's random id: with 3 partitions all of them land on the
    # coordinator's broker in 1 run of 27; with 12, in 1 of 531,441
    create_topic(cluster.bootstrap, "verified", 12)
    txn_id = "verify-me"
    with RawClient(cluster.broker(1).bootstrap) as client:  # creates __transaction_state, then finds it
        wait_for(lambda: client.call(10, 3, load_request_schema(10, 3)(key=txn_id, key_type=1)).error_code == 0,
                 timeout=30, message="a transaction coordinator")
    coordinator = wait_for(lambda: _txn_coordinator(cluster.bootstrap, txn_id), timeout=20,
                           message="the coordinator in Metadata")
    def led_elsewhere() -> tuple[int, int] | None:
        """(partition, its leader) for one led by a broker other than the coordinator's, from one
        Metadata answer (a second lookup may come from a broker whose view lags)."""
        topic = AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics("verified", timeout=10).topics["verified"]
        return next(((p.id, p.leader) for p in topic.partitions.values() if p.leader not in (coordinator, -1)), None)
    partition, leader = wait_for(led_elsewhere, timeout=20, message="a partition led by another broker")
    with RawClient(cluster.broker(coordinator).bootstrap) as coord:
        init = wait_for(lambda: _ok(coord.call(22, 3, load_request_schema(22, 3)(
            transactional_id=txn_id, transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
            producer_epoch=-1))), timeout=30, message="InitProducerId")
        batch = build_batch([(None, b"v", 0, [])], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                            base_sequence=0, attributes=0x10)
        with RawClient(cluster.broker(leader).bootstrap) as data:
            assert _produce(data, txn_id, "verified", partition, batch) == 48  # INVALID_TXN_STATE
            request = load_request_schema(24, 0)
            topic_cls = request.__dataclass_fields__["v3_and_below_topics"].type.__args__[0]
            added = coord.call(24, 0, request(v3_and_below_transactional_id=txn_id,
                                              v3_and_below_producer_id=init.producer_id,
                                              v3_and_below_producer_epoch=init.producer_epoch,
                                              v3_and_below_topics=(topic_cls(name="verified",
                                                                             partitions=(partition,)),)))
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
            assert _produce(data, txn_id, "verified", partition, batch) == 0


def _ok(response):
    return response if response.error_code == 0 else None


def _produce(client: RawClient, txn_id: str, topic: str, partition: int, batch: bytes) -> int:
    request = load_request_schema(0, 9)
    topic_cls = request.__dataclass_fields__["topic_data"].type.__args__[0]
    partition_cls = topic_cls.__dataclass_fields__["partition_data"].type.__args__[0]
    response = client.call(0, 9, request(transactional_id=txn_id, acks=-1, timeout=datetime.timedelta(seconds=10),
                                         topic_data=(topic_cls(name=topic, partition_data=(
                                             partition_cls(index=partition, records=batch),)),)))
    return response.responses[0].partition_responses[0].error_code
