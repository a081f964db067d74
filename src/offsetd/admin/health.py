"""Burrow-style consumer health: grade each committed partition OK / WARN / STOP / STALL / REWIND
and the group OK / WARN / ERR, from the group's recent commits in `__consumer_offsets`.

Two layers:

* Pure evaluation (`build_window`, `evaluate_partition`, `evaluate_group`): commit histories, lags
  and a clock in, grades out. These implement Burrow's rules as given in the project reference
  (`peers-and-user-asks.md` §3.2); tests drive them with scripted histories and fake times.
* I/O (`group_health`): reads the group's commits from its `__consumer_offsets` partition
  (`offsets_log.read_cluster`), the committed offsets (OffsetFetch) and log offsets (ListOffsets)
  through confluent-kafka, so it works against offsetd and any Kafka cluster. `format_health` and
  `health_json` render results for `offsetd groups --describe --health`.

Where the data comes from, compared with Burrow (which consumes `__consumer_offsets` continuously
and samples every partition's log end offset (LEO) every `offset-refresh`, 10 s by default):

* **Commit window**: the group's last `intervals` (10) commits per partition, read back from the
  log (the broker keeps every commit until compaction). Commits closer than `min_distance_ms`
  (Burrow's `min-distance`, 1 s) overwrite the previous window entry instead of adding one.
  Commits before the partition's last offset tombstone (deletion / expiry) are forgotten.
* **Lag at each commit**: Burrow subtracts the commit from its latest LEO sample. We have no
  samples of the past, so we reconstruct the LEO as of the commit time with ListOffsets by
  timestamp on the data partition: the first offset whose record timestamp is >= the commit
  timestamp is the number of records that existed at that moment, i.e. the LEO then ("no such
  record" means nothing was produced since, so the LEO then is today's LEO). A window slot that a
  faster commit overwrote is measured at the slot's time, at most min-distance early (Burrow's
  own LEO is up to one `offset-refresh` old). This assumes record
  timestamps track append time (CreateTime from live producers, or LogAppendTime); a commit whose
  reconstructed LEO is unknown (ListOffsets failed) gets lag None, which Burrow's rules treat as
  "not caught up" (rule 1) and skip when comparing lags (rule 5).
* **Recent LEO samples for STOP**: reconstructed the same way at `now - k * sample_interval_ms`
  for k = 1..intervals (Burrow's defaults: one sample per 10 s, `intervals` of them).
* **Current lag**: LEO (the consumer's isolation level: read_committed by default, so transaction
  markers are not lag) minus the committed offset from OffsetFetch, clamped at the log start
  offset, never negative.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Iterable, Sequence

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from offsetd.admin.offsets_log import LogEntry, OffsetsLogError, read_cluster
from offsetd.admin.table import Column, render
from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey

__all__ = [
    "Status",
    "Commit",
    "PartitionStatus",
    "PartitionHealth",
    "GroupHealth",
    "EvaluationConfig",
    "build_window",
    "evaluate_partition",
    "evaluate_group",
    "group_health",
    "format_health",
    "health_json",
]


class Status(IntEnum):
    """Burrow's status codes (`protocol.StatusConstant`): the order is the severity."""

    NOTFOUND = 0
    OK = 1
    WARN = 2
    ERR = 3
    STOP = 4
    STALL = 5
    REWIND = 6


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit in the window: committed offset, commit time (ms) and the lag at that time
    (None when the log end offset of that moment is unknown)."""

    offset: int
    timestamp_ms: int
    lag: int | None


@dataclass(frozen=True, slots=True)
class EvaluationConfig:
    """Burrow's evaluator and storage knobs, with Burrow's defaults."""

    intervals: int = 10
    """Commits kept per partition (storage `intervals`)."""
    min_distance_ms: int = 1000
    """Commits closer than this replace the previous window entry (storage `min-distance`)."""
    minimum_complete: float = 0.0
    """Fraction of the window that must be filled before a partition is judged (`minimum-complete`)."""
    allowed_lag: int = 0
    """Lag at or below this counts as caught up (`allowed-lag`)."""
    sample_interval_ms: int = 10_000
    """Spacing of the reconstructed LEO samples used by the STOP rule (cluster `offset-refresh`)."""


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """Result of `evaluate_partition`: the grade, the lag now and how full the window was."""

    status: Status
    current_lag: int
    complete: float
    """Filled fraction of the window (commits / intervals), 0.0 .. 1.0."""


@dataclass(frozen=True, slots=True)
class PartitionHealth:
    """One committed partition of a group with its offsets, commit window and grade."""

    topic: str
    partition: int
    current_offset: int
    log_end_offset: int | None
    lag: int | None
    status: Status
    complete: float
    commits: tuple[Commit, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupHealth:
    """A group's grade (OK / WARN / ERR, or NOTFOUND), totals and per-partition results."""

    group: str
    status: Status
    partitions: tuple[PartitionHealth, ...] = ()
    total_lag: int = 0
    max_lag: PartitionHealth | None = None
    complete: float = 0.0
    error: str | None = None
    """Why the group could not be evaluated (status NOTFOUND), e.g. a broker error."""


# ---------------------------------------------------------------------------------------------
# Pure evaluation
# ---------------------------------------------------------------------------------------------


def build_window(commits: Iterable[Commit], intervals: int = 10, min_distance_ms: int = 1000) -> list[Commit]:
    """The last `intervals` commits in commit order, as Burrow's storage ring keeps them: a commit
    less than `min_distance_ms` after the previous slot's timestamp overwrites that slot's offset
    and lag but keeps its timestamp (so a fast committer still fills a new slot every
    min-distance)."""
    window: list[Commit] = []
    for commit in commits:
        if window and commit.timestamp_ms - window[-1].timestamp_ms < min_distance_ms:
            window[-1] = Commit(commit.offset, window[-1].timestamp_ms, commit.lag)
        else:
            window.append(commit)
    return window[-intervals:] if intervals > 0 else []


def _stopped(window: Sequence[Commit], log_end_samples: Sequence[int], now_ms: int) -> bool:
    """Rule STOP: the time since the last commit exceeds the span the window covers, and no recent
    LEO sample was at or below the last committed offset (the consumer was not recently caught up)."""
    first, last = window[0], window[-1]
    if now_ms - last.timestamp_ms <= last.timestamp_ms - first.timestamp_ms:
        return False
    return not any(leo <= last.offset for leo in log_end_samples)


def _rewound(window: Sequence[Commit]) -> bool:
    """Rule REWIND: some commit is lower than its predecessor and no later commit in the window
    regained the pre-rewind offset."""
    for i in range(1, len(window)):
        before = window[i - 1].offset
        if window[i].offset < before and not any(c.offset >= before for c in window[i + 1:]):
            return True
    return False


def _stalled(window: Sequence[Commit]) -> bool:
    """Rule STALL: the committed offset never changed across the window."""
    return all(c.offset == window[0].offset for c in window)


def _lag_never_decreased(window: Sequence[Commit]) -> bool:
    """Rule WARN: lag never went down from one commit to the next (unknown lags are skipped)."""
    lags = [c.lag for c in window if c.lag is not None]
    return all(b >= a for a, b in zip(lags, lags[1:]))


def evaluate_partition(
    commits: Sequence[Commit],
    current_lag: int,
    log_end_samples: Sequence[int],
    now_ms: int,
    allowed_lag: int = 0,
    intervals: int = 10,
    minimum_complete: float = 0.0,
) -> PartitionStatus:
    """Grade one partition from its commit window (oldest first, at most `intervals` entries; see
    `build_window`), its lag now, recent LEO samples and the current time (reference §3.2):

    0. lag now <= allowed_lag, an empty window, or a window filled less than `minimum_complete`
       -> OK (nothing to judge);
    1. STOP if the consumer stopped committing (see `_stopped`);
    2. REWIND if it went back and has not regained the offset (see `_rewound`);
    3. if the lag was above allowed_lag at every commit (unknown counts as above):
       STALL if the offset never moved, else WARN if the lag never decreased;
    4. otherwise OK.
    """
    window = list(commits)[-intervals:] if intervals > 0 else []
    complete = min(len(window) / intervals, 1.0) if intervals > 0 else 0.0

    def result(status: Status) -> PartitionStatus:
        return PartitionStatus(status, current_lag, complete)

    if current_lag <= allowed_lag or not window or complete < minimum_complete:
        return result(Status.OK)
    if _stopped(window, log_end_samples, now_ms):
        return result(Status.STOP)
    if _rewound(window):
        return result(Status.REWIND)
    if all(c.lag is None or c.lag > allowed_lag for c in window):
        if _stalled(window):
            return result(Status.STALL)
        if _lag_never_decreased(window):
            return result(Status.WARN)
    return result(Status.OK)


def evaluate_group(group: str, partitions: Sequence[PartitionHealth]) -> GroupHealth:
    """Combine partition grades: group status = worst partition status, with STOP / STALL / REWIND
    reported as ERR; total lag; the partition with the largest lag (first one on ties); complete =
    fraction of partitions whose window is full. No partitions (no committed offsets) -> NOTFOUND."""
    if not partitions:
        return GroupHealth(group, Status.NOTFOUND)
    worst = max(p.status for p in partitions)
    max_lag: PartitionHealth | None = None
    for p in partitions:
        if max_lag is None or (p.lag or 0) > (max_lag.lag or 0):
            max_lag = p
    return GroupHealth(
        group,
        Status.ERR if worst > Status.ERR else worst,
        tuple(partitions),
        total_lag=sum(p.lag or 0 for p in partitions),
        max_lag=max_lag,
        complete=sum(1 for p in partitions if p.complete >= 1.0) / len(partitions),
    )


# ---------------------------------------------------------------------------------------------
# I/O: commits from the offsets log, offsets from the cluster
# ---------------------------------------------------------------------------------------------

_TopicPartition = tuple[str, int]


def _commit_history(entries: Iterable[LogEntry]) -> dict[_TopicPartition, list[tuple[int, int]]]:
    """(topic, partition) -> [(offset, commit timestamp ms)] in log order, forgetting everything
    before an offset tombstone or a group tombstone (deletion or expiry)."""
    history: dict[_TopicPartition, list[tuple[int, int]]] = {}
    for entry in entries:
        key = entry.key
        if type(key) is OffsetCommitKey:
            tp = (key.topic, key.partition)
            if entry.value is None:
                history.pop(tp, None)
            else:
                value = entry.value
                ts = value.commit_timestamp if value.commit_timestamp >= 0 else entry.timestamp  # type: ignore[union-attr]
                history.setdefault(tp, []).append((value.offset, ts))  # type: ignore[union-attr]
        elif type(key) is GroupMetadataKey and entry.value is None:
            history.clear()
    return history


def _committed_offsets(admin: AdminClient, group: str, timeout_s: float) -> dict[_TopicPartition, int]:
    """The group's committed offsets (OffsetFetch); partitions without a valid offset are left out."""
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout_s)
    result = futures[group].result(timeout_s)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []
            if tp.error is None and tp.offset >= 0}


def _log_end_at(
    consumer: Consumer, wanted: dict[_TopicPartition, set[int]], log_end_now: dict[_TopicPartition, int],
    timeout_s: float,
) -> dict[tuple[str, int, int], int]:
    """(topic, partition, time ms) -> the partition's LEO as of that time, by ListOffsets by
    timestamp: the first offset whose record timestamp is >= the time; "none" (-1) means nothing
    newer exists, so the LEO then is the LEO now. One request per round, each partition at most
    once per round. Times the broker cannot answer are left out."""
    pending = {tp: sorted(times) for tp, times in wanted.items() if times}
    result: dict[tuple[str, int, int], int] = {}
    while pending:
        query = [TopicPartition(topic, partition, times.pop()) for (topic, partition), times in pending.items()]
        asked = [(tp.topic, tp.partition, tp.offset) for tp in query]
        answers = consumer.offsets_for_times(query, timeout=timeout_s)
        for (topic, partition, ts), answer in zip(asked, answers):
            if answer.error is None:
                result[(topic, partition, ts)] = answer.offset if answer.offset >= 0 else log_end_now[(topic, partition)]
        pending = {tp: times for tp, times in pending.items() if times}
    return result


def group_health(
    client_config: dict[str, str],
    group: str,
    timeout_s: float,
    config: EvaluationConfig | None = None,
    now_ms: int | None = None,
) -> GroupHealth:
    """Evaluate one group against a cluster (see the module docstring for where each input comes
    from). `client_config` is a librdkafka config: `bootstrap.servers` plus any `--command-config`
    properties. `now_ms` overrides the clock (tests). A group without committed offsets is
    NOTFOUND; broker errors also give NOTFOUND, with `error` saying what failed (never raises for them).
    """
    config = config or EvaluationConfig()
    deadline = time.monotonic() + timeout_s

    def remaining() -> float:
        return max(deadline - time.monotonic(), 0.1)

    try:
        committed = _committed_offsets(AdminClient(client_config), group, remaining())
        if not committed:
            return GroupHealth(group, Status.NOTFOUND)
        history = _commit_history(read_cluster(client_config, group, remaining()))
        now = int(time.time() * 1000) if now_ms is None else now_ms
        consumer = Consumer({**client_config, "group.id": f"offsetd-health-{uuid.uuid4().hex[:12]}",
                             "enable.auto.commit": False})
        try:
            watermarks = {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=remaining())
                          for tp in committed}
            log_end = {tp: high for tp, (_low, high) in watermarks.items()}
            windows = {tp: build_window((Commit(o, ts, None) for o, ts in history.get(tp, [])),
                                        config.intervals, config.min_distance_ms) for tp in committed}
            sample_times = [now - k * config.sample_interval_ms for k in range(1, config.intervals + 1)]
            wanted = {tp: {c.timestamp_ms for c in windows[tp]} | set(sample_times) for tp in committed}
            leo_at = _log_end_at(consumer, wanted, log_end, remaining())
        finally:
            consumer.close()
    except (KafkaException, OffsetsLogError, TimeoutError) as exc:  # TimeoutError: an admin future
        return GroupHealth(group, Status.NOTFOUND, error=str(exc.args[0]) if exc.args else type(exc).__name__)

    partitions = []
    for (topic, partition), offset in sorted(committed.items()):
        tp = (topic, partition)
        low, high = watermarks[tp]
        commits = tuple(
            Commit(c.offset, c.timestamp_ms,
                   max(leo_at[(topic, partition, c.timestamp_ms)] - c.offset, 0)
                   if (topic, partition, c.timestamp_ms) in leo_at else None)
            for c in windows[tp]
        )
        samples = [leo_at[(topic, partition, t)] for t in sample_times if (topic, partition, t) in leo_at]
        lag = max(high - max(offset, low), 0)  # clamped at the log start: no phantom lag below it
        graded = evaluate_partition(commits, lag, samples, now, config.allowed_lag, config.intervals,
                                    config.minimum_complete)
        partitions.append(PartitionHealth(topic, partition, offset, high, lag, graded.status, graded.complete, commits))
    return evaluate_group(group, partitions)


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

# kafka-consumer-groups column layout (reference §1.2): group/topic at least 15 wide, PARTITION 10,
# offsets and lag 15, left-aligned, one space apart, every column growing to fit (the last one is
# not padded); "-" for a missing value.
_PARTITION_COLUMNS = [Column(header, width, grows=True) for header, width in (
    ("GROUP", 15), ("TOPIC", 15), ("PARTITION", 10), ("CURRENT-OFFSET", 15), ("LOG-END-OFFSET", 15),
    ("LAG", 15))] + [Column("STATUS", 0)]
_GROUP_COLUMNS = [Column(header, width, grows=True) for header, width in (
    ("GROUP", 15), ("STATUS", 8), ("TOTAL-LAG", 15), ("MAX-LAG-TOPIC", 15), ("MAX-LAG-PARTITION", 17),
    ("MAX-LAG", 15), ("PARTITIONS", 10))] + [Column("COMPLETE", 0)]


def format_health(results: list[GroupHealth]) -> str:
    """Kafka-style text: per group a blank line, the partition table (GROUP, TOPIC, PARTITION,
    CURRENT-OFFSET, LOG-END-OFFSET, LAG, STATUS), a blank line and the group line (STATUS,
    TOTAL-LAG, the partition with the largest lag, PARTITIONS, COMPLETE). A group that could not
    be evaluated prints "Error: ..." instead of its partition table."""
    lines: list[str] = []
    for g in results:
        lines.append("")
        if g.error is not None:
            lines.append(f"Error: Health of consumer group '{g.group}' could not be evaluated: {g.error}")
        elif g.partitions:
            rows = [(g.group, p.topic, p.partition, p.current_offset, p.log_end_offset, p.lag, p.status.name)
                    for p in g.partitions]
            lines += render(_PARTITION_COLUMNS, rows)
            lines.append("")
        top = g.max_lag
        summary = (g.group, g.status.name, g.total_lag if g.partitions else None, top and top.topic,
                   top and top.partition, top and top.lag, len(g.partitions), f"{g.complete:.2f}")
        lines += render(_GROUP_COLUMNS, [summary])
    return "\n".join(lines) + "\n"


def _partition_json(p: PartitionHealth) -> dict:
    """One partition as JSON: offsets, lag, grade, window fill and the commit window."""
    return {
        "topic": p.topic, "partition": p.partition, "current_offset": p.current_offset,
        "log_end_offset": p.log_end_offset, "lag": p.lag, "status": p.status.name,
        "complete": p.complete,
        "commits": [{"offset": c.offset, "timestamp": c.timestamp_ms, "lag": c.lag} for c in p.commits],
    }


def health_json(results: list[GroupHealth]) -> list[dict]:
    """Machine-readable results, one dict per group: Burrow's /status content in snake_case."""
    return [
        {
            "group": g.group,
            "status": g.status.name,
            "error": g.error,
            "complete": g.complete,
            "total_lag": g.total_lag,
            "partition_count": len(g.partitions),
            "max_lag": _partition_json(g.max_lag) if g.max_lag is not None else None,
            "partitions": [_partition_json(p) for p in g.partitions],
        }
        for g in results
    ]
