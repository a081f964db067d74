"""LocalPostgres and the PostgreSQL fixtures on a real server: start, stop, restart, a crash
(immediate stop) that keeps every committed row, databases isolated per test, a clear error when
PostgreSQL is missing."""

from __future__ import annotations

import asyncio
import pwd
import shutil
import tempfile
from pathlib import Path

import asyncpg
import pytest

from offsetd.dev import postgres as pgmod
from offsetd.dev.postgres import LocalPostgres, PostgresError, PostgresNotFound
from postgres_server import before_drop, fresh_database


def _fetch(dsn: str, sql: str, *args: object) -> list[asyncpg.Record]:
    """Run one query on a new connection (sync, for the tests)."""
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn, timeout=10)
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()
    return asyncio.run(run())


def test_server_runs_with_durable_settings_stops_and_starts_again_on_its_port(private_postgres):
    pg = private_postgres()
    settings = dict(_fetch(pg.dsn(), "SELECT name, setting FROM pg_settings WHERE name = ANY($1)",
                           ["fsync", "synchronous_commit", "max_connections", "listen_addresses", "port"]))
    assert settings == {"fsync": "on", "synchronous_commit": "on", "max_connections": "300",
                        "listen_addresses": "127.0.0.1", "port": str(pg.port)}
    assert int(_fetch(pg.dsn(), "SHOW server_version_num")[0][0]) >= 150000
    port = pg.port

    pg.stop("fast")
    assert not pg.running
    with pytest.raises(PostgresError, match="psql failed"):
        pg.execute("SELECT 1")

    pg.start()
    assert pg.running and pg.port == port
    assert pg.execute("SELECT 6 * 7").strip() == "42"


def test_immediate_stop_is_a_crash_that_loses_no_committed_row(private_postgres):
    pg = private_postgres()
    dsn = pg.create_database("crash")

    async def write() -> None:
        conn = await asyncpg.connect(dsn)
        await conn.execute("CREATE TABLE acked (n int PRIMARY KEY, payload text)")
        for n in range(200):  # each INSERT its own transaction, committed before the next
            await conn.execute("INSERT INTO acked VALUES ($1, $2)", n, f"row-{n}")
        await conn.close()

    asyncio.run(write())
    pg.stop("immediate")
    pg.start()
    # the restart replayed the WAL: it was a crash, not a clean shutdown
    assert "not properly shut down; automatic recovery in progress" in pg.log()
    rows = _fetch(dsn, "SELECT n, payload FROM acked ORDER BY n")
    assert [(r["n"], r["payload"]) for r in rows] == [(n, f"row-{n}") for n in range(200)]


def test_pg_dsn_is_an_empty_database_of_the_session_server(pg_dsn, postgres_server):
    assert pg_dsn.startswith(f"postgresql://postgres@127.0.0.1:{postgres_server.port}/t")
    name = pg_dsn.rsplit("/", 1)[1]
    assert "test_pg_dsn_is_an_empty_database" in name
    assert _fetch(pg_dsn, "SELECT current_database()")[0][0] == name
    assert _fetch(pg_dsn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")[0][0] == 0


def test_fresh_databases_are_isolated_and_dropped_even_while_in_use(postgres_server):
    tables = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"

    async def scenario() -> None:
        with fresh_database(postgres_server, "one") as one, fresh_database(postgres_server, "two") as two:
            assert one != two
            names = {one.rsplit("/", 1)[1], two.rsplit("/", 1)[1]}
            conn_one, conn_two = await asyncpg.connect(one), await asyncpg.connect(two)
            await conn_one.execute("CREATE TABLE only_in_one (x int)")
            assert [r[0] for r in await conn_one.fetch(tables)] == ["only_in_one"]
            assert await conn_two.fetch(tables) == []
            await conn_two.close()
        # conn_one was still open: the drop disconnected it rather than failing
        assert names.isdisjoint(postgres_server.execute("SELECT datname FROM pg_database").split())
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError)):
            await conn_one.fetch("SELECT 1")
        conn_one.terminate()

    asyncio.run(scenario())


def test_missing_postgresql_names_what_to_install(monkeypatch, tmp_path: Path):
    monkeypatch.delenv("OFFSETD_PG_BINDIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no pg_config, no initdb
    monkeypatch.setattr(pgmod, "DEBIAN_ROOT", tmp_path / "none")
    with pytest.raises(PostgresNotFound, match=r"install Debian's `postgresql` package"):
        LocalPostgres()


def test_a_bindir_without_the_server_binaries_is_refused(monkeypatch, tmp_path: Path):
    (tmp_path / "psql").write_text("")  # a client-only install: no initdb, pg_ctl, postgres
    monkeypatch.setenv("OFFSETD_PG_BINDIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(pgmod, "DEBIAN_ROOT", tmp_path / "none")
    with pytest.raises(PostgresNotFound, match=str(tmp_path)):
        pgmod.find_bindir()


def test_a_directory_the_server_user_cannot_enter_is_named():
    stranger = pwd.struct_passwd(("stranger", "x", 54321, 54321, "", "/", "/bin/sh"))
    base = Path(tempfile.mkdtemp())  # under the system temp dir, whose ancestors anyone enters
    try:
        (base / "locked" / "pg").mkdir(parents=True)
        base.chmod(0o711)
        (base / "locked").chmod(0o700)
        with pytest.raises(PostgresError, match=f"cannot enter {base / 'locked'} "):
            pgmod._check_reachable(base / "locked" / "pg", stranger)
        (base / "locked").chmod(0o711)
        pgmod._check_reachable(base / "locked" / "pg", stranger)  # no error: every ancestor is open
    finally:
        shutil.rmtree(base)


def test_before_drop_cleanups_run_while_the_database_still_exists(postgres_server):
    seen: list[tuple[str, bool]] = []

    def databases() -> list[str]:
        return postgres_server.execute("SELECT datname FROM pg_database").split()

    with fresh_database(postgres_server, "cleanup") as dsn:
        name = dsn.rsplit("/", 1)[1]
        proxied = dsn.replace(f":{postgres_server.port}/", ":1/")  # another address, the same database
        before_drop(dsn, lambda: seen.append(("first", name in databases())))
        before_drop(proxied, lambda: seen.append(("second", name in databases())))
    assert seen == [("second", True), ("first", True)]  # newest first, both before the drop
    assert name not in databases()
