"""Partitions opened on first use after a start (issue 26): after a clean restart and after a
kill -9 (with a torn tail on one partition), every record acknowledged with acks=all before is read
back, ListOffsets answers the earliest, latest and by-timestamp offsets as before, new records
follow at the right offsets, and a partition never used holds no file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from broker_process import BrokerProcess
from clients import consume_all, create_topic, produce
from confluent_kafka import Consumer, TopicPartition

TOPIC = "lazy"
WRITTEN = range(4)  # partitions 4..7 are never written
BASE_TS = int(time.time() * 1000) - 3_600_000


def _produce(broker: BrokerProcess, first: int, count: int) -> dict[int, list[int]]:
    """`count` records to each written partition, record i stamped BASE_TS + i s; partition -> offsets."""
    sent = [{"value": f"{p}/{i}".encode(), "partition": p, "timestamp": BASE_TS + 1000 * i}
            for i in range(first, first + count) for p in WRITTEN]
    offsets: dict[int, list[int]] = {}
    for msg in produce(broker.bootstrap, TOPIC, sent, acks="all"):
        offsets.setdefault(msg.partition(), []).append(msg.offset())
    return offsets


def _check(broker: BrokerProcess, records: int) -> None:
    """Watermarks, time lookups and the records of every partition, `records` per written one."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lazy-check"})
    try:
        for p in range(8):
            end = records if p in WRITTEN else 0
            assert consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=20) == (0, end), p
        wanted = [TopicPartition(TOPIC, p, BASE_TS + 1000 * (records - 3) - 500) for p in WRITTEN]
        found = consumer.offsets_for_times(wanted, timeout=20)
        assert [tp.offset for tp in found] == [records - 3] * len(WRITTEN)
    finally:
        consumer.close()
    for p in WRITTEN:
        values = [m.value() for m in consume_all(broker.bootstrap, TOPIC, [p], records)]
        assert values == [f"{p}/{i}".encode() for i in range(records)]


def test_lazily_opened_partitions_serve_after_a_clean_restart_and_after_kill9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        create_topic(broker.bootstrap, TOPIC, 8)
        assert _produce(broker, 0, 50) == {p: list(range(50)) for p in WRITTEN}
        broker.stop()
        broker.start()
        assert "opened on first use (shut down cleanly" in broker.log()
        assert [os.listdir(data / f"{TOPIC}-{p}") for p in range(4, 8)] == [[]] * 4  # files once used
        _check(broker, 50)
        assert _produce(broker, 50, 30) == {p: list(range(50, 80)) for p in WRITTEN}

        broker.kill9()
        segment = data / f"{TOPIC}-0" / "00000000000000000000.log"
        with open(segment, "ab") as torn:  # a write the crash cut short, after the acknowledged ones
            torn.write(b"\x00\x00\x00\x00\x00\x00\x00\x50torn")
        broker.start()
        _check(broker, 80)
        assert f"{TOPIC}-0/00000000000000000000.log: torn batch" in broker.log()
        assert _produce(broker, 80, 5) == {p: list(range(80, 85)) for p in WRITTEN}
        broker.stop()
        broker.start()
        _check(broker, 85)
    finally:
        if broker.alive():
            broker.stop()
