"""Client loops of the cluster benchmark (bench/cluster.py), run in spawned child processes
(bench/procs.py). Like application code they block in the client's calls (a synchronous
commit waits for its answer; an error is retried after a short back-off), and never spin.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.clients import _commit_consumer, commit_round, record_read_back

if TYPE_CHECKING:
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Barrier, Event

#: Pause after a failed commit before the next try (an application's retry back-off).
RETRY_BACKOFF_S = 0.005


@dataclass
class GroupCommitResult:
    """What the group threads of one process saw (``time.monotonic()`` readings)."""

    started: float = 0.0
    finished: float = 0.0
    acked: int = 0
    errors: int = 0
    first_error: str | None = None
    #: Groups whose read-back did not return their last acknowledged commit.
    wrong_read_back: list[str] = field(default_factory=list)


@dataclass
class _Tally:
    """One group thread's counts (commit_round fills errors, first_error and last_sent)."""

    errors: int = 0
    first_error: str | None = None
    last_sent: list[int] = field(default_factory=list)
    read_back: list[int] = field(default_factory=list)
    read_back_error: str | None = None
    acked: int = 0


def group_committers(bootstrap: str, topic: str, partitions: int, groups: list[str], duration_s: float,
                     timeout_s: float, barrier: Barrier) -> GroupCommitResult:
    """One thread per group, each a standalone consumer committing ``partitions`` offsets
    synchronously in a loop (one commit in flight per group, as an application committing
    after each poll), for ``duration_s`` after every process passed ``barrier``; then each
    group's offsets are read back."""
    tallies = [_Tally() for _ in groups]
    consumers = [_commit_consumer(bootstrap, group) for group in groups]
    warm = threading.Barrier(len(groups) + 1)  # every group found its coordinator
    go = threading.Event()
    window: list[float] = []

    def run(index: int) -> None:
        commit, tally = consumers[index].commit, tallies[index]
        n = 1
        while commit_round(commit, topic, partitions, n, tally) is None and time.monotonic() < deadline:
            time.sleep(RETRY_BACKOFF_S)  # warm-up: find the coordinator
        warm.wait(timeout_s)
        go.wait(timeout_s)
        tally.errors, tally.first_error = 0, None
        end = window[1]
        while time.monotonic() < end:
            n += 1
            if commit_round(commit, topic, partitions, n, tally) is None:
                time.sleep(RETRY_BACKOFF_S)
            else:
                tally.acked += 1
        record_read_back(tally, consumers[index], topic, partitions)

    deadline = time.monotonic() + timeout_s
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(groups))]
    for thread in threads:
        thread.start()
    try:
        warm.wait(timeout_s)
        barrier.wait(timeout_s)  # every process' groups warmed up: the timed sections overlap
        now = time.monotonic()
        window[:] = [now, now + duration_s]
        go.set()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        result = GroupCommitResult(started=window[0], finished=time.monotonic())
        for group, tally in zip(groups, tallies):
            result.acked += tally.acked
            result.errors += tally.errors
            result.first_error = result.first_error or tally.first_error or tally.read_back_error
            if tally.read_back != tally.last_sent:
                result.wrong_read_back.append(group)
    finally:
        for consumer in consumers:
            consumer.close()
    return result


@dataclass
class FailoverResult:
    """One committing client across the loss of its group's coordinator (monotonic times)."""

    #: Acknowledgement time of the first commit sent at or after the kill (None: none).
    first_ack_after_kill: float | None = None
    #: The longest time between two acknowledged commits, the later one after the kill: how
    #: long the group could not commit (the old owner may still answer after a SIGTERM).
    longest_gap_s: float = 0.0
    acked: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    last_acked: list[int] = field(default_factory=list)
    read_back: list[int] = field(default_factory=list)
    read_back_error: str | None = None


def commit_through_failover(bootstrap: str, topic: str, partitions: int, group: str, ready: Event,
                            kill_at: Synchronized[float], after_s: float, timeout_s: float) -> FailoverResult:
    """Commit synchronously in a loop; set ``ready`` after the first success; once the harness
    has written the kill time into ``kill_at``, stop ``after_s`` after the first commit sent
    since then has been acknowledged (or at ``timeout_s``). Every acknowledged commit must
    survive: the read-back at the end must return the last one."""
    result = FailoverResult()
    tally = _Tally()
    consumer = _commit_consumer(bootstrap, group)
    commit = consumer.commit
    deadline = time.monotonic() + timeout_s
    stop_at = deadline
    n = 0
    previous_ack = 0.0
    try:
        while time.monotonic() < min(deadline, stop_at):
            n += 1
            sent = time.monotonic()
            offsets = commit_round(commit, topic, partitions, n, tally)
            acked = time.monotonic()
            if offsets is None:
                result.errors += 1
                kind = (tally.first_error or "?").split(":")[0][:80]
                result.error_kinds[kind] = result.error_kinds.get(kind, 0) + 1
                tally.first_error = None
                time.sleep(RETRY_BACKOFF_S)
                continue
            result.acked += 1
            result.last_acked = [o.offset for o in offsets]
            ready.set()
            killed = kill_at.value
            if killed and acked >= killed and previous_ack:
                result.longest_gap_s = max(result.longest_gap_s, acked - previous_ack)
            previous_ack = acked
            if killed and sent >= killed and result.first_ack_after_kill is None:
                result.first_ack_after_kill = acked
                stop_at = acked + after_s
        record_read_back(result, consumer, topic, partitions)
    finally:
        consumer.close()
    return result


def load_shard(bootstrap: str, topic: str, partitions: int, groups: list[str], rounds: int,
               in_flight: int, timeout_s: float) -> tuple[int, str | None]:
    """Commit ``partitions`` offsets of ``topic`` for every group, ``rounds`` times (round r
    stores r * 1000 + p), ``in_flight`` groups at a time through AdminClient's
    AlterConsumerGroupOffsets (an OffsetCommit each); returns (records written, first error)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    written, first_error = 0, None
    deadline = time.monotonic() + timeout_s
    for r in range(1, rounds + 1):
        offsets = [TopicPartition(topic, p, r * 1000 + p) for p in range(partitions)]
        for start in range(0, len(groups), in_flight):
            requests = [ConsumerGroupTopicPartitions(g, offsets) for g in groups[start:start + in_flight]]
            futures: dict[str, Any] = {}
            for request in requests:  # one group per call (the client's rule)
                futures.update(admin.alter_consumer_group_offsets([request], request_timeout=30))
            for future in futures.values():
                try:
                    answer = future.result(timeout=max(1.0, deadline - time.monotonic()))
                except Exception as exc:
                    first_error = first_error or f"{type(exc).__name__}: {exc}"
                    continue
                bad = [tp for tp in answer.topic_partitions if tp.error is not None]
                if bad:
                    first_error = first_error or str(bad[0].error)
                written += len(answer.topic_partitions) - len(bad)
    return written, first_error
