"""The log cleaner: compaction of `cleanup.policy=compact` partition logs.

Compaction keeps, per key, only the latest record of the *cleanable range* of a log, so a
compacted topic (above all `__consumer_offsets`) stays about as large as its live key set and
loads quickly. Replaying the log in offset order gives the same key -> latest value map before
and after cleaning, except that keys whose latest record is a tombstone older than
`delete.retention.ms` disappear entirely.

What is cleaned
---------------
* The cleanable range runs from the log start offset to the *first uncleanable offset*: the base
  of the active segment, or of the first sealed segment younger than `min.compaction.lag.ms`
  (its largest timestamp is after now - lag), whichever comes first. The active segment is never
  read or touched.
* Idle logs: Kafka rolls a segment by `segment.ms` only on an append, so data in the active
  segment of an idle log is never cleaned. `select()` therefore rolls the active segment itself
  when it is non-empty and older than `segment.ms` (the same test `append` applies); the rolled
  segment is then cleanable like any other.
* Cleaner checkpoint: the file `cleaner-offset-checkpoint` in the partition directory holds the
  *first dirty offset* (where the last cleaning ended) and the earliest time a retained
  tombstone becomes removable. Bytes of the cleanable range below the first dirty offset are
  *clean*, the rest *dirty*. A log is cleaned when dirty bytes / cleanable bytes >=
  `min.cleanable.dirty.ratio`, or when a tombstone retained by the last cleaning has since passed
  `delete.retention.ms` (so an idle log still loses its expired tombstones).

How: storage/compaction.py (Kafka's two passes: the map, storage/offset_map.py, then the copy
and the output batches), storage/cleaned_segment.py (the segments they write);
storage/segment_swap.py swaps the cleaned segments in crash-safely.

Threading contract
------------------
    cleaner = LogCleaner()
    job = cleaner.select(log, now_ms)          # owner thread; None = nothing to do
    if job is not None:
        try:
            plan = await loop.run_in_executor(pool, cleaner.prepare, job)   # any thread/process
        except BaseException:
            cleaner.abort(job)
            raise
        cleaner.commit(log, plan)              # owner thread; False = discarded (log changed)

* `select` runs on the thread that owns the PartitionLog (it may roll the active segment and
  reads segment metadata). It is cheap: no record is read.
* `prepare` touches no PartitionLog object: the job is plain, picklable data (paths, sizes,
  offsets, config), so it may run in a worker thread or a process pool (the work is pure Python
  and holds the GIL; a process pool keeps the event loop's latency flat). It opens the source
  segment files itself (read only) and writes only new `*.cleaned` files, so the owner may keep
  appending to the active segment, reading, flushing and rolling meanwhile.
* `commit` runs on the owner thread. It re-checks that the log still has exactly the planned
  segments (same layout version, bases and sizes); if retention, truncation or close changed it
  in between, the plan is discarded and its files deleted. Otherwise it swaps the segments
  (milliseconds: renames, unlinks and fsyncs) and writes the checkpoint.
* One cleaning per log at a time: `select` returns None while a job of the same log is between
  select and commit/abort (tracked per LogCleaner instance; use one instance per broker).
* A reader that scans a log from its start while a cleaning commits sees older records before
  the swap and cleaned ones after it: the final map is the same, except that a tombstone past
  `delete.retention.ms` may vanish mid-scan (Kafka has the same rule: finish a full read within
  `delete.retention.ms`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from offsetd.storage.cleaning_job import (
    CleanerError,
    CleaningJob,
    CleaningPlan,
    SourceSegment,
)
from offsetd.storage.compaction import Compaction
from offsetd.storage.durable_file import fsync_dir as _fsync_dir
from offsetd.storage.durable_file import write_durably as _write_durably
from offsetd.storage.partition_log import PartitionLog
from offsetd.storage.segment_swap import CLEANED_SUFFIX

__all__ = [
    "LogCleaner",
    "CleaningJob",
    "CleaningPlan",
    "CleanerError",
    "SourceSegment",
    "CHECKPOINT_FILE",
    "read_checkpoint",
]

log = logging.getLogger("offsetd.storage.cleaner")

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CHECKPOINT_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Checkpoint
# ---------------------------------------------------------------------------------------------


def read_checkpoint(pdir: Path | str) -> tuple[int | None, int]:
    """(first dirty offset or None, tombstone deadline ms or -1) from the partition directory."""
    try:
        lines = (Path(pdir) / CHECKPOINT_FILE).read_text().split("\n")
        if int(lines[0]) != _CHECKPOINT_VERSION:
            raise ValueError(f"version {lines[0]}")
        first_dirty, deadline = (int(x) for x in lines[1].split())
        return first_dirty, deadline
    except FileNotFoundError:
        return None, -1
    except (ValueError, IndexError) as exc:
        log.warning("ignoring unreadable %s in %s: %s", CHECKPOINT_FILE, pdir, exc)
        return None, -1


def _write_checkpoint(pdir: Path, first_dirty: int, deadline: int) -> None:
    _write_durably(pdir / CHECKPOINT_FILE, f"{_CHECKPOINT_VERSION}\n{first_dirty} {deadline}\n".encode())


def _delete_cleaned_files(pdir: Path) -> None:
    """Remove every `*.cleaned` file of the directory (only the in-flight job writes them)."""
    try:
        names = os.listdir(pdir)
    except FileNotFoundError:
        return
    for n in names:
        if n.endswith(CLEANED_SUFFIX):
            try:
                os.unlink(pdir / n)
            except FileNotFoundError:
                pass


# ---------------------------------------------------------------------------------------------
# The cleaner
# ---------------------------------------------------------------------------------------------


class LogCleaner:
    """Compacts `cleanup.policy=compact` logs; see the module docstring for the contract.

    `max_map_keys` soft-bounds the offset map (distinct keys of the dirty range held at once),
    `read_chunk_bytes` is the size of each source read, `max_batch_bytes` the size of the
    batches that survivors of small batches are regrouped into.
    """

    def __init__(
        self,
        *,
        max_map_keys: int = 1_000_000,
        read_chunk_bytes: int = 8 << 20,
        max_batch_bytes: int = 64 << 10,
    ) -> None:
        self.max_map_keys = max_map_keys
        self.read_chunk_bytes = read_chunk_bytes
        self.max_batch_bytes = max_batch_bytes
        self._in_flight: set[str] = set()

    # ------------------------------------------------------------------ owner thread

    def select(self, log_: PartitionLog, now_ms: int, *, force: bool = False) -> CleaningJob | None:
        """Decide whether `log_` needs cleaning now; owner thread. None when it does not.

        Rolls an idle active segment older than segment.ms first (see the module docstring).
        `force` ignores min.cleanable.dirty.ratio (any cleanable data is cleaned).
        """
        config = log_.config
        key = str(log_.dir)
        if not config.compacts or log_.closed or key in self._in_flight:
            return None
        active = log_.active_segment
        if active.size > 0 and active.rolling_base_ms is not None and now_ms - active.rolling_base_ms > config.segment_ms:
            log_.roll(now_ms)
        segs = log_.segments
        lag = config.min_compaction_lag_ms
        lso = log_.last_stable_offset
        count = 0
        for i, seg in enumerate(segs[:-1]):
            if lag > 0 and now_ms - seg.largest_timestamp < lag:
                break
            if segs[i + 1].base_offset > lso:  # holds an open transaction's data: not cleanable
                break
            count += 1
        if count == 0:
            return None
        sources = [
            SourceSegment(
                seg.base_offset,
                segs[i + 1].base_offset,
                seg.size,
                str(seg.log_path),
                os.stat(seg.log_path).st_mtime_ns,
                seg.largest_timestamp,
            )
            for i, seg in enumerate(segs[:count])
        ]
        end = segs[count].base_offset
        aborted: dict[int, list[tuple[int, int]]] = {}
        for e in log_.transactions.all_entries():
            if e.first_offset < end:
                aborted.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
        for ranges in aborted.values():
            ranges.sort()
        first_dirty, deadline = read_checkpoint(log_.dir)
        if first_dirty is None or not log_.log_start_offset <= first_dirty <= log_.log_end_offset:
            first_dirty = log_.log_start_offset
        clean = sum(s.size for s in sources if s.next_offset <= first_dirty)
        dirty = sum(s.size for s in sources) - clean
        total = clean + dirty
        ratio = dirty / total if total else 0.0
        if dirty > 0 and (force or ratio >= config.min_cleanable_dirty_ratio):
            reason = f"dirty ratio {ratio:.3f}"
        elif 0 <= deadline < now_ms:
            reason = "tombstones past delete.retention.ms"
        elif force and total > 0:
            reason = "forced"
        else:
            return None
        self._in_flight.add(key)
        return CleaningJob(
            dir=key,
            topic=log_.topic,
            partition=log_.partition,
            config=config,
            now_ms=now_ms,
            sources=sources,
            first_dirty_offset=first_dirty,
            end_offset=end,
            layout_version=log_.layout_version,
            clean_bytes=clean,
            dirty_bytes=dirty,
            reason=reason,
            aborted=aborted,
        )

    def commit(self, log_: PartitionLog, plan: CleaningPlan) -> bool:
        """Swap the cleaned segments into `log_`; owner thread. False (and the plan's files
        deleted) when the log changed since select() so the plan no longer applies."""
        job = plan.job
        try:
            segs = log_.segments if not log_.closed else []
            n = plan.source_count
            stale = (
                log_.closed
                or str(log_.dir) != job.dir
                or log_.layout_version != job.layout_version
                or n >= len(segs)
                or segs[n].base_offset != plan.end_offset
                or any(
                    s.base_offset != src.base_offset or s.size != src.size
                    for s, src in zip(segs[:n], job.sources[:n])
                )
            )
            if stale:
                log.info("%s: log changed during cleaning; discarding the cleaned segments", job.dir)
                _delete_cleaned_files(Path(job.dir))
                return False
            before = sum(s.size for s in segs[:n])
            try:
                log_.replace_segments(segs[:n], plan.new_bases)
            except ValueError as exc:  # its checks failed before anything was changed
                log.warning("%s: cleaned segments rejected (%s); discarding them", job.dir, exc)
                _delete_cleaned_files(Path(job.dir))
                return False
            _write_checkpoint(log_.dir, plan.end_offset, plan.tombstone_deadline_ms)
            st = plan.stats
            log.info(
                "cleaned %s-%d (%s): %d segment(s) %d bytes -> %d segment(s) %d bytes; "
                "%d of %d records kept, %d tombstone(s) removed; %.3f s, %.1f MB/s",
                job.topic, job.partition, job.reason, n, before, len(plan.new_bases), st.output_bytes,
                st.records_kept, st.records_read, st.tombstones_dropped, st.seconds, st.mb_per_s,
            )
            return True
        finally:
            self._in_flight.discard(job.dir)

    def abort(self, job_or_plan: CleaningJob | CleaningPlan) -> None:
        """Give up a job (e.g. prepare() failed) or an uncommitted plan: delete its files."""
        job = job_or_plan.job if isinstance(job_or_plan, CleaningPlan) else job_or_plan
        _delete_cleaned_files(Path(job.dir))
        self._in_flight.discard(job.dir)

    def clean(self, log_: PartitionLog, now_ms: int, *, force: bool = False) -> CleaningPlan | None:
        """select + prepare + commit in the calling thread (tests, tools, offline compaction)."""
        job = self.select(log_, now_ms, force=force)
        if job is None:
            return None
        try:
            plan = self.prepare(job)
        except BaseException:
            self.abort(job)
            raise
        return plan if self.commit(log_, plan) else None

    # ------------------------------------------------------------------ any thread

    def prepare(self, job: CleaningJob) -> CleaningPlan:
        """Build the cleaned segments of `job` as `*.cleaned` files; any thread or process.

        Reads only the job's source files (opened here) and writes only new files. Raises
        CleanerError for corrupt or vanished sources (after deleting its partial files).
        """
        work = Compaction(job, self.max_map_keys, self.read_chunk_bytes, self.max_batch_bytes)
        try:
            covered = work.build_map()
            work.copy(covered)
        except BaseException:
            work.discard()
            self._in_flight.discard(job.dir)
            raise
        _fsync_dir(work.pdir)
        end = job.sources[covered - 1].next_offset
        return CleaningPlan(
            job=job,
            source_count=covered,
            end_offset=end,
            new_bases=work.new_bases,
            tombstone_deadline_ms=work.deadline,
            stats=work.stats,
        )
