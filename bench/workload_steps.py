"""Steps and figures the workloads share: create a topic and wait for its leaders, judge a commit
client's counts and read-back, a nearest-rank percentile, a process's resident set size."""

from __future__ import annotations

import math
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from bench.workload import WorkloadFailed


def create_topic_and_wait(bootstrap: str, topic: str, partitions: int, timeout_s: float) -> None:
    """CreateTopics, then poll Metadata until every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)],
        operation_timeout=timeout_s,
        request_timeout=timeout_s,
    )
    try:
        futures[topic].result(timeout=timeout_s)
    except KafkaException as exc:
        raise WorkloadFailed(f"CreateTopics {topic!r} failed: {exc}") from exc

    deadline = time.monotonic() + timeout_s
    problem = "no metadata"
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            meta = admin.list_topics(topic, timeout=min(1.0, remaining)).topics.get(topic)
        except KafkaException as exc:
            problem = str(exc)
            continue
        if meta is None or meta.error is not None:
            problem = f"topic metadata error: {meta.error if meta else 'topic missing'}"
        elif len(meta.partitions) != partitions:
            problem = f"{len(meta.partitions)} partitions, expected {partitions}"
        elif any(p.leader < 0 or p.error is not None for p in meta.partitions.values()):
            problem = "some partitions have no leader yet"
        else:
            return
    raise WorkloadFailed(f"topic {topic!r} not ready after {timeout_s:.0f} s: {problem}")


def commit_problems(
    errors: int,
    first_error: str | None,
    last_sent: list[int],
    read_back: list[int],
    read_back_error: str | None,
) -> list[str]:
    """What is wrong with a commit client's counts and read-back (empty: nothing)."""
    problems: list[str] = []
    if errors:
        problems.append(f"{errors} commits failed, first: {first_error}")
    if read_back_error:
        problems.append(f"committed() failed: {read_back_error}")
    elif read_back != last_sent:
        problems.append(f"committed() returned {read_back}, last commit sent {last_sent}")
    return problems


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def process_rss_mb(pid: int) -> float | None:
    """Resident set size of process ``pid`` in MB (10^6 bytes), or None off Linux."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None
