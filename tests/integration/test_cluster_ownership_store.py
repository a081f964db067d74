"""The ownership statements of cluster mode on a real PostgreSQL (storage/postgres_store.py): a
look reads only the partitions changed since the previous look, including a change whose
transaction began before that look and committed after it; claims and releases of many partitions
in one statement, each claim with its leader-epoch history (issue 26)."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from offsetd.storage.postgres_store import PostgresStore, TopicRow

TOPIC = uuid.UUID(int=26)


def test_a_look_reads_what_changed_since_the_last_one_even_a_change_committed_after_it(pg_dsn):
    async def run() -> None:
        store = PostgresStore(pg_dsn)
        await store.open()
        other = await asyncpg.connect(pg_dsn)
        try:
            me = uuid.uuid4()
            await store.register(1, me, "127.0.0.1", 9092, 60_000)
            assert await store.create_topic(TopicRow("t", TOPIC, 4, {}, False))
            brokers, rows, horizon = await store.snapshot()
            assert [b.node_id for b in brokers] == [1]
            assert sorted(rows) == [(TOPIC, p, None, 0) for p in range(4)]

            # A transaction that changes partition 0 begins before the next look and commits after it.
            slow = other.transaction()
            await slow.start()
            await other.execute("UPDATE offsetd_partition SET epoch = epoch + 1, "
                                "changed = pg_current_xact_id()::text::bigint WHERE partition = 0")
            claims = await store.claim([(TOPIC, 1), (TOPIC, 2)], 1, me)
            assert {key: (c.epoch, c.history) for key, c in claims.items()} == {
                (TOPIC, 1): (1, ((1, 0),)), (TOPIC, 2): (1, ((1, 0),))}
            _, rows, horizon = await store.snapshot(horizon)
            assert {(p, owner, epoch) for _, p, owner, epoch in rows} >= {(1, 1, 1), (2, 1, 1)}
            assert all(p != 0 for _, p, _, _ in rows)  # not committed yet: not seen
            await slow.commit()
            _, rows, horizon = await store.snapshot(horizon)
            assert (TOPIC, 0, None, 1) in rows  # seen by the look after it committed

            assert await store.release([((TOPIC, 1), 1), ((TOPIC, 2), 7)], 1) == 1  # 2 is not ours at 7
            _, rows, horizon = await store.snapshot(horizon)
            assert (TOPIC, 1, None, 1) in rows
            claims = await store.claim([(TOPIC, 1)], 1, me)
            assert claims[(TOPIC, 1)].history == ((1, 0), (2, 0))  # the history before it, then its own
            _, rows, horizon = await store.snapshot(horizon)
            assert (TOPIC, 1, 1, 2) in rows
            assert await store.claim([(TOPIC, 3)], 1, uuid.uuid4()) == {}  # not this broker's incarnation
        finally:
            await other.close()
            await store.close()

    asyncio.run(run())


def test_appends_of_one_loop_turn_go_in_one_statement_each_partition_fenced_on_its_own(pg_dsn):
    """storage/postgres_appends.py (issue 24): the appends several partitions ask for in one turn
    are stored by one statement; a partition not ours at the append's epoch, or whose log does
    not end where its append starts, is Fenced and stores nothing, and the others are stored."""
    from offsetd.storage.postgres_store import Fenced

    topic = uuid.UUID(int=24)

    async def run() -> None:
        store = PostgresStore(pg_dsn)
        await store.open()
        try:
            me = uuid.uuid4()
            await store.register(1, me, "127.0.0.1", 9092, 60_000)
            assert await store.create_topic(TopicRow("appends", topic, 4, {}, False))
            claims = await store.claim([(topic, p) for p in range(3)], 1, me)
            statements: list[str] = []
            pool = store.pool

            class Counting:  # the batcher asks the store for its pool at each statement
                def fetch(self, query: str, *args: object) -> object:
                    statements.append("fetch")
                    return pool.fetch(query, *args)

                def execute(self, query: str, *args: object) -> object:
                    statements.append("execute")
                    return pool.execute(query, *args)
            store.pool = Counting()
            outcomes = await asyncio.gather(
                store.append(topic, 0, 1, claims[(topic, 0)].epoch, [(0, 1, b"a0"), (2, 2, b"a1")]),
                store.append(topic, 1, 1, claims[(topic, 1)].epoch, [(0, 0, b"b0")]),
                store.append(topic, 2, 1, claims[(topic, 2)].epoch + 1, [(0, 0, b"c0")]),  # not its epoch
                store.append(topic, 3, 1, 1, [(0, 0, b"d0")]),  # not ours at all
                return_exceptions=True)
            assert statements == ["fetch"]  # one statement for the four partitions
            store.pool = pool
            assert outcomes[:2] == [None, None]
            assert isinstance(outcomes[2], Fenced) and isinstance(outcomes[3], Fenced)
            assert await store.read(topic, 0, 0) == [(0, 1, b"a0"), (2, 2, b"a1")]
            assert await store.read(topic, 1, 0) == [(0, 0, b"b0")]
            assert await store.read(topic, 2, 0) == [] and await store.read(topic, 3, 0) == []
            # the log's end moved with the appends: the next must start there
            fenced = await asyncio.gather(store.append(topic, 1, 1, claims[(topic, 1)].epoch, [(0, 0, b"again")]),
                                          return_exceptions=True)
            assert isinstance(fenced[0], Fenced)
            await store.append(topic, 1, 1, claims[(topic, 1)].epoch, [(1, 1, b"b1")])
            assert [row[2] for row in await store.read(topic, 1, 0)] == [b"b0", b"b1"]
        finally:
            await store.close()

    asyncio.run(run())
