"""A power loss under committing consumers: 8 confluent-kafka consumer processes commit
synchronously back to back, each in a group of its own, and the power goes: they and
`offsetd serve` are killed -9, and every `__consumer_offsets` segment is put back to what an fsync
had made durable of it, as page cache lost with the power would leave it. What is fsynced for a
commit is the coordinators' journal, so of a segment that never rolled nothing was fsynced after it
was made empty: each .log is cut to zero bytes. The restart restores the journal into the
partitions before their groups load: every acknowledged commit is there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from confluent_kafka import Consumer, TopicPartition

from broker_process import wait_for
from clients import create_topic

from offsetd.records.batch import iter_batches

GROUPS = 8
TOPIC = "power"

# argv: bootstrap, topic, group. Commits offsets 1, 2, 3, ... synchronously; prints each once acknowledged.
_COMMITTER = """
import sys
from confluent_kafka import Consumer, KafkaException, TopicPartition
bootstrap, topic, group = sys.argv[1:4]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
offset = 0
while True:
    offset += 1
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    except KafkaException:
        continue
    print(offset, flush=True)
"""


def _acknowledged(output: bytes) -> int:
    """The last offset a committer printed whole (a line cut by the kill is not one)."""
    lines = output.decode().split("\n")[:-1]
    return int(lines[-1]) if lines else 0


def test_acknowledged_commits_survive_a_power_loss(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, partitions=1)
    groups = [f"power-{i}" for i in range(GROUPS)]
    outputs = {g: tmp_path / f"{g}.out" for g in groups}
    committers = [subprocess.Popen([sys.executable, "-c", _COMMITTER, bootstrap, TOPIC, g],
                                   stdout=outputs[g].open("wb"), stderr=subprocess.DEVNULL) for g in groups]
    try:
        wait_for(lambda: all(_acknowledged(outputs[g].read_bytes()) > 300 for g in groups), timeout=60,
                 message="300 acknowledged commits in each group")
    finally:
        broker.kill9()  # the power goes: the broker and its clients at once
        for committer in committers:
            committer.send_signal(signal.SIGKILL)
            committer.wait(10)
    acked = {g: _acknowledged(outputs[g].read_bytes()) for g in groups}
    data = broker.data_dir
    journals = sorted(p.name for p in data.iterdir() if p.name.startswith("coordinator-journal-"))
    assert journals == [f"coordinator-journal-{1:020d}.log"]  # never rolled: no segment was fsynced for it
    cut = 0
    for pdir in data.glob("__consumer_offsets-*"):
        segments = sorted(pdir.glob("*.log"))
        assert [s.name for s in segments] == [f"{0:020d}.log"]
        if segments[0].stat().st_size:
            os.truncate(segments[0], 0)  # what no fsync covered is gone
            cut += 1
    assert cut > 0
    broker.start()
    assert "restored from the coordinator journal" in broker.log()
    for group in groups:
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            [committed] = reader.committed([TopicPartition(TOPIC, 0)], timeout=15)
        finally:
            reader.close()
        # at least the last acknowledged; at most the one in flight at the cut (it may be durable)
        assert acked[group] <= committed.offset <= acked[group] + 1, (group, committed.offset, acked[group])


# argv: bootstrap, topic, transactional id. Commits a transaction of 10 records to partition 0,
# begins the next and has one record of it acknowledged (so its Ongoing record is durable), says
# "ready" and waits to be killed.
_TRANSACTOR = """
import sys
from confluent_kafka import Producer
bootstrap, topic, txn = sys.argv[1:4]
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn})
producer.init_transactions(30)
producer.begin_transaction()
for i in range(10):
    producer.produce(topic, str(i).encode(), partition=0)
producer.commit_transaction(30)
producer.begin_transaction()
producer.produce(topic, b"next", partition=0)
assert producer.flush(30) == 0
print("ready", flush=True)
sys.stdin.read()
"""


def test_a_transaction_marker_the_power_took_is_restored(broker, tmp_path) -> None:
    """A committed transaction's marker in a data partition is written without an fsync, like
    its records, while the producer's next transaction is durable in `__transaction_state`. The
    power goes and the segment loses the marker and what followed it, but not the transaction's
    records: without the marker that transaction stays open for good (nothing will send it again)
    and read_committed readers see nothing of the partition. The restart restores the marker
    from the coordinators' journal, and a read_committed consumer reads the 10 records."""
    bootstrap = broker.bootstrap
    topic = "power-txn"
    create_topic(bootstrap, topic, partitions=1)
    out = tmp_path / "transactor.out"
    transactor = subprocess.Popen([sys.executable, "-c", _TRANSACTOR, bootstrap, topic, "power-txn"],
                                  stdin=subprocess.PIPE, stdout=out.open("wb"), stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: out.read_bytes() == b"ready\n", timeout=60,
                 message="a committed transaction and the next begun")
    finally:
        broker.kill9()  # the power goes
        transactor.kill()
        transactor.wait(10)
    [segment] = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    data = segment.read_bytes()
    markers = [pos for pos, header in iter_batches(data) if header.is_control]
    assert markers, "the committed transaction's marker is in the segment"
    os.truncate(segment, markers[0])  # the marker's page, and what followed it, never reached the disk
    broker.start()
    assert "transaction marker(s) restored from the coordinator journal" in broker.log()
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "power-txn-reader", "auto.offset.reset": "earliest",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        reader.subscribe([topic])
        wait_for(lambda: values.extend(m.value() for m in reader.consume(10, timeout=0.5) if not m.error())
                 or len(values) >= 10, timeout=30, message="the committed transaction's 10 records")
    finally:
        reader.close()
    assert values == [str(i).encode() for i in range(10)]
