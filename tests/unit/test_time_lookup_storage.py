"""PartitionLog.offset_for_timestamp / max_timestamp on compressed batches of every codec: the exact
record, one batch decompressed per lookup, later batches read only when the first has no match,
the log start respected, ties of the max timestamp going to the first record (as Kafka)."""

from __future__ import annotations

from pathlib import Path

import pytest
from compressed_batches import CODECS, kp_batch, log_append_time, snappy_variant
from storage_helpers import T0, FakeClock, clock  # noqa: F401 (clock: fixture)

import offsetd.storage.time_lookup as partition_log
from offsetd.records.batch import InvalidBatch
from offsetd.storage import LogConfig, PartitionLog


def open_log(path: Path, clock: FakeClock, **cfg) -> PartitionLog:
    return PartitionLog.open(path, "topic", 0, LogConfig(**cfg), clock.now)


def fill(log: PartitionLog, codec: int, batches: int, clock: FakeClock) -> None:
    """Batch b: offsets 100b..100b+99, timestamps T0 + 1000b + 10i (i = 0..99)."""
    for b in range(batches):
        log.append(kp_batch(codec, [T0 + 1000 * b + 10 * i for i in range(100)]), clock.now)


@pytest.fixture
def decoded(monkeypatch) -> list[int]:
    """Base offsets of the batches a lookup decodes (decompresses), in order."""
    seen: list[int] = []
    real = partition_log.batch_record_timestamps

    def spy(batch: bytes) -> list[tuple[int, int]]:
        out = real(batch)
        seen.append(out[0][0])
        return out

    monkeypatch.setattr(partition_log, "batch_record_timestamps", spy)
    return seen


@pytest.mark.parametrize("name", list(CODECS))
def test_exact_record_in_every_codec(tmp_path: Path, clock: FakeClock, name: str, decoded: list[int]) -> None:
    log = open_log(tmp_path, clock, segment_bytes=2500, index_interval_bytes=1)
    fill(log, CODECS[name], 6, clock)
    assert len(log.segment_base_offsets) > 1
    cases = {
        T0 - 1: (0, T0),  # before the first record
        T0: (0, T0),  # exactly the first
        T0 + 500: (50, T0 + 500),  # exactly a record inside the first batch
        T0 + 2503: (251, T0 + 2510),  # between two records of batch 2
        T0 + 3990: (399, T0 + 3990),  # the last record of batch 3
        T0 + 3991: (400, T0 + 4000),  # between batches 3 and 4: the next batch's first record
        T0 + 5990: (599, T0 + 5990),  # the last record of the log
        T0 + 5991: None,  # beyond
    }
    for target, want in cases.items():
        decoded.clear()
        assert log.offset_for_timestamp(target) == want, target
        assert len(decoded) == (0 if want is None else 1), (target, decoded)  # one batch per lookup


def test_segments_and_sparse_index(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=3000, index_interval_bytes=4096)
    for b in range(12):  # codecs in turn, several batches per segment, sparse index entries
        log.append(kp_batch(1 + b % 4, [T0 + 1000 * b + 10 * i for i in range(100)]), clock.now)
    assert len(log.segment_base_offsets) > 2
    for b in range(12):
        for i in (0, 37, 99):
            assert log.offset_for_timestamp(T0 + 1000 * b + 10 * i - 3) == (100 * b + i, T0 + 1000 * b + 10 * i)


def test_next_batch_read_when_landed_batch_has_no_match(tmp_path: Path, clock: FakeClock,
                                                         decoded: list[int]) -> None:
    log = open_log(tmp_path, clock)
    # batch 0 (offsets 0..9) reaches T0+900 only at its first record; the rest are older
    log.append(kp_batch(3, [T0 + 900] + [T0 + i for i in range(9)]), clock.now)
    log.append(kp_batch(4, [T0 + 500 + i for i in range(10)]), clock.now)  # offsets 10..19
    assert log.offset_for_timestamp(T0 + 505) == (0, T0 + 900)  # first in log order, not smallest ts
    log.truncate_fully_and_start_at(0)  # start over: now a batch whose records sit below log start
    log.append(kp_batch(2, [T0 + 100 + i for i in range(10)]), clock.now)
    log.append(kp_batch(2, [T0 + 200 + i for i in range(10)]), clock.now)
    log.log_start_offset = 5  # inside the first batch, as a DeleteRecords to offset 5 would leave it
    decoded.clear()
    assert log.offset_for_timestamp(T0) == (5, T0 + 105)
    assert log.offset_for_timestamp(T0 + 209) == (19, T0 + 209)
    log.log_start_offset = 10
    decoded.clear()
    assert log.offset_for_timestamp(T0 + 101) == (10, T0 + 200)
    assert decoded == [10]  # batch 0 skipped by its header (last offset below log start)


def test_below_a_truncated_log_start(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1500, retention_bytes=3000)
    fill(log, 1, 8, clock)
    deleted = log.apply_retention(clock.now)
    assert deleted > 0 and log.log_start_offset > 0 and log.log_start_offset % 100 == 0
    start = log.log_start_offset
    b = start // 100
    assert log.offset_for_timestamp(T0) == (start, T0 + 1000 * b)
    assert log.offset_for_timestamp(T0 + 1000 * b + 15) == (start + 2, T0 + 1000 * b + 20)


@pytest.mark.parametrize("name", list(CODECS))
def test_max_timestamp_exact_and_ties_to_first(tmp_path: Path, clock: FakeClock, name: str,
                                               decoded: list[int]) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1)  # one batch per segment
    codec = CODECS[name]
    assert log.max_timestamp() == (-1, -1)
    log.append(kp_batch(codec, [T0 + i for i in range(50)]), clock.now)  # 0..49
    peak = [T0 + 100 + i for i in range(50)]
    peak[17] = peak[33] = T0 + 5000  # tie inside one batch: offsets 67 and 83
    log.append(kp_batch(codec, peak), clock.now)  # 50..99
    assert log.max_timestamp() == (67, T0 + 5000)
    for b in range(4):  # later batches and segments repeat the max: still the first one
        stamps = [T0 + 200 + i for i in range(50)]
        stamps[10] = T0 + 5000
        log.append(kp_batch(codec, stamps), clock.now)
    assert len(log.segment_base_offsets) > 1
    decoded.clear()
    assert log.max_timestamp() == (67, T0 + 5000)
    assert decoded == [50]  # only the batch holding it
    log.append(kp_batch(codec, [T0 + 6000] * 30), clock.now)  # all tied: the batch's first record
    assert log.max_timestamp() == (300, T0 + 6000)


def test_max_timestamp_log_append_time_and_snappy_framings(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(snappy_variant([T0 + 3, T0 + 9, T0 + 1], "raw"), clock.now)  # 0..2
    log.append(snappy_variant([T0 + 2, T0 + 8, T0 + 8, T0 + 4], "xerial", block=40), clock.now)  # 3..6
    assert log.max_timestamp() == (1, T0 + 9)
    assert log.offset_for_timestamp(T0 + 5) == (1, T0 + 9)
    assert log.offset_for_timestamp(T0 + 7) == (1, T0 + 9)
    log.append(log_append_time(kp_batch(4, [T0, T0 + 1, T0 + 2]), T0 + 50), clock.now)  # 7..9
    assert log.max_timestamp() == (7, T0 + 50)
    assert log.offset_for_timestamp(T0 + 10) == (7, T0 + 50)


def test_undecodable_batch_raises_invalid_batch(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    good = kp_batch(1, [T0 + i for i in range(40)])
    log.append(good, clock.now)
    log.flush()
    with open(log.active_segment.log_path, "r+b") as f:
        f.seek(61 + 20)
        f.write(b"\x00" * 16)  # damage the gzip stream in place (the header is intact)
    with pytest.raises(InvalidBatch):
        log.offset_for_timestamp(T0 + 5)
