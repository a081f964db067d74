"""Opening the logs of a clean shutdown (Kafka's `.kafka_cleanshutdown`, storage/clean_shutdown.py
and storage/log_loader.py): nothing is verified, yet the log, its indexes, segment ages and the
idempotent producers are exactly as they were; and the broker's catalogue writes and consumes the
marker so that a crash never finds one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_helpers import FakeClock, clock  # noqa: F401 (clock: fixture)
from test_partition_log import batch, idem

from offsetd.broker.topics import TopicRegistry
from offsetd.config import BrokerConfig
from offsetd.storage import LogConfig, PartitionLog
from offsetd.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from offsetd.storage import log_loader
from offsetd.storage.segment import Segment


def _open(path: Path, clock: FakeClock, *, clean: bool) -> PartitionLog:
    return PartitionLog.open(path, "topic", 0, LogConfig(segment_bytes=600, index_interval_bytes=100), clock.now,
                             clean=clean)


def _no_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> Segment:
        raise AssertionError("a cleanly closed log was verified")

    monkeypatch.setattr(log_loader, "recover_segment", refuse)


def test_a_clean_open_verifies_nothing_and_finds_the_log_as_it_was(tmp_path: Path, clock: FakeClock,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    log = _open(tmp_path, clock, clean=False)
    for seq in range(0, 40, 2):
        log.append(idem(7, 0, seq), clock.now)
    log.append(batch(3, ts=clock.now + 5), clock.now)
    before = (log.segment_base_offsets, log.log_end_offset, log.read(0, 1 << 20),
              [s.offset_index.entries() for s in log.segments], [s.time_index.entries() for s in log.segments[:-1]],
              log.max_timestamp(), log.offset_for_timestamp(clock.now + 6), log.producer_state.to_snapshot())
    log.close()
    _no_recovery(monkeypatch)
    reopened = _open(tmp_path, clock, clean=True)
    after = (reopened.segment_base_offsets, reopened.log_end_offset, reopened.read(0, 1 << 20),
             [s.offset_index.entries() for s in reopened.segments],
             [s.time_index.entries() for s in reopened.segments[:-1]], reopened.max_timestamp(),
             reopened.offset_for_timestamp(clock.now + 6), reopened.producer_state.to_snapshot())
    assert after == before and len(before[0]) > 2
    assert reopened.active_segment.time_index.last_entry() == (clock.now + 7, 42)  # closing added it
    # the segment's age starts at its first batch's timestamp, as a recovery takes it
    assert reopened.active_segment.rolling_base_ms == clock.now + 7 and not reopened.active_segment.sealed
    dup = reopened.append(idem(7, 0, 38), clock.now)  # the producer's last batch: still known
    assert dup.duplicate
    assert reopened.append(idem(7, 0, 40), clock.now).base_offset == before[1]
    reopened.close()
    monkeypatch.undo()
    verified = _open(tmp_path, clock, clean=False)  # a full verification agrees
    assert verified.log_end_offset == before[1] + 2 and verified.active_segment.truncated_bytes == 0
    verified.close()


def test_a_producer_snapshot_that_disagrees_with_the_log_means_recovery(tmp_path: Path, clock: FakeClock) -> None:
    log = _open(tmp_path, clock, clean=False)
    log.append(idem(7, 0, 0), clock.now)
    log.close()
    snapshot = tmp_path / "topic-0" / "offsetd-producer-state.json"
    snapshot.write_text(snapshot.read_text().replace('"offset": 2', '"offset": 1'))
    reopened = _open(tmp_path, clock, clean=True)
    assert reopened.log_end_offset == 2 and reopened.append(idem(7, 0, 0), clock.now).duplicate
    reopened.close()


def test_the_catalogue_marks_a_clean_shutdown_and_consumes_the_mark(tmp_path: Path, clock: FakeClock,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = BrokerConfig({"log.dirs": str(tmp_path)})
    topics = TopicRegistry(config, clock.now)
    topic = topics.create("t", 3, {}, clock.now)
    topic.partitions[1].append(batch(2), clock.now)
    marker = tmp_path / CLEAN_SHUTDOWN_FILE
    assert not marker.exists()
    topics.close()
    assert marker.exists()
    with monkeypatch.context() as patch:
        _no_recovery(patch)
        topics = TopicRegistry(config, clock.now)
        assert topics.partition("t", 1).log_end_offset == 2  # opened at this first use, not verified
    assert not marker.exists()  # consumed before anything is appended
    topics.partition("t", 1).append(batch(2), clock.now)
    crashed = topics  # no close(): a crash leaves no marker, and the next start verifies
    recovered: list[int] = []
    real = log_loader.recover_segment
    monkeypatch.setattr(log_loader, "recover_segment",
                        lambda directory, base, *a, **k: (recovered.append(base), real(directory, base, *a, **k))[1])
    topics = TopicRegistry(config, clock.now)
    assert topics.partition("t", 1).log_end_offset == 4 and recovered
    for t in (crashed, topics):
        for plog in (p for topic in t for p in topic.partitions):
            if not plog.closed:
                plog.close()


def test_a_log_torn_after_its_clean_shutdown_is_verified_after_all(tmp_path: Path, clock: FakeClock) -> None:
    log = _open(tmp_path, clock, clean=False)
    for _ in range(3):
        log.append(batch(2), clock.now)
    log.close()
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    os.truncate(path, path.stat().st_size - 3)
    reopened = _open(tmp_path, clock, clean=True)
    assert reopened.log_end_offset == 4 and reopened.active_segment.truncated_bytes > 0
    reopened.close()
