"""Prometheus exposition of the group coordinator's meters (Kafka's group-coordinator-metrics).

Naming rule: Kafka's meter `X-count` (sensor with `X-rate` / `X-count`) is the counter
`offsetd_group_coordinator_X_total` (dashes become underscores); Kafka's `X-rate` is
`rate(offsetd_group_coordinator_X_total[1m])` in PromQL. Kafka's gauges keep their names in
snake case. Everything is read from the shards at scrape time; nothing updates in the background.

| metric | type | Kafka |
|---|---|---|
| offsetd_group_coordinator_offset_commit_total | counter | offset-commit-count / -rate |
| offsetd_group_coordinator_offset_expiration_total | counter | offset-expiration-count / -rate |
| offsetd_group_coordinator_offset_deletion_total | counter | offset-deletion-count / -rate |
| offsetd_group_coordinator_group_completed_rebalance_total | counter | group-completed-rebalance-count / -rate |
| offsetd_group_coordinator_num_offsets | gauge | NumOffsets |
| offsetd_group_coordinator_num_groups{state} | gauge | NumGroups{Empty,Stable,PreparingRebalance,CompletingRebalance,Dead} |
| offsetd_group_coordinator_partition_load_time_ms{partition} | gauge | partition-load-time (per partition) |
| offsetd_group_coordinator_partition_records_loaded{partition} | gauge | |
| offsetd_group_coordinator_partition_state{partition,state} | gauge 1/0 | loading / active / failed |
| offsetd_group_earliest_offset_expiry_timestamp_ms{group} | gauge | (expiry preview; groups whose offsets never expire are omitted) |
| offsetd_metrics_snapshot_seconds | gauge | time the last read of the shards took |
| offsetd_log_manager_offline_log_directory_count | gauge | OfflineLogDirectoryCount |
| offsetd_log_directory_offline{log_directory} | gauge 1/0 | LogDirectoryOffline |
| offsetd_log_directory_failed_writes_total{log_directory} | counter | (appends and flushes that failed, a full disk included) |
| offsetd_coordinator_journal_rounds_total | counter | (fdatasyncs of the coordinators' journal; single node) |
| offsetd_coordinator_journal_appends_total | counter | (coordinator appends they made durable) |
| offsetd_coordinator_journal_bytes_total | counter | (bytes written to it) |
| offsetd_coordinator_journal_bypassed | gauge 1/0 | (it cannot grow, a full disk: appends fsync their segments) |
"""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Iterator, Sequence

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .snapshot import EARLIEST_EXPIRY as _AT
from .snapshot import GROUP, SHARD_STATES, GroupRow, Runtime, Slicer, Snapshot, run, take_snapshot

# Prometheus text format 0.0.4: what generate_latest writes.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

PREFIX = "offsetd_group_coordinator_"
OFFSET_COMMIT = PREFIX + "offset_commit"                       # exposed with the suffix _total
OFFSET_EXPIRATION = PREFIX + "offset_expiration"
OFFSET_DELETION = PREFIX + "offset_deletion"
COMPLETED_REBALANCE = PREFIX + "group_completed_rebalance"
NUM_OFFSETS = PREFIX + "num_offsets"
NUM_GROUPS = PREFIX + "num_groups"
PARTITION_LOAD_TIME = PREFIX + "partition_load_time_ms"
PARTITION_RECORDS_LOADED = PREFIX + "partition_records_loaded"
PARTITION_STATE = PREFIX + "partition_state"
EARLIEST_EXPIRY = "offsetd_group_earliest_offset_expiry_timestamp_ms"
SNAPSHOT_SECONDS = "offsetd_metrics_snapshot_seconds"
OFFLINE_LOG_DIRS = "offsetd_log_manager_offline_log_directory_count"
LOG_DIR_OFFLINE = "offsetd_log_directory_offline"
LOG_DIR_FAILED_WRITES = "offsetd_log_directory_failed_writes"  # exposed with the suffix _total
JOURNAL = "offsetd_coordinator_journal_"

GROUP_CHUNK = 250  # per-group samples formatted per generate_latest call (few live objects at a time)


def coordinator_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Every family except the per-group one (a few hundred samples at most)."""
    shards = snapshot.shards
    for name, attr, doc in (
        (OFFSET_COMMIT, "offset_commits", "Offsets committed (Kafka offset-commit-count)."),
        (OFFSET_EXPIRATION, "offset_expirations", "Offsets removed by retention (Kafka offset-expiration-count)."),
        (OFFSET_DELETION, "offset_deletions", "Offsets removed by OffsetDelete (Kafka offset-deletion-count)."),
        (COMPLETED_REBALANCE, "completed_rebalances",
         "Rebalances completed by classic groups (Kafka group-completed-rebalance-count)."),
    ):
        yield CounterMetricFamily(name, doc, value=sum(getattr(s, attr) for s in shards))
    yield GaugeMetricFamily(NUM_OFFSETS, "Committed offsets held by the coordinator (Kafka NumOffsets).",
                            value=sum(s.num_offsets for s in shards))
    groups = GaugeMetricFamily(NUM_GROUPS, "Groups by state (Kafka NumGroups<State>).", labels=["state"])
    for state, count in snapshot.num_groups().items():
        groups.add_metric([state], count)
    yield groups
    load = GaugeMetricFamily(PARTITION_LOAD_TIME, "Time the last load of the __consumer_offsets partition took (ms).",
                             labels=["partition"])
    loaded = GaugeMetricFamily(PARTITION_RECORDS_LOADED, "Records replayed loading the partition.",
                               labels=["partition"])
    state = GaugeMetricFamily(PARTITION_STATE, "Coordinator state of the __consumer_offsets partition (1 = current).",
                              labels=["partition", "state"])
    for shard in shards:
        partition = str(shard.partition)
        load.add_metric([partition], shard.load_time_ms)
        loaded.add_metric([partition], shard.records_loaded)
        for name in SHARD_STATES:
            state.add_metric([partition, name], 1 if shard.state == name else 0)
    yield load
    yield loaded
    yield state
    yield GaugeMetricFamily(SNAPSHOT_SECONDS, "Time reading the coordinator for this scrape took.",
                            value=snapshot.seconds)
    yield from log_dir_families(snapshot)


def log_dir_families(snapshot: Snapshot) -> Iterator[Metric]:
    """Kafka's LogManager gauges for `log.dirs`, and the failed writes that led there."""
    dirs = snapshot.log_dirs
    yield GaugeMetricFamily(OFFLINE_LOG_DIRS, "Log directories taken offline by an I/O error (Kafka "
                            "OfflineLogDirectoryCount); a restart brings them back.",
                            value=sum(offline for offline, _ in dirs.values()))
    offline = GaugeMetricFamily(LOG_DIR_OFFLINE, "1 while the log directory is offline (Kafka LogDirectoryOffline).",
                                labels=["log_directory"])
    failed = CounterMetricFamily(LOG_DIR_FAILED_WRITES, "Appends and flushes to the log directory that failed "
                                 "(and were undone), a full disk included.", labels=["log_directory"])
    for path, (is_offline, failures) in sorted(dirs.items()):
        offline.add_metric([path], 1 if is_offline else 0)
        failed.add_metric([path], failures)
    yield offline
    yield failed
    if snapshot.journal is not None:
        rounds, appends, written, bypassed = snapshot.journal
        yield CounterMetricFamily(JOURNAL + "rounds", "fdatasyncs of the coordinators' journal (each makes the "
                                  "appends of every coordinator partition since the last one durable).", value=rounds)
        yield CounterMetricFamily(JOURNAL + "appends", "Coordinator appends made durable by the journal.",
                                  value=appends)
        yield CounterMetricFamily(JOURNAL + "bytes", "Bytes written to the coordinators' journal.", value=written)
        yield GaugeMetricFamily(JOURNAL + "bypassed", "1 while the journal cannot grow (a full disk): coordinator "
                                "appends fsync their own segments.", value=1 if bypassed else 0)


def expiry_family(rows: Iterable[GroupRow]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        EARLIEST_EXPIRY, "When the group's first offset expires if nothing changes (ms since epoch); "
        "groups whose offsets do not expire are omitted.", labels=["group"])
    for row in rows:
        if row[_AT] is not None:
            family.add_metric([row[GROUP]], row[_AT])
    return family


class _Families:
    """A one-shot registry for generate_latest (which only calls collect())."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class CoordinatorCollector:
    """A prometheus_client Collector reading the shards at every collect() (in one go).

    For a registry of your own: `registry.register(CoordinatorCollector(server.runtimes))`. The HTTP
    endpoint renders the same families with `render()`, which pauses between slices."""

    def __init__(self, runtimes: Sequence[Runtime]) -> None:
        self.runtimes = runtimes

    def collect(self) -> Iterator[Metric]:
        snapshot = Snapshot()
        run(take_snapshot(self.runtimes, snapshot, Slicer(float("inf"))))
        yield from coordinator_families(snapshot)
        yield expiry_family(snapshot.groups())


def render(snapshot: Snapshot, out: list[bytes], slicer: Slicer | None = None) -> Iterator[None]:
    """Cooperative generator appending the exposition text of `snapshot` to `out` in pieces.

    The per-group family goes through generate_latest GROUP_CHUNK groups at a time; the family's
    `# HELP` / `# TYPE` lines are kept from the first piece only, so the result is one family."""
    slicer = slicer or Slicer()
    out.append(generate_latest(_Families(coordinator_families(snapshot))))
    rows = (row for shard in snapshot.shards for row in shard.groups if row[_AT] is not None)
    first = True
    while True:
        if slicer.due():
            yield
        chunk = list(islice(rows, GROUP_CHUNK))
        if not chunk and not first:
            return
        text = generate_latest(_Families([expiry_family(chunk)]))
        out.append(text if first else text.split(b"\n", 2)[2])
        first = False


def exposition(runtimes: Sequence[Runtime]) -> bytes:
    """The whole /metrics payload in one go (synchronous; tests and tools)."""
    snapshot, out = Snapshot(), []
    run(take_snapshot(runtimes, snapshot))
    run(render(snapshot, out))
    return b"".join(out)


__all__ = ["CONTENT_TYPE", "CoordinatorCollector", "coordinator_families", "expiry_family", "exposition", "render"]
