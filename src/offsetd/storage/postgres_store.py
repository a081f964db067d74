"""The PostgreSQL engine's tables and statements: every SQL string of cluster mode lives here (but
those of ACLs and SCRAM credentials: storage/postgres_security.py).

Tables (created by the first broker, under an advisory lock so three brokers starting at once do
not race on CREATE):

* `offsetd_meta(key, value)`: `cluster.id`, `schema.version`.
* `offsetd_broker(node_id, incarnation, host, port, expires_at)`: one lease per broker, judged by
  PostgreSQL's clock (`now()`), so broker clocks never matter. `incarnation` is a random id per
  process: a restarted broker takes its row over, and the old process (if it still runs) finds
  its renewals failing.
* `offsetd_topic(name, topic_id, partitions, configs, internal)`: the topic catalogue.
* `offsetd_group_config(group_id, configs)`: per-group configs (offsets.retention.minutes).
* `offsetd_partition(topic_id, partition, owner, epoch, next_offset, start_offset, changed)`:
  ownership. `epoch` is bumped by every claim and is the leader epoch clients see; `changed` is
  the id of the transaction that last changed owner or epoch (looks read only what changed).
* `offsetd_leader_epoch(topic_id, partition, epoch, start_offset)`: the leader-epoch history
  (Kafka's `leader-epoch-checkpoint`, KIP-320), one row per claim, written by the claim itself:
  the epoch leads from the log end it found. Every broker that claims the partition next reads
  the same history, so OffsetForLeaderEpoch answers the same after a failover.
* `offsetd_batch(topic_id, partition, base_offset, last_offset, epoch, bytes)`: one row per
  append (a statement may store several): the magic-v2 batches exactly as the log holds them
  (base offsets and leader epoch patched), opaque, so `__consumer_offsets` stays byte-exact.
  `bytes` is STORAGE EXTERNAL: batches are compressed by their producers, or tiny, and pglz would
  only cost CPU.

Fencing: an append (or several following one another, stored together) is one autocommit
statement that moves `next_offset` only where owner, epoch and `next_offset` are what the appender
believes; when they are not, it inserts nothing (0 rows) and the appender has lost the partition.
No transaction is held across requests: a frozen broker idle in a transaction would keep its row
locks and block the next claim.
"""

from __future__ import annotations

import functools
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from offsetd.storage.cold_range import HEAD_BYTES, HeaderRow
from offsetd.storage.log_dir import StorageError
from offsetd.storage.postgres_appends import AppendBatcher, Fenced
from offsetd.storage.postgres_appends import rows_changed as _rows_changed
from offsetd.storage.postgres_connection import OneLineErrors, OutageLog, check_writable, session_attrs
from offsetd.storage.postgres_security import SECURITY_SCHEMA

log = logging.getLogger("offsetd.storage")

SCHEMA_LOCK = 0x6F66667365746400  # pg_advisory_xact_lock key for creating the schema ("offsetd\0")
NOTIFY_CHANNEL = "offsetd_cluster"  # payload: "ownership", "topics" or "group_configs"
# offsetd_meta's `schema.version`: the SCHEMA below (with postgres_security.py's) is applied when a
# database's differs. Raise it whenever the schema changes.
SCHEMA_VERSION = "2"

SCHEMA = """
CREATE TABLE IF NOT EXISTS offsetd_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS offsetd_broker (
    node_id int PRIMARY KEY, incarnation uuid NOT NULL, host text NOT NULL, port int NOT NULL,
    expires_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS offsetd_topic (
    name text PRIMARY KEY, topic_id uuid NOT NULL UNIQUE, partitions int NOT NULL,
    configs jsonb NOT NULL, internal boolean NOT NULL);
CREATE TABLE IF NOT EXISTS offsetd_partition (
    topic_id uuid NOT NULL REFERENCES offsetd_topic (topic_id) ON DELETE CASCADE,
    partition int NOT NULL, owner int, epoch int NOT NULL DEFAULT 0,
    next_offset bigint NOT NULL DEFAULT 0, start_offset bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, partition));
CREATE TABLE IF NOT EXISTS offsetd_batch (
    topic_id uuid NOT NULL, partition int NOT NULL, base_offset bigint NOT NULL,
    last_offset bigint NOT NULL, epoch int NOT NULL, bytes bytea NOT NULL,
    PRIMARY KEY (topic_id, partition, base_offset));
ALTER TABLE offsetd_batch ALTER COLUMN bytes SET STORAGE EXTERNAL;
CREATE TABLE IF NOT EXISTS offsetd_group_config (group_id text PRIMARY KEY, configs jsonb NOT NULL);
CREATE SEQUENCE IF NOT EXISTS offsetd_producer_id INCREMENT BY 1000 MINVALUE 0 START 0;
ALTER TABLE offsetd_broker ADD COLUMN IF NOT EXISTS endpoints jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE offsetd_partition ADD COLUMN IF NOT EXISTS changed bigint NOT NULL
    DEFAULT pg_current_xact_id()::text::bigint;
CREATE INDEX IF NOT EXISTS offsetd_partition_changed ON offsetd_partition (changed);
CREATE TABLE IF NOT EXISTS offsetd_leader_epoch (
    topic_id uuid NOT NULL, partition int NOT NULL, epoch int NOT NULL, start_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, epoch),
    FOREIGN KEY (topic_id, partition) REFERENCES offsetd_partition (topic_id, partition) ON DELETE CASCADE);
"""

_REGISTER = """
INSERT INTO offsetd_broker (node_id, incarnation, host, port, expires_at, endpoints)
VALUES ($1, $2, $3, $4, now() + $5 * interval '1 millisecond', $6::jsonb)
ON CONFLICT (node_id) DO UPDATE SET incarnation = excluded.incarnation, host = excluded.host,
    port = excluded.port, expires_at = excluded.expires_at, endpoints = excluded.endpoints"""

_RENEW = """
UPDATE offsetd_broker SET expires_at = now() + $3 * interval '1 millisecond'
WHERE node_id = $1 AND incarnation = $2"""

_UNREGISTER = "DELETE FROM offsetd_broker WHERE node_id = $1 AND incarnation = $2"

_LIVE_BROKERS = ("SELECT node_id, host, port, endpoints::text FROM offsetd_broker WHERE expires_at > now() "
                 "ORDER BY node_id")

_PARTITIONS = "SELECT topic_id, partition, owner, epoch FROM offsetd_partition"
_PARTITIONS_CHANGED = _PARTITIONS + " WHERE changed >= $1"
_HORIZON = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

_TOPICS = "SELECT name, topic_id, partitions, configs, internal FROM offsetd_topic"

# `changed`: the id of the transaction that last changed a partition's owner or epoch (its
# creation included). A look at ownership reads only the rows changed by transactions its previous
# look could not see: those have ids at or above that look's snapshot xmin (every older transaction
# had ended), so a look costs what changed, not the partition count (issue 26).
_CHANGED = "pg_current_xact_id()::text::bigint"

# A claim succeeds for a partition without a live owner (or held by an earlier incarnation of this
# node), and only while the claimer's own lease is valid; its new epoch enters the leader-epoch
# history in the same statement, starting at the log end, and the history before it comes back
# with the claim. Many partitions are claimed in one statement (a broker taking over a dead one's
# share of 100,000), their rows locked in key order first, as releases lock theirs, so that two
# brokers' statements over the same rows wait for each other instead of deadlocking. It tells the peers at once, so their Metadata and FindCoordinator name the
# new owner while it is still catching up (its coordinator answers COORDINATOR_LOAD_IN_PROGRESS
# meanwhile, which clients retry within 100 ms).
_CLAIM = f"""
WITH k AS (
    SELECT p.topic_id, p.partition FROM offsetd_partition p
    JOIN unnest($1::uuid[], $2::int[]) AS u (topic_id, partition)
      ON p.topic_id = u.topic_id AND p.partition = u.partition
    ORDER BY p.topic_id, p.partition
    FOR UPDATE OF p),
c AS (
    UPDATE offsetd_partition p SET owner = $3, epoch = p.epoch + 1, changed = {_CHANGED}
    FROM k
    WHERE p.topic_id = k.topic_id AND p.partition = k.partition
      AND (p.owner IS NULL OR p.owner = $3 OR NOT EXISTS (
            SELECT 1 FROM offsetd_broker b WHERE b.node_id = p.owner AND b.expires_at > now()))
      AND EXISTS (SELECT 1 FROM offsetd_broker b
                  WHERE b.node_id = $3 AND b.incarnation = $4 AND b.expires_at > now())
    RETURNING p.topic_id, p.partition, p.epoch, p.next_offset, p.start_offset),
h AS (
    INSERT INTO offsetd_leader_epoch (topic_id, partition, epoch, start_offset)
    SELECT topic_id, partition, epoch, next_offset FROM c ON CONFLICT DO NOTHING)
SELECT c.topic_id, c.partition, c.epoch, c.next_offset, c.start_offset,
       ARRAY(SELECT ARRAY[e.epoch::bigint, e.start_offset] FROM offsetd_leader_epoch e
             WHERE e.topic_id = c.topic_id AND e.partition = c.partition AND e.epoch < c.epoch
             ORDER BY e.epoch),
       pg_notify('{NOTIFY_CHANNEL}', 'ownership')
FROM c"""

# A release tells the peers at once (the next owner claims without waiting for its heartbeat);
# many partitions at a time, each only where this broker still owns it at the given epoch.
_RELEASE = f"""
WITH k AS (
    SELECT p.topic_id, p.partition, u.epoch FROM offsetd_partition p
    JOIN unnest($1::uuid[], $2::int[], $4::int[]) AS u (topic_id, partition, epoch)
      ON p.topic_id = u.topic_id AND p.partition = u.partition
    WHERE p.owner = $3
    ORDER BY p.topic_id, p.partition
    FOR UPDATE OF p),
r AS (
    UPDATE offsetd_partition p SET owner = NULL, changed = {_CHANGED}
    FROM k
    WHERE p.topic_id = k.topic_id AND p.partition = k.partition AND p.owner = $3 AND p.epoch = k.epoch
    RETURNING 1)
SELECT pg_notify('{NOTIFY_CHANNEL}', 'ownership') FROM r"""

# One append, offsets $5-$6 (a partition's usual statement: cheaper to plan and run than _APPENDS).
_READ = """
SELECT base_offset, last_offset, bytes FROM offsetd_batch
WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 ORDER BY base_offset LIMIT $4"""

# What the lag views read of partitions other brokers lead (metrics, console): every partition's
# offsets in one statement, and the append holding one offset (by the primary key, newest first).
_PARTITION_OFFSETS = """
SELECT t.name, p.partition, p.start_offset, p.next_offset, p.owner FROM offsetd_partition p
JOIN offsetd_topic t USING (topic_id) WHERE NOT t.internal"""

_BATCH_AT = """
SELECT base_offset, bytes FROM offsetd_batch WHERE topic_id = $1 AND partition = $2 AND base_offset <= $3
ORDER BY base_offset DESC LIMIT 1"""

# Each append's max timestamp (bytes 35..43 of its first v2 batch header, read without fetching the rest:
# the column's storage is EXTERNAL, so a substring reads only that slice).
_BATCH_MAX_TIMESTAMPS = """
SELECT base_offset, substring(bytes from 36 for 8) FROM offsetd_batch WHERE topic_id = $1 AND partition = $2
ORDER BY base_offset"""

# The appends of a partition from an offset on, by their heads (storage/cold_range.py): the whole
# bytes of short ones (a marker), else the first $4 (a substring of an EXTERNAL column reads only
# that slice), and every append's size.
_HEADS = """
SELECT base_offset, last_offset, octet_length(bytes),
       CASE WHEN octet_length(bytes) <= $4 THEN bytes ELSE substring(bytes from 1 for $4) END
FROM offsetd_batch WHERE topic_id = $1 AND partition = $2 AND last_offset >= $3 ORDER BY base_offset"""

_AT_LAST_OFFSET = """
SELECT base_offset, bytes FROM offsetd_batch WHERE topic_id = $1 AND partition = $2 AND last_offset = $3"""

# Retention: the owner moves the log start and drops whole appends below it, fenced like appends,
# and the leader epochs that ended at or before it (a newer one starts there or earlier).
_ADVANCE_START = """
WITH p AS (
    UPDATE offsetd_partition SET start_offset = $5
    WHERE topic_id = $1 AND partition = $2 AND owner = $3 AND epoch = $4 AND start_offset < $5
    RETURNING 1),
h AS (
    DELETE FROM offsetd_leader_epoch h USING p
    WHERE h.topic_id = $1 AND h.partition = $2 AND EXISTS (
        SELECT 1 FROM offsetd_leader_epoch n
        WHERE n.topic_id = $1 AND n.partition = $2 AND n.epoch > h.epoch AND n.start_offset <= $5))
DELETE FROM offsetd_batch b USING p
WHERE b.topic_id = $1 AND b.partition = $2 AND b.last_offset < $5"""


OwnerRow = tuple[uuid.UUID, int, "int | None", int]  # (topic id, partition, owner, epoch)


class StoreUnavailable(StorageError):
    """PostgreSQL did not answer (down, unreachable, timed out, or the statement failed): the
    outcome of a write is unknown (it may have committed). KAFKA_STORAGE_ERROR, retriable."""


T = TypeVar("T")


def _unavailable_on_failure(method: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Every driver or network failure of a statement becomes StoreUnavailable (Fenced passes)."""
    @functools.wraps(method)
    async def wrapper(self: "PostgresStore", *args: Any) -> T:
        try:
            result = await method(self, *args)
        except Fenced:
            self.outage.answered()
            raise
        except StoreUnavailable as exc:
            self.outage.failed(str(exc))
            raise
        except Exception as exc:  # named by statement: a timeout's message is empty
            self.outage.failed(f"{method.__name__}: {type(exc).__name__}: {exc}")
            raise StoreUnavailable(f"PostgreSQL ({method.__name__}): {type(exc).__name__}: {exc}") from exc
        self.outage.answered()
        return result
    return wrapper


@dataclass(frozen=True, slots=True)
class Claim:
    """A successful claim: the new epoch and where the partition's log stands."""

    epoch: int
    next_offset: int
    start_offset: int
    # The leader-epoch history up to this epoch, (epoch, start offset) oldest first.
    history: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class TopicRow:
    """A topic as the shared catalogue has it."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str]
    internal: bool


@dataclass(frozen=True, slots=True)
class BrokerRow:
    """A live broker and where clients reach it: `host`/`port` of its first listener, and per
    listener name its advertised (host, port) (empty for a broker registered before listeners
    were recorded: every listener then gets host/port)."""

    node_id: int
    host: str
    port: int
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)

    def on(self, listener: str) -> tuple[str, int]:
        """Where clients of `listener` reach this broker."""
        return self.endpoints.get(listener) or (self.host, self.port)


async def _schema_version(conn: Any) -> str | None:
    """offsetd_meta's `schema.version` (None in a new database, or one from before versions)."""
    if await conn.fetchval("SELECT to_regclass('offsetd_meta')") is None:
        return None
    return await conn.fetchval("SELECT value FROM offsetd_meta WHERE key = 'schema.version'")  # type: ignore[no-any-return]


class PostgresStore:
    """The statements of cluster mode over one asyncpg pool (postgres_security.py has the rest)."""

    def __init__(self, dsn: str, *, pool_size: int = 8, timeout_s: float = 30.0) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        # Per statement: longer than a lease is pointless (the broker has lost its partitions).
        self.timeout_s = timeout_s
        self.connect_args = session_attrs(dsn)  # the primary only (storage/postgres_connection.py)
        self.outage = OutageLog()
        self.pool: Any = None
        # The lease's own connection: a renewal never waits for a free connection of the pool
        # (a broker leading 30,000 partitions can have all of them busy with appends and claims).
        self.lease_pool: Any = None
        self._appends = AppendBatcher(lambda: self.pool)

    async def open(self) -> str:
        """Connect, create the schema if missing, and return the cluster id."""
        import asyncpg  # the engine's driver, loaded only in cluster mode

        async def init(conn: Any) -> None:
            await check_writable(conn)  # never a standby, whatever the URL's target_session_attrs
            # synchronous_commit=on: a COMMIT returns only once the WAL is flushed (an ack is
            # durable); the timeouts are safety nets against anything holding a lock.
            await conn.execute("SET synchronous_commit = on; SET idle_in_transaction_session_timeout = 5000; "
                               "SET lock_timeout = 5000")

        async def keep(conn: Any) -> None:
            """No reset on release: asyncpg's default sends `SELECT pg_advisory_unlock_all(); CLOSE ALL;
            UNLISTEN *; RESET ALL` after every pool.execute, a second round trip per append, and these
            connections keep no session state (LISTEN has a connection of its own)."""

        pool_log = logging.getLogger("asyncpg.pool")
        if not any(isinstance(f, OneLineErrors) for f in pool_log.filters):
            pool_log.addFilter(OneLineErrors())
        self.pool = await asyncpg.create_pool(self.dsn, min_size=2, max_size=self.pool_size, init=init, reset=keep,
                                              command_timeout=self.timeout_s, timeout=self.timeout_s,
                                              **self.connect_args)
        self.lease_pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=1, init=init, reset=keep,
                                                    command_timeout=self.timeout_s, timeout=self.timeout_s,
                                                    **self.connect_args)
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
                # The DDL only when the schema is older than this code's: ALTER TABLE locks its table
                # exclusively even when there is nothing to add, and a running broker's claim
                # (partitions, then brokers) would deadlock with it (brokers, then partitions).
                if await _schema_version(conn) != SCHEMA_VERSION:
                    await conn.execute(SCHEMA + SECURITY_SCHEMA)
                    await conn.execute("INSERT INTO offsetd_meta VALUES ('schema.version', $1) ON CONFLICT (key) "
                                       "DO UPDATE SET value = excluded.value", SCHEMA_VERSION)
                await conn.execute("INSERT INTO offsetd_meta VALUES ('cluster.id', $1) ON CONFLICT DO NOTHING",
                                   uuid.uuid4().hex[:22])
            return str(await conn.fetchval("SELECT value FROM offsetd_meta WHERE key = 'cluster.id'"))

    async def close(self) -> None:
        for pool in (self.pool, self.lease_pool):
            if pool is not None:
                await pool.close()
        self.pool = self.lease_pool = None

    # ---------------------------------------------------------------------- brokers

    @_unavailable_on_failure
    async def register(self, node_id: int, incarnation: uuid.UUID, host: str, port: int, ttl_ms: int,
                       endpoints: dict[str, tuple[str, int]] | None = None) -> None:
        """Take the lease of `node_id`, with its advertised endpoint per listener name."""
        listeners = {name: [h, p] for name, (h, p) in (endpoints or {}).items()}
        await self.lease_pool.execute(_REGISTER, node_id, incarnation, host, port, ttl_ms, json.dumps(listeners))

    @_unavailable_on_failure
    async def renew(self, node_id: int, incarnation: uuid.UUID, ttl_ms: int) -> bool:
        """Extend the lease; False when another process took this node id over."""
        return _rows_changed(await self.lease_pool.execute(_RENEW, node_id, incarnation, ttl_ms)) == 1

    @_unavailable_on_failure
    async def unregister(self, node_id: int, incarnation: uuid.UUID) -> None:
        await self.lease_pool.execute(_UNREGISTER, node_id, incarnation)

    @_unavailable_on_failure
    async def snapshot(self, since: int | None = None) -> tuple[list[BrokerRow], list[OwnerRow], int]:
        """Live brokers and (topic id, partition, owner, epoch) of every partition, or with `since`
        only of those changed by transactions at or after it (possibly more), read together; and
        the horizon to pass as `since` next time (this read's snapshot xmin)."""
        async with self.pool.acquire() as conn:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                brokers = [BrokerRow(r[0], r[1], r[2], {name: (h, p) for name, (h, p) in json.loads(r[3]).items()})
                           for r in await conn.fetch(_LIVE_BROKERS)]
                horizon = int(await conn.fetchval(_HORIZON))
                rows = await (conn.fetch(_PARTITIONS) if since is None else conn.fetch(_PARTITIONS_CHANGED, since))
        return brokers, [tuple(r) for r in rows], horizon  # type: ignore[misc]

    @_unavailable_on_failure
    async def notify(self, what: str) -> None:
        await self.pool.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, what)

    # ------------------------------------------------------------------- ownership

    @_unavailable_on_failure
    async def claim(self, keys: list[tuple[uuid.UUID, int]], node_id: int,
                    incarnation: uuid.UUID) -> dict[tuple[uuid.UUID, int], Claim]:
        """Claim the partitions `keys` (topic id, partition) in one statement: those taken, with
        their claims (the others have a live owner, or this broker's lease lapsed)."""
        rows = await self.pool.fetch(_CLAIM, [k[0] for k in keys], [k[1] for k in keys], node_id, incarnation)
        return {(r[0], r[1]): Claim(r[2], r[3], r[4], tuple((int(e), int(o)) for e, o in r[5]) + ((r[2], r[3]),))
                for r in rows}

    @_unavailable_on_failure
    async def release(self, held: list[tuple[tuple[uuid.UUID, int], int]], node_id: int) -> int:
        """Set free the partitions `held` ((topic id, partition), epoch) this broker owns at those
        epochs, in one statement; how many were."""
        rows = await self.pool.fetch(_RELEASE, [k[0] for k, _ in held], [k[1] for k, _ in held], node_id,
                                     [e for _, e in held])
        return len(rows)

    # ------------------------------------------------------------------------- log

    @_unavailable_on_failure
    async def append(self, topic_id: uuid.UUID, partition: int, node_id: int, epoch: int,
                     appends: list[tuple[int, int, bytes]]) -> None:
        """Store `appends` (base offset, last offset, bytes), each following the one before, with
        the other partitions' appends of this loop turn in one statement (postgres_appends.py);
        Fenced when this broker no longer owns the partition at `epoch` (or the partition's end
        is not the first base offset): then nothing of it was written."""
        await self._appends.append(topic_id, partition, node_id, epoch, appends)

    @_unavailable_on_failure
    async def replace_range(self, topic_id: uuid.UUID, partition: int, node_id: int, epoch: int, start: int,
                            end: int, rows: list[tuple[int, int, bytes]]) -> None:
        """Compaction: the appends in offsets [start, end) become `rows` (base, last, bytes), the
        cleaned batches. One short transaction, only while this broker still owns the partition at
        `epoch` (its row is locked meanwhile, so no claim slips in between); Fenced if not."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                owner = await conn.fetchval("SELECT 1 FROM offsetd_partition WHERE topic_id = $1 AND partition = $2 "
                                            "AND owner = $3 AND epoch = $4 FOR UPDATE", topic_id, partition, node_id,
                                            epoch)
                if owner is None:
                    raise Fenced(f"partition {topic_id}/{partition}: not owned by broker {node_id} at epoch {epoch}")
                await conn.execute("DELETE FROM offsetd_batch WHERE topic_id = $1 AND partition = $2 "
                                   "AND base_offset >= $3 AND base_offset < $4", topic_id, partition, start, end)
                await conn.copy_records_to_table(
                    "offsetd_batch", columns=["topic_id", "partition", "base_offset", "last_offset", "epoch", "bytes"],
                    records=[(topic_id, partition, base, last, epoch, data) for base, last, data in rows])

    @_unavailable_on_failure
    async def read(self, topic_id: uuid.UUID, partition: int, offset: int, limit: int = 500) -> list[tuple[int, int, bytes]]:
        """Appends holding offsets >= `offset`, oldest first: (base offset, last offset, bytes)."""
        rows = await self.pool.fetch(_READ, topic_id, partition, offset, limit)
        return [(r[0], r[1], r[2]) for r in rows]

    @_unavailable_on_failure
    async def heads(self, topic_id: uuid.UUID, partition: int, offset: int) -> list[HeaderRow]:
        """(base offset, last offset, size, first HEAD_BYTES bytes) of the appends holding offsets
        >= `offset`, oldest first (cold_range.py)."""
        rows = await self.pool.fetch(_HEADS, topic_id, partition, offset, HEAD_BYTES)
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    @_unavailable_on_failure
    async def partition_offsets(self) -> list[tuple[str, int, int, int, int | None]]:
        """(topic, partition, log start, next offset, owner) of every partition of every data topic."""
        return [(r[0], r[1], r[2], r[3], r[4]) for r in await self.pool.fetch(_PARTITION_OFFSETS)]

    @_unavailable_on_failure
    async def batch_at(self, topic_id: uuid.UUID, partition: int, offset: int) -> tuple[int, bytes] | None:
        """The append holding `offset` (or the last one before it): (base offset, bytes), or None."""
        row = await self.pool.fetchrow(_BATCH_AT, topic_id, partition, offset)
        return None if row is None else (row[0], row[1])

    @_unavailable_on_failure
    async def batch_max_timestamps(self, topic_id: uuid.UUID, partition: int) -> list[tuple[int, int]]:
        """(base offset, max timestamp) of every append of the partition, in offset order."""
        rows = await self.pool.fetch(_BATCH_MAX_TIMESTAMPS, topic_id, partition)
        return [(r[0], int.from_bytes(r[1], "big", signed=True)) for r in rows]

    @_unavailable_on_failure
    async def ending_at(self, topic_id: uuid.UUID, partition: int, last_offset: int) -> tuple[int, bytes] | None:
        """The append whose last offset is `last_offset`: (base offset, bytes), or None."""
        row = await self.pool.fetchrow(_AT_LAST_OFFSET, topic_id, partition, last_offset)
        return None if row is None else (row[0], row[1])

    @_unavailable_on_failure
    async def advance_start(self, topic_id: uuid.UUID, partition: int, node_id: int, epoch: int, start: int) -> None:
        """Retention: drop appends wholly below `start` (only the owner at `epoch` may)."""
        await self.pool.execute(_ADVANCE_START, topic_id, partition, node_id, epoch, start)

    # ------------------------------------------------------------------- catalogue

    @_unavailable_on_failure
    async def topics(self) -> list[TopicRow]:
        rows = await self.pool.fetch(_TOPICS)
        return [TopicRow(r[0], r[1], r[2], json.loads(r[3]), r[4]) for r in rows]

    @_unavailable_on_failure
    async def create_topic(self, topic: TopicRow) -> bool:
        """Add a topic and its partitions (unowned); False when the name is taken."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                status = await conn.execute(
                    "INSERT INTO offsetd_topic VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                    topic.name, topic.topic_id, topic.partitions, json.dumps(topic.configs), topic.internal)
                if _rows_changed(status) != 1:
                    return False
                await conn.executemany("INSERT INTO offsetd_partition (topic_id, partition) VALUES ($1, $2)",
                                       [(topic.topic_id, p) for p in range(topic.partitions)])
                await conn.execute("SELECT pg_notify($1, 'topics')", NOTIFY_CHANNEL)
        return True

    @_unavailable_on_failure
    async def add_partitions(self, topic_id: uuid.UUID, current: int, count: int) -> bool:
        """Grow a topic from `current` to `count` partitions; False if someone else changed it."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                status = await conn.execute("UPDATE offsetd_topic SET partitions = $3 WHERE topic_id = $1 "
                                            "AND partitions = $2", topic_id, current, count)
                if _rows_changed(status) != 1:
                    return False
                await conn.executemany("INSERT INTO offsetd_partition (topic_id, partition) VALUES ($1, $2)",
                                       [(topic_id, p) for p in range(current, count)])
                await conn.execute("SELECT pg_notify($1, 'topics')", NOTIFY_CHANNEL)
        return True

    @_unavailable_on_failure
    async def delete_topic(self, topic_id: uuid.UUID) -> bool:
        """Remove a topic, its partitions and its data; False if it was already gone."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                status = await conn.execute("DELETE FROM offsetd_topic WHERE topic_id = $1", topic_id)
                await conn.execute("DELETE FROM offsetd_batch WHERE topic_id = $1", topic_id)
                await conn.execute("SELECT pg_notify($1, 'topics')", NOTIFY_CHANNEL)
        return _rows_changed(status) == 1

    @_unavailable_on_failure
    async def group_configs(self) -> dict[str, dict[str, str]]:
        rows = await self.pool.fetch("SELECT group_id, configs FROM offsetd_group_config")
        return {r[0]: json.loads(r[1]) for r in rows}

    @_unavailable_on_failure
    async def set_group_config(self, group_id: str, configs: dict[str, str]) -> None:
        """Store a group's configs (none: the row goes) and tell every broker."""
        async with self.pool.acquire() as conn:
            async with conn.transaction():
                if configs:
                    await conn.execute("INSERT INTO offsetd_group_config VALUES ($1, $2) ON CONFLICT (group_id) "
                                       "DO UPDATE SET configs = excluded.configs", group_id, json.dumps(configs))
                else:
                    await conn.execute("DELETE FROM offsetd_group_config WHERE group_id = $1", group_id)
                await conn.execute("SELECT pg_notify($1, 'group_configs')", NOTIFY_CHANNEL)

    # ---------------------------------------------------------------- producer ids

    @_unavailable_on_failure
    async def producer_id_block(self) -> int:
        """The first of 1000 producer ids no other broker will ever hand out."""
        return int(await self.pool.fetchval("SELECT nextval('offsetd_producer_id')"))

    # ------------------------------------------------------------------ listening

    @_unavailable_on_failure
    async def listen(self, callback: Any) -> Any:
        """A dedicated connection delivering NOTIFY payloads to callback(payload)."""
        import asyncpg

        conn = await asyncpg.connect(self.dsn, timeout=self.timeout_s, **self.connect_args)
        await conn.add_listener(NOTIFY_CHANNEL, lambda _c, _pid, _ch, payload: callback(payload))
        return conn
