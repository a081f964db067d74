"""Issue 26's "the copy a new owner loads kept to the tail": the takeover of partitions holding
data. A 2-broker cluster (bench/cluster_launcher.py: PostgreSQL + offsetd brokers); a topic of
--partitions partitions with --mb MB each (10 kB records, produced by confluent-kafka) and the
topic's local.retention.bytes set to --local-bytes (-1: the new owner copies everything); then
kill -9 the broker leading most of them and time until the survivor leads every one of its
partitions (its log line after each copy: the copy's own time and when it ended after the kill),
then a consumer reading the first 10 MB of one of them from offset 0 (below the copy when it kept
the tail: read from PostgreSQL).

    .venv/bin/python bench/cluster_tail_takeover.py --partitions 2 --mb 300 --local-bytes 67108864
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root and src importable
    _ROOT = Path(__file__).resolve().parent.parent
    sys.path[0:1] = [str(_ROOT), str(_ROOT / "src")]

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.cluster_partition_scale import ScaleLauncher  # noqa: E402

TOPIC = "takeover"
RECORD = 10_000
_LOADED = re.compile(r"^\[(\S+ \S+)\] INFO \S+: takeover-(\d+): copied offsets (\d+)-(\d+) from PostgreSQL in ([\d.]+) s",
                     re.MULTILINE)
_TAIL_LINE = re.compile(r"copying the tail \[(\d+), (\d+)\) only; \[(\d+), (\d+)\) stays in PostgreSQL \((\d+) bytes")


def _produce(bootstrap: str, partitions: int, mb: int) -> float:
    """`mb` MB to each partition; the seconds it took."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20, "batch.size": 1_000_000,
                         "enable.idempotence": True, "queue.buffering.max.kbytes": 262_144})
    value = os.urandom(RECORD // 2).hex().encode()  # incompressible, were a codec on
    started = time.monotonic()
    for i in range(mb * 1_000_000 // RECORD):
        for p in range(partitions):
            while True:
                try:
                    producer.produce(TOPIC, value, partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(300) == 0
    return time.monotonic() - started


def _leaders(bootstrap: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(TOPIC, timeout=30)
    return {p: meta.leader for p, meta in md.topics[TOPIC].partitions.items()}


def _first_mb(bootstrap: str, partition: int, mb: int) -> float:
    """Seconds for a consumer to read `mb` MB of `partition` from offset 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-tail", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800})
    consumer.assign([TopicPartition(TOPIC, partition, 0)])
    started, got = time.monotonic(), 0
    try:
        while got < mb * 1_000_000 and time.monotonic() - started < 120:
            message = consumer.poll(1.0)
            if message is not None and not message.error():
                got += len(message.value())
    finally:
        consumer.close()
    return time.monotonic() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    launcher = ScaleLauncher(brokers=2, ttl_ms=args.ttl_ms, heartbeat_ms=500)
    results: dict[str, Any] = {"partitions": args.partitions, "mb_each": args.mb, "local_retention_bytes": args.local_bytes,
                               "load_average_at_start": [round(x, 1) for x in os.getloadavg()]}
    try:
        launcher.start()
        admin = AdminClient({"bootstrap.servers": launcher.bootstrap})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 1, config={
            "local.retention.bytes": str(args.local_bytes)})])[TOPIC].result(30)
        results["produce_s"] = round(_produce(launcher.bootstrap, args.partitions, args.mb), 1)
        leaders = _leaders(launcher.bootstrap)
        victim = max(set(leaders.values()), key=lambda n: sum(v == n for v in leaders.values()))
        moved = [p for p, n in leaders.items() if n == victim]
        survivor = next(n for n in launcher.pids() if n != victim)
        killed = time.time()
        os.kill(launcher.brokers[victim].pid, signal.SIGKILL)
        log_path = launcher.brokers[survivor].log_path

        def copies() -> list[dict[str, Any]]:
            return [{"partition": int(m[2]), "offsets": f"{m[3]}-{m[4]}", "copy_s": float(m[5]),
                     "led_after_kill_s": round(datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp() - killed, 2)}
                    for m in _LOADED.finditer(log_path.read_text()) if int(m[2]) in moved]
        while len(copies()) < len(moved) and time.time() - killed < args.timeout:
            time.sleep(0.2)
        done = copies()
        results.update(killed=victim, partitions_moved=len(moved), copies=done, lease_s=args.ttl_ms / 1000,
                       all_led_s=max(c["led_after_kill_s"] for c in done) if len(done) == len(moved) else None)
        results["tails"] = [dict(zip(("copy_from", "copy_to", "pg_from", "pg_to", "pg_bytes"), map(int, m.groups())))
                            for m in _TAIL_LINE.finditer(launcher.brokers[survivor].log_path.read_text())]
        results["read_first_10_mb_s"] = round(_first_mb(launcher.brokers[survivor].bootstrap, moved[0], 10), 2)
    finally:
        results["load_average_at_end"] = [round(x, 1) for x in os.getloadavg()]
        launcher.stop()
        results["broker_errors"] = launcher.errors[:5]
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--mb", type=int, default=300, help="MB produced to each partition")
    parser.add_argument("--local-bytes", type=int, default=64 * 1024 * 1024,
                        help="the topic's local.retention.bytes (-1: copy everything)")
    parser.add_argument("--ttl-ms", type=int, default=3000, help="broker.session.timeout.ms")
    parser.add_argument("--timeout", type=float, default=300.0)
    print(json.dumps(run(parser.parse_args()), indent=1))


if __name__ == "__main__":
    main()
