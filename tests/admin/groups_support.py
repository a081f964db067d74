"""Helpers for the `offsetd groups` integration tests: run the tool in-process, set up topics and
commits with the real client libraries, and read committed offsets back independently of the
tool (confluent-kafka's AdminClient directly)."""

from __future__ import annotations

import time
from typing import Iterator

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from broker_process import BrokerProcess
from integration.clients import create_topic, produce
from offsetd.admin.groups_cli import main


def module_broker(tmp_path_factory, name: str, config: dict[str, str]) -> Iterator[BrokerProcess]:
    """A module-scoped broker fixture's body: start a broker with `config` in a fresh `name`
    directory, yield it, stop it if a test has not already."""
    proc = BrokerProcess(tmp_path_factory.mktemp(name) / "data", config).start()
    yield proc
    if proc.alive():
        proc.stop()


def run(capsys, bootstrap: str, *argv: str) -> tuple[int, str, str]:
    """`offsetd groups --bootstrap-server B ARGV` in-process: (exit status, stdout, stderr)."""
    code = main(["--bootstrap-server", bootstrap, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def make_topic(bootstrap: str, topic: str, counts: list[int], first_ts_ms: int | None = None,
               step_ms: int = 1000, config: dict[str, str] | None = None) -> int:
    """Create `topic` with len(counts) partitions and produce counts[p] records to partition p,
    record i of each partition stamped first_ts_ms + i * step_ms (default: now-based). Returns
    the first timestamp used."""
    create_topic(bootstrap, topic, len(counts), config)
    first = int(time.time() * 1000) - 3_600_000 if first_ts_ms is None else first_ts_ms
    messages = [{"partition": p, "value": f"{topic}-{p}-{i}".encode(), "timestamp": first + i * step_ms}
                for p, n in enumerate(counts) for i in range(n)]
    if messages:
        produce(bootstrap, topic, messages)
    return first


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit offsets for `group` as a standalone consumer (generation -1: no membership)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read with confluent-kafka's AdminClient (not the tool)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(15)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def pad(values: list[object], widths: list[int]) -> str:
    """One line in Kafka's layout: every value left-aligned to its width (0: unpadded), joined
    by single spaces; written independently of the tool's own table code."""
    return " ".join(f"{str(v):<{w}}" if w else str(v) for v, w in zip(values, widths))
