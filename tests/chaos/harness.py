"""Chaos harness: concurrent producers and committers against one real `offsetd serve` process,
faults injected while they run, every client operation logged with its outcome, and a history
checker after each round that compares the log of operations with what the broker reads back.

Operations (one `Op` each, written as a JSON line to `ops.jsonl` when its outcome is known):

* produce: confluent-kafka Producer, acks=all, enable.idempotence=true; payload
  `<instance>:<seq>` unique per producer instance, `seq` increasing; explicit partition.
* commit: confluent-kafka Consumer with a group id, a synchronous commit of increasing offsets
  (one op per partition of the call; metadata names the op, so a read-back value is traced to the
  attempt that sent it). Half the committers are group members (subscribe), half standalone
  (assign, generation -1 commits).

Outcomes: `ok` (acknowledged: produced at an offset / commit accepted), `failed` (an error the
client reports as final; the operation may still have taken effect) and `unknown` (a timeout, a
connection lost in flight, or no answer by the end of the round).

Faults, injected at random moments of a round: `kill` (SIGKILL, restart after a short down
time), `stop` (SIGSTOP for 1-2 s, SIGCONT), `stall` (a burst of 20-150 ms SIGSTOP pauses: an
emulated slow fsync, since real fsync latency needs root-only kernel features or an LD_PRELOAD
shim), `diskfull` (log.dirs on a tmpfs the harness mounts; a filler file takes every free byte
for 1-3 s, giving a few pages back now and then and taking back what the broker left, and is then
deleted). Each round ends with a check of the live broker, then a restart (kill -9 or SIGTERM in
turn; always kill -9 after a full disk) and the same check again.

The checks run over the whole history so far: every acknowledged record is read back exactly once
at its acknowledged offset with its payload; nothing is read back that was never sent; each
producer instance's records keep their sequence order within a partition; each group/partition's
committed offset is at least its last acknowledged commit and is exactly what one attempt sent
(offset and metadata).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from broker_process import BrokerProcess  # noqa: E402
from small_disk import SmallDisk  # noqa: E402

FAULT_KINDS = ("kill", "stop", "stall", "diskfull")

# Client errors after which the operation may or may not have taken effect.
_UNKNOWN_ERRORS = {"_MSG_TIMED_OUT", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "REQUEST_TIMED_OUT", "_TRANSPORT",
                   "_PURGE_INFLIGHT", "NETWORK_EXCEPTION", "_DESTROY", "_FATAL", "_ALL_BROKERS_DOWN"}

_CLIENT_TIMEOUTS = {
    # Longer than the longest pause (stop: 2 s), so no request times out while the broker is only
    # paused and then lands after a newer one sent on a fresh connection.
    "socket.timeout.ms": 8000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 500,
    "topic.metadata.refresh.interval.ms": 2000,
    "log_level": 0,
}


# ----------------------------------------------------------------------------------------------
# The history of operations


@dataclass
class Op:
    """One client operation and its outcome."""

    op: int
    round: int
    kind: str             # "produce" | "commit"
    client: str           # producer instance ("p1.3") or committer ("c2")
    group: str | None     # commits: the group id
    partition: int
    value: str            # produce: the payload; commit: the offset sent
    start: float          # seconds since the harness started
    end: float | None = None
    outcome: str = "pending"  # ok | failed | unknown
    offset: int | None = None  # produce: the acknowledged offset
    error: str | None = None

    def line(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


@dataclass
class FaultEvent:
    """One injected fault (or an unexpected broker exit, kind "crash")."""

    round: int
    kind: str
    start: float
    end: float
    detail: str = ""


class History:
    """All operations and faults of a run; thread-safe; ops go to `ops.jsonl` once decided."""

    def __init__(self, path: Path) -> None:
        self.t0 = time.monotonic()
        self.ops: list[Op] = []
        self.faults: list[FaultEvent] = []
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._next = 0
        self._file = open(path, "a", buffering=1)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)

    def invoke(self, round_no: int, kind: str, client: str, group: str | None, partition: int,
               value: str) -> Op:
        with self._lock:
            self._next += 1
            op = Op(self._next, round_no, kind, client, group, partition, value, self.now())
            self.ops.append(op)
            return op

    def complete(self, op: Op, outcome: str, *, offset: int | None = None, error: str | None = None) -> None:
        """Decide an op; an op already frozen as unknown keeps that outcome (a late answer is noted)."""
        with self._lock:
            if op.outcome != "pending":
                self.notes.append(f"late answer for op {op.op} after round end: {outcome} {offset} {error}")
                return
            op.end, op.outcome, op.offset, op.error = self.now(), outcome, offset, error
            self._file.write(op.line() + "\n")

    def freeze(self, reason: str) -> int:
        """Every op still pending becomes unknown; returns how many."""
        count = 0
        with self._lock:
            for op in self.ops:
                if op.outcome == "pending":
                    op.end, op.outcome, op.error = self.now(), "unknown", reason
                    self._file.write(op.line() + "\n")
                    count += 1
        return count

    def snapshot(self) -> list[Op]:
        """The operations so far (a copy)."""
        with self._lock:
            return list(self.ops)

    def fault(self, event: FaultEvent) -> None:
        with self._lock:
            self.faults.append(event)
            self._file.write(json.dumps({"fault": asdict(event)}) + "\n")

    def close(self) -> None:
        self._file.close()


def _classify(err: KafkaError) -> str:
    return "unknown" if err.name() in _UNKNOWN_ERRORS or err.code() == KafkaError._TIMED_OUT else "failed"


# ----------------------------------------------------------------------------------------------
# The broker and the faults


class ChaosBroker:
    """A BrokerProcess with pause/resume, bounded start, and detection of unexpected exits."""

    def __init__(self, data_dir: Path, log_path: Path, overrides: dict[str, str]) -> None:
        self.proc = BrokerProcess(data_dir, overrides)
        self.proc.log_path = log_path  # outside a tmpfs log.dirs: a full disk must not eat the log
        self.paused = False
        self.start_seconds: list[float] = []  # how long each start took, until "listening"

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None
        return self.proc.proc.pid

    def start(self, timeout: float = 30.0) -> None:
        """Start (same port after the first start); a start that hangs is killed, not waited on."""
        box: dict[str, BaseException] = {}

        def run() -> None:
            try:
                self.proc.start(timeout)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = exc

        began = time.monotonic()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(timeout + 5)
        if thread.is_alive():
            if self.proc.proc is not None:
                self.proc.proc.kill()
            thread.join(10)
            raise RuntimeError(f"broker did not start within {timeout}s: {self.proc.log()[-2000:]}")
        if "error" in box:
            raise box["error"]
        self.paused = False
        self.start_seconds.append(time.monotonic() - began)

    def alive(self) -> bool:
        return self.proc.alive()

    def returncode(self) -> int | None:
        return None if self.proc.proc is None else self.proc.proc.poll()

    def kill9(self) -> None:
        self.proc.kill9()
        self.paused = False

    def stop(self) -> int:
        """SIGTERM, a clean shutdown; falls back to SIGKILL after 20 s."""
        self.resume()
        try:
            return self.proc.stop(20)
        except subprocess.TimeoutExpired:
            self.proc.kill9()
            return -9

    def reap(self) -> None:
        """Collect an exited process so it can be started again."""
        if self.proc.proc is not None and self.proc.proc.poll() is not None:
            self.proc._finish()

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused and self.alive():
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def shutdown(self) -> None:
        """Whatever state it is in: continue it and kill it (used in `finally`)."""
        if self.proc.proc is None:
            return
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.kill9()
        else:
            try:
                self.reap()
            except ValueError:
                pass


# ----------------------------------------------------------------------------------------------
# Configuration


@dataclass
class ChaosConfig:
    """What a run does; the defaults are the bounded form used by `make test`."""

    run_dir: Path
    rounds: int = 3
    round_seconds: float = 6.0
    faults: tuple[str, ...] = ("kill", "stop", "stall")
    faults_per_round: int = 1        # the round's own fault kind, plus this minus one random ones
    recovery_seconds: float = 3.0    # the workload runs at least this long after the last fault
    end_restart: tuple[str, ...] = ("kill9", "term")  # how rounds end, in turn; "none" = no restart
    producers: int = 3
    producer_rate: float = 150.0     # records per second per producer
    committers: int = 4              # alternately group members and standalone
    commit_interval: float = 0.03    # seconds between a committer's commits
    topic: str = "chaos-data"
    commit_topic: str = "chaos-commits"
    partitions: int = 3
    segment_bytes: int = 64 * 1024          # data topic: small segments, frequent rolls and index pages
    offsets_segment_bytes: int = 64 * 1024   # __consumer_offsets: rolls (and compaction) during a run
    index_interval_bytes: int = 0            # an index entry per batch: index files grow page by page
    commit_metadata_bytes: int = 256         # commit metadata padding: commits use up preallocated space
    tmpfs_size: str = "64m"
    diskfull_hold: tuple[float, float] = (1.0, 3.0)
    diskfull_breathe: bool = True            # while full, free a few pages now and then and take them back
    seed: int = 1
    overrides: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = set(self.faults) - set(FAULT_KINDS)
        if unknown or not self.faults:
            raise ValueError(f"faults must be some of {','.join(FAULT_KINDS)}; got {','.join(self.faults)}")


# ----------------------------------------------------------------------------------------------
# Workers


@dataclass
class ClientState:
    """What outlives a round's clients: producer instance numbers, each group's last commit value."""

    instances: Counter[str] = field(default_factory=Counter)
    last_value: dict[str, int] = field(default_factory=dict)


class Worker(threading.Thread):
    """A client thread of one round: runs until `stop` is set, then winds down within its timeouts."""

    def __init__(self, name: str, history: History, round_no: int, bootstrap: str, config: ChaosConfig,
                 state: ClientState, stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.history, self.round_no, self.bootstrap = history, round_no, bootstrap
        self.config, self.state, self.stop_event = config, state, stop
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self.work()
        except BaseException as exc:  # noqa: BLE001 - reported by the round
            self.failure = exc

    def work(self) -> None:
        raise NotImplementedError


class ProducerWorker(Worker):
    """An idempotent producer writing `<instance>:<seq>` round-robin over the partitions."""

    def __init__(self, index: int, *args: Any) -> None:
        super().__init__(f"p{index}", *args)
        self.index = index
        self.fatal = threading.Event()

    def _new_producer(self) -> tuple[Producer, str]:
        self.state.instances[self.name] += 1
        instance = f"{self.name}.{self.state.instances[self.name]}"
        self.fatal.clear()

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                self.history.notes.append(f"{instance}: fatal producer error {err.name()}: {err.str()}")
                self.fatal.set()

        producer = Producer({
            "bootstrap.servers": self.bootstrap, "client.id": instance,
            "acks": "all", "enable.idempotence": True, "linger.ms": 5, "batch.num.messages": 100,
            "message.timeout.ms": 10000, "request.timeout.ms": 8000,
            "queue.buffering.max.messages": 20000, "error_cb": on_error, **_CLIENT_TIMEOUTS})
        return producer, instance

    def work(self) -> None:
        producer, instance = self._new_producer()
        seq = 0
        interval = 1.0 / self.config.producer_rate
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            if self.fatal.is_set():  # a fatal idempotence error: this instance is done, start another
                self._finish(producer, 5.0)
                producer, instance = self._new_producer()
                seq = 0
            partition = seq % self.config.partitions
            op = self.history.invoke(self.round_no, "produce", instance, None, partition, f"{instance}:{seq}")
            try:
                producer.produce(self.config.topic, value=op.value.encode(), partition=partition,
                                 on_delivery=self._report(op))
            except BufferError:
                self.history.complete(op, "failed", error="_QUEUE_FULL")
            except KafkaException as exc:
                self.history.complete(op, _classify(exc.args[0]), error=exc.args[0].name())
            seq += 1
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # pacing, not synchronisation
            else:
                next_at = time.monotonic()
        self._finish(producer, 14.0)

    def _report(self, op: Op) -> Callable[[KafkaError | None, Any], None]:
        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self.history.complete(op, "ok", offset=msg.offset())
            else:
                self.history.complete(op, _classify(err), error=err.name())
        return report

    @staticmethod
    def _finish(producer: Producer, timeout: float) -> None:
        """Flush within `timeout`; what is left is purged (its callbacks say queued or in flight)."""
        if producer.flush(timeout) > 0:
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.flush(2.0)


def commit_metadata(op: Op, config: ChaosConfig) -> str:
    """The metadata a commit attempt sends: its op id, padded to the configured size."""
    return f"op{op.op}:".ljust(config.commit_metadata_bytes, "x")


class CommitWorker(Worker):
    """Synchronous commits of increasing offsets to every partition of the commit topic."""

    def __init__(self, index: int, *args: Any) -> None:
        super().__init__(f"c{index}", *args)
        self.group_mode = index % 2 == 0
        self.group = f"chaos-{'member' if self.group_mode else 'standalone'}-{index}"

    def work(self) -> None:
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": self.name,
            "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "latest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "max.poll.interval.ms": 60000,
            **_CLIENT_TIMEOUTS})
        partitions = list(range(self.config.partitions))
        if self.group_mode:
            consumer.subscribe([self.config.commit_topic])
        else:
            consumer.assign([TopicPartition(self.config.commit_topic, p, 0) for p in partitions])
        value = self.state.last_value.get(self.group, 0)
        try:
            while not self.stop_event.is_set():
                consumer.poll(0.0)
                value += 1
                self.state.last_value[self.group] = value
                self._commit(consumer, partitions, value)
                self.stop_event.wait(self.config.commit_interval)  # pacing
        finally:
            consumer.close()

    def _commit(self, consumer: Consumer, partitions: list[int], value: int) -> None:
        ops = {p: self.history.invoke(self.round_no, "commit", self.name, self.group, p, str(value))
               for p in partitions}
        offsets = [TopicPartition(self.config.commit_topic, p, value, metadata=commit_metadata(ops[p], self.config))
                   for p in partitions]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            for op in ops.values():
                self.history.complete(op, _classify(err), error=err.name())
            return
        answered = set()
        for tp in result or []:
            target = ops.get(tp.partition)
            if target is None:
                continue
            answered.add(tp.partition)
            if tp.error is None:
                self.history.complete(target, "ok")
            else:
                self.history.complete(target, _classify(tp.error), error=tp.error.name())
        for p in set(partitions) - answered:
            self.history.complete(ops[p], "unknown", error="no per-partition result")


# ----------------------------------------------------------------------------------------------
# Reading back and checking


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
                         "check.crcs": True, "auto.offset.reset": "earliest", **_CLIENT_TIMEOUTS})
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
                         **_CLIENT_TIMEOUTS})
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


def check(history: History, config: ChaosConfig, bootstrap: str, label: str) -> CheckResult:
    """Compare every decided operation so far with what the broker reads back now."""
    began = time.monotonic()
    result = CheckResult(label)
    ops = history.snapshot()
    _check_records(result, [op for op in ops if op.kind == "produce"], config, bootstrap)
    _check_commits(result, [op for op in ops if op.kind == "commit"], config, bootstrap)
    result.seconds = time.monotonic() - began
    return result


def _check_records(result: CheckResult, ops: list[Op], config: ChaosConfig, bootstrap: str) -> None:
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


def _check_commits(result: CheckResult, ops: list[Op], config: ChaosConfig, bootstrap: str) -> None:
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
                           if int(op.value) == offset and metadata == commit_metadata(op, config)), None)
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


# ----------------------------------------------------------------------------------------------
# Rounds


@dataclass
class RoundReport:
    """One round: its faults, its operations' outcomes, and its checks."""

    round: int
    faults: list[str]
    seconds: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)  # "produce ok", "commit unknown", ...
    errors: Counter[str] = field(default_factory=Counter)
    checks: list[CheckResult] = field(default_factory=list)
    incidents: list[str] = field(default_factory=list)


class Harness:
    """Runs rounds of workload + faults against one broker and checks the history after each."""

    def __init__(self, config: ChaosConfig, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.log = log
        self.rng = random.Random(config.seed)
        config.run_dir.mkdir(parents=True, exist_ok=True)
        self.history = History(config.run_dir / "ops.jsonl")
        self.tmpfs: SmallDisk | None = None
        self.broker: ChaosBroker | None = None
        self.rounds: list[RoundReport] = []
        self.clients = ClientState()
        self.started = time.monotonic()

    # -- set-up and tear-down ------------------------------------------------------------------

    def __enter__(self) -> "Harness":
        try:
            self._setup()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _setup(self) -> None:
        cfg = self.config
        if "diskfull" in cfg.faults:
            self.tmpfs = SmallDisk(cfg.run_dir / "mnt", cfg.tmpfs_size)
            self.tmpfs.mount()
            data_dir = self.tmpfs.path / "data"
        else:
            data_dir = cfg.run_dir / "data"
        overrides = {"group.initial.rebalance.delay.ms": "0",
                     "offsets.topic.segment.bytes": str(cfg.offsets_segment_bytes),
                     "log.index.interval.bytes": str(cfg.index_interval_bytes),
                     **cfg.overrides}
        self.broker = ChaosBroker(data_dir, cfg.run_dir / "broker.log", overrides)
        self.broker.start()
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap, **_CLIENT_TIMEOUTS})
        futures = admin.create_topics([
            NewTopic(cfg.topic, cfg.partitions, 1, config={"segment.bytes": str(cfg.segment_bytes)}),
            NewTopic(cfg.commit_topic, cfg.partitions, 1)], operation_timeout=10)
        for future in futures.values():
            future.result(20)

    def close(self) -> None:
        try:
            if self.broker is not None:
                self.broker.shutdown()
        finally:
            try:
                if self.tmpfs is not None:
                    self.tmpfs.free()
                    self.tmpfs.unmount()
            finally:
                self.history.close()

    # -- a round ---------------------------------------------------------------------------------

    def plan(self, round_no: int) -> list[str]:
        """The round's faults: its own kind in turn, plus random extra ones."""
        kinds = self.config.faults
        plan = [kinds[round_no % len(kinds)]]
        plan += [self.rng.choice(kinds) for _ in range(self.config.faults_per_round - 1)]
        return plan

    def run_round(self, round_no: int, faults: list[str] | None = None) -> RoundReport:
        cfg, broker = self.config, self.broker
        assert broker is not None
        faults = faults if faults is not None else self.plan(round_no)
        report = RoundReport(round_no, faults)
        began = time.monotonic()
        first_op = len(self.history.ops)
        stop = threading.Event()
        workers: list[Worker] = [ProducerWorker(i, self.history, round_no, broker.bootstrap, cfg, self.clients, stop)
                                 for i in range(cfg.producers)]
        workers += [CommitWorker(i, self.history, round_no, broker.bootstrap, cfg, self.clients, stop) for i in range(cfg.committers)]
        for worker in workers:
            worker.start()
        # Faults at random moments of the round's middle, in time order.
        span = cfg.round_seconds
        moments = sorted(self.rng.uniform(0.15 * span, 0.7 * span) for _ in faults)
        for kind, moment in zip(faults, moments):
            wait = began + moment - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # pacing the fault injection
            self.inject(round_no, kind, report)
        # The workload runs on to the round's end, and at least `recovery_seconds` past the last
        # fault: the broker must serve again after each one.
        time.sleep(max(began + span - time.monotonic(), cfg.recovery_seconds))
        self._ensure_running(round_no, report)
        stop.set()
        for worker in workers:
            worker.join(max(0.1, began + span + 30 - time.monotonic()))
            if worker.is_alive():
                report.incidents.append(f"worker {worker.name} still running 30 s after the round ended")
            if worker.failure is not None:
                report.incidents.append(f"worker {worker.name} raised {worker.failure!r}")
        frozen = self.history.freeze("no answer by the end of the round")
        if frozen:
            report.incidents.append(f"{frozen} operation(s) unanswered at the round's end: unknown")
        for op in self.history.ops[first_op:]:
            report.outcomes[f"{op.kind} {op.outcome}"] += 1
            if op.error:
                report.errors[f"{op.kind} {op.error}"] += 1
        self._ensure_running(round_no, report)
        self._check_recovery(round_no, first_op, report)
        report.checks.append(self._check(f"r{round_no} live"))
        ending = "kill9" if "diskfull" in faults else cfg.end_restart[round_no % len(cfg.end_restart)]
        if ending != "none":
            t = self.history.now()
            if ending == "kill9":
                broker.kill9()
            else:
                rc = broker.stop()
                if rc != 0:
                    report.incidents.append(f"clean stop exited with rc={rc}")
            broker.start()
            self.history.fault(FaultEvent(round_no, f"end-{ending}", t, self.history.now(),
                                          f"started in {broker.start_seconds[-1]:.2f}s"))
            report.checks.append(self._check(f"r{round_no} after {ending} restart"))
        report.seconds = time.monotonic() - began
        self.rounds.append(report)
        return report

    def _check_recovery(self, round_no: int, first_op: int, report: RoundReport) -> None:
        """After each fault of the round the broker must serve again: some produce and some commit
        started after the fault ended was acknowledged."""
        ops = self.history.ops[first_op:]
        for fault in (f for f in self.history.faults if f.round == round_no and f.kind in FAULT_KINDS):
            for kind in ("produce", "commit"):
                if not any(op.kind == kind and op.outcome == "ok" and op.start >= fault.end for op in ops):
                    report.incidents.append(f"no {kind} started after the {fault.kind} fault (ended at "
                                            f"{fault.end:.2f}s) was acknowledged in this round")

    def _check(self, label: str) -> CheckResult:
        assert self.broker is not None
        return check(self.history, self.config, self.broker.bootstrap, label)

    def _ensure_running(self, round_no: int, report: RoundReport) -> None:
        """A broker that exited on its own is a finding: record it and start it again."""
        assert self.broker is not None
        if self.broker.alive():
            return
        rc = self.broker.returncode()
        self.broker.reap()
        tail = self.broker.proc.log()[-1500:]
        report.incidents.append(f"broker exited unexpectedly (rc={rc}); log tail:\n{tail}")
        t = self.history.now()
        self.broker.start()
        self.history.fault(FaultEvent(round_no, "crash", t, self.history.now(), f"rc={rc}"))

    # -- faults ----------------------------------------------------------------------------------

    def inject(self, round_no: int, kind: str, report: RoundReport) -> None:
        broker = self.broker
        assert broker is not None
        self._ensure_running(round_no, report)
        t = self.history.now()
        detail = ""
        if kind == "kill":
            began = time.monotonic()
            broker.kill9()
            killed = time.monotonic() - began
            down = self.rng.uniform(0.2, 1.0)
            time.sleep(down)  # the broker stays down for a moment
            broker.start()
            detail = f"killed in {killed:.2f}s, down {down:.2f}s, started in {broker.start_seconds[-1]:.2f}s"
        elif kind == "stop":
            pause = self.rng.uniform(1.0, 2.0)
            broker.pause()
            try:
                time.sleep(pause)
            finally:
                broker.resume()
            detail = f"paused {pause:.2f}s"
        elif kind == "stall":
            pauses = [self.rng.uniform(0.02, 0.15) for _ in range(self.rng.randint(8, 20))]
            for pause in pauses:
                broker.pause()
                try:
                    time.sleep(pause)
                finally:
                    broker.resume()
                time.sleep(self.rng.uniform(0.01, 0.08))
            detail = f"{len(pauses)} pauses, {sum(pauses):.2f}s stopped"
        elif kind == "diskfull":
            assert self.tmpfs is not None
            hold = self.rng.uniform(*self.config.diskfull_hold)
            used, total = self.tmpfs.usage()
            if used > 0.8 * total:
                report.incidents.append(f"the tmpfs holds {used >> 20} of {total >> 20} MiB of broker data before "
                                        "the diskfull fault: give it more room (--tmpfs-size)")
            filled = self.tmpfs.fill()
            breaths = 0
            try:
                # The disk hovers at full: now and then a few pages come free (as when something
                # else deletes a file) and the filler takes back what the broker did not, so
                # some writes of a batch find room and the next ones (its index entries) do not.
                end = time.monotonic() + hold
                while time.monotonic() < end:
                    time.sleep(self.rng.uniform(0.02, 0.1))  # pacing the fault
                    if self.config.diskfull_breathe:
                        self.tmpfs.breathe(4096 * self.rng.randint(1, 8))
                        time.sleep(self.rng.uniform(0.005, 0.03))
                        self.tmpfs.fill()
                        breaths += 1
            finally:
                self.tmpfs.free()
            used, total = self.tmpfs.usage()
            detail = (f"filler {filled >> 10} KiB, held {hold:.2f}s, {breaths} pages freed and refilled; "
                      f"after: {used >> 20}/{total >> 20} MiB used")
        else:
            raise ValueError(kind)
        self.history.fault(FaultEvent(round_no, kind, t, self.history.now(), detail))
        self.log(f"  fault {kind} at {t:.2f}s: {detail}")
        self._ensure_running(round_no, report)

    # -- the whole run ---------------------------------------------------------------------------

    def run(self) -> "Summary":
        for round_no in range(self.config.rounds):
            report = self.run_round(round_no)
            self.log(format_round(report))
        return self.summary()

    def summary(self) -> "Summary":
        return Summary.of(self)


# ----------------------------------------------------------------------------------------------
# Reporting


@dataclass
class Summary:
    """Totals of a run (counts over all rounds; lost/duplicates are the worst check's)."""

    rounds: int
    wall_seconds: float
    operations: Counter[str]
    faults: Counter[str]
    errors: Counter[str]
    checks: int
    lost: int
    duplicates: int
    phantoms: int
    reordered: int
    lost_commits: int
    phantom_commits: int
    failed_visible: int
    failed_commit_visible: int
    incidents: list[str]
    notes: list[str]
    evidence: dict[str, list[str]]
    seed: int
    fault_kinds: tuple[str, ...]
    start_seconds: list[float]

    @classmethod
    def of(cls, harness: Harness) -> "Summary":
        checks = [c for r in harness.rounds for c in r.checks]
        worst = lambda attr: max((getattr(c, attr) for c in checks), default=0)  # noqa: E731
        operations: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for r in harness.rounds:
            operations.update(r.outcomes)
            errors.update(r.errors)
        faults = Counter(f.kind for f in harness.history.faults)
        return cls(rounds=len(harness.rounds), wall_seconds=time.monotonic() - harness.started,
                   operations=operations, faults=faults, errors=errors, checks=len(checks),
                   lost=worst("lost"), duplicates=worst("duplicates"), phantoms=worst("phantoms"),
                   reordered=worst("reordered"), lost_commits=worst("lost_commits"),
                   phantom_commits=worst("phantom_commits"), failed_visible=worst("failed_visible"),
                   failed_commit_visible=worst("failed_commit_visible"),
                   incidents=[f"round {r.round}: {i}" for r in harness.rounds for i in r.incidents],
                   notes=list(harness.history.notes[:20]),
                   evidence=_first_cases(checks),
                   seed=harness.config.seed, fault_kinds=harness.config.faults,
                   start_seconds=list(harness.broker.start_seconds) if harness.broker else [])

    @property
    def violations(self) -> int:
        return (self.lost + self.duplicates + self.phantoms + self.reordered + self.lost_commits
                + self.phantom_commits)

    def count(self, outcome: str, kind: str | None = None) -> int:
        return sum(n for key, n in self.operations.items()
                   if key.endswith(" " + outcome) and (kind is None or key.startswith(kind + " ")))

    def as_json(self) -> dict[str, Any]:
        """The summary as JSON-able data (Counters as plain dicts)."""
        return {name: dict(value) if isinstance(value, Counter) else value
                for name, value in vars(self).items()} | {"violations": self.violations}

    def table(self) -> str:
        """A Markdown table of the run, ready to paste."""
        total = sum(self.operations.values())
        rows = [
            ("fault kinds selected", ",".join(self.fault_kinds)),
            ("rounds / checks", f"{self.rounds} / {self.checks}"),
            ("wall time", f"{self.wall_seconds:.0f} s"),
            ("operations (produce / commit)",
             f"{total} ({sum(n for k, n in self.operations.items() if k.startswith('produce'))} / "
             f"{sum(n for k, n in self.operations.items() if k.startswith('commit'))})"),
            ("faults injected during rounds",
             ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items()) if not k.startswith("end-")) or "none"),
            ("restarts at round ends (kill -9 / SIGTERM)",
             f"{self.faults.get('end-kill9', 0)} / {self.faults.get('end-term', 0)}"),
            ("acknowledged (produce / commit)", f"{self.count('ok')} ({self.count('ok', 'produce')} / "
                                                f"{self.count('ok', 'commit')})"),
            ("failed (produce / commit)", f"{self.count('failed')} ({self.count('failed', 'produce')} / "
                                          f"{self.count('failed', 'commit')})"),
            ("unknown (produce / commit)", f"{self.count('unknown')} ({self.count('unknown', 'produce')} / "
                                           f"{self.count('unknown', 'commit')})"),
            ("lost acknowledged records", str(self.lost)),
            ("lost acknowledged commits", str(self.lost_commits)),
            ("duplicates", str(self.duplicates)),
            ("never-sent records / commits read back", f"{self.phantoms} / {self.phantom_commits}"),
            ("order violations", str(self.reordered)),
            ("failed yet visible (records / commits; allowed)", f"{self.failed_visible} / {self.failed_commit_visible}"),
            ("broker start to listening (median / max)", _median_max(self.start_seconds)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"| {'metric':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
        lines += [f"| {k:<{width}} | {v} |" for k, v in rows]
        return "\n".join(lines)

    def text(self) -> str:
        parts = [self.table()]
        if self.errors:
            parts.append("errors seen by clients: " + ", ".join(f"{k} x{n}" for k, n in self.errors.most_common()))
        if self.incidents:
            parts.append("incidents:\n" + "\n".join(f"  - {i}" for i in self.incidents))
        if self.notes:
            parts.append("notes:\n" + "\n".join(f"  - {n}" for n in self.notes))
        for category, cases in self.evidence.items():
            parts.append(f"evidence, {category}:\n" + "\n".join(f"  - {e}" for e in cases))
        parts.append(f"seed {self.seed}; verdict: {'PASS' if self.violations == 0 else 'FAIL'}")
        return "\n\n".join(parts)


def _median_max(values: list[float]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.2f} s / {ordered[-1]:.2f} s"


def _first_cases(checks: list[CheckResult], per_category: int = 6) -> dict[str, list[str]]:
    """The first cases of each category of violation, in check order."""
    found: dict[str, list[str]] = {}
    for c in checks:
        for category, cases in c.evidence.items():
            room = per_category - len(found.setdefault(category, []))
            found[category] += cases[:max(0, room)]
    return found


def format_round(report: RoundReport) -> str:
    """One line per round plus one per check."""
    outcomes = " ".join(f"{k}={n}" for k, n in sorted(report.outcomes.items()))
    lines = [f"round {report.round} [{','.join(report.faults)}] {report.seconds:.1f}s: {outcomes}"]
    for c in report.checks:
        lines.append(f"  check {c.label} ({c.seconds:.1f}s): read {c.records_read} records / {c.commits_read} commits; "
                     f"lost={c.lost} dup={c.duplicates} phantom={c.phantoms} reordered={c.reordered} "
                     f"lost_commits={c.lost_commits} phantom_commits={c.phantom_commits}")
    lines += [f"  ! {i}" for i in report.incidents]
    return "\n".join(lines)
