"""A consume-transform-produce application with transactions, run as a subprocess by the
transaction integration tests (so it can be killed with SIGKILL or frozen with SIGSTOP).

    python tests/txn_app.py --client confluent|aiokafka|kafka-python --bootstrap HOST:PORT \
        --input IN --output OUT --group G --txn-id T --inputs N [--per-txn K] [--hold-after M]
        [--hold-with-offsets] [--txn-timeout-ms MS]

Each transaction: up to K records consumed (read_committed, no auto commit), each produced to
the same partition of OUT with the same key and the value reversed, the consumer's positions
sent to the transaction, commit. Lines on stdout (flushed), which the tests wait for:

* ``COMMITTED <records> <p>:<offset>,...``: a transaction committed; <records>: the sum of the
  positions, then the position of each partition.
* ``IN_TXN <n> <p>:<offset>,...`` (with --hold-after M, after M commits): a transaction is
  open with n records produced and acknowledged, and the positions it would commit; offsets
  not sent yet (with --hold-with-offsets (confluent only): sent, the transaction not
  committed); the app then reads one line from stdin:
  ``commit`` sends the offsets and commits, ``exit`` exits at once. The outcome is printed as
  ``RESULT COMMITTED``, or ``RESULT FENCED <error name>`` for a fencing error, or
  ``RESULT ERROR <error name> <message>``; then the app exits.
* ``DONE <records>``: the positions add up to N (every input processed); the app exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable

#: Error names a fenced producer reports, by client (librdkafka's local _FENCED included).
FENCED_NAMES = {"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "ProducerFencedError", "ProducerFenced",
                "InvalidProducerEpochError"}


def say(line: str) -> None:
    """One protocol line on stdout."""
    print(line, flush=True)


def positions_text(positions: dict[int, int]) -> str:
    """``p:offset`` of each partition, by partition."""
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))


def transform(value: bytes) -> bytes:
    """The transform step: the value reversed."""
    return value[::-1]


def held(commit: Callable[[], None], error_name: Callable[[BaseException], str]) -> None:
    """The held transaction: wait for the test's word, then try to commit and report."""
    word = sys.stdin.readline().strip()
    if word != "commit":
        sys.exit(3)
    try:
        commit()
    except Exception as exc:  # the outcome is the report
        name = error_name(exc)
        say(f"RESULT FENCED {name}" if name in FENCED_NAMES else f"RESULT ERROR {name} {exc}")
    else:
        say("RESULT COMMITTED")


def run_confluent(a: argparse.Namespace) -> None:
    """The loop with confluent-kafka (librdkafka)."""
    from confluent_kafka import Consumer, KafkaException, Producer

    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500})
    producer = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id,
                         "linger.ms": 5, "transaction.timeout.ms": a.txn_timeout_ms})
    producer.init_transactions(30)
    consumer.subscribe([a.input])
    commits = 0

    def error_name(exc: BaseException) -> str:
        if isinstance(exc, KafkaException) and exc.args:
            return exc.args[0].name()
        return type(exc).__name__

    while True:
        batch = consumer.consume(a.per_txn, timeout=1.0)
        if not batch:
            continue
        for msg in batch:
            if msg.error():
                raise KafkaException(msg.error())
        producer.begin_transaction()
        for msg in batch:
            producer.produce(a.output, transform(msg.value()), msg.key(), partition=msg.partition())
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        by_partition = {tp.partition: tp.offset for tp in positions}
        offsets_sent = False

        def commit() -> None:
            if not offsets_sent:
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)

        if a.hold_after is not None and commits == a.hold_after:
            if producer.flush(30):
                raise RuntimeError("held transaction's records not acknowledged")
            if a.hold_with_offsets:
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
                offsets_sent = True
            say(f"IN_TXN {len(batch)} {positions_text(by_partition)}")
            held(commit, error_name)
            return
        commit()
        commits += 1
        done = sum(by_partition.values())
        say(f"COMMITTED {done} {positions_text(by_partition)}")
        if done >= a.inputs:
            say(f"DONE {done}")
            consumer.close()
            return


async def run_aiokafka(a: argparse.Namespace) -> None:
    """The loop with aiokafka (its transactional producer; offsets sent with the group id)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.txn_id,
                                enable_idempotence=True, linger_ms=5)
    consumer = AIOKafkaConsumer(a.input, bootstrap_servers=a.bootstrap, group_id=a.group,
                                isolation_level="read_committed", enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=6000,
                                heartbeat_interval_ms=500)
    await producer.start()
    await consumer.start()
    commits = 0
    loop = asyncio.get_running_loop()
    try:
        while True:
            got = await consumer.getmany(timeout_ms=1000, max_records=a.per_txn)
            batch = [m for msgs in got.values() for m in msgs]
            if not batch:
                continue
            await producer.begin_transaction()
            sent = [await producer.send(a.output, transform(m.value), m.key, partition=m.partition)
                    for m in batch]
            await asyncio.gather(*sent)  # acknowledged
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}

            async def commit() -> None:
                await producer.send_offsets_to_transaction(positions, a.group)
                await producer.commit_transaction()

            by_partition = {tp.partition: o for tp, o in positions.items()}
            if a.hold_after is not None and commits == a.hold_after:
                say(f"IN_TXN {len(batch)} {positions_text(by_partition)}")
                word = await loop.run_in_executor(None, sys.stdin.readline)
                if word.strip() != "commit":
                    sys.exit(3)
                try:
                    await commit()
                except Exception as exc:
                    name = type(exc).__name__
                    say(f"RESULT FENCED {name}" if name in FENCED_NAMES else f"RESULT ERROR {name} {exc}")
                else:
                    say("RESULT COMMITTED")
                return
            await commit()
            commits += 1
            done = sum(positions.values())
            say(f"COMMITTED {done} {positions_text(by_partition)}")
            if done >= a.inputs:
                say(f"DONE {done}")
                return
    finally:
        await consumer.stop()
        await producer.stop()


def run_kafka_python(a: argparse.Namespace) -> None:
    """The loop with kafka-python (>= 2.2: transactions; 3.0: KIP-447 group metadata)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import OffsetAndMetadata

    producer = KafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.txn_id, linger_ms=5)
    consumer = KafkaConsumer(a.input, bootstrap_servers=a.bootstrap, group_id=a.group,
                             isolation_level="read_committed", enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=6000,
                             heartbeat_interval_ms=500)
    producer.init_transactions()
    commits = 0
    while True:
        got = consumer.poll(timeout_ms=1000, max_records=a.per_txn)
        batch = [m for msgs in got.values() for m in msgs]
        if not batch:
            continue
        producer.begin_transaction()
        futures = [producer.send(a.output, transform(m.value), m.key, partition=m.partition)
                   for m in batch]
        for future in futures:
            future.get(timeout=30)
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        offsets = {tp: OffsetAndMetadata(pos, "", -1) for tp, pos in positions.items()}

        def commit() -> None:
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()

        by_partition = {tp.partition: o for tp, o in positions.items()}
        if a.hold_after is not None and commits == a.hold_after:
            say(f"IN_TXN {len(batch)} {positions_text(by_partition)}")
            held(commit, lambda exc: type(exc).__name__)
            return
        commit()
        commits += 1
        done = sum(positions.values())
        say(f"COMMITTED {done} {positions_text(by_partition)}")
        if done >= a.inputs:
            say(f"DONE {done}")
            consumer.close()
            producer.close()
            return


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--client", choices=["confluent", "aiokafka", "kafka-python"], required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--txn-id", required=True)
    p.add_argument("--inputs", type=int, required=True)
    p.add_argument("--per-txn", type=int, default=20)
    p.add_argument("--hold-after", type=int)
    p.add_argument("--hold-with-offsets", action="store_true")
    p.add_argument("--txn-timeout-ms", type=int, default=60000)
    a = p.parse_args()
    if a.client == "confluent":
        run_confluent(a)
    elif a.client == "aiokafka":
        asyncio.run(run_aiokafka(a))
    else:
        run_kafka_python(a)


if __name__ == "__main__":
    main()
