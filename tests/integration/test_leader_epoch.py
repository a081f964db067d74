"""KIP-320 on one broker: OffsetForLeaderEpoch (API 23) at every served version, the
`current_leader_epoch` checks of Fetch and ListOffsets, Fetch's diverging epoch, and the
leader-epoch history across a restart (the embedded broker leads at the epoch after the newest one
that wrote), as raw requests; then clients we did not write still fetching with epoch -1."""

from __future__ import annotations

import struct
import time
from datetime import timedelta
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, TopicPartition
from kio.index import load_request_schema

from broker_process import BrokerProcess
from clients import create_topic, librdkafka_log, produce
from offsetd.records.batch import iter_batches
from raw_client import RawClient, build

OFFSET_FOR_LEADER_EPOCH, FETCH, LIST_OFFSETS, METADATA = 23, 1, 2, 3
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, FENCED, UNKNOWN_EPOCH = 0, 1, 3, 74, 75


def call(client: RawClient, api: int, version: int, body: dict):
    return client.call(api, version, build(load_request_schema(api, version), body))


def epoch_request(version: int, topic: str, partitions: list[tuple[int, int, int]]) -> dict:
    """An OffsetForLeaderEpoch body: (partition, current leader epoch, leader epoch) each."""
    body: dict = {"topics": [{"topic": topic, "partitions": [
        {"partition": p, "current_leader_epoch": current, "leader_epoch": epoch} for p, current, epoch in partitions]}]}
    if version >= 3:
        body["replica_id"] = -1
    return body


def offsets_for_epochs(client: RawClient, version: int, topic: str,
                       partitions: list[tuple[int, int, int]]) -> list[tuple[int, int, int, int]]:
    """(partition, error, leader epoch, end offset) per partition; v0-1 hand-framed (kio knows v2+)."""
    if version >= 2:
        resp = call(client, OFFSET_FOR_LEADER_EPOCH, version, epoch_request(version, topic, partitions))
        return [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in resp.topics[0].partitions]
    client.correlation_id += 1
    name = topic.encode()
    frame = struct.pack(">hhih", OFFSET_FOR_LEADER_EPOCH, version, client.correlation_id, 3) + b"raw"
    frame += struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", len(partitions))
    frame += b"".join(struct.pack(">ii", p, epoch) for p, _current, epoch in partitions)
    client.send_frame(frame)
    data = client.read_frame()
    assert data is not None
    corr, topics, size = struct.unpack_from(">iih", data, 0)
    assert (corr, topics, data[10:10 + size]) == (client.correlation_id, 1, name)
    pos = 10 + size
    (count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = []
    for _ in range(count):
        if version == 0:
            error, partition, end = struct.unpack_from(">hiq", data, pos)
            out.append((partition, error, -1, end))
            pos += 14
        else:
            error, partition, epoch, end = struct.unpack_from(">hiiq", data, pos)
            out.append((partition, error, epoch, end))
            pos += 18
    assert pos == len(data)
    return out


def metadata_epoch(client: RawClient, topic: str) -> int:
    resp = call(client, METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                      "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
    return resp.topics[0].partitions[0].leader_epoch


def fetch(client: RawClient, topic: str, offset: int, current: int, last_fetched: int = -1):
    """One partition-0 Fetch v12 (by name) with the given leader epochs: its partition entry."""
    resp = call(client, FETCH, 12, {
        "replica_id": -1, "max_wait": timedelta(0), "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "",
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": current, "fetch_offset": offset, "last_fetched_epoch": last_fetched,
            "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": []})
    return resp.responses[0].partitions[0]


def list_offset(client: RawClient, topic: str, timestamp: int, current: int, version: int = 8):
    resp = call(client, LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": current, "timestamp": timestamp}]}]})
    return resp.topics[0].partitions[0]


def batch_epochs(records: bytes) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of each batch."""
    return [(h.base_offset, h.partition_leader_epoch) for _pos, h in iter_batches(memoryview(bytes(records)))]


def test_epochs_across_a_restart_at_every_version(broker_factory) -> None:
    broker = broker_factory()
    create_topic(broker.bootstrap, "epochs", partitions=2)
    produce(broker.bootstrap, "epochs", [{"value": b"a", "partition": 0} for _ in range(5)])
    with RawClient(broker.bootstrap) as client:
        assert metadata_epoch(client, "epochs") == 0
        for version in range(5):
            assert offsets_for_epochs(client, version, "epochs", [(0, -1, 0), (1, -1, 0), (0, -1, 1), (7, -1, 0)]) == [
                (0, NONE, 0 if version else -1, 5),  # the latest epoch ends at the log end
                (1, NONE, 0 if version else -1, 0),  # nothing written: the epoch led from 0
                (0, NONE, -1, -1),  # an epoch newer than any: not placed
                (7, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
            assert offsets_for_epochs(client, version, "missing", [(0, -1, 0)]) == [
                (0, UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]
        for version in (2, 3, 4):  # current_leader_epoch from v2 on
            assert offsets_for_epochs(client, version, "epochs", [(0, 0, 0), (0, 1, 0)]) == [
                (0, NONE, 0, 5), (0, UNKNOWN_EPOCH, -1, -1)]
        assert batch_epochs(fetch(client, "epochs", 0, 0).records) == [(0, 0)]

    broker.restart()  # epoch 0 wrote: the broker now leads at 1, from offset 5
    produce(broker.bootstrap, "epochs", [{"value": b"b", "partition": 0} for _ in range(3)])
    checkpoint = Path(broker.data_dir) / "epochs-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n2\n0 0\n1 5\n"
    with RawClient(broker.bootstrap) as client:
        assert metadata_epoch(client, "epochs") == 1
        for version in (1, 2, 3, 4):
            assert offsets_for_epochs(client, version, "epochs", [(0, -1, 0), (0, -1, 1)]) == [
                (0, NONE, 0, 5), (0, NONE, 1, 8)]
        assert offsets_for_epochs(client, 4, "epochs", [(0, 0, 1), (0, 2, 1)]) == [
            (0, FENCED, -1, -1), (0, UNKNOWN_EPOCH, -1, -1)]

        # Fetch v9+: the client's current leader epoch is checked; -1 is no check
        fenced = fetch(client, "epochs", 0, 0)
        assert fenced.error_code == FENCED and not fenced.records
        assert (fenced.current_leader.leader_id, fenced.current_leader.leader_epoch) == (1, 1)
        assert fetch(client, "epochs", 0, 2).error_code == UNKNOWN_EPOCH
        for current in (-1, 1):
            entry = fetch(client, "epochs", 0, current)
            assert entry.error_code == NONE and entry.high_watermark == 8
            assert batch_epochs(entry.records) == [(0, 0), (5, 1)]
        # v12's last_fetched_epoch: epoch 0 ended at 5, so a fetch at 7 that last saw epoch 0 diverged
        diverged = fetch(client, "epochs", 7, 1, last_fetched=0)
        assert diverged.error_code == NONE and not diverged.records
        assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (0, 5)
        assert fetch(client, "epochs", 5, 1, last_fetched=0).diverging_epoch.epoch == -1  # not diverged
        assert fetch(client, "epochs", 6, 1, last_fetched=5).error_code == OFFSET_OUT_OF_RANGE  # unknown epoch

        # ListOffsets v4+: the same check; its leader_epoch is the epoch of the offset answered
        for version in (4, 8):
            assert list_offset(client, "epochs", -1, 0, version).error_code == FENCED
            assert list_offset(client, "epochs", -1, 2, version).error_code == UNKNOWN_EPOCH
            latest = list_offset(client, "epochs", -1, 1, version)
            assert (latest.error_code, latest.offset, latest.leader_epoch) == (NONE, 8, 1)
            earliest = list_offset(client, "epochs", -2, -1, version)
            assert (earliest.offset, earliest.leader_epoch) == (0, 0)
            by_time = list_offset(client, "epochs", 0, -1, version)
            assert (by_time.offset, by_time.leader_epoch) == (0, 0)
        # ListOffsets v1-3 carry no epoch: never checked
        assert list_offset(client, "epochs", -1, -1, 3).offset == 8

    broker.restart()  # epoch 1 wrote: the next one is 2
    with RawClient(broker.bootstrap) as client:
        assert metadata_epoch(client, "epochs") == 2
    broker.restart()  # epoch 2 wrote nothing: still 2, the log is the same
    with RawClient(broker.bootstrap) as client:
        assert metadata_epoch(client, "epochs") == 2
        assert offsets_for_epochs(client, 4, "epochs", [(0, 2, 1), (0, 2, 2)]) == [(0, NONE, 1, 8), (0, NONE, 2, 8)]


def test_clients_we_did_not_write_fetch_without_epochs(broker_factory) -> None:
    """kafka-python (Fetch with current_leader_epoch -1) and kcat read a restarted broker's log."""
    broker = broker_factory()
    create_topic(broker.bootstrap, "plain", partitions=1)
    produce(broker.bootstrap, "plain", [{"value": f"m{i}".encode()} for i in range(4)])
    broker.restart()
    produce(broker.bootstrap, "plain", [{"value": f"m{i}".encode()} for i in range(4, 8)])
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition("plain", 0)])
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(8)]
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "plain", "-o", "beginning", "-e", "-q"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.split() == [f"m{i}" for i in range(8)]


def test_librdkafka_validates_its_position_after_a_restart(broker_factory) -> None:
    """The restarted broker leads at a new epoch; librdkafka sees it in Metadata, validates its
    position with OffsetForLeaderEpoch and reads on from where it was."""
    broker = broker_factory()
    create_topic(broker.bootstrap, "restarted", partitions=1)
    produce(broker.bootstrap, "restarted", [{"value": str(i).encode()} for i in range(20)])
    capture, logs = librdkafka_log("restart")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "restart-reader",
                        "enable.auto.commit": False, "debug": "fetch,topic,protocol",
                        "topic.metadata.refresh.interval.ms": 1000}, logger=capture)
    consumer.assign([ConfluentPartition("restarted", 0, 0)])
    seen: list[int] = []

    def consume_until(count: int) -> None:
        deadline = time.monotonic() + 30
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(int(msg.value()))
    try:
        consume_until(20)
        broker.restart()
        produce(broker.bootstrap, "restarted", [{"value": str(i).encode()} for i in range(20, 40)])
        consume_until(40)
    finally:
        consumer.close()
    assert seen == list(range(40))
    assert any("Sent OffsetForLeaderEpochRequest" in line for line in logs)
    assert any("offset and epoch validation succeeded" in line for line in logs)


def test_librdkafka_detects_a_log_that_lost_its_tail(broker_factory) -> None:
    """What KIP-320 is for: the tail of epoch 1 is lost while the broker is down (as unflushed data
    is in a power cut); the broker leads at epoch 2 from the shorter log, and a consumer that had
    read the lost records learns from OffsetForLeaderEpoch where epoch 1 really ended, moves its
    position back there and reads on, the new records included (were epoch 1 led again, it would
    see no truncation and skip them)."""
    broker = broker_factory()
    create_topic(broker.bootstrap, "cut", partitions=1)
    produce(broker.bootstrap, "cut", [{"value": str(i).encode()} for i in range(10)])  # epoch 0: 0-9
    broker.restart()
    for first in (10, 15):  # epoch 1: two batches, 10-14 and 15-19
        produce(broker.bootstrap, "cut", [{"value": str(i).encode()} for i in range(first, first + 5)])
    capture, logs = librdkafka_log("cut")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cut-reader", "enable.auto.commit": False,
                         "debug": "fetch,topic,protocol", "topic.metadata.refresh.interval.ms": 1000}, logger=capture)
    consumer.assign([ConfluentPartition("cut", 0, 0)])
    seen: list[int] = []

    def consume_until(done) -> None:
        deadline = time.monotonic() + 30
        while not done() and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen.append(int(msg.value()))
    try:
        consume_until(lambda: len(seen) >= 20)
        broker.stop()
        segment = Path(broker.data_dir) / "cut-0" / f"{0:020d}.log"
        data = segment.read_bytes()
        cut_at = next(pos for pos, h in iter_batches(data) if h.base_offset == 15)
        with open(segment, "r+b") as f:
            f.truncate(cut_at)
        broker.start()
        produce(broker.bootstrap, "cut", [{"value": str(100 + i).encode()} for i in range(5)])  # epoch 2: 15-19
        consume_until(lambda: seen[-1:] == [104])
    finally:
        consumer.close()
    checkpoint = (Path(broker.data_dir) / "cut-0" / "leader-epoch-checkpoint").read_text()
    assert checkpoint == "0\n3\n0 0\n1 10\n2 15\n"
    assert seen == list(range(20)) + [100, 101, 102, 103, 104]
    # its validation at epoch 2 asked where epoch 1 ended (15, not 20) and moved its position back
    answered = next(n for n, line in enumerate(logs) if "Received OffsetForLeaderEpochResponse" in line)
    assert any("Seek cut [0] to offset 15 (leader epoch 1)" in line for line in logs[answered:]), \
        "librdkafka noticed the lost tail"
