"""The bounded pool of open segment and index files (storage/file_pool.py): least recently used
closed first, reopened on demand, dirty files synced before they are closed, a failed sync raised
to the owner, zero-copy ranges that outlive an eviction, partition logs that work with many
more segments than the pool holds, and the start-up sizing. Also what a new log's directory costs:
its fsync waits for the log's first flush."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Iterator

import pytest
from storage_helpers import FakeClock, clock, crash  # noqa: F401 (clock: fixture)
from test_partition_log import batch, open_log

from offsetd.records.batch import iter_batches
from offsetd.storage import file_pool
from offsetd.storage.file_pool import SHARED, FilePool, PooledFile


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _files(tmp_path: Path, pool: FilePool, n: int) -> list[PooledFile]:
    return [PooledFile(tmp_path / f"f{i}", os.O_RDWR, pool) for i in range(n)]


@pytest.fixture
def small_shared_pool() -> Iterator[FilePool]:
    """The process's pool shrunk to 8 files for one test (every segment uses it)."""
    before = SHARED.capacity
    SHARED.resize(8)
    yield SHARED
    SHARED.resize(before)


def test_the_least_recently_used_file_is_closed_first(tmp_path: Path) -> None:
    pool = FilePool(2)
    a, b, c = _files(tmp_path, pool, 3)
    a.fileno()
    b.fileno()
    a.fileno()  # a is now the most recently used
    c.fileno()
    assert (a.is_open, b.is_open, c.is_open) == (True, False, True)
    assert len(pool) == 2 and pool.evictions == 1
    b.fileno()
    assert (a.is_open, b.is_open, c.is_open) == (False, True, True)


def test_a_closed_file_is_reopened_with_its_content_and_never_recreated(tmp_path: Path) -> None:
    pool = FilePool(1)
    a, b = _files(tmp_path, pool, 2)
    os.pwrite(a.fileno(), b"hello", 0)
    b.fileno()  # closes a
    assert not a.is_open and os.pread(a.fileno(), 5, 0) == b"hello"
    assert pool.opens == 3
    b.fileno()  # closes a again
    os.unlink(a.path)
    with pytest.raises(FileNotFoundError):  # deleted while closed: an error, not a new empty file
        a.fileno()
    assert not a.path.exists()
    a.close()
    with pytest.raises(ValueError):
        a.fileno()


def test_a_dirty_file_is_synced_before_it_is_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = file_pool._sync
    monkeypatch.setattr(file_pool, "_sync", lambda fd: (synced.append(fd), real(fd))[1])
    pool = FilePool(1)
    a, b, c = _files(tmp_path, pool, 3)
    fd = a.fileno()
    os.pwrite(fd, b"x", 0)
    a.dirty = True
    b.fileno()  # a is evicted: synced first
    assert synced == [fd] and not a.dirty
    c.fileno()  # b was clean: no sync
    assert synced == [fd]
    a.sync()  # nothing left to sync, and no reopen for it
    assert synced == [fd] and not a.is_open


def test_a_failed_sync_at_eviction_is_raised_by_the_owners_next_sync(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pool = FilePool(1)
    a, b = _files(tmp_path, pool, 2)
    os.pwrite(a.fileno(), b"x", 0)
    a.dirty = True

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(file_pool, "_sync", failing)
    b.fileno()
    assert not a.is_open and a.dirty and a.error is not None
    monkeypatch.undo()
    with pytest.raises(OSError, match="Input/output"):
        a.sync()


def test_a_failed_sync_at_eviction_takes_the_log_directory_offline(tmp_path: Path, clock: FakeClock,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  small_shared_pool: FilePool) -> None:
    log = open_log(tmp_path / "a", clock)
    log.append(batch(2), clock.now)  # acknowledged without an fsync (log.flush.interval.messages)
    monkeypatch.setattr(file_pool, "_sync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    others = _files(tmp_path, small_shared_pool, 8)
    for f in others:
        f.fileno()  # pushes the log's files out of the pool; its sync fails
    monkeypatch.undo()
    with pytest.raises(OSError, match="EIO"):
        log.flush()
    for f in others:
        f.close()
    log.close()


def test_running_out_of_descriptors_sheds_part_of_the_pool_and_retries(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pool = FilePool(100)
    files = _files(tmp_path, pool, 9)
    for f in files[:8]:
        f.fileno()
    real_open = os.open
    failures = iter([OSError(errno.EMFILE, "Too many open files")])

    def flaky_open(*args: object, **kwargs: object) -> int:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", flaky_open)
    files[8].fileno()
    assert files[8].is_open and len(pool) == 7 and not files[0].is_open and not files[1].is_open
    pool.close_all()


def test_zero_copy_ranges_survive_the_pool_closing_their_segments(tmp_path: Path, clock: FakeClock,
                                                                  small_shared_pool: FilePool) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1000)
    for _ in range(60):
        log.append(batch(5, value_size=40), clock.now)
    assert len(log.segments) > 8  # more segments than the pool holds
    expected = log.read(0, 1 << 20)
    held = log.read_file(0, 1 << 20)
    assert not isinstance(held, bytes) and len(held.ranges) == len(log.segments) - (log.segments[-1].size == 0)
    SHARED.close_all()  # every pooled descriptor closed: the ranges keep their own
    assert held.read() == expected
    held.close()
    log.close()


def test_a_header_scan_survives_the_pool_being_used_between_batches(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    for _ in range(20):
        log.append(batch(3), clock.now)
    seg = log.active_segment
    pool = FilePool(1)
    other = PooledFile(tmp_path / "other", os.O_RDWR, pool)
    seen = []
    for _pos, h in seg.iter_headers(0, chunk=200):
        SHARED.close_all()  # the segment's descriptor is gone before the next chunk is read
        other.fileno()
        seen.append(h.base_offset)
    assert seen == list(range(0, 60, 3))
    other.close()
    log.close()


def test_many_partitions_share_a_small_pool_and_keep_their_data(tmp_path: Path, clock: FakeClock,
                                                                small_shared_pool: FilePool) -> None:
    before = _open_fds()
    logs = [open_log(tmp_path / f"p{i}", clock, segment_bytes=1500) for i in range(30)]
    for round_ in range(6):
        for i, log in enumerate(logs):
            log.append(batch(2, tag=f"{i}-{round_}-"), clock.now, sync=round_ % 3 == 0)
    assert _open_fds() - before <= 8
    for i, log in enumerate(logs):
        data = log.read(0, 1 << 20)
        assert [h.base_offset for _, h in iter_batches(data)] == list(range(0, 12, 2))
        assert all(f"{i}-{round_}-1.".encode() in data for round_ in range(6))
    for log in logs[:15]:
        log.close()
    for log in logs[15:]:
        crash(log)  # kill -9: what the page cache holds, synced or not, is read back
    reopened = [open_log(tmp_path / f"p{i}", clock, segment_bytes=1500) for i in range(30)]
    assert [log.log_end_offset for log in reopened] == [12] * 30
    assert _open_fds() - before <= 8
    for log in reopened:
        log.close()
    assert _open_fds() <= before


def test_an_append_after_eviction_is_flushed_by_the_owner(tmp_path: Path, clock: FakeClock,
                                                          small_shared_pool: FilePool) -> None:
    """A dirty active segment pushed out of the pool is synced on the way out; the log's own
    flush then has nothing left to sync, and never loses track of what is unsynced."""
    log = open_log(tmp_path / "a", clock)
    log.append(batch(2), clock.now)
    seg = log.active_segment
    assert seg.dirty
    others = _files(tmp_path, small_shared_pool, 8)
    for f in others:
        f.fileno()
    assert not seg.file.is_open and not seg.dirty
    log.append(batch(2), clock.now)  # reopened on demand
    assert seg.dirty
    log.flush()
    assert not seg.dirty
    for f in others:
        f.close()
    log.close()


def test_a_failed_sync_of_an_evicted_index_is_raised_when_its_segment_is_flushed(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, small_shared_pool: FilePool) -> None:
    log = open_log(tmp_path / "a", clock, index_interval_bytes=10)
    for _ in range(5):
        log.append(batch(2), clock.now)
    log.roll(clock.now)  # the rolled segment's indexes are written but not yet fsynced
    sealed = log.segments[0]
    assert sealed.offset_index.dirty
    monkeypatch.setattr(file_pool, "_sync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    others = _files(tmp_path, small_shared_pool, 8)
    for f in others:
        f.fileno()
    monkeypatch.undo()
    assert not sealed.offset_index.has_fd and sealed.offset_index.dirty
    with pytest.raises(OSError, match="EIO"):
        log.flush()  # the recovery point must not pass a segment whose index may be lost
    for f in others:
        f.close()


def test_start_up_sizes_the_pool_from_the_raised_limit_or_log_max_open_files(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    from offsetd.config import BrokerConfig, ConfigError
    from offsetd.server.open_files import size_open_files
    from offsetd.storage.file_records import FileRecords

    before = SHARED.capacity
    monkeypatch.setattr(FileRecords, "budget", FileRecords.budget)
    try:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        limit = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        assert size_open_files(BrokerConfig({})) == max(16, limit // 2) == SHARED.capacity
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
        assert FileRecords.budget == max(16, limit // 4)
        assert size_open_files(BrokerConfig({"log.max.open.files": "100"})) == 100 == SHARED.capacity
        with pytest.raises(ConfigError):
            BrokerConfig({"log.max.open.files": "8"})
    finally:
        SHARED.resize(before)


def test_a_new_log_fsyncs_its_directory_at_its_first_flush_not_at_creation(tmp_path: Path, clock: FakeClock,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from offsetd.storage import log_loader, partition_log

    synced: list[Path] = []
    for module in (log_loader, partition_log):
        monkeypatch.setattr(module, "_fsync_dir", lambda path: synced.append(Path(path)))
    log = open_log(tmp_path, clock)
    assert synced == [tmp_path]  # the log directory (a new entry in it), not the partition's own
    log.append(batch(2), clock.now)  # not flushed: nothing to make durable yet
    assert synced == [tmp_path]
    log.append(batch(2), clock.now, sync=True)
    assert synced == [tmp_path, log.dir]
    log.append(batch(2), clock.now, sync=True)
    log.close()
    assert synced == [tmp_path, log.dir]
    reopened = open_log(tmp_path, clock)  # an existing directory: nothing owed
    reopened.close()
    assert synced == [tmp_path, log.dir]
