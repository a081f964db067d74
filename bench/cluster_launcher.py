"""A bench launcher for "offsetd, 3 brokers + PostgreSQL": a throwaway PostgreSQL and N
``offsetd serve`` brokers in cluster mode, behind the same interface as bench/brokers.py's
launchers (start -> bootstrap list, stop, pid, exit_status), plus what the failover workloads
need: the brokers by node id, kill -9 / SIGTERM one and start it again on its data.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bench.brokers import DEFAULT_OFFSETD_CONFIG, BrokerStartError, free_port
from offsetd.dev.broker import BrokerProcess
from offsetd.dev.postgres import LocalPostgres, PostgresError, PostgresNotFound

DATABASE = "offsetd"
OFFSETS_TOPIC = "__consumer_offsets"


class ClusterLauncher:
    """PostgreSQL + ``brokers`` offsetd brokers (node.id 1..N) sharing it, on free ports."""

    name = "offsetd-cluster"
    startup_timeout_s = 60.0
    stop_timeout_s = 30.0

    def __init__(self, config: Path = DEFAULT_OFFSETD_CONFIG, brokers: int = 3, ttl_ms: int = 3000,
                 heartbeat_ms: int = 1000, extra: dict[str, str] | None = None) -> None:
        self.config = config.resolve()
        self.count = brokers
        self.ttl_ms = ttl_ms
        self.heartbeat_ms = heartbeat_ms
        self.extra = dict(extra or {})
        self.workdir: Path | None = None
        self.pg: LocalPostgres | None = None
        self.brokers: dict[int, BrokerProcess] = {}
        self.last_log_tail = ""
        self.errors: list[str] = []  # ERROR lines of the brokers' logs, kept by stop()

    # -- the launcher interface of bench/run.py ------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every broker's host:port, comma-separated (what a client bootstraps from)."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    @property
    def pid(self) -> int:
        """Broker 1's pid (a workload asking for "the broker" gets one of them)."""
        return self.brokers[1].pid

    def pids(self) -> dict[int, int]:
        """node.id -> pid of every running broker."""
        return {node: b.pid for node, b in self.brokers.items() if b.alive()}

    def exit_status(self) -> int | None:
        """None while every broker runs, else the first dead one's exit status."""
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is not None:
                return broker.proc.poll()
        return None

    def version(self) -> str:
        """offsetd's version and PostgreSQL's server binaries."""
        from bench.brokers import OffsetdBroker

        bindir = self.pg.bindir if self.pg else "?"
        return f"{OffsetdBroker(self.config).version()} x{self.count} + PostgreSQL ({bindir})"

    def start(self) -> str:
        """Start PostgreSQL and the brokers; return once Metadata lists all of them and every
        ``__consumer_offsets`` partition has a leader."""
        self.workdir = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
        self.workdir.chmod(0o755)  # PostgreSQL runs as an unprivileged user when we are root
        try:
            self.pg = LocalPostgres(self.workdir / "postgres")
            self.pg.start()
            dsn = self.pg.create_database(DATABASE)
            for node in range(1, self.count + 1):
                self.brokers[node] = self._broker(node, dsn).launch()
            for broker in self.brokers.values():
                broker.wait_listening(self.startup_timeout_s)
            self.wait_settled(time.monotonic() + self.startup_timeout_s)
        except (AssertionError, PostgresError, PostgresNotFound, OSError, BrokerStartError) as exc:
            tail = self.log_tail()
            self.stop()
            raise BrokerStartError(f"{self.name} did not start: {exc}\n{tail}") from exc
        return self.bootstrap

    def stop(self) -> None:
        """SIGTERM every broker (SIGKILL after the timeout), then PostgreSQL; remove the files."""
        try:
            for broker in self.brokers.values():
                if broker.alive():
                    broker.proc.send_signal(15)  # type: ignore[union-attr]  # all at once, then wait
            for broker in self.brokers.values():
                if broker.alive():
                    try:
                        broker.stop(self.stop_timeout_s)
                    except subprocess.TimeoutExpired:
                        broker.kill9()
                elif broker.proc is not None:
                    broker.stop(1)  # reaps it and closes its pipes
        finally:
            self.last_log_tail = self.log_tail() or self.last_log_tail
            self.errors += self.broker_errors()
            if self.pg is not None:
                self.pg.close()
                self.pg = None
            if self.workdir is not None:
                shutil.rmtree(self.workdir, ignore_errors=True)
                self.workdir = None
            self.brokers = {}

    # -- what the cluster workloads use --------------------------------------------------

    def _broker(self, node: int, dsn: str, name: str = "") -> BrokerProcess:
        """Broker ``node`` (not started) with its data in ``name`` (default ``broker-<node>``)."""
        assert self.workdir is not None
        overrides = {
            "storage.engine": dsn,
            "node.id": str(node),
            "broker.session.timeout.ms": str(self.ttl_ms),
            "broker.heartbeat.interval.ms": str(self.heartbeat_ms),
            "metrics.listener": "",  # several brokers: not all on config/server.properties' port
            **self.extra,
        }
        broker = BrokerProcess(self.workdir / (name or f"broker-{node}"), overrides, config=self.config,
                               start_new_session=True)
        broker.port = free_port()
        broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{broker.port}"
        return broker

    def restart(self, node: int, timeout_s: float = 60.0) -> None:
        """Start broker ``node`` again on its port and data (after a kill or a stop), and wait
        until the cluster has settled with it."""
        broker = self.brokers[node]
        if broker.alive():
            broker.stop(self.stop_timeout_s)
        broker.start(timeout_s)
        self.wait_settled(time.monotonic() + timeout_s)

    def wait_settled(self, deadline: float, quiet_s: float = 0.5) -> None:
        """Poll Metadata until every broker is listed, every ``__consumer_offsets`` partition
        has a live leader, and the leaders stayed the same for ``quiet_s`` (handoffs done)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        live = {node for node, b in self.brokers.items() if b.alive()}
        last: dict[int, int] | None = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            try:
                meta = admin.list_topics(timeout=2.0)
            except KafkaException:
                time.sleep(0.05)
                continue
            topic = meta.topics.get(OFFSETS_TOPIC)
            leaders = {p: m.leader for p, m in topic.partitions.items()} if topic else {}
            complete = (set(meta.brokers) == live and bool(leaders)
                        and all(node in live for node in leaders.values()))
            if complete and leaders == last:
                if time.monotonic() - since >= quiet_s:
                    return
            else:
                last, since = (leaders if complete else None), time.monotonic()
            time.sleep(0.1)
        raise BrokerStartError(f"cluster not settled (brokers {sorted(live)} alive)")

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every broker's log."""
        parts = []
        for node, broker in self.brokers.items():
            tail = "\n".join(broker.log().splitlines()[-lines:])
            parts.append(f"--- broker {node} ({broker.log_path}) ---\n{tail}")
        return "\n".join(parts)

    def broker_errors(self) -> list[str]:
        """ERROR / Traceback lines of every broker's log so far (for the report)."""
        found = []
        for node, broker in self.brokers.items():
            for line in broker.log().splitlines():
                if " ERROR " in line or "Traceback" in line:
                    found.append(f"broker {node}: {line}")
        return found
