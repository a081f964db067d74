"""The workloads: each is a function ``(bootstrap, broker_name) -> {metric_key: Metric}``.

A workload raises :class:`WorkloadFailed` when the broker misbehaved (errors, missing or
wrong data, deadline missed); such a run is reported as failed, never as a number. Workloads
run in list order against one fresh broker, and a workload may ``require`` earlier ones
(``consume`` reads what ``produce`` wrote); if a requirement did not succeed it is skipped.

Adding a workload: write ``def my_workload(cfg, bootstrap, broker_name) -> dict[str, Metric]``
(client loops that need their own process go in ``clients`` and run via ``procs``), then
append ``Workload("name", partial(my_workload, cfg), requires=(...))`` in
:func:`default_workloads`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench import clients
from bench.procs import ChildError, run_in_child


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


WorkloadFn = Callable[[str, str], dict[str, Metric]]


@dataclass(frozen=True)
class Workload:
    """A named workload function plus the names of workloads it builds on."""

    name: str
    run: WorkloadFn
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchConfig:
    """Parameters shared by the workloads."""

    messages: int = 200_000
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

    def expected_per_partition(self) -> list[int]:
        """How many messages ``produce`` sends to each partition (message i -> i % P)."""
        base, extra = divmod(self.messages, self.partitions)
        return [base + (1 if p < extra else 0) for p in range(self.partitions)]


# -- workloads ------------------------------------------------------------------------------


def create_topic(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Create the topic with ``cfg.partitions`` partitions via the AdminClient, then poll
    Metadata until every partition has a leader. Produces no figure."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(cfg.topic, num_partitions=cfg.partitions, replication_factor=1)],
        operation_timeout=cfg.setup_timeout_s,
        request_timeout=cfg.setup_timeout_s,
    )
    try:
        futures[cfg.topic].result(timeout=cfg.setup_timeout_s)
    except KafkaException as exc:
        raise WorkloadFailed(f"CreateTopics {cfg.topic!r} failed: {exc}") from exc

    deadline = time.monotonic() + cfg.setup_timeout_s
    problem = "no metadata"
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            meta = admin.list_topics(cfg.topic, timeout=min(1.0, remaining)).topics.get(cfg.topic)
        except KafkaException as exc:
            problem = str(exc)
            continue
        if meta is None or meta.error is not None:
            problem = f"topic metadata error: {meta.error if meta else 'topic missing'}"
        elif len(meta.partitions) != cfg.partitions:
            problem = f"{len(meta.partitions)} partitions, expected {cfg.partitions}"
        elif any(p.leader < 0 or p.error is not None for p in meta.partitions.values()):
            problem = "some partitions have no leader yet"
        else:
            return {}
    raise WorkloadFailed(
        f"topic {cfg.topic!r} not ready after {cfg.setup_timeout_s:.0f} s: {problem}"
    )


def produce_throughput(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """One producer process, ``cfg.messages`` x ``cfg.message_size`` B, acks=all,
    linger.ms=5, no idempotence; every delivery report must be a success."""
    try:
        res = run_in_child(
            clients.produce,
            (bootstrap, cfg.topic, cfg.messages, cfg.message_size, cfg.partitions,
             cfg.linger_ms, cfg.produce_timeout_s),
            timeout_s=cfg.produce_timeout_s + cfg.child_slack_s,
        )  # fmt: skip
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    if res.errors or res.undelivered or res.delivered != cfg.messages:
        raise WorkloadFailed(
            f"{res.delivered}/{cfg.messages} delivered ({res.attempted} handed to the client), "
            f"{res.errors} delivery errors, "
            f"{res.undelivered} undelivered at the deadline; first error: {res.first_error}"
        )
    return _throughput("produce", cfg.messages, cfg.message_size, res.elapsed_s)


def consume_throughput(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """One consumer process assigned all partitions from the beginning reads back what
    ``produce`` wrote. Checked: the total, the count per partition, offsets 0, 1, 2, ... in
    each partition, every value's size, and each partition's high watermark."""
    try:
        res = run_in_child(
            clients.consume,
            (bootstrap, cfg.topic, cfg.messages, cfg.message_size, cfg.partitions,
             cfg.group_id, cfg.consume_timeout_s),
            timeout_s=cfg.consume_timeout_s + cfg.child_slack_s,
        )  # fmt: skip
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    problems: list[str] = []
    if res.received < cfg.messages:
        problems.append(
            f"received {res.received}/{cfg.messages} within {cfg.consume_timeout_s:.0f} s"
        )
    elif res.received > cfg.messages:
        problems.append(f"received {res.received}, more than the {cfg.messages} produced")
    expected = cfg.expected_per_partition()
    if res.per_partition != expected and res.received >= cfg.messages:
        problems.append(f"per-partition counts {res.per_partition}, expected {expected}")
    if res.offset_anomalies:
        problems.append(f"{res.offset_anomalies} records out of offset sequence (gap/duplicate)")
    if res.high_watermarks != expected:
        problems.append(f"high watermarks {res.high_watermarks}, expected {expected}")
    if res.wrong_size:
        problems.append(f"{res.wrong_size} messages not {cfg.message_size} bytes")
    if res.errors:
        problems.append(f"{res.errors} consumer errors, first: {res.first_error}")
    if problems:
        raise WorkloadFailed("; ".join(problems))
    return _throughput("consume", res.received, cfg.message_size, res.elapsed_s)


def _throughput(label: str, messages: int, size: int, elapsed_s: float) -> dict[str, Metric]:
    elapsed_s = max(elapsed_s, 1e-9)
    return {
        f"{label}_msgs_per_s": Metric(label, "msg/s", messages / elapsed_s),
        f"{label}_mb_per_s": Metric(label, "MB/s", messages * size / elapsed_s / 1e6),
    }


def default_workloads(cfg: BenchConfig) -> list[Workload]:
    """The suite, in run order."""
    return [
        Workload("create_topic", partial(create_topic, cfg)),
        Workload("produce", partial(produce_throughput, cfg), requires=("create_topic",)),
        Workload("consume", partial(consume_throughput, cfg), requires=("produce",)),
    ]
