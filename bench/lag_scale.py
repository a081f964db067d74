"""Lag scrape at a million groups (issue 26): a broker loaded with offsets-load's data set
(GROUPSxTOPICSxPARTITIONS committed offsets, default 1,000,000 x 1 x 10, built once and cached as
`bench/run.py --workloads offsets-load` builds it), its metrics listener on and
`metrics.group.filter` choosing some groups, records produced to the data set's topics so those
groups lag. It times /metrics scrapes and one ListGroups while a probe (bench/loop_probe.py) sends
FindCoordinator every 5 ms: the slowest probe answer while a scrape runs is how long the event
loop stalled.

    .venv/bin/python bench/lag_scale.py [--load-shape 1000000x1x10] [--filter REGEX] [--scrapes 5]

An empty --filter scrapes every group (the whole look and page in memory: at a million groups x 10
partitions that is gigabytes, which is what the filter is for).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from confluent_kafka import Producer  # noqa: E402
from kio.index import load_request_schema  # noqa: E402

from bench import offsets_log  # noqa: E402
from bench.brokers import OffsetdBroker, free_port  # noqa: E402
from bench.loop_probe import LoopProbe, wait_for_load  # noqa: E402
from bench.raw_client import RawConnection  # noqa: E402
from bench.workload import BenchConfig  # noqa: E402
from bench.workload_steps import create_topic_and_wait, process_rss_mb  # noqa: E402


class ScrapedBroker(OffsetdBroker):
    """offsetd with its metrics listener on a free port and a group filter."""

    def __init__(self, group_filter: str) -> None:
        super().__init__()
        self.metrics_port = free_port(self.host)
        self.group_filter = group_filter

    def command(self, port: int, data_dir: Path) -> list[str]:
        return [*super().command(port, data_dir),
                "--override", f"metrics.listener=http://{self.host}:{self.metrics_port}",
                "--override", f"metrics.group.filter={self.group_filter}"]

    def get(self, path: str, timeout_s: float = 600.0) -> bytes:
        with urllib.request.urlopen(f"http://{self.host}:{self.metrics_port}{path}", timeout=timeout_s) as answer:
            return answer.read()


def produce(bootstrap: str, spec: offsets_log.OffsetsLogSpec, records: int) -> None:
    """The data set's topics with `records` records in each partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20})
    for t in range(spec.topics):
        topic = spec.topic(t)
        create_topic_and_wait(bootstrap, topic, spec.partitions, 60)
        for p in range(spec.partitions):
            for _ in range(records):
                while True:
                    try:
                        producer.produce(topic, b"x" * 100, partition=p)
                        break
                    except BufferError:
                        producer.poll(0.1)
    if producer.flush(120):
        raise RuntimeError("records left unsent")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load-shape", default="1000000x1x10", metavar="GROUPSxTOPICSxPARTITIONS")
    parser.add_argument("--filter", default=r"bench-load-group-00[0-9]{3}",
                        help="metrics.group.filter (default: 1,000 groups); empty: every group")
    parser.add_argument("--records", type=int, default=10_000, help="records per data partition")
    parser.add_argument("--scrapes", type=int, default=5)
    args = parser.parse_args()
    groups, topics, partitions = (int(n) for n in args.load_shape.lower().split("x"))
    cfg = BenchConfig(load_groups=groups, load_topics=topics, load_partitions=partitions)
    spec = offsets_log.OffsetsLogSpec(groups=groups, topics=topics, partitions=partitions,
                                      records_per_batch=cfg.load_records_per_batch)
    data = offsets_log.ensure(spec, Path(cfg.cache_dir), os.cpu_count() or 1, cfg.load_build_timeout_s)
    broker = ScrapedBroker(args.filter)
    broker.seed = data.copy_into
    broker.startup_timeout_s = cfg.load_timeout_s
    broker.start()
    try:
        print(f"{groups:,} groups x {topics * partitions} partitions; metrics.group.filter={args.filter!r}", flush=True)
        print(f"  load logged after {wait_for_load(broker, cfg.load_timeout_s):.1f} s", flush=True)
        produce(broker.bootstrap, spec, args.records)
        probe = LoopProbe(broker.bootstrap)
        probe.start()
        time.sleep(2)
        idle = probe.worst(0, time.monotonic())
        print(f"  probe (FindCoordinator) idle: max {idle[0]:.1f} ms, median {idle[1]:.1f} ms")
        walls = []
        for i in range(args.scrapes):
            start = time.monotonic()
            page = broker.get("/metrics")
            end = time.monotonic()
            walls.append(end - start)
            stall, median = probe.worst(start, end)
            lag_lines = page.count(b"\nkafka_consumergroup_lag{")
            print(f"  /metrics #{i + 1}: {(end - start) * 1000:,.0f} ms, {len(page) / 1e6:.1f} MB, {lag_lines:,} "
                  f"lag series; probe during it: max {stall:.1f} ms, median {median:.1f} ms", flush=True)
            time.sleep(1)
        start = time.monotonic()
        conn = RawConnection(broker.bootstrap, timeout=600)
        answer = conn.call(16, 4, load_request_schema(16, 4)(states_filter=()))
        end = time.monotonic()
        conn.close()
        stall, median = probe.worst(start, end)
        print(f"  ListGroups: {len(answer.groups):,} groups in {(end - start) * 1000:,.0f} ms; "
              f"probe during it: max {stall:.1f} ms, median {median:.1f} ms")
        probe.stop()
        print(f"  scrape wall ms after the first: median {statistics.median(walls[1:] or walls) * 1000:,.0f}; "
              f"broker RSS {process_rss_mb(broker.pid) or 0:,.0f} MB")
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
