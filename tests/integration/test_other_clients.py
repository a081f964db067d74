"""kafka-python, aiokafka and kcat against a real broker process."""

from __future__ import annotations

import asyncio
import shutil
import subprocess

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition as AioTP
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from clients import consume_all, create_topic

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_round_trip(shared_broker, codec):
    topic = f"kp-{codec}"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, compression_type=codec, linger_ms=5)
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2,
                             headers=[("n", str(i).encode())], timestamp_ms=1_650_000_000_000 + i)
               for i in range(200)]
    metas = [f.get(timeout=20) for f in futures]
    producer.close()
    assert sorted(m.offset for m in metas if m.partition == 1) == list(range(100))

    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    consumer.seek_to_beginning()
    got = []
    for record in consumer:
        got.append(record)
        if len(got) == 200:
            break
    consumer.close()
    assert len(got) == 200
    by_key = {r.key: r for r in got}
    assert by_key[b"k7"].value == b"v7" and by_key[b"k7"].headers == [("n", b"7")]
    assert by_key[b"k7"].timestamp == 1_650_000_000_007 and by_key[b"k7"].partition == 1


def test_aiokafka_round_trip(shared_broker):
    topic = "aio"
    create_topic(shared_broker.bootstrap, topic, partitions=3)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, compression_type="gzip")
        await producer.start()
        try:
            for i in range(150):
                await producer.send(topic, key=str(i).encode(), value=b"x" * i, partition=i % 3)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioTP(topic, p) for p in range(3)])
            await consumer.seek_to_beginning()
            got = []
            async def drain():
                async for msg in consumer:
                    got.append(msg)
                    if len(got) == 150:
                        return
            await asyncio.wait_for(drain(), 30)
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    assert sorted(int(m.key) for m in got) == list(range(150))
    assert all(m.value == b"x" * int(m.key) for m in got)


def test_kcat_produce_and_consume(shared_broker):
    kcat = shutil.which("kcat")
    assert kcat, "kcat must be installed by `make test` (Debian package kcat)"
    topic = "kcat"
    create_topic(shared_broker.bootstrap, topic)
    lines = "\n".join(f"key{i}:line {i}" for i in range(50)) + "\n"
    subprocess.run([kcat, "-b", shared_broker.bootstrap, "-t", topic, "-P", "-K:", "-z", "lz4"],
                   input=lines, text=True, check=True, timeout=30)
    out = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-t", topic, "-C", "-e", "-f", "%k=%s@%o\n"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    assert out.splitlines() == [f"key{i}=line {i}@{i}" for i in range(50)]
    meta = subprocess.run([kcat, "-b", shared_broker.bootstrap, "-L", "-t", topic],
                          capture_output=True, text=True, check=True, timeout=30).stdout
    assert f'topic "{topic}" with 1 partitions' in meta
    # and a librdkafka consumer sees what kcat wrote
    assert [m.value() for m in consume_all(shared_broker.bootstrap, topic, [0], 50)][:2] == [b"line 0", b"line 1"]
