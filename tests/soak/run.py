"""`make soak`: a long run of many connections, churning groups, synchronous commits, produce and
consume against one broker and against three brokers on PostgreSQL, sampled each interval; passes
when RSS, open descriptors, commit p99 and request latency stay flat (tests/soak/samples.py says
how flat) and every interval made progress. Writes samples.jsonl, a plot and the verdict.

    .venv/bin/python -m tests.soak.run [--minutes 30] [--modes single,cluster] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Iterator

_HERE = Path(__file__).resolve().parent
for _path in (str(_HERE), str(_HERE.parent)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from load import LoadConfig, Soak, Stats  # noqa: E402
from samples import Sample, Sampler, plot, verdict  # noqa: E402

from offsetd.dev.broker import BrokerProcess  # noqa: E402
from offsetd.dev.postgres import LocalPostgres  # noqa: E402

BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "10"}


@contextmanager
def brokers(mode: str, workdir: Path) -> Iterator[dict[str, BrokerProcess]]:
    """The brokers of `mode` ("single" or "cluster": 3 brokers on a throwaway PostgreSQL), by name."""
    with ExitStack() as stack:
        started: dict[str, BrokerProcess] = {}
        stack.callback(lambda: [b.stop() for b in started.values() if b.alive()])
        if mode == "single":
            started["broker"] = BrokerProcess(workdir / "broker", BROKER_SETTINGS)
        else:
            pg = stack.enter_context(LocalPostgres())
            dsn = pg.create_database("soak")
            for node in (1, 2, 3):
                started[f"broker-{node}"] = BrokerProcess(
                    workdir / f"broker-{node}", {**BROKER_SETTINGS, "node.id": str(node), "storage.engine": dsn})
        for broker in started.values():
            broker.launch()
        for broker in started.values():
            broker.wait_listening(60)
        yield started


def create_topics(bootstrap: str, config: LoadConfig) -> None:
    """The commit topic and the data topic, waited on."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(config.topic, config.partitions, 1),
                                   NewTopic(config.data_topic, 6, 1)], operation_timeout=30)
    for future in futures.values():
        future.result(60)


async def drive(config: LoadConfig, sampler: Sampler, minutes: float, interval_s: float,
                out: Path, log: Callable[[str], None]) -> list[Sample]:
    """Run the load for `minutes`, taking a sample every `interval_s` into `out` (JSON lines)."""
    stats = Stats()
    soak = Soak(config, stats)
    started = time.monotonic()
    samples: list[Sample] = []
    run = asyncio.create_task(soak.run(minutes * 60))
    with out.open("w") as sink:
        while not run.done():
            await asyncio.wait({run}, timeout=interval_s - (time.monotonic() - started) % interval_s)
            if run.done():
                break
            sample = sampler.sample((time.monotonic() - started) / 60, interval_s, stats.take())
            samples.append(sample)
            sink.write(json.dumps(asdict(sample)) + "\n")
            sink.flush()
            log(f"  {sample.minute:6.2f} min  rss {sample.rss_mb}  fds {sample.fds}  commit p99 "
                f"{sample.commit_p99_ms} ms  probe p99 {sample.probe_p99_ms} ms  "
                f"commits {sample.counts.get('commit', 0)}  joins {sample.counts.get('join', 0)}")
    await run
    return samples


def soak(mode: str, minutes: float, interval_s: float, config: LoadConfig, out: Path,
         log: Callable[[str], None] = print, latency: bool = True) -> tuple[list[Sample], list[str]]:
    """One soak of `mode`: its samples and problems (none: passed). Writes `<mode>.jsonl`, `<mode>.png`."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"soak-{mode}-") as tmp, brokers(mode, Path(tmp)) as started:
        bootstrap = [b.bootstrap for b in started.values()]
        config = replace(config, bootstrap=bootstrap)
        create_topics(",".join(bootstrap), config)
        log(f"soak {mode}: {len(bootstrap)} broker(s), {config.connections} connections, {config.groups} groups "
            f"x {config.members_per_group} members, {config.produce_per_s} records/s, {minutes} min")
        sampler = Sampler({name: b.pid for name, b in started.items()})
        samples = asyncio.run(drive(config, sampler, minutes, interval_s, out / f"{mode}.jsonl", log))
        dead = [name for name, b in started.items() if not b.alive()]
    problems = [f"{name} exited during the run" for name in dead] + verdict(samples, latency=latency)
    if samples:
        plot(samples, f"offsetd soak, {mode}: {config.connections} connections, {config.groups} groups, "
                      f"{minutes:g} min", out / f"{mode}.png")
    return samples, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak.run", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between samples")
    parser.add_argument("--modes", default="single,cluster")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--produce-per-s", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("test-artifacts/soak"))
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a thousand sockets in this process
    config = LoadConfig(bootstrap=[], connections=args.connections, groups=args.groups,
                        produce_per_s=args.produce_per_s, seed=args.seed)
    failed = False
    for mode in args.modes.split(","):
        _, problems = soak(mode, args.minutes, args.interval, config, args.out)
        print(f"soak {mode}: {'PASSED' if not problems else 'FAILED'} (samples, plot: {args.out}/{mode}.*)")
        for problem in problems:
            print(f"  - {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
