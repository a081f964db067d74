"""Shared fixtures: a real broker process per test (or per module where tests only read)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import BrokerProcess  # noqa: E402
from small_disk import SmallDisk  # noqa: E402
# PostgreSQL and cluster fixtures (postgres_server, pg_dsn, private_postgres, cluster_factory,
# pg_proxy): defined beside their helpers, registered by being imported here.
from postgres_server import pg_dsn, postgres_server, private_postgres  # noqa: E402,F401
from cluster_process import cluster_factory  # noqa: E402,F401
from pg_proxy import pg_proxy  # noqa: E402,F401


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
