"""The log cleaner and transactions: aborted records go, committed ones are compacted, markers
stay, nothing at or above the last stable offset is cleaned, `.txnindex` files follow the swap."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

from storage_helpers import T0, FakeClock, clock  # noqa: F401 (clock: fixture)
from crc32c import crc32c

from offsetd.records.batch import build_batch, iter_batches
from offsetd.records.control import build_marker_batch
from offsetd.records.log_walker import iter_log_records
from offsetd.storage import LogConfig, PartitionLog
from offsetd.storage.cleaner import LogCleaner


def open_log(root: Path, clock: FakeClock, **kw) -> PartitionLog:
    return PartitionLog.open(root, "compacted", 0, LogConfig(cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                                                             delete_retention_ms=kw.pop("delete_retention_ms", 3_600_000),
                                                             **kw), clock.now)


def kv(recs, ts: int, **kw) -> bytes:
    return build_batch([(k, v, ts, []) for k, v in recs], **kw)


def txn(pid: int, recs, ts: int, codec: int = 0) -> bytes:
    raw = bytearray(kv(recs, ts, producer_id=pid, producer_epoch=0, attributes=0x10))
    if codec:
        body = gzip.compress(bytes(raw[61:]))
        raw = raw[:61] + body
        struct.pack_into(">i", raw, 8, len(raw) - 12)
        struct.pack_into(">h", raw, 21, 0x10 | codec)
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


def marker(pid: int, commit: bool, ts: int) -> bytes:
    return build_marker_batch(pid, 0, commit, 0, ts)


def records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None, int]]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [(o, k, v, pid) for o, _ts, k, v, pid in iter_log_records(data, verify=True, markers=False)]


def control_offsets(log: PartitionLog) -> list[int]:
    data = log.read(log.log_start_offset, 1 << 30)
    return [h.base_offset for _, h in iter_batches(data) if h.is_control]


def test_aborted_records_go_committed_are_compacted_markers_stay(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    now = clock.now
    log.append(kv([(b"a", b"plain-old"), (b"b", b"plain")], now), now)  # 0-1
    log.append(txn(1, [(b"a", b"aborted"), (b"c", b"aborted")], now), now)  # 2-3
    log.append(txn(2, [(b"a", b"committed"), (b"d", b"committed")], now), now)  # 4-5
    log.append(marker(1, False, now), now)  # 6
    log.append(marker(2, True, now), now)  # 7
    log.append(txn(3, [(b"d", b"newer")], now), now)  # 8
    log.append(marker(3, True, now), now)  # 9
    log.roll(now)
    assert LogCleaner().clean(log, clock.now) is not None
    # a's aborted value neither survives nor supersedes; d@5 is superseded by the committed d@8
    assert records(log) == [(1, b"b", b"plain", -1), (4, b"a", b"committed", 2), (8, b"d", b"newer", 3)]
    assert control_offsets(log) == [6, 7, 9]
    assert log.aborted_transactions(0, 10) == [(1, 2)]


def test_nothing_at_or_above_the_lso_is_cleaned(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    now = clock.now
    log.append(kv([(b"a", b"1")], now), now)  # 0
    log.roll(now)
    log.append(txn(1, [(b"x", b"open")], now), now)  # 1: open, holds the LSO
    log.append(kv([(b"a", b"2")], now), now)  # 2
    log.roll(now)
    log.append(kv([(b"a", b"3")], now), now)  # 3
    log.roll(now)
    assert log.last_stable_offset == 1
    # only segment 0 is below the LSO: a@2 and a@3 above it neither supersede a@0 nor get cleaned
    LogCleaner().clean(log, clock.now, force=True)
    assert [r[0] for r in records(log)] == [0, 1, 2, 3]
    log.append(marker(1, False, now), now)  # 4: the abort releases everything
    log.roll(now)
    LogCleaner().clean(log, clock.now, force=True)
    assert [r[0] for r in records(log)] == [3]
    assert control_offsets(log) == [4]


def test_committed_compressed_transaction_is_kept_whole_and_pins_its_keys(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock, delete_retention_ms=0)
    now = clock.now
    log.append(txn(3, [(b"t", b"txn")], now, codec=1), now)  # 0
    log.append(marker(3, True, now), now)  # 1
    log.append(kv([(b"t", b"1"), (b"u", b"1")], now), now)  # 2-3
    log.append(kv([(b"t", None), (b"u", None)], now), now)  # 4-5
    log.append(kv([(b"v", b"1")], now), now)  # 6
    log.roll(now)
    LogCleaner().clean(log, clock.now + 10)
    # the gzip batch is not rewritten, so t's tombstone must stay; u's may go
    assert [(o, k, v) for o, k, v, _ in records(log)] == [(0, b"t", b"txn"), (4, b"t", None), (6, b"v", b"1")]


def test_txnindex_follows_the_cleaner_swap(tmp_path: Path, clock: FakeClock) -> None:
    log = open_log(tmp_path, clock)
    now = clock.now
    log.append(txn(1, [(b"a", b"x")], now), now)  # 0
    log.roll(now)
    log.append(kv([(b"b", b"1")], now), now)  # 1
    log.roll(now)
    log.append(marker(1, False, now), now)  # 2: the entry lives in segment 2's index
    log.roll(now)
    pdir = tmp_path / "compacted-0"
    entry = struct.pack(">hqqqq", 0, 1, 0, 2, 3)
    assert (pdir / f"{2:020d}.txnindex").read_bytes() == entry
    LogCleaner().clean(log, clock.now)
    assert log.segment_base_offsets == [0, 3]  # the three sources became one segment
    assert (pdir / f"{0:020d}.txnindex").read_bytes() == entry
    assert not (pdir / f"{2:020d}.txnindex").exists()
    assert log.aborted_transactions(0, 3) == [(1, 0)]
    log.close()
    log = open_log(tmp_path, clock)
    assert log.aborted_transactions(0, 3) == [(1, 0)]


def test_crash_at_every_step_of_the_swap_keeps_the_txnindex(tmp_path: Path, clock: FakeClock, monkeypatch) -> None:
    import shutil

    from storage_helpers import crash

    from offsetd.storage import segment_swap

    template = tmp_path / "template"
    log = open_log(template, clock)
    now = clock.now
    log.append(txn(1, [(b"a", b"x")], now), now)  # 0
    log.roll(now)
    log.append(kv([(b"b", b"1")], now), now)  # 1
    log.roll(now)
    log.append(marker(1, False, now), now)  # 2: segment 2's index
    log.roll(now)
    log.close()
    entry = struct.pack(">hqqqq", 0, 1, 0, 2, 3)
    step = 0
    while True:
        step += 1
        root = tmp_path / f"crash-{step}"
        shutil.copytree(template, root)
        log = open_log(root, clock)
        seen: list[str] = []

        def hook(label: str, seen: list[str] = seen, at: int = step) -> None:
            seen.append(label)
            if len(seen) == at:
                raise SystemExit(label)

        monkeypatch.setattr(segment_swap, "_swap_step", hook)
        try:
            LogCleaner().clean(log, clock.now)
            finished = True
        except SystemExit:
            crash(log)
            finished = False
        finally:
            monkeypatch.setattr(segment_swap, "_swap_step", lambda label: None)
        if not finished:
            log = open_log(root, clock)
        assert log.segment_base_offsets == [0, 3], step  # every step is past the durable manifest
        pdir = root / "compacted-0"
        assert sorted(p.name for p in pdir.glob("*.txnindex*")) == [f"{0:020d}.txnindex"], step
        assert (pdir / f"{0:020d}.txnindex").read_bytes() == entry
        assert log.aborted_transactions(0, 3) == [(1, 0)]
        log.close()
        if finished:
            break
    assert step > 5
