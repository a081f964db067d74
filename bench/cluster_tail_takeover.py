"""Issue 26's "the copy a new owner loads kept to the tail": the takeover of partitions holding
data. A 2-broker cluster (bench/cluster_launcher.py: PostgreSQL + offsetd brokers); a topic of
--partitions partitions with --mb MB each (10 kB records, produced by confluent-kafka) and the
topic's local.retention.bytes set to --local-bytes (-1: the new owner copies everything); then
kill -9 the broker leading most of them and time until every one of its partitions answers
ListOffsets on the survivor (it answers only once its copy is loaded), then a consumer reading
the first 10 MB of one of them from offset 0 (below the copy when it kept the tail).

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
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root and src importable
    _ROOT = Path(__file__).resolve().parent.parent
    sys.path[0:1] = [str(_ROOT), str(_ROOT / "src")]

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.cluster_partition_scale import ScaleLauncher  # noqa: E402

TOPIC = "takeover"
RECORD = 10_000
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


def _answers(consumer: Consumer, partition: int) -> bool:
    try:
        consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=1, cached=False)
        return True
    except KafkaException:
        return False


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
        consumer = Consumer({"bootstrap.servers": launcher.brokers[survivor].bootstrap, "group.id": "bench-probe"})
        killed = time.monotonic()
        os.kill(launcher.brokers[victim].pid, signal.SIGKILL)
        served: dict[int, float] = {}
        while len(served) < len(moved) and time.monotonic() - killed < args.timeout:
            for p in moved:
                if p not in served and _answers(consumer, p):
                    served[p] = round(time.monotonic() - killed, 2)
            time.sleep(0.05)
        consumer.close()
        results.update(killed=victim, partitions_moved=len(moved), served_s=served,
                       all_served_s=max(served.values()) if len(served) == len(moved) else None,
                       lease_s=args.ttl_ms / 1000)
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
