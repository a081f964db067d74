"""`python -m offsetd.dev.cluster` (`make cluster`) as a user runs it: PostgreSQL and brokers
start, the bootstrap list and URL are printed, SIGTERM stops everything and removes the temporary
directory. The brokers run in local mode here (storage.engine=local overrides cluster mode) so the
tool is checked on its own."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from confluent_kafka.admin import AdminClient

from offsetd.dev.broker import LineReader
from offsetd.dev.postgres import free_port


def _two_free_ports() -> int:
    """A port p with p and p + 1 both free right now."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


def _start(*args: str) -> tuple[subprocess.Popen[bytes], LineReader]:
    """`python -m offsetd.dev.cluster` with `args` (metrics off, local storage overridden), its
    output read line by line against deadlines."""
    proc = subprocess.Popen([sys.executable, "-m", "offsetd.dev.cluster", *args, "--metrics-base-port", "0",
                             "--override", "storage.engine=local"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0)
    assert proc.stdout is not None
    return proc, LineReader(proc.stdout)


def _banner(proc: subprocess.Popen[bytes], out: LineReader) -> str:
    """The lines it prints up to the one naming Ctrl-C (90 s at most)."""
    lines: list[str] = []
    deadline = time.monotonic() + 90
    while not lines or "Ctrl-C" not in lines[-1]:
        line = out.readline(deadline)
        assert line is not None, f"no banner (rc={proc.poll()}): {''.join(lines)}"
        lines.append(line)
    return "".join(lines)


def test_dev_cluster_prints_where_it_runs_and_stops_everything_on_sigterm():
    port = _two_free_ports()
    proc, out = _start("--brokers", "2", "--base-port", str(port))
    try:
        banner = _banner(proc, out)
        assert f"bootstrap servers: 127.0.0.1:{port},127.0.0.1:{port + 1}\n" in banner
        dsn = re.search(r"storage\.engine:\s+(\S+)", banner).group(1)  # type: ignore[union-attr]
        directory = Path(re.search(r"files in (\S+)", banner).group(1))  # type: ignore[union-attr]
        assert re.fullmatch(r"postgresql://postgres@127\.0\.0\.1:\d+/offsetd", dsn)

        for node_id, broker_port in ((1, port), (2, port + 1)):
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker_port}", "log_level": 0})
            assert list(admin.list_topics(timeout=10).brokers) == [node_id]

        async def database() -> str:
            conn = await asyncpg.connect(dsn, timeout=10)
            try:
                return await conn.fetchval("SELECT current_database()")
            finally:
                await conn.close()

        assert asyncio.run(database()) == "offsetd"
        assert (directory / "broker-1.log").exists() and (directory / "postgres" / "data").is_dir()

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        rest = "".join(out.rest())
        assert "stopping brokers" in rest and rest.rstrip().endswith("offsetd.dev.cluster: stopped")
        assert not directory.exists()
        with pytest.raises(OSError):  # PostgreSQL is gone too
            asyncio.run(database())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_dev_cluster_with_a_standby_prints_the_multi_host_url_and_the_failover_commands():
    """--standby: a primary and a synchronous streaming standby, the brokers given both in the
    multi-host URL (which reaches the primary), and the kill and promote commands printed."""
    port = free_port()
    proc, out = _start("--brokers", "1", "--base-port", str(port), "--standby")
    try:
        banner = _banner(proc, out)
        dsn = re.search(r"storage\.engine:\s+(\S+)", banner).group(1)  # type: ignore[union-attr]
        match = re.fullmatch(r"postgresql://postgres@127\.0\.0\.1:(\d+),127\.0\.0\.1:(\d+)/offsetd"
                             r"\?target_session_attrs=read-write", dsn)
        assert match, dsn
        primary, standby = match.groups()
        assert f"primary 127.0.0.1:{primary}, synchronous standby 127.0.0.1:{standby}" in banner
        assert re.search(r"kill -9 (\d+) \$\(pgrep -P \1\)", banner) and "pg_ctl promote -D " in banner

        async def ask(url: str, sql: str) -> object:
            conn = await asyncpg.connect(url, timeout=10)
            try:
                return await conn.fetchval(sql)
            finally:
                await conn.close()

        assert asyncio.run(ask(dsn, "SELECT pg_is_in_recovery()")) is False  # the URL reaches the primary
        assert asyncio.run(ask(f"postgresql://postgres@127.0.0.1:{standby}/offsetd", "SELECT pg_is_in_recovery()"))
        assert asyncio.run(ask(dsn, "SELECT sync_state FROM pg_stat_replication")) == "sync"

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert "".join(out.rest()).rstrip().endswith("offsetd.dev.cluster: stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
