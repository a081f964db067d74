"""Lag scrape cost (issues 15, 24, 26): one /metrics look at 2,000 groups x 10 partitions, as the
broker takes it - committed offsets from real coordinator shards, bounds and record timestamps from
real partition logs on disk, then the exposition text - timed in-process (wall and CPU per scrape),
with the event loop's longest stall while a scrape runs (the longest gap between two turns of a
task that only yields; the scrape pauses between ~5 ms slices).

    .venv/bin/python bench/lag_scrape.py [--groups 2000] [--partitions 10] [--scrapes 20]
        [--changed 0] [--filter REGEX] [--page]

--changed N commits to N groups between scrapes (the look keeps the rows of the others);
--filter is metrics.group.filter; --page times the whole /metrics page as the listener builds it
(the coordinator's families too), not only the lag look and its text.

Nothing here talks to another process: that is the point (kafka_exporter and Burrow need their own
process and a round trip per group per scrape). Every group lags by a few records so each
partition also costs a time-lag lookup (the record's timestamp, cached after the first scrape).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
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
from offsetd.metrics.http import MetricsHttpServer  # noqa: E402
from offsetd.metrics.lag_exporter import render_lag  # noqa: E402
from offsetd.metrics.lag_view import BrokerLagSource, collector_paused  # noqa: E402
from offsetd.metrics.snapshot import Slicer  # noqa: E402
from offsetd.records.batch import build_batch  # noqa: E402
from offsetd.records.offset_commit_value import OffsetCommitValue  # noqa: E402
from offsetd.records.offsets import OffsetCommitKey, partition_for  # noqa: E402

SHARDS = 50
RECORDS = 100  # per data partition; every group committed offset 90 (lag 10)


def build(directory: Path, groups: int, partitions: int, group_filter: str = "") -> BrokerLagSource:
    """Data topics with records on disk (one per 10 groups, at most 200), and shards holding every
    group's commits."""
    now = int(time.time() * 1000)
    topics = TopicRegistry(BrokerConfig({"log.dirs": str(directory)}), now)
    n_topics = max(1, min(groups // 10, 200))
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
    log_dir = SimpleNamespace(path=directory, offline=False, failed_writes=0)
    runtimes = [SimpleNamespace(shard=s, state=SimpleNamespace(value="active"), load_time_ms=0, records_loaded=0,
                                plog=SimpleNamespace(log_dir=log_dir)) for s in shards]
    return BrokerLagSource(runtimes, LogEnds(topics), lambda: int(time.time() * 1000),
                           group_filter=re.compile(group_filter) if group_filter else None)


def commit_some(source: BrokerLagSource, groups: int, changed: int, partitions: int) -> None:
    """A fresh commit (one record further) on partition 0 of `changed` groups spread over all."""
    now = int(time.time() * 1000)
    for g in range(0, groups, max(1, groups // changed)) if changed else ():
        group = f"group-{g}"
        shard = source.runtimes[partition_for(group, SHARDS)].shard
        shard.replay(OffsetCommitKey(group, f"topic-{g % max(1, min(groups // 10, 200))}", 0),
                     OffsetCommitValue(RECORDS - 9 - (now % 5), commit_timestamp=now))


async def scrape(source: BrokerLagSource, page: bool) -> tuple[float, float, int, int, float, float]:
    """One scrape as /metrics builds it: (wall s, CPU s, bytes, samples with lag, the event loop's
    longest stall in s of wall time and of this thread's CPU time: on a busy box the wall time
    includes waiting for a core, the CPU time is the work done without a pause)."""
    stalls = [0.0, 0.0]
    done = False

    async def turns() -> None:  # what a Kafka client's request sees: the gaps between loop turns
        last, last_cpu = time.perf_counter(), time.thread_time()
        while not done:
            await asyncio.sleep(0)
            now, now_cpu = time.perf_counter(), time.thread_time()
            stalls[0], stalls[1] = max(stalls[0], now - last), max(stalls[1], now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    watcher = asyncio.ensure_future(turns())
    await asyncio.sleep(0)
    wall, cpu = time.perf_counter(), time.process_time()
    if page:
        text = await MetricsHttpServer(source.runtimes, lag=source, group_filter=source.group_filter).metrics()
        size, lagging = len(text), text.count(b"\nkafka_consumergroup_lag{")
    else:
        snapshot = await source.snapshot()
        out: list[bytes] = []
        with collector_paused():  # as the metrics listener renders it
            for _ in render_lag(snapshot, out, Slicer()):
                await asyncio.sleep(0)
        size, lagging = sum(map(len, out)), sum(1 for g in snapshot.groups for p in g.partitions if p.lag)
    elapsed, used = time.perf_counter() - wall, time.process_time() - cpu
    done = True
    await watcher
    return elapsed, used, size, lagging, stalls[0], stalls[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--scrapes", type=int, default=20)
    parser.add_argument("--changed", type=int, default=0, help="groups committing between two scrapes")
    parser.add_argument("--filter", default="", help="metrics.group.filter (empty: every group)")
    parser.add_argument("--page", action="store_true", help="the whole /metrics page, not only the lag part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        source = build(Path(tmp), args.groups, args.partitions, args.filter)
        gc.freeze()  # as the broker does after its start-up load: the collector leaves that state alone
        print(f"built in {time.perf_counter() - started:.0f} s", flush=True)
        first = asyncio.run(scrape(source, args.page))
        runs = []
        for _ in range(args.scrapes):
            commit_some(source, args.groups, args.changed, args.partitions)
            runs.append(asyncio.run(scrape(source, args.page)))
    walls = sorted(r[0] * 1000 for r in runs)
    cpus = sorted(r[1] * 1000 for r in runs)
    stalls = sorted(r[4] * 1000 for r in runs)
    stalls_cpu = sorted(r[5] * 1000 for r in runs)
    print(f"lag scrape{' (whole /metrics page)' if args.page else ''}: {args.groups} groups x {args.partitions} "
          f"partitions{f', filter {args.filter!r}' if args.filter else ''}, {args.changed} changed between scrapes, "
          f"{runs[0][3]} lagging, {runs[0][2] / 1e6:.1f} MB of text")
    print(f"  first scrape (cold timestamp cache): {first[0] * 1000:.0f} ms, longest loop stall {first[4] * 1000:.0f} ms "
          f"(CPU {first[5] * 1000:.0f} ms)")
    print(f"  scrape wall ms: min {walls[0]:.0f}, median {statistics.median(walls):.0f}, max {walls[-1]:.0f}")
    print(f"  scrape CPU ms:  min {cpus[0]:.0f}, median {statistics.median(cpus):.0f}, max {cpus[-1]:.0f}")
    print(f"  longest event-loop stall during a scrape, ms: min {stalls[0]:.1f}, median "
          f"{statistics.median(stalls):.1f}, max {stalls[-1]:.1f}; in CPU time: min {stalls_cpu[0]:.1f}, "
          f"median {statistics.median(stalls_cpu):.1f}, max {stalls_cpu[-1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
