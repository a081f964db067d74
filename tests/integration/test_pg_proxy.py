"""The split-brain proxy against a real PostgreSQL: it forwards, a blackhole makes queries and new
connections hang (held, not dropped: a query sent during it completes after heal), heal restores,
disconnect resets."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest


def test_forwards_queries_and_rewrites_the_dsn(pg_dsn, pg_proxy):
    proxy = pg_proxy(pg_dsn)
    assert proxy.dsn == pg_dsn.replace(pg_dsn.split("@")[1].split("/")[0], f"127.0.0.1:{proxy.port}")

    async def scenario() -> None:
        conn = await asyncpg.connect(proxy.dsn, timeout=5)
        assert await conn.fetchval("SELECT current_database()") == pg_dsn.rsplit("/", 1)[1]
        payload = "x" * 300_000  # several chunks each way
        assert await conn.fetchval("SELECT $1::text", payload) == payload
        await conn.close()

    asyncio.run(scenario())
    assert proxy.accepted == 1


def test_blackhole_hangs_queries_and_connects_until_heal_then_delivers_what_it_held(pg_dsn, pg_proxy):
    proxy = pg_proxy(pg_dsn)

    async def scenario() -> None:
        conn = await asyncpg.connect(proxy.dsn, timeout=5)
        victim = await asyncpg.connect(proxy.dsn, timeout=5)
        proxy.blackhole()

        began = time.monotonic()
        with pytest.raises(asyncio.TimeoutError):
            await victim.fetchval("SELECT 1", timeout=0.5)
        assert time.monotonic() - began >= 0.5
        victim.terminate()
        with pytest.raises(asyncio.TimeoutError):
            await asyncpg.connect(proxy.dsn, timeout=0.5)

        held = asyncio.ensure_future(conn.fetchval("SELECT 40 + 2"))
        done, _ = await asyncio.wait([held], timeout=0.5)
        assert not done  # still nothing through

        proxy.heal()
        assert await asyncio.wait_for(held, 5) == 42  # the query sent while blackholed, delivered
        fresh = await asyncpg.connect(proxy.dsn, timeout=5)
        assert await fresh.fetchval("SELECT 7") == 7
        await fresh.close()
        await conn.close()

    asyncio.run(scenario())


def test_disconnect_resets_current_connections_and_serves_new_ones(pg_dsn, pg_proxy):
    proxy = pg_proxy(pg_dsn)

    async def scenario() -> None:
        conn = await asyncpg.connect(proxy.dsn, timeout=5)
        assert await conn.fetchval("SELECT 1") == 1
        proxy.disconnect()
        with pytest.raises((asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError)):
            await conn.fetchval("SELECT 1", timeout=5)
        conn.terminate()
        again = await asyncpg.connect(proxy.dsn, timeout=5)
        assert await again.fetchval("SELECT 2") == 2
        await again.close()

    asyncio.run(scenario())
    assert proxy.accepted == 2
