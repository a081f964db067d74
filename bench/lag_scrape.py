"""Lag scrape cost (issue 15): one /metrics look at 2,000 groups x 10 partitions, as the broker
takes it - committed offsets from real coordinator shards, bounds and record timestamps from real
partition logs on disk, then the exposition text - timed in-process (wall and CPU per scrape).

    .venv/bin/python bench/lag_scrape.py [--groups 2000] [--partitions 10] [--scrapes 20]

Nothing here talks to another process: that is the point (kafka_exporter and Burrow need their own
process and a round trip per group per scrape). Every group lags by a few records so each
partition also costs a time-lag lookup (the record's timestamp, cached after the first scrape).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from offsetd.broker.log_ends import LogEnds  # noqa: E402
from offsetd.broker.topics import TopicRegistry  # noqa: E402
from offsetd.config import BrokerConfig  # noqa: E402
from offsetd.coordinator.config import GroupCoordinatorConfig  # noqa: E402
from offsetd.coordinator.shard import GroupCoordinatorShard  # noqa: E402
from offsetd.metrics.lag_exporter import render_lag  # noqa: E402
from offsetd.metrics.lag_view import BrokerLagSource, collector_paused  # noqa: E402
from offsetd.metrics.snapshot import Slicer  # noqa: E402
from offsetd.records.batch import build_batch  # noqa: E402
from offsetd.records.offset_commit_value import OffsetCommitValue  # noqa: E402
from offsetd.records.offsets import OffsetCommitKey, partition_for  # noqa: E402

SHARDS = 50
RECORDS = 100  # per data partition; every group committed offset 90 (lag 10)


def build(directory: Path, groups: int, partitions: int) -> BrokerLagSource:
    """Data topics with records on disk, and shards holding every group's commits."""
    now = int(time.time() * 1000)
    topics = TopicRegistry(BrokerConfig({"log.dirs": str(directory)}), now)
    n_topics = max(1, groups // 10)
    for t in range(n_topics):
        topic = topics.create(f"topic-{t}", partitions, {}, now)
        for plog in topic.partitions:
            plog.append(build_batch([(None, b"x" * 100, now - 60_000 + i, []) for i in range(RECORDS)]), now)
    shards = [GroupCoordinatorShard(p, GroupCoordinatorConfig()) for p in range(SHARDS)]
    for g in range(groups):
        group = f"group-{g}"
        shard = shards[partition_for(group, SHARDS)]
        for p in range(partitions):
            shard.replay(OffsetCommitKey(group, f"topic-{g % n_topics}", p),
                         OffsetCommitValue(RECORDS - 10, commit_timestamp=now))
    runtimes = [SimpleNamespace(shard=s, state=SimpleNamespace(value="active")) for s in shards]
    return BrokerLagSource(runtimes, LogEnds(topics), lambda: int(time.time() * 1000))


async def scrape(source: BrokerLagSource) -> tuple[float, float, int, int]:
    """One scrape as /metrics builds it: (wall s, CPU s, bytes, samples with lag)."""
    wall, cpu = time.perf_counter(), time.process_time()
    snapshot = await source.snapshot()
    out: list[bytes] = []
    with collector_paused():  # as the metrics listener renders it
        for _ in render_lag(snapshot, out, Slicer()):
            await asyncio.sleep(0)
    lagging = sum(1 for g in snapshot.groups for p in g.partitions if p.lag)
    return time.perf_counter() - wall, time.process_time() - cpu, sum(map(len, out)), lagging


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = build(Path(tmp), args.groups, args.partitions)
        first = asyncio.run(scrape(source))
        runs = [asyncio.run(scrape(source)) for _ in range(args.scrapes)]
    walls = sorted(r[0] * 1000 for r in runs)
    cpus = sorted(r[1] * 1000 for r in runs)
    print(f"lag scrape: {args.groups} groups x {args.partitions} partitions, {runs[0][3]} lagging, "
          f"{runs[0][2] / 1e6:.1f} MB of text")
    print(f"  first scrape (cold timestamp cache): {first[0] * 1000:.0f} ms")
    print(f"  scrape wall ms: min {walls[0]:.0f}, median {statistics.median(walls):.0f}, max {walls[-1]:.0f}")
    print(f"  scrape CPU ms:  min {cpus[0]:.0f}, median {statistics.median(cpus):.0f}, max {cpus[-1]:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
