"""Issue 26's trial: many more partitions than the open-file limit simply work (segment and index
files are opened on demand from a bounded pool), and a CreateTopics or CreatePartitions that meets
a file-system limit answers Kafka's per-topic KAFKA_STORAGE_ERROR with a message, keeps nothing of
that topic, and leaves the broker serving."""

from __future__ import annotations

import os
import random
from pathlib import Path

from broker_process import BrokerProcess, wait_for
from clients import consume_all, create_topic, produce
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from small_disk import SmallDisk

FD_LIMIT = 256


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _create(admin: AdminClient, name: str, partitions: int) -> KafkaError | None:
    """Create one topic; the Kafka error it was refused with, or None."""
    try:
        admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=60)[name].result(90)
    except KafkaException as exc:
        return exc.args[0]
    return None


def _partition_dirs(data: Path, topic: str) -> list[str]:
    return [p.name for p in data.iterdir() if p.name.rsplit("-", 1)[0] == topic]


def test_thousands_of_partitions_past_the_open_file_limit(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", open_file_limit=FD_LIMIT).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = [f"wide{i}" for i in range(4)]
        for name in topics:  # 2,000 partitions: 6,000 segment and index files, 256 descriptors
            assert _create(admin, name, 500) is None
            assert _open_fds(broker.pid) <= FD_LIMIT
        assert "open files: limit 256; up to 128 segment and index files" in broker.log()
        metadata = admin.list_topics(timeout=30)
        assert sum(len(metadata.topics[t].partitions) for t in topics) == 2000
        sample = random.Random(26).sample([(t, p) for t in topics for p in range(500)], 20)
        for topic, partition in sample:
            produce(broker.bootstrap, topic, [{"value": f"{topic}/{partition}/{i}".encode(), "partition": partition}
                                              for i in range(3)])
        assert _open_fds(broker.pid) <= FD_LIMIT
        for topic, partition in sample:
            got = consume_all(broker.bootstrap, topic, [partition], 3)
            assert [m.value() for m in got] == [f"{topic}/{partition}/{i}".encode() for i in range(3)]
        assert _open_fds(broker.pid) <= FD_LIMIT
        broker.restart()  # 2,000 partitions loaded again within the same limit
        assert _open_fds(broker.pid) <= FD_LIMIT
        topic, partition = sample[0]
        got = consume_all(broker.bootstrap, topic, [partition], 3)
        assert [m.value() for m in got] == [f"{topic}/{partition}/{i}".encode() for i in range(3)]
        assert "Too many open files" not in broker.log()
    finally:
        broker.stop()


def test_a_topic_past_the_file_system_limit_is_refused_whole_and_the_broker_keeps_serving(tmp_path: Path) -> None:
    # Room for few files: each partition takes a directory (and its segment's files once used).
    with SmallDisk(tmp_path / "disk", size="64m", inodes=1600) as disk:
        data = disk.path / "data"
        broker = BrokerProcess(data, {"offsets.topic.num.partitions": "1"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            assert _create(admin, "first", 10) is None
            produce(broker.bootstrap, "first", [{"value": b"before", "partition": 3}])  # its files made
            error = None
            made = 0
            while error is None and made < 20:  # until the disk has no inode left for a whole topic
                error = _create(admin, f"t{made}", 100)
                made += error is None
            assert error is not None, "the file system never refused a topic"
            refused = f"t{made}"
            assert error.code() == KafkaError.KAFKA_STORAGE_ERROR
            assert "No space left on device" in error.str() and "Nothing of it was created" in error.str()
            assert _partition_dirs(data, refused) == []
            metadata = admin.list_topics(timeout=10)
            assert refused not in metadata.topics and f"t{made - 1}" in metadata.topics

            # CreatePartitions past the limit: refused whole as well
            grow = admin.create_partitions([NewPartitions("first", 1000)], operation_timeout=60)["first"]
            try:
                grow.result(90)
                raise AssertionError("growing past the file system's limit was not refused")
            except KafkaException as exc:
                assert exc.args[0].code() == KafkaError.KAFKA_STORAGE_ERROR
            assert len(_partition_dirs(data, "first")) == 10
            assert len(admin.list_topics(timeout=10).topics["first"].partitions) == 10

            # the broker keeps serving: produce, fetch, and once there is room the same name works
            produce(broker.bootstrap, "first", [{"value": b"still here", "partition": 3}])
            assert [m.value() for m in consume_all(broker.bootstrap, "first", [3], 2)] == [b"before", b"still here"]
            deleted = admin.delete_topics(["t0", "t1"], operation_timeout=30)
            for future in deleted.values():
                future.result(30)
            wait_for(lambda: _create(admin, refused, 100) is None, timeout=30, interval=0.5,
                     message=f"{refused} to be created once there is room")
            assert len(_partition_dirs(data, refused)) == 100
        finally:
            broker.stop()
