"""ListGroups at a million groups (issue 26): a broker loaded with offsets-load's way of making
groups fast (GROUPS x 1 topic x 1 partition of committed offsets written straight into
`__consumer_offsets`, built once and cached), then ListGroups of every group, raw (v4, timed to
the answer's last byte) and through confluent-kafka's AdminClient.list_consumer_groups, each while
a probe process sends FindCoordinator every 5 ms (bench/loop_probe.py): the slowest probe answer
during a ListGroups is how long the broker kept every other client waiting.

    .venv/bin/python bench/list_groups_scale.py [--groups 1000000] [--runs 3]

`--groups 100000` is the quick run. librdkafka 2.16 cannot read an answer of a million groups
("ApiArrayCnt out of range", then a crash), so the AdminClient runs in a child process and a
crash is reported as such.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kio.index import load_request_schema  # noqa: E402

from bench import offsets_log  # noqa: E402
from bench.brokers import OffsetdBroker  # noqa: E402
from bench.loop_probe import LoopProbe, wait_for_load  # noqa: E402
from bench.raw_client import RawConnection, decode_response  # noqa: E402
from bench.workload import BenchConfig  # noqa: E402
from bench.workload_steps import process_rss_mb  # noqa: E402


def admin_client_list(bootstrap: str) -> tuple[float, float, int, int]:
    """Child process: (started, seconds, groups, errors) of one AdminClient.list_consumer_groups,
    timed after a Metadata request has connected the client (`time.monotonic` is one clock for
    every process)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=60)
    started = time.monotonic()
    result = admin.list_consumer_groups(request_timeout=600).result()
    return started, time.monotonic() - started, len(result.valid), len(result.errors)


def raw_list(bootstrap: str, groups: int) -> tuple[float, int]:
    """(seconds to the answer's last byte, its size) of a raw ListGroups v4 of every state; the
    answer must name `groups` groups (decoded after the timing)."""
    conn = RawConnection(bootstrap, timeout=600)
    try:
        started = time.monotonic()
        frame = conn.call_raw(16, 4, load_request_schema(16, 4)(states_filter=()))
        elapsed = time.monotonic() - started
    finally:
        conn.close()
    answer = decode_response(16, 4, frame)
    if answer.error_code != 0 or len(answer.groups) != groups:
        raise RuntimeError(f"ListGroups: error {answer.error_code}, {len(answer.groups):,} groups of {groups:,}")
    return elapsed, len(frame)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cfg = BenchConfig()
    spec = offsets_log.OffsetsLogSpec(groups=args.groups, topics=1, partitions=1,
                                      records_per_batch=cfg.load_records_per_batch)
    data = offsets_log.ensure(spec, Path(cfg.cache_dir), os.cpu_count() or 1, cfg.load_build_timeout_s)
    broker = OffsetdBroker()
    broker.seed = data.copy_into
    broker.startup_timeout_s = cfg.load_timeout_s
    broker.start()
    probe = LoopProbe(broker.bootstrap)
    spawn = multiprocessing.get_context("spawn")
    try:
        print(f"{args.groups:,} groups; load logged after {wait_for_load(broker, cfg.load_timeout_s):.1f} s", flush=True)
        probe.start()
        time.sleep(2)
        idle = probe.worst(0, time.monotonic())
        print(f"  probe (FindCoordinator) idle: max {idle[0]:.1f} ms, median {idle[1]:.1f} ms", flush=True)
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            seconds, size = raw_list(broker.bootstrap, args.groups)
            stall, median = probe.worst(start, start + seconds)
            print(f"  #{run} raw ListGroups v4: {seconds * 1000:,.0f} ms to the last byte ({size / 1e6:.1f} MB); "
                  f"probe during it: max {stall:.1f} ms, median {median:.1f} ms", flush=True)
            time.sleep(1)
            with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
                start = time.monotonic()
                try:
                    start, seconds, listed, errors = pool.submit(admin_client_list, broker.bootstrap).result()
                    end = start + seconds
                    outcome = f"{seconds * 1000:,.0f} ms, {listed:,} groups, {errors} errors"
                except concurrent.futures.process.BrokenProcessPool:  # the window: from the client's start
                    end = time.monotonic()
                    outcome = f"the client process crashed after {end - start:.1f} s (its start included)"
            stall, median = probe.worst(start, end)
            print(f"  #{run} AdminClient.list_consumer_groups: {outcome}; probe during it: max {stall:.1f} ms, "
                  f"median {median:.1f} ms", flush=True)
            time.sleep(1)
        print(f"  broker RSS {process_rss_mb(broker.pid) or 0:,.0f} MB")
    finally:
        probe.stop()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
