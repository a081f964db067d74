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

from batch_reader import producers_by_offset
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
    backwards_commits: int = 0    # an acknowledged commit below one acknowledged before it was sent
    txn_records_read: int = 0     # records of the output topic a read_committed consumer saw
    aborted_visible: int = 0      # aborted transactions of which read_committed shows a record
    partial_txns: int = 0         # transactions of which read_committed shows some records, not all (or one twice)
    lost_txns: int = 0            # committed transactions of which read_committed shows nothing
    eos_duplicates: int = 0       # input records transformed by more than one committed transaction
    eos_lost: int = 0             # inputs below the committed position that no committed transaction transformed
    aborted_in_log: int = 0       # records of aborted transactions in the log (read_uncommitted; informational)
    epoch_resends: int = 0        # copies re-sent by an idempotent producer under a bumped epoch (informational)
    evidence: dict[str, list[str]] = field(default_factory=dict)  # category -> first few cases

    @property
    def violations(self) -> int:
        return (self.lost + self.duplicates + self.phantoms + self.reordered + self.lost_commits + self.phantom_commits
                + self.backwards_commits + self.aborted_visible + self.partial_txns + self.lost_txns
                + self.eos_duplicates + self.eos_lost)

    def note(self, category: str, text: str) -> None:
        cases = self.evidence.setdefault(category, [])
        if len(cases) < 6:
            cases.append(f"[{self.label}] {text}")


def _deadline_loop(timeout: float) -> Iterable[float]:
    """Yields the remaining time until `timeout` has passed."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        yield left


def read_partition(bootstrap: str, topic: str, partition: int, timeout: float = 60.0,
                   committed: bool = False) -> list[tuple[int, bytes]]:
    """Every record of a partition from its start up to the high watermark (raises if incomplete);
    with `committed`, what a read_committed consumer sees once it has reached the high watermark
    (so every transaction in the partition must be decided by then)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-reader", "enable.auto.commit": False,
                         "check.crcs": True, "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed else "read_uncommitted", **CLIENT_TIMEOUTS})
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
        reached = low
        for _ in _deadline_loop(timeout):
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(msg.error())
                # at the end of what it may read: past the last record, control records (transaction
                # markers) included; short of the high watermark while a transaction is open
                reached = max(msg.offset() or 0, consumer.position([tp])[0].offset)
                if reached >= high:
                    return records
                continue
            records.append((msg.offset(), msg.value() or b""))
            if msg.offset() >= high - 1:
                return records
        raise RuntimeError(f"read {topic}-{partition} up to {records[-1][0] if records else None} (end reached at "
                           f"{reached}), high watermark {high}: timed out{' (a transaction left open?)' if committed else ''}")
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
    records = {p: read_partition(bootstrap, config.topic, p) for p in range(config.partitions)}
    produced = [op for op in ops if op.kind == "produce"]
    for partition, read in records.items():
        producers = producers_by_offset(bootstrap, config.topic, partition, read[-1][0] + 1) if read else {}
        check_records(result, produced, config.topic, partition, read, producers)
    commits = [op for op in ops if op.kind == "commit"]
    committed = {(group, topic): read_committed(bootstrap, group, topic, config.partitions)
                 for group, topic in sorted({(op.group or "", op.topic) for op in commits})}
    check_commits(result, commits, committed, config.commit_metadata_bytes)
    check_commit_order(result, commits)
    txns = [op for op in ops if op.kind == "txn"]
    if txns:
        output = txns[0].topic
        visible = {p: read_partition(bootstrap, output, p, committed=True) for p in range(config.partitions)}
        logged = {p: read_partition(bootstrap, output, p) for p in range(config.partitions)}
        positions = {group: {p: offset for p, (offset, _) in read_committed(bootstrap, group, config.topic,
                                                                              config.partitions).items()}
                     for group in sorted({op.group or "" for op in txns})}
        check_transactions(result, txns, visible, logged)
        check_exactly_once(result, txns, visible, records, positions)
    result.seconds = time.monotonic() - began
    return result


def check_records(result: CheckResult, ops: list[Op], topic: str, partition: int,
                  records: list[tuple[int, bytes]], producers: dict[int, tuple[int, int]] | None = None) -> None:
    """One partition of the data topic (`records`: (offset, value) from its start) against the
    produce operations: acknowledged ones at their offset, none twice, none never sent, in order.
    With `producers` (offset -> producer id and epoch, batch_reader.py), a second copy or a step
    back under a newer epoch of the same producer id is a re-send after librdkafka bumped the
    epoch, which no broker can refuse: counted apart (epoch_resends), not as a violation."""
    sent = {op.value: op for op in ops}
    result.records_read += len(records)
    at: dict[int, bytes] = {}
    first: dict[str, int] = {}  # payload -> offset of its first copy
    last_seq: dict[str, tuple[int, int]] = {}  # instance -> (seq, offset) of its latest record

    def resent(earlier: int, later: int) -> bool:
        """Whether the record at `later` went under another epoch of the producer of `earlier`."""
        if producers is None or earlier not in producers or later not in producers:
            return False
        (pid, epoch), (pid2, epoch2) = producers[earlier], producers[later]
        return pid == pid2 and epoch != epoch2

    for offset, raw in records:
        at[offset] = raw
        payload = raw.decode(errors="replace")
        op = sent.get(payload)
        if op is None or op.partition != partition:
            result.phantoms += 1
            result.note("phantom", f"phantom record at {topic}-{partition}@{offset}: {raw[:80]!r}"
                        f" (sent to partition {op.partition if op else 'never'})")
            continue
        instance, seq = payload.rsplit(":", 1)
        prev = last_seq.get(instance)
        if payload in first:
            if resent(first[payload], offset):
                result.epoch_resends += 1
                result.note("re-sent under a bumped epoch", f"{payload!r} at {topic}-{partition}@{first[payload]} "
                            f"{producers[first[payload]]} and @{offset} {producers[offset]}")  # type: ignore[index]
            else:
                result.duplicates += 1
                result.note("duplicate", f"duplicate {payload!r} at {topic}-{partition}@{offset} (first copy "
                            f"@{first[payload]}{', producer id and epoch ' + str(producers.get(offset)) if producers else ''}"
                            f"); op: {op.line()}")
        else:
            first[payload] = offset
        if prev is not None and int(seq) <= prev[0] and not resent(prev[1], offset):
            result.reordered += 1
            result.note("reordered", f"{instance} seq {seq}@{offset} after seq {prev[0]}@{prev[1]} "
                        f"in partition {partition}")
        last_seq[instance] = (int(seq), offset)
        if op.outcome == "failed":
            result.failed_visible += 1
    for op in ops:
        if op.partition != partition or op.outcome != "ok":
            continue
        found = at.get(op.offset if op.offset is not None else -1)
        if found is None or found.decode(errors="replace") != op.value:
            result.lost += 1
            result.note("lost", f"lost acknowledged record: {op.line()}; read back at offset "
                        f"{op.offset}: {found!r}; payload first seen at {first.get(op.value)}")


Committed = dict[int, tuple[int, "str | None"]]  # partition -> (committed offset, metadata); offset < 0: none


def check_commits(result: CheckResult, ops: list[Op], committed: dict[tuple[str, str], Committed],
                  metadata_bytes: int) -> None:
    """The committed offsets read back, per (group, topic), against the commit operations: at
    least the last acknowledged commit, and exactly what one attempt sent (offset and metadata)."""
    by_key: dict[tuple[str, str, int], list[Op]] = defaultdict(list)
    for op in ops:
        by_key[(op.group or "", op.topic, op.partition)].append(op)
    for (group, topic), read in sorted(committed.items()):
        for partition in sorted(read):
            attempts = by_key.get((group, topic, partition), [])
            offset, metadata = read[partition]
            result.commits_read += 1
            acked = [op for op in attempts if op.outcome == "ok"]
            best = max(acked, key=lambda op: int(op.value), default=None)
            where = f"{group}/{topic}-{partition}"
            if offset < 0:
                if best is not None:
                    result.lost_commits += 1
                    result.note("lost commit", f"lost commit: nothing committed for {where}; last acknowledged: "
                                f"{best.line()}")
                continue
            sender = next((op for op in attempts if int(op.value) == offset and metadata == (
                op.metadata if op.metadata is not None else commit_metadata(op, metadata_bytes))), None)
            if sender is None:
                result.phantom_commits += 1
                result.note("phantom commit", f"phantom commit for {where}: offset {offset} metadata "
                            f"{(metadata or '')[:40]!r} matches no attempt")
            elif sender.outcome == "failed":
                result.failed_commit_visible += 1
            if best is not None and offset < int(best.value):
                result.lost_commits += 1
                result.note("lost commit", f"lost commit for {where}: read back {offset} ({(metadata or '')[:16]}..., "
                            f"sent by {sender.line() if sender else 'nobody'}), last acknowledged: {best.line()}")


def check_commit_order(result: CheckResult, ops: list[Op]) -> None:
    """Committed offsets never move backwards: no acknowledged commit of a group/partition is below
    one acknowledged before it was sent (concurrent attempts may land in either order)."""
    by_key: dict[tuple[str, str, int], list[Op]] = defaultdict(list)
    for op in ops:
        if op.outcome == "ok" and op.end is not None:
            by_key[(op.group or "", op.topic, op.partition)].append(op)
    for (group, topic, partition), acked in sorted(by_key.items()):
        by_end = sorted(acked, key=lambda op: op.end or 0.0)
        highest: Op | None = None  # the highest commit acknowledged before the current op was sent
        i = 0
        for op in sorted(acked, key=lambda op: op.start):
            while i < len(by_end) and (by_end[i].end or 0.0) < op.start:
                if highest is None or int(by_end[i].value) > int(highest.value):
                    highest = by_end[i]
                i += 1
            if highest is not None and int(op.value) < int(highest.value):
                result.backwards_commits += 1
                result.note("backwards commit", f"{group}/{topic}-{partition}: {op.line()} acknowledged after "
                            f"{highest.line()} had been")


def txn_record(label: str, index: int, count: int, source: tuple[int, int]) -> bytes:
    """The value of the `index`th of `count` records of transaction `label`, made from input
    partition/offset `source`."""
    return f"{label}|{index}/{count}|{source[0]}:{source[1]}".encode()


def _parse_txn_record(raw: bytes) -> tuple[str, int, int, tuple[int, int]] | None:
    """(label, index, count, source) of a txn_record value; None for anything else."""
    try:
        label, position, source = raw.decode().split("|")
        index, count = position.split("/")
        partition, offset = source.split(":")
        return label, int(index), int(count), (int(partition), int(offset))
    except ValueError:
        return None


def check_transactions(result: CheckResult, ops: list[Op], visible: dict[int, list[tuple[int, bytes]]],
                       logged: dict[int, list[tuple[int, bytes]]]) -> None:
    """Transactions all or nothing: what a read_committed consumer sees of the output topic
    (`visible`) holds every record of each committed transaction, none of an aborted one, and of
    an undecided one all or none; `logged` (read_uncommitted) counts the aborted records present."""
    by_label = {op.value: op for op in ops}
    seen: dict[str, Counter[int]] = defaultdict(Counter)
    for partition, records in visible.items():
        result.txn_records_read += len(records)
        for offset, raw in records:
            parsed = _parse_txn_record(raw)
            op = by_label.get(parsed[0]) if parsed else None
            if parsed is None or op is None:
                result.phantoms += 1
                result.note("phantom", f"record of no transaction at output-{partition}@{offset}: {raw[:80]!r}")
                continue
            seen[op.value][parsed[1]] += 1
            if op.outcome == "aborted" and sum(seen[op.value].values()) == 1:
                result.aborted_visible += 1
                result.note("aborted visible", f"read_committed shows {raw!r} at output-{partition}@{offset} "
                            f"of aborted transaction {op.line()}")
    for label, op in by_label.items():
        indexes = seen.get(label, Counter())
        if op.outcome == "ok" and not indexes:
            result.lost_txns += 1
            result.note("lost transaction", f"committed transaction shows none of its records: {op.line()}")
        elif indexes and op.outcome != "aborted" and not (
                sorted(indexes) == list(range(op.count or 0)) and max(indexes.values()) == 1):
            result.partial_txns += 1
            result.note("partial transaction", f"{op.line()}: read_committed shows records "
                        f"{sorted(indexes.elements())} of {op.count}")
    for records in logged.values():
        for _, raw in records:
            parsed = _parse_txn_record(raw)
            if parsed and parsed[0] in by_label and by_label[parsed[0]].outcome == "aborted":
                result.aborted_in_log += 1


def check_exactly_once(result: CheckResult, ops: list[Op], visible: dict[int, list[tuple[int, bytes]]],
                       inputs: dict[int, list[tuple[int, bytes]]], positions: dict[str, dict[int, int]]) -> None:
    """Consume-transform-produce exactly once: each input record is transformed by at most one
    committed transaction, and every input below the committed position of the loops' group was
    (the position and the output are committed in the same transaction)."""
    sources: Counter[tuple[int, int]] = Counter()
    for records in visible.values():
        for _, raw in records:
            parsed = _parse_txn_record(raw)
            if parsed is not None:
                sources[parsed[3]] += 1
    for source, times in sorted(sources.items()):
        if times > 1:
            result.eos_duplicates += times - 1
            result.note("transformed twice", f"input {source[0]}:{source[1]} in {times} committed transactions")
    for group, committed in positions.items():
        for partition, position in sorted(committed.items()):
            missing = [offset for offset, _ in inputs.get(partition, []) if offset < position
                       and (partition, offset) not in sources]
            if missing:
                result.eos_lost += len(missing)
                result.note("input skipped", f"{group}: committed position {position} of input partition {partition} "
                            f"passes {len(missing)} input(s) no committed transaction transformed, e.g. {missing[:5]}")
