"""Helpers for the transaction integration tests: the consume-transform-produce app as a
subprocess (tests/txn_app.py), input filling, read_committed / read_uncommitted read-backs,
end offsets by isolation level and committed offsets."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    Consumer,
    IsolationLevel,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from offsetd.dev.broker import LineReader

APP = Path(__file__).parent / "txn_app.py"
#: Settings for brokers in these tests: no delay before a new group's first rebalance.
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0"}


class TxnApp:
    """tests/txn_app.py running in its own process; its stdout lines read against deadlines."""

    def __init__(self, client: str, bootstrap: str, input_topic: str, output_topic: str, group: str,
                 txn_id: str, inputs: int, per_txn: int = 20, hold_after: int | None = None,
                 hold_with_offsets: bool = False, txn_timeout_ms: int | None = None) -> None:
        cmd = [sys.executable, str(APP), "--client", client, "--bootstrap", bootstrap,
               "--input", input_topic, "--output", output_topic, "--group", group, "--txn-id", txn_id,
               "--inputs", str(inputs), "--per-txn", str(per_txn)]
        if hold_after is not None:
            cmd += ["--hold-after", str(hold_after)]
        if hold_with_offsets:
            cmd.append("--hold-with-offsets")
        if txn_timeout_ms is not None:
            cmd += ["--txn-timeout-ms", str(txn_timeout_ms)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, bufsize=0)
        assert self.proc.stdout is not None
        self._out = LineReader(self.proc.stdout)
        self.lines: list[str] = []

    def wait_line(self, prefix: str, timeout: float = 60.0) -> str:
        """The first (next) stdout line starting with `prefix`; AssertionError (with the app's
        stderr) if the app exits or the deadline passes first."""
        deadline = time.monotonic() + timeout
        while True:
            line = self._out.readline(deadline)
            if line is None:
                raise AssertionError(f"no {prefix!r} line from the app within {timeout}s "
                                     f"(rc={self.proc.poll()}); lines {self.lines[-5:]}; "
                                     f"stderr: {self.stderr_tail()}")
            self.lines.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line.rstrip("\n")

    @staticmethod
    def positions(line: str) -> dict[int, int]:
        """The ``p:offset,...`` field (the last) of a COMMITTED or IN_TXN line."""
        return {int(p): int(o) for p, o in (item.split(":") for item in line.split()[-1].split(","))}

    def say(self, word: str) -> None:
        """A line to the app's stdin (the held transaction's instruction)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(word.encode() + b"\n")
        self.proc.stdin.flush()

    def signal(self, signum: int) -> None:
        """Send `signum` (SIGKILL, SIGSTOP, SIGCONT) to the app."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signum)

    def kill9(self) -> None:
        """SIGKILL and wait: the application crashes."""
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait_exit(self, timeout: float = 30.0) -> int:
        """The exit status, waiting up to `timeout`."""
        return self.proc.wait(timeout)

    def stderr_tail(self) -> str:
        """The app's stderr so far, if it has exited (else empty: reading would block)."""
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")[-3000:]

    def close(self) -> None:
        """Kill it if it still runs (SIGCONT first: a stopped process takes SIGKILL anyway)."""
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.kill9()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def fill_input(bootstrap: str, topic: str, partitions: int, per_partition: int) -> set[bytes]:
    """Produce `per_partition` records to each partition (key b"p-i", value b"value-p-i"),
    acks=all, no transactions; returns the keys."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    failed: list = []
    keys = set()
    for p in range(partitions):
        for i in range(per_partition):
            key = f"{p}-{i}".encode()
            keys.add(key)
            producer.produce(topic, b"value-" + key, key, partition=p,
                             on_delivery=lambda err, _m: err and failed.append(err))
    assert producer.flush(30) == 0 and not failed, failed
    return keys


def end_offsets(bootstrap: str, topic: str, partitions: int, committed: bool) -> dict[int, int]:
    """ListOffsets LATEST of each partition: the last stable offset with `committed`
    (read_committed), else the high watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                 isolation_level=level, request_timeout=15)
    return {tp.partition: fut.result(20).offset for tp, fut in futures.items()}


def read_topic(bootstrap: str, topic: str, partitions: int, committed: bool,
               timeout: float = 30.0) -> list[tuple[int, bytes, bytes]]:
    """Every record (partition, key, value) up to the end offsets of `end_offsets` (same
    isolation level), read with that isolation level from offset 0."""
    ends = end_offsets(bootstrap, topic, partitions, committed)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-read-back",
                         "enable.auto.commit": False,
                         "isolation.level": "read_committed" if committed else "read_uncommitted"})
    tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
    consumer.assign(tps)
    records: list[tuple[int, bytes, bytes]] = []
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"read-back of {topic} stuck: {len(records)} read, ends {ends}"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                records.append((msg.partition(), msg.key(), msg.value()))
            # the position, not the last record: a marker can end a partition
            done |= {tp.partition for tp in consumer.position(tps) if tp.offset >= ends[tp.partition]}
    finally:
        consumer.close()
    return records


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int,
                      require_stable: bool = True) -> dict[int, int | str]:
    """The group's committed offset of each partition (OffsetFetch; require_stable as asked;
    an error per partition is given by its name)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = admin.list_consumer_group_offsets([request], require_stable=require_stable,
                                               request_timeout=15)[group].result(20)
    return {tp.partition: (tp.error.name() if tp.error else tp.offset) for tp in result.topic_partitions}

