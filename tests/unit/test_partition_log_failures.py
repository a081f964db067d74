"""An append is atomic (issue 16): a write that fails on a real full disk, or an fsync that fails,
leaves the partition log exactly as it was - log end offset, segment size on disk and in memory,
both indexes, producer state - and a reopen finds nothing to cut."""

from __future__ import annotations

import errno
import logging
import os

import pytest
from small_disk import SmallDisk
from storage_helpers import FakeClock, clock  # noqa: F401 (clock: fixture)
from test_partition_log import batch, idem, open_log

from offsetd.records.batch import iter_batches
from offsetd.storage import PartitionLog, StorageError
from offsetd.storage import file_pool


def state(log: PartitionLog) -> tuple:
    """Everything an undone append must leave as it was, the file's length on disk included."""
    seg = log.active_segment
    return (log.log_end_offset, len(log.segments), seg.size, os.stat(seg.log_path).st_size,
            seg.offset_index.entries(), seg.time_index.entries(), log.producer_state.to_snapshot())


def test_appends_on_a_full_disk_are_undone_and_the_log_reopens_clean(small_disk: SmallDisk, clock: FakeClock,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    log = open_log(small_disk.path, clock, index_interval_bytes=512)
    for i in range(3):
        log.append(idem(7, 0, 2 * i), clock.now)
    small_disk.fill()
    acknowledged: list[int] = []
    refused, seq = 0, 6
    for _ in range(400):  # until a log page or an index entry needs space the disk does not have
        before = state(log)
        try:
            acknowledged.append(log.append(idem(7, 0, seq), clock.now).base_offset)
            seq += 2
        except StorageError as exc:  # the producer retries the same sequence, as librdkafka does
            assert exc.error_code == 56 and "No space left" in str(exc)
            assert state(log) == before
            refused += 1
            if refused == 5:
                break
    assert refused == 5, "the full disk never refused an append"
    assert not log.log_dir.offline
    small_disk.free()
    end = log.log_end_offset
    after = log.append(idem(7, 0, seq, n=4), clock.now)  # the refused sequence, accepted at last
    assert after.base_offset == end and not after.duplicate
    log.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="offsetd.storage"):
        reopened = open_log(small_disk.path, clock, index_interval_bytes=512)
    assert reopened.log_end_offset == end + 4
    assert not [r for r in caplog.records if "recovery" in r.getMessage()], caplog.text
    data = reopened.read(0, 1 << 30)
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 2, 4, *acknowledged, end]
    reopened.close()


def test_a_failed_fsync_undoes_the_append_and_takes_the_directory_offline(tmp_path, clock: FakeClock,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    log = open_log(tmp_path, clock)
    log.append(batch(2), clock.now, sync=True)
    before = state(log)

    def failing_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(file_pool, "_sync", failing_fdatasync)
    with pytest.raises(StorageError, match="offline"):
        log.append(batch(3), clock.now, sync=True)
    assert state(log) == before
    assert log.log_dir.offline
    monkeypatch.undo()
    with pytest.raises(StorageError, match="offline"):  # refused without a write until a restart
        log.append(batch(3), clock.now, sync=True)
    assert state(log) == before
    log.close()
    reopened = open_log(tmp_path, clock)
    assert reopened.append(batch(1), clock.now, sync=True).base_offset == 2
    reopened.close()
