"""Requests that need no fsync, timed while 100 groups commit synchronously (issue 24).

Starts one offsetd, runs bench/cluster.py's ``commit-100-groups`` load (4 processes x 25 threads,
each group one synchronous commit of 8 offsets in flight, 6 s) and, beside it, one client that
times Metadata (``list_topics``) and Produce with acks=1 round trips one after another for 5 s of
that window. Prints offsets/s and the side requests' p50/p99: what a commit storm's fsyncs cost the
requests that do not wait for one.

    .venv/bin/python bench/side_requests.py [--offsetd-config FILE]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from bench import cluster_clients  # noqa: E402
from bench.brokers import DEFAULT_OFFSETD_CONFIG, make_launcher  # noqa: E402
from bench.procs import run_in_children, start_barrier  # noqa: E402
from bench.workload_steps import create_topic_and_wait, percentile  # noqa: E402

GROUPS, PROCESSES, PARTITIONS, COMMIT_S, SIDE_S, WARM_UP_S = 100, 4, 8, 6.0, 5.0, 4.0


def side_client(bootstrap: str, metadata: list[float], produce: list[float]) -> None:
    """Time Metadata and Produce (acks=1, one 100-byte record, flushed) round trips, one at a time."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    producer.produce("side", b"warm")
    producer.flush(10)
    time.sleep(WARM_UP_S)  # the committers find their coordinators first
    end = time.monotonic() + SIDE_S
    while time.monotonic() < end:
        started = time.perf_counter()
        admin.list_topics(timeout=10)
        metadata.append(time.perf_counter() - started)
        started = time.perf_counter()
        producer.produce("side", b"x" * 100)
        producer.flush(10)
        produce.append(time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    """One run: the commit load and the side client at once; print the figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--offsetd-config", type=Path, default=DEFAULT_OFFSETD_CONFIG)
    args = p.parse_args(argv)
    launcher = make_launcher("offsetd", args.offsetd_config)
    bootstrap = launcher.start()
    try:
        create_topic_and_wait(bootstrap, "bench", PARTITIONS, 30.0)
        create_topic_and_wait(bootstrap, "side", 1, 30.0)
        groups = [f"side-{uuid.uuid4().hex[:8]}-{i}" for i in range(GROUPS)]
        barrier = start_barrier(PROCESSES)
        metadata: list[float] = []
        produce: list[float] = []
        side = threading.Thread(target=side_client, args=(bootstrap, metadata, produce), daemon=True)
        side.start()
        results = run_in_children(cluster_clients.group_committers,
                                  [(bootstrap, "bench", PARTITIONS, groups[i::PROCESSES], COMMIT_S, 60.0, barrier)
                                   for i in range(PROCESSES)], timeout_s=120.0)
        side.join(60.0)
        errors = sum(r.errors for r in results)
        offsets_per_s = sum(r.acked for r in results) * PARTITIONS / COMMIT_S
        metadata.sort()
        produce.sort()
        print(f"{offsets_per_s:,.0f} offsets/s ({errors} commit errors); beside them, Metadata p50/p99 "
              f"{percentile(metadata, 50) * 1e3:.2f}/{percentile(metadata, 99) * 1e3:.2f} ms, Produce acks=1 "
              f"p50/p99 {percentile(produce, 50) * 1e3:.2f}/{percentile(produce, 99) * 1e3:.2f} ms "
              f"({len(metadata)} of each)", flush=True)
    finally:
        launcher.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
