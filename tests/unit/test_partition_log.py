"""PartitionLog on real files: append/read, rolls, timestamps, retention, recovery,
idempotent producers, durability across close/open. Time comes from a fake clock."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from storage_helpers import HOUR, T0, FakeClock, clock, crash  # noqa: F401 (clock: fixture)
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from offsetd.records.batch import (
    MESSAGE_TOO_LARGE,
    BatchHeader,
    InvalidBatch,
    build_batch,
    decode_records,
    iter_batches,
    validate_batches,
)
from offsetd.storage import (
    INVALID_PRODUCER_EPOCH,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    LogConfig,
    OffsetOutOfRange,
    PartitionLog,
    ProduceError,
)



def batch(n: int = 3, ts: int = T0, value_size: int = 20, tag: str = "", **kw) -> bytes:
    """Uncompressed batch of n records with timestamps ts, ts+1, ...; values carry the tag."""
    return build_batch(
        [(f"k{i}".encode(), f"{tag}{i}".encode().ljust(value_size, b"."), ts + i, []) for i in range(n)],
        **kw,
    )


def idem(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    """Idempotent-producer batch."""
    return batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def open_log(path: Path, clock: FakeClock, **cfg) -> PartitionLog:
    return PartitionLog.open(path, "topic", 0, LogConfig(**cfg), clock.now)


def all_records(log: PartitionLog) -> list:
    data = log.read(log.log_start_offset, 1 << 30)
    out = []
    for pos, h in iter_batches(data):
        out.extend(decode_records(data[pos : pos + h.size]))
    return out


def seg_path(tmp_path: Path, base: int, suffix: str = ".log") -> Path:
    return tmp_path / "topic-0" / f"{base:020d}{suffix}"


# ------------------------------------------------------------------ append / read


def test_append_assigns_offsets_and_patches_base_offset(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    r1 = log.append(batch(3, tag="a"), clock.now)
    r2 = log.append(batch(5, tag="b"), clock.now)
    assert (r1.base_offset, r1.last_offset) == (0, 2)
    assert (r2.base_offset, r2.last_offset, r2.log_append_time_ms, r2.log_start_offset) == (3, 7, -1, 0)
    assert not r2.duplicate
    assert log.log_end_offset == 8
    data = log.read(0, 1 << 20)
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 3]
    assert validate_batches(data, 1 << 20)  # CRCs still valid after patching
    assert [r.offset for r in all_records(log)] == list(range(8))
    assert seg_path(tmp_path, 0).exists()
    assert seg_path(tmp_path, 0, ".index").exists()
    assert seg_path(tmp_path, 0, ".timeindex").exists()


def test_append_does_not_modify_callers_buffer(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(2), clock.now)
    raw = bytearray(batch(2))
    before = bytes(raw)
    log.append(raw, clock.now)
    assert bytes(raw) == before
    assert log.read(2, 1 << 20)[:8] == struct.pack(">q", 2)


def test_multi_batch_blob_gets_consecutive_offsets(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    blob = batch(2, tag="x") + batch(4, tag="y") + batch(1, tag="z")
    r = log.append(blob, clock.now, validated=validate_batches(blob, 1 << 20))
    assert (r.base_offset, r.last_offset) == (0, 6)
    assert [h.base_offset for _, h in iter_batches(log.read(0, 1 << 20))] == [0, 2, 6]


def test_append_rejects_invalid_input(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, max_message_bytes=200)
    with pytest.raises(InvalidBatch) as exc:
        log.append(batch(10, value_size=100), clock.now)
    assert exc.value.error_code == MESSAGE_TOO_LARGE
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_leader_epoch_is_patched_when_given(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(2), clock.now, leader_epoch=7)
    (h,) = validate_batches(log.read(0, 1 << 20), 1 << 20)
    assert h.partition_leader_epoch == 7


def test_round_trip_across_segment_rolls(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=2000, index_interval_bytes=300)
    expected = []
    for i in range(60):
        n = 1 + i % 4
        log.append(batch(n, ts=T0 + i * 10, tag=f"b{i}-"), clock.now)
        expected.extend(f"b{i}-{j}".encode() for j in range(n))
    bases = log.segment_base_offsets
    assert len(bases) >= 4
    assert bases == sorted(bases) and bases[0] == 0
    assert all(os.path.getsize(seg_path(tmp_path, b)) <= 2000 for b in bases)
    recs = all_records(log)
    assert [r.offset for r in recs] == list(range(len(expected)))
    assert [r.value.rstrip(b".") for r in recs] == expected
    # every offset is found: the returned data starts with the batch containing it
    for off in range(log.log_end_offset):
        data = log.read(off, 1)
        (h,) = [h for _, h in iter_batches(data)]
        assert h.base_offset <= off <= h.last_offset
    assert log.size_bytes == sum(os.path.getsize(seg_path(tmp_path, b)) for b in bases)


def test_read_bounds_and_out_of_range(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    assert log.read(0, 1000) == b""  # empty log: offset 0 == log end
    log.append(batch(3), clock.now)
    assert log.read(3, 1000) == b""
    with pytest.raises(OffsetOutOfRange) as exc:
        log.read(4, 1000)
    assert exc.value.error_code == 1
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 1000)


def test_read_respects_max_bytes_with_whole_batches(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=100)
    blobs = [batch(3, tag=f"{i}") for i in range(20)]
    for b in blobs:
        log.append(b, clock.now)
    size = len(blobs[0])  # all batches are the same size
    for max_bytes in (size, size + 1, 3 * size - 1, 3 * size, 7 * size + 5):
        data = log.read(0, max_bytes)
        assert len(data) == (max_bytes // size) * size
        assert sum(1 for _ in iter_batches(data)) == max_bytes // size
    # offset in the middle of a batch returns that whole batch first
    data = log.read(31, 2 * size)
    assert [h.base_offset for _, h in iter_batches(data)] == [30, 33]
    # reading everything returns the whole log
    assert len(log.read(0, 1 << 30)) == 20 * size


def test_read_first_batch_larger_than_max_bytes(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    big = batch(50, value_size=100)
    log.append(big, clock.now)
    log.append(batch(1), clock.now)
    data = log.read(10, 100)
    assert len(data) == len(big)  # min_one_batch: the whole first batch, nothing more
    assert log.read(10, 100, min_one_batch=False) == b""


def test_read_continues_into_next_segment(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=500)
    for i in range(10):
        log.append(batch(2, tag=f"{i}"), clock.now)
    assert len(log.segment_base_offsets) >= 3
    data = log.read(0, 1 << 20)
    assert [h.base_offset for _, h in iter_batches(data)] == list(range(0, 20, 2))


def test_compressed_batches_round_trip(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    for codec in (1, 2, 3, 4):
        b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 20)
        for i in range(100):
            b.append(i, timestamp=T0 + codec * 1000 + i, key=None, value=b"payload-%d" % i, headers=[])
        raw = bytes(b.build())
        assert validate_batches(raw, 1 << 20)[0].compression == codec
        log.append(raw, clock.now)
    data = log.read(0, 1 << 20)
    offsets = []
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        kb = DefaultRecordBatch(data[pos : pos + size])
        assert kb.validate_crc()
        offsets.extend(r.offset for r in kb)
        pos += kb.size_in_bytes
    assert offsets == list(range(400))
    # compressed: offset_for_timestamp decompresses the batch and answers the exact record
    assert log.offset_for_timestamp(T0 + 2050) == (150, T0 + 2050)  # snappy batch, offsets 100..199


# ------------------------------------------------------------------ timestamps


def test_offset_for_timestamp_finds_exact_record(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1500, index_interval_bytes=200)
    # batch i holds offsets 5i..5i+4 with timestamps T0 + 100i + 0..4
    for i in range(40):
        log.append(batch(5, ts=T0 + 100 * i), clock.now)
    assert len(log.segment_base_offsets) > 3
    assert log.offset_for_timestamp(0) == (0, T0)
    assert log.offset_for_timestamp(T0 + 1002) == (52, T0 + 1002)
    assert log.offset_for_timestamp(T0 + 1005) == (55, T0 + 1100)  # gap: next record
    assert log.offset_for_timestamp(T0 + 3904) == (199, T0 + 3904)
    assert log.offset_for_timestamp(T0 + 3905) is None
    for i in range(0, 40, 3):
        ts = T0 + 100 * i + 3
        assert log.offset_for_timestamp(ts) == (5 * i + 3, ts)


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=50)
    log.append(batch(2, ts=T0 + 500), clock.now)  # offsets 0,1
    log.append(batch(2, ts=T0 + 100), clock.now)  # offsets 2,3 (older timestamps)
    log.append(batch(2, ts=T0 + 900), clock.now)  # offsets 4,5
    assert log.offset_for_timestamp(T0 + 50) == (0, T0 + 500)
    assert log.offset_for_timestamp(T0 + 501) == (1, T0 + 501)
    assert log.offset_for_timestamp(T0 + 502) == (4, T0 + 900)


def test_max_timestamp(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=400)
    assert log.max_timestamp() == (-1, -1)
    log.append(batch(3, ts=T0), clock.now)
    log.append(build_batch([(None, b"a", T0 + 10, []), (None, b"b", T0 + 99, []), (None, b"c", T0 + 5, [])]), clock.now)
    for i in range(5):
        log.append(batch(3, ts=T0 + 20 + i), clock.now)
    assert len(log.segment_base_offsets) > 1
    assert log.max_timestamp() == (4, T0 + 99)


# ------------------------------------------------------------------ rolling and retention


def test_roll_by_segment_ms(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_ms=HOUR)
    log.append(batch(2), clock.now)
    clock.advance(HOUR)
    log.append(batch(2), clock.now)  # exactly segment_ms: no roll yet
    assert log.segment_base_offsets == [0]
    clock.advance(1)
    log.append(batch(2), clock.now)
    assert log.segment_base_offsets == [0, 4]
    clock.advance(HOUR // 2)
    log.append(batch(2), clock.now)
    assert log.segment_base_offsets == [0, 4]


def test_retention_by_time_deletes_old_segments(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=600, retention_ms=10 * HOUR)
    for i in range(30):  # record timestamps one hour apart
        log.append(batch(2, ts=T0 + i * HOUR), clock.now)
    bases = log.segment_base_offsets
    assert len(bases) > 4
    clock.now = T0 + 30 * HOUR
    deleted = log.apply_retention(clock.now)
    assert deleted > 0
    # every remaining non-active segment has a record within the last 10 hours
    assert log.log_start_offset == log.segment_base_offsets[0] > 0
    first = all_records(log)[0]
    assert first.offset == log.log_start_offset
    assert not seg_path(tmp_path, 0).exists() and not seg_path(tmp_path, 0, ".index").exists()
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert log.apply_retention(clock.now) == 0  # idempotent
    # later, everything expires including the active segment: log is empty at its end offset
    end = log.log_end_offset
    clock.now = T0 + 100 * HOUR
    log.apply_retention(clock.now)
    assert log.log_start_offset == log.log_end_offset == end
    assert log.read(end, 100) == b""
    r = log.append(batch(1, ts=clock.now), clock.now)
    assert r.base_offset == end and r.log_start_offset == end


def test_retention_by_size(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1000, retention_bytes=2500, retention_ms=-1)
    for i in range(40):
        log.append(batch(3, ts=T0 + i), clock.now)
    total = log.size_bytes
    deleted = log.apply_retention(clock.now)
    assert deleted > 0
    # Kafka's rule: delete oldest segments only while the rest still holds >= retention_bytes
    assert 2500 <= log.size_bytes < total
    assert log.size_bytes - log._segments[0].size < 2500
    assert log.log_start_offset == log.segment_base_offsets[0]
    assert all_records(log)[0].offset == log.log_start_offset
    assert all_records(log)[-1].offset == log.log_end_offset - 1


def test_retention_is_noop_for_compact_topics(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=500, retention_ms=1, retention_bytes=1, cleanup_policy="compact")
    for i in range(10):
        log.append(batch(2, ts=T0), clock.now)
    clock.advance(100 * HOUR)
    assert log.apply_retention(clock.now) == 0
    assert log.log_start_offset == 0


# ------------------------------------------------------------------ durability and recovery


def test_data_survives_close_and_open(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=800)
    for i in range(20):
        log.append(batch(3, ts=T0 + i, tag=f"{i}-"), clock.now)
    before = log.read(0, 1 << 30)
    end = log.log_end_offset
    log.close()
    log = open_log(tmp_path, clock, segment_bytes=800)
    assert log.log_end_offset == end and log.log_start_offset == 0
    assert log.read(0, 1 << 30) == before
    # batch i holds offsets 3i..3i+2 with timestamps T0+i+0..2: T0+10 first at batch 8, record 2
    assert log.offset_for_timestamp(T0 + 10) == (26, T0 + 10)
    r = log.append(batch(1), clock.now)
    assert r.base_offset == end


def test_recovery_truncates_torn_tail(tmp_path: Path, clock: FakeClock, caplog) -> None:
    log = open_log(tmp_path, clock)
    for i in range(5):
        log.append(batch(4, tag=f"{i}"), clock.now)
    size_after_4 = log.size_bytes - len(batch(4, tag="4"))
    path = seg_path(tmp_path, 0)
    crash(log)
    os.truncate(path, os.path.getsize(path) - 7)  # last batch torn mid-way
    with caplog.at_level(logging.WARNING, logger="offsetd.storage"):
        log = open_log(tmp_path, clock)
    assert log.log_end_offset == 16
    assert os.path.getsize(path) == size_after_4
    assert any("torn" in r.message and str(path) in r.message and "1 batch" in r.message for r in caplog.records)
    r = log.append(batch(2), clock.now)
    assert r.base_offset == 16
    assert [x.offset for x in all_records(log)] == list(range(18))


def test_recovery_truncates_corrupt_tail(tmp_path: Path, clock: FakeClock, caplog) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1500)
    for i in range(20):
        log.append(batch(3, tag=f"{i}"), clock.now)
    active = log.segment_base_offsets[-1]
    assert active > 0
    end = log.log_end_offset
    crash(log)
    path = seg_path(tmp_path, active)
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x40  # flip a bit inside the last batch's records
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING, logger="offsetd.storage"):
        log = open_log(tmp_path, clock, segment_bytes=1500)
    assert log.log_end_offset == end - 3
    assert any("CRC" in r.message for r in caplog.records)
    assert log.append(batch(1), clock.now).base_offset == end - 3
    assert [x.offset for x in all_records(log)] == list(range(end - 2))


def test_recovery_of_garbage_after_valid_data(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(3), clock.now)
    log.append(batch(3), clock.now)
    crash(log)
    path = seg_path(tmp_path, 0)
    good = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"\x00" * 100)  # zero-filled tail (e.g. after a power loss)
    log = open_log(tmp_path, clock)
    assert log.log_end_offset == 6
    assert path.read_bytes() == good


def recovery_point(tmp_path: Path) -> int | None:
    path = tmp_path / "topic-0" / "offsetd-recovery-point"
    return int(path.read_text()) if path.exists() else None


def test_recovery_point_tracks_unsynced_rolled_segments(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(2), clock.now)
    assert recovery_point(tmp_path) is None  # a new log writes none: no file means "the active segment"
    log.roll(clock.now)  # no fsync on roll: segment 0 may still be unsynced
    log.append(batch(2), clock.now)
    assert recovery_point(tmp_path) == 0
    log.flush()
    assert recovery_point(tmp_path) == 2
    log.roll(clock.now)
    log.append(batch(2), clock.now)
    assert recovery_point(tmp_path) == 2
    log.roll(clock.now)  # the next roll syncs the segment rolled before
    assert recovery_point(tmp_path) == 4
    log.close()
    assert recovery_point(tmp_path) == 6


def test_damaged_unsynced_rolled_segment_is_recovered(tmp_path: Path, clock: FakeClock, caplog) -> None:
    log = open_log(tmp_path, clock)
    for _ in range(3):
        log.append(batch(2), clock.now)
    log.roll(clock.now)  # segment 0 (offsets 0..5) rolled, not yet synced
    log.append(batch(2), clock.now)  # segment 6
    crash(log)
    path = seg_path(tmp_path, 0)
    os.truncate(path, os.path.getsize(path) - 3)  # its last batch never reached the disk
    with caplog.at_level(logging.WARNING, logger="offsetd.storage"):
        log = open_log(tmp_path, clock)
    # the damaged segment is cut back and the segment after the hole is dropped
    assert log.segment_base_offsets == [0]
    assert log.log_end_offset == 4
    assert not seg_path(tmp_path, 6).exists()
    assert any("follows a damaged segment" in r.message for r in caplog.records)
    assert log.append(batch(1), clock.now).base_offset == 4
    assert [r.offset for r in all_records(log)] == list(range(5))


def test_synced_rolled_segment_is_not_rescanned(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(2), clock.now)
    log.roll(clock.now)
    log.append(batch(2), clock.now)
    log.flush()  # recovery point moves to the active segment (2)
    crash(log)
    raw = bytearray(seg_path(tmp_path, 0).read_bytes())
    raw[-1] ^= 0xFF  # would fail the CRC check if it were verified
    seg_path(tmp_path, 0).write_bytes(bytes(raw))
    log = open_log(tmp_path, clock)
    assert log.segment_base_offsets == [0, 2] and log.log_end_offset == 4


def test_missing_index_files_are_rebuilt(tmp_path: Path, clock: FakeClock, caplog) -> None:
    log = open_log(tmp_path, clock, segment_bytes=3000, index_interval_bytes=200)
    for i in range(40):
        log.append(batch(4, ts=T0 + 10 * i), clock.now)
    log.close()
    first = seg_path(tmp_path, 0, ".index")
    first_t = seg_path(tmp_path, 0, ".timeindex")
    want_idx, want_t = first.read_bytes(), first_t.read_bytes()
    assert len(want_idx) > 0 and len(want_t) > 0
    first.unlink()
    first_t.write_bytes(b"\x01\x02\x03")  # corrupt: not a multiple of 12 bytes
    with caplog.at_level(logging.WARNING, logger="offsetd.storage"):
        log = open_log(tmp_path, clock, segment_bytes=3000, index_interval_bytes=200)
    assert any("rebuilding indexes" in r.message for r in caplog.records)
    assert first.read_bytes() == want_idx
    assert first_t.read_bytes() == want_t
    assert [r.offset for r in all_records(log)] == list(range(160))
    assert log.offset_for_timestamp(T0 + 52) == (22, T0 + 52)  # batch 5, record 2


def test_active_index_rebuilt_after_crash(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, index_interval_bytes=200)
    for i in range(30):
        log.append(batch(4, ts=T0 + 10 * i), clock.now)
    entries = log.active_segment.offset_index.entries()
    crash(log)
    seg_path(tmp_path, 0, ".index").unlink()
    log = open_log(tmp_path, clock, index_interval_bytes=200)
    assert log.active_segment.offset_index.entries() == entries
    assert len(seg_path(tmp_path, 0, ".index").read_bytes()) == 8 * len(entries)
    for off in (0, 37, 119):
        (h,) = [h for _, h in iter_batches(log.read(off, 1))]
        assert h.base_offset <= off <= h.last_offset


def test_flush_interval_messages(tmp_path: Path, clock: FakeClock, monkeypatch) -> None:
    syncs: list[int] = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    log = open_log(tmp_path, clock, flush_interval_messages=10)
    log.append(batch(3), clock.now)
    log.append(batch(3), clock.now)
    log.append(batch(3), clock.now)
    assert syncs == [] and log.active_segment.dirty
    log.append(batch(3), clock.now)  # 12 >= 10
    assert len(syncs) == 1 and not log.active_segment.dirty
    log.append(batch(3), clock.now)
    log.flush()  # the shell's log.flush.interval.ms timer
    assert len(syncs) == 2
    log.flush()  # nothing dirty: no fsync
    assert len(syncs) == 2


def test_truncate_fully_and_delete(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=500)
    for _ in range(10):
        log.append(idem(5, 0, _ * 2), clock.now)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert log.segment_base_offsets == [1000]
    assert sorted(p.name for p in (tmp_path / "topic-0").iterdir()) == [
        f"{1000:020d}.index",
        f"{1000:020d}.log",
        f"{1000:020d}.timeindex",
        "offsetd-recovery-point",
    ]
    assert log.append(idem(5, 0, 77), clock.now).base_offset == 1000  # producer state reset
    log.delete()
    assert not (tmp_path / "topic-0").exists()


# ------------------------------------------------------------------ idempotent producers


def test_duplicate_batch_returns_original_offsets(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    first = log.append(idem(1000, 0, 0), clock.now)
    log.append(batch(3), clock.now)  # non-idempotent traffic in between
    second = log.append(idem(1000, 0, 2), clock.now)
    end = log.log_end_offset
    dup = log.append(idem(1000, 0, 0), clock.now)
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (first.base_offset, first.last_offset)
    dup2 = log.append(idem(1000, 0, 2), clock.now)
    assert dup2.duplicate and dup2.base_offset == second.base_offset
    assert log.log_end_offset == end


def test_only_last_five_batches_are_deduplicated(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    for i in range(6):
        log.append(idem(1, 0, 2 * i), clock.now)
    assert log.append(idem(1, 0, 2), clock.now).duplicate  # 2nd batch still remembered
    with pytest.raises(ProduceError) as exc:
        log.append(idem(1, 0, 0), clock.now)  # 1st batch fell out of the window
    assert exc.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER


def test_out_of_order_sequence(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idem(7, 0, 0), clock.now)  # seq 0..1
    with pytest.raises(ProduceError) as exc:
        log.append(idem(7, 0, 3), clock.now)  # gap: expected 2
    assert exc.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert "expected 2" in str(exc.value)
    assert log.log_end_offset == 2
    assert log.append(idem(7, 0, 2), clock.now).base_offset == 2


def test_producer_epoch_rules(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idem(9, 3, 0), clock.now)
    with pytest.raises(ProduceError) as exc:
        log.append(idem(9, 2, 2), clock.now)  # older epoch: fenced
    assert exc.value.error_code == INVALID_PRODUCER_EPOCH
    with pytest.raises(ProduceError) as exc:
        log.append(idem(9, 4, 5), clock.now)  # new epoch must start at 0
    assert exc.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    r = log.append(idem(9, 4, 0), clock.now)
    assert not r.duplicate and r.base_offset == 2
    with pytest.raises(ProduceError) as exc:
        log.append(idem(9, 3, 2), clock.now)
    assert exc.value.error_code == INVALID_PRODUCER_EPOCH


def test_unknown_producer_accepts_any_sequence(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    assert log.append(idem(42, 0, 12345), clock.now).base_offset == 0
    assert log.append(idem(42, 0, 12347), clock.now).base_offset == 2


def test_sequence_wraps_around(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idem(3, 0, 2**31 - 2), clock.now)  # seq 2^31-2, 2^31-1
    assert log.append(idem(3, 0, 0), clock.now).base_offset == 2


def test_error_in_blob_appends_nothing(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(idem(1, 0, 0), clock.now)
    with pytest.raises(ProduceError):
        log.append(idem(1, 0, 2) + idem(1, 0, 9), clock.now)
    assert log.log_end_offset == 2
    r = log.append(idem(1, 0, 2) + idem(1, 0, 4), clock.now)  # in-blob sequence continuity
    assert (r.base_offset, r.last_offset) == (2, 5)


def test_producer_state_rebuilt_after_crash(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    first = log.append(idem(11, 1, 0), clock.now)
    log.append(idem(11, 1, 2), clock.now)
    crash(log)
    log = open_log(tmp_path, clock)
    dup = log.append(idem(11, 1, 0), clock.now)
    assert dup.duplicate and dup.base_offset == first.base_offset
    with pytest.raises(ProduceError):
        log.append(idem(11, 1, 10), clock.now)
    with pytest.raises(ProduceError):
        log.append(idem(11, 0, 4), clock.now)


def test_producer_state_survives_roll_and_clean_restart(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    first = log.append(idem(21, 0, 0), clock.now)
    log.append(idem(21, 0, 2), clock.now)
    log.roll(clock.now)
    log.append(batch(2), clock.now)  # active segment has no batch of producer 21
    log.close()
    assert (tmp_path / "topic-0" / "offsetd-producer-state.json").exists()
    log = open_log(tmp_path, clock, segment_bytes=300)
    assert not (tmp_path / "topic-0" / "offsetd-producer-state.json").exists()
    assert log.append(idem(21, 0, 0), clock.now).base_offset == first.base_offset
    with pytest.raises(ProduceError) as exc:
        log.append(idem(21, 0, 7), clock.now)
    assert exc.value.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.append(idem(21, 0, 4), clock.now).base_offset == 6


def test_producer_ids_expire(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, producer_id_expiration_ms=HOUR)
    log.append(idem(5, 0, 0), clock.now)
    clock.advance(HOUR + 1)
    log.apply_retention(clock.now)
    assert len(log.producer_state) == 0
    # forgotten producer: any sequence accepted again
    assert log.append(idem(5, 0, 99), clock.now).base_offset == 2


def test_validated_headers_are_used(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    raw = batch(4)
    headers: list[BatchHeader] = validate_batches(raw, 1 << 20)
    r = log.append(memoryview(raw), clock.now, validated=headers)
    assert (r.base_offset, r.last_offset) == (0, 3)


# ------------------------------------------------------------------ preallocate


def test_preallocate_keeps_zeros_ahead_and_trims_them_on_roll_and_close(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, preallocate=True, segment_bytes=1 << 20)
    log.append(batch(2), clock.now)
    written = log.active_segment.size
    log.flush()
    file_size = os.path.getsize(seg_path(tmp_path, 0))
    assert file_size == written + 64 * 1024  # zero-filled ahead of the data
    assert seg_path(tmp_path, 0).read_bytes()[written:] == bytes(file_size - written)
    log.append(batch(2, tag="b"), clock.now)  # lands inside the zeroed space
    log.flush()
    assert os.path.getsize(seg_path(tmp_path, 0)) == file_size
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3]
    log.roll(clock.now)
    assert os.path.getsize(seg_path(tmp_path, 0)) == log.segments[0].size  # sealed: trimmed
    log.append(batch(1), clock.now)
    log.flush()
    assert os.path.getsize(seg_path(tmp_path, 4)) > log.active_segment.size
    log.close()
    assert os.path.getsize(seg_path(tmp_path, 4)) == len(batch(1))
    reopened = open_log(tmp_path, clock, preallocate=True)
    assert [r.offset for r in all_records(reopened)] == [0, 1, 2, 3, 4]


def test_preallocated_zeros_are_not_damage_after_a_crash(tmp_path: Path, clock: FakeClock, caplog) -> None:
    log = open_log(tmp_path, clock, preallocate=True)
    log.append(batch(2), clock.now)
    log.flush()  # zero-fills ahead of segment 0
    log.roll(clock.now)  # trims it, but that is not fsynced before the crash
    log.append(batch(2), clock.now)
    crash(log)  # kill -9 before the next flush: the recovery point is still segment 0
    with open(seg_path(tmp_path, 0), "ab") as f:  # as if the trim never reached the disk
        f.write(bytes(4096))
    with open(seg_path(tmp_path, 2), "ab") as f:  # and the active segment's zeros
        f.write(bytes(4096))
    with caplog.at_level(logging.INFO, logger="offsetd.storage"):
        log = open_log(tmp_path, clock, preallocate=True)
    assert log.segment_base_offsets == [0, 2]  # nothing dropped as "after a damaged segment"
    assert [r.offset for r in all_records(log)] == [0, 1, 2, 3]
    assert sum("preallocated bytes" in r.message for r in caplog.records) == 2
    assert not any(r.levelno >= logging.WARNING for r in caplog.records)
    assert os.path.getsize(seg_path(tmp_path, 0)) == log.segments[0].size


def test_a_torn_batch_inside_preallocated_space_is_still_truncated(tmp_path: Path, clock: FakeClock, caplog) -> None:
    log = open_log(tmp_path, clock, preallocate=True)
    log.append(batch(2), clock.now)
    log.flush()
    good = log.active_segment.size
    crash(log)
    with open(seg_path(tmp_path, 0), "r+b") as f:  # half a batch, then the zeros
        f.seek(good)
        f.write(batch(2)[:40])
    with caplog.at_level(logging.WARNING, logger="offsetd.storage"):
        log = open_log(tmp_path, clock, preallocate=True)
    assert log.log_end_offset == 2
    assert any("truncating" in r.message for r in caplog.records)
