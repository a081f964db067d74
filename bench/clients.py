"""Client loops that run inside child processes (see ``procs``).

They measure and count; they do not judge. The workloads in ``workloads`` check the returned
counts and turn them into metrics. Everything here is picklable and module-level, as
``multiprocessing``'s spawn start method requires.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from offsetd.dev.proc_stats import cpu_s as process_cpu_s

if TYPE_CHECKING:  # imported for real inside the children (see the functions below)
    from multiprocessing.synchronize import Barrier

    from confluent_kafka import Consumer, KafkaError, TopicPartition


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
    #: The broker process' CPU time (user + system, all threads) over ``elapsed_s``; None
    #: when no broker pid was given or /proc is not readable.
    broker_cpu_s: float | None = None


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
    broker_pid: int | None = None,
) -> ConsumeResult:
    """``assign()`` every partition from the beginning (no group coordination, no commits)
    and read until ``messages`` records arrived or ``timeout_s`` passed. The loop is an
    application's: consume() blocks until records arrive (no spinning). With ``broker_pid``
    the broker's CPU time over the same interval is measured too."""
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
        cpu_before = process_cpu_s(broker_pid)
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
        cpu_after = process_cpu_s(broker_pid)
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
        broker_cpu_s=None if cpu_before is None or cpu_after is None else cpu_after - cpu_before,
    )


# -- offset commits -------------------------------------------------------------------------
#
# The commit clients are standalone ("simple") consumers: they never subscribe() or assign(),
# they only call commit(offsets=...). librdkafka then sends OffsetCommit with generation -1
# and an empty member id, which the broker accepts for a group with no members (creating an
# offsets-only group). No partitions are assigned, so poll() fetches nothing and only serves
# callbacks. The committed topic must exist (Kafka answers UNKNOWN_TOPIC_OR_PARTITION
# otherwise).


@dataclass
class CommitThroughputResult:
    """What one async-committing client saw. ``started``/``finished`` are ``time.monotonic()``
    readings (CLOCK_MONOTONIC: one clock for every process of the host), so the parent can
    compute the span covered by all clients together."""

    started: float  # first timed commit handed to the client
    finished: float  # last in-flight commit acknowledged (or the drain deadline)
    sent: int = 0
    acked: int = 0  # commit callbacks without any error
    errors: int = 0  # callbacks with a request or partition error
    first_error: str | None = None
    in_flight_at_end: int = 0  # commits still unacknowledged at the drain deadline
    max_in_flight: int = 0
    #: Offsets of the last commit sent, per partition, and what committed() read back.
    last_sent: list[int] = field(default_factory=list)
    read_back: list[int] = field(default_factory=list)
    read_back_error: str | None = None


def _commit_consumer(
    bootstrap: str,
    group_id: str,
    on_commit: Callable[[KafkaError | None, list[TopicPartition]], None] | None = None,
) -> Consumer:
    """A consumer used only for standalone commits (no subscription, no auto commit)."""
    from confluent_kafka import Consumer

    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,
    }
    if on_commit is not None:
        conf["on_commit"] = on_commit
    return Consumer(conf)


def record_read_back(result: Any, consumer: Consumer, topic: str, partitions: int) -> None:
    """``committed()`` for every partition into ``result.read_back`` (-1001, OFFSET_INVALID,
    where nothing is stored), or, on a request or partition error, what went wrong into
    ``result.read_back_error`` (reported, judged by the workload)."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(topic, p) for p in range(partitions)]
    try:
        tps = consumer.committed(wanted, timeout=10.0)
    except Exception as exc:
        result.read_back_error = f"{type(exc).__name__}: {exc}"
        return
    bad = [f"{tp.partition}: {tp.error}" for tp in tps if tp.error is not None]
    if bad:
        result.read_back_error = f"partition errors {', '.join(bad)}"
        return
    by_partition = {tp.partition: tp.offset for tp in tps}
    result.read_back = [by_partition.get(p, -1001) for p in range(partitions)]


def commit_throughput(
    bootstrap: str,
    topic: str,
    partitions: int,
    group_id: str,
    max_in_flight: int,
    duration_s: float,
    timeout_s: float,
    barrier: Barrier,
) -> CommitThroughputResult:
    """Commit offsets of ``partitions`` partitions per request, asynchronously, keeping up to
    ``max_in_flight`` commits unacknowledged, for ``duration_s``; then wait for the stragglers
    and read the offsets back with ``committed()``.

    Commit ``n`` (n = 1, 2, ...) stores offset ``n * partitions + p`` for partition ``p``, so
    every commit changes every offset and the read-back shows which commit won. A warm-up
    commit (n = 0) outside the timed section finds the coordinator and opens the connection;
    then all clients wait on ``barrier`` so their timed sections overlap.
    """
    from confluent_kafka import TopicPartition

    in_flight = acked = errors = 0
    first_error: str | None = None

    def on_commit(err: KafkaError | None, tps: list[TopicPartition]) -> None:
        nonlocal in_flight, acked, errors, first_error
        in_flight -= 1
        problem = str(err) if err is not None else None
        if problem is None:
            bad = [f"{tp.partition}: {tp.error}" for tp in tps if tp.error is not None]
            problem = f"partition errors {', '.join(bad)}" if bad else None
        if problem is None:
            acked += 1
        else:
            errors += 1
            if first_error is None:
                first_error = problem

    consumer = _commit_consumer(bootstrap, group_id, on_commit)
    commit = consumer.commit
    poll = consumer.poll
    try:
        deadline = time.monotonic() + timeout_s
        # Warm-up: one commit, acknowledged, before the clock starts.
        in_flight = 1
        commit(offsets=[TopicPartition(topic, p, p) for p in range(partitions)], asynchronous=True)
        while in_flight and time.monotonic() < deadline:
            poll(0.05)
        if in_flight or errors:
            raise RuntimeError(f"warm-up commit failed: {first_error or 'no acknowledgement'}")
        acked = 0
        barrier.wait(max(0.0, deadline - time.monotonic()))

        sent = peak = 0
        started = time.monotonic()
        end = started + duration_s
        while time.monotonic() < end:
            if in_flight < max_in_flight:
                sent += 1
                base = sent * partitions
                commit(
                    offsets=[TopicPartition(topic, p, base + p) for p in range(partitions)],
                    asynchronous=True,
                )
                in_flight += 1
                if in_flight > peak:
                    peak = in_flight
                poll(0)
            else:
                poll(0.01)  # wakes as soon as a callback is due
        drain_deadline = min(deadline, time.monotonic() + 30.0)
        while in_flight and time.monotonic() < drain_deadline:
            poll(0.01)
        finished = time.monotonic()

        result = CommitThroughputResult(
            started=started,
            finished=finished,
            sent=sent,
            acked=acked,
            errors=errors,
            first_error=first_error,
            in_flight_at_end=in_flight,
            max_in_flight=peak,
            last_sent=[sent * partitions + p for p in range(partitions)],
        )
        record_read_back(result, consumer, topic, partitions)
    finally:
        consumer.close()
    return result


@dataclass
class CommitLatencyResult:
    """Synchronous commit round trips of one client, in seconds (timed section only)."""

    latencies_s: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    last_sent: list[int] = field(default_factory=list)
    read_back: list[int] = field(default_factory=list)
    read_back_error: str | None = None


def commit_round(commit: Any, topic: str, partitions: int, n: int, result: Any) -> list | None:
    """Commit number ``n`` (``n * partitions + p`` for each partition) synchronously; its offsets,
    or None when it failed (counted in ``result``: its errors, first_error and last_sent)."""
    from confluent_kafka import KafkaException, TopicPartition

    offsets = [TopicPartition(topic, p, n * partitions + p) for p in range(partitions)]
    try:
        tps = commit(offsets=offsets, asynchronous=False)
    except KafkaException as exc:
        problem: str | None = str(exc)
    else:
        bad = [f"{tp.partition}: {tp.error}" for tp in tps if tp.error is not None]
        problem = f"partition errors {', '.join(bad)}" if bad else None
    if problem is not None:
        result.errors += 1
        if result.first_error is None:
            result.first_error = problem
        return None
    result.last_sent = [o.offset for o in offsets]
    return offsets


def commit_latency(
    bootstrap: str,
    topic: str,
    partitions: int,
    group_id: str,
    warmup_s: float,
    duration_s: float,
    barrier: Barrier | None = None,
) -> CommitLatencyResult:
    """Commit ``partitions`` offsets synchronously in a loop: ``warmup_s`` untimed, then
    ``duration_s`` with every ``commit(asynchronous=False)`` timed. Commit ``n`` stores
    ``n * partitions + p``; the offsets are read back at the end. With ``barrier`` (several
    clients at once) the warm-up starts when every client has passed it."""
    result = CommitLatencyResult()
    consumer = _commit_consumer(bootstrap, group_id)
    commit = consumer.commit
    clock = time.perf_counter
    try:
        n = 0
        if barrier is not None:
            barrier.wait(60.0)
        warm_end = clock() + warmup_s
        end = warm_end + duration_s
        while True:
            before = clock()
            if before >= end:
                break
            n += 1
            offsets = commit_round(commit, topic, partitions, n, result)
            after = clock()
            if offsets is not None and before >= warm_end:
                result.latencies_s.append(after - before)
        record_read_back(result, consumer, topic, partitions)
    finally:
        consumer.close()
    return result


# -- a new group's first record -------------------------------------------------------------


@dataclass
class FirstRecordResult:
    """Seconds from ``subscribe()`` to the partition assignment and to the first record
    (``None``: did not happen before the deadline), and what that record was."""

    assigned_s: float | None = None
    first_record_s: float | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    value_size: int | None = None
    errors: int = 0
    first_error: str | None = None


def first_record(bootstrap: str, topic: str, group_id: str, timeout_s: float) -> FirstRecordResult:
    """A new consumer in a new group subscribes to ``topic`` (auto.offset.reset=earliest,
    client defaults otherwise) and polls until the first record arrives or ``timeout_s``
    passes. Connecting to the bootstrap broker (a Metadata request) is done before the clock
    starts; group discovery, join, sync and the first fetch are inside it."""
    from confluent_kafka import Consumer

    result = FirstRecordResult()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
        }
    )
    clock = time.perf_counter
    start = 0.0

    def on_assign(_consumer: Consumer, tps: list[TopicPartition]) -> None:
        if tps and result.assigned_s is None:
            result.assigned_s = clock() - start

    try:
        consumer.list_topics(topic, timeout=10)
        start = clock()
        consumer.subscribe([topic], on_assign=on_assign)
        deadline = start + timeout_s
        while (remaining := deadline - clock()) > 0:
            msg = consumer.poll(min(remaining, 0.5))
            if msg is None:
                continue
            if msg.error() is not None:
                result.errors += 1
                if result.first_error is None:
                    result.first_error = str(msg.error())
                continue
            result.first_record_s = clock() - start
            value = msg.value()
            result.topic, result.partition = msg.topic(), msg.partition()
            result.offset = msg.offset()
            result.value_size = None if value is None else len(value)
            break
    finally:
        consumer.close()
    return result


# -- time lookups ---------------------------------------------------------------------------


@dataclass
class TimeLookupResult:
    """What the time-lookup client saw: each timed lookup's latency, and how many answers were
    the exact record (record ``k`` has timestamp ``t0 + k``, so target ``t0 + k`` is offset k)."""

    latencies_ms: list[float] = field(default_factory=list)
    exact: int = 0
    wrong: list[tuple[int, int]] = field(default_factory=list)  # (expected, answered), first few
    errors: int = 0
    first_error: str | None = None


def produce_timestamped(
    bootstrap: str,
    topic: str,
    messages: int,
    value_size: int,
    codec: str,
    t0_ms: int,
    timeout_s: float,
) -> ProduceResult:
    """Produce ``messages`` values to partition 0 with timestamps ``t0_ms + i``, compressed with
    ``codec`` by librdkafka (its default 1 MB batches). The values cycle through 512 random
    hex strings, so the batches are about as big compressed as not. No retries: a failed
    batch is an error, never a reordering."""
    import random

    from confluent_kafka import Producer

    outcome = {"delivered": 0, "errors": 0}
    first_error: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            outcome["delivered"] += 1
        else:
            outcome["errors"] += 1
            first_error[:] = first_error or [str(err)]

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": codec, "enable.idempotence": False, "retries": 0,
                         "message.timeout.ms": int(timeout_s * 1000), "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=10)
    rng = random.Random(11)
    pool = [rng.randbytes(value_size // 2).hex().encode() for _ in range(512)]
    start = time.perf_counter()
    deadline = start + timeout_s
    attempted = 0
    while attempted < messages and time.perf_counter() < deadline:
        try:
            producer.produce(topic, pool[attempted % 512], partition=0, timestamp=t0_ms + attempted)
        except BufferError:
            producer.poll(0.05)
            continue
        attempted += 1
        if attempted % 1000 == 0:
            producer.poll(0)
    undelivered = producer.flush(max(0.0, deadline - time.perf_counter()))
    return ProduceResult(elapsed_s=time.perf_counter() - start, attempted=attempted,
                         delivered=outcome["delivered"], errors=outcome["errors"],
                         undelivered=undelivered, first_error=first_error[0] if first_error else None)


def time_lookups(bootstrap: str, topic: str, messages: int, t0_ms: int, lookups: int,
                 warmup: int) -> TimeLookupResult:
    """``lookups`` ListOffsets by timestamp (``offsets_for_times``) one after another, each for a
    random record's timestamp, after ``warmup`` untimed ones."""
    import random

    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsetd-bench-lookup"})
    result = TimeLookupResult()
    rng = random.Random(7)
    try:
        consumer.list_topics(topic, timeout=10)
        for i in range(warmup + lookups):
            k = rng.randrange(messages)
            started = time.perf_counter()
            try:
                (answer,) = consumer.offsets_for_times([TopicPartition(topic, 0, t0_ms + k)], timeout=30)
            except KafkaException as exc:
                result.errors += 1
                result.first_error = result.first_error or str(exc)
                continue
            took_ms = (time.perf_counter() - started) * 1000
            if i < warmup:
                continue
            result.latencies_ms.append(took_ms)
            if answer.error is not None:
                result.errors += 1
                result.first_error = result.first_error or str(answer.error)
            elif answer.offset == k:
                result.exact += 1
            elif len(result.wrong) < 5:
                result.wrong.append((k, answer.offset))
    finally:
        consumer.close()
    return result
