"""A streaming standby of a throwaway PostgreSQL (dev/postgres.py), made the way PostgreSQL's own
documentation makes one: `pg_basebackup -R` of the primary, started in hot standby, and the
primary's `synchronous_standby_names` naming it, so a COMMIT returns only once the standby has the
WAL too. For `make cluster CLUSTER_ARGS="--standby"` and the failover tests: kill the primary,
`pg_ctl promote` the standby, and the brokers on the multi-host URL carry on against it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import quote

from .postgres import SUPERUSER, LocalPostgres, PostgresError

STANDBY_NAME = "offsetd_standby"  # its application_name, which synchronous_standby_names names


def start_standby(primary: LocalPostgres, directory: Path | str | None = None, *, synchronous: bool = True,
                  timeout: float = 60.0) -> LocalPostgres:
    """A standby of `primary` in `directory` (a new temp dir when None; its data copied by pg_basebackup unless it holds a
    data dir already), started and streaming; with `synchronous`, the primary's commits wait for
    it from now on. The standby has no synchronous_standby_names of its own: once promoted, its
    commits wait for nobody."""
    # A promotion waits for the startup process's next look for WAL, wal_retrieve_retry_interval
    # (5 s by default) after the primary went away: 200 ms makes `pg_ctl promote` take that long.
    standby = LocalPostgres(directory, settings={**primary.settings, "wal_retrieve_retry_interval": "200ms"},
                            bindir=primary.bindir)
    standby.directory.mkdir(parents=True, exist_ok=True)
    if standby.user is not None:
        os.chown(standby.directory, standby.user.pw_uid, standby.user.pw_gid)
    if not (standby.data_dir / "PG_VERSION").exists():
        conninfo = (f"host=127.0.0.1 port={primary.port} user={SUPERUSER} "
                    f"application_name={STANDBY_NAME}")
        # -R: standby.signal and primary_conninfo (this conninfo, application_name included)
        standby.run_tool([str(primary.bindir / "pg_basebackup"), "-d", conninfo, "-D", str(standby.data_dir), "-R",
                          "-X", "stream", "-c", "fast", "--no-sync"], timeout=timeout)
    standby.start(timeout)
    if synchronous:
        primary.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
        primary.execute("SELECT pg_reload_conf()")
    _wait_streaming(primary, "sync" if synchronous else "async", timeout)
    return standby


def _wait_streaming(primary: LocalPostgres, state: str, timeout: float) -> None:
    """Until the primary's pg_stat_replication shows the standby streaming in `state`."""
    deadline = time.monotonic() + timeout
    while True:
        seen = primary.execute("SELECT sync_state FROM pg_stat_replication "
                               f"WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'").strip()
        if seen == state:
            return
        if time.monotonic() > deadline:
            raise PostgresError(f"standby {STANDBY_NAME} not streaming ({state}) after {timeout:.0f} s "
                                f"(pg_stat_replication: {seen or 'nothing'})")
        time.sleep(0.1)


def multi_host_dsn(servers: list[LocalPostgres], dbname: str, *, target_session_attrs: str | None = "read-write") -> str:
    """`postgresql://postgres@127.0.0.1:p1,127.0.0.1:p2/db?target_session_attrs=read-write`: libpq's
    (and asyncpg's) multi-host URL, tried in order, taking the first server that accepts writes."""
    hosts = ",".join(f"127.0.0.1:{server.port}" for server in servers)
    query = f"?target_session_attrs={quote(target_session_attrs)}" if target_session_attrs else ""
    return f"postgresql://{SUPERUSER}@{hosts}/{dbname}{query}"
