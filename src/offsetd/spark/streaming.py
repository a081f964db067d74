"""What the two stream readers share: admission control over offsets keyed by (topic,
partition) - maxOffsetsPerTrigger, minOffsetsPerTrigger + maxTriggerDelay, Trigger.AvailableNow -
as Spark's Kafka source applies it, and `OffsetStreamReader`, the micro-batch planning around it."""

from __future__ import annotations

import time
from typing import Callable, Mapping

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)

from .kafka_client import Cluster, TopicPartitionKey, from_json_offsets, to_json_offsets
from .options import TriggerOptions


class TriggerDelay:
    """minOffsetsPerTrigger with maxTriggerDelay, as Spark's Kafka source applies them: a trigger
    is skipped while fewer than `min_offsets` new offsets are available, unless `max_delay_ms`
    has passed since the last trigger that was not skipped (so the first trigger of a run is
    never skipped). `clock` returns seconds (injected: tests use a fake one)."""

    def __init__(self, min_offsets: int, max_delay_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.min_offsets = min_offsets
        self.max_delay_s = max_delay_ms / 1000
        self.clock = clock
        self.last_trigger: float | None = None

    def skip(self, new_offsets: int) -> bool:
        """Whether the trigger that found `new_offsets` new offsets is skipped (no batch)."""
        now = self.clock()
        if self.last_trigger is not None and now - self.last_trigger < self.max_delay_s \
                and new_offsets < self.min_offsets:
            return True
        self.last_trigger = now
        return False


def cap_rows(begin: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int],
             max_rows: int) -> dict[TopicPartitionKey, int]:
    """End offsets holding at most max_rows records in total, shared in proportion to each
    partition's backlog (rounded down; the remainder goes to the largest backlogs first, so a
    limit smaller than the number of partitions still makes progress)."""
    backlog = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    share = {tp: backlog[tp] * max_rows // total for tp in backlog}
    left = max_rows - sum(share.values())
    for tp in sorted(backlog, key=lambda tp: backlog[tp] - share[tp], reverse=True)[:left]:
        share[tp] += 1
    return {tp: begin[tp] + share[tp] for tp in end}


class AdmissionControl:
    """How far the next micro-batch of an offset-based stream reads: TriggerOptions applied as
    Spark's Kafka source applies them, and Trigger.AvailableNow's bound (`target`, set by the
    reader's prepareForTriggerAvailableNow)."""

    def __init__(self, trigger: TriggerOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.trigger = trigger
        self.delay = TriggerDelay(trigger.min_per_trigger, trigger.max_trigger_delay_ms, clock) \
            if trigger.min_per_trigger is not None else None
        self.target: dict[TopicPartitionKey, int] | None = None  # Trigger.AvailableNow bound

    def read_limit(self) -> ReadLimit:
        """maxOffsetsPerTrigger as ReadMaxRows, else minOffsetsPerTrigger as ReadMinRows. pyspark
        has no composite limit, so with both set `end` applies minOffsetsPerTrigger from the
        options alongside the ReadMaxRows it is given."""
        if self.trigger.max_per_trigger is not None:
            return ReadMaxRows(self.trigger.max_per_trigger)
        if self.trigger.min_per_trigger is not None:
            return ReadMinRows(self.trigger.min_per_trigger)
        return ReadAllAvailable()

    def end(self, begin: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int],
            limit: ReadLimit) -> dict[TopicPartitionKey, int] | None:
        """The end offsets of the next micro-batch from `begin` (which must hold every partition
        of `latest`) given the log ends `latest`: everything available (never beyond the
        AvailableNow target, never below `begin`), or at most ReadMaxRows rows split over the
        partitions in proportion to their backlog. None when the trigger is skipped (no batch):
        fewer than minOffsetsPerTrigger new offsets before maxTriggerDelay; never under
        ReadAllAvailable (Trigger.Once) or Trigger.AvailableNow, which must reach its target."""
        if self.target is not None:
            latest = {tp: min(o, self.target.get(tp, o)) for tp, o in latest.items()}
        end = {tp: max(latest[tp], begin[tp]) for tp in latest}
        if self.delay is not None and self.target is None and not isinstance(limit, ReadAllAvailable) \
                and self.delay.skip(sum(end[tp] - begin[tp] for tp in end)):
            return None
        if isinstance(limit, ReadMaxRows):
            end = cap_rows(begin, end, limit.max_rows)
        return end


class OffsetStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader whose offsets are Spark's Kafka JSON ({"topic": {"0": next offset}}) and
    whose micro-batches AdmissionControl bounds. A subclass says where the logs end (`log_ends`)
    and where partitions missing from a batch's start begin (`complete`). The metadata client
    lives on the driver only: Spark pickles the reader to ship `read` to executors."""

    DRIVER_ONLY: tuple[str, ...] = ("_cluster",)  # attributes left out of the pickle

    def __init__(self, client_options: Mapping[str, str], trigger: TriggerOptions,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client_options = client_options
        self.admission = AdmissionControl(trigger, clock)
        self._cluster: Cluster | None = None

    def __getstate__(self) -> dict:
        """The reader without its driver-only clients."""
        return {**self.__dict__, **dict.fromkeys(self.DRIVER_ONLY)}

    @property
    def cluster(self) -> Cluster:
        """The driver's metadata client, created on first use."""
        if self._cluster is None:
            self._cluster = Cluster(self.client_options)
        return self._cluster

    def log_ends(self, begin: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The log end offset of every partition read (`begin`: where the next batch starts)."""
        raise NotImplementedError

    def complete(self, begin: dict[TopicPartitionKey, int], partitions: Mapping[TopicPartitionKey, int]) -> None:
        """Add the `partitions` missing from `begin` (new ones) to it, where they start."""
        raise NotImplementedError

    def getDefaultReadLimit(self) -> ReadLimit:
        """maxOffsetsPerTrigger / minOffsetsPerTrigger (AdmissionControl.read_limit)."""
        return self.admission.read_limit()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: never read past what exists now."""
        self.admission.target = self.log_ends({})

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end offsets of the next micro-batch as AdmissionControl.end decides (everything
        available, or at most ReadMaxRows rows split over partitions in proportion to their
        backlog); `start` when minOffsetsPerTrigger skips the trigger (no batch)."""
        begin = from_json_offsets(start)
        latest = self.log_ends(begin)
        self.complete(begin, latest)
        end = self.admission.end(begin, latest, limit)
        return start if end is None else to_json_offsets(end)

    def reportLatestOffset(self) -> dict:
        """Log end offsets, for Spark's progress report (latestOffset / offsets behind)."""
        return to_json_offsets(self.log_ends({}))
