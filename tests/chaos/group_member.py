"""A member of a consumer group (confluent-kafka), run as a subprocess by the cluster chaos harness
(cluster_workers.ClientProcessWorker) so that a member that hangs or crashes can be killed and
started again without taking the harness with it.

    python tests/chaos/group_member.py --bootstrap B --topic T --group G --protocol classic|consumer
        --name N [--commit-interval 0.3] [--metadata-bytes 256] [--debug cgrp]

It reads T from the group's committed positions (earliest when none) and commits the position
after what it consumed, synchronously, every commit interval; partitions taken away are dropped
from what it commits. One JSON line per event on stdout (client_events.py): an `op` line for each
partition of a commit before it is sent (its metadata names the attempt), a `done` line with its
outcome. A line `stop` on stdin (or its end) stops it; it then closes the consumer and exits 0.
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
import time
from typing import Any

from client_events import done, invoke, note, stop_asked
from confluent_kafka import Consumer, KafkaException, TopicPartition
from history import CLIENT_TIMEOUTS, classify


class GroupMember:
    """The member's consume-and-commit loop."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.positions: dict[int, int] = {}  # partition -> offset after the last record consumed
        self.committed: dict[int, int] = {}  # partition -> last position sent in a commit
        self.commits = 0

    def run(self) -> None:
        """Consume and commit until asked to stop."""
        conf: dict[str, Any] = {"bootstrap.servers": self.a.bootstrap, "group.id": self.a.group,
                                "client.id": self.a.name, "enable.auto.commit": False,
                                "auto.offset.reset": "earliest", **CLIENT_TIMEOUTS}
        if self.a.debug:
            conf.update({"debug": self.a.debug, "log_level": 7})  # librdkafka logs to stderr
        if self.a.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        consumer = Consumer(conf)
        consumer.subscribe([self.a.topic], on_revoke=self.revoked, on_lost=self.revoked)
        next_commit = time.monotonic() + self.a.commit_interval
        try:
            while not stop_asked():
                for msg in consumer.consume(200, 0.1):
                    if msg.error() is None:
                        self.positions[msg.partition()] = msg.offset() + 1
                if time.monotonic() >= next_commit:
                    self.commit(consumer)
                    next_commit = time.monotonic() + self.a.commit_interval
        finally:
            consumer.close()

    def revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Positions of partitions taken away are no longer ours to commit."""
        for tp in partitions:
            self.positions.pop(tp.partition, None)
            self.committed.pop(tp.partition, None)

    def commit(self, consumer: Consumer) -> None:
        """One synchronous commit of the positions not committed yet, each partition an operation."""
        due = {p: o for p, o in self.positions.items() if self.committed.get(p) != o}
        if not due:
            return
        self.commits += 1
        ids = {p: f"{self.a.name}.{self.commits}.{p}" for p in due}
        metadata = {p: f"{ids[p]}:".ljust(self.a.metadata_bytes, "x") for p in due}
        for p, o in due.items():
            invoke(ids[p], "commit", group=self.a.group, partition=p, value=str(o), topic=self.a.topic,
                   metadata=metadata[p])
        offsets = [TopicPartition(self.a.topic, p, o, metadata=metadata[p]) for p, o in due.items()]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            for p in due:
                done(ids[p], classify(err), err.name())
            return
        answered = set()
        for tp in result or []:
            if tp.partition not in ids:
                continue
            answered.add(tp.partition)
            if tp.error is None:
                done(ids[tp.partition], "ok")
                self.committed[tp.partition] = tp.offset
            else:
                done(ids[tp.partition], classify(tp.error), tp.error.name())
        for p in set(ids) - answered:
            done(ids[p], "unknown", "no per-partition result")


def main() -> None:
    """Parse the arguments and run the member."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--bootstrap", "--topic", "--group", "--name"):
        p.add_argument(name, required=True)
    p.add_argument("--protocol", choices=["classic", "consumer"], required=True)
    p.add_argument("--commit-interval", type=float, default=0.3)
    p.add_argument("--metadata-bytes", type=int, default=256)
    p.add_argument("--debug", default="")
    faulthandler.register(signal.SIGUSR1)  # the harness asks where a silent member hangs
    try:
        GroupMember(p.parse_args()).run()
    except KafkaException as exc:
        note(f"stopped by {exc.args[0].name()}")
        sys.exit(1)


if __name__ == "__main__":
    main()
