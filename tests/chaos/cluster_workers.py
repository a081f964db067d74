"""The cluster chaos run's client subprocesses: harness.py's idempotent producers and committers
(thread_client.py), members of consumer groups, classic and KIP-848 (group_member.py), and
consume-transform-produce loops (txn_loop.py), each driven by a harness thread that mirrors its
events (client_events.py) into the history. A client that hangs or crashes is the client's business, not the harness's: one
silent for `HANG_SECONDS` with an operation open is killed (-9, its Python stack dumped into its log
first) and started again, the operation unknown; so is one that exits. Two librdkafka behaviours
made this necessary: send_offsets_to_transaction() can block for good while the group coordinator is
down (confluentinc/librdkafka#5456), and a segfault in a client took the whole harness down."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cluster_config import ClusterChaosConfig
from harness import Worker
from history import Op

from offsetd.dev.broker import LineReader

HERE = Path(__file__).resolve().parent


class ClientProcessWorker(Worker):
    """Runs one client script again and again until the run stops, its events in the history."""

    config: ClusterChaosConfig
    HANG_SECONDS = 40.0  # silent this long with an operation open: hung (a kill is a client crash)
    STOP_SECONDS = 40.0  # how long a client asked to stop may take to finish what it has in hand

    def __init__(self, name: str, script: str, *args: Any) -> None:
        super().__init__(name, *args)
        self.script = HERE / script
        self.processes = 0
        self.kills = 0    # processes killed after hanging
        self.crashes = 0  # processes that died of a signal (a segfault in librdkafka)
        self.proc: subprocess.Popen[bytes] | None = None  # the client process running now
        self.log_path = self.config.run_dir / f"client-{name}.log"  # the clients' stderr

    def arguments(self) -> list[str]:
        """The script's arguments for the current process (`self.processes`)."""
        raise NotImplementedError

    def finish(self) -> None:
        """After the last process: whatever it left must be decided (nothing by default)."""

    def relayed(self, op: Op) -> None:
        """An operation of the client entered the history (nothing to note by default)."""

    def work(self) -> None:
        """Processes one after another until the run stops, then finish()."""
        while not self.stop_event.is_set():
            self.processes += 1
            self._run_process()
            self.stop_event.wait(0.5)  # pacing before the next process
        self.finish()

    def _run_process(self) -> None:
        """One client process: its events relayed until it exits, hangs or is asked to stop."""
        with open(self.log_path, "a") as log:
            proc = subprocess.Popen([sys.executable, str(self.script), *self.arguments()], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=log)
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        reader = LineReader(proc.stdout)
        pending: dict[str, Op] = {}
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
                    if pending and now - heard > self.HANG_SECONDS:
                        self._kill(proc, f"silent {now - heard:.0f}s with {sorted(pending)[:3]} open")
                        return
                    if stop_by is not None and now > stop_by:
                        self._kill(proc, f"still running {self.STOP_SECONDS:.0f}s after it was asked to stop")
                        return
                    continue
                heard = now
                self._relay(json.loads(line), pending)
        finally:
            if proc.poll() is None:
                proc.kill()  # the harness is going down
            proc.wait(10)
            proc.stdin.close()
            proc.stdout.close()
            if proc.returncode < 0 and proc.returncode != -signal.SIGKILL:
                self.crashes += 1
            if proc.returncode not in (0, -signal.SIGKILL):
                self.history.notes.append(f"{self.name}: process {self.processes} exited with {proc.returncode} "
                                          f"(its log: {self.log_path})")
            for op in pending.values():
                self.history.complete(op, "unknown", error=f"the client exited (rc={proc.returncode})")

    def kill_now(self) -> None:
        """The harness is going down: no client process may outlive it."""
        self.stop_event.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def _relay(self, event: dict[str, Any], pending: dict[str, Op]) -> None:
        """One event of the client into the history."""
        if "op" in event:
            op = self.history.invoke(self.round_no, event["kind"], self.name, event.get("group"),
                                     event.get("partition", -1), event["value"], event.get("topic", ""))
            op.count, op.metadata = event.get("count"), event.get("metadata")
            pending[event["op"]] = op
            self.relayed(op)
        elif "done" in event and event["done"] in pending:
            self.history.complete(pending.pop(event["done"]), event["outcome"], offset=event.get("offset"),
                                  error=event.get("error"))
        elif "note" in event:
            self.history.notes.append(f"{self.name}: {event['note']}")

    def _kill(self, proc: subprocess.Popen[bytes], why: str) -> None:
        """Kill a client that hangs, its Python stack first dumped into its log (SIGUSR1)."""
        self.kills += 1
        self.history.notes.append(f"{self.name}: process {self.processes} {why}: killed (its stack: {self.log_path})")
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.5)  # time for the dump
        proc.kill()


class ThreadClientWorker(ClientProcessWorker):
    """One of harness.py's client threads, an idempotent producer or a committer, in a process of
    its own (thread_client.py); a committer's next process starts above the last value sent."""

    def __init__(self, kind: str, index: int, *args: Any) -> None:
        super().__init__(f"{kind[0]}{index}", "thread_client.py", *args)
        self.kind, self.index = kind, index
        self.last_value = 0

    def arguments(self) -> list[str]:
        """The client's arguments."""
        cfg = self.config
        return ["--kind", self.kind, "--index", str(self.index), "--process", str(self.processes),
                "--bootstrap", self.bootstrap, "--topic", cfg.topic, "--commit-topic", cfg.commit_topic,
                "--partitions", str(cfg.partitions), "--rate", str(cfg.producer_rate),
                "--commit-interval", str(cfg.commit_interval), "--metadata-bytes", str(cfg.commit_metadata_bytes),
                "--start-value", str(self.last_value)]

    def relayed(self, op: Op) -> None:
        """A committer's values only rise: the next process starts from the highest sent."""
        if op.kind == "commit":
            self.last_value = max(self.last_value, int(op.value))


class GroupMemberWorker(ClientProcessWorker):
    """A member of a consumer group (`protocol` "classic" or "consumer", KIP-848) committing what
    it consumed of the data topic synchronously (group_member.py)."""

    def __init__(self, group: str, protocol: str, member: int, *args: Any) -> None:
        super().__init__(f"{group}.m{member}", "group_member.py", *args)
        self.group, self.protocol = group, protocol

    def arguments(self) -> list[str]:
        """The group member's arguments."""
        cfg = self.config
        return ["--bootstrap", self.bootstrap, "--topic", cfg.topic, "--group", self.group, "--protocol", self.protocol,
                "--name", f"{self.name}.{self.processes}", "--commit-interval", str(cfg.group_commit_interval),
                "--metadata-bytes", str(cfg.commit_metadata_bytes), "--debug", cfg.client_debug]


class TxnLoopWorker(ClientProcessWorker):
    """A consume-transform-produce loop (txn_loop.py) with its own transactional.id, in the EOS
    group; after the run a last init_transactions fences whichever producer a killed loop left and
    decides its transaction, so the output topic's last stable offset reaches its end."""

    def __init__(self, index: int, *args: Any) -> None:
        super().__init__(f"t{index}", "txn_loop.py", *args)
        self.index = index

    def arguments(self) -> list[str]:
        """The loop's arguments."""
        cfg = self.config
        return ["--bootstrap", self.bootstrap, "--input", cfg.topic, "--output", cfg.output_topic,
                "--group", cfg.eos_group, "--txn-id", f"chaos-txn-{self.index}", "--label", f"{self.name}.{self.processes}",
                "--seed", str(cfg.seed * 1000 + self.index * 100 + self.processes),
                "--records", str(cfg.txn_records), "--abort-ratio", str(cfg.txn_abort_ratio)]

    def finish(self) -> None:
        """A last init_transactions (--fence-only) for this transactional.id."""
        with open(self.log_path, "a") as log:
            try:
                subprocess.run([sys.executable, str(self.script), *self.arguments(), "--fence-only"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, timeout=60, check=True)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                self.history.notes.append(f"{self.name}: the last fencing init_transactions failed: {exc}")
