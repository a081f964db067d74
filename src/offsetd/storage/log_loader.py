"""Loading a partition directory at open: what survives a crash is found and cut back here, so
PartitionLog starts from segments, producer state and transactions it can trust.

* The file `offsetd-recovery-point` holds the base offset of the oldest segment that may hold
  unsynced data (so at most the active segment and the one rolled before it). On open those
  segments are verified batch by batch (header + CRC) and cut back at the first bad batch
  (segments after a damaged one are deleted, as Kafka does); older segments only get their
  indexes rebuilt when those are missing or corrupt. Without the file only the active segment
  is verified.
* Idempotent producer state is rebuilt on open from the active segment's headers. A clean
  close also writes `offsetd-producer-state.json` (state at the log end offset), which the next
  open uses when it is still consistent with the log, so state survives segment rolls across
  restarts. The file is removed once loaded, so a crash never leaves a stale snapshot behind.
* After a clean shutdown (the broker says so with `clean`: Kafka's `.kafka_cleanshutdown` marker in
  the log directory, storage/clean_shutdown.py) nothing is verified: every segment, the active one
  too, is opened from its durable indexes, and producer state comes from the snapshot alone, so a
  restart costs a few small reads per partition, however large its active segment.
* An interrupted cleaner swap is finished (or an uncommitted one cleared) before anything else
  (storage/segment_swap.py), and index files whose `.log` is gone are removed.
* The leader-epoch history is read from Kafka's `leader-epoch-checkpoint` and cut to the
  recovered log (storage/leader_epoch_cache.py); a missing or damaged file gives an empty history.

Pure synchronous file I/O; no asyncio, no clock reads (time is always passed in).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from offsetd.storage.durable_file import fsync_dir as _fsync_dir
from offsetd.storage.durable_file import write_durably as _write_durably
from offsetd.storage.leader_epoch_cache import CHECKPOINT_FILE, LeaderEpochCache
from offsetd.storage.log_config import LogConfig
from offsetd.storage.producer_state import ProducerStateManager
from offsetd.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIMEINDEX_SUFFIX,
    Segment,
    segment_file_name,
)
from offsetd.storage.segment_recovery import recover_segment
from offsetd.storage.segment_swap import CLEANED_SUFFIX, SWAP_MANIFEST_FILE, SWAP_SUFFIX, recover_interrupted_swap
from offsetd.storage.transactions import PartitionTransactions, ProducerRecovery
from offsetd.storage.txn_index import TXNINDEX_SUFFIX, index_path

__all__ = [
    "LoadedLog",
    "load_log",
    "read_epoch_checkpoint",
    "write_epoch_checkpoint",
    "write_producer_snapshot",
    "write_recovery_point",
    "PRODUCER_STATE_FILE",
    "RECOVERY_POINT_FILE",
]

log = logging.getLogger("offsetd.storage")

PRODUCER_STATE_FILE = "offsetd-producer-state.json"
RECOVERY_POINT_FILE = "offsetd-recovery-point"


@dataclass(slots=True)
class LoadedLog:
    """What `load_log` found in a partition directory, ready for PartitionLog's constructor."""

    segments: list[Segment]
    producers: ProducerStateManager
    transactions: PartitionTransactions
    recovery_point: int | None
    fresh: bool  # the directory was made here: its entries are not fsynced yet (PartitionLog.flush does)


def _parse_base(name: str, suffix: str) -> int | None:
    """Base offset from a Kafka segment file name, None if the name is not one."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def load_log(pdir: Path, config: LogConfig, now_ms: int, clean: bool = False,
             sync_parent: bool = True) -> LoadedLog:
    """Open (or create) the partition directory `pdir` and recover it (see the module docstring).

    Torn or CRC-corrupt tails are truncated and logged on "offsetd.storage"; `now_ms` seeds
    segment ages. `clean`: the log was closed cleanly, nothing needs verifying. `sync_parent`:
    fsync the log directory when `pdir` is new (False: the caller does, once for many, before
    anything is appended).
    """
    fresh = not pdir.is_dir()
    if fresh:
        pdir.mkdir(parents=True, exist_ok=True)
        if sync_parent:
            _fsync_dir(pdir.parent)
    names = os.listdir(pdir)
    if any(n.startswith(SWAP_MANIFEST_FILE) or n.endswith(CLEANED_SUFFIX) or n.endswith(SWAP_SUFFIX)
           for n in names):
        recover_interrupted_swap(pdir)
        names = os.listdir(pdir)
    present = set(names)  # files absent from the listing are not probed (a restart of many logs)
    bases = sorted(b for b in (_parse_base(n, LOG_SUFFIX) for n in names) if b is not None)
    base_set = set(bases)
    for n in names:  # index files whose .log is gone are leftovers of a deletion
        for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
            b = _parse_base(n, suffix)
            if b is not None and b not in base_set:
                os.unlink(pdir / n)
    snapshot = _take_snapshot_file(pdir) if PRODUCER_STATE_FILE in present else None
    recovery_point = _read_recovery_point(pdir) if RECOVERY_POINT_FILE in present else None

    segments: list[Segment] = []
    opened = _open_clean(pdir, bases, config, now_ms, snapshot) if clean and bases else None
    if opened is not None:
        segments, producers = opened
    elif not bases:
        # A directory without segments (new, or created by CreateTopics and first used now): its
        # first segment's entries are fsynced by the log's first flush; until then it holds nothing.
        segments.append(Segment.create(pdir, 0, config))
        fresh = True
        producers = ProducerStateManager()
    else:
        last = len(bases) - 1
        first_recover = last
        if recovery_point is not None:
            first_recover = next(i for i, b in enumerate(bases) if b >= recovery_point or i == last)
        scan = ProducerRecovery(pdir, now_ms, snapshot, bases[-1])
        for i in range(first_recover):
            segments.append(Segment.open_sealed(pdir, bases[i], config, bases[i + 1]))
            scan.sealed(segments[-1], bases[i + 1])
        for i in range(first_recover, last + 1):
            scan.begin(pdir / segment_file_name(bases[i], LOG_SUFFIX), bases[i])
            seg = recover_segment(pdir, bases[i], config, now_ms, scan.on_batch)
            segments.append(seg)
            if i == last:
                break
            if seg.truncated_bytes:
                # Later segments would follow a hole: drop them, as Kafka's recovery does.
                for later in bases[i + 1 :]:
                    log.warning(
                        "recovery of %s: deleting segment %d that follows a damaged segment",
                        pdir,
                        later,
                    )
                    Segment(pdir, later, config).delete()
                    index_path(pdir, later).unlink(missing_ok=True)
                break
            seg.seal()
            seg.flush()
        producers = scan.finish(segments)
    with_index = [s.base_offset for s in segments]
    if opened is not None:  # nothing was rewritten: the listing says which .txnindex files exist
        with_index = [b for b in with_index if segment_file_name(b, TXNINDEX_SUFFIX) in present]
    transactions = PartitionTransactions.load(pdir, with_index)
    return LoadedLog(segments, producers, transactions, recovery_point, fresh)


def _open_clean(pdir: Path, bases: list[int], config: LogConfig, now_ms: int,
                snapshot: tuple[int, dict] | None) -> tuple[list[Segment], ProducerStateManager] | None:
    """The segments and producer state of a cleanly closed log, opened without verifying a
    batch; None (the caller recovers as usual) when the active segment's file does not end with
    a whole batch or the producer snapshot does not end where the log does (the files changed
    after the shutdown)."""
    segments = [Segment.open_sealed(pdir, b, config, nb) for b, nb in zip(bases, bases[1:])]
    active = Segment.open_sealed(pdir, bases[-1], config, None)
    segments.append(active)
    end = 0
    for pos, h in active.iter_headers(active.offset_index.floor_position(active.size)):
        end = pos + h.size
    problem = None
    if active.size and end != active.size:
        problem = f"its active segment has {active.size - end} bytes after the last whole batch"
    elif snapshot is not None and snapshot[0] != active.next_offset:
        problem = f"its producer state is at {snapshot[0]}, its log ends at {active.next_offset}"
    if problem is not None:
        log.warning("%s was closed cleanly but %s: verifying it", pdir, problem)
        for seg in segments:
            seg.forget_files()
        return None
    producers = ProducerStateManager()
    if snapshot is not None:
        producers.load_snapshot(snapshot[1])
    active.sealed = False
    if active.size:
        first = active.header_at(0)
        active.rolling_base_ms = first.max_timestamp if first.max_timestamp >= 0 else now_ms
        active.bytes_since_index = active.size - active.offset_index.floor_position(active.size)
    return segments, producers


def _take_snapshot_file(pdir: Path) -> tuple[int, dict] | None:
    """Read and remove the producer-state snapshot; None when absent or unreadable."""
    path = pdir / PRODUCER_STATE_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        os.unlink(path)
        data = json.loads(raw)
        if data.get("version") != 1:
            raise ValueError(f"unknown version {data.get('version')}")
        return int(data["offset"]), data["producers"]
    except (ValueError, KeyError, TypeError, OSError) as exc:
        log.warning("ignoring unreadable producer state %s: %s", path, exc)
        return None


def write_producer_snapshot(pdir: Path, log_end_offset: int, producers: ProducerStateManager) -> None:
    """Persist producer state as of the log end offset (on clean close)."""
    if not producers.producers:
        return
    _write_durably(pdir / PRODUCER_STATE_FILE, json.dumps(
        {"version": 1, "offset": log_end_offset, "producers": producers.to_snapshot()}))


def _read_recovery_point(pdir: Path) -> int | None:
    """Base offset of the oldest segment that may hold unsynced data; None if unknown."""
    try:
        return int((pdir / RECOVERY_POINT_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_recovery_point(pdir: Path, rp: int) -> bool:
    """Persist the recovery point `rp`; False (logged) when it could not be written."""
    try:
        _write_durably(pdir / RECOVERY_POINT_FILE, f"{rp}\n")
    except OSError as exc:
        # The file keeps an older point, which only makes the next start verify more
        # segments; it is written again at the next roll, flush or close.
        log.warning("%s: recovery point not advanced to %d: %s", pdir, rp, exc)
        (pdir / (RECOVERY_POINT_FILE + ".tmp")).unlink(missing_ok=True)
        return False
    return True


def read_epoch_checkpoint(pdir: Path, log_start_offset: int, log_end_offset: int) -> tuple[LeaderEpochCache, int]:
    """The partition's leader-epoch history, cut to the log [start, end) as recovered (epochs
    starting at or past its end held data a crash took; empty when missing or damaged), and the
    newest epoch the file named before the cut (-1: none), which must never be led at again."""
    try:
        cache = LeaderEpochCache.from_checkpoint((pdir / CHECKPOINT_FILE).read_text(encoding="ascii"))
    except FileNotFoundError:
        return LeaderEpochCache(), -1
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        log.warning("%s: ignoring an unreadable %s: %s", pdir, CHECKPOINT_FILE, exc)
        return LeaderEpochCache(), -1
    newest = cache.latest_epoch
    cache.truncate_from_end(log_end_offset)
    cache.truncate_from_start(log_start_offset)
    return cache, newest


def write_epoch_checkpoint(pdir: Path, cache: LeaderEpochCache, *, durable: bool = True) -> bool:
    """Persist the leader-epoch history (fsynced unless not `durable`); False (logged) when it
    could not be written."""
    try:
        _write_durably(pdir / CHECKPOINT_FILE, cache.to_checkpoint(), durable=durable)
    except OSError as exc:  # written again at the next change or new epoch
        log.warning("%s: %s not written: %s", pdir, CHECKPOINT_FILE, exc)
        (pdir / (CHECKPOINT_FILE + ".tmp")).unlink(missing_ok=True)
        return False
    return True
