"""The plain data of one cleaning, passed between the log's owner thread (storage/cleaner.py:
select, commit) and the worker that prepares it (storage/compaction.py): picklable, so prepare()
may run in another thread or a process pool."""

from __future__ import annotations

from dataclasses import dataclass, field

from offsetd.storage.log_config import LogConfig


class CleanerError(Exception):
    """A source segment could not be cleaned (corrupt or unreadable); nothing was changed."""


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """A sealed segment as seen by select(): enough to read it without the Segment object."""

    base_offset: int
    next_offset: int  # base offset of the following segment
    size: int
    path: str
    mtime_ns: int
    largest_timestamp: int


@dataclass(slots=True)
class CleaningJob:
    """What to clean, decided by select() on the owner thread; picklable."""

    dir: str
    topic: str
    partition: int
    config: LogConfig
    now_ms: int
    sources: list[SourceSegment]  # from the log start, contiguous
    first_dirty_offset: int
    end_offset: int  # first uncleanable offset: base of the segment after the last source
    layout_version: int
    clean_bytes: int
    dirty_bytes: int
    reason: str
    # producer id -> sorted (first offset, marker offset) of its aborted transactions in range
    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(slots=True)
class CleanerStats:
    """Counters of one cleaning."""

    source_segments: int = 0
    source_bytes: int = 0
    records_read: int = 0
    records_kept: int = 0
    tombstones_dropped: int = 0
    map_keys: int = 0
    output_segments: int = 0
    output_bytes: int = 0
    batches_written: int = 0
    map_seconds: float = 0.0
    copy_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        return self.map_seconds + self.copy_seconds

    @property
    def mb_per_s(self) -> float:
        """Source megabytes (10^6 bytes) cleaned per second of prepare()."""
        return self.source_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class CleaningPlan:
    """Result of prepare(): the cleaned files on disk, ready for commit(); picklable."""

    job: CleaningJob
    source_count: int  # how many of job.sources were cleaned (fewer if the map filled up)
    end_offset: int  # the new first dirty offset
    new_bases: list[int]
    tombstone_deadline_ms: int  # earliest time a retained tombstone becomes removable, -1 none
    stats: CleanerStats = field(default_factory=CleanerStats)
