"""The workloads: each is a function ``(bootstrap, broker_name) -> {metric_key: Metric}``
(bench/workload.py says what a workload is).

A workload raises :class:`WorkloadFailed` when the broker misbehaved (errors, missing or
wrong data, deadline missed); such a run is reported as failed, never as a number. Workloads
run in list order against one fresh broker, and a workload may ``require`` earlier ones
(``consume`` reads what ``produce`` wrote); if a requirement did not succeed it is skipped.
A workload that only makes sense for some brokers lists them in ``brokers``; the others
report it as "n/a".

Adding a workload: write ``def my_workload(cfg, bootstrap, broker_name) -> dict[str, Metric]``
(client loops that need their own process go in ``clients`` and run via ``procs``), then
append ``Workload("name", partial(my_workload, cfg), requires=(...))`` in
:func:`core_workloads`. A module of related workloads (``abuse``, ``eos``, ``security``) builds
on ``bench.workload`` and ``bench.workload_steps``, never on this module, and bench/run.py's
``default_workloads`` adds its list to the suite.

The suite (``bench/run.py --workloads NAME ...`` selects some; requirements come along):

* ``create_topic``, ``produce``, ``consume``: ``cfg.messages`` records through one producer,
  then one consumer (``assign()``, no group); consume also reports the broker's CPU seconds
  per GB of values fetched (its /proc/<pid>/stat).
* ``commit-throughput``: ``cfg.commit_clients`` processes, each a standalone consumer in its
  own group committing ``cfg.partitions`` offsets per async commit, at most
  ``cfg.commit_max_in_flight`` unacknowledged, for ``cfg.commit_duration_s``.
* ``commit-latency``: one process, synchronous commits of ``cfg.partitions`` offsets.
* ``commit-latency-4p``: ``cfg.commit_clients`` such processes at once, each in its own group
  (groups on different ``__consumer_offsets`` partitions contend for the broker's fsyncs).
* ``subscribe-to-first-record``: a new group's consumer, from ``subscribe()`` to its first
  record (one record in a fresh topic).
* ``time-lookup``: ListOffsets by timestamp on one partition of ~1 GB of lz4 batches (record
  k at t0 + k ms): latency p50/p99 and the share of answers that are the exact record.
* ``offsets-load`` (offsetd only): start-up load of a ``__consumer_offsets`` holding
  ``groups x topics x partitions`` commit records, written to disk before the broker starts.
* ``abuse-garbage-storm-2k``, ``abuse-garbage-storm``, ``abuse-idle-rss``,
  ``abuse-disk-full`` (offsetd only): issue 16's reliability figures, see ``bench/abuse.py``;
  ``--workloads abuse`` selects them all.
* ``eos``, ``eos-fsyncs`` (offsetd only): issue 13's consume-transform-produce with and
  without transactions, and the broker's fsyncs per transaction; see ``bench/eos.py``.
* ``security-handshakes``, ``security-overhead``, ``security-acl-cost`` (offsetd only): issue
  14's TLS handshakes/s, SCRAM authentications/s, SASL_SSL vs plaintext throughput and the cost
  of 1,000 ACLs; ``--workloads security`` selects them all; see ``bench/security.py``.
* ``cp-rebalance``, ``cp-heartbeats``, ``cp-load`` (offsetd only: Tansu does not serve KIP-848):
  issue 22's consumer protocol beside offsetd's classic one (a member joining under load,
  heartbeats/s of 1,000 members, the load of 10,000 members' records); ``--workloads kip848``
  selects them all; see ``bench/consumer_protocol.py``.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import re
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from bench import clients, offsets_log
from bench.brokers import BrokerStartError, OffsetdBroker
from bench.procs import ChildError, run_in_child, run_in_children, start_barrier
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed
from bench.workload_steps import commit_problems, create_topic_and_wait, percentile, process_rss_mb


# -- workloads ------------------------------------------------------------------------------


def create_topic(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Create the topic with ``cfg.partitions`` partitions via the AdminClient, then poll
    Metadata until every partition has a leader. Produces no figure."""
    create_topic_and_wait(bootstrap, cfg.topic, cfg.partitions, cfg.setup_timeout_s)
    return {}


def produce_throughput(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """One producer process, ``cfg.messages`` x ``cfg.message_size`` B, acks=all,
    linger.ms=5, no idempotence; every delivery report must be a success."""
    try:
        res = run_in_child(
            clients.produce,
            (bootstrap, cfg.topic, cfg.messages, cfg.message_size, cfg.partitions,
             cfg.linger_ms, cfg.produce_timeout_s),
            timeout_s=cfg.produce_timeout_s + cfg.child_slack_s,
        )  # fmt: skip
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    if res.errors or res.undelivered or res.delivered != cfg.messages:
        raise WorkloadFailed(
            f"{res.delivered}/{cfg.messages} delivered ({res.attempted} handed to the client), "
            f"{res.errors} delivery errors, "
            f"{res.undelivered} undelivered at the deadline; first error: {res.first_error}"
        )
    return _throughput("produce", cfg.messages, cfg.message_size, res.elapsed_s)


def consume_throughput(cfg: BenchConfig, bootstrap: str, broker_name: str,
                       broker_pid: int | None = None) -> dict[str, Metric]:
    """One consumer process assigned all partitions from the beginning reads back what
    ``produce`` wrote. Checked: the total, the count per partition, offsets 0, 1, 2, ... in
    each partition, every value's size, and each partition's high watermark. With
    ``broker_pid``, also the broker's CPU seconds per GB of record values fetched (its
    /proc/<pid>/stat over the consumer's timed section)."""
    try:
        res = run_in_child(
            clients.consume,
            (bootstrap, cfg.topic, cfg.messages, cfg.message_size, cfg.partitions,
             cfg.group_id, cfg.consume_timeout_s, broker_pid),
            timeout_s=cfg.consume_timeout_s + cfg.child_slack_s,
        )  # fmt: skip
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    problems: list[str] = []
    if res.received < cfg.messages:
        problems.append(
            f"received {res.received}/{cfg.messages} within {cfg.consume_timeout_s:.0f} s"
        )
    elif res.received > cfg.messages:
        problems.append(f"received {res.received}, more than the {cfg.messages} produced")
    expected = cfg.expected_per_partition()
    if res.per_partition != expected and res.received >= cfg.messages:
        problems.append(f"per-partition counts {res.per_partition}, expected {expected}")
    if res.offset_anomalies:
        problems.append(f"{res.offset_anomalies} records out of offset sequence (gap/duplicate)")
    if res.high_watermarks != expected:
        problems.append(f"high watermarks {res.high_watermarks}, expected {expected}")
    if res.wrong_size:
        problems.append(f"{res.wrong_size} messages not {cfg.message_size} bytes")
    if res.errors:
        problems.append(f"{res.errors} consumer errors, first: {res.first_error}")
    if problems:
        raise WorkloadFailed("; ".join(problems))
    metrics = _throughput("consume", res.received, cfg.message_size, res.elapsed_s)
    if res.broker_cpu_s is not None:
        gb = res.received * cfg.message_size / 1e9
        metrics["consume_broker_cpu_s_per_gb"] = Metric(
            "consume: broker CPU per GB of values", "s/GB", res.broker_cpu_s / gb, False)
    return metrics


def commit_throughput(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """``cfg.commit_clients`` processes commit ``cfg.partitions`` offsets of ``cfg.topic`` per
    async commit, each keeping up to ``cfg.commit_max_in_flight`` unacknowledged, for
    ``cfg.commit_duration_s``; their timed sections start together (a barrier).

    Each client is a standalone consumer (no subscribe/assign: OffsetCommit with generation
    -1) in its own new group, so the clients' groups are independent, as separate
    applications' would be; this works on both brokers. Throughput = acknowledged commits of
    all clients / (last acknowledgement - first timed commit). Checked: no commit error,
    none unacknowledged after the drain, and ``committed()`` returns the last offsets sent.
    """
    run_id = uuid.uuid4().hex[:8]
    client_timeout = cfg.setup_timeout_s + cfg.commit_duration_s + 30.0  # 30: drain
    barrier = start_barrier(cfg.commit_clients)
    args = [
        (bootstrap, cfg.topic, cfg.partitions, f"{cfg.group_id}-commits-{run_id}-{i}",
         cfg.commit_max_in_flight, cfg.commit_duration_s, client_timeout, barrier)
        for i in range(cfg.commit_clients)
    ]  # fmt: skip
    try:
        results = run_in_children(
            clients.commit_throughput, args, timeout_s=client_timeout + cfg.child_slack_s
        )
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    problems: list[str] = []
    for i, res in enumerate(results):
        problems += [f"client {i}: {p}" for p in commit_problems(res.errors, res.first_error,
                     res.last_sent, res.read_back, res.read_back_error)]  # fmt: skip
        if res.in_flight_at_end:
            problems.append(f"client {i}: {res.in_flight_at_end} commits never acknowledged")
        if res.acked + res.errors + res.in_flight_at_end != res.sent:
            problems.append(f"client {i}: {res.acked} acked + {res.errors} failed "
                            f"+ {res.in_flight_at_end} pending != {res.sent} sent")  # fmt: skip
    if problems:
        raise WorkloadFailed("; ".join(problems))
    elapsed = max(r.finished for r in results) - min(r.started for r in results)
    commits = sum(r.acked for r in results)
    rate = commits / max(elapsed, 1e-9)
    return {
        "commits_per_s": Metric("commit", "commits/s", rate),
        "commit_offsets_per_s": Metric("commit", "offsets/s", rate * cfg.partitions),
    }


def commit_latency(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """One process commits ``cfg.partitions`` offsets synchronously in a loop: a
    ``cfg.latency_warmup_s`` warm-up, then ``cfg.latency_duration_s`` timed. p50 and p99 of
    the round trips (nearest rank). Checked: no errors, and the read-back matches."""
    group = f"{cfg.group_id}-latency-{uuid.uuid4().hex[:8]}"
    timeout = cfg.setup_timeout_s + cfg.latency_warmup_s + cfg.latency_duration_s
    try:
        res = run_in_child(
            clients.commit_latency,
            (bootstrap, cfg.topic, cfg.partitions, group, cfg.latency_warmup_s,
             cfg.latency_duration_s),
            timeout_s=timeout + cfg.child_slack_s,
        )  # fmt: skip
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    problems = commit_problems(res.errors, res.first_error, res.last_sent, res.read_back,
                                res.read_back_error)  # fmt: skip
    if not res.latencies_s:
        problems.append("no successful commit in the timed section")
    if problems:
        raise WorkloadFailed("; ".join(problems))
    samples = sorted(res.latencies_s)
    return {
        "commit_p50_ms": Metric("sync commit p50", "ms", percentile(samples, 50) * 1e3, False),
        "commit_p99_ms": Metric("sync commit p99", "ms", percentile(samples, 99) * 1e3, False),
    }


def commit_latency_concurrent(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """``cfg.commit_clients`` processes run commit-latency's loop at once (a barrier starts their
    warm-ups together), each in its own group: p50 and p99 of all their round trips."""
    run_id = uuid.uuid4().hex[:8]
    timeout = cfg.setup_timeout_s + cfg.latency_warmup_s + cfg.latency_duration_s
    barrier = start_barrier(cfg.commit_clients)
    args = [(bootstrap, cfg.topic, cfg.partitions, f"{cfg.group_id}-latency4-{run_id}-{i}", cfg.latency_warmup_s,
             cfg.latency_duration_s, barrier) for i in range(cfg.commit_clients)]
    try:
        results = run_in_children(clients.commit_latency, args, timeout_s=timeout + cfg.child_slack_s)
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    problems = [f"client {i}: {p}" for i, res in enumerate(results)
                for p in commit_problems(res.errors, res.first_error, res.last_sent, res.read_back,
                                         res.read_back_error)]
    samples = sorted(s for res in results for s in res.latencies_s)
    if not samples:
        problems.append("no successful commit in the timed section")
    if problems:
        raise WorkloadFailed("; ".join(problems))
    label = f"sync commit, {cfg.commit_clients} processes at once"
    return {
        "commit4_p50_ms": Metric(f"{label} p50", "ms", percentile(samples, 50) * 1e3, False),
        "commit4_p99_ms": Metric(f"{label} p99", "ms", percentile(samples, 99) * 1e3, False),
        "commit4_per_s": Metric(label, "commits/s", len(samples) / cfg.latency_duration_s),
    }


def subscribe_to_first_record(
    cfg: BenchConfig, bootstrap: str, broker_name: str
) -> dict[str, Metric]:
    """Create a fresh one-partition topic and produce one record to it (untimed); then a new
    consumer in a new group subscribes with auto.offset.reset=earliest and polls. Figures:
    seconds from ``subscribe()`` to the partition assignment and to that first record.
    Checked: the record is offset 0 of the topic with the produced value; no consumer error.
    """
    run_id = uuid.uuid4().hex[:8]
    topic, group = f"bench-first-{run_id}", f"{cfg.group_id}-first-{run_id}"
    create_topic_and_wait(bootstrap, topic, 1, cfg.setup_timeout_s)
    try:
        sent = run_in_child(
            clients.produce,
            (bootstrap, topic, 1, cfg.message_size, 1, cfg.linger_ms, cfg.setup_timeout_s),
            timeout_s=cfg.setup_timeout_s + cfg.child_slack_s,
        )
    except ChildError as exc:
        raise WorkloadFailed(f"producing the record: {exc}", exc.detail) from exc
    if sent.delivered != 1:
        raise WorkloadFailed(f"producing the record failed: {sent.first_error or sent}")
    try:
        res = run_in_child(
            clients.first_record,
            (bootstrap, topic, group, cfg.first_record_timeout_s),
            timeout_s=cfg.first_record_timeout_s + cfg.child_slack_s,
        )
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    problems: list[str] = []
    if res.first_record_s is None:
        assigned = "never" if res.assigned_s is None else f"after {res.assigned_s:.3f} s"
        problems.append(f"no record within {cfg.first_record_timeout_s:.0f} s "
                        f"(partitions assigned: {assigned})")  # fmt: skip
    elif (res.topic, res.partition, res.offset, res.value_size) != (topic, 0, 0, cfg.message_size):
        problems.append(f"first record was {res.topic}[{res.partition}]@{res.offset} with "
                        f"{res.value_size} bytes, expected {topic}[0]@0 with {cfg.message_size}")
    if res.errors:
        problems.append(f"{res.errors} consumer errors, first: {res.first_error}")
    if problems:
        raise WorkloadFailed("; ".join(problems))
    assert res.first_record_s is not None
    metrics = {"first_record_s": Metric("subscribe -> first record", "s", res.first_record_s,
                                        False)}  # fmt: skip
    if res.assigned_s is not None:
        metrics["assigned_s"] = Metric("subscribe -> assignment", "s", res.assigned_s, False)
    return metrics


def time_lookup(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """ListOffsets by timestamp on one partition of ``cfg.lookup_messages`` records (about
    1 GB stored) in ``cfg.lookup_codec``-compressed batches of ~1 MB, record k at t0 + k ms:
    ``cfg.lookups`` sequential lookups of random records' timestamps. Figures: latency p50 and
    p99 (client round trip), and the share of answers that are the exact record (Kafka's
    answer; a broker answering with the batch's first offset is counted as wrong).
    Fails on produce or lookup errors."""
    create_topic_and_wait(bootstrap, cfg.lookup_topic, 1, cfg.setup_timeout_s)
    t0_ms = int(time.time() * 1000) - cfg.lookup_messages - 3_600_000  # within 7 days' retention
    try:
        produced = run_in_child(
            clients.produce_timestamped,
            (bootstrap, cfg.lookup_topic, cfg.lookup_messages, cfg.lookup_value_size,
             cfg.lookup_codec, t0_ms, cfg.lookup_produce_timeout_s),
            timeout_s=cfg.lookup_produce_timeout_s + cfg.child_slack_s,
        )  # fmt: skip
        if produced.errors or produced.delivered != cfg.lookup_messages:
            raise WorkloadFailed(f"time-lookup data: {produced.delivered}/{cfg.lookup_messages} "
                                 f"delivered, {produced.errors} errors, first: {produced.first_error}")
        print(f"  [{broker_name}] time-lookup data: {cfg.lookup_messages:,} x {cfg.lookup_value_size} B "
              f"({cfg.lookup_codec}) in {produced.elapsed_s:.1f} s", flush=True)  # fmt: skip
        res = run_in_child(
            clients.time_lookups,
            (bootstrap, cfg.lookup_topic, cfg.lookup_messages, t0_ms, cfg.lookups, cfg.lookup_warmup),
            timeout_s=cfg.lookups * 30 + cfg.child_slack_s,
        )
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    if res.errors or not res.latencies_ms:
        raise WorkloadFailed(f"{res.errors} lookup errors, first: {res.first_error}")
    if res.wrong:
        print(f"  [{broker_name}] time-lookup: {len(res.latencies_ms) - res.exact} answers not the "
              f"exact record, e.g. (expected, answered) {res.wrong}", flush=True)  # fmt: skip
    latencies = sorted(res.latencies_ms)
    return {
        "time_lookup_p50_ms": Metric("time lookup, 1 GB compressed partition: p50", "ms",
                                     percentile(latencies, 50), False),
        "time_lookup_p99_ms": Metric("time lookup, 1 GB compressed partition: p99", "ms",
                                     percentile(latencies, 99), False),
        "time_lookup_exact_pct": Metric("time lookup: exact record answered", "%",
                                        100.0 * res.exact / len(latencies)),
    }


#: OffsetFetch errors after which the load probe asks again (the load is not finished, or
#: the client has not found the coordinator yet).
_RETRY_CODES = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}
#: offsetd's own report when every ``__consumer_offsets`` partition has been replayed.
_LOADED_LINE = re.compile(
    r"loaded __consumer_offsets: (?P<records>\d+) records in (?P<seconds>[\d.]+) s"
    r"[^\n]*?(?:; FAILED partitions: (?P<failed>[^\n]*))?$",
    re.MULTILINE,
)
#: Probe rounds while the broker has not reported the load done. Probing interferes: with
#: every partition probed each 20 ms the 10M-record load took 72 s instead of 21 s.
_PROBE_INTERVAL_LOADING_S = 1.0
#: Probe rounds once the broker says it is done (a shard may still be finishing).
_PROBE_INTERVAL_LOADED_S = 0.02
#: How often the broker's log is read while waiting.
_LOG_POLL_S = 0.05


@dataclass
class _LoadObservation:
    """When the load was seen to complete (``time.monotonic()``), and offsetd's own figures."""

    served_at: float
    log_records: int | None = None
    log_seconds: float | None = None


def offsets_load(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Start a second offsetd whose ``log.dirs`` already holds a ``__consumer_offsets`` of
    ``load_groups x load_topics x load_partitions`` commit records (built once, cached, then
    copied in before the process starts) and time its load. ``bootstrap`` (the suite's own
    broker) is not used.

    Two figures: offsetd's own (its log line "loaded __consumer_offsets: N records in S s",
    timed by the broker around the replay, which must report exactly the records written and
    no failed partition), and end to end: from spawning the process (interpreter start-up,
    opening and recovering the segments included) until, for every ``__consumer_offsets``
    partition, an OffsetFetch of the last key written there returns that key's offset. The
    probes are rounds of concurrent ListConsumerGroupOffsets, one per partition still
    pending: every 1 s until the log line appears (so they barely disturb the load; they
    are also the fallback if the line never comes), every 20 ms after it. A successful
    answer with a wrong offset fails the run at once, as does a wrong offset in a full
    read-back of one group (every topic and partition) after the load.
    """
    from offsetd.config import BrokerConfig

    num_partitions = int(
        BrokerConfig.load(cfg.offsetd_config, []).get("offsets.topic.num.partitions")
    )
    spec = offsets_log.OffsetsLogSpec(
        groups=cfg.load_groups,
        topics=cfg.load_topics,
        partitions=cfg.load_partitions,
        num_partitions=num_partitions,
        records_per_batch=cfg.load_records_per_batch,
    )
    cache = Path(cfg.cache_dir)
    data = offsets_log.load_cached(spec, cache)
    if data is None:
        print(f"  building {spec.records:,} offset commit records in {cache / spec.cache_key} "
              f"(once; reused for {offsets_log.MAX_CACHE_AGE_S / 86400:.0f} days)",
              flush=True)  # fmt: skip
        started = time.monotonic()
        try:
            data = offsets_log.build(spec, cache, os.cpu_count() or 1, cfg.load_build_timeout_s)
        except ChildError as exc:
            raise WorkloadFailed(f"building the data set: {exc}", exc.detail) from exc
        print(f"  built {data.bytes / 1e6:,.0f} MB in {time.monotonic() - started:.0f} s",
              flush=True)  # fmt: skip

    launcher = OffsetdBroker(config=Path(cfg.offsetd_config))
    launcher.seed = data.copy_into
    launcher.startup_timeout_s = cfg.load_timeout_s
    try:
        try:
            launcher.start()
        except BrokerStartError as exc:
            raise WorkloadFailed(f"offsetd with the offsets data did not start: {exc}") from exc
        assert launcher.started_at is not None
        ready_s = time.monotonic() - launcher.started_at
        seen = _observe_load(launcher, data.probes, spec, launcher.started_at + cfg.load_timeout_s)
        rss_mb = process_rss_mb(launcher.pid)
        list_s = _time_list_groups(launcher.bootstrap, spec.groups, cfg.load_timeout_s)
    finally:
        launcher.stop()
    served_s = seen.served_at - launcher.started_at
    metrics: dict[str, Metric] = {}
    if seen.log_seconds is not None:
        log_s = max(seen.log_seconds, 1e-9)
        metrics["load_records_per_s"] = Metric("offsets load (offsetd's log)", "records/s",
                                               spec.records / log_s)  # fmt: skip
        metrics["load_s"] = Metric("offsets load (offsetd's log)", "s", log_s, False)
    else:
        print("  note: offsetd did not log 'loaded __consumer_offsets: N records in S s'; "
              "only the end-to-end figures are reported", flush=True)  # fmt: skip
    metrics["load_served_s"] = Metric("offsets load: process start -> all served", "s",
                                      served_s, False)  # fmt: skip
    metrics["load_served_records_per_s"] = Metric(
        "offsets load: process start -> all served", "records/s", spec.records / served_s
    )
    metrics["load_ready_s"] = Metric("offsets load: process start -> Metadata", "s", ready_s,
                                     False)  # fmt: skip
    metrics["load_list_groups_s"] = Metric(f"offsets load: ListGroups of all {spec.groups:,} groups", "s",
                                           list_s, False)
    if rss_mb is not None:
        metrics["load_rss_mb"] = Metric("offsets load: broker RSS after", "MB", rss_mb, False)
        metrics["load_rss_kb_per_group"] = Metric("offsets load: broker RSS per group", "kB",
                                                  rss_mb * 1000 / spec.groups, False)
    return metrics


def _time_list_groups(bootstrap: str, groups: int, timeout_s: float) -> float:
    """Seconds one ListGroups (v4, every state) of the loaded broker takes; it must name every
    group written. A raw request: librdkafka 2.16 refuses an answer of a million groups
    ("ApiArrayCnt 1000000 out of range") and then crashes, and Kafka has no paging either."""
    from bench.raw_client import RawConnection
    from kio.index import load_request_schema

    conn = RawConnection(bootstrap, timeout=max(1.0, timeout_s))
    try:
        started = time.monotonic()
        answer = conn.call(16, 4, load_request_schema(16, 4)(states_filter=()))
        elapsed = time.monotonic() - started
    finally:
        conn.close()
    if answer.error_code != 0 or len(answer.groups) != groups:
        raise WorkloadFailed(f"ListGroups after the load: error {answer.error_code}, "
                             f"{len(answer.groups):,} groups of {groups:,}")
    return elapsed


def _observe_load(
    launcher: OffsetdBroker,
    probes: list[offsets_log.Probe],
    spec: offsets_log.OffsetsLogSpec,
    deadline: float,
) -> _LoadObservation:
    """Wait for the load (see :func:`offsets_load`), check it, and return what was seen.
    The admin client lives only in here, so it is gone before the broker is stopped."""
    admin = AdminClient({"bootstrap.servers": launcher.bootstrap})
    seen = _await_offsets(admin, probes, deadline, launcher)
    if seen.log_records is not None and seen.log_records != spec.records:
        raise WorkloadFailed(f"offsetd loaded {seen.log_records:,} records, "
                             f"{spec.records:,} were written")  # fmt: skip
    _check_group(admin, spec, probes[0], deadline)
    return seen


def _await_offsets(
    admin: AdminClient,
    probes: list[offsets_log.Probe],
    deadline: float,
    launcher: OffsetdBroker,
) -> _LoadObservation:
    """Probe every partition until each returned its expected offset, reading the broker's
    log for its "loaded" line meanwhile (and for up to 5 s after the probes succeed).
    Raises :class:`WorkloadFailed` on a wrong answer, a non-retriable error, a failed
    partition in the log line, the broker exiting, or the deadline."""
    waiting: dict[concurrent.futures.Future, offsets_log.Probe] = {}
    pending = {probe.group: probe for probe in probes}
    last_error: dict[str, str] = {}
    seen = _LoadObservation(served_at=0.0)
    next_round = time.monotonic()
    log_deadline = math.inf  # set once every probe succeeded
    while pending or waiting or (seen.log_seconds is None and time.monotonic() < log_deadline):
        now = time.monotonic()
        if now >= deadline:
            parts = sorted(p.offsets_partition for p in pending.values())
            sample = next(iter(last_error.values()), "no answer")
            raise WorkloadFailed(f"offsets not loaded before the deadline: __consumer_offsets "
                                 f"partitions {parts} pending; last error: {sample}")
        if (status := launcher.exit_status()) is not None:
            raise WorkloadFailed(f"offsetd exited ({status}) while loading")
        if seen.log_seconds is None and (match := _LOADED_LINE.search(launcher.read_log())):
            if match["failed"]:
                raise WorkloadFailed(f"offsetd failed to load __consumer_offsets partitions "
                                     f"{match['failed']}")  # fmt: skip
            seen.log_records, seen.log_seconds = int(match["records"]), float(match["seconds"])
            next_round = min(next_round, now)
        if pending and not waiting and now >= next_round:
            for probe in pending.values():
                request = ConsumerGroupTopicPartitions(
                    probe.group, [TopicPartition(probe.topic, probe.partition)]
                )
                futures = admin.list_consumer_group_offsets(
                    [request], request_timeout=max(0.1, min(10.0, deadline - now))
                )
                waiting[futures[probe.group]] = probe
        if waiting:
            finished, _ = concurrent.futures.wait(
                list(waiting), timeout=_LOG_POLL_S, return_when=concurrent.futures.FIRST_COMPLETED
            )
        else:
            finished = set()
            launcher.pause(_LOG_POLL_S)
        for future in finished:
            probe = waiting.pop(future)
            answered_at = time.monotonic()
            error = _probe_error(future, probe)
            if error is None:
                del pending[probe.group]
                seen.served_at = max(seen.served_at, answered_at)
            elif error[0]:
                last_error[probe.group] = error[1]
            else:
                raise WorkloadFailed(f"__consumer_offsets-{probe.offsets_partition}: {error[1]}")
            if not waiting:  # round over
                interval = (_PROBE_INTERVAL_LOADED_S if seen.log_seconds is not None
                            else _PROBE_INTERVAL_LOADING_S)  # fmt: skip
                next_round = answered_at + interval
        if not pending and not waiting and log_deadline == math.inf:
            log_deadline = time.monotonic() + 5.0
    return seen


def _probe_error(
    future: concurrent.futures.Future, probe: offsets_log.Probe
) -> tuple[bool, str] | None:
    """``None`` if the probe's answer is right, else (retriable, description)."""
    where = f"group {probe.group!r} {probe.topic}[{probe.partition}]"
    try:
        result = future.result()
    except KafkaException as exc:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        retriable = err is not None and (err.code() in _RETRY_CODES or err.retriable())
        return retriable, f"{where}: {exc}"
    tps = result.topic_partitions
    if len(tps) != 1:
        return False, f"{where}: {len(tps)} partitions in the answer"
    tp = tps[0]
    if tp.error is not None:
        return tp.error.code() in _RETRY_CODES, f"{where}: {tp.error}"
    if tp.offset != probe.offset:
        return False, f"{where}: committed offset {tp.offset}, expected {probe.offset}"
    return None


def _check_group(
    admin: AdminClient, spec: offsets_log.OffsetsLogSpec, probe: offsets_log.Probe,
    deadline: float,
) -> None:
    """Read back every committed offset of ``probe``'s group (topics x partitions) and
    compare with the generated values."""
    g = probe.group_number
    wanted = [TopicPartition(spec.topic(t), p)
              for t in range(spec.topics) for p in range(spec.partitions)]  # fmt: skip
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(probe.group, wanted)],
        request_timeout=max(1.0, deadline - time.monotonic()),
    )
    try:
        result = futures[probe.group].result()
    except KafkaException as exc:
        raise WorkloadFailed(f"read-back of group {probe.group!r} failed: {exc}") from exc
    expected = {(spec.topic(t), p): spec.offset(g, t, p)
                for t in range(spec.topics) for p in range(spec.partitions)}  # fmt: skip
    got = {(tp.topic, tp.partition): (tp.offset if tp.error is None else str(tp.error))
           for tp in result.topic_partitions}  # fmt: skip
    wrong = [(k, got.get(k), v) for k, v in expected.items() if got.get(k) != v]
    if wrong:
        (topic, partition), seen, want = wrong[0]
        raise WorkloadFailed(f"read-back of group {probe.group!r}: {len(wrong)} of "
                             f"{len(expected)} offsets wrong, e.g. {topic}[{partition}] = "
                             f"{seen}, expected {want}")  # fmt: skip


def _throughput(label: str, messages: int, size: int, elapsed_s: float) -> dict[str, Metric]:
    elapsed_s = max(elapsed_s, 1e-9)
    return {
        f"{label}_msgs_per_s": Metric(label, "msg/s", messages / elapsed_s),
        f"{label}_mb_per_s": Metric(label, "MB/s", messages * size / elapsed_s / 1e6),
    }


def core_workloads(cfg: BenchConfig) -> list[Workload]:
    """This module's workloads, in run order (bench/run.py's suite puts the others after them)."""
    return [
        Workload("create_topic", partial(create_topic, cfg)),
        Workload("produce", partial(produce_throughput, cfg), requires=("create_topic",)),
        Workload("consume", partial(consume_throughput, cfg), requires=("produce",),
                 wants_pid=True),
        Workload("commit-throughput", partial(commit_throughput, cfg),
                 requires=("create_topic",)),
        Workload("commit-latency", partial(commit_latency, cfg), requires=("create_topic",)),
        Workload("commit-latency-4p", partial(commit_latency_concurrent, cfg), requires=("create_topic",)),
        Workload("subscribe-to-first-record", partial(subscribe_to_first_record, cfg)),
        Workload("time-lookup", partial(time_lookup, cfg)),
        Workload("offsets-load", partial(offsets_load, cfg), brokers=("offsetd",)),
    ]
