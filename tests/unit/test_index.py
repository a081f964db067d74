"""Offset index and time index: file format, lookups, loading, sanity checks, and the
entries a partition log writes (sparse by index_interval_bytes, pointing at real batches)."""

from __future__ import annotations

import struct
from pathlib import Path

from offsetd.records.batch import build_batch, parse_header
from offsetd.storage.index import OffsetIndex, TimeIndex
from offsetd.storage.log_config import LogConfig
from offsetd.storage.partition_log import PartitionLog


def test_offset_index_file_format_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    idx = OffsetIndex(path, 100)
    idx.append(109, 4200)
    idx.append(130, 9000)
    idx.append(130, 9500)  # not increasing: ignored
    idx.close()
    # 8-byte big-endian entries: relative offset int32, position int32
    assert path.read_bytes() == struct.pack(">iiii", 9, 4200, 30, 9000)
    assert idx.lookup(100) == 0  # before the first entry: scan from the start
    assert idx.lookup(108) == 0
    assert idx.lookup(109) == 4200
    assert idx.lookup(129) == 4200
    assert idx.lookup(130) == 9000
    assert idx.lookup(10**9) == 9000
    assert idx.floor_position(8999) == 4200 and idx.floor_position(9000) == 9000
    assert idx.entries() == [(109, 4200), (130, 9000)]


def test_offset_index_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    idx = OffsetIndex(path, 0)
    for i in range(1, 50):
        idx.append(i * 10, i * 5000)
    idx.close()
    loaded, problem = OffsetIndex.load(path, 0)
    assert problem is None
    assert loaded.entries() == idx.entries()
    assert loaded.sanity_problem(log_size=250_001, max_relative_offset=490) is None
    assert loaded.sanity_problem(log_size=245_000, max_relative_offset=None) is not None
    assert loaded.sanity_problem(log_size=10**9, max_relative_offset=100) is not None


def test_offset_index_detects_bad_files(tmp_path: Path) -> None:
    missing, problem = OffsetIndex.load(tmp_path / "nope.index", 0)
    assert problem == "missing" and len(missing) == 0
    odd = tmp_path / "odd.index"
    odd.write_bytes(b"\x00" * 13)
    assert OffsetIndex.load(odd, 0)[1] is not None
    unordered = tmp_path / "unordered.index"
    unordered.write_bytes(struct.pack(">iiii", 10, 500, 5, 900))
    idx, problem = OffsetIndex.load(unordered, 0)
    assert problem is None and idx.sanity_problem(10_000, None) == "entries not increasing"


def test_offset_index_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000007.index"
    idx = OffsetIndex(path, 7)
    idx.append(8, 100)
    idx.set_entries([(20, 1000), (30, 2000)])
    idx.rewrite(fsync=True)
    idx.close()
    assert path.read_bytes() == struct.pack(">iiii", 13, 1000, 23, 2000)


def test_time_index_format_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    idx = TimeIndex(path, 100)
    idx.maybe_append(1000, 105)
    idx.maybe_append(1000, 110)  # does not raise the timestamp: ignored
    idx.maybe_append(999, 111)  # lower: ignored
    idx.maybe_append(2000, 120)
    idx.close()
    # 12-byte big-endian entries: timestamp int64, relative offset int32
    assert path.read_bytes() == struct.pack(">qiqi", 1000, 5, 2000, 20)
    assert idx.lookup(999) is None
    assert idx.lookup(1000) == 105
    assert idx.lookup(1999) == 105
    assert idx.lookup(5000) == 120
    assert idx.last_entry() == (2000, 120)
    loaded, problem = TimeIndex.load(path, 100)
    assert problem is None and loaded.entries() == [(1000, 105), (2000, 120)]
    assert loaded.sanity_problem(max_relative_offset=20) is None
    assert loaded.sanity_problem(max_relative_offset=19) is not None


def _batch(n: int, ts: int, size: int = 100) -> bytes:
    return build_batch([(None, b"v" * size, ts + i, []) for i in range(n)])


def test_log_writes_sparse_offset_index_pointing_at_batches(tmp_path: Path) -> None:
    cfg = LogConfig(index_interval_bytes=4096)
    log = PartitionLog.open(tmp_path, "t", 0, cfg, now_ms=0)
    sizes = 0
    for i in range(200):
        b = _batch(5, 1000 + i * 10)  # ~ 600 bytes per batch
        sizes += len(b)
        log.append(b, now_ms=0)
    seg = log.active_segment
    entries = seg.offset_index.entries()
    # one entry per > 4096 bytes appended: roughly total / (4096 + batch) entries
    assert sizes // (4096 + 2 * len(b)) <= len(entries) <= sizes // 4096
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    for offset, pos in entries:
        h = parse_header(data, pos)
        assert h.last_offset == offset  # Kafka's convention: the batch's last offset
    # consecutive entries are more than index_interval_bytes apart
    positions = [p for _, p in entries]
    assert all(b - a > 4096 for a, b in zip(positions, positions[1:]))
    log.close()
    raw = (tmp_path / "t-0" / "00000000000000000000.index").read_bytes()
    assert len(raw) == 8 * len(entries)


def test_log_time_index_tracks_rising_max_timestamp(tmp_path: Path) -> None:
    cfg = LogConfig(index_interval_bytes=1000)
    log = PartitionLog.open(tmp_path, "t", 0, cfg, now_ms=0)
    # timestamps go up, then one batch goes back in time, then up again
    stamps = [1000, 2000, 3000, 500, 4000, 5000, 6000, 7000]
    for ts in stamps:
        log.append(_batch(5, ts, size=200), now_ms=0)
    tidx = log.active_segment.time_index.entries()
    assert [t for t, _ in tidx] == sorted({t for t, _ in tidx})  # strictly increasing
    log.close()
    # after close the last entry is the segment's max timestamp (7004) at the batch's last offset
    reopened = TimeIndex.load(tmp_path / "t-0" / "00000000000000000000.timeindex", 0)[0]
    assert reopened.last_entry() == (7004, 39)
