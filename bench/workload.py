"""What a workload is: a function ``(bootstrap, broker_name) -> {metric_key: Metric}`` named by a
:class:`Workload`, failing with :class:`WorkloadFailed`, parameterised by :class:`BenchConfig`.

The workload modules (``workloads``, ``abuse``, ``eos``, ``security``, ``cluster``) and the
runners build on this module; it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.brokers import DEFAULT_OFFSETD_CONFIG


@dataclass(frozen=True)
class Metric:
    """One measured figure. ``higher_is_better`` decides which run is best of N."""

    label: str
    unit: str
    value: float
    higher_is_better: bool = True


class WorkloadFailed(Exception):
    """The broker did not do what the workload needs; the run has no valid figure.
    ``detail`` is optional supporting text (e.g. a child's traceback)."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


WorkloadFn = Callable[..., dict[str, Metric]]


@dataclass(frozen=True)
class Workload:
    """A named workload function plus the names of workloads it builds on, and the brokers
    it applies to (empty: all)."""

    name: str
    run: WorkloadFn
    requires: tuple[str, ...] = ()
    brokers: tuple[str, ...] = ()
    #: Why it is "n/a" for the other brokers (default: "<brokers> only").
    not_applicable: str = ""
    #: Called with ``broker_pid=`` (the broker process, e.g. to read its CPU time) too.
    wants_pid: bool = False

    def applies_to(self, broker_name: str) -> bool:
        return not self.brokers or broker_name in self.brokers

    def not_applicable_reason(self) -> str:
        return self.not_applicable or f"{', '.join(self.brokers)} only"


@dataclass(frozen=True)
class BenchConfig:
    """Parameters shared by the workloads."""

    #: 200 MB of values: produce and consume each run ~2 s. With 200,000 (the figure before
    #: 2026-11-23) a consume took ~0.25 s, of which the first record alone took 30-100 ms:
    #: a start-up latency, not a throughput (README "Performance").
    messages: int = 2_000_000
    message_size: int = 100
    partitions: int = 8
    topic: str = "bench"
    linger_ms: int = 5
    group_id: str = "offsetd-bench"
    setup_timeout_s: float = 30.0
    produce_timeout_s: float = 120.0
    consume_timeout_s: float = 120.0
    #: Extra allowance for a child process to start up and report, on top of its deadline.
    child_slack_s: float = 30.0

    # commit-throughput / commit-latency (offsets of cfg.partitions partitions of cfg.topic)
    commit_clients: int = 4
    commit_max_in_flight: int = 200
    commit_duration_s: float = 5.0
    latency_warmup_s: float = 1.0
    latency_duration_s: float = 3.0

    # subscribe-to-first-record
    first_record_timeout_s: float = 90.0

    # time-lookup: a partition of lookup_messages x lookup_value_size B in lookup_codec batches
    lookup_topic: str = "bench-time"
    lookup_messages: int = 1_000_000  # ~1 GB stored
    lookup_value_size: int = 1000
    lookup_codec: str = "lz4"
    lookups: int = 200
    lookup_warmup: int = 10
    lookup_produce_timeout_s: float = 300.0

    # offsets-load: groups x topics x partitions commit records, one per key
    load_groups: int = 1000
    load_topics: int = 100
    load_partitions: int = 100
    load_records_per_batch: int = 2048
    load_timeout_s: float = 600.0
    #: Building the data set (once; cached under cache_dir).
    load_build_timeout_s: float = 1800.0
    offsetd_config: str = str(DEFAULT_OFFSETD_CONFIG)

    # abuse-* (bench/abuse.py): garbage storm, idle connections, full disk
    storm_quiet_s: float = 10.0
    storm_s: float = 20.0
    garbage_workers: int = 2
    garbage_max_per_worker: int = 200_000
    garbage_connect_timeout_s: float = 0.1
    #: The paced storm's (it runs first), all processes together: the user trial's 40,000 in 20 s.
    garbage_paced_rate_per_s: float = 2000.0
    idle_connections: int = 1200
    idle_warmup_connections: int = 20
    idle_settle_s: float = 1.0
    disk_size: str = "32m"
    disk_cycles: int = 3
    disk_refusals: int = 3
    disk_max_commits: int = 20_000
    disk_cycle_timeout_s: float = 60.0

    #: bench/consumer_protocol.py's member counts and records, as a share of the issue's sizes.
    kip848_scale: float = 1.0

    cache_dir: str = str(Path(__file__).resolve().parent / "results" / "cache")

    def expected_per_partition(self) -> list[int]:
        """How many messages ``produce`` sends to each partition (message i -> i % P)."""
        base, extra = divmod(self.messages, self.partitions)
        return [base + (1 if p < extra else 0) for p in range(self.partitions)]
