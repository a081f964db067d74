"""A cluster partition's new owner that copies only the tail of a long log (storage/cold_range.py,
storage/postgres_log.py) over an in-memory store of its PostgreSQL rows: it must judge producers,
transactions, reads, time lookups and retention exactly as an owner that copied all of it."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, clock  # noqa: F401 (clock: fixture)

from offsetd.records.batch import build_batch, iter_batches
from offsetd.records.control import build_marker_batch
from offsetd.storage import PartitionLog
from offsetd.storage.cold_range import HEAD_BYTES, ChunkBudget, ColdRange, NotLoaded, tail_start
from offsetd.storage.log_config import LogConfig
from offsetd.storage.log_dir import LogDirectory
from offsetd.storage.postgres_log import PostgresPartitionLog
from offsetd.storage.postgres_store import Claim
from offsetd.storage.unopened_log import UnopenedLog


class MemoryStore:
    """The PostgresStore statements a partition's owner makes, over rows in memory."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []
        self.start = 0
        self.reads = 0
        self.head_reads = 0

    async def append(self, topic_id, partition, node_id, epoch, appends) -> None:
        self.rows.extend(appends)

    async def read(self, topic_id, partition, offset, limit=500):
        self.reads += 1
        return [r for r in self.rows if r[1] >= offset][:limit]

    async def heads(self, topic_id, partition, offset):
        self.head_reads += 1
        return [(b, last, len(d), d if len(d) <= HEAD_BYTES else d[:HEAD_BYTES]) for b, last, d in self.rows
                if last >= offset]

    async def ending_at(self, topic_id, partition, last_offset):
        return next(((b, d) for b, last, d in self.rows if last == last_offset), None)

    async def advance_start(self, topic_id, partition, node_id, epoch, start) -> None:
        self.start = max(self.start, start)
        self.rows = [r for r in self.rows if r[1] >= start]

    def claim(self, epoch: int) -> Claim:
        return Claim(epoch, self.rows[-1][1] + 1 if self.rows else 0, self.start, ((epoch, 0),))


def records(n: int, ts: int, size: int = 200) -> list[tuple[bytes, bytes, int, list]]:
    return [(b"k", bytes(size), ts + i, []) for i in range(n)]


def idem(pid: int, seq: int, ts: int, n: int = 5, transactional: bool = False) -> bytes:
    return build_batch(records(n, ts), producer_id=pid, producer_epoch=0, base_sequence=seq,
                       attributes=0x10 if transactional else 0)


def owner(path: Path, store: MemoryStore, clock: FakeClock, config: LogConfig, *,
          tail_only: bool = True) -> PostgresPartitionLog:
    return PostgresPartitionLog(PartitionLog.open(path, "t", 0, config, clock.now), store, uuid.uuid4(), 1,
                                lambda: True, tail_only=tail_only)


async def history(plog: PostgresPartitionLog, clock: FakeClock) -> dict[str, int]:
    """Write a log of idempotent, transactional (committed, aborted, and one left open) and plain
    appends; where each producer's story is."""
    now = clock.now
    seq = {7: 0, 9: 0}
    for i in range(40):
        ts = T0 + 1000 * i
        if i % 10 == 3:  # producer 9: a transaction, aborted when i % 20 == 3
            await plog.append(idem(9, seq[9], ts, transactional=True), now)
            seq[9] += 5
            await plog.append(build_marker_batch(9, 0, i % 20 != 3, 0, ts), now)
        await plog.append(idem(7, seq[7], ts), now)
        seq[7] += 5
        await plog.append(build_batch(records(3, ts)), now)
        if i == 5:  # producer 8's transaction stays open over the rest of the log
            first = plog.log_end_offset
            await plog.append(idem(8, 0, ts, transactional=True), now)
    return {"open_txn_first": first, "producer_7_next_seq": seq[7]}


def read_all(plog: PostgresPartitionLog, committed: bool) -> tuple[list[int], set[tuple[int, int]]]:
    """Every batch base offset a consumer from the log start reads (read_committed: up to the
    LSO) and the aborted transactions it is told of; loads what only PostgreSQL has as it goes."""
    async def go() -> tuple[list[int], set[tuple[int, int]]]:
        bases: list[int] = []
        aborted: set[tuple[int, int]] = set()
        offset, end = plog.log_start_offset, plog.last_stable_offset if committed else plog.log_end_offset
        for _ in range(10_000):
            if offset >= end:
                return bases, aborted
            if committed:
                data, told = plog.read_committed(offset, 3000)
                aborted.update(told)
            else:
                data = plog.read(offset, 3000)
            if not data:
                await _loaded(plog)
                continue
            for _, h in iter_batches(data):
                bases.append(h.base_offset)
                offset = h.next_offset
        raise AssertionError("no progress")
    return asyncio.get_event_loop().run_until_complete(go())


async def _loaded(plog: PostgresPartitionLog) -> None:
    while plog._cold_loading is not None:
        await asyncio.sleep(0)


def run(coro):
    return asyncio.get_event_loop().run_until_complete(coro)


def settle() -> None:
    """Until the work a log started in the background (its retention statement) is done."""
    async def go() -> None:
        while any(t is not asyncio.current_task() and not t.done() for t in asyncio.all_tasks()):
            await asyncio.sleep(0)
    run(go())


def leading(path: Path, store: MemoryStore, clock: FakeClock) -> PostgresPartitionLog:
    """The partition's first owner, leading (it copies everything)."""
    plog = owner(path, store, clock, LogConfig())
    run(plog.take_leadership(store.claim(1), clock.now))
    return plog


def append_plain(plog: PostgresPartitionLog, clock: FakeClock, count: int, *, from_ts: int = T0, step: int = 1) -> None:
    """`count` appends of 4 records without a producer id, the i-th stamped from_ts + i * step."""
    for i in range(count):
        append(plog, build_batch(records(4, from_ts + i * step)), clock.now)


def append(plog: PostgresPartitionLog, records: bytes, now: int):
    async def go():
        return await plog.append(records, now)
    return run(go())


@pytest.fixture(autouse=True)
def loop():
    asyncio.set_event_loop(asyncio.new_event_loop())
    yield
    asyncio.get_event_loop().close()


def test_tail_start_keeps_at_most_the_bytes_asked_and_always_the_last_append() -> None:
    rows = [(0, 9, 100), (10, 19, 100), (20, 29, 100)]
    assert tail_start(rows, 300) is None
    assert tail_start(rows, 250) == 10
    assert tail_start(rows, 100) == 20
    assert tail_start(rows, 10) == 20  # an append larger than the limit is still copied


def test_a_tail_only_owner_judges_and_serves_as_one_that_copied_everything(tmp_path: Path, clock: FakeClock) -> None:
    store = MemoryStore()
    first = leading(tmp_path / "first", store, clock)
    story = run(history(first, clock))
    total = sum(len(d) for _, _, d in store.rows)

    full = owner(tmp_path / "full", store, clock, LogConfig(), tail_only=False)
    run(full.take_leadership(store.claim(2), clock.now))
    tail_cfg = LogConfig(local_retention_bytes=total // 5)
    tail = owner(tmp_path / "tail", store, clock, tail_cfg)
    run(tail.take_leadership(store.claim(3), clock.now))

    copy_start = tail._cache.log_start_offset
    assert 0 < copy_start < tail.log_end_offset and tail._cache.size_bytes <= total // 5
    assert tail.log_start_offset == full.log_start_offset == 0
    assert tail.log_end_offset == full.log_end_offset
    # The open transaction began below the copy: the LSO is still its first offset.
    assert tail.last_stable_offset == full.last_stable_offset == story["open_txn_first"] < copy_start
    assert tail._cache.producer_state.to_snapshot() == full._cache.producer_state.to_snapshot()

    for committed in (False, True):
        assert read_all(tail, committed) == read_all(full, committed)
    assert read_all(full, True)[1]  # aborted transactions were told (below and above the copy)

    for ts in (T0 - 5, T0 + 2500, T0 + 17_001, T0 + 39_000, T0 + 10**9):
        try:
            found = tail.offset_for_timestamp(ts)
        except NotLoaded:
            run(_loaded(tail))
            found = tail.offset_for_timestamp(ts)
        assert found == full.offset_for_timestamp(ts)
    assert tail.max_timestamp() == full.max_timestamp()

    # Producer 7's last batch (below the copy for producer 9's sake, above it here): a retry of
    # it is a duplicate, the next sequence goes on, a gap is refused, as on the full owner.
    retry = build_batch(records(5, T0), producer_id=7, producer_epoch=0, base_sequence=story["producer_7_next_seq"] - 5)
    assert append(tail, retry, clock.now).duplicate


def test_a_producer_last_seen_below_the_copy_has_its_retry_judged_a_duplicate(tmp_path: Path,
                                                                               clock: FakeClock) -> None:
    store = MemoryStore()
    first = leading(tmp_path / "first", store, clock)
    append(first, idem(5, 0, T0), clock.now)  # offsets 0-4
    append_plain(first, clock, 30)
    tail = owner(tmp_path / "tail", store, clock, LogConfig(local_retention_bytes=4000))
    run(tail.take_leadership(store.claim(2), clock.now))
    assert tail._cache.log_start_offset > 5
    again = append(tail, idem(5, 0, T0), clock.now)
    assert again.duplicate and (again.base_offset, again.last_offset) == (0, 4)
    with pytest.raises(Exception) as exc:  # a gap in producer 5's sequence
        append(tail, idem(5, 7, T0), clock.now)
    assert getattr(exc.value, "error_code", None) == 45


def test_a_read_below_the_copy_answers_nothing_until_its_chunk_is_loaded_and_wakes_the_poll(
        tmp_path: Path, clock: FakeClock) -> None:
    store = MemoryStore()
    first = leading(tmp_path / "first", store, clock)
    append_plain(first, clock, 20)
    tail = owner(tmp_path / "tail", store, clock, LogConfig(local_retention_bytes=3000))
    woken: list[int] = []
    tail.on_cold_loaded = lambda: woken.append(1)
    run(tail.take_leadership(store.claim(2), clock.now))
    reads = store.reads
    assert tail.read(0, 1000) == b"" and not woken
    run(_loaded(tail))
    assert woken and store.reads > reads
    data = tail.read(0, 1000)
    assert [h.base_offset for _, h in iter_batches(data)][0] == 0
    with pytest.raises(Exception):  # below the log start: out of range, as the copy says
        tail.read(-1, 1000)


def test_retention_drops_what_only_postgresql_holds_before_the_copy(tmp_path: Path, clock: FakeClock) -> None:
    store = MemoryStore()
    first = leading(tmp_path / "first", store, clock)
    append_plain(first, clock, 20, step=1000)
    size = len(store.rows[0][2])
    config = LogConfig(local_retention_bytes=5 * size, retention_bytes=12 * size)
    tail = owner(tmp_path / "tail", store, clock, config)
    run(tail.take_leadership(store.claim(2), clock.now))
    copy_start = tail._cache.log_start_offset
    assert tail.apply_retention(clock.now) == 0
    settle()
    assert tail.log_start_offset == store.start == 8 * 4 < copy_start  # 12 appends kept: 7 below, 5 copied
    # Past retention.ms: what is left below the copy goes, then the copy's own segments.
    tail._cache.config = dataclasses.replace(config, retention_ms=3_600_000, retention_bytes=-1)
    assert tail.apply_retention(clock.advance(10 * 3_600_000)) >= 1
    settle()
    assert tail._cold is None and tail.log_start_offset == tail.log_end_offset == store.start == 80


def test_a_leader_keeps_its_copy_to_local_retention_and_serves_the_rest_from_postgresql(
        tmp_path: Path, clock: FakeClock) -> None:
    store = MemoryStore()
    config = LogConfig(segment_bytes=8000, local_retention_bytes=20_000)
    leader = owner(tmp_path / "leader", store, clock, config)
    run(leader.take_leadership(store.claim(1), clock.now))
    run(history(leader, clock))
    full = owner(tmp_path / "full", store, clock, LogConfig(), tail_only=False)
    run(full.take_leadership(store.claim(2), clock.now))
    before = [read_all(leader, committed) for committed in (False, True)]

    assert leader.apply_retention(clock.now) == 0
    settle()
    copy = leader._cache
    assert 0 < copy.log_start_offset and copy.size_bytes <= 20_000 + 8000  # whole segments go
    assert leader.log_start_offset == store.start == 0  # PostgreSQL keeps every append
    assert [read_all(leader, committed) for committed in (False, True)] == before
    assert before == [read_all(full, committed) for committed in (False, True)]
    assert leader.last_stable_offset == full.last_stable_offset
    leader.apply_retention(clock.now)  # again: nothing more to move, nothing lost
    assert read_all(leader, True) == before[1]


def test_a_copy_behind_the_tail_is_replaced_and_everything_below_is_replayed(tmp_path: Path, clock: FakeClock) -> None:
    """A broker whose good copy ends below the tail's start (it led before, then others wrote a
    lot): the tail's producer state and range cover the whole log, not only what the copy lacked,
    and retention (7 days, no size limit) moves nothing. (Chaos seed 11 once lost the log's first
    505 offsets this way: the headers were read from the copy's end.)"""
    store = MemoryStore()
    writer = leading(tmp_path / "writer", store, clock)
    append(writer, idem(5, 0, T0), clock.now)
    append_plain(writer, clock, 10)
    config = LogConfig(local_retention_bytes=3000)
    behind = owner(tmp_path / "behind", store, clock, LogConfig())
    run(behind.take_leadership(store.claim(2), clock.now))  # a full copy of offsets 0-44
    behind._cache.config = config
    append_plain(writer, clock, 30, from_ts=T0 + 100)
    run(behind.take_leadership(store.claim(3), clock.now))
    assert behind._cache.log_start_offset > 45 and behind.log_start_offset == 0
    assert behind._cold.bases[0] == 0 and behind._cold.start == 0
    assert append(behind, idem(5, 0, T0), clock.now).duplicate  # producer 5's batch at 0-4 is known
    full = owner(tmp_path / "full", store, clock, LogConfig(), tail_only=False)
    run(full.take_leadership(store.claim(4), clock.now))
    behind.apply_retention(clock.now)
    settle()
    assert store.start == 0 and behind.log_start_offset == 0
    assert read_all(behind, False) == read_all(full, False)


def test_retention_leaves_an_empty_partitions_unopened_copy_without_files(tmp_path: Path, clock: FakeClock) -> None:
    """A broker leading 30,000 empty partitions: a retention check (local.retention.bytes
    included) and the offsets the lag views ask open none of their copies."""
    store = MemoryStore()
    copy = UnopenedLog(tmp_path, "t", 0, LogConfig(local_retention_bytes=1000), clock.now, LogDirectory(tmp_path),
                       clean=False, leader_epoch=0, durable=False)
    plog = PostgresPartitionLog(copy, store, uuid.uuid4(), 1, lambda: True)
    run(plog.take_leadership(store.claim(1), clock.now))
    assert plog.apply_retention(clock.now) == 0
    assert (plog.log_start_offset, plog.last_stable_offset, plog.log_end_offset) == (0, 0, 0)
    assert not copy.opened and not (tmp_path / "t-0").exists()


def test_every_partitions_chunks_stay_under_one_budget() -> None:
    """Consumers replaying many partitions from their start: the chunks loaded longest ago go
    once all partitions' together pass the budget; a dropped chunk is read again when asked."""
    budget = ChunkBudget(max_bytes=10_000)
    ranges = [ColdRange(0, 100, budget=budget) for _ in range(4)]
    for cold in ranges:
        cold.add(0, 9, 4000, -1)
        cold.loaded([(0, 9, bytes(4000))])
    assert budget.size <= 10_000
    assert [bool(c.chunks) for c in ranges] == [False, False, True, True]  # the oldest two dropped
    assert ranges[0].read(0, 10_000, True) is None and ranges[0].to_load(0) == (0, 1)
    assert ranges[3].read(5, 10_000, True) == (bytes(4000), 10)
    ranges[3].release()
    assert budget.size == 4000 and not ranges[3].chunks


def test_a_partition_with_little_in_it_is_copied_in_one_read_without_its_headers(tmp_path: Path,
                                                                                 clock: FakeClock) -> None:
    store = MemoryStore()
    writer = leading(tmp_path / "writer", store, clock)
    append_plain(writer, clock, 10)
    small = owner(tmp_path / "small", store, clock, LogConfig(local_retention_bytes=100_000))
    reads = store.reads
    run(small.take_leadership(store.claim(2), clock.now))
    assert (store.reads - reads, store.head_reads) == (1, 0) and small._cold is None
    assert small.log_end_offset == 40
    big = owner(tmp_path / "big", store, clock, LogConfig(local_retention_bytes=3000))
    run(big.take_leadership(store.claim(3), clock.now))
    assert store.head_reads == 1 and big._cold is not None
