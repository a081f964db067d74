"""Cluster mode's appends, several partitions per statement: what one turn of the event loop asks
PostgreSQL to store (each partition has one statement in flight, storage/postgres_log.py) goes
in one statement and one COMMIT, so a broker leading many `__consumer_offsets` partitions makes
one round trip and one WAL flush for the commits of a turn instead of one per partition.

Each partition keeps its own fence: its row moves only if this broker owns it at the append's
epoch and the log ends where the append starts, and its batches are inserted only if its row
moved. The statement returns the partitions stored; the others are Fenced, as alone. Rows are
locked in key order, as claims lock them, so a claim and a batch of appends never deadlock.
A partition is in at most one statement at a time (its log keeps one in flight), so a batch
holds each partition once.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["AppendBatcher", "Fenced", "rows_changed"]

# One partition's appends (base offset, last offset, bytes), each following the one before.
Appends = list[tuple[int, int, bytes]]

_APPEND = """
WITH p AS (
    UPDATE offsetd_partition SET next_offset = $6 + 1
    WHERE topic_id = $1 AND partition = $2 AND owner = $3 AND epoch = $4 AND next_offset = $5
    RETURNING 1)
INSERT INTO offsetd_batch (topic_id, partition, base_offset, last_offset, epoch, bytes)
SELECT $1, $2, $5, $6, $4, $7 FROM p"""

# Partitions $1/$2 at epochs $3, their logs ending at $4, to end after $5; the appends' rows
# $7-$11 (partition, base and last offset, bytes); $6 is this broker.
_APPEND_PARTITIONS = """
WITH u AS (
    SELECT * FROM unnest($1::uuid[], $2::int[], $3::int[], $4::bigint[], $5::bigint[])
        AS u (topic_id, partition, epoch, expect, next_end)),
k AS (
    SELECT o.topic_id, o.partition FROM offsetd_partition o
    JOIN u ON o.topic_id = u.topic_id AND o.partition = u.partition
    WHERE o.owner = $6 AND o.epoch = u.epoch AND o.next_offset = u.expect
    ORDER BY o.topic_id, o.partition
    FOR UPDATE OF o),
p AS (
    UPDATE offsetd_partition o SET next_offset = u.next_end FROM u, k
    WHERE o.topic_id = k.topic_id AND o.partition = k.partition
      AND u.topic_id = k.topic_id AND u.partition = k.partition
      AND o.owner = $6 AND o.epoch = u.epoch AND o.next_offset = u.expect
    RETURNING o.topic_id, o.partition, o.epoch)
INSERT INTO offsetd_batch (topic_id, partition, base_offset, last_offset, epoch, bytes)
SELECT a.topic_id, a.partition, a.base_offset, a.last_offset, p.epoch, a.bytes
FROM unnest($7::uuid[], $8::int[], $9::bigint[], $10::bigint[], $11::bytea[])
    AS a (topic_id, partition, base_offset, last_offset, bytes)
JOIN p ON p.topic_id = a.topic_id AND p.partition = a.partition
RETURNING topic_id, partition"""


class Fenced(Exception):
    """The partition's owner or epoch in PostgreSQL is not the caller's any more (for an append:
    or its log does not end where the append starts; nothing of it was stored)."""


@dataclass(slots=True)
class _Pending:
    topic_id: uuid.UUID
    partition: int
    node_id: int
    epoch: int
    appends: Appends
    done: "asyncio.Future[None]"

    def fenced(self) -> Fenced:
        return Fenced(f"partition {self.topic_id}/{self.partition}: not owned by broker {self.node_id} at epoch "
                      f"{self.epoch} with its log ending at {self.appends[0][0]}")


class AppendBatcher:
    """Stores the appends one broker asks for in a loop turn together (see the module docstring)."""

    def __init__(self, pool: Callable[[], Any]) -> None:
        self._pool = pool  # the store's asyncpg pool (asked at each statement: it is made at open)
        self._pending: list[_Pending] = []

    async def append(self, topic_id: uuid.UUID, partition: int, node_id: int, epoch: int, appends: Appends) -> None:
        """Store `appends` of one partition with whatever else this turn stores; Fenced, or the
        driver's exception (the outcome then unknown)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(topic_id, partition, node_id, epoch, appends, done))
        if len(self._pending) == 1:  # the first of this turn: store them all once the turn's others asked
            asyncio.get_running_loop().call_soon(self._flush)
        await done

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        asyncio.ensure_future(self._store(batch))

    async def _store(self, batch: list[_Pending]) -> None:
        try:
            if len(batch) == 1:
                stored = await self._store_one(batch[0])
            else:
                stored = await self._store_many(batch)
        except BaseException as exc:
            for pending in batch:
                if not pending.done.done():
                    pending.done.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for pending, ok in zip(batch, stored):
            if not pending.done.done():
                if ok:
                    pending.done.set_result(None)
                else:
                    pending.done.set_exception(pending.fenced())

    async def _store_one(self, pending: _Pending) -> list[bool]:
        appends = pending.appends
        if len(appends) == 1:
            status = await self._pool().execute(_APPEND, pending.topic_id, pending.partition, pending.node_id,
                                                pending.epoch, *appends[0])
            return [rows_changed(status) == 1]
        return await self._store_many([pending])

    async def _store_many(self, batch: list[_Pending]) -> list[bool]:
        rows = [(p.topic_id, p.partition, base, last, data) for p in batch for base, last, data in p.appends]
        stored = await self._pool().fetch(
            _APPEND_PARTITIONS, [p.topic_id for p in batch], [p.partition for p in batch], [p.epoch for p in batch],
            [p.appends[0][0] for p in batch], [p.appends[-1][1] + 1 for p in batch], batch[0].node_id,
            [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows],
            [r[4] for r in rows])
        counts: dict[tuple[uuid.UUID, int], int] = {}
        for row in stored:
            key = (row[0], row[1])
            counts[key] = counts.get(key, 0) + 1
        return [counts.get((p.topic_id, p.partition), 0) == len(p.appends) for p in batch]


def rows_changed(status: str) -> int:
    """asyncpg's command tag ('INSERT 0 1', 'UPDATE 3', 'DELETE 0') -> rows affected."""
    return int(status.rsplit(" ", 1)[-1])
