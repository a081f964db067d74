"""A partition log's leader epochs on real files: the epoch the embedded broker leads at after each
open, batches patched with it, `leader-epoch-checkpoint` written before a new epoch's first batch
and cut by retention, a crash and a full truncation. Time comes from a fake clock."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import HOUR, T0, FakeClock, clock  # noqa: F401 (clock: fixture)

from offsetd.records.batch import build_batch, iter_batches
from offsetd.storage import LogConfig, PartitionLog

CHECKPOINT = "leader-epoch-checkpoint"


def batch(n: int = 3, ts: int = T0) -> bytes:
    return build_batch([(f"k{i}".encode(), b"v" * 40, ts + i, []) for i in range(n)])


def open_leading(path: Path, clock: FakeClock, **cfg) -> PartitionLog:
    plog = PartitionLog.open(path, "topic", 0, LogConfig(**cfg), clock.now)
    plog.lead_next_epoch()
    return plog


def epochs_on_disk(log: PartitionLog) -> list[int]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [h.partition_leader_epoch for _pos, h in iter_batches(data)]


def test_each_open_after_appends_leads_at_the_next_epoch(tmp_path: Path, clock: FakeClock) -> None:
    log = open_leading(tmp_path, clock)
    assert log.leader_epoch == 0
    assert not (log.dir / CHECKPOINT).exists()  # nothing written yet at epoch 0
    log.append(batch(), clock.now)
    assert (log.dir / CHECKPOINT).read_text() == "0\n1\n0 0\n"
    log.close()

    log = open_leading(tmp_path, clock)
    assert log.leader_epoch == 1
    log.append(batch(2), clock.now)
    assert epochs_on_disk(log) == [0, 1]
    assert log.epochs.entries == [(0, 0), (1, 3)]
    assert log.epochs.end_offset_for(0, log.log_end_offset) == (0, 3)
    log.close()

    log = open_leading(tmp_path, clock)  # epoch 2 writes nothing ...
    log.close()
    log = open_leading(tmp_path, clock)  # ... so the next open leads at 2 again: the log is the same
    assert log.leader_epoch == 2
    assert (log.dir / CHECKPOINT).read_text() == "0\n2\n0 0\n1 3\n"


def test_an_explicit_epoch_is_history_too(tmp_path: Path, clock: FakeClock) -> None:
    log = PartitionLog.open(tmp_path, "topic", 0, LogConfig(), clock.now)  # not leading: batches kept as sent
    log.append(batch(), clock.now)
    assert epochs_on_disk(log) == [-1] and log.epochs.entries == []
    log.append(batch(), clock.now, leader_epoch=4)
    assert log.epochs.entries == [(4, 3)]


def test_retention_moves_the_oldest_epoch_start(tmp_path: Path, clock: FakeClock) -> None:
    log = open_leading(tmp_path, clock, segment_bytes=400, retention_ms=10 * HOUR)
    for _ in range(3):
        log.append(batch(ts=clock.now), clock.now)
    log.close()
    log = open_leading(tmp_path, clock, segment_bytes=400, retention_ms=10 * HOUR)
    clock.advance(5 * HOUR)
    for _ in range(3):
        log.append(batch(ts=clock.now), clock.now)
    clock.advance(6 * HOUR)
    assert log.apply_retention(clock.now) > 0
    start = log.log_start_offset
    assert 0 < start <= 9
    assert log.epochs.entries[0][1] == start
    reopened = LogConfig(segment_bytes=400, retention_ms=10 * HOUR)
    log.close()
    again = PartitionLog.open(tmp_path, "topic", 0, reopened, clock.now)
    assert again.epochs.entries[0] == (log.epochs.entries[0][0], start)


def test_a_lost_tail_cuts_the_epochs_it_held(tmp_path: Path, clock: FakeClock) -> None:
    log = open_leading(tmp_path, clock)
    log.append(batch(), clock.now)
    log.close()
    log = open_leading(tmp_path, clock)
    log.append(batch(), clock.now)  # epoch 1 from offset 3
    log.flush()
    segment = log.active_segment
    log.close()
    with open(segment.log_path, "r+b") as f:  # the crash took epoch 1's only batch
        f.truncate(segment.size - 1)
    log = open_leading(tmp_path, clock)
    assert log.log_end_offset == 3
    # epoch 1 left nothing, but a consumer may have read its batch: it is never led at again
    assert log.leader_epoch == 2
    assert log.epochs.entries == [(0, 0), (2, 3)]
    assert log.epochs.end_offset_for(1, log.log_end_offset) == (0, 3)  # a reader at epoch 1 sees where it diverged


def test_truncate_fully_restarts_the_history_at_the_new_start(tmp_path: Path, clock: FakeClock) -> None:
    log = open_leading(tmp_path, clock)
    log.append(batch(), clock.now)
    log.truncate_fully_and_start_at(100)
    assert log.epochs.entries == [(0, 100)]
    assert (log.dir / CHECKPOINT).read_text() == "0\n1\n0 100\n"
