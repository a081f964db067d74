"""N real `offsetd serve` brokers for cluster tests: node.id 1..N on free ports, each with its own
log.dirs and log file, all against one PostgreSQL dsn (or, with dsn=None, each in the default local
mode), directly or each through its own PgProxy. Brokers are addressed by node id: kill9,
sigstop/sigcont, terminate (SIGTERM), restart, proxy(node_id).blackhole()."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest

from broker_process import BrokerProcess
from pg_proxy import PgProxy
from postgres_server import before_drop


class BrokerCluster:
    """Brokers node.id 1..size; `bootstrap` lists all of them, as a client's configuration would."""

    def __init__(self, dsn: str | None, base_dir: Path, size: int = 3,
                 overrides: dict[str, str] | None = None, proxied: bool = False) -> None:
        self.dsn = dsn
        self.base_dir = base_dir
        base_dir.mkdir(parents=True, exist_ok=True)  # the brokers' log files lie beside their log.dirs
        self.brokers: dict[int, BrokerProcess] = {}
        # proxied: each broker reaches PostgreSQL through its own PgProxy, to cut it off alone
        self.proxies: dict[int, PgProxy] = {}
        for node_id in range(1, size + 1):
            engine: dict[str, str] = {}
            if dsn:
                if proxied:
                    self.proxies[node_id] = PgProxy.for_dsn(dsn)
                engine = {"storage.engine": self.proxies[node_id].dsn if proxied else dsn}
            settings = {"node.id": str(node_id), **engine, **(overrides or {})}
            self.brokers[node_id] = BrokerProcess(base_dir / f"broker-{node_id}", settings)

    def start(self, timeout: float = 30.0) -> "BrokerCluster":
        """Start every broker at once, then wait until each listens (AssertionError with its log
        if one does not)."""
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.wait_listening(timeout)
        return self

    @property
    def node_ids(self) -> list[int]:
        """All node ids, started or not."""
        return list(self.brokers)

    @property
    def bootstrap(self) -> str:
        """`127.0.0.1:p1,127.0.0.1:p2,…` of every broker (dead ones too: clients skip them)."""
        return ",".join(broker.bootstrap for broker in self.brokers.values())

    def broker(self, node_id: int) -> BrokerProcess:
        """The process of broker `node_id`."""
        return self.brokers[node_id]

    def proxy(self, node_id: int) -> PgProxy:
        """The PostgreSQL proxy of broker `node_id` (a cluster made with proxied=True):
        `cluster.proxy(2).blackhole()` partitions broker 2 from PostgreSQL, not from its clients."""
        return self.proxies[node_id]

    def alive(self, node_id: int) -> bool:
        """Whether broker `node_id` runs (a SIGSTOPped one too)."""
        return self.brokers[node_id].alive()

    def live_node_ids(self) -> list[int]:
        """The node ids whose process runs."""
        return [node_id for node_id, broker in self.brokers.items() if broker.alive()]

    def kill9(self, node_id: int) -> None:
        """SIGKILL broker `node_id`: a crash, its lease left to expire."""
        self.brokers[node_id].kill9()

    def sigstop(self, node_id: int) -> None:
        """Freeze broker `node_id` (a zombie once its lease expires) until sigcont()."""
        self.brokers[node_id].sigstop()

    def sigcont(self, node_id: int) -> None:
        """Resume broker `node_id` after sigstop()."""
        self.brokers[node_id].sigcont()

    def terminate(self, node_id: int, timeout: float = 20.0) -> int:
        """SIGTERM broker `node_id` and wait: a graceful stop (handoff); its exit code."""
        return self.brokers[node_id].stop(timeout)

    def restart(self, node_id: int, timeout: float = 30.0) -> BrokerProcess:
        """Start broker `node_id` again on its port and log.dirs (stopping it first if it runs)."""
        broker = self.brokers[node_id]
        if broker.alive():
            broker.stop()
        return broker.start(timeout)

    def stop(self) -> None:
        """Stop every running broker: SIGTERM (a frozen one is continued, a cut-off one healed
        first), SIGKILL if it does not exit within 20 s; then close the proxies."""
        for proxy in self.proxies.values():
            proxy.heal()
        for broker in self.brokers.values():
            if broker.alive():
                try:
                    broker.stop(20)
                except Exception:  # noqa: BLE001 - a hung broker must not keep the others running
                    broker.kill9()
        for proxy in self.proxies.values():
            proxy.close()

    def logs(self, tail: int = 4000) -> str:
        """The end of every broker's log, headed by node id and path: for failure messages."""
        parts = []
        for node_id, broker in self.brokers.items():
            state = "running" if broker.alive() else "stopped"
            parts.append(f"===== broker {node_id} ({broker.bootstrap}, {state}) {broker.log_path} =====\n"
                         f"{broker.log()[-tail:]}")
        return "\n".join(parts)

    def __enter__(self) -> "BrokerCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerCluster]]:
    """Start brokers: `cluster_factory(pg_dsn, size=3, overrides={"broker.session.timeout.ms": "3000"},
    proxied=False)` (dsn None: local mode; proxied: each broker through its own PgProxy). Stopped after the test; their log tails are printed at teardown, which
    pytest shows only when the test failed."""
    clusters: list[BrokerCluster] = []

    def start(dsn: str | None, size: int = 3, overrides: dict[str, str] | None = None,
              proxied: bool = False) -> BrokerCluster:
        cluster = BrokerCluster(dsn, tmp_path / f"cluster-{len(clusters) + 1}", size, overrides, proxied)
        clusters.append(cluster)
        if dsn:
            before_drop(dsn, cluster.stop)  # brokers stop before their database goes, whatever the fixture order
        return cluster.start()

    yield start
    for cluster in clusters:
        cluster.stop()
        print(cluster.logs())
