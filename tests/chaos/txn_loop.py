"""A consume-transform-produce loop with transactions (confluent-kafka), run as a subprocess by the
cluster chaos harness (cluster_workers.TxnLoopWorker) so that a client that hangs can be killed:
librdkafka's send_offsets_to_transaction() can block past its timeout while the group coordinator
is down (confluentinc/librdkafka#5456, #5511).

    python tests/chaos/txn_loop.py --bootstrap B --input IN --output OUT --group G --txn-id T
        --label L --seed N [--records 20] [--abort-ratio 0.2]

It reads IN (read_commited) in group G, writes one record per input to the same partition of OUT
(checker.txn_record: the transaction's label, the record's index and count, the input partition
and offset) and commits them with the consumer's positions; aborts some transactions on purpose
(after flushing, so their records reach the log) and rewinds; after an error it cannot resolve it
starts a new session: a new producer (same transactional.id, which fences the old one) and a new
consumer (positions from the last committed transaction). One JSON line per event on stdout
(client_events.py): an `op` line (kind txn, the transaction's label and record count) before a
transaction, a `done` line (ok, aborted or unknown) once it is decided. A line `stop` on stdin (or
its end) stops it after the transaction in hand; a last init_transactions then decides whatever an
abandoned producer left open, and it exits 0. With --fence-only it does only that last step.
"""

from __future__ import annotations

import argparse
import faulthandler
import random
import signal
import time

from checker import txn_record
from client_events import done, invoke, note, stop_asked
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from history import CLIENT_TIMEOUTS


class TxnLoop:
    """The loop's sessions; each transaction's begin and outcome reported on stdout."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.rng = random.Random(a.seed)  # which transactions to abort
        self.sessions = 0

    def new_producer(self) -> Producer:
        """A transactional producer, initialised (which fences any older one of the same id)."""
        producer = Producer({"bootstrap.servers": self.a.bootstrap, "transactional.id": self.a.txn_id,
                             "transaction.timeout.ms": 10000, "linger.ms": 5, "message.timeout.ms": 10000,
                             **CLIENT_TIMEOUTS})
        producer.init_transactions(30)
        return producer

    def run(self) -> None:
        """Sessions until asked to stop, then a last init_transactions."""
        while not stop_asked():
            self.sessions += 1
            try:
                if self.session(f"{self.a.label}.{self.sessions}"):
                    continue
            except KafkaException as exc:  # init_transactions failed (the coordinator moving): try again
                note(f"session {self.sessions} ended: {exc.args[0].name()}")
            time.sleep(0.5)  # pacing before a new session
        self.new_producer()

    def session(self, instance: str) -> bool:
        """One producer and consumer pair until asked to stop (True) or a transaction that needs a
        new pair (False: its outcome unknown, or its partitions no longer assigned)."""
        producer = self.new_producer()
        consumer = Consumer({"bootstrap.servers": self.a.bootstrap, "group.id": self.a.group, "client.id": instance,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 500, **CLIENT_TIMEOUTS})
        consumer.subscribe([self.a.input])
        number = 0
        try:
            while not stop_asked():
                batch = [m for m in consumer.consume(self.a.records, 0.2) if m.error() is None]
                if not batch:
                    continue
                number += 1
                if not self.transaction(producer, consumer, batch, f"{instance}.{number}"):
                    return False
            return True
        finally:
            consumer.close()

    def transaction(self, producer: Producer, consumer: Consumer, batch: list[Message], label: str) -> bool:
        """One transaction over `batch`; False when a new session must follow."""
        invoke(label, "txn", group=self.a.group, partition=-1, value=label, topic=self.a.output, count=len(batch))
        try:
            producer.begin_transaction()
            for index, msg in enumerate(batch):
                producer.produce(self.a.output, txn_record(label, index, len(batch), (msg.partition(), msg.offset())),
                                 partition=msg.partition())
            if self.rng.random() < self.a.abort_ratio:
                producer.flush(10)  # the records reach the log first: read_committed must skip them
                return self.abort(producer, consumer, batch, label, None)
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            if not {m.partition() for m in batch} <= {tp.partition for tp in positions}:
                return self.abort(producer, consumer, batch, label, None)  # revoked meanwhile: no position to commit
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            self.commit(producer)
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                return self.abort(producer, consumer, batch, label, err)
            done(label, "unknown", err.name())
            return False
        done(label, "ok")
        return True

    @staticmethod
    def commit(producer: Producer) -> None:
        """commit_transaction, again while it says retriable (librdkafka's documented loop)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                producer.commit_transaction(10)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise

    def abort(self, producer: Producer, consumer: Consumer, batch: list[Message], label: str,
              cause: KafkaError | None) -> bool:
        """Abort, then rewind the consumer to the batch's first offsets (they are processed again)."""
        try:
            producer.abort_transaction(30)
        except KafkaException as exc:
            done(label, "unknown", f"{cause.name() if cause else 'abort'}: {exc.args[0].name()}")
            return False
        done(label, "aborted", cause.name() if cause else None)
        first: dict[int, int] = {}
        for msg in batch:
            first.setdefault(msg.partition(), msg.offset())
        try:
            for partition, offset in first.items():
                consumer.seek(TopicPartition(self.a.input, partition, offset))
        except KafkaException:  # no longer assigned: whoever has it starts from the committed position
            return False
        return True


def main() -> None:
    """Parse the arguments and run the loop (or only the last fencing init)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--bootstrap", "--input", "--output", "--group", "--txn-id", "--label"):
        p.add_argument(name, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--records", type=int, default=20)
    p.add_argument("--abort-ratio", type=float, default=0.2)
    p.add_argument("--fence-only", action="store_true")
    faulthandler.register(signal.SIGUSR1)  # the harness asks where a silent loop hangs
    loop = TxnLoop(p.parse_args())
    if loop.a.fence_only:
        loop.new_producer()
    else:
        loop.run()


if __name__ == "__main__":
    main()
