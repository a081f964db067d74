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
