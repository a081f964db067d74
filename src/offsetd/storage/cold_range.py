"""The start of a cluster partition's log that only PostgreSQL holds: a new owner's copy keeps the tail.

A broker that claims a partition whose log is larger than `local.retention.bytes` (and that it
has no matching copy of) does not copy all of it: it copies the appends of the last
`local.retention.bytes`, from offset S, and keeps of those below S only what a leader must know
(issue 26), read from PostgreSQL as batch headers (a few dozen bytes an append, not the records):

* the producer state as of S (idempotent producers' last batches, open transactions and their
  first offsets), replayed from the headers and markers below S exactly as the copy would have
  built it, so duplicates, sequences and the LSO are judged the same after the takeover;
* the aborted transactions whose ABORT marker is below S (a read_committed Fetch there is told
  about them; one whose marker is at or above S is in the copy's own `.txnindex`);
* per append: offsets, size and largest timestamp, for retention, ListOffsets and reads.

Reads below S are answered from appends read from PostgreSQL a chunk at a time and kept here
(`chunks`, at most CHUNKS of them, and every partition's under one ChunkBudget, the oldest loaded
going first): a read of an offset not yet loaded answers no records, and the owner loads the chunk
and wakes the long poll, which reads again. Retention drops this range's
oldest appends before it touches the copy. Pure code: the PostgreSQL engine
(storage/postgres_log.py) does the I/O.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from typing import Any

from offsetd.records.batch import BATCH_HEADER_SIZE, InvalidBatch, iter_batches, parse_header
from offsetd.records.compression import batch_record_timestamps
from offsetd.records.control import parse_marker
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_retention import expired_prefix
from offsetd.storage.producer_state import AbortedTxn, ProducerStateManager

__all__ = ["ChunkBudget", "ColdRange", "HeaderRow", "HEAD_BYTES", "NotLoaded", "needs_whole", "scan_headers",
           "tail_start"]

# What PostgreSQL returns of an append to scan it: the v2 batch header, or the whole append when it
# is no longer than this (a transaction marker is ~78 bytes; its record tells COMMIT from ABORT).
HEAD_BYTES = 160
MAGIC_AT = 16  # byte of a batch header holding its magic (records v0/v1 have no producer fields)
CHUNK_BYTES = 4 * 1024 * 1024  # appends read from PostgreSQL per load
CHUNKS = 2  # chunks kept per partition (the one being read and the one after it)
BUDGET_BYTES = 256 * 1024 * 1024  # chunks kept in all, whatever the partitions being read

HeaderRow = tuple[int, int, int, bytes]
"""(base offset, last offset, size in bytes, its first HEAD_BYTES bytes) of one stored append."""


class NotLoaded(Exception):
    """A lookup needs an append of the range that is not loaded yet; `loading`: the owner's read
    of it from PostgreSQL, to wait for before asking again (ListOffsets does)."""

    def __init__(self, message: str, loading: Any = None) -> None:
        super().__init__(message)
        self.loading = loading


def tail_start(rows: list[tuple[int, int, int]], keep_bytes: int) -> int | None:
    """Where the copy of a log of appends `rows` ((base, last, size), oldest first) starts when
    it keeps at most `keep_bytes` (always the last append): the base offset of its first append,
    or None when the whole log fits."""
    total = 0
    for i in range(len(rows) - 1, -1, -1):
        total += rows[i][2]
        if total > keep_bytes:
            return rows[i + 1][0] if i + 1 < len(rows) else rows[i][0]
    return None


def scan_headers(rows: list[HeaderRow], start: int, end: int, now_ms: int,
                 whole: dict[int, bytes]) -> tuple[ProducerStateManager, "ColdRange"]:
    """Replay the appends `rows` (those of [start, end), oldest first) as the copy would have:
    the producer state as of `end`, and the range with its aborted transactions. `whole` holds
    the full bytes of appends whose head did not cover all their batches (several batches in one
    append); raises InvalidBatch on bytes that are not batches."""
    state = ProducerStateManager()
    cold = ColdRange(start, end)
    for base, last, size, head in rows:
        data = whole.get(base, head)
        max_ts = -1
        if len(data) > MAGIC_AT and data[MAGIC_AT] >= 2:
            pos = 0
            while pos + BATCH_HEADER_SIZE <= len(data):
                h = parse_header(data, pos)
                max_ts = max(max_ts, h.max_timestamp)
                marker = None
                if h.is_control and h.producer_id >= 0:
                    try:
                        marker = parse_marker(data, pos)
                    except InvalidBatch:  # as the copy's own scan: a malformed marker ends nothing
                        marker = None
                aborted = state.update(h, h.base_offset, h.max_timestamp if h.max_timestamp >= 0 else now_ms, marker)
                if aborted is not None:
                    cold.aborted.append(aborted)
                pos += h.size
        cold.add(base, last, size, max_ts)
    return state, cold


def needs_whole(row: HeaderRow) -> bool:
    """True when the head of this append does not hold all its batch headers (several batches:
    the scan needs every one), so its whole bytes must be read."""
    base, last, size, head = row
    if len(head) >= size or len(head) <= MAGIC_AT or head[MAGIC_AT] < 2:
        return False
    try:
        return parse_header(head).size < size
    except InvalidBatch:
        return True


Chunk = tuple[list[int], list[tuple[int, int, bytes]]]
"""Loaded appends: (their base offsets, the appends (base, last, bytes)), oldest first."""


class ChunkBudget:
    """Every partition's loaded chunks under one size (a group replaying 1,000 partitions from
    their start must not hold 1,000 partitions' chunks): past it, the chunks loaded longest ago
    are dropped (read again from PostgreSQL if asked again)."""

    def __init__(self, max_bytes: int = BUDGET_BYTES) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._held: dict[int, tuple["ColdRange", Chunk, int]] = {}  # insertion order: oldest first

    def add(self, owner: "ColdRange", chunk: Chunk) -> None:
        size = sum(len(a[2]) for a in chunk[1])
        self._held[id(chunk)] = (owner, chunk, size)
        self.size += size
        while self.size > self.max_bytes and len(self._held) > 1:
            old_owner, old, _ = self._held[next(iter(self._held))]
            old_owner.drop(old)

    def forget(self, chunk: Chunk) -> None:
        held = self._held.pop(id(chunk), None)
        if held is not None:
            self.size -= held[2]


SHARED_BUDGET = ChunkBudget()  # the process's (one broker per process)


@dataclass
class ColdRange:
    """Offsets [start, end) of a partition: in PostgreSQL only (module docstring)."""

    start: int
    end: int
    aborted: list[AbortedTxn] = field(default_factory=list)
    bases: array = field(default_factory=lambda: array("q"))
    lasts: array = field(default_factory=lambda: array("q"))
    sizes: array = field(default_factory=lambda: array("q"))
    max_timestamps: array = field(default_factory=lambda: array("q"))
    # Loaded appends, per chunk, oldest chunk first; the budget they count against.
    chunks: list[Chunk] = field(default_factory=list)
    budget: ChunkBudget = field(default_factory=lambda: SHARED_BUDGET)

    def add(self, base: int, last: int, size: int, max_timestamp: int) -> None:
        self.bases.append(base)
        self.lasts.append(last)
        self.sizes.append(size)
        self.max_timestamps.append(max_timestamp)

    @property
    def size_bytes(self) -> int:
        return sum(self.sizes)

    def holds(self, offset: int) -> bool:
        return self.start <= offset < self.end

    # ------------------------------------------------------------------ reads

    def read(self, offset: int, max_bytes: int, min_one_batch: bool,
             max_offset: int | None = None) -> tuple[bytes, int] | None:
        """Whole appends from the one holding `offset` (as PartitionLog.read, stopping before
        `max_offset` and at the end of the range) and the offset after them; None when that
        append is not loaded."""
        found = self._loaded(offset)
        if found is None:
            return None
        chunk, i = found
        out: list[bytes] = []
        total, after = 0, offset
        for base, last, data in chunk[i:]:
            if (max_offset is not None and base >= max_offset) or base >= self.end:
                break
            if total + len(data) > max_bytes and (out or not min_one_batch):
                break
            out.append(data)
            total += len(data)
            after = last + 1
        return b"".join(out), after

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions ended in this range that
        overlap [fetch_offset, upper_bound) (A9)."""
        return [(a.producer_id, a.first_offset) for a in self.aborted
                if a.last_offset >= fetch_offset and a.first_offset < upper_bound]

    def _loaded(self, offset: int) -> tuple[list[tuple[int, int, bytes]], int] | None:
        """The loaded chunk holding `offset` and the index of its append there."""
        for bases, appends in self.chunks:
            i = bisect.bisect_right(bases, offset) - 1
            if i >= 0 and appends[i][1] >= offset:
                return appends, i
        return None

    def to_load(self, offset: int) -> tuple[int, int] | None:
        """(offset to read from, how many appends) for a read of `offset` that found nothing
        loaded, about CHUNK_BYTES of appends; None when `offset` is outside the range."""
        if not self.holds(offset):
            return None
        i = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        count, total = 0, 0
        while i + count < len(self.bases) and (count == 0 or total + self.sizes[i + count] <= CHUNK_BYTES):
            total += self.sizes[i + count]
            count += 1
        return offset, max(count, 1)

    def next_to_load(self, offset: int) -> int | None:
        """After a read of `offset` that reached the last loaded append of its chunk: the offset
        of the chunk to load next (read ahead), if the range goes on and it is not loaded."""
        found = self._loaded(offset)
        if found is None:
            return None
        chunk, _ = found
        after = chunk[-1][1] + 1
        if after >= self.end or self._loaded(after) is not None:
            return None
        return after

    def loaded(self, appends: list[tuple[int, int, bytes]]) -> None:
        """Keep appends read from PostgreSQL (oldest first); the oldest chunk goes past CHUNKS
        (and whichever the budget drops)."""
        appends = [a for a in appends if a[0] < self.end and a[1] >= self.start]
        if not appends:
            return
        chunk: Chunk = ([a[0] for a in appends], appends)
        self.chunks.append(chunk)
        while len(self.chunks) > CHUNKS:
            self.drop(self.chunks[0])
        self.budget.add(self, chunk)

    def drop(self, chunk: Chunk) -> None:
        """Forget a loaded chunk."""
        self.chunks = [c for c in self.chunks if c is not chunk]
        self.budget.forget(chunk)

    def release(self) -> None:
        """The range is no longer used (leadership lost, all of it retained away): its chunks go."""
        for chunk in list(self.chunks):
            self.drop(chunk)

    # --------------------------------------------------------------- lookups

    def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record of the range with timestamp >= ts; None
        when none has; NotLoaded when the append holding it must be read first."""
        for i, max_ts in enumerate(self.max_timestamps):
            if max_ts >= ts and self.lasts[i] >= self.start:
                found = self._loaded(max(self.bases[i], self.start))
                if found is None:
                    raise NotLoaded(f"offset {self.bases[i]}")
                chunk, j = found
                data = chunk[j][2]
                for pos, h in iter_batches(data):
                    if h.max_timestamp < ts:
                        continue
                    for offset, rec_ts in batch_record_timestamps(data[pos : pos + h.size]):
                        if rec_ts >= ts and offset >= self.start:
                            return offset, rec_ts
        return None

    def max_timestamp(self) -> int:
        """The largest timestamp of the range's appends (-1: none)."""
        return max(self.max_timestamps, default=-1)

    # ------------------------------------------------------------- retention

    def retained_start(self, config: LogConfig, now_ms: int, tail_bytes: int) -> int:
        """Where the log starts after retention of this range (the copy holding `tail_bytes`
        after it): its oldest appends past retention.ms by largest timestamp, then while the
        whole log exceeds retention.bytes; `end` when all of it goes."""
        if not config.deletes:
            return self.start
        first, n = bisect.bisect_right(self.lasts, self.start - 1), len(self.bases)  # (appends below the start)
        sizes, stamps = self.sizes, self.max_timestamps
        # An append without a timestamp (records v0/v1) never expires by time.
        expired = expired_prefix(n - first, lambda i: sizes[first + i],
                                 lambda i: stamps[first + i] if stamps[first + i] >= 0 else now_ms, config, now_ms,
                                 after_bytes=tail_bytes)
        if not expired:  # the start stays, whatever the index begins with
            return self.start
        i = first + expired
        return self.end if i >= n else max(self.bases[i], self.start)

    def advance(self, start: int) -> None:
        """The log now starts at `start` (retention): forget what is below it."""
        self.start = max(self.start, start)
        keep = bisect.bisect_right(self.lasts, self.start - 1)
        if keep:
            for column in (self.bases, self.lasts, self.sizes, self.max_timestamps):
                del column[:keep]
        self.aborted = [a for a in self.aborted if a.last_offset >= self.start]
        for chunk in [c for c in self.chunks if c[1][-1][1] < self.start]:
            self.drop(chunk)
