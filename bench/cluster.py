"""Cluster benchmark (issue 12): offsetd single-node, offsetd 3 brokers + PostgreSQL, and Tansu
side by side in one run, each figure as median (min-max) over the repetitions, with the ratios
cluster / single-node and cluster / Tansu and the issue's target.

    .venv/bin/python bench/cluster.py                       # everything, --repeat 3
    .venv/bin/python bench/cluster.py --workloads commit-100-groups failover-kill9
    .venv/bin/python bench/cluster.py --profile bench/results/profile   # py-spy on the cluster

Workloads: ``produce``, ``commit-throughput`` and ``commit-latency`` are bench/workloads.py's
(the cluster's clients bootstrap from all three brokers and follow leaders and coordinators);
the new ones are

* ``commit-100-groups``: 100 groups (4 processes x 25 threads) each committing ``partitions``
  offsets synchronously in a loop, one commit in flight per group; offsets/s.
* ``failover-kill9`` / ``handoff-sigterm`` (cluster only): a client commits synchronously in a
  loop; at a random moment the coordinator of its group gets SIGKILL / SIGTERM; the figure is
  the time from the signal to the acknowledgement of the first commit sent after it, max and
  median over ``--failover-runs`` / ``--handoff-runs`` runs (the broker is restarted in between).
  Every run also checks that the last acknowledged commit is what the group reads back.
* ``share-vs-classic`` (offsetd, offsetd-cluster): bench/share_groups.py's, eight partitions read
  by eight ShareConsumers, then by a classic group of eight, 2 ms of work per record (issue 23):
  in the cluster the leaders are spread over the brokers and each acknowledgement's state goes
  to the share coordinator owning it, often another broker.
* ``shard-load`` (offsetd, offsetd-cluster): one ``__consumer_offsets`` partition filled with
  ``shard_groups x shard_topic_partitions x shard_rounds`` commit records through the Kafka API,
  then loaded: single-node, by restarting the broker on its segments; cluster, by stopping every
  broker and starting one with an empty ``log.dirs``, which copies the partition from PostgreSQL
  (from its first "leading" log line to the shard's) and replays it (the shard's "loaded" line).

``--profile DIR`` records every cluster broker with py-spy during ``produce``,
``commit-throughput`` and ``commit-100-groups`` and prints the top frames (raw stacks in DIR).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from confluent_kafka.admin import AdminClient  # noqa: E402

from bench import cluster_clients, share_groups  # noqa: E402
from bench.brokers import DEFAULT_OFFSETD_CONFIG, BrokerStartError, free_port, make_launcher  # noqa: E402
from bench.cluster_launcher import OFFSETS_TOPIC, ClusterLauncher  # noqa: E402
from bench.procs import ChildError, run_in_child, run_in_children, start_barrier  # noqa: E402
from bench.report import BrokerRun, Row, aggregate, failures, format_value, write_json  # noqa: E402
from bench.run import RESULTS_DIR, _interrupt, run_suite  # noqa: E402
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed  # noqa: E402
from bench.workload_steps import create_topic_and_wait  # noqa: E402
from bench.workloads import core_workloads  # noqa: E402
from offsetd.dev.broker import BrokerProcess  # noqa: E402
from offsetd.records.offsets import partition_for  # noqa: E402

BROKERS = ["offsetd", "offsetd-cluster", "tansu"]
CLUSTER = "offsetd-cluster"
SHARED = ["create_topic", "produce", "commit-throughput", "commit-latency"]  # bench/workloads.py's
PROFILED = {"produce", "commit-throughput", "commit-100-groups"}
#: The issue's targets, by metric key.
TARGETS = {
    "produce_mb_per_s": ">= 35 (3 brokers)",
    "commits_per_s": ">= 4,000",
    "commit_p99_ms": "<= 7",
    "group_offsets_per_s": ">= 40,000",
    "failover_max_s": "<= TTL + 2 s",
    "handoff_max_s": "<= 1",
    "handoff_gap_max_s": "<= 1",
    "failover_gap_max_s": "<= TTL + 2 s",
    "shard_records_per_s": ">= 0.8x single-node",
}
_SPAWN = multiprocessing.get_context("spawn")  # bench/procs.py's context
_TS = r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]"
_LEADING = re.compile(_TS + r" INFO \S+: leading (\S+)-(\d+) at epoch", re.MULTILINE)
_SHARD_LOADED = re.compile(_TS + r" INFO \S+: __consumer_offsets-(\d+): loaded (\d+) records in ([\d.]+) s",
                           re.MULTILINE)


@dataclass(frozen=True)
class ClusterConfig:
    """Parameters of the cluster workloads (the shared ones are BenchConfig's)."""

    ttl_ms: int = 3000
    heartbeat_ms: int = 1000
    groups: int = 100
    group_processes: int = 4
    group_duration_s: float = 5.0
    failover_runs: int = 20
    handoff_runs: int = 10
    failover_after_s: float = 0.2  # the client keeps committing this long after its first success
    failover_timeout_s: float = 60.0
    shard_ttl_ms: int = 30000
    shard_partition: int = 7  # the __consumer_offsets partition filled and loaded
    shard_topic: str = "bench-load"
    shard_groups: int = 2000
    shard_topic_partitions: int = 100
    shard_rounds: int = 2
    shard_in_flight: int = 50
    offsets_partitions: int = 50


# -- workloads ------------------------------------------------------------------------------


def commit_groups(cfg: BenchConfig, ccfg: ClusterConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """``ccfg.groups`` groups commit at once (see the module docstring); offsets/s."""
    run_id = uuid.uuid4().hex[:8]
    groups = [f"{cfg.group_id}-many-{run_id}-{i}" for i in range(ccfg.groups)]
    procs = ccfg.group_processes
    timeout = cfg.setup_timeout_s + ccfg.group_duration_s + 30.0
    barrier = start_barrier(procs)
    args = [(bootstrap, cfg.topic, cfg.partitions, groups[i::procs], ccfg.group_duration_s, timeout, barrier)
            for i in range(procs)]
    try:
        results = run_in_children(cluster_clients.group_committers, args, timeout_s=timeout + cfg.child_slack_s)
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    errors = sum(r.errors for r in results)
    wrong = [g for r in results for g in r.wrong_read_back]
    if errors or wrong:
        first = next((r.first_error for r in results if r.first_error), None)
        raise WorkloadFailed(f"{errors} commit errors (first: {first}); {len(wrong)} groups read back "
                             f"another offset than their last commit")
    elapsed = max(r.finished for r in results) - min(r.started for r in results)
    commits = sum(r.acked for r in results)
    rate = commits / max(ccfg.group_duration_s, 1e-9)
    print(f"  [{broker_name}] {ccfg.groups} groups: {commits:,} commits in {ccfg.group_duration_s:.0f} s "
          f"(with the read-back {elapsed:.1f} s)", flush=True)
    return {
        "group_offsets_per_s": Metric(f"{ccfg.groups} groups committing at once", "offsets/s", rate * cfg.partitions),
        "group_commits_per_s": Metric(f"{ccfg.groups} groups committing at once", "commits/s", rate),
    }


def failover(cfg: BenchConfig, ccfg: ClusterConfig, launcher: ClusterLauncher, graceful: bool, bootstrap: str,
             broker_name: str) -> dict[str, Metric]:
    """Signal the coordinator of a committing client's group, ``runs`` times; seconds from the
    signal to the first acknowledged commit sent after it (see the module docstring)."""
    runs = ccfg.handoff_runs if graceful else ccfg.failover_runs
    key = "handoff" if graceful else "failover"
    what = "SIGTERM" if graceful else "kill -9"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    times: list[float] = []
    gaps: list[float] = []
    claims: list[float] = []  # signal -> the new owner's "leading" line for the group's partition
    errors: Counter[str] = Counter()
    for run in range(runs):
        group = f"{cfg.group_id}-{key}-{uuid.uuid4().hex[:8]}"
        ready, kill_at = _SPAWN.Event(), _SPAWN.Value("d", 0.0)
        args = (launcher.bootstrap, cfg.topic, cfg.partitions, group, ready, kill_at, ccfg.failover_after_s,
                ccfg.failover_timeout_s)
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(run_in_child, cluster_clients.commit_through_failover, args,
                                 ccfg.failover_timeout_s + cfg.child_slack_s)
            if not ready.wait(cfg.setup_timeout_s):
                raise WorkloadFailed(f"run {run}: no commit acknowledged before the signal")
            node = _coordinator(admin, group)
            broker = launcher.brokers[node]
            time.sleep(random.uniform(0.05, 0.5))  # a random moment in the commit loop
            kill_at.value, kill_wall = time.monotonic(), time.time()
            os.kill(broker.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                res = future.result()
            except ChildError as exc:
                raise WorkloadFailed(f"run {run}: {exc}", exc.detail) from exc
        errors.update(res.error_kinds)
        if res.first_ack_after_kill is None:
            raise WorkloadFailed(f"run {run}: no commit acknowledged within {ccfg.failover_timeout_s:.0f} s "
                                 f"of the signal; errors {dict(res.error_kinds)}")
        if res.read_back != res.last_acked:
            raise WorkloadFailed(f"run {run}: group {group} reads back {res.read_back or res.read_back_error}, "
                                 f"its last acknowledged commit was {res.last_acked}")
        times.append(res.first_ack_after_kill - kill_at.value)
        gaps.append(res.longest_gap_s)
        claimed = _claimed_after(launcher, partition_for(group, ccfg.offsets_partitions), kill_wall)
        if claimed is not None:
            claims.append(claimed - kill_wall)
        try:
            broker.stop(launcher.stop_timeout_s)  # reaps it (already dead after SIGKILL)
            launcher.restart(node)
        except (AssertionError, BrokerStartError, subprocess.TimeoutExpired) as exc:
            raise WorkloadFailed(f"run {run}: broker {node} did not come back: {exc}") from exc
    print(f"  [{broker_name}] {key}: signal -> first commit sent after it acknowledged "
          f"{', '.join(f'{t:.3f}' for t in times)} s; longest wait between acknowledgements "
          f"{', '.join(f'{t:.3f}' for t in gaps)} s; new owner leading after {', '.join(f'{t:.3f}' for t in claims)} s"
          f"; client errors meanwhile: {dict(errors)}", flush=True)
    claim_metrics = {
        f"{key}_claim_max_s": Metric(f"{what}: signal -> new owner leads (its log), max of {len(claims)}", "s",
                                     max(claims), False),
    } if claims else {}
    return {**claim_metrics,
        f"{key}_max_s": Metric(f"{what} of the coordinator -> first commit after it, max of {runs}", "s",
                               max(times), False),
        f"{key}_median_s": Metric(f"{what} of the coordinator -> first commit after it, median of {runs}", "s",
                                  statistics.median(times), False),
        f"{key}_gap_max_s": Metric(f"{what}: longest wait between acknowledged commits, max of {runs}", "s",
                                   max(gaps), False),
        f"{key}_gap_median_s": Metric(f"{what}: longest wait between acknowledged commits, median of {runs}",
                                      "s", statistics.median(gaps), False),
    }


def _claimed_after(launcher: ClusterLauncher, partition: int, since: float) -> float | None:
    """When (wall clock) a live broker first logged leading ``__consumer_offsets-<partition>``
    after ``since``, or None."""
    stamps = [_stamp(m[1]) for b in launcher.brokers.values() if b.alive() for m in _LEADING.finditer(b.log())
              if m[2] == OFFSETS_TOPIC and int(m[3]) == partition]
    later = [t for t in stamps if t >= since - 0.001]
    return min(later) if later else None


def _coordinator(admin: AdminClient, group: str) -> int:
    """The node id of ``group``'s coordinator, as DescribeGroups' FindCoordinator names it."""
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return int(description.coordinator.id)


def shard_load(cfg: BenchConfig, ccfg: ClusterConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Fill and load one ``__consumer_offsets`` partition (see the module docstring); uses
    brokers of its own, not the suite's."""
    groups = _groups_of_partition(ccfg)
    if broker_name == CLUSTER:
        # A long lease: a broker claiming every partition at once copies them all in one
        # heartbeat round, which with a 3 s lease outlives the lease and fails the load.
        launcher = ClusterLauncher(Path(cfg.offsetd_config), ttl_ms=ccfg.shard_ttl_ms, heartbeat_ms=ccfg.heartbeat_ms)
        try:
            _fill_shard(cfg, ccfg, launcher.start(), groups)
            records, replay_s, copy_s = _load_from_postgres(ccfg, launcher)
        except BrokerStartError as exc:
            raise WorkloadFailed(str(exc)) from exc
        finally:
            launcher.stop()
            for line in launcher.errors:
                print(f"  [{broker_name}] shard-load broker log: {line}", flush=True)
    else:
        records, replay_s, copy_s = _load_from_segments(cfg, ccfg, groups)
    label = f"load of one __consumer_offsets partition ({records:,} records)"
    metrics = {
        "shard_records_per_s": Metric(label, "records/s", records / (replay_s + copy_s)),
        "shard_load_s": Metric(f"{label}: total", "s", replay_s + copy_s, False),
        "shard_replay_s": Metric(f"{label}: replay", "s", replay_s, False),
    }
    if broker_name == CLUSTER:
        metrics["shard_copy_s"] = Metric(f"{label}: copy from PostgreSQL", "s", copy_s, False)
    return metrics


def _groups_of_partition(ccfg: ClusterConfig) -> list[str]:
    """``shard_groups`` group ids that all map to ``__consumer_offsets-<shard_partition>``."""
    groups: list[str] = []
    i = 0
    while len(groups) < ccfg.shard_groups:
        name = f"load-{i}"
        if partition_for(name, ccfg.offsets_partitions) == ccfg.shard_partition:
            groups.append(name)
        i += 1
    return groups


def _fill_shard(cfg: BenchConfig, ccfg: ClusterConfig, bootstrap: str, groups: list[str]) -> None:
    """Create the shard topic and commit every group's offsets ``shard_rounds`` times."""
    create_topic_and_wait(bootstrap, ccfg.shard_topic, ccfg.shard_topic_partitions, cfg.setup_timeout_s)
    timeout = 600.0
    try:
        written, error = run_in_child(cluster_clients.load_shard,
                                      (bootstrap, ccfg.shard_topic, ccfg.shard_topic_partitions, groups,
                                       ccfg.shard_rounds, ccfg.shard_in_flight, timeout),
                                      timeout + cfg.child_slack_s)
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    expected = len(groups) * ccfg.shard_topic_partitions * ccfg.shard_rounds
    if error or written != expected:
        raise WorkloadFailed(f"filling the shard: {written:,}/{expected:,} offsets committed; first error {error}")


def _wait_for(broker: BrokerProcess, pattern: re.Pattern[str], since: int, timeout_s: float) -> re.Match[str]:
    """The first match of ``pattern`` in the broker's log after character ``since``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = pattern.search(broker.log(), since)
        if match:
            return match
        if not broker.alive():
            raise WorkloadFailed(f"broker exited while loading: {broker.log()[-2000:]}")
        time.sleep(0.05)
    raise WorkloadFailed(f"no {pattern.pattern!r} in the broker's log within {timeout_s:.0f} s")


def _shard_loaded(ccfg: ClusterConfig, broker: BrokerProcess, since: int) -> re.Match[str]:
    """The shard's "loaded" line (one per partition load; coordinator_runtime.py)."""
    while True:
        match = _wait_for(broker, _SHARD_LOADED, since, 120.0)
        if int(match[2]) == ccfg.shard_partition:
            return match
        since = match.end()


def _load_from_segments(cfg: BenchConfig, ccfg: ClusterConfig, groups: list[str]) -> tuple[int, float, float]:
    """Single node: fill the shard, restart the broker on its data; (records, replay s, 0)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-shard-"))
    broker = BrokerProcess(directory / "data", config=Path(cfg.offsetd_config), start_new_session=True)
    broker.port = free_port()
    try:
        broker.start(60)
        _fill_shard(cfg, ccfg, broker.bootstrap, groups)
        broker.stop(60)
        since = len(broker.log())
        broker.start(120)
        match = _shard_loaded(ccfg, broker, since)
        return int(match[3]), float(match[4]), 0.0
    except AssertionError as exc:
        raise WorkloadFailed(str(exc)) from exc
    finally:
        if broker.alive():
            broker.stop(60)
        shutil.rmtree(directory, ignore_errors=True)


def _load_from_postgres(ccfg: ClusterConfig, launcher: ClusterLauncher) -> tuple[int, float, float]:
    """Cluster: stop every broker, start node 1 on an empty ``log.dirs``; (records, replay s,
    copy s). The copy runs from the broker's first "leading" line (it claims every partition at
    once, concurrently) to the shard's own, logged once its copy is up to PostgreSQL's end."""
    for broker in launcher.brokers.values():  # one at a time: the last one releases everything
        broker.stop(launcher.stop_timeout_s)
    assert launcher.pg is not None
    fresh = launcher._broker(1, launcher.pg.dsn("offsetd"), "broker-1-empty")
    launcher.errors += launcher.broker_errors()
    launcher.brokers = {1: fresh}
    try:
        fresh.start(60)
    except AssertionError as exc:
        raise WorkloadFailed(str(exc)) from exc
    loaded = _shard_loaded(ccfg, fresh, 0)
    leading = [m for m in _LEADING.finditer(fresh.log()) if m.start() < loaded.start()]
    mine = [m for m in leading if m[2] == OFFSETS_TOPIC and int(m[3]) == ccfg.shard_partition]
    if not mine:
        raise WorkloadFailed("no 'leading' line for the shard in the broker's log")
    copy_s = _stamp(mine[0][1]) - _stamp(leading[0][1])
    return int(loaded[3]), float(loaded[4]), copy_s


def _stamp(text: str) -> float:
    """A broker log timestamp (``2026-11-23 17:51:56,830``) as seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S,%f").timestamp()


# -- the suite ------------------------------------------------------------------------------


def suite(cfg: BenchConfig, ccfg: ClusterConfig, launcher: Any, names: list[str] | None) -> list[Workload]:
    """The workloads for one launcher (the failover ones are bound to it), in run order."""
    shared = {w.name: w for w in core_workloads(cfg)}
    workloads = [shared[name] for name in SHARED] + [
        Workload("commit-100-groups", partial(commit_groups, cfg, ccfg), requires=("create_topic",)),
        Workload("failover-kill9", partial(failover, cfg, ccfg, launcher, False), requires=("create_topic",),
                 brokers=(CLUSTER,)),
        Workload("handoff-sigterm", partial(failover, cfg, ccfg, launcher, True), requires=("create_topic",),
                 brokers=(CLUSTER,)),
        Workload("shard-load", partial(shard_load, cfg, ccfg), brokers=("offsetd", CLUSTER),
                 not_applicable="offsetd only (its __consumer_offsets segments or PostgreSQL)"),
        Workload("share-vs-classic", partial(share_groups.classic_workload, share_groups.ShareConfig()),
                 brokers=("offsetd", CLUSTER), not_applicable=share_groups.NOT_APPLICABLE),
    ]
    if names:
        wanted = set(names)
        for w in workloads:
            if w.name in wanted:
                wanted.update(w.requires)
        workloads = [w for w in workloads if w.name in wanted]
    return workloads


def profiled(workloads: list[Workload], launcher: ClusterLauncher, directory: Path) -> list[Workload]:
    """The same workloads, with py-spy recording every broker during the PROFILED ones."""
    return [replace(w, run=partial(_under_py_spy, w.run, w.name, launcher, directory)) if w.name in PROFILED else w
            for w in workloads]


def _under_py_spy(run: Any, name: str, launcher: ClusterLauncher, directory: Path, *args: Any,
                  **kwargs: Any) -> dict[str, Metric]:
    """Run the workload while ``py-spy record`` samples each broker; print the top frames."""
    directory.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).parent / "py-spy"
    recorders = {}
    for node, pid in launcher.pids().items():
        out = directory / f"{name}-broker{node}.txt"
        recorders[node] = (out, subprocess.Popen(
            [str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--nonblocking",
             "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)  # py-spy attaches
    try:
        return run(*args, **kwargs)
    finally:
        for out, proc in recorders.values():
            proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        for out, proc in recorders.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print(summarize_profile([out for out, _ in recorders.values()], name), flush=True)


def summarize_profile(paths: list[Path], name: str, top: int = 12) -> str:
    """Top frames of py-spy raw (collapsed) stacks: own samples and samples under each frame."""
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    total = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = stack.split(";")[1:]  # the first is the process/thread
            n = int(count)
            total += n
            if frames:
                own[frames[-1]] += n
            for frame in set(frames):
                under[frame] += n
    if not total:
        return f"  profile {name}: no samples"
    lines = [f"  profile {name}: {total:,} samples over {len(paths)} brokers; own time:"]
    lines += [f"    {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    lines.append("  inclusive (time under the frame):")
    lines += [f"    {100 * n / total:5.1f}%  {frame}" for frame, n in under.most_common(top * 2)]
    return "\n".join(lines)


# -- the table ------------------------------------------------------------------------------


def _cell(values: list[float], unit: str) -> str:
    """median (min-max) of a broker's figures."""
    if not values:
        return "-"
    text = format_value(statistics.median(values), unit)
    if len(values) > 1:
        text += f" ({format_value(min(values), unit)}-{format_value(max(values), unit)})"
    return text


def _ratio(row: Row, a: str, b: str) -> str:
    """Median of ``a`` over median of ``b``."""
    va, vb = row.cells[a].values, row.cells[b].values
    if not va or not vb or statistics.median(vb) == 0:
        return "-"
    return f"{statistics.median(va) / statistics.median(vb):.2f}x"


def format_table(rows: list[Row], brokers: list[str], repeat: int) -> str:
    """metric | each broker: median (min-max) | cluster/single | cluster/Tansu | target."""
    header = ["metric", *brokers, "cluster/offsetd", "cluster/tansu", "target"]
    body = []
    for row in rows:
        if not row.key:
            texts = [row.cells[b].text("") for b in brokers]
            body.append([row.label, *texts, "-", "-", ""])
            continue
        texts = []
        for b in brokers:
            cell = row.cells[b]
            ok_values = cell.values if cell.values and not cell.failed else []
            texts.append(_cell(ok_values, row.unit) if ok_values
                         else "-" if cell.ok == cell.runs else cell.text(row.unit))
        ratios = [_ratio(row, CLUSTER, b) if CLUSTER in brokers and b in brokers else "-"
                  for b in ("offsetd", "tansu")]
        body.append([f"{row.label} {row.unit}", *texts, *ratios, TARGETS.get(row.key, "")])
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [header, *body]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    lines.append(f"(median (min-max) of {repeat} runs; ratios of medians; MB/s = 10^6 B of values per second)")
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="+", choices=BROKERS, help="run only these brokers")
    p.add_argument("--workloads", nargs="+", metavar="NAME", help="run only these workloads (and what they need)")
    p.add_argument("--repeat", type=int, default=3, help="repetitions per broker (default 3)")
    p.add_argument("--messages", type=int, default=BenchConfig().messages, help="records for produce")
    p.add_argument("--failover-runs", type=int, default=ClusterConfig().failover_runs)
    p.add_argument("--handoff-runs", type=int, default=ClusterConfig().handoff_runs)
    p.add_argument("--ttl-ms", type=int, default=ClusterConfig().ttl_ms, help="broker.session.timeout.ms")
    p.add_argument("--offsetd-config", type=Path, default=DEFAULT_OFFSETD_CONFIG)
    p.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the cluster's brokers into DIR")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = p.parse_args(argv)
    if args.workloads:
        args.workloads = [n for item in args.workloads for n in item.split(",") if n]
    return args


def _code_version() -> dict[str, object]:
    """The commit measured and the files changed on top of it (the brokers run the work tree)."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent.parent).stdout

    return {"commit": git("rev-parse", "--short", "HEAD").strip(),
            "changed": [line[3:] for line in git("status", "--porcelain", "--", "src").splitlines()]}


def make(name: str, cfg: BenchConfig, ccfg: ClusterConfig) -> Any:
    """A fresh launcher for ``name``."""
    if name == CLUSTER:
        return ClusterLauncher(Path(cfg.offsetd_config), ttl_ms=ccfg.ttl_ms, heartbeat_ms=ccfg.heartbeat_ms)
    return make_launcher(name, Path(cfg.offsetd_config))


def main(argv: list[str] | None = None) -> int:
    """Run every broker's suite ``--repeat`` times (order rotating), print and save the table."""
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # unwind, so every launcher stops its processes
        signal.signal(sig, _interrupt)
    cfg = BenchConfig(messages=args.messages, offsetd_config=str(args.offsetd_config))
    ccfg = ClusterConfig(ttl_ms=args.ttl_ms, heartbeat_ms=min(1000, args.ttl_ms // 3),
                         failover_runs=args.failover_runs, handoff_runs=args.handoff_runs)
    selected = args.only or BROKERS
    code = _code_version()
    print(f"code: {code}", flush=True)
    names = [w.name for w in suite(cfg, ccfg, None, args.workloads)]
    print(f"cluster bench: {', '.join(names)}; brokers {', '.join(selected)}; repeat {args.repeat}; "
          f"TTL {ccfg.ttl_ms} ms", flush=True)
    runs: list[BrokerRun] = []
    broker_errors: list[str] = []
    for rep in range(args.repeat):
        shift = rep % len(selected)
        for name in selected[shift:] + selected[:shift]:
            launcher = make(name, cfg, ccfg)
            workloads = suite(cfg, ccfg, launcher, args.workloads)
            if args.profile and name == CLUSTER:
                workloads = profiled(workloads, launcher, args.profile / f"run{rep + 1}")
            runs.append(run_suite(launcher, workloads, rep))
            broker_errors += [f"run {rep + 1}: {e}" for e in getattr(launcher, "errors", [])]
    rows = aggregate(runs, BROKERS, names)
    print()
    print(format_table(rows, [b for b in BROKERS if b in selected], args.repeat))
    problems = failures(runs)
    for line in ["", "Failures:", *problems] if problems else []:
        print(f"  {line}" if line and line != "Failures:" else line)
    if broker_errors:
        print(f"\nERROR lines in the cluster brokers' logs ({len(broker_errors)}):")
        for line in broker_errors[:40]:
            print(f"  {line}")
    path = write_json(args.results_dir, config={**asdict(cfg), **asdict(ccfg), "repeat": args.repeat,
                                                "brokers": selected, "workloads": names, "kind": "cluster"},
                      environment={"python": sys.version.split()[0], "cpu_count": os.cpu_count(), **code},
                      runs=runs, rows=rows, brokers=BROKERS)
    print(f"\nresults: {path}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
