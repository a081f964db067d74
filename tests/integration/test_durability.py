"""Data survives clean restarts and kill -9; a torn or corrupt tail is cut at the last valid batch."""

from __future__ import annotations

import struct
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from broker_process import wait_for
from clients import consume_all, create_topic, produce


def _segment(broker, topic: str, partition: int = 0) -> Path:
    return broker.data_dir / f"{topic}-{partition}" / f"{0:020d}.log"


def test_restart_and_reread(broker):
    create_topic(broker.bootstrap, "keep", partitions=4)
    produce(broker.bootstrap, "keep", [{"key": str(i).encode(), "value": b"v" * 50, "partition": i % 4}
                                      for i in range(1000)])
    assert broker.stop() == 0
    assert "stopped cleanly" in "".join(broker.stdout_lines)
    broker.start()
    received = consume_all(broker.bootstrap, "keep", [0, 1, 2, 3], 1000)
    assert sorted(int(m.key()) for m in received) == list(range(1000))
    produce(broker.bootstrap, "keep", [{"value": b"after", "partition": 0}])
    tail = consume_all(broker.bootstrap, "keep", [0], 251)
    assert tail[-1].offset() == 250 and tail[-1].value() == b"after"


def test_kill9_loses_nothing_acknowledged(broker):
    create_topic(broker.bootstrap, "crash", partitions=2)
    produce(broker.bootstrap, "crash", [{"value": str(i).encode(), "partition": i % 2} for i in range(500)],
            acks="all")
    broker.kill9()
    broker.start()
    received = consume_all(broker.bootstrap, "crash", [0, 1], 500)
    assert sorted(int(m.value()) for m in received) == list(range(500))


def _batches(segment: Path) -> list[tuple[int, int, int]]:
    """(file position, base offset, records) of each batch in a segment, read from the v2 batch
    headers (base offset int64, length int32, ... last offset delta int32 at byte 23); stops at
    preallocated zeros."""
    data = segment.read_bytes()
    found, pos = [], 0
    while pos + 27 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if length == 0:
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        found.append((pos, base, delta + 1))
        pos += 12 + length
    return found


def _log_end(bootstrap: str, topic: str) -> int:
    """The partition's high watermark, asked of the broker."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
    finally:
        consumer.close()


def _values(produced: list[list]) -> list[bytes]:
    return [m.value() for batch in produced for m in batch]


# librdkafka may send one flush() as two batches on a busy box, so the tests find the last batch in
# the file rather than assume where it starts.


def test_torn_tail_is_truncated_at_last_valid_batch(broker):
    create_topic(broker.bootstrap, "torn")
    produced = [produce(broker.bootstrap, "torn", [{"value": f"{batch}-{i}".encode()} for i in range(10)],
                        **{"linger.ms": 10_000}) for batch in range(5)]
    broker.stop()
    segment = _segment(broker, "torn")
    last_pos, kept, _ = _batches(segment)[-1]
    assert kept >= 40  # the fifth flush's records (at least its last) are in the last batch
    size = segment.stat().st_size
    with open(segment, "r+b") as handle:
        handle.truncate(size - 7)  # tear the last batch
    broker.start()
    assert _log_end(broker.bootstrap, "torn") == kept
    received = consume_all(broker.bootstrap, "torn", [0], kept)
    assert [m.value() for m in received] == _values(produced)[:kept]
    assert f"(1 batch) to keep {last_pos} bytes" in broker.log()
    produce(broker.bootstrap, "torn", [{"value": b"new"}])
    again = consume_all(broker.bootstrap, "torn", [0], kept + 1)
    assert again[-1].offset() == kept and again[-1].value() == b"new"


def test_corrupt_tail_crc_is_truncated(broker):
    create_topic(broker.bootstrap, "corrupt")
    produced = [produce(broker.bootstrap, "corrupt", [{"value": f"{batch}-{i}".encode()} for i in range(10)])
                for batch in range(3)]
    broker.kill9()
    segment = _segment(broker, "corrupt")
    last_pos, kept, records = _batches(segment)[-1]
    assert kept + records == 30
    data = bytearray(segment.read_bytes())
    end = last_pos + 12 + struct.unpack_from(">i", data, last_pos + 8)[0]
    data[end - 3] ^= 0xFF  # flip a byte inside the last batch's records: its CRC no longer matches
    segment.write_bytes(bytes(data))
    broker.start()
    assert _log_end(broker.bootstrap, "corrupt") == kept
    received = consume_all(broker.bootstrap, "corrupt", [0], kept)
    assert [m.value() for m in received] == _values(produced)[:kept]
    assert "CRC-32C mismatch" in broker.log()


def test_retention_timer_deletes_old_segments_and_advances_log_start(broker_factory):
    broker = broker_factory({"log.retention.check.interval.ms": "100"})
    create_topic(broker.bootstrap, "expiring", config={"retention.ms": "60000", "segment.bytes": "200"})
    old = 1_000_000_000_000  # 2001: far older than retention.ms
    for i in range(3):  # each batch rolls its own segment (segment.bytes=200)
        produce(broker.bootstrap, "expiring", [{"value": b"o" * 150, "timestamp": old + i}])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "r"})
    try:
        low_high = lambda: consumer.get_watermark_offsets(TopicPartition("expiring", 0), timeout=5, cached=False)
        wait_for(lambda: low_high()[0] == 3, timeout=15, message="log start offset to advance past old segments")
        assert low_high() == (3, 3)
    finally:
        consumer.close()
    produce(broker.bootstrap, "expiring", [{"value": b"fresh"}])
    assert [m.offset() for m in consume_all(broker.bootstrap, "expiring", [0], 1)] == [3]
    assert not (broker.data_dir / "expiring-0" / f"{0:020d}.log").exists()
