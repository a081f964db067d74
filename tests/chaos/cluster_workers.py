"""The cluster chaos run's own client threads (beside harness.py's idempotent producers and
committers): members of consumer groups, classic and KIP-848, committing what they consumed
synchronously, and consume-transform-produce loops committing output and positions in one
transaction. Every commit and every transaction is an `Op` of the history."""

from __future__ import annotations

import random
import time
from typing import Any

from checker import txn_record
from cluster_config import ClusterChaosConfig
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from harness import Worker
from history import CLIENT_TIMEOUTS, Op, classify, commit_metadata


class GroupMemberWorker(Worker):
    """A consumer of the data topic in a group (`protocol` "classic" or "consumer", KIP-848): it
    commits the positions of what it consumed, synchronously, each commit's metadata naming its op."""

    config: ClusterChaosConfig

    def __init__(self, group: str, protocol: str, member: int, *args: Any) -> None:
        super().__init__(f"{group}.m{member}", *args)
        self.group, self.protocol = group, protocol
        self.positions: dict[int, int] = {}  # partition -> offset after the last record consumed
        self.committed: dict[int, int] = {}  # partition -> last position sent in a commit

    def work(self) -> None:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest", **CLIENT_TIMEOUTS}
        if self.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        consumer = Consumer(conf)
        consumer.subscribe([self.config.topic], on_revoke=self._revoked, on_lost=self._revoked)
        next_commit = time.monotonic() + self.config.group_commit_interval
        try:
            while not self.stop_event.is_set():
                for msg in consumer.consume(200, 0.1):
                    if msg.error() is None:
                        self.positions[msg.partition()] = msg.offset() + 1
                if time.monotonic() >= next_commit:
                    self._commit(consumer)
                    next_commit = time.monotonic() + self.config.group_commit_interval
        finally:
            consumer.close()

    def _revoked(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Positions of partitions taken away are no longer ours to commit."""
        for tp in partitions:
            self.positions.pop(tp.partition, None)
            self.committed.pop(tp.partition, None)

    def _commit(self, consumer: Consumer) -> None:
        due = {p: o for p, o in self.positions.items() if self.committed.get(p) != o}
        if not due:
            return
        topic = self.config.topic
        ops = {p: self.history.invoke(self.round_no, "commit", self.name, self.group, p, str(o), topic)
               for p, o in due.items()}
        offsets = [TopicPartition(topic, p, o, metadata=commit_metadata(ops[p], self.config.commit_metadata_bytes))
                   for p, o in due.items()]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            for op in ops.values():
                self.history.complete(op, classify(err), error=err.name())
            return
        answered = set()
        for tp in result or []:
            op = ops.get(tp.partition)
            if op is None:
                continue
            answered.add(tp.partition)
            if tp.error is None:
                self.history.complete(op, "ok")
                self.committed[tp.partition] = tp.offset
            else:
                self.history.complete(op, classify(tp.error), error=tp.error.name())
        for p in set(ops) - answered:
            self.history.complete(ops[p], "unknown", error="no per-partition result")


class TxnLoopWorker(Worker):
    """Consume-transform-produce with transactions: reads the data topic (read_committed) in the
    EOS group, writes one output record per input to the same partition of the output topic and
    commits them with the consumer's positions; aborts some transactions on purpose and rewinds.
    After an error it cannot resolve it starts again with a new producer (same transactional.id,
    which fences the old one) and a new consumer (positions from the last committed transaction)."""

    config: ClusterChaosConfig

    def __init__(self, index: int, *args: Any) -> None:
        super().__init__(f"t{index}", *args)
        self.transactional_id = f"chaos-txn-{index}"
        self.rng = random.Random(self.config.seed * 1000 + index)  # which transactions to abort
        self.sessions = 0

    def work(self) -> None:
        while not self.stop_event.is_set():
            self.sessions += 1
            try:
                if self._session(f"{self.name}.{self.sessions}"):
                    continue
            except KafkaException as exc:  # init_transactions failed (the coordinator moving): try again
                self.history.notes.append(f"{self.name}: session {self.sessions} ended: {exc.args[0].name()}")
            self.stop_event.wait(0.5)  # pacing before a new session
        # A last init fences whichever producer was abandoned and decides its transaction, so the
        # output topic's last stable offset reaches its end for the read-back.
        self._new_producer()

    def _new_producer(self) -> Producer:
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
                             "transaction.timeout.ms": 10000, "linger.ms": 5, "message.timeout.ms": 10000,
                             **CLIENT_TIMEOUTS})
        producer.init_transactions(30)
        return producer

    def _session(self, instance: str) -> bool:
        """One producer and consumer pair until stop (True) or a transaction that needs a new pair
        (False: its outcome unknown, or its partitions no longer assigned)."""
        producer = self._new_producer()
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.config.eos_group,
                             "client.id": instance, "isolation.level": "read_committed",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, **CLIENT_TIMEOUTS})
        consumer.subscribe([self.config.topic])
        number = 0
        try:
            while not self.stop_event.is_set():
                batch = [m for m in consumer.consume(self.config.txn_records, 0.2) if m.error() is None]
                if not batch:
                    continue
                number += 1
                if not self._transaction(producer, consumer, batch, f"{instance}.{number}"):
                    return False
            return True
        finally:
            consumer.close()

    def _transaction(self, producer: Producer, consumer: Consumer, batch: list[Message], label: str) -> bool:
        """One transaction over `batch`; False when a new session must follow."""
        output = self.config.output_topic
        op = self.history.invoke(self.round_no, "txn", self.name, self.config.eos_group, -1, label, output)
        op.count = len(batch)
        try:
            producer.begin_transaction()
            for index, msg in enumerate(batch):
                producer.produce(output, txn_record(label, index, len(batch), (msg.partition(), msg.offset())),
                                 partition=msg.partition())
            if self.rng.random() < self.config.txn_abort_ratio:
                producer.flush(10)  # the records reach the log first: read_committed must skip them
                return self._abort(producer, consumer, batch, op, None)
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            if not {m.partition() for m in batch} <= {tp.partition for tp in positions}:
                return self._abort(producer, consumer, batch, op, None)  # revoked meanwhile: no position to commit
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            self._commit(producer)
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                return self._abort(producer, consumer, batch, op, err)
            self.history.complete(op, "unknown", error=err.name())
            return False
        self.history.complete(op, "ok")
        return True

    @staticmethod
    def _commit(producer: Producer) -> None:
        """commit_transaction, again while it says retriable (librdkafka's documented loop)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                producer.commit_transaction(10)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise

    def _abort(self, producer: Producer, consumer: Consumer, batch: list[Message], op: Op,
               cause: KafkaError | None) -> bool:
        """Abort, then rewind the consumer to the batch's first offsets (they are processed again)."""
        try:
            producer.abort_transaction(30)
        except KafkaException as exc:
            self.history.complete(op, "unknown", error=f"{cause.name() if cause else 'abort'}: {exc.args[0].name()}")
            return False
        self.history.complete(op, "aborted", error=cause.name() if cause else None)
        first: dict[int, int] = {}
        for msg in batch:
            first.setdefault(msg.partition(), msg.offset())
        try:
            for partition, offset in first.items():
                consumer.seek(TopicPartition(self.config.topic, partition, offset))
        except KafkaException:  # no longer assigned: whoever has it starts from the committed position
            return False
        return True
