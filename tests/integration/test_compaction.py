"""The log cleaner in the running broker (seed 003): `__consumer_offsets` is compacted in the
background, shrinks, and a restart (after kill -9) loads the same offsets as before; a compacted
data topic written by kcat with lz4 batches is compacted too."""

from __future__ import annotations

import shutil
import subprocess

from confluent_kafka import Consumer, TopicPartition

from broker_process import wait_for
from clients import create_topic

from offsetd.records.batch import iter_batches
from offsetd.records.compression import decompress
from offsetd.records.log_walker import iter_log_records

CLEANING = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "4096",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.cleanable.ratio": "0.1",
    "group.initial.rebalance.delay.ms": "0",
}


def _log_records(broker, partition_dir: str = "__consumer_offsets-0") -> int:
    """Records in the partition's segment files (a swap may delete a file while we look: retry).
    Counted, not sized: the active segment's file also holds preallocated zeros."""
    while True:
        try:
            return sum(1 for _ in iter_log_records(b"".join(
                p.read_bytes() for p in sorted((broker.data_dir / partition_dir).glob("*.log"))),
                decompress=decompress))
        except FileNotFoundError:
            continue


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, tuple[int, str | None]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: (tp.offset, tp.metadata) for tp in result}
    finally:
        consumer.close()


def test_offsets_log_is_compacted_and_reloads_identically(broker_factory):
    broker = broker_factory(CLEANING)
    create_topic(broker.bootstrap, "compacted", partitions=4)
    committer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cleaned", "enable.auto.commit": False})
    try:
        for round_ in range(300):  # 1200 commit records for 4 keys: mostly garbage for the cleaner
            committer.commit(offsets=[TopicPartition("compacted", p, round_ * 10 + p, metadata=f"r{round_}")
                                      for p in range(4)], asynchronous=False)
    finally:
        committer.close()
    expected = {p: (2990 + p, "r299") for p in range(4)}
    assert _committed(broker.bootstrap, "cleaned", "compacted", 4) == expected
    written = 1200  # commit records; the cleaner may already be at work, so count, not measure
    wait_for(lambda: "cleaned __consumer_offsets-0" in broker.log(), timeout=30, message="a cleaner pass")
    wait_for(lambda: _log_records(broker) < written / 2, timeout=30,
             message=f"__consumer_offsets to hold fewer than half of the {written} commit records")
    assert _committed(broker.bootstrap, "cleaned", "compacted", 4) == expected
    broker.kill9()
    broker.start()
    assert _committed(broker.bootstrap, "cleaned", "compacted", 4) == expected


def test_kcat_lz4_batches_of_a_compacted_topic_are_compacted(broker_factory):
    """Compressed batches take part in compaction whatever their codec: kcat writes 40 lz4
    batches of updates to 4 keys; the cleaner drops the batches that hold no latest value, and a
    reader sees each key's last value."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed by `make test` (Debian package kcat)"
    broker = broker_factory({"log.cleaner.backoff.ms": "200"})
    create_topic(broker.bootstrap, "lz4-compacted", config={
        "cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.1"})
    pad = "." * 300  # compressible: librdkafka sends a batch uncompressed when lz4 would not shrink it
    for batch in range(40):  # one kcat run: one lz4 batch of 5 updates
        lines = "".join(f"k{(batch * 5 + i) % 4}:v{batch * 5 + i}{pad}\n" for i in range(5))
        subprocess.run([kcat, "-b", broker.bootstrap, "-t", "lz4-compacted", "-P", "-K:", "-z", "lz4"],
                       input=lines, text=True, check=True, timeout=30)
    written = 200  # the cleaner may already be at work: the log end says what was written
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lz4-reader"})
    try:
        assert reader.get_watermark_offsets(TopicPartition("lz4-compacted", 0), timeout=10) == (0, written)
    finally:
        reader.close()
    active = sorted((broker.data_dir / "lz4-compacted-0").glob("*.log"))[-1]  # never cleaned
    assert {h.compression for _, h in iter_batches(active.read_bytes())} == {3}, "kcat wrote lz4 batches"
    wait_for(lambda: "cleaned lz4-compacted-0" in broker.log(), timeout=30, message="a cleaner pass")
    wait_for(lambda: _log_records(broker, "lz4-compacted-0") < written / 2, timeout=30,
             message=f"the topic to hold fewer than half of the {written} records")
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-t", "lz4-compacted", "-C", "-e", "-f", "%k=%s\n"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    latest = dict(line.removesuffix(pad).split("=") for line in out.splitlines())
    assert all(line.endswith(pad) for line in out.splitlines())
    assert latest == {"k0": "v196", "k1": "v197", "k2": "v198", "k3": "v199"}
