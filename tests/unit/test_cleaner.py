"""The log cleaner (compaction) on real files: equivalence with a reference model, tombstones,
dirty ratio, compaction lag, idle segments, batch kinds, concurrency, and crash safety of the
segment swap at every step (in-process injection and a real process exit). Time is a fake clock.

The throughput benchmark on a 100 MB `__consumer_offsets`-like partition runs only with
`bench/cleaner.py` (a measurement, not a timed test):

    .venv/bin/python bench/cleaner.py
"""

from __future__ import annotations

import logging
import os
import gzip
import pickle
import random
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import uuid
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import cramjam
import pytest
from storage_helpers import HOUR, T0, FakeClock, clock, crash  # noqa: F401 (clock: fixture)
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch

from offsetd.coordinator.config import GroupCoordinatorConfig
from offsetd.coordinator.shard import GroupCoordinatorShard
from offsetd.records import consumer_group_records as cgr
from offsetd.records.batch import TRANSACTIONAL_MASK, build_batch, iter_batches
from offsetd.records.compression import decompress
from offsetd.records.control import build_marker_batch
from offsetd.records.scan import scan_key_values
from offsetd.records.log_walker import iter_log_records
from offsetd.records.offset_commit_value import OffsetCommitValue
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value
from offsetd.storage import LogConfig, PartitionLog, segment_swap
from offsetd.storage.cleaner import (
    CHECKPOINT_FILE,
    CleanerError,
    LogCleaner,
    read_checkpoint,
)
from offsetd.storage.segment_swap import SWAP_MANIFEST_FILE

DAY = 24 * HOUR


def compact_config(**kw) -> LogConfig:
    kw.setdefault("cleanup_policy", "compact")
    kw.setdefault("segment_bytes", 4096)
    return LogConfig(**kw)


def open_log(root: Path, clock: FakeClock, config: LogConfig | None = None, **kw) -> PartitionLog:
    return PartitionLog.open(root, "topic", 0, config or compact_config(**kw), clock.now)


def append(log: PartitionLog, clock: FakeClock, records, step: int = 10, **kw) -> None:
    log.append(build_batch([(k, v, clock.now, []) for k, v in records], **kw), clock.now)
    clock.advance(step)


def random_workload(
    log: PartitionLog,
    clock: FakeClock,
    rnd: random.Random,
    batches: int,
    keys: int,
    *,
    tombstones: float = 0.1,
    null_keys: float = 0.0,
    max_batch: int = 5,
    step: int = 10,
) -> None:
    for _ in range(batches):
        recs = []
        for _ in range(rnd.randint(1, max_batch)):
            key = None if rnd.random() < null_keys else f"key-{rnd.randrange(keys):04d}".encode()
            value = None if rnd.random() < tombstones else rnd.randbytes(rnd.randint(0, 40))
            recs.append((key, value))
        append(log, clock, recs, step)


def log_bytes(log: PartitionLog) -> bytes:
    return log.read(log.log_start_offset, 1 << 31)


def records(log: PartitionLog) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every record, in log order."""
    return [(o, ts, k, v) for o, ts, k, v, _pid in iter_log_records(log_bytes(log), verify=True,
                                                                           decompress=decompress)]


def kv_state(log: PartitionLog) -> dict[bytes, bytes]:
    """key -> value after replaying the log (a tombstone removes the key), as the loader does."""
    state: dict[bytes, bytes] = {}

    def on_record(key, value):
        if value is None:
            state.pop(bytes(key), None)
        else:
            state[bytes(key)] = bytes(value)

    scan_key_values(log_bytes(log), on_record)
    return state


def expected_after(before, start: int, end: int, now: int, delete_retention_ms: int):
    """Reference model of one cleaning of [start, end): the latest record per key survives,
    null keys survive, a latest tombstone older than delete.retention.ms goes."""
    latest: dict[bytes, int] = {}
    for off, _ts, key, _v in before:
        if start <= off < end and key is not None:
            latest[key] = off
    out = []
    for rec in before:
        off, ts, key, value = rec
        if off >= end or key is None:
            out.append(rec)
        elif latest[key] == off and not (value is None and now - ts > delete_retention_ms):
            out.append(rec)
    return out


def leftovers(pdir: Path) -> list[str]:
    return sorted(n for n in os.listdir(pdir) if n.endswith((".cleaned", ".swap")) or "cleaner-swap" in n)


# ------------------------------------------------------------------------------ equivalence


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_workload_matches_the_reference_model(tmp_path: Path, clock: FakeClock, seed: int) -> None:
    rnd = random.Random(seed)
    log = open_log(tmp_path, clock, delete_retention_ms=2000)
    random_workload(log, clock, rnd, 1500, 150, tombstones=0.15)
    # Some tombstones end up older than delete.retention.ms, the newest are younger.
    clock.advance(1200)
    before = records(log)
    state = kv_state(log)
    start, end = log.log_start_offset, log.log_end_offset
    size = log.size_bytes
    active = log.active_segment
    active_bytes = os.pread(active.file.fileno(), active.size, 0)
    cleanable_end = active.base_offset
    assert len(log.segments) > 10

    plan = LogCleaner().clean(log, clock.now)
    assert plan is not None and plan.end_offset == cleanable_end
    after = records(log)
    assert after == expected_after(before, start, cleanable_end, clock.now, 2000)
    assert plan.stats.tombstones_dropped > 0
    assert any(v is None for _o, _t, k, v in after if k is not None and _o < cleanable_end)
    assert kv_state(log) == state
    assert (log.log_start_offset, log.log_end_offset) == (start, end)
    assert log.size_bytes < size / 3
    assert log.active_segment is active and os.pread(active.file.fileno(), active.size, 0) == active_bytes
    offsets = [r[0] for r in after]
    assert offsets == sorted(set(offsets))
    assert read_checkpoint(log.dir)[0] == cleanable_end

    # Appends still work, and everything survives a restart.
    append(log, clock, [(b"key-0000", b"after")])
    state[b"key-0000"] = b"after"
    log.close()
    log = open_log(tmp_path, clock, delete_retention_ms=2000)
    assert kv_state(log) == state
    assert records(log)[:-1] == after


def test_varint_edge_cases_headers_and_unordered_timestamps(tmp_path: Path, clock: FakeClock) -> None:
    """Multi-byte record lengths, offset deltas and key lengths, record headers, timestamps that
    go backwards inside a batch (negative deltas after regrouping): all survive byte-exact."""
    rnd = random.Random(4)
    log = open_log(tmp_path, clock, segment_bytes=60_000, delete_retention_ms=0)
    for b in range(40):
        recs = []
        for i in range(rnd.choice([1, 3, 100, 200])):
            key = (b"long-key-" * rnd.choice([1, 20])) + b"%d" % rnd.randrange(50)
            value = None if rnd.random() < 0.05 else rnd.randbytes(rnd.choice([5, 70, 300, 9000]))
            headers = [("h", b"x" * rnd.randrange(3)), ("trace", None)] if rnd.random() < 0.3 else []
            recs.append((key, value, clock.now + rnd.randrange(-5000, 5000), headers))
        log.append(build_batch(recs), clock.now)
        clock.advance(1000)
    log.roll(clock.now)
    before = records(log)
    raw_before = {o: (ts, k, v, tuple(h)) for o, ts, k, v, h in client_records(log)}
    LogCleaner(max_batch_bytes=4096).clean(log, clock.now)
    after = records(log)
    assert after == expected_after(before, 0, log.active_segment.base_offset, clock.now, 0)
    for o, ts, k, v, h in client_records(log):
        assert raw_before[o] == (ts, k, v, tuple(h))
    assert any(h.records_count > 1 for _, h in iter_batches(log_bytes(log)))


def client_records(log: PartitionLog):
    """(offset, ts, key, value, headers) as kafka-python's record parser sees them (CRC checked)."""
    data = log_bytes(log)
    for pos, h in iter_batches(data):
        batch = DefaultRecordBatch(data[pos : pos + h.size])
        assert batch.validate_crc()
        for r in batch:
            yield r.offset, r.timestamp, r.key, r.value, [(hk, hv) for hk, hv in r.headers]


def test_reads_fetches_and_timestamps_across_cleaned_segments(tmp_path: Path, clock: FakeClock) -> None:
    rnd = random.Random(9)
    log = open_log(tmp_path, clock, index_interval_bytes=256)
    random_workload(log, clock, rnd, 800, 60, tombstones=0.05)
    before = records(log)
    LogCleaner().clean(log, clock.now)
    after = records(log)
    kept = {r[0]: r for r in after}
    by_offset = {r[0]: r for r in before}
    # A read at any offset of the original log starts at the first surviving record >= it.
    survivors = sorted(kept)
    for off in range(log.log_start_offset, log.log_end_offset, 7):
        data = log.read(off, 1)  # min_one_batch: one whole batch
        (pos, h), *_ = list(iter_batches(data))
        first = next(o for o in survivors if o >= off)
        assert h.base_offset <= first <= h.last_offset
    # A consumer paging through with small fetches sees exactly the survivors.
    seen, off = [], log.log_start_offset
    while off < log.log_end_offset:
        data = log.read(off, 300)
        if not data:
            break
        for o, ts, k, v, _ in iter_log_records(data):
            if o >= off:
                seen.append((o, ts, k, v))
        off = max(h.last_offset for _, h in iter_batches(data)) + 1
    assert seen == after
    # Every surviving record is unchanged and can be found by its timestamp.
    for off, rec in list(kept.items())[::25]:
        assert by_offset[off] == rec
        found = log.offset_for_timestamp(rec[1])
        assert found is not None and found[0] <= off
    # A real client library parses the rewritten batches (CRC, offsets, keys, values).
    data = log_bytes(log)
    client = []
    for pos, h in iter_batches(data):
        batch = DefaultRecordBatch(data[pos : pos + h.size])
        assert batch.validate_crc()
        client.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
    assert client == after


def test_offsets_table_loaded_from_compacted_log_is_identical(tmp_path: Path, clock: FakeClock) -> None:
    """__consumer_offsets: commits, re-commits, group metadata, offset + group tombstones."""
    rnd = random.Random(5)
    log = open_log(tmp_path, clock, delete_retention_ms=DAY)
    groups = [f"group-{g}" for g in range(30)]
    live: dict[str, set] = {g: set() for g in groups}
    for i in range(3000):
        g = rnd.choice(groups)
        if rnd.random() < 0.03 and live[g]:  # delete the group: offset tombstones, group tombstone
            recs = [(encode_key(OffsetCommitKey(g, t, p)), None) for t, p in sorted(live[g])]
            recs.append((encode_key(GroupMetadataKey(g)), None))
            live[g].clear()
        else:
            recs = []
            for _ in range(rnd.randint(1, 6)):
                tp = (f"topic-{rnd.randrange(4)}", rnd.randrange(8))
                live[g].add(tp)
                value = OffsetCommitValue(i, 3, "meta" if rnd.random() < 0.3 else "", clock.now)
                recs.append((encode_key(OffsetCommitKey(g, *tp)), encode_value(value)))
        append(log, clock, recs, step=60_000)

    def load() -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(0, GroupCoordinatorConfig())
        scan_key_values(log_bytes(log), shard.replay_raw)
        return shard

    reference = load()
    size = log.size_bytes
    for days in (0, 1, 3):  # first while tombstones are young, then after they expired
        clock.advance(days * DAY)
        LogCleaner().clean(log, clock.now, force=True)
        log.close()
        log = open_log(tmp_path, clock, delete_retention_ms=DAY)
        shard = load()
        assert shard.offsets == reference.offsets
        assert sorted(shard.groups) == sorted(reference.groups)
    assert log.size_bytes < size / 10


def _consumer_group_workload(log: PartitionLog, clock: FakeClock, rnd: random.Random) -> None:
    """KIP-848 consumer groups' records (types 3-8, 16) as the coordinator writes them: members
    join and reconcile (a new subscription only now and then, assignments and epochs often),
    leave (tombstones of their records 8, 7, 5 and a new group epoch), and whole groups are
    deleted (every key of the group tombstoned)."""
    topic = uuid.UUID(int=7)
    groups = [f"cg-{g}" for g in range(12)]
    epochs = dict.fromkeys(groups, 0)
    members: dict[str, set[str]] = {g: set() for g in groups}
    regexes: dict[str, set[str]] = {g: set() for g in groups}

    def rec(key, value=None):
        return cgr.encode_key(key), None if value is None else cgr.encode_value(value)

    for i in range(2500):
        g = rnd.choice(groups)
        epochs[g] += 1
        epoch = epochs[g]
        roll = rnd.random()
        if roll < 0.02 and members[g]:  # the group is deleted
            recs = [r for m in sorted(members[g]) for r in (
                rec(cgr.ConsumerGroupCurrentMemberAssignmentKey(g, m)),
                rec(cgr.ConsumerGroupTargetAssignmentMemberKey(g, m)), rec(cgr.ConsumerGroupMemberMetadataKey(g, m)))]
            recs += [rec(cgr.ConsumerGroupRegularExpressionKey(g, r)) for r in sorted(regexes[g])]
            recs += [rec(cgr.ConsumerGroupTargetAssignmentMetadataKey(g)), rec(cgr.ConsumerGroupPartitionMetadataKey(g)),
                     rec(cgr.ConsumerGroupMetadataKey(g))]
            members[g].clear()
            regexes[g].clear()
            epochs[g] = 0
        elif roll < 0.2 and members[g]:  # a member leaves
            m = rnd.choice(sorted(members[g]))
            members[g].discard(m)
            recs = [rec(cgr.ConsumerGroupCurrentMemberAssignmentKey(g, m)),
                    rec(cgr.ConsumerGroupTargetAssignmentMemberKey(g, m)), rec(cgr.ConsumerGroupMemberMetadataKey(g, m)),
                    rec(cgr.ConsumerGroupMetadataKey(g), cgr.ConsumerGroupMetadataValue(epoch))]
        else:  # a member joins or reconciles
            m = f"member-{rnd.randrange(6)}"
            recs = []
            if m not in members[g] or rnd.random() < 0.1:
                members[g].add(m)
                regex = f"t{rnd.randrange(3)}.*" if rnd.random() < 0.3 else None
                recs.append(rec(cgr.ConsumerGroupMemberMetadataKey(g, m), cgr.ConsumerGroupMemberMetadataValue(
                    None, None, "client", "/127.0.0.1", ("t",), regex, 45000, "uniform")))
                recs.append(rec(cgr.ConsumerGroupPartitionMetadataKey(g), cgr.ConsumerGroupPartitionMetadataValue(
                    (cgr.TopicMetadata(topic, "t", 8),))))
                if regex is not None:
                    regexes[g].add(regex)
                    recs.append(rec(cgr.ConsumerGroupRegularExpressionKey(g, regex),
                                    cgr.ConsumerGroupRegularExpressionValue(("t0",), i, clock.now)))
            k = int(m.removeprefix("member-"))  # members own disjoint partitions, as the assignors give them
            assigned = (cgr.TopicPartitions(topic, tuple(p for p in (k, k + 6) if p < 8)),)
            recs += [rec(cgr.ConsumerGroupMetadataKey(g), cgr.ConsumerGroupMetadataValue(epoch)),
                     rec(cgr.ConsumerGroupTargetAssignmentMemberKey(g, m), cgr.ConsumerGroupTargetAssignmentMemberValue(
                         assigned)),
                     rec(cgr.ConsumerGroupTargetAssignmentMetadataKey(g),
                         cgr.ConsumerGroupTargetAssignmentMetadataValue(epoch)),
                     rec(cgr.ConsumerGroupCurrentMemberAssignmentKey(g, m), cgr.ConsumerGroupCurrentMemberAssignmentValue(
                         epoch, epoch - 1, 0, assigned, ()))]
        append(log, clock, recs, step=60_000)


def test_consumer_group_records_compact_like_the_classic_ones(tmp_path: Path, clock: FakeClock) -> None:
    """The cleaner works on key bytes, so KIP-848 records compact as the classic ones: the latest
    record of each key survives, a tombstone (a member's leave, a group's deletion) lives
    delete.retention.ms and then goes, and the consumer groups loaded from the compacted log are
    the ones loaded before."""
    log = open_log(tmp_path, clock, delete_retention_ms=DAY)
    _consumer_group_workload(log, clock, random.Random(11))
    log.roll(clock.now)  # the active segment is never cleaned: every record is in the cleanable range

    def load() -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(0, GroupCoordinatorConfig())
        scan_key_values(log_bytes(log), shard.replay_raw)
        return shard

    before = records(log)
    reference = load()
    assert reference.skipped_records == 0 and len(reference.consumer.groups) > 5
    size = log.size_bytes
    for days in (0, 1, 3):  # first while the tombstones are young, then after they expired
        clock.advance(days * DAY)
        LogCleaner().clean(log, clock.now, force=True)
        log.close()
        log = open_log(tmp_path, clock, delete_retention_ms=DAY)
        after = records(log)
        keys = [k for _, _, k, _ in after]
        assert len(keys) == len(set(keys))  # the latest record of each key, once
        latest = {k: (o, v) for o, _, k, v in before}
        assert all(latest[k] == (o, v) for o, _, k, v in after)
        tombstones = sum(v is None for _, _, _, v in after)
        assert tombstones > 0 if days == 0 else tombstones == 0
        assert load().consumer.groups == reference.consumer.groups
    assert log.size_bytes < size / 10


# ------------------------------------------------------------------------------ tombstones


def test_tombstone_lives_until_delete_retention_then_goes_without_new_data(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, delete_retention_ms=HOUR)
    append(log, clock, [(b"a", b"1"), (b"b", b"1")])
    append(log, clock, [(b"a", None)])
    tomb_ts = clock.now - 10
    log.roll(clock.now)
    cleaner = LogCleaner()
    cleaner.clean(log, clock.now)
    assert [(k, v) for _, _, k, v in records(log)] == [(b"b", b"1"), (b"a", None)]
    assert read_checkpoint(log.dir)[1] == tomb_ts + HOUR
    # Nothing dirty and the tombstone is young: no cleaning.
    clock.advance(HOUR - 100)
    assert cleaner.select(log, clock.now) is None
    # Past delete.retention.ms the deadline alone triggers a cleaning, which drops it.
    clock.advance(200)
    plan = cleaner.clean(log, clock.now)
    assert plan is not None and plan.job.reason.startswith("tombstones")
    assert [(k, v) for _, _, k, v in records(log)] == [(b"b", b"1")]
    assert plan.tombstone_deadline_ms == -1
    assert cleaner.select(log, clock.now + DAY) is None


def test_first_segment_emptied_keeps_log_start_and_later_retention_removes_it(tmp_path: Path, clock: FakeClock) -> None:
    config = compact_config(delete_retention_ms=0, segment_bytes=200)
    log = open_log(tmp_path, clock, config)
    for i in range(6):
        append(log, clock, [(b"k%d" % i, b"v" * 50)])
    for i in range(6):
        append(log, clock, [(b"k%d" % i, None)])
    log.roll(clock.now)
    append(log, clock, [(b"live", b"x")])  # in the active segment
    start, end = log.log_start_offset, log.log_end_offset
    LogCleaner().clean(log, clock.now + 1)
    assert (log.log_start_offset, log.log_end_offset) == (start, end)
    assert log.segments[0].size == 0 and log.segments[0].base_offset == start
    assert kv_state(log) == {b"live": b"x"}
    assert log.read(start, 1000) == log.read(log.segments[-1].base_offset, 1000)
    log.close()
    log = open_log(tmp_path, clock, config)
    assert log.log_start_offset == start and kv_state(log) == {b"live": b"x"}
    # With compact,delete, retention deletes an emptied sealed segment like any other.
    size = log.size_bytes
    log.close()
    both = compact_config(delete_retention_ms=0, segment_bytes=200, cleanup_policy="compact,delete",
                          retention_bytes=size)
    log = open_log(tmp_path, clock, both)
    assert log.apply_retention(clock.now) == 1
    assert log.log_start_offset == log.segments[0].base_offset > start


# ------------------------------------------------------------------------------ scheduling


def test_dirty_ratio_and_checkpoint(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.5, segment_bytes=1 << 20)
    cleaner = LogCleaner()
    for i in range(200):
        append(log, clock, [(b"key-%03d" % i, b"x" * 100)])
    assert cleaner.select(log, clock.now) is None  # only the active segment has data
    log.roll(clock.now)
    plan = cleaner.clean(log, clock.now)
    assert plan is not None and plan.job.dirty_ratio == 1.0
    (first_dirty, _), clean_size = read_checkpoint(log.dir), log.segments[0].size
    assert first_dirty == log.active_segment.base_offset == 200
    # A little new data: dirty / (clean + dirty) < 0.5, nothing happens.
    for i in range(50):
        append(log, clock, [(b"key-%03d" % i, b"y" * 100)])
    log.roll(clock.now)
    job = cleaner.select(log, clock.now)
    assert job is None
    # Enough to cross the ratio.
    for i in range(150):
        append(log, clock, [(b"key-%03d" % i, b"z" * 100)])
    log.roll(clock.now)
    job = cleaner.select(log, clock.now)
    assert job is not None and job.first_dirty_offset == 200 and job.clean_bytes == clean_size
    assert 0.5 <= job.dirty_ratio < 1
    assert cleaner.select(log, clock.now) is None  # one cleaning per log at a time
    plan = cleaner.prepare(job)
    assert cleaner.commit(log, plan)
    assert read_checkpoint(log.dir)[0] == 400
    state = kv_state(log)
    assert len(state) == 200 and state[b"key-000"] == b"z" * 100 and state[b"key-199"] == b"x" * 100
    # The checkpoint is a file: a restarted broker sees the same ratio.
    log.close()
    log = open_log(tmp_path, clock, min_cleanable_dirty_ratio=0.5, segment_bytes=1 << 20)
    assert LogCleaner().select(log, clock.now) is None
    (log.dir / CHECKPOINT_FILE).write_text("garbage")
    assert LogCleaner().select(log, clock.now) is not None  # unreadable: everything dirty


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, min_compaction_lag_ms=HOUR, segment_bytes=300)
    for i in range(20):
        append(log, clock, [(b"k", b"%d" % i), (b"other%d" % i, b"v")], step=10 * 60_000)
    sealed = log.segments[:-1]
    cutoff = clock.now - HOUR
    old = [s for s in sealed if s.largest_timestamp <= cutoff]
    assert 0 < len(old) < len(sealed)
    young_first = sealed[len(old)].base_offset
    before = records(log)
    plan = LogCleaner().clean(log, clock.now)
    assert plan is not None and plan.end_offset == young_first
    after = records(log)
    assert after == expected_after(before, 0, young_first, clock.now, 86400000)
    assert [r for r in after if r[0] >= young_first] == [r for r in before if r[0] >= young_first]


def test_idle_active_segment_is_rolled_by_segment_ms_and_cleaned(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_ms=HOUR, segment_bytes=1 << 20)
    for i in range(100):
        append(log, clock, [(b"k%d" % (i % 10), b"v%d" % i)])
    assert len(log.segments) == 1
    cleaner = LogCleaner()
    assert cleaner.select(log, clock.now) is None
    clock.advance(HOUR)
    plan = cleaner.clean(log, clock.now)
    assert plan is not None
    assert len(records(log)) == 10 and log.active_segment.size == 0
    assert kv_state(log) == {b"k%d" % i: b"v%d" % (90 + i) for i in range(10)}


def test_full_offset_map_cleans_a_prefix_and_the_next_cleaning_continues(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=1000, min_cleanable_dirty_ratio=0.01)
    for i in range(300):
        append(log, clock, [(b"key-%03d" % i, b"a" * 20)])
    for i in range(300):
        append(log, clock, [(b"key-%03d" % i, b"b" * 20)])
    log.roll(clock.now)
    state = kv_state(log)
    cleaner = LogCleaner(max_map_keys=50)
    plan = cleaner.clean(log, clock.now)
    assert plan.source_count < len(plan.job.sources) and plan.end_offset < log.active_segment.base_offset
    assert read_checkpoint(log.dir)[0] == plan.end_offset
    assert kv_state(log) == state
    while (plan := cleaner.clean(log, clock.now)) is not None:
        assert kv_state(log) == state
    assert read_checkpoint(log.dir)[0] == log.active_segment.base_offset
    assert [k for _o, _t, k, v in records(log)] == [b"key-%03d" % i for i in range(300)]
    assert all(v == b"b" * 20 for _o, _t, _k, v in records(log))


def test_select_ignores_delete_policy_logs(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, LogConfig(segment_bytes=100))
    for i in range(10):
        append(log, clock, [(b"k", b"%d" % i)])
    assert LogCleaner().select(log, clock.now, force=True) is None


# ------------------------------------------------------------------------------ output layout


def test_output_segments_bounded_by_segment_bytes_and_merged(tmp_path: Path, clock: FakeClock, caplog) -> None:
    config = compact_config(segment_bytes=5000, index_interval_bytes=512)
    log = open_log(tmp_path, clock, config)
    for i in range(400):  # distinct keys: little to remove, many small segments
        append(log, clock, [(b"key-%04d" % i, b"v" * 40)])
    for i in range(0, 400, 2):
        append(log, clock, [(b"key-%04d" % i, b"w" * 40)])
    state = kv_state(log)
    n_before = len(log.segments)
    plan = LogCleaner(max_batch_bytes=1024).clean(log, clock.now)
    sealed = log.segments[:-1]
    assert len(sealed) < n_before - 1 and len(plan.new_bases) == len(sealed)
    assert all(s.size <= 5000 for s in sealed)
    assert sum(s.size for s in sealed[:-1]) > 0.8 * 5000 * (len(sealed) - 1)  # densely packed
    assert kv_state(log) == state
    # Small single-record batches were regrouped into larger ones.
    batches = [h for _, h in iter_batches(log_bytes(log))]
    assert len(batches) < len(records(log)) / 5 and max(h.size for h in batches) <= 1024
    # Indexes of the new segments are valid (a reopen rebuilds nothing) and used for lookups.
    entries = [len(seg.offset_index) for seg in sealed]
    log.close()
    with caplog.at_level(logging.WARNING, logger="offsetd.storage"):
        log = open_log(tmp_path, clock, config)
    assert not [r for r in caplog.records if "rebuilding" in r.getMessage()]
    assert [len(seg.offset_index) for seg in log.segments[:-1]] == entries and min(entries) > 0
    assert kv_state(log) == state


def test_null_keys_are_kept(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    append(log, clock, [(None, b"n1"), (b"k", b"1"), (None, None)])
    append(log, clock, [(b"k", b"2"), (None, b"n2")])
    log.roll(clock.now)
    LogCleaner().clean(log, clock.now)
    assert [(k, v) for _, _, k, v in records(log)] == [(None, b"n1"), (None, None), (b"k", b"2"), (None, b"n2")]


def test_idempotent_batches_are_filtered_keeping_their_header(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    log.append(build_batch([(b"a", b"1", clock.now, []), (b"b", b"1", clock.now, []), (b"c", b"1", clock.now, [])],
                           producer_id=7, producer_epoch=2, base_sequence=0), clock.now)
    append(log, clock, [(b"b", b"2")])
    log.roll(clock.now)
    LogCleaner().clean(log, clock.now)
    data = log_bytes(log)
    (pos, h), (_, h2) = list(iter_batches(data))
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (0, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 2, 0)
    assert DefaultRecordBatch(data[pos : pos + h.size]).validate_crc()
    assert [(o, k) for o, _, k, _ in records(log)] == [(0, b"a"), (2, b"c"), (3, b"b")]


# How producers compress a records area, per codec (snappy as librdkafka: one raw block).
COMPRESSORS = {1: gzip.compress, 2: cramjam.snappy.compress_raw, 3: cramjam.lz4.compress, 4: cramjam.zstd.compress}
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def special_batch(recs, ts: int, codec: int = 0, *, body: bytes | None = None, **kw) -> bytes:
    """A batch of (key, value) records, its records area compressed with `codec` (1 gzip,
    2 snappy, 3 lz4, 4 zstd), or `body` in its place (with a valid CRC all the same)."""
    raw = bytearray(build_batch([(k, v, ts, []) for k, v in recs], **kw))
    if body is None:
        body = bytes(raw[61:])
        if codec:
            body = bytes(COMPRESSORS[codec](body))
    attributes = struct.unpack_from(">h", raw, 21)[0] | codec
    out = bytearray(raw[:61]) + body
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">h", out, 21, attributes)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_compressed_batches_kept_whole_or_dropped_whole(tmp_path: Path, clock: FakeClock, codec: int) -> None:
    log = open_log(tmp_path, clock)
    log.append(special_batch([(b"a", b"1"), (b"b", b"1")], clock.now, codec), clock.now)  # b survives: kept
    log.append(special_batch([(b"c", b"1"), (b"d", b"1")], clock.now, codec), clock.now)  # superseded: dropped
    append(log, clock, [(b"a", b"2"), (b"c", b"2"), (b"d", b"2")])
    log.append(special_batch([(b"e", None)], clock.now, codec), clock.now)  # a compressed tombstone, young
    log.roll(clock.now)
    before = records(log)
    LogCleaner().clean(log, clock.now)
    after = records(log)
    assert [r[0] for r in after] == [0, 1, 4, 5, 6, 7]  # the first compressed batch whole, with a@0
    assert after == [r for r in before if r[0] in (0, 1, 4, 5, 6, 7)]
    assert kv_state_all(after) == kv_state_all(before) == {b"a": b"2", b"b": b"1", b"c": b"2", b"d": b"2"}
    # Once e's tombstone is old it goes, and so does its whole batch.
    plan = LogCleaner().clean(log, clock.now + 2 * DAY, force=True)
    assert plan.stats.tombstones_dropped == 1
    assert [r[0] for r in records(log)] == [0, 1, 4, 5, 6]


def raw_batches(log: PartitionLog) -> list[bytes]:
    data = log_bytes(log)
    return [data[pos : pos + h.size] for pos, h in iter_batches(data)]


def kv_state_all(recs) -> dict:
    state = {}
    for _o, _ts, k, v in recs:
        if v is None:
            state.pop(k, None)
        else:
            state[k] = v
    return state


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_undecodable_compressed_batch_blocks_later_tombstone_removal(tmp_path: Path, clock: FakeClock,
                                                                      codec: int) -> None:
    log = open_log(tmp_path, clock, delete_retention_ms=0)
    append(log, clock, [(b"a", b"1")])
    # a body no decompressor reads (the CRC is right): its keys are unknown to the cleaner
    log.append(special_batch([(b"a", b"?")], clock.now, codec, body=b"\x00not compressed\xff" * 4), clock.now)
    append(log, clock, [(b"a", None), (b"b", b"1")])
    log.roll(clock.now)
    before = raw_batches(log)
    LogCleaner().clean(log, clock.now + 10)
    after = raw_batches(log)
    # a@0 is superseded by the known tombstone; the unreadable batch stays whole and the tombstone
    # too (dropping it would let an "a" in that batch reappear).
    assert after == before[1:]


def test_transactions_are_kept_and_pin_their_keys(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, delete_retention_ms=0)
    log.append(special_batch([(b"t", b"txn")], clock.now, codec=1, producer_id=3, producer_epoch=0,
                             base_sequence=0, attributes=TRANSACTIONAL_MASK), clock.now)
    log.append(build_marker_batch(3, 0, True, 0, clock.now), clock.now)  # committed (open would block cleaning)
    append(log, clock, [(b"t", b"1"), (b"u", b"1")])
    append(log, clock, [(b"t", None), (b"u", None)])
    append(log, clock, [(b"v", b"1")])
    log.roll(clock.now)
    LogCleaner().clean(log, clock.now + 10)
    # The compressed transactional batch is kept whole, so t's tombstone must stay; u's may go.
    got = [(o, k, v) for o, _, k, v in records(log) if o != 1]  # 1: the marker, kept
    assert got == [(0, b"t", b"txn"), (4, b"t", None), (6, b"v", b"1")]


# ------------------------------------------------------------------------------ concurrency


def test_prepare_in_a_thread_while_the_owner_appends_and_rolls(tmp_path: Path, clock: FakeClock) -> None:
    rnd = random.Random(11)
    log = open_log(tmp_path, clock, segment_bytes=2000)
    random_workload(log, clock, rnd, 600, 40, tombstones=0.0)
    cleaner = LogCleaner()
    job = cleaner.select(log, clock.now)
    assert job is not None
    started = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        def work():
            started.set()
            return cleaner.prepare(job)
        future = pool.submit(work)
        started.wait()
        random_workload(log, clock, rnd, 300, 40, tombstones=0.0)  # appends and rolls meanwhile
        plan = future.result()
    expected = kv_state(log)
    tail = [r for r in records(log) if r[0] >= job.end_offset]
    assert cleaner.commit(log, plan)
    assert kv_state(log) == expected
    assert [r for r in records(log) if r[0] >= job.end_offset] == tail


def test_prepare_in_a_process_pool(tmp_path: Path, clock: FakeClock) -> None:
    rnd = random.Random(12)
    log = open_log(tmp_path, clock)
    random_workload(log, clock, rnd, 300, 30)
    state = kv_state(log)
    cleaner = LogCleaner()
    job = cleaner.select(log, clock.now)
    pickle.dumps(job)
    with ProcessPoolExecutor(1) as pool:
        plan = pool.submit(cleaner.prepare, job).result()
    assert cleaner.commit(log, plan)
    assert kv_state(log) == state


def test_plan_is_discarded_when_the_log_changed(tmp_path: Path, clock: FakeClock) -> None:
    both = compact_config(cleanup_policy="compact,delete", retention_ms=HOUR, segment_bytes=500)
    log = open_log(tmp_path, clock, both)
    for i in range(50):
        append(log, clock, [(b"k%d" % (i % 5), b"v" * 30)], step=60_000)
    cleaner = LogCleaner()
    job = cleaner.select(log, clock.now)
    plan = cleaner.prepare(job)
    assert leftovers(log.dir)
    assert log.apply_retention(clock.advance(HOUR // 2)) > 0  # retention deleted planned segments meanwhile
    state = records(log)
    assert not cleaner.commit(log, plan)
    assert leftovers(log.dir) == [] and records(log) == state
    assert cleaner.clean(log, clock.now, force=True) is not None  # the next cleaning works


def test_corrupt_source_fails_cleanly(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, segment_bytes=300)
    for i in range(30):
        append(log, clock, [(b"k%d" % (i % 3), b"v" * 30)])
    seg = log.segments[1]
    with open(seg.log_path, "r+b") as f:  # flip a byte inside a record
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    before = log_bytes(log)
    cleaner = LogCleaner()
    job = cleaner.select(log, clock.now)
    with pytest.raises(CleanerError, match="CRC"):
        cleaner.prepare(job)
    assert leftovers(log.dir) == [] and log_bytes(log) == before
    assert cleaner.select(log, clock.now) is not None  # not stuck "in flight"


# ------------------------------------------------------------------------------ crash safety


def _template(root: Path, clock: FakeClock) -> tuple[Path, LogConfig]:
    """A closed log with several sealed segments, cleaned into two segments."""
    config = compact_config(segment_bytes=600, delete_retention_ms=HOUR)
    log = open_log(root, clock, config)
    rnd = random.Random(21)
    for i in range(150):
        key = b"key-%03d" % (i if i < 40 else rnd.randrange(40))
        append(log, clock, [(key, None if rnd.random() < 0.1 else b"v%d" % i + b"." * 20)])
    log.close()
    return root, config


def _copy(template: Path, dst: Path) -> Path:
    shutil.copytree(template, dst)
    return dst


def test_crash_at_every_step_of_the_swap_leaves_old_or_new(tmp_path: Path, clock: FakeClock, monkeypatch) -> None:
    template, config = _template(tmp_path / "template", clock)
    now = clock.now + 2 * HOUR

    def run(root: Path, crash_at: int | None) -> tuple[PartitionLog, int]:
        log = PartitionLog.open(root, "topic", 0, config, now)
        steps = []

        def step(label):
            steps.append(label)
            if len(steps) == crash_at:
                raise SystemExit(f"crash at step {crash_at} ({label})")

        monkeypatch.setattr(segment_swap, "_swap_step", step)
        try:
            LogCleaner(max_batch_bytes=200).clean(log, now)
        except SystemExit:
            crash(log)  # the owner died mid-swap: drop the half-updated object, flush nothing
            raise
        finally:
            monkeypatch.setattr(segment_swap, "_swap_step", lambda label: None)
        return log, len(steps)

    ref_old = PartitionLog.open(_copy(template, tmp_path / "old"), "topic", 0, config, now)
    old_records = records(ref_old)
    ref_old.close()
    ref_new, total = run(_copy(template, tmp_path / "new"), None)
    new_records = records(ref_new)
    ref_bases = ref_new.segment_base_offsets
    assert len(ref_new.segments) >= 3 and new_records != old_records
    ref_new.close()
    assert total > 20, total
    for n in range(1, total + 1):  # step 1 is the durable manifest, the commit point
        root = _copy(template, tmp_path / f"crash-{n}")
        with pytest.raises(SystemExit):
            run(root, n)
        reopened = PartitionLog.open(root, "topic", 0, config, now)
        got = records(reopened)
        assert got in (old_records, new_records), f"mix after a crash at step {n}"
        assert got == new_records, f"the manifest was durable at step {n}: must roll forward"
        assert reopened.segment_base_offsets == ref_bases
        assert leftovers(reopened.dir) == []
        # The log is fully usable afterwards, and cleans again.
        append(reopened, clock, [(b"key-000", b"after")])
        assert kv_state(reopened)[b"key-000"] == b"after"
        reopened.close()


def test_crash_before_the_commit_point_keeps_the_old_segments(tmp_path: Path, clock: FakeClock, monkeypatch) -> None:
    template, config = _template(tmp_path / "template", clock)
    log = PartitionLog.open(_copy(template, tmp_path / "a"), "topic", 0, config, clock.now)
    old = records(log)
    cleaner = LogCleaner()
    plan = cleaner.prepare(cleaner.select(log, clock.now))
    # Crash while writing the manifest: only its .tmp exists, with the .cleaned files.
    real = segment_swap._write_durably

    def torn(path, data):
        (path.parent / (path.name + ".tmp")).write_bytes(data[: len(data) // 2])
        raise SystemExit("crash while writing the manifest")

    monkeypatch.setattr(segment_swap, "_write_durably", torn)
    with pytest.raises(SystemExit):
        cleaner.commit(log, plan)
    monkeypatch.setattr(segment_swap, "_write_durably", real)
    crash(log)
    assert leftovers(log.dir)
    log = PartitionLog.open(tmp_path / "a", "topic", 0, config, clock.now)
    assert records(log) == old and leftovers(log.dir) == []
    log.close()

    # Crash in the middle of prepare: a torn .cleaned file, no manifest.
    log = PartitionLog.open(_copy(template, tmp_path / "b"), "topic", 0, config, clock.now)
    cleaner.prepare(cleaner.select(log, clock.now))
    cleaned = sorted(log.dir.glob("*.log.cleaned"))[-1]
    os.truncate(cleaned, cleaned.stat().st_size // 2)
    crash(log)
    log = PartitionLog.open(tmp_path / "b", "topic", 0, config, clock.now)
    assert records(log) == old and leftovers(log.dir) == []


def test_unreadable_manifest_refuses_to_open(tmp_path: Path, clock: FakeClock) -> None:
    template, config = _template(tmp_path / "template", clock)
    (template / "topic-0" / SWAP_MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="manifest"):
        PartitionLog.open(template, "topic", 0, config, clock.now)


_KILL_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from offsetd.storage import LogConfig, PartitionLog, segment_swap
    from offsetd.storage.cleaner import LogCleaner
    root, now, crash_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    config = LogConfig(cleanup_policy="compact", segment_bytes=600, delete_retention_ms=3600000)
    log = PartitionLog.open(root, "topic", 0, config, now)
    steps = []
    def step(label):
        steps.append(label)
        if len(steps) == crash_at:
            os._exit(17)  # no cleanup of any kind, like kill -9
    segment_swap._swap_step = step
    LogCleaner(max_batch_bytes=200).clean(log, now)
    os._exit(0)
    """
)


def test_killed_process_during_the_swap_recovers(tmp_path: Path, clock: FakeClock) -> None:
    template, config = _template(tmp_path / "template", clock)
    now = clock.now + 2 * HOUR
    ref = PartitionLog.open(_copy(template, tmp_path / "ref"), "topic", 0, config, now)
    old = records(ref)
    LogCleaner(max_batch_bytes=200).clean(ref, now)
    new = records(ref)
    ref.close()
    script = tmp_path / "kill.py"
    script.write_text(_KILL_SCRIPT)
    # manifest, .cleaned -> .swap, dir fsync, old files deleted, .swap -> final, manifest removed
    for crash_at in (1, 5, 11, 40, 88, 95):
        root = _copy(template, tmp_path / f"kill-{crash_at}")
        proc = subprocess.run([sys.executable, str(script), str(root), str(now), str(crash_at)], timeout=60)
        assert proc.returncode in (0, 17)
        log = PartitionLog.open(root, "topic", 0, config, now)
        assert records(log) in (old, new)
        assert records(log) == new  # every hooked step is after the commit point
        assert leftovers(log.dir) == []
        log.close()


# ------------------------------------------------------------------------------ benchmark
