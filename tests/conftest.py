"""Shared fixtures: a real broker process per test (or per module where tests only read)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import hypothesis  # noqa: F401  before offsetd.cli, which keeps a command from importing it (cli.py)
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import BrokerProcess  # noqa: E402
from small_disk import SmallDisk  # noqa: E402
# PostgreSQL and cluster fixtures (postgres_server, pg_dsn, private_postgres, primary_and_standby, cluster_factory,
# pg_proxy): defined beside their helpers, registered by being imported here.
from postgres_server import pg_dsn, postgres_server, primary_and_standby, private_postgres  # noqa: E402,F401
from cluster_process import cluster_factory  # noqa: E402,F401
from pg_proxy import pg_proxy  # noqa: E402,F401


def _client_io_threads() -> set[threading.Thread]:
    """kafka-python runs one daemon IO thread per client, named kafka-io-<client_id>."""
    return {t for t in threading.enumerate() if t.name.startswith("kafka-io-")}


@pytest.fixture(scope="module", autouse=True)
def kafka_python_clients_closed():
    """A module must close the kafka-python clients it opens: a forgotten one keeps reconnecting
    to its stopped broker through every later test, and its retries land in their logs and CPU."""
    before = _client_io_threads()
    yield
    deadline = time.monotonic() + 5
    while (left := _client_io_threads() - before) and time.monotonic() < deadline:
        time.sleep(0.05)  # a client closed from another thread stops its IO thread asynchronously
    assert not left, f"kafka-python clients left open: {sorted(t.name for t in left)}"


@pytest.fixture
def broker(tmp_path: Path):
    """A fresh broker with its own data dir, stopped (SIGTERM) after the test."""
    proc = BrokerProcess(tmp_path / "data").start()
    yield proc
    if proc.alive():
        proc.stop()


@pytest.fixture
def small_disk(tmp_path: Path):
    """An 8 MiB tmpfs at tmp_path/disk, to fill (real ENOSPC) and free; unmounted afterwards."""
    with SmallDisk(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture
def broker_factory(tmp_path: Path):
    """Start brokers with config overrides: `broker_factory({"auto.create.topics.enable": "false"})`."""
    started: list[BrokerProcess] = []

    def start(overrides: dict[str, str] | None = None, name: str = "data") -> BrokerProcess:
        proc = BrokerProcess(tmp_path / name, overrides).start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.alive():
            proc.stop()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for a module of tests that each use their own topics."""
    proc = BrokerProcess(tmp_path_factory.mktemp("shared") / "data").start()
    yield proc
    if proc.alive():
        proc.stop()


# Under pytest-xdist (`make test`, `--dist loadfile`) a test file is one unit of work, so its module
# fixtures (a shared broker, a scripted timeline) are set up once; the longest files start first and
# the short ones fill the tail. Seconds per file, measured on four workers (2 cores):
_SLOW_FIRST = (
    "spark/test_offsets_log_source.py",     # 133
    "spark/test_offsets_log_stream.py",     # 112
    "soak/test_soak.py",                    # 102
    "spark/test_topic_source.py",           # 93
    "spark/test_pipelines.py",              # 89
    "integration/test_expiration.py",       # 80: offsets.retention.minutes=1 has to pass
    "integration/test_old_versions.py",     # 79
    "chaos/test_chaos_cluster.py",          # ~120: two 30 s seeds of cluster chaos
    "chaos/test_chaos.py",                  # 69
    "integration/test_transactions_eos.py", # 63
)
_DIRECTORY_ORDER = ("spark", "chaos", "soak", "integration", "admin", "fuzz", "unit")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files ordered slowest first (stable within a file)."""
    here = Path(__file__).parent

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = Path(item.fspath).relative_to(here)
        top = path.parts[0]
        slow = _SLOW_FIRST.index(path.as_posix()) if path.as_posix() in _SLOW_FIRST else len(_SLOW_FIRST)
        return slow, _DIRECTORY_ORDER.index(top) if top in _DIRECTORY_ORDER else len(_DIRECTORY_ORDER)

    items.sort(key=rank)
