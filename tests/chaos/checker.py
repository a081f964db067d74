"""The history checker of the chaos harnesses: what the brokers read back (records, committed
offsets) compared with the history of operations (history.py).

The checks run over the whole history so far: every acknowledged record is read back exactly once
at its acknowledged offset with its payload; nothing is read back that was never sent; each
producer instance's records keep their sequence order within a partition; each group/partition's
committed offset is at least its last acknowledged commit and is exactly what one attempt sent
(offset and metadata)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from history import CLIENT_TIMEOUTS, History, Op, commit_metadata


class Layout(Protocol):
    """Where a run's records and commits go (a ChaosConfig is one)."""

    topic: str
    commit_topic: str
    partitions: int
    commit_metadata_bytes: int


@dataclass
class CheckResult:
    """What one check found, over the whole history so far."""

    label: str
    seconds: float = 0.0
    records_read: int = 0
    commits_read: int = 0
    lost: int = 0                 # acknowledged records not at their offset with their payload
    duplicates: int = 0           # extra copies of a payload
    phantoms: int = 0             # records never sent
    reordered: int = 0            # a producer instance's records out of sequence order in a partition
    failed_visible: int = 0       # records whose produce failed definitively yet are there (informational)
    lost_commits: int = 0         # committed offset read back below the last acknowledged commit
    phantom_commits: int = 0      # committed (offset, metadata) that no commit attempt sent
    failed_commit_visible: int = 0  # read-back commit whose only attempt failed definitively (informational)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # category -> first few cases

    @property
    def violations(self) -> int:
        return self.lost + self.duplicates + self.phantoms + self.reordered + self.lost_commits + self.phantom_commits

    def note(self, category: str, text: str) -> None:
        cases = self.evidence.setdefault(category, [])
        if len(cases) < 6:
            cases.append(f"[{self.label}] {text}")


def _deadline_loop(timeout: float) -> Iterable[float]:
    """Yields the remaining time until `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        yield left


def read_partition(bootstrap: str, topic: str, partition: int, timeout: float = 60.0) -> list[tuple[int, bytes]]:
    """Every record of a partition from its start up to the high watermark (raises if incomplete)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-reader", "enable.auto.commit": False,
                         "check.crcs": True, "auto.offset.reset": "earliest", **CLIENT_TIMEOUTS})
    try:
        tp = TopicPartition(topic, partition)
        high = None
        for _ in _deadline_loop(timeout / 2):
            try:
                low, high = consumer.get_watermark_offsets(tp, timeout=5, cached=False)
                break
            except KafkaException:
                time.sleep(0.2)  # retry pacing after an error answer
        if high is None:
            raise RuntimeError(f"no watermarks for {topic}-{partition}")
        records: list[tuple[int, bytes]] = []
        if high <= low:
            return records
        consumer.assign([TopicPartition(topic, partition, low)])
        for _ in _deadline_loop(timeout):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            records.append((msg.offset(), msg.value() or b""))
            if msg.offset() >= high - 1:
                return records
        raise RuntimeError(f"read {topic}-{partition} up to {records[-1][0] if records else None}, "
                           f"high watermark {high}: timed out")
    finally:
        consumer.close()


def read_committed(bootstrap: str, group: str, topic: str, partitions: int,
                   timeout: float = 60.0) -> dict[int, tuple[int, str | None]]:
    """The committed (offset, metadata) of each partition for `group`; offset < 0 when none."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         **CLIENT_TIMEOUTS})
    try:
        last: Exception | None = None
        for left in _deadline_loop(timeout):
            try:
                tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=min(10, left))
            except KafkaException as exc:
                last = exc
                time.sleep(0.2)
                continue
            if any(tp.error is not None for tp in tps):
                last = RuntimeError(str([tp.error for tp in tps]))
                time.sleep(0.2)
                continue
            return {tp.partition: (tp.offset, tp.metadata) for tp in tps}
        raise RuntimeError(f"committed offsets of {group} not readable: {last}")
    finally:
        consumer.close()


def check(history: History, config: Layout, bootstrap: str, label: str) -> CheckResult:
    """Compare every decided operation so far with what the broker reads back now."""
    began = time.monotonic()
    result = CheckResult(label)
    ops = history.snapshot()
    _check_records(result, [op for op in ops if op.kind == "produce"], config, bootstrap)
    _check_commits(result, [op for op in ops if op.kind == "commit"], config, bootstrap)
    result.seconds = time.monotonic() - began
    return result


def _check_records(result: CheckResult, ops: list[Op], config: Layout, bootstrap: str) -> None:
    sent = {op.value: op for op in ops}
    for partition in range(config.partitions):
        records = read_partition(bootstrap, config.topic, partition)
        result.records_read += len(records)
        at: dict[int, bytes] = {}
        seen: Counter[str] = Counter()
        last_seq: dict[str, tuple[int, int]] = {}  # instance -> (seq, offset) of its latest record
        for offset, raw in records:
            at[offset] = raw
            payload = raw.decode(errors="replace")
            op = sent.get(payload)
            if op is None or op.partition != partition:
                result.phantoms += 1
                result.note("phantom", f"phantom record at {config.topic}-{partition}@{offset}: {raw[:80]!r}"
                            f" (sent to partition {op.partition if op else 'never'})")
                continue
            seen[payload] += 1
            if seen[payload] == 2:
                result.note("duplicate", f"duplicate {payload!r} at {config.topic}-{partition}@{offset}; "
                            f"op: {op.line()}")
            instance, seq = payload.rsplit(":", 1)
            prev = last_seq.get(instance)
            if prev is not None and int(seq) <= prev[0]:
                result.reordered += 1
                result.note("reordered", f"{instance} seq {seq}@{offset} after seq {prev[0]}@{prev[1]} "
                            f"in partition {partition}")
            last_seq[instance] = (int(seq), offset)
            if op.outcome == "failed":
                result.failed_visible += 1
        result.duplicates += sum(n - 1 for n in seen.values() if n > 1)
        for op in ops:
            if op.partition != partition or op.outcome != "ok":
                continue
            found = at.get(op.offset if op.offset is not None else -1)
            if found is None or found.decode(errors="replace") != op.value:
                result.lost += 1
                result.note("lost", f"lost acknowledged record: {op.line()}; read back at offset "
                            f"{op.offset}: {found!r}; payload seen {seen.get(op.value, 0)} time(s)")


def _check_commits(result: CheckResult, ops: list[Op], config: Layout, bootstrap: str) -> None:
    by_key: dict[tuple[str, int], list[Op]] = defaultdict(list)
    for op in ops:
        by_key[(op.group or "", op.partition)].append(op)
    groups = sorted({group for group, _ in by_key})
    for group in groups:
        committed = read_committed(bootstrap, group, config.commit_topic, config.partitions)
        for partition in range(config.partitions):
            attempts = by_key.get((group, partition), [])
            offset, metadata = committed.get(partition, (-1001, None))
            result.commits_read += 1
            acked = [op for op in attempts if op.outcome == "ok"]
            best = max(acked, key=lambda op: int(op.value), default=None)
            where = f"{group}/{config.commit_topic}-{partition}"
            if offset < 0:
                if best is not None:
                    result.lost_commits += 1
                    result.note("lost commit", f"lost commit: nothing committed for {where}; last acknowledged: "
                                f"{best.line()}")
                continue
            sender = next((op for op in attempts
                           if int(op.value) == offset and metadata == commit_metadata(op, config.commit_metadata_bytes)), None)
            if sender is None:
                result.phantom_commits += 1
                result.note("phantom commit", f"phantom commit for {where}: offset {offset} metadata {(metadata or '')[:40]!r} "
                            f"matches no attempt")
            elif sender.outcome == "failed":
                result.failed_commit_visible += 1
            if best is not None and offset < int(best.value):
                result.lost_commits += 1
                result.note("lost commit", f"lost commit for {where}: read back {offset} ({(metadata or '')[:16]}..., sent by "
                            f"{sender.line() if sender else 'nobody'}), last acknowledged: {best.line()}")

