"""Client loops that run inside child processes (see ``procs``).

They measure and count; they do not judge. The workloads in ``workloads`` check the returned
counts and turn them into metrics. Everything here is picklable and module-level, as
``multiprocessing``'s spawn start method requires.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class ProduceResult:
    """What one producer saw. ``elapsed_s`` runs from the first ``produce()`` until
    ``flush()`` returned."""

    elapsed_s: float
    attempted: int
    delivered: int = 0
    errors: int = 0
    undelivered: int = 0  # still queued when flush() hit the deadline
    first_error: str | None = None


@dataclass
class ConsumeResult:
    """What one consumer saw. ``elapsed_s`` runs from ``assign()`` until the last wanted
    message was received (or the deadline)."""

    elapsed_s: float
    received: int = 0
    per_partition: list[int] = field(default_factory=list)
    #: Records whose offset was not the previous one + 1 (the first expected is 0).
    offset_anomalies: int = 0
    #: High watermark of each partition from the last Fetch response (-1: none seen).
    high_watermarks: list[int] = field(default_factory=list)
    wrong_size: int = 0
    errors: int = 0
    first_error: str | None = None


def produce(
    bootstrap: str,
    topic: str,
    messages: int,
    message_size: int,
    partitions: int,
    linger_ms: int,
    timeout_s: float,
) -> ProduceResult:
    """Produce ``messages`` values of ``message_size`` bytes, no key, message ``i`` to
    partition ``i % partitions``; acks=all, no idempotence. Counts delivery reports."""
    from confluent_kafka import Producer

    delivered = 0
    errors = 0
    first_error: str | None = None

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered, errors, first_error
        if err is None:
            delivered += 1
        else:
            errors += 1
            if first_error is None:
                first_error = str(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": linger_ms,
            "enable.idempotence": False,
            # Give up (with a delivery error) rather than retry beyond our own deadline.
            "message.timeout.ms": int(timeout_s * 1000),
            "on_delivery": on_delivery,
        }
    )
    # Warm-up outside the timed section: connect and learn the partition leaders.
    producer.list_topics(topic, timeout=10)

    payload = b"x" * message_size
    send = producer.produce
    poll = producer.poll
    start = time.perf_counter()
    deadline = start + timeout_s
    attempted = 0
    while attempted < messages:
        try:
            send(topic, payload, partition=attempted % partitions)
        except BufferError:  # local queue full: serve delivery reports, then retry
            if time.perf_counter() >= deadline:
                break
            poll(0.05)
            continue
        attempted += 1
        if attempted % 1000 == 0:
            poll(0)
    undelivered = producer.flush(max(0.0, deadline - time.perf_counter()))
    elapsed = time.perf_counter() - start
    return ProduceResult(
        elapsed_s=elapsed,
        attempted=attempted,
        delivered=delivered,
        errors=errors,
        undelivered=undelivered,
        first_error=first_error,
    )


def consume(
    bootstrap: str,
    topic: str,
    messages: int,
    message_size: int,
    partitions: int,
    group_id: str,
    timeout_s: float,
) -> ConsumeResult:
    """``assign()`` every partition from the beginning (no group coordination, no commits)
    and read until ``messages`` records arrived or ``timeout_s`` passed."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # librdkafka pauses a partition's fetching for this long (default 1000 ms) once
            # its local queue passes queued.min.messages; with the default, a ~1 s stall
            # near the end of the run came and went at random, on both brokers.
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        # Warm-up outside the timed section: connect and learn the partition leaders.
        consumer.list_topics(topic, timeout=10)

        per_partition = [0] * partitions
        next_offset = [0] * partitions
        received = wrong_size = errors = offset_anomalies = 0
        first_error: str | None = None
        start = time.perf_counter()
        deadline = start + timeout_s
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while received < messages:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            # consume() blocks until it has num_messages or times out, so never ask for
            # more than are still due.
            batch = consumer.consume(
                num_messages=min(10_000, messages - received), timeout=min(remaining, 0.5)
            )
            for msg in batch:
                err = msg.error()
                if err is not None:
                    errors += 1
                    if first_error is None:
                        first_error = str(err)
                    continue
                received += 1
                partition = msg.partition()
                offset = msg.offset()
                if offset != next_offset[partition]:
                    offset_anomalies += 1
                next_offset[partition] = offset + 1
                per_partition[partition] += 1
                value = msg.value()
                if value is None or len(value) != message_size:
                    wrong_size += 1
        elapsed = time.perf_counter() - start
        # As reported in the Fetch responses (cached=True). Not ListOffsets: Tansu 0.6.0
        # answers ListOffsets(latest) with a lower offset than the one Fetch reports.
        high_watermarks = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()
    return ConsumeResult(
        elapsed_s=elapsed,
        received=received,
        per_partition=per_partition,
        offset_anomalies=offset_anomalies,
        high_watermarks=high_watermarks,
        wrong_size=wrong_size,
        errors=errors,
        first_error=first_error,
    )
