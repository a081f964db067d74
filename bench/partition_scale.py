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
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from offsetd.dev.broker import BrokerProcess  # noqa: E402


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _metadata_s(bootstrap: str, expected: int) -> float:
    """Seconds for one Metadata request naming every topic (a fresh client, as a new user's)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    md = admin.list_topics(timeout=120)
    took = time.monotonic() - started
    got = sum(len(t.partitions) for name, t in md.topics.items() if name.startswith("scale"))
    assert got == expected, f"Metadata named {got} partitions, not {expected}"
    return took


def _create(bootstrap: str, partitions: int, per_topic: int, per_request: int) -> float:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"scale{i}" for i in range((partitions + per_topic - 1) // per_topic)]
    started = time.monotonic()
    for i in range(0, len(names), per_request):
        batch = [NewTopic(n, min(per_topic, partitions - int(n[5:]) * per_topic), 1) for n in names[i:i + per_request]]
        for name, future in admin.create_topics(batch, operation_timeout=600, request_timeout=600).items():
            future.result(600)
    return time.monotonic() - started


def _sample_round_trip(bootstrap: str, partitions: int, per_topic: int, share: float) -> float:
    """Produce one record to each of a random `share` of the partitions and read them back."""
    rng = random.Random(26)
    sample = rng.sample(range(partitions), max(1, int(partitions * share)))
    tps = [(f"scale{p // per_topic}", p % per_topic) for p in sample]
    started = time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    failed: list[Any] = []
    for topic, partition in tps:
        producer.produce(topic, f"{topic}/{partition}".encode(), partition=partition,
                         on_delivery=lambda err, _msg: err and failed.append(err))
    producer.flush(120)
    assert not failed, failed[:3]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale", "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, 0) for t, p in tps])
    seen: set[tuple[str, int]] = set()
    deadline = time.monotonic() + 300
    while len(seen) < len(tps) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                seen.add((msg.topic(), msg.partition()))
    consumer.close()
    assert len(seen) == len(tps), f"read back {len(seen)} of {len(tps)} partitions"
    return time.monotonic() - started


def _restart_to_metadata(broker: BrokerProcess, expected: int, kill: bool) -> float:
    if kill:
        broker.kill9()
    else:
        broker.stop(timeout=600)
    started = time.monotonic()
    broker.start(timeout=600)
    _metadata_s(broker.bootstrap, expected)
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
        results["metadata_ms"] = round(1000 * min(_metadata_s(broker.bootstrap, args.partitions) for _ in range(3)))
        results["rss_mb"] = round(_rss_mb(broker.pid))
        results["open_fds"] = _fds(broker.pid)
        results["sample_1pct_round_trip_s"] = round(
            _sample_round_trip(broker.bootstrap, args.partitions, args.per_topic, 0.01), 1)
        results["open_fds_after_sample"] = _fds(broker.pid)
        results["rss_mb_after_sample"] = round(_rss_mb(broker.pid))
        results["clean_restart_to_metadata_s"] = round(_restart_to_metadata(broker, args.partitions, False), 1)
        results["kill9_restart_to_metadata_s"] = round(_restart_to_metadata(broker, args.partitions, True), 1)
        results["rss_mb_after_restart"] = round(_rss_mb(broker.pid))
        results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
    finally:
        if broker.alive():
            broker.stop(timeout=600)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
