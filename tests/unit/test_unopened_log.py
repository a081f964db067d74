"""Partitions opened on first use (storage/unopened_log.py, broker/topics.py): a start reads no
partition directory, Metadata's leader epoch is known before the log opens and matches it after,
the opened log serves appends, reads and offset lookups as if opened eagerly, a crash recovers
only the segments from the recovery point on, and a new partition holds no file until used."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from storage_helpers import FakeClock, clock, crash  # noqa: F401 (clock: fixture)
from test_partition_log import batch

from offsetd.broker.topics import TopicRegistry
from offsetd.config import BrokerConfig
from offsetd.storage import LogConfig, PartitionLog, log_loader
from offsetd.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from offsetd.storage.log_dir import LogDirectory
from offsetd.storage.log_dir_epochs import EPOCHS_FILE
from offsetd.storage.unopened_log import UnopenedLog

CONFIG = LogConfig(segment_bytes=600, index_interval_bytes=100)


def _unopened(path: Path, clock: FakeClock, *, clean: bool, epoch: int = 0) -> UnopenedLog:
    return UnopenedLog(path, "topic", 0, CONFIG, clock.now, LogDirectory(path), clean=clean, leader_epoch=epoch)


def _recovered_bases(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the base offset of every segment the loader verifies batch by batch."""
    recovered: list[int] = []
    real = log_loader.recover_segment
    monkeypatch.setattr(log_loader, "recover_segment",
                        lambda directory, base, *a, **k: (recovered.append(base), real(directory, base, *a, **k))[1])
    return recovered


def _write(path: Path, clock: FakeClock, batches: int) -> PartitionLog:
    log = PartitionLog.open(path, "topic", 0, CONFIG, clock.now)
    log.lead_next_epoch()
    for i in range(batches):
        log.append(batch(2, ts=clock.now + 10 * i), clock.now)
    return log


def test_a_cleanly_closed_log_opens_on_first_use_and_serves_as_before(tmp_path: Path, clock: FakeClock,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    log = _write(tmp_path, clock, 12)
    before = (log.segment_base_offsets, log.log_end_offset, log.read(0, 1 << 20), log.max_timestamp(),
              log.offset_for_timestamp(clock.now + 55))
    epoch = log.next_leader_epoch
    log.close()
    recovered = _recovered_bases(monkeypatch)
    lazy = _unopened(tmp_path, clock, clean=True, epoch=epoch)
    assert not lazy.opened and lazy.leader_epoch == epoch and not lazy.needs_recovery
    after = (lazy.segment_base_offsets, lazy.log_end_offset, lazy.read(0, 1 << 20), lazy.max_timestamp(),
             lazy.offset_for_timestamp(clock.now + 55))
    assert after == before and len(before[0]) > 2 and recovered == []
    assert lazy.opened and type(lazy) is PartitionLog and lazy.leader_epoch == epoch == 1
    assert lazy.append(batch(2), clock.now).base_offset == before[1]
    lazy.close()


def test_a_crash_recovers_only_the_segments_from_the_recovery_point(tmp_path: Path, clock: FakeClock,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    log = _write(tmp_path, clock, 12)
    log.flush()  # every rolled segment synced: the recovery point is the active segment
    synced_active = log.active_segment.base_offset
    log.roll(clock.now)
    for i in range(2):  # acknowledged, not fsynced: a kill -9 leaves them in the page cache
        log.append(batch(2, ts=clock.now + 500 + 10 * i), clock.now)
    end = log.log_end_offset
    crash(log)
    with open(tmp_path / "topic-0" / f"{log.active_segment.base_offset:020d}.log", "ab") as torn:
        torn.write(b"\x00\x01torn")  # a torn tail after the acknowledged batches
    recovered = _recovered_bases(monkeypatch)
    lazy = _unopened(tmp_path, clock, clean=False, epoch=2)
    assert lazy.needs_recovery and recovered == []  # nothing read before first use
    assert lazy.log_end_offset == end
    assert recovered == [synced_active, log.active_segment.base_offset]  # not the older, synced ones
    assert lazy.active_segment.truncated_bytes == 6
    assert lazy.offset_for_timestamp(clock.now + 505) == (end - 2, clock.now + 510)
    assert lazy.append(batch(1), clock.now).base_offset == end
    assert lazy.leader_epoch == 2
    lazy.close()


def test_a_new_partition_holds_no_file_until_it_is_used(tmp_path: Path, clock: FakeClock) -> None:
    config = BrokerConfig({"log.dirs": str(tmp_path)})
    topics = TopicRegistry(config, clock.now)
    topic = topics.create("t", 3, {}, clock.now)
    assert [os.listdir(tmp_path / f"t-{p}") for p in range(3)] == [[], [], []]
    assert [p.leader_epoch for p in topic.partitions] == [0, 0, 0]
    # the lag views ask every partition's offsets: an empty one answers without its files
    assert [(p.log_start_offset, p.last_stable_offset, p.log_end_offset) for p in topic.partitions] == [(0, 0, 0)] * 3
    assert not any(p.opened for p in topic.partitions)
    topic.partitions[2].preload()  # the background opener leaves an empty directory alone
    assert not topic.partitions[2].opened and topic.partitions[2].checked_empty
    assert topic.partitions[1].append(batch(2), clock.now).base_offset == 0
    assert "00000000000000000000.log" in os.listdir(tmp_path / "t-1")
    topics.close()
    assert os.listdir(tmp_path / "t-0") == []


def test_a_claimed_partition_with_nothing_in_it_opens_no_file_until_used(tmp_path: Path, clock: FakeClock) -> None:
    """Cluster mode: the claim's leader-epoch history is kept by a log known to hold nothing, and
    taken by the log when it opens (a broker taking 30,000 empty partitions over creates no file)."""
    log = _unopened(tmp_path, clock, clean=False)
    log.preload()  # the claim looks: no directory
    assert log.checked_empty and log.log_end_offset == 0
    log.set_epoch_history([(1, 0), (4, 0)], 5)
    assert not log.opened and log.leader_epoch == 5 and not (tmp_path / "topic-0").exists()
    assert log.append(batch(2), clock.now).base_offset == 0  # first use: opened, at the claim's epoch
    assert log.opened and log.leader_epoch == 5
    assert log.epochs.entries == [(5, 0)]  # the epochs before it led nothing (all start at 0)


def test_a_copy_whose_log_of_record_is_elsewhere_writes_its_checkpoints_without_fsync(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cluster mode's copies (durable=False): a takeover of partitions holding data wrote each one's
    epoch checkpoint with two fsyncs on the event loop; PostgreSQL keeps that history anyway."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    copy = UnopenedLog(tmp_path, "topic", 0, CONFIG, clock.now, LogDirectory(tmp_path), clean=False,
                       leader_epoch=0, sync_parent=False, durable=False)
    copy.set_epoch_history([(1, 0), (3, 0)], 3)
    assert copy.append(batch(2), clock.now).base_offset == 0
    assert not copy.durable and synced == []
    assert log_loader.read_epoch_checkpoint(tmp_path / "topic-0", 0, 2)[0].entries == [(3, 0)]
    of_record = _unopened(tmp_path / "one-node", clock, clean=False)
    of_record.append(batch(2), clock.now)
    assert of_record.durable and synced  # the embedded engine's logs fsync theirs


def test_a_start_reads_no_partition_directory_and_announces_the_epoch_the_log_opens_at(
        tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    config = BrokerConfig({"log.dirs": str(tmp_path)})
    topics = TopicRegistry(config, clock.now)
    topics.create("t", 4, {}, clock.now)
    topics.partition("t", 1).append(batch(2), clock.now)  # epoch 0 saved: the next start leads at 1
    topics.close()
    assert (tmp_path / EPOCHS_FILE).exists() and (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    opened: list[str] = []
    real_open = PartitionLog.open.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(PartitionLog, "open", classmethod(
        lambda cls, directory, topic, *a, **k: (opened.append(topic), real_open(cls, directory, topic, *a, **k))[1]))
    topics = TopicRegistry(config, clock.now)
    assert opened == [] and not (tmp_path / EPOCHS_FILE).exists()
    assert [p.leader_epoch for p in topics.get("t").partitions] == [0, 1, 0, 0]
    assert topics.partition("t", 1).log_end_offset == 2 and opened == ["t"]
    assert topics.partition("t", 1).leader_epoch == 1
    assert topics.partition("t", 1).append(batch(2), clock.now).base_offset == 2
    crashed = topics  # no close: the next start has no marker and reads each partition's checkpoint
    topics = TopicRegistry(config, clock.now)
    assert [p.leader_epoch for p in topics.get("t").partitions] == [0, 2, 0, 0]
    assert not any(p.opened for p in topics.get("t").partitions)
    topics.close()  # the crashed run's logs were never verified: no marker over them
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    topics = TopicRegistry(config, clock.now)
    for plog in topics.unopened_logs():
        plog.preload()  # the background opener: verifies the log holding segments
    assert [p.opened for p in topics.get("t").partitions] == [False, True, False, False]
    assert topics.partition("t", 1).log_end_offset == 4 and topics.partition("t", 1).leader_epoch == 2
    topics.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    for plog in (p for t in crashed for p in t.partitions):
        if plog.opened and not plog.closed:
            crash(plog)


def test_a_partition_that_cannot_be_opened_answers_kafka_storage_error(tmp_path: Path, clock: FakeClock,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from offsetd.broker.broker import Broker
    from offsetd.broker.produce import handle_produce
    from offsetd.protocol.errors import Error

    config = BrokerConfig({"log.dirs": str(tmp_path)})
    broker = Broker(config, clock.now)
    broker.topics.create("t", 2, {}, clock.now)

    def out_of_descriptors(*args: object, **kwargs: object) -> PartitionLog:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(PartitionLog, "open", out_of_descriptors)
    assert broker.serving_partition("t", 0)[1] == Error.KAFKA_STORAGE_ERROR
    request = SimpleNamespace(acks=1, transactional_id=None, topic_data=[SimpleNamespace(
        name="t", partition_data=[SimpleNamespace(index=1, records=batch(2))])])
    entry = handle_produce(broker, request, 9, clock.now)["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Error.KAFKA_STORAGE_ERROR and entry["base_offset"] == -1
    assert not broker.topics.partition("t", 1).opened and not broker.topics.log_dir.offline
    monkeypatch.undo()  # descriptors again: the same partition opens at its next use
    entry = handle_produce(broker, request, 9, clock.now)["responses"][0]["partition_responses"][0]
    assert entry["error_code"] == Error.NONE and entry["base_offset"] == 0
    broker.close()
