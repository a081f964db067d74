"""The log cleaner in the running broker (seed 003): `__consumer_offsets` is compacted in the
background, shrinks, and a restart (after kill -9) loads the same offsets as before."""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from broker_process import wait_for
from clients import create_topic

from offsetd.records.offsets import iter_log_records

CLEANING = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": "4096",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.cleanable.ratio": "0.1",
    "group.initial.rebalance.delay.ms": "0",
}


def _offsets_log_records(broker) -> int:
    """Records in the partition's segment files (a swap may delete a file while we look: retry).
    Counted, not sized: the active segment's file also holds preallocated zeros."""
    while True:
        try:
            return sum(1 for _ in iter_log_records(b"".join(
                p.read_bytes() for p in sorted((broker.data_dir / "__consumer_offsets-0").glob("*.log")))))
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
    wait_for(lambda: _offsets_log_records(broker) < written / 2, timeout=30,
             message=f"__consumer_offsets to hold fewer than half of the {written} commit records")
    assert _committed(broker.bootstrap, "cleaned", "compacted", 4) == expected
    broker.kill9()
    broker.start()
    assert _committed(broker.bootstrap, "cleaned", "compacted", 4) == expected
