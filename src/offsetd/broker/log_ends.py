"""Log offsets and record timestamps of every data partition, as the lag views need them.

The embedded engine answers from the partition logs themselves. In cluster mode a broker has an
up-to-date copy only of the partitions it leads; the others are read from PostgreSQL, which holds
every partition: their offsets (`offsetd_partition`, one statement for all, at most once per
`REFRESH_MS`) and the appends holding the records asked about. Never a request to another broker.
A record's timestamp never changes while the record exists, so timestamps are cached.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from typing import Any, Iterator

from ..lag.compute import LogBounds
from ..lag.model import TopicPartitionEnds
from ..records.batch import iter_batches
from ..records.compression import batch_record_timestamps

log = logging.getLogger("offsetd.lag")

REFRESH_MS = 1000          # PostgreSQL's view of other brokers' partitions is at most this old
TIMESTAMP_CACHE = 200_000  # (topic, partition, offset) -> timestamp entries kept


def batch_timestamps(data: bytes | bytearray | memoryview, offset: int) -> dict[int, int]:
    """Offset -> timestamp of every record of the batch holding `offset` in whole batches `data`
    (empty: no such batch). A batch is decoded once for all the offsets a look wants in it: a
    producer's batch may hold thousands of records."""
    for pos, header in iter_batches(data):
        if header.base_offset <= offset <= header.last_offset:
            return dict(batch_record_timestamps(bytes(data[pos:pos + header.size])))
    return {}


def first_at_or_after(data: bytes | bytearray | memoryview, ts: int, min_offset: int) -> int | None:
    """The first offset >= min_offset in whole batches `data` whose record timestamp is >= ts."""
    for pos, header in iter_batches(data):
        if header.max_timestamp < ts or header.last_offset < min_offset:
            continue
        for rec_offset, rec_ts in batch_record_timestamps(bytes(data[pos:pos + header.size])):
            if rec_ts >= ts and rec_offset >= min_offset:
                return rec_offset
    return None


class LogEnds:
    """Bounds, ends and record timestamps of the data partitions (see the module docstring)."""

    def __init__(self, topics: Any, store: Any = None) -> None:
        self.topics = topics  # broker.topics.TopicRegistry (its cluster subclass in cluster mode)
        self.store = store    # PostgresStore in cluster mode, else None
        self._remote: dict[tuple[str, int], tuple[int, int, int | None]] = {}  # (start, next, owner)
        self._refreshed_at = float("-inf")
        self._refreshing: asyncio.Future[None] | None = None
        self._timestamps: dict[tuple[str, int, int], int] = {}

    # ------------------------------------------------------------------ which log answers

    def _local(self, topic: str, partition: int) -> Any:
        """The partition's log when this broker has it current (always, in the embedded engine)."""
        plog = self.topics.partition(topic, partition)
        if plog is None or getattr(plog, "closed", False):
            return None
        return plog if self.store is None or plog.leader else None

    def _data_logs(self) -> Iterator[tuple[str, int, Any]]:
        for topic in self.topics:
            if not topic.internal:
                for index, plog in enumerate(topic.partitions):
                    yield topic.name, index, plog

    # --------------------------------------------------------------------------- offsets

    async def refresh(self) -> None:
        """Cluster mode: read every partition's offsets from PostgreSQL (once per REFRESH_MS;
        concurrent callers share one read). Nothing to do in the embedded engine."""
        if self.store is None or time.monotonic() * 1000 - self._refreshed_at < REFRESH_MS:
            return
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._refresh())
        try:
            await asyncio.shield(self._refreshing)
        finally:
            self._refreshing = None

    async def _refresh(self) -> None:
        try:
            rows = await self.store.partition_offsets()
        except Exception as exc:  # the views show what they knew; the broker's own state is unaffected
            log.warning("reading partition offsets from PostgreSQL failed: %s", exc)
            return
        self._remote = {(name, p): (start, end, owner) for name, p, start, end, owner in rows}
        self._refreshed_at = time.monotonic() * 1000

    def bounds(self, topic: str, partition: int) -> LogBounds | None:
        """Log start and last stable offset; None when the partition is unknown. A partition led
        by another broker: PostgreSQL's start and end (the LSO is its leader's to know)."""
        plog = self._local(topic, partition)
        if plog is not None:
            return LogBounds(plog.log_start_offset, plog.last_stable_offset)
        remote = self._remote.get((topic, partition))
        return None if remote is None else LogBounds(remote[0], remote[1])

    def ends(self) -> list[TopicPartitionEnds]:
        """The data partitions this broker answers for (all of them in the embedded engine, those
        it leads in cluster mode), by topic and partition."""
        rows = [TopicPartitionEnds(name, index, plog.log_start_offset, plog.last_stable_offset, plog.log_end_offset,
                                   getattr(plog, "node_id", None) if self.store is not None else None)
                for name, index, plog in self._data_logs() if self._local(name, index) is not None]
        rows.sort(key=lambda r: (r.topic, r.partition))
        return rows

    # ------------------------------------------------------------------------ timestamps

    def cached_timestamp(self, topic: str, partition: int, offset: int) -> int | None:
        """The record timestamp at `offset` if a previous look read it (None: not read yet)."""
        return self._timestamps.get((topic, partition, offset))

    async def timestamps(self, topic: str, partition: int, offsets: list[int]) -> list[int | None]:
        """The record timestamps at `offsets`, ascending (None: no such record any more, or
        unreadable); offsets in one batch cost one read and one decode."""
        out: list[int | None] = []
        batch: dict[int, int] = {}  # the last batch read
        for offset in offsets:
            key = (topic, partition, offset)
            ts = self._timestamps.get(key)
            if ts is None:
                ts = batch.get(offset)
                if ts is None:
                    batch = await self._batch(topic, partition, offset)
                    ts = batch.get(offset)
                if ts is not None:
                    if len(self._timestamps) >= TIMESTAMP_CACHE:
                        self._timestamps.clear()
                    self._timestamps[key] = ts
            out.append(ts)
        return out

    async def _batch(self, topic: str, partition: int, offset: int) -> dict[int, int]:
        """batch_timestamps of the batch holding `offset`, read from the log or PostgreSQL."""
        try:
            plog = self._local(topic, partition)
            if plog is not None:
                if not plog.log_start_offset <= offset < plog.log_end_offset:
                    return {}
                return batch_timestamps(plog.read(offset, 1), offset)
            found = await self._remote_batch(topic, partition, offset)
            return {} if found is None else batch_timestamps(found, offset)
        except Exception as exc:  # a corrupt or vanished batch: no time lag, never a failed scrape
            log.debug("timestamp of %s-%d@%d: %s", topic, partition, offset, exc)
            return {}

    async def _remote_batch(self, topic: str, partition: int, offset: int) -> bytes | None:
        plog = self.topics.partition(topic, partition)
        if self.store is None or plog is None:
            return None
        row = await self.store.batch_at(plog.topic_id, partition, offset)
        return None if row is None else row[1]

    async def offsets_for_times(self, topic: str, partition: int, times_ms: list[int]) -> list[int | None]:
        """ListOffsets by time for each instant: the first offset whose record timestamp is >= it
        (None: no such record). In cluster mode a partition led elsewhere is searched in
        PostgreSQL: every append's max timestamp in one statement, then the append that may hold
        the answer (an append's max timestamp is its first batch's: producers send one batch per
        partition and request)."""
        plog = self._local(topic, partition)
        if plog is not None:
            out: list[int | None] = []
            for t in times_ms:
                found = plog.offset_for_timestamp(t)
                out.append(None if found is None else found[0])
            return out
        return await self._remote_offsets_for_times(topic, partition, times_ms)

    async def _remote_offsets_for_times(self, topic: str, partition: int, times_ms: list[int]) -> list[int | None]:
        plog = self.topics.partition(topic, partition)
        remote = self._remote.get((topic, partition))
        if self.store is None or plog is None or remote is None:
            return [None] * len(times_ms)
        batches = await self.store.batch_max_timestamps(plog.topic_id, partition)
        bases = [base for base, _ in batches]
        running, highest = [], -1  # the highest timestamp up to each append: a sorted key to bisect
        for _, ts in batches:
            highest = max(highest, ts)
            running.append(highest)
        out: list[int | None] = []
        decoded: dict[int, bytes | None] = {}
        for t in times_ms:
            i = bisect_left(running, t)
            if i == len(running):
                out.append(None)
                continue
            base = bases[i]
            if base not in decoded:
                row = await self.store.batch_at(plog.topic_id, partition, base)
                decoded[base] = None if row is None else row[1]
            data = decoded[base]
            out.append(None if data is None else first_at_or_after(data, t, remote[0]))
        return out
