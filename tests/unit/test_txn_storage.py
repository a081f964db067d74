"""Transactions in the partition log: open transactions, LSO, markers, `.txnindex`, restarts.

Real files in tmp dirs; time is a FakeClock.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from storage_helpers import T0, FakeClock, clock, crash  # noqa: F401 (clock: fixture)

from offsetd.records.batch import build_batch
from offsetd.records.control import build_marker_batch
from offsetd.storage import PartitionLog, ProduceError
from offsetd.storage.log_config import LogConfig


def txn(pid: int, epoch: int = 0, seq: int = -1, n: int = 2, tag: str = "t") -> bytes:
    """A transactional batch (sequence -1 = written by a coordinator, no sequence)."""
    return build_batch([(f"k{i}".encode(), f"{tag}{i}".encode(), T0 + i, []) for i in range(n)],
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, attributes=0x10)


def plain(n: int = 1, ts: int = T0, **kw) -> bytes:
    return build_batch([(b"k", b"v" * 10, ts, []) for _ in range(n)], **kw)


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_marker_batch(pid, epoch, commit, coordinator_epoch, T0)


def open_log(path: Path, clock: FakeClock, **cfg) -> PartitionLog:
    return PartitionLog.open(path, "topic", 0, LogConfig(**cfg), clock.now)


def txnindex(tmp_path: Path, base: int) -> Path:
    return tmp_path / "topic-0" / f"{base:020d}.txnindex"


def test_lso_held_by_open_txn_and_released_by_commit(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(plain(3), clock.now)
    assert log.last_stable_offset == 3
    log.append(txn(7, seq=0), clock.now)  # offsets 3-4
    log.append(plain(2), clock.now)  # 5-6
    assert (log.last_stable_offset, log.log_end_offset, log.ongoing_transaction(7)) == (3, 7, 3)
    log.append(txn(7, seq=2), clock.now)  # 7-8: still the same transaction
    assert log.ongoing_transaction(7) == 3
    r = log.append(marker(7, True), clock.now)
    assert (r.base_offset, log.last_stable_offset, log.ongoing_transaction(7)) == (9, 10, None)
    assert log.aborted_transactions(0, 10) == []
    assert not txnindex(tmp_path, 0).exists()


def test_two_producers_interleaved_and_abort_index_entry(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(1), clock.now)  # 0-1
    log.append(txn(2), clock.now)  # 2-3
    log.append(txn(1), clock.now)  # 4-5
    assert log.last_stable_offset == 0
    log.append(marker(1, False, coordinator_epoch=4), clock.now)  # 6: abort pid 1
    assert log.last_stable_offset == 2  # pid 2 still open
    log.append(marker(2, True), clock.now)  # 7
    assert log.last_stable_offset == 8
    assert log.aborted_transactions(0, 8) == [(1, 0)]
    assert log.aborted_transactions(7, 8) == []  # the abort ended before the fetch offset
    assert log.aborted_transactions(6, 8) == [(1, 0)]
    # version 0, pid 1, first 0, last 6 (the marker), LSO after the abort 2 (pid 2's first offset)
    assert txnindex(tmp_path, 0).read_bytes() == struct.pack(">hqqqq", 0, 1, 0, 6, 2)
    assert [p["current_txn_start_offset"] for p in log.producers()] == [-1, -1]
    assert log.producers()[0] == {"producer_id": 1, "producer_epoch": 0, "last_sequence": -1,
                                  "last_timestamp": T0 + 1, "coordinator_epoch": 4,
                                  "current_txn_start_offset": -1}


def test_abort_index_entry_lso_is_marker_plus_one_when_nothing_else_open(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(5, n=3), clock.now)
    log.append(marker(5, False), clock.now)  # offset 3
    assert txnindex(tmp_path, 0).read_bytes() == struct.pack(">hqqqq", 0, 5, 0, 3, 4)


def test_aborted_transactions_span_a_roll(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    log.append(txn(1, n=3), clock.now)  # 0-2
    while len(log.segments) < 3:
        log.append(txn(2, n=1), clock.now)
    abort_at = log.log_end_offset
    log.append(marker(1, False), clock.now)
    log.append(marker(2, False), clock.now)
    bases = log.segment_base_offsets
    holder = max(b for b in bases if b <= abort_at)
    assert holder > 0  # the marker sits in a later segment than the data
    assert txnindex(tmp_path, holder).read_bytes()[:34] == struct.pack(">hqqqq", 0, 1, 0, abort_at, 3)
    assert not txnindex(tmp_path, 0).exists()
    # a fetch inside the first segment learns of both aborted transactions
    assert log.aborted_transactions(1, 4) == [(1, 0), (2, 3)]
    assert log.aborted_transactions(abort_at + 1, log.log_end_offset) == [(2, 3)]
    assert log.aborted_transactions(abort_at + 2, log.log_end_offset) == []


@pytest.mark.parametrize("restart", ["clean", "crash"])
def test_open_txn_and_index_survive_restart(tmp_path: Path, clock: FakeClock, restart: str) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    log.append(txn(1, n=2), clock.now)  # 0-1, aborted below
    log.append(txn(2, n=2), clock.now)  # 2-3, stays open
    log.append(marker(1, False, coordinator_epoch=3), clock.now)  # 4
    while len(log.segments) < 4:  # the open txn starts well below the recovery point
        log.append(plain(1, producer_id=9, producer_epoch=0, base_sequence=log.log_end_offset), clock.now)
    log.flush()
    log.roll(clock.now)
    log.append(plain(1), clock.now)
    index_before = txnindex(tmp_path, 0).read_bytes()
    if restart == "clean":
        log.close()
    else:
        crash(log)
    log = open_log(tmp_path, clock, segment_bytes=300)
    assert (log.last_stable_offset, log.ongoing_transaction(2)) == (2, 2)
    assert txnindex(tmp_path, 0).read_bytes() == index_before
    assert log.aborted_transactions(0, 5) == [(1, 0)]
    with pytest.raises(ProduceError) as exc:  # the coordinator epoch 3 was remembered
        log.append(marker(1, False, coordinator_epoch=2), clock.now)
    assert exc.value.error_code == 52
    log.append(marker(2, True), clock.now)
    assert log.last_stable_offset == log.log_end_offset


def test_crash_rederives_index_of_segments_past_the_recovery_point(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(1), clock.now)
    log.append(marker(1, False), clock.now)
    log.append(txn(2), clock.now)  # 3-4 open
    crash(log)
    txnindex(tmp_path, 0).unlink()  # as if the entry had not reached the disk
    log = open_log(tmp_path, clock)
    assert txnindex(tmp_path, 0).read_bytes() == struct.pack(">hqqqq", 0, 1, 0, 2, 3)
    assert (log.last_stable_offset, log.aborted_transactions(0, 5)) == (3, [(1, 0)])


def test_crash_drops_index_entry_whose_marker_was_lost(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(1), clock.now)
    size = log.active_segment.size
    log.append(marker(1, False), clock.now)
    crash(log)
    with open(tmp_path / "topic-0" / f"{0:020d}.log", "r+b") as f:
        f.truncate(size)  # the marker never reached the disk
    log = open_log(tmp_path, clock)
    assert not txnindex(tmp_path, 0).exists()
    assert (log.last_stable_offset, log.ongoing_transaction(1)) == (0, 0)


@pytest.mark.parametrize(
    "first,second,code",
    [
        (txn(1, epoch=3), plain(1, producer_id=1, producer_epoch=3, base_sequence=-1), None),  # no seq, no txn: unchecked
        (txn(1, epoch=3, seq=0), plain(1, producer_id=1, producer_epoch=3, base_sequence=2), 48),
        (txn(1, epoch=3), marker(1, True, epoch=2), 47),
        (txn(1, epoch=3), txn(1, epoch=2), 47),
        (marker(1, False, coordinator_epoch=5), None, None),
    ],
)
def test_log_checks(tmp_path: Path, clock: FakeClock, first: bytes, second: bytes | None, code: int | None) -> None:
    log = open_log(tmp_path, clock)
    log.append(first, clock.now)
    if second is None:
        return
    if code is None:
        log.append(second, clock.now)
        return
    end = log.log_end_offset
    with pytest.raises(ProduceError) as exc:
        log.append(second, clock.now)
    assert (exc.value.error_code, log.log_end_offset) == (code, end)


def test_coordinator_epoch_fencing_and_marker_without_txn(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(1), clock.now)
    log.append(marker(1, True, coordinator_epoch=5), clock.now)
    log.append(txn(1), clock.now)  # 3-4
    with pytest.raises(ProduceError) as exc:
        log.append(marker(1, False, coordinator_epoch=4), clock.now)
    assert exc.value.error_code == 52
    log.append(marker(1, False, coordinator_epoch=5), clock.now)  # 5
    assert log.aborted_transactions(0, 6) == [(1, 3)]
    # resent marker: appended, changes nothing
    r = log.append(marker(1, False, coordinator_epoch=5), clock.now)
    assert (r.base_offset, log.aborted_transactions(0, 7)) == (6, [(1, 3)])
    assert log.last_stable_offset == 7
    # a marker of an unknown producer changes nothing either
    log.append(marker(99, True), clock.now)
    assert [p["producer_id"] for p in log.producers()] == [1]


def test_non_transactional_batch_in_same_blob_after_txn_batch_is_48(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    blob = txn(1, seq=0, n=1) + plain(1, producer_id=1, producer_epoch=0, base_sequence=1)
    with pytest.raises(ProduceError) as exc:
        log.append(blob, clock.now)
    assert (exc.value.error_code, log.log_end_offset) == (48, 0)


def test_retention_deletes_txnindex_files(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=200, retention_ms=1000)
    log.append(txn(1), clock.now)
    log.append(marker(1, False), clock.now)
    assert txnindex(tmp_path, 0).exists()
    log.roll(clock.now)
    clock.advance(10_000)
    log.append(plain(1, ts=clock.now), clock.now)
    log.apply_retention(clock.now)
    assert log.log_start_offset == 3
    assert not txnindex(tmp_path, 0).exists()
    assert log.aborted_transactions(3, 4) == []


def test_truncate_fully_forgets_transactions(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(1), clock.now)
    log.append(marker(1, False), clock.now)
    log.append(txn(2), clock.now)
    log.truncate_fully_and_start_at(100)
    assert (log.last_stable_offset, log.aborted_transactions(100, 100)) == (100, [])
    assert not txnindex(tmp_path, 0).exists()


# ------------------------------------------------------------------ cluster mode (PostgreSQL engine)


class _MemoryStore:
    """The PostgresStore calls a partition's leader makes, in memory (no fencing, no epoch history)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []

    async def append(self, topic_id, partition, node_id, epoch, appends) -> None:
        self.rows.extend((base, last, bytes(data)) for base, last, data in appends)

    async def read(self, topic_id, partition, offset, limit=500):
        return [r for r in self.rows if r[1] >= offset][:limit]

    async def ending_at(self, topic_id, partition, last_offset):
        return next(((b, d) for b, last, d in self.rows if last == last_offset), None)


def test_cluster_mode_markers_and_takeover_rebuild_open_transactions(tmp_path: Path, clock: FakeClock) -> None:
    import asyncio
    import uuid

    from offsetd.storage.postgres_log import PostgresPartitionLog
    from offsetd.storage.postgres_store import Claim

    store = _MemoryStore()
    topic_id = uuid.uuid4()

    async def scenario() -> None:
        first = PostgresPartitionLog(open_log(tmp_path / "a", clock), store, topic_id, 1, lambda: True)
        await first.take_leadership(Claim(1, 0, 0, ()), clock.now)
        await first.append(txn(1), clock.now)  # 0-1
        await first.append(txn(2), clock.now)  # 2-3
        await first.append(marker(1, False, coordinator_epoch=2), clock.now)  # 4
        with pytest.raises(ProduceError) as exc:
            await first.append(marker(1, False, coordinator_epoch=1), clock.now)
        assert exc.value.error_code == 52
        assert (first.last_stable_offset, first.aborted_transactions(0, 5)) == (2, [(1, 0)])
        assert first.ongoing_transaction(2) == 2
        data, aborted = first.read_committed(0, 1 << 20)
        assert aborted == [(1, 0)] and len(data) > 0
        # another broker, with an empty copy, takes the partition over
        second = PostgresPartitionLog(open_log(tmp_path / "b", clock), store, topic_id, 2, lambda: True)
        await second.take_leadership(Claim(2, 5, 0, ()), clock.now)
        assert (second.last_stable_offset, second.ongoing_transaction(2)) == (2, 2)
        assert second.aborted_transactions(0, 5) == [(1, 0)]
        assert (tmp_path / "b" / "topic-0" / f"{0:020d}.txnindex").read_bytes() == \
            struct.pack(">hqqqq", 0, 1, 0, 4, 2)
        with pytest.raises(ProduceError) as exc:  # the coordinator epoch came along too
            await second.append(marker(1, True, coordinator_epoch=1), clock.now)
        assert exc.value.error_code == 52
        await second.append(marker(2, True, coordinator_epoch=2), clock.now)
        assert second.last_stable_offset == 6

    asyncio.run(scenario())


def test_crash_losing_data_before_the_txn_snapshot_rescans_everything(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(txn(1), clock.now)  # 0-1
    log.append(marker(1, False), clock.now)  # 2
    log.roll(clock.now)  # the transaction snapshot is taken at 3; segment 0 is not fsynced yet
    assert (tmp_path / "topic-0" / "offsetd-txn-snapshot.json").exists()
    log.append(plain(1), clock.now)  # 3
    crash(log)
    path = tmp_path / "topic-0" / f"{0:020d}.log"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # the marker's CRC fails: segment 0 is cut before it, segment 3 is dropped
    path.write_bytes(bytes(raw))
    log = open_log(tmp_path, clock)
    assert log.log_end_offset == 2
    assert (log.last_stable_offset, log.ongoing_transaction(1)) == (0, 0)
    assert not txnindex(tmp_path, 0).exists() and log.aborted_transactions(0, 2) == []
