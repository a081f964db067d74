"""Issue 26's measure: N partitions on one broker. Creates them (topics of --per-topic partitions,
several topics per CreateTopics request) and reports the create time, Metadata for all of them
(best of 3), the broker's RSS and open descriptors, a produce to and consume from a random 1% of
the partitions with confluent-kafka, and the time from a clean restart, then from a kill -9, to
the first answered Metadata.

    .venv/bin/python bench/partition_scale.py --partitions 100000 [--nofile 20000] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    _ROOT = Path(__file__).resolve().parent.parent
    sys.path[0:1] = [str(_ROOT), str(_ROOT / "src")]

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.scale_probes import fds, metadata_s, rss_mb, sample_round_trip  # noqa: E402
from offsetd.dev.broker import BrokerProcess  # noqa: E402


def _create(bootstrap: str, partitions: int, per_topic: int, per_request: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"scale{i}" for i in range((partitions + per_topic - 1) // per_topic)]
    started = time.monotonic()
    for i in range(0, len(names), per_request):
        batch = [NewTopic(n, min(per_topic, partitions - int(n[5:]) * per_topic), 1) for n in names[i:i + per_request]]
        for name, future in admin.create_topics(batch, operation_timeout=600, request_timeout=600).items():
            future.result(600)
    return time.monotonic() - started


def _restart_to_metadata(broker: BrokerProcess, expected: int, kill: bool) -> float:
    if kill:
        broker.kill9()
    else:
        broker.stop(timeout=600)
    started = time.monotonic()
    broker.start(timeout=600)
    metadata_s(broker.bootstrap, expected, "scale")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--per-request", type=int, default=5, help="topics per CreateTopics request")
    parser.add_argument("--nofile", type=int, default=None, help="RLIMIT_NOFILE of the broker (default: inherited)")
    parser.add_argument("--data", type=Path, default=None, help="log.dirs parent (default: a temp dir)")
    args = parser.parse_args()
    root = args.data or Path(tempfile.mkdtemp(prefix="partition-scale-"))
    broker = BrokerProcess(root / "data", {"offsets.topic.num.partitions": "50"},
                           open_file_limit=args.nofile)
    broker.log_level = "WARNING"
    broker.start(timeout=120)
    # The box may be shared: the load average says how busy it was around the figures.
    results: dict[str, Any] = {"partitions": args.partitions, "nofile": args.nofile,
                               "load_average_at_start": [round(x, 1) for x in os.getloadavg()]}
    try:
        results["create_s"] = round(_create(broker.bootstrap, args.partitions, args.per_topic, args.per_request), 1)
        results["metadata_ms"] = round(1000 * min(metadata_s(broker.bootstrap, args.partitions, "scale") for _ in range(3)))
        results["rss_mb"] = round(rss_mb(broker.pid))
        results["open_fds"] = fds(broker.pid)
        results["sample_1pct_round_trip_s"] = round(
            sample_round_trip(broker.bootstrap, args.partitions, args.per_topic, 0.01, "scale", "scale"), 1)
        results["open_fds_after_sample"] = fds(broker.pid)
        results["rss_mb_after_sample"] = round(rss_mb(broker.pid))
        results["clean_restart_to_metadata_s"] = round(_restart_to_metadata(broker, args.partitions, False), 1)
        results["kill9_restart_to_metadata_s"] = round(_restart_to_metadata(broker, args.partitions, True), 1)
        results["rss_mb_after_restart"] = round(rss_mb(broker.pid))
        results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    finally:
        if broker.alive():
            broker.stop(timeout=600)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
