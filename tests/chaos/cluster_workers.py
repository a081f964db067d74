"""The cluster chaos run's own client threads (beside harness.py's idempotent producers and
committers): members of consumer groups, classic and KIP-848, committing what they consumed
synchronously, and the drivers of consume-transform-produce loops (txn_loop.py, subprocesses)
committing output and positions in one transaction. Every commit and every transaction is an `Op`
of the history."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster_config import ClusterChaosConfig
from confluent_kafka import Consumer, KafkaException, TopicPartition
from harness import Worker
from history import CLIENT_TIMEOUTS, Op, classify, commit_metadata

from offsetd.dev.broker import LineReader

LOOP = Path(__file__).resolve().parent / "txn_loop.py"


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
        if self.config.client_debug:
            conf.update({"debug": self.config.client_debug, "log_level": 7, "logger": self._client_logger()})
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

    def _client_logger(self) -> logging.Logger:
        """librdkafka's log lines of this member, to client-<name>.log in the run directory."""
        logger = logging.getLogger(f"chaos.client.{self.name}")
        handler = logging.FileHandler(self.config.run_dir / f"client-{self.name}.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        return logger

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
    """A consume-transform-produce loop (txn_loop.py) in a subprocess, its events mirrored into the
    history: a transaction per `begin` line, decided by its `end` line. A loop silent for
    `HANG_SECONDS` inside a transaction is killed (-9) and started again, the transaction unknown
    (librdkafka's send_offsets_to_transaction() can block for good while the group coordinator
    is down: confluentinc/librdkafka#5456); its successor's producer fences it."""

    config: ClusterChaosConfig
    HANG_SECONDS = 40.0  # silent this long inside a transaction: hung (a kill is a client crash EOS must survive)
    STOP_SECONDS = 40.0  # how long a loop asked to stop may take to finish its transaction

    def __init__(self, index: int, *args: Any) -> None:
        super().__init__(f"t{index}", *args)
        self.index = index
        self.processes = 0
        self.log_path = self.config.run_dir / f"txn-loop-{self.name}.log"  # the loops' stderr

    def command(self, *extra: str) -> list[str]:
        cfg = self.config
        return [sys.executable, str(LOOP), "--bootstrap", self.bootstrap, "--input", cfg.topic,
                "--output", cfg.output_topic, "--group", cfg.eos_group, "--txn-id", f"chaos-txn-{self.index}",
                "--label", f"{self.name}.{self.processes}", "--seed", str(cfg.seed * 1000 + self.index * 100 + self.processes),
                "--records", str(cfg.txn_records), "--abort-ratio", str(cfg.txn_abort_ratio), *extra]

    def work(self) -> None:
        while not self.stop_event.is_set():
            self.processes += 1
            self._run_loop()
            self.stop_event.wait(0.5)  # pacing before a new loop
        # A last init fences whichever producer a killed loop left and decides its transaction,
        # so the output topic's last stable offset reaches its end for the read-back.
        with open(self.log_path, "a") as log:
            try:
                subprocess.run(self.command("--fence-only"), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=log, timeout=60, check=True)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                self.history.notes.append(f"{self.name}: the last fencing init_transactions failed: {exc}")

    def _run_loop(self) -> None:
        with open(self.log_path, "a") as log:
            proc = subprocess.Popen(self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        assert proc.stdin is not None and proc.stdout is not None
        reader = LineReader(proc.stdout)
        pending: Op | None = None
        heard = time.monotonic()
        stop_by: float | None = None
        try:
            while True:
                if self.stop_event.is_set() and stop_by is None:
                    proc.stdin.write(b"stop\n")
                    proc.stdin.flush()
                    stop_by = time.monotonic() + self.STOP_SECONDS
                line = reader.readline(time.monotonic() + 0.5)
                now = time.monotonic()
                if line is None:
                    if reader.eof:
                        return
                    if pending is not None and now - heard > self.HANG_SECONDS:
                        self._kill(proc, f"silent {now - heard:.0f}s in transaction {pending.value}")
                        return
                    if stop_by is not None and now > stop_by:
                        self._kill(proc, f"still running {self.STOP_SECONDS:.0f}s after it was asked to stop")
                        return
                    continue
                heard = now
                event = json.loads(line)
                if "begin" in event:
                    pending = self.history.invoke(self.round_no, "txn", self.name, self.config.eos_group, -1,
                                                  event["begin"], self.config.output_topic)
                    pending.count = event["count"]
                elif "end" in event and pending is not None and pending.value == event["end"]:
                    self.history.complete(pending, event["outcome"], error=event["error"])
                    pending = None
                elif "note" in event:
                    self.history.notes.append(f"{self.name}: {event['note']}")
        finally:
            if proc.poll() is None:
                proc.kill()  # the harness is going down
            proc.wait(10)
            for pipe in (proc.stdin, proc.stdout):
                pipe.close()
            if pending is not None:
                self.history.complete(pending, "unknown", error=f"the loop exited (rc={proc.returncode})")

    def _kill(self, proc: subprocess.Popen[bytes], why: str) -> None:
        """Kill a loop that hangs, its Python stack first dumped into its log (SIGUSR1)."""
        self.history.notes.append(f"{self.name}: loop {self.processes} {why}: killed (its stack: {self.log_path})")
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)  # time for the dump
        proc.kill()
