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

The checks (checker.py) run over the whole history so far.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from broker_process import BrokerProcess  # noqa: E402
from checker import CheckResult, check  # noqa: E402
from history import CLIENT_TIMEOUTS, FaultEvent, History, Op, classify, commit_metadata  # noqa: E402
from report import Summary, format_round  # noqa: E402
from small_disk import SmallDisk  # noqa: E402

FAULT_KINDS = ("kill", "stop", "stall", "diskfull")


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
            "queue.buffering.max.messages": 20000, "error_cb": on_error, **CLIENT_TIMEOUTS})
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
                self.history.complete(op, classify(exc.args[0]), error=exc.args[0].name())
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
                self.history.complete(op, classify(err), error=err.name())
        return report

    @staticmethod
    def _finish(producer: Producer, timeout: float) -> None:
        """Flush within `timeout`; what is left is purged (its callbacks say queued or in flight)."""
        if producer.flush(timeout) > 0:
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            producer.flush(2.0)



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
            **CLIENT_TIMEOUTS})
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
        ops = {p: self.history.invoke(self.round_no, "commit", self.name, self.group, p, str(value),
                                      self.config.commit_topic) for p in partitions}
        offsets = [TopicPartition(self.config.commit_topic, p, value, metadata=commit_metadata(ops[p], self.config.commit_metadata_bytes))
                   for p in partitions]
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            for op in ops.values():
                self.history.complete(op, classify(err), error=err.name())
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
                self.history.complete(target, classify(tp.error), error=tp.error.name())
        for p in set(partitions) - answered:
            self.history.complete(ops[p], "unknown", error="no per-partition result")


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
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap, **CLIENT_TIMEOUTS})
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
