"""Zero-copy Fetch against a real broker process: records sent with sendfile are the segment
files' bytes exactly, pipelined requests get their answers in order, a segment deleted by
retention while its response is being sent still arrives whole, and real consumers
(confluent-kafka, kafka-python, kcat) read big partitions completely and in order."""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from confluent_kafka import TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kio.index import load_request_schema

from broker_process import wait_for
from clients import consume_all, create_topic, produce
from offsetd.records.batch import batch_crc_ok, iter_batches
from raw_client import RawClient, decode_response

FETCH, LIST_OFFSETS, METADATA = 1, 2, 3
MB = 1 << 20


def _fetch_request(topic: str, offsets: dict[int, int], partition_max: int, version: int = 12):
    cls = load_request_schema(FETCH, version)
    mod = __import__(cls.__module__, fromlist=["x"])
    parts = tuple(mod.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max)
                  for p, o in offsets.items())
    return cls(max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=100 * MB,
               topics=(mod.FetchTopic(topic=topic, partitions=parts),), forgotten_topics_data=())


def _metadata_request(topic: str):
    cls = load_request_schema(METADATA, 12)
    mod = __import__(cls.__module__, fromlist=["x"])
    return cls(topics=(mod.MetadataRequestTopic(name=topic, topic_id=None),), allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)


def _segment_bytes(data_dir: Path, topic: str, partition: int) -> bytes:
    """The partition's .log files concatenated in offset order: what Fetch must send."""
    files = sorted((data_dir / f"{topic}-{partition}").glob("*.log"))
    return b"".join(f.read_bytes() for f in files)


def _produce_values(bootstrap: str, topic: str, partitions: int, per_partition: int, size: int) -> None:
    """Values 'p<partition>-<index>' padded to `size`, in order per partition."""
    produce(bootstrap, topic, [{"value": f"p{p}-{i}".encode().ljust(size, b"."), "partition": p}
                               for i in range(per_partition) for p in range(partitions)],
            **{"batch.num.messages": 2000, "queue.buffering.max.messages": 1_000_000})


def test_big_partitions_pipelined_are_the_segment_bytes_in_order(broker):
    """Two Fetches of 4 partitions x ~1 MiB (sendfile) pipelined with Metadata and a second
    Fetch behind them: every answer comes in request order, records equal the files' bytes."""
    create_topic(broker.bootstrap, "zc", partitions=4)
    _produce_values(broker.bootstrap, "zc", 4, 12_000, 200)  # ~2.5 MB per partition
    files = {p: _segment_bytes(broker.data_dir, "zc", p) for p in range(4)}
    with RawClient(broker.bootstrap, timeout=30) as client:
        frames = [client.encode_request(FETCH, 12, _fetch_request("zc", {p: 0 for p in range(4)}, MB))]
        ids = [client.correlation_id]
        frames.append(client.encode_request(METADATA, 12, _metadata_request("zc")))
        ids.append(client.correlation_id)
        frames.append(client.encode_request(FETCH, 12, _fetch_request("zc", {p: 0 for p in range(4)}, 4 * MB)))
        ids.append(client.correlation_id)
        for frame in frames:  # all sent before any answer is read
            client.send_frame(frame)
        first = decode_response(FETCH, 12, client.read_frame(), ids[0])
        meta = decode_response(METADATA, 12, client.read_frame(), ids[1])
        whole = decode_response(FETCH, 12, client.read_frame(), ids[2])
    assert [t.name for t in meta.topics] == ["zc"]
    for part in first.responses[0].partitions:
        data = files[part.partition_index]
        assert part.error_code.value == 0 and 256 * 1024 < len(part.records) <= MB
        assert part.records == data[: len(part.records)]
    for part in whole.responses[0].partitions:
        assert part.records == files[part.partition_index], "a whole partition, byte for byte"


def _log_start(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "zc-probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]
    finally:
        consumer.close()


RETENTION_MS = 10_000  # long enough to produce and send the fetch first, even on a busy machine


def test_segments_deleted_by_retention_during_a_send_arrive_whole(broker_factory):
    """A ~12 MB response is left unread (the broker's send waits on the socket) while retention
    deletes every segment it comes from; reading it afterwards gives every batch intact."""
    broker = broker_factory({"log.retention.check.interval.ms": "100"})
    create_topic(broker.bootstrap, "gone", config={"segment.bytes": str(MB), "retention.ms": str(RETENTION_MS)})
    produced = time.monotonic()
    _produce_values(broker.bootstrap, "gone", 1, 60_000, 200)
    data = _segment_bytes(broker.data_dir, "gone", 0)
    assert len(data) > 10 * MB and len(list((broker.data_dir / "gone-0").glob("*.log"))) > 10
    with RawClient(broker.bootstrap, timeout=60) as client:
        client.send_frame(client.encode_request(FETCH, 12, _fetch_request("gone", {0: 0}, 64 * MB)))
        assert time.monotonic() - produced < RETENTION_MS / 1000, "the fetch must be read before retention runs"
        wait_for(lambda: _log_start(broker.bootstrap, "gone") > 50_000, timeout=RETENTION_MS / 1000 + 20,
                 interval=0.2, message="retention to delete the old segments")
        assert not (broker.data_dir / "gone-0" / "00000000000000000000.log").exists()
        response = decode_response(FETCH, 12, client.read_frame(), client.correlation_id)
    records = response.responses[0].partitions[0].records
    assert records == data
    batches = list(iter_batches(records))
    assert all(batch_crc_ok(records, pos, h) for pos, h in batches)
    assert batches[0][1].base_offset == 0 and batches[-1][1].last_offset == 59_999


# ------------------------------------------------------------------------------- real consumers

PARTS, PER_PART, SIZE = 4, 15_000, 100  # ~1.8 MB per partition: several sendfile fetches each


def _check(received: list[tuple[int, int, bytes]]) -> None:
    """Every produced value once, offsets 0..n-1 in order per partition."""
    by_partition: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for partition, offset, value in received:
        by_partition[partition].append((offset, value))
    assert sorted(by_partition) == list(range(PARTS))
    for p, items in by_partition.items():
        assert [o for o, _ in items] == list(range(PER_PART)), f"partition {p} offsets"
        assert [v for _, v in items] == [f"p{p}-{i}".encode().ljust(SIZE, b".") for i in range(PER_PART)]


def _consumers_topic(broker) -> str:
    create_topic(broker.bootstrap, "readers", partitions=PARTS)
    _produce_values(broker.bootstrap, "readers", PARTS, PER_PART, SIZE)
    return "readers"


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_confluent_kafka_kafka_python_and_kcat_read_everything(shared_broker):
    """...and once they are gone the broker holds no descriptor more than before (every
    FileRecords sent, or dropped unsent by a long poll's pass, is closed)."""
    topic = _consumers_topic(shared_broker)
    total = PARTS * PER_PART
    fds_before = _open_fds(shared_broker.pid)

    msgs = consume_all(shared_broker.bootstrap, topic, list(range(PARTS)), total, timeout=60)
    _check([(m.partition(), m.offset(), m.value()) for m in msgs])

    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False,
                             max_partition_fetch_bytes=MB, fetch_max_bytes=50 * MB)
    received: list[tuple[int, int, bytes]] = []
    try:
        consumer.assign([KpTopicPartition(topic, p) for p in range(PARTS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 60
        while len(received) < total and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                received += [(tp.partition, r.offset, r.value) for r in records]
    finally:
        consumer.close()
    _check(received)

    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by make test"
    out = subprocess.run([kcat, "-C", "-b", shared_broker.bootstrap, "-t", topic, "-o", "beginning", "-e",
                          "-q", "-f", "%p %o %s\n"], capture_output=True, timeout=120, check=True).stdout
    lines = [line.split(b" ", 2) for line in out.splitlines()]
    _check([(int(p), int(o), v) for p, o, v in lines])
    wait_for(lambda: _open_fds(shared_broker.pid) <= fds_before, timeout=20,
             message=f"the broker's descriptors back to {fds_before} (now {_open_fds(shared_broker.pid)})")
