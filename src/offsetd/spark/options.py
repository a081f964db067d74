"""Option values shared by the Spark sources: parsed as Spark parses its own, and an invalid
value is a ValueError that names the option. Also the admission control both stream readers
apply (maxOffsetsPerTrigger, minOffsetsPerTrigger + maxTriggerDelay, Trigger.AvailableNow), as
Spark's Kafka source applies it, over offsets keyed by (topic, partition)."""

from __future__ import annotations

import re
import time
from typing import Callable, Mapping

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows

from .kafka_client import TopicPartitionKey

BOOLEANS = {"true": True, "false": False}
US_PER_MS = 1000
# maxTriggerDelay units (Spark's time strings; no unit = milliseconds), in microseconds.
TIME_UNITS_US = {"us": 1, "ms": 1000, "s": 1_000_000, "m": 60_000_000, "min": 60_000_000,
                 "h": 3_600_000_000, "d": 86_400_000_000}
TIME_STRING = re.compile(r"([0-9]+)([a-z]+)?")
DEFAULT_MAX_TRIGGER_DELAY = "15m"


def option_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    """A true/false option (case-insensitive, as Spark's toBoolean)."""
    text = options.get(name)
    if not text:
        return default
    if text.strip().lower() not in BOOLEANS:
        raise ValueError(f"option {name} must be true or false, got {text!r}")
    return BOOLEANS[text.strip().lower()]


def option_positive_int(options: Mapping[str, str], name: str) -> int | None:
    """A count option such as maxOffsetsPerTrigger: a positive integer, or None when unset."""
    text = options.get(name)
    if not text:
        return None
    if not text.strip().isdigit() or int(text) <= 0:
        raise ValueError(f"option {name} must be a positive integer, got {text!r}")
    return int(text)


def option_duration_ms(name: str, text: str) -> int:
    """A Spark time string such as 15m, 2s, 500ms (no unit = ms), in milliseconds."""
    match = TIME_STRING.fullmatch(text.strip().lower())
    if match is None or (match[2] or "ms") not in TIME_UNITS_US:
        raise ValueError(f"option {name} must be a duration such as 15m, 30s or 500ms "
                         f"(units {', '.join(TIME_UNITS_US)}), got {text!r}")
    return int(match[1]) * TIME_UNITS_US[match[2] or "ms"] // US_PER_MS


class TriggerOptions:
    """The admission control options of a stream, validated: maxOffsetsPerTrigger,
    minOffsetsPerTrigger (at most maxOffsetsPerTrigger) and maxTriggerDelay (default 15m)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.max_per_trigger = option_positive_int(options, "maxOffsetsPerTrigger")
        self.min_per_trigger = option_positive_int(options, "minOffsetsPerTrigger")
        if self.min_per_trigger is not None and self.max_per_trigger is not None \
                and self.min_per_trigger > self.max_per_trigger:
            raise ValueError(f"option minOffsetsPerTrigger ({self.min_per_trigger}) is higher than "
                             f"maxOffsetsPerTrigger ({self.max_per_trigger})")
        self.max_trigger_delay_ms = option_duration_ms(
            "maxTriggerDelay", options.get("maxTriggerDelay") or DEFAULT_MAX_TRIGGER_DELAY)


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
