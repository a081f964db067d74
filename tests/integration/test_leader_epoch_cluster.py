"""KIP-320 in cluster mode: the leader-epoch history lives in PostgreSQL, so after kill -9 of a
leader every broker that leads next answers OffsetForLeaderEpoch the same, fences clients that
still hold the old epoch, and librdkafka validates its position across the leader change (its
debug log shows it) and reads on with nothing lost and nothing twice."""

from __future__ import annotations

import datetime
import threading
import time

from broker_process import wait_for
from confluent_kafka import Consumer, Producer, TopicPartition
from integration.clients import create_topic, librdkafka_log, produce
from integration.cluster_helpers import FAST, leader_of, pg_rows, wait_settled
from kio.index import load_request_schema
from raw_client import RawClient, build

from offsetd.records.batch import iter_batches

OFFSET_FOR_LEADER_EPOCH, FETCH = 23, 1
NONE, NOT_LEADER, FENCED, UNKNOWN_EPOCH = 0, 6, 74, 75


def call(bootstrap: str, api: int, version: int, body: dict):
    with RawClient(bootstrap) as client:
        return client.call(api, version, build(load_request_schema(api, version), body))


def end_offsets(bootstrap: str, topic: str, asks: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """OffsetForLeaderEpoch v4 of partition 0: (error, epoch, end offset) per (current epoch, epoch)."""
    resp = call(bootstrap, OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
        {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch} for current, epoch in asks]}]})
    return [(int(p.error_code), p.leader_epoch, p.end_offset) for p in resp.topics[0].partitions]


def stored_epoch(dsn: str, topic: str) -> int:
    return int(pg_rows(dsn, "SELECT p.epoch FROM offsetd_partition p JOIN offsetd_topic t USING (topic_id) "
                            "WHERE t.name = $1 AND p.partition = 0", topic)[0][0])


def new_leader(cluster, topic: str, old: int) -> int:
    """Wait for a live broker other than `old` to lead partition 0 of `topic`."""
    def ask() -> int | None:
        node = leader_of(cluster.bootstrap, topic, 0)
        return node if node != old and node in cluster.live_node_ids() else None
    return wait_for(ask, timeout=30, message=f"a new leader of {topic}-0")


def test_every_leader_after_a_failover_answers_the_same_history(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "history", 1)
    produce(cluster.bootstrap, "history", [{"value": b"a"} for _ in range(5)], acks="all")
    first = wait_for(lambda: max(leader_of(cluster.bootstrap, "history", 0), 0), timeout=10, message="a leader")
    e1 = stored_epoch(pg_dsn, "history")
    assert end_offsets(cluster.broker(first).bootstrap, "history", [(e1, e1)]) == [(NONE, e1, 5)]
    others = [n for n in (1, 2, 3) if n != first]
    assert end_offsets(cluster.broker(others[0]).bootstrap, "history", [(e1, e1)]) == [(NOT_LEADER, -1, -1)]

    cluster.kill9(first)
    second = new_leader(cluster, "history", first)
    produce(cluster.bootstrap, "history", [{"value": b"b"} for _ in range(3)], acks="all")
    e2 = stored_epoch(pg_dsn, "history")
    assert e2 > e1
    at = cluster.broker(second).bootstrap
    assert end_offsets(at, "history", [(e2, e1), (e2, e2), (e1, e1), (e2 + 1, e2)]) == [
        (NONE, e1, 5), (NONE, e2, 8), (FENCED, -1, -1), (UNKNOWN_EPOCH, -1, -1)]
    assert pg_rows(pg_dsn, "SELECT h.epoch, h.start_offset FROM offsetd_leader_epoch h JOIN offsetd_topic t "
                           "USING (topic_id) WHERE t.name = 'history' ORDER BY h.epoch")[-2:] == [(e1, 0), (e2, 5)]

    # a client still holding the old epoch is fenced and told the new leader (KIP-951)
    topic_id = pg_rows(pg_dsn, "SELECT topic_id FROM offsetd_topic WHERE name = 'history'")[0][0]
    cls = load_request_schema(FETCH, 16)
    mod = __import__(cls.__module__, fromlist=["x"])

    def fetch(current: int):
        request = cls(max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20,
                      topics=(mod.FetchTopic(topic_id=topic_id, partitions=(mod.FetchPartition(
                          partition=0, fetch_offset=0, partition_max_bytes=1 << 20, current_leader_epoch=current),)),),
                      forgotten_topics_data=())
        with RawClient(at) as client:
            return client.call(FETCH, 16, request).responses[0].partitions[0]
    fenced = fetch(e1)
    assert int(fenced.error_code) == FENCED
    assert (fenced.current_leader.leader_id, fenced.current_leader.leader_epoch) == (second, e2)
    read = fetch(e2)
    assert int(read.error_code) == NONE
    assert [h.partition_leader_epoch for _, h in iter_batches(memoryview(bytes(read.records)))] == [e1, e2]

    # the last broker standing reads the same history from PostgreSQL
    cluster.kill9(second)
    third = new_leader(cluster, "history", second)
    e3 = stored_epoch(pg_dsn, "history")
    assert end_offsets(cluster.broker(third).bootstrap, "history", [(e3, e1), (e3, e2), (e3, e3)]) == [
        (NONE, e1, 5), (NONE, e2, 8), (NONE, e3, 8)]


def test_librdkafka_validates_its_position_across_a_leader_change(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, overrides=FAST)
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "moving", 1)
    acked: list[int] = []
    stop = threading.Event()

    def produce_forever() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 60_000})

        def report(err, msg) -> None:
            if err is None:
                acked.append(int(msg.value()))
        seq = 0
        while not stop.is_set():
            producer.produce("moving", value=str(seq).encode(), partition=0, on_delivery=report)
            seq += 1
            producer.poll(0.01)
        assert producer.flush(60) == 0

    capture, logs = librdkafka_log("validating")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "validating",
                         "enable.auto.commit": False, "debug": "fetch,topic,metadata,protocol",
                         "topic.metadata.refresh.interval.ms": 1000}, logger=capture)
    consumer.assign([TopicPartition("moving", 0, 0)])
    seen: list[int] = []

    def consume_until(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(int(msg.value()))

    producer = threading.Thread(target=produce_forever, daemon=True)
    producer.start()
    try:
        wait_for(lambda: len(acked) >= 200, timeout=30, message="records acknowledged before the failover")
        consume_until(100, 30)
        leader = leader_of(cluster.bootstrap, "moving", 0)
        before = stored_epoch(pg_dsn, "moving")
        cluster.kill9(leader)
        new_leader(cluster, "moving", leader)
        assert stored_epoch(pg_dsn, "moving") > before
        after = len(acked)
        wait_for(lambda: len(acked) >= after + 200, timeout=60, message="records acknowledged by the new leader")
    finally:
        stop.set()
        producer.join(90)
    consume_until(len(acked), 60)
    consumer.close()
    assert seen == sorted(set(seen)), "read in order, each once"
    assert set(acked) <= set(seen), f"lost: {sorted(set(acked) - set(seen))[:10]}"
    # librdkafka saw the epoch change in Metadata and asked the new leader where its epoch ended
    assert any("Sent OffsetForLeaderEpochRequest" in line for line in logs)
    assert any("offset and epoch validation succeeded" in line for line in logs), "librdkafka validated its position"
