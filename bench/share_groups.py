"""The KIP-932 share-group workloads (issue 23): records/s that share consumers deliver and accept
when each record costs the application ``work_ms`` (a ``time.sleep``: the consumer's work, not
synchronisation), the delivery latency, and what the share coordinator writes. Tansu has no share
groups, so every workload is offsetd only. ``bench/run.py --only offsetd --workloads share``.

* ``share-scaling``: one partition, pre-filled, read by 1, 4 and 16 ShareConsumers (one process
  each, implicit acknowledgement): records/s from the first delivery to the last (the issue's
  target: 16 consumers >= 8 x one consumer), and the bytes appended to ``__share_group_state`` per
  1,000 records accepted (the partition logs' record batches, before and after).
* ``share-vs-classic``: eight partitions, eight ShareConsumers against a classic group
  (``group.protocol=classic``) of eight Consumers doing the same work per record.
* ``share-latency``: sixteen ShareConsumers on one partition while a producer writes
  ``latency_rate_per_s`` records/s: p50/p99 from each record's CreateTime to its delivery (the
  poll that returned it).

Records are produced in log batches of ``producer_batch`` records and consumers take
``max_poll_records`` per poll: a share-partition hands out whole log batches and at most
``group.share.partition.max.record.locks`` (2,000) records at once, so with big batches a few
consumers would hold the whole window while the rest wait.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import struct
import time
import uuid
from dataclasses import dataclass
from functools import partial
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from bench.procs import ChildError, run_in_children, start_barrier
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed
from bench.workload_steps import create_topic_and_wait, percentile

GROUP = "share"
NOT_APPLICABLE = "offsetd only: Tansu does not serve share groups (KIP-932)"
SHARE_STATE_TOPIC = "__share_group_state"


@dataclass(frozen=True)
class ShareConfig:
    """Parameters of the share-group workloads (sized for a run of a minute or two on 2 cores)."""

    work_ms: float = 2.0
    value_size: int = 100
    producer_batch: int = 100
    max_poll_records: int = 100
    #: Records per run, by consumer count: ~5-10 s of work at the ideal rate (500/s per consumer).
    records: dict[int, int] = dataclasses.field(default_factory=lambda: {1: 3000, 4: 8000, 16: 24000})
    scaling_consumers: tuple[int, ...] = (1, 4, 16)
    classic_partitions: int = 8
    classic_records: int = 16_000
    latency_consumers: int = 16
    latency_rate_per_s: float = 2000.0
    latency_duration_s: float = 8.0
    setup_timeout_s: float = 30.0
    run_timeout_s: float = 180.0


# -- children -------------------------------------------------------------------------------------

def party(role: str, bootstrap: str, topic: str, group: str, barrier: Barrier, total: Synchronized, expected: int,
          scfg: ShareConfig) -> dict[str, Any]:
    """One child: a ShareConsumer (``share``), a classic Consumer (``classic``) or a paced producer
    of ``expected`` records (``producer``). A consumer sleeps ``work_ms`` per record, adds what it
    read to the shared ``total`` and stops when that reaches ``expected``; it reports its count,
    its first and last delivery (time.time()) and each record's CreateTime-to-delivery ms."""
    if role == "producer":
        return _paced_producer(bootstrap, topic, barrier, scfg, expected)
    common = {"bootstrap.servers": bootstrap, "group.id": group}
    if role == "share":
        consumer: Any = ShareConsumer({**common, "max.poll.records": scfg.max_poll_records})
    else:
        consumer = Consumer({**common, "group.protocol": "classic", "auto.offset.reset": "earliest",
                             "enable.auto.commit": True})
    consumer.subscribe([topic])
    barrier.wait(scfg.setup_timeout_s)
    count, first, last, latencies, seen = 0, 0.0, 0.0, [], []
    deadline = time.monotonic() + scfg.run_timeout_s
    work_s = scfg.work_ms / 1000
    try:
        while time.monotonic() < deadline and total.value < expected:
            batch = consumer.poll(0.2) if role == "share" else consumer.consume(scfg.max_poll_records, 0.2)
            now = time.time()
            if not batch:
                continue
            first = first or now
            before = count
            for msg in batch:
                if msg.error() is not None:
                    continue
                latencies.append(now * 1000 - msg.timestamp()[1])
                seen.append((msg.partition(), msg.offset(), msg.delivery_count() if role == "share" else 1))
                time.sleep(work_s)  # the application's work on the record
                count += 1
            last = time.time()
            with total.get_lock():
                total.value += count - before
    finally:
        if role == "share":  # implicit mode accepts a batch on the next poll or a commit; librdkafka
            # 2.16's close() sends ShareAcknowledge(-1) without acknowledgements: the last batch goes back
            consumer.commit_sync(scfg.setup_timeout_s)
        consumer.close()
    return {"count": count, "first": first, "last": last, "latencies": latencies, "seen": seen}


def _paced_producer(bootstrap: str, topic: str, barrier: Barrier, scfg: ShareConfig, count: int) -> dict[str, Any]:
    """Produce ``count`` records at ``latency_rate_per_s`` after a second for the consumers to join."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.num.messages": scfg.producer_batch})
    value = b"x" * scfg.value_size
    barrier.wait(scfg.setup_timeout_s)
    time.sleep(1.0)  # the consumers' joins and first fetches (not measured: records come after)
    start = time.monotonic()
    for i in range(count):
        due = start + i / scfg.latency_rate_per_s
        while (ahead := due - time.monotonic()) > 0:
            producer.poll(min(ahead, 0.01))
        producer.produce(topic, value)
    if producer.flush(30):
        raise RuntimeError("records left undelivered")
    return {"count": 0, "first": 0.0, "last": 0.0, "latencies": []}


# -- steps ----------------------------------------------------------------------------------------

def _fresh(bootstrap: str, partitions: int, scfg: ShareConfig, prefix: str) -> tuple[str, str]:
    """A new topic and a group id, the group's share.auto.offset.reset set to earliest."""
    topic, group = f"{prefix}-{uuid.uuid4().hex[:8]}", f"{prefix}-g-{uuid.uuid4().hex[:8]}"
    create_topic_and_wait(bootstrap, topic, partitions, scfg.setup_timeout_s)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(scfg.setup_timeout_s)
    return topic, group


def _prefill(bootstrap: str, topic: str, records: int, partitions: int, scfg: ShareConfig) -> None:
    """Write ``records`` values round robin over the partitions, in log batches of ``producer_batch``."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": scfg.producer_batch})
    value = b"x" * scfg.value_size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise WorkloadFailed(f"prefill of {topic}: records left undelivered")


def _run(role: str, bootstrap: str, topic: str, group: str, consumers: int, expected: int, scfg: ShareConfig,
         paced: bool = False) -> list[dict[str, Any]]:
    """The consumers (and, ``paced``, a producer of the ``expected`` records) in child processes."""
    barrier = start_barrier(consumers + paced)
    total = mp.get_context("spawn").Value("q", 0)  # records read by all the consumers
    args = [(role, bootstrap, topic, group, barrier, total, expected, scfg) for _ in range(consumers + paced)]
    if paced:
        args[-1] = ("producer", *args[-1][1:])
    try:
        results = run_in_children(party, args, scfg.setup_timeout_s + scfg.run_timeout_s + 60)
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    return results[:consumers]


def _rate(results: list[dict[str, Any]], expected: int, what: str) -> float:
    """Records/s from the first delivery to the last, all consumers together; every record once."""
    total = sum(r["count"] for r in results)
    if total != expected:
        raise WorkloadFailed(f"{what}: {total} deliveries of {expected} records (each once expected)")
    first = min(r["first"] for r in results if r["count"])
    last = max(r["last"] for r in results if r["count"])
    return total / max(last - first, 1e-6)


def _state_log_dir(broker_pid: int) -> Path:
    """The broker's data directory, from its command line (``--override log.dirs=...``)."""
    args = Path(f"/proc/{broker_pid}/cmdline").read_bytes().split(b"\0")
    for arg in args:
        if arg.startswith(b"log.dirs="):
            return Path(arg[len(b"log.dirs="):].decode())
    raise WorkloadFailed("no log.dirs on the broker's command line")


def share_state_bytes(data_dir: Path) -> int:
    """Bytes of record batches in ``__share_group_state``'s segment files (each batch: 8-byte base
    offset, 4-byte length, then the length; a preallocated tail is zeros)."""
    total = 0
    for segment in data_dir.glob(f"{SHARE_STATE_TOPIC}-*/*.log"):
        data = segment.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length <= 0:
                break
            pos += 12 + length
        total += pos
    return total


# -- workloads ------------------------------------------------------------------------------------

def scaling_workload(scfg: ShareConfig, bootstrap: str, broker_name: str, *, broker_pid: int) -> dict[str, Metric]:
    """1, 4, 16 ShareConsumers on one partition; __share_group_state bytes per 1,000 accepted."""
    data_dir = _state_log_dir(broker_pid)
    metrics: dict[str, Metric] = {}
    rates: dict[int, float] = {}
    state_bytes, accepted = 0, 0
    for consumers in scfg.scaling_consumers:
        records = scfg.records[consumers]
        topic, group = _fresh(bootstrap, 1, scfg, f"share{consumers}")
        _prefill(bootstrap, topic, records, 1, scfg)
        before = share_state_bytes(data_dir)
        rates[consumers] = _rate(_run("share", bootstrap, topic, group, consumers, records, scfg), records,
                                 f"{consumers} share consumers")
        state_bytes += share_state_bytes(data_dir) - before
        accepted += records
        metrics[f"share-1p-{consumers}c"] = Metric(f"1 partition, {consumers} share consumer(s), "
                                                   f"{scfg.work_ms:g} ms/record", "records/s", rates[consumers])
    low, high = min(scfg.scaling_consumers), max(scfg.scaling_consumers)
    metrics["share-scaling"] = Metric(f"{high} consumers / {low} (target >= 8)", "x", rates[high] / rates[low])
    metrics["share-state-bytes"] = Metric(f"{SHARE_STATE_TOPIC} bytes per 1,000 accepted", "bytes",
                                          state_bytes * 1000 / accepted, higher_is_better=False)
    return metrics


def classic_workload(scfg: ShareConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Eight partitions: eight ShareConsumers, then a classic group of eight Consumers."""
    metrics: dict[str, Metric] = {}
    n, records = scfg.classic_partitions, scfg.classic_records
    for role in ("share", "classic"):
        topic, group = _fresh(bootstrap, n, scfg, f"{role}{n}p")
        _prefill(bootstrap, topic, records, n, scfg)
        rate = _rate(_run(role, bootstrap, topic, group, n, records, scfg), records, f"{n} {role} consumers")
        metrics[f"{role}-{n}p-{n}c"] = Metric(f"{n} partitions, {n} {role} consumers, {scfg.work_ms:g} ms/record",
                                              "records/s", rate)
    return metrics


def latency_workload(scfg: ShareConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Sixteen ShareConsumers on one partition fed at a steady rate: produce-to-delivery latency."""
    topic, group = _fresh(bootstrap, 1, scfg, "sharelat")
    records = int(scfg.latency_rate_per_s * scfg.latency_duration_s)
    results = _run("share", bootstrap, topic, group, scfg.latency_consumers, records, scfg, paced=True)
    latencies = sorted(lat for r in results for lat in r["latencies"])
    if len(latencies) != records:
        raise WorkloadFailed(f"{len(latencies)} deliveries of {records} records")
    rate = f"{scfg.latency_consumers} share consumers, {scfg.latency_rate_per_s:g} records/s"
    return {"share-latency-p50": Metric(f"produce to delivery p50, {rate}", "ms", percentile(latencies, 50),
                                        higher_is_better=False),
            "share-latency-p99": Metric(f"produce to delivery p99, {rate}", "ms", percentile(latencies, 99),
                                        higher_is_better=False)}


def share_workloads(cfg: BenchConfig, scfg: ShareConfig | None = None) -> list[Workload]:
    """The share-group workloads, in run order (offsetd only)."""
    scfg = scfg or ShareConfig()
    only = {"brokers": ("offsetd",), "not_applicable": NOT_APPLICABLE}
    return [
        Workload("share-scaling", partial(scaling_workload, scfg), wants_pid=True, **only),
        Workload("share-vs-classic", partial(classic_workload, scfg), **only),
        Workload("share-latency", partial(latency_workload, scfg), **only),
    ]
