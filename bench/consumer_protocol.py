"""The KIP-848 consumer-group workloads (issue 22, "Measured"): offsetd's consumer protocol
(``group.protocol=consumer``, ConsumerGroupHeartbeat API 68) side by side with offsetd's classic
protocol on the same workload. Tansu does not serve KIP-848, so every workload here is offsetd
only and the classic column is offsetd's too. ``bench/run.py --workloads kip848`` runs them all.

* ``cp-rebalance``: a topic of ``CpConfig.partitions`` (64) partitions that a producer writes
  ``produce_per_s`` records/s to; three members (one process each, blocking in ``consume()``)
  read it as fast as it comes (a topic filled ahead is no test: a member reads ~3M records/s of
  it and is at its end within a second); once they hold their shares and have read for
  ``warmup_s``, a fourth subscribes. Figures per protocol (consumer;
  classic eager, librdkafka's default ``range,roundrobin``; classic ``cooperative-sticky``): the
  time from the fourth's ``subscribe()`` to a stable 4-member assignment (every member holds
  16 partitions, seen from the clients' ``assignment()``), and what the other three consumed
  meanwhile in 100 ms buckets: the longest run of buckets in which a member read nothing, and
  the three's records/s from the subscribe to the stable assignment (it follows the producer's
  rate, less the fourth's share once it reads, when nobody stops).
* ``cp-heartbeats``: ``members`` members in ``groups`` groups, all subscribed to one topic, joined
  and reconciled to a stable assignment with raw heartbeats, then driven by ``hb_processes``
  client processes over ``hb_connections`` connections each: (1) closed loop, every member at
  most one heartbeat in flight and ``hb_window`` per connection, for the most heartbeats/s;
  (2) open loop at ``hb_target_per_s`` for the latency at that rate (measured from each
  heartbeat's scheduled send time, so a stall is not hidden). The broker's CPU share over each.
* ``cp-load``: ``load_members`` members in groups that all hash to one ``__consumer_offsets``
  partition, joined and reconciled with raw heartbeats on a broker of its own (sessions of 15 min,
  so none set up early expires while the rest join); the broker is stopped (SIGTERM) and started
  on the same data; figure: process start to the first
  ConsumerGroupDescribe that answers every probed group with all its members (not
  COORDINATOR_LOAD_IN_PROGRESS), and the partition's load time from the broker's log.

Raw requests go through ``bench.raw_client`` (kio, not offsetd's codec). The clients run in
spawned processes (``bench.procs``).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import re
import selectors
import shutil
import socket
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from bench.brokers import BrokerStartError, OffsetdBroker
from bench.procs import ChildError, run_in_children, start_barrier
from bench.raw_client import RawConnection, encode_request
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed
from bench.workload_steps import create_topic_and_wait, percentile
from offsetd.dev.proc_stats import cpu_s

GROUP = "kip848"
NOT_APPLICABLE = "offsetd only: Tansu does not serve KIP-848; the classic side runs on offsetd"
HEARTBEAT, DESCRIBE = 68, 69
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR = 14, 16
#: Classic-protocol consumers: librdkafka's default assignors (eager) and cooperative-sticky.
PROTOCOLS = {"consumer": {"group.protocol": "consumer"},
             "classic-eager": {"group.protocol": "classic"},
             "classic-cooperative": {"group.protocol": "classic",
                                     "partition.assignment.strategy": "cooperative-sticky"}}


@dataclass(frozen=True)
class CpConfig:
    """Parameters of the KIP-848 workloads (defaults: the issue's sizes)."""

    # cp-rebalance
    partitions: int = 64
    #: Records/s a producer writes (round robin) while the members read: a pre-filled topic is
    #: no test here, a member reads ~3M records/s of it and is at the end within a second.
    produce_per_s: int = 60_000
    value_size: int = 100
    warmup_s: float = 2.0
    #: Stable this long with 4 x 16 partitions before the members stop (stops are looked for
    #: until then too).
    hold_s: float = 2.0
    rebalance_timeout_s: float = 60.0
    bucket_s: float = 0.1
    #: Small local queues and a short back-off, so what the application reads follows what is
    #: fetched (librdkafka's 64 MB queue would hide a stop; its 1 s fetch.queue.backoff.ms stalls).
    consumer_conf: dict[str, object] = field(default_factory=lambda: {
        "queued.max.messages.kbytes": 4096, "queued.min.messages": 20_000, "fetch.queue.backoff.ms": 10})
    protocols: tuple[str, ...] = tuple(PROTOCOLS)
    # cp-heartbeats
    groups: int = 100
    members: int = 1000
    hb_topic_partitions: int = 20
    hb_processes: int = 2
    hb_connections: int = 4
    hb_window: int = 8
    hb_target_per_s: float = 5000.0
    hb_warmup_s: float = 1.0
    hb_duration_s: float = 5.0
    # cp-load
    load_members: int = 10_000
    load_group_size: int = 10
    load_topic_partitions: int = 10
    load_offsets_partition: int = 7
    load_probes: int = 20
    setup_processes: int = 4
    setup_timeout_s: float = 600.0
    load_timeout_s: float = 300.0
    child_slack_s: float = 30.0

    def scaled(self, factor: float) -> CpConfig:
        """Member counts and groups times ``factor`` (a moderate run)."""
        if factor == 1:
            return self
        return dataclasses.replace(self, groups=max(1, round(self.groups * factor)),
                                   members=max(1, round(self.members * factor)),
                                   load_members=max(self.load_group_size, round(self.load_members * factor)))


# -- raw ConsumerGroupHeartbeat / ConsumerGroupDescribe ----------------------------------------


def heartbeat_body(group: str, member_id: str, epoch: int, topics: tuple[str, ...] | None = None,
                   owned: tuple[tuple[uuid.UUID, tuple[int, ...]], ...] | None = None) -> Any:
    """ConsumerGroupHeartbeat v1: a join (epoch 0, ``topics``), a full heartbeat with the
    ``owned`` partitions, or (neither) a steady one where every optional field is null."""
    from kio.index import load_request_schema

    cls = load_request_schema(HEARTBEAT, 1)
    mod = __import__(cls.__module__, fromlist=["TopicPartitions"])
    tps = None if owned is None else tuple(mod.TopicPartitions(topic_id=t, partitions=p) for t, p in owned)
    return cls(group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
               rebalance_timeout=datetime.timedelta(milliseconds=30_000 if epoch == 0 else -1),
               subscribed_topic_names=topics, subscribed_topic_regex=None, server_assignor=None,
               topic_partitions=() if epoch == 0 else tps)


@dataclass
class JoinedMember:
    """A member reconciled to a stable assignment: what a steady heartbeat needs."""

    group: str
    member_id: str
    epoch: int


def join_groups(bootstrap: str, groups: list[str], group_size: int, topic: str, max_rounds: int = 50
                ) -> tuple[list[JoinedMember], int]:
    """Join ``group_size`` members to each group, then heartbeat every member with the partitions
    it was last given (acknowledging them at once) until a whole round changes nothing.
    Returns the members and the calls made."""
    conn = RawConnection(bootstrap)
    joined: list[JoinedMember] = []
    calls = 0
    try:
        for group in groups:
            state: dict[str, tuple[int, tuple]] = {}
            for i in range(group_size):
                member_id = f"{group}-m{i}-{uuid.uuid4().hex[:8]}"
                resp = conn.call(HEARTBEAT, 1, heartbeat_body(group, member_id, 0, topics=(topic,)))
                calls += 1
                _check(resp, group)
                state[member_id] = (resp.member_epoch, _owned(resp.assignment))
            for _ in range(max_rounds):
                changed = False
                for member_id, (epoch, owned) in list(state.items()):
                    resp = conn.call(HEARTBEAT, 1, heartbeat_body(group, member_id, epoch, owned=owned))
                    calls += 1
                    _check(resp, group)
                    new = owned if resp.assignment is None else _owned(resp.assignment)
                    if resp.member_epoch != epoch or new != owned:
                        changed = True
                    state[member_id] = (resp.member_epoch, new)
                if not changed:
                    break
            else:
                raise RuntimeError(f"group {group} not stable after {max_rounds} rounds")
            joined += [JoinedMember(group, m, e) for m, (e, _) in state.items()]
    finally:
        conn.close()
    return joined, calls


def _owned(assignment: Any) -> tuple:
    """A heartbeat response's assignment as ((topic id, partitions), ...)."""
    if assignment is None:
        return ()
    return tuple(sorted((tp.topic_id, tuple(sorted(tp.partitions))) for tp in assignment.topic_partitions))


def _check(resp: Any, group: str) -> None:
    """Raise unless a heartbeat response has no error."""
    code = int(resp.error_code.value) if hasattr(resp.error_code, "value") else int(resp.error_code)
    if code:
        raise RuntimeError(f"heartbeat in {group}: error {code} {resp.error_message}")


# -- heartbeat load (client processes) --------------------------------------------------------


@dataclass
class LoadResult:
    """One client process's timed section."""

    answered: int = 0
    errors: int = 0
    first_error: str = ""
    elapsed_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    #: Scheduled heartbeats skipped because the member's previous one was still unanswered.
    skipped: int = 0
    broker_cpu_s: float | None = None


def heartbeat_load(bootstrap: str, members: list[tuple[str, str, int]], connections: int, window: int,
                   rate_per_s: float | None, warmup_s: float, duration_s: float, barrier: Any,
                   broker_pid: int | None) -> LoadResult:
    """Steady heartbeats (every optional field null) from ``members`` over ``connections``
    connections: closed loop with at most ``window`` in flight per connection (``rate_per_s``
    None), else open loop at ``rate_per_s`` (members in turn; one whose previous heartbeat is
    unanswered skips its turn). Each member has at most one heartbeat in flight. After
    ``warmup_s`` the process waits at ``barrier``, then counts for ``duration_s``."""
    socks = []
    host, port = bootstrap.rsplit(":", 1)
    for _ in range(connections):
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)  # blocking: recv only after select says readable
    # frame per member, correlation id patched at bytes 8..12
    frames = [bytearray(encode_request(HEARTBEAT, 1, heartbeat_body(g, m, e), 0)) for g, m, e in members]
    conn_of = [i % connections for i in range(len(members))]
    idle = [collections.deque(i for i in range(len(members)) if conn_of[i] == c) for c in range(connections)]
    in_flight: list[dict[int, tuple[int, float]]] = [{} for _ in range(connections)]  # corr -> (member, t)
    busy = [False] * len(members)
    bufs = [bytearray() for _ in range(connections)]
    outs = [bytearray() for _ in range(connections)]  # frames to send, one sendall per connection
    sel = selectors.DefaultSelector()
    for c, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, c)
    corr = 0
    res = LoadResult()
    counting = False

    def send(member: int, intended: float) -> None:
        """Queue one heartbeat of ``member`` (flush() sends it)."""
        nonlocal corr
        corr += 1
        c = conn_of[member]
        frame = frames[member]
        frame[8:12] = corr.to_bytes(4, "big")
        outs[c] += frame
        in_flight[c][corr] = (member, intended)
        busy[member] = True

    def flush() -> None:
        for c, out in enumerate(outs):
            if out:
                socks[c].sendall(out)
                out.clear()

    def receive(timeout: float) -> None:
        for key, _ in sel.select(timeout):
            c = key.data
            chunk = socks[c].recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed a connection")
            buf = bufs[c]
            buf += chunk
            now = time.perf_counter()
            while len(buf) >= 4:
                size = int.from_bytes(buf[0:4], "big")
                if len(buf) < 4 + size:
                    break
                cid = int.from_bytes(buf[4:8], "big")
                error = int.from_bytes(buf[13:15], "big", signed=True)  # corr, tags, throttle
                del buf[:4 + size]
                member, intended = in_flight[c].pop(cid)
                busy[member] = False
                if rate_per_s is None:
                    idle[c].append(member)
                if counting:
                    res.answered += 1
                    res.latencies_ms.append((now - intended) * 1000)
                    if error:
                        res.errors += 1
                        res.first_error = res.first_error or f"error code {error} for {members[member][:2]}"

    def run_for(seconds: float) -> None:
        end = time.perf_counter() + seconds
        if rate_per_s is None:
            while time.perf_counter() < end:
                for c in range(connections):
                    while idle[c] and len(in_flight[c]) < window:
                        send(idle[c].popleft(), time.perf_counter())
                flush()
                receive(0.05)
            return
        start = time.perf_counter()
        turn = 0
        while (now := time.perf_counter()) < end:
            due = int((now - start) * rate_per_s) + 1  # turn t is due at start + t / rate
            while turn < due:
                member = turn % len(members)
                intended = start + turn / rate_per_s
                turn += 1
                if busy[member]:
                    if counting:
                        res.skipped += 1
                    continue
                send(member, intended)
            flush()
            receive(max(0.0, min(0.005, start + turn / rate_per_s - time.perf_counter())))

    def drain() -> None:
        deadline = time.perf_counter() + 30
        while any(in_flight) and time.perf_counter() < deadline:
            receive(0.05)

    try:
        run_for(warmup_s)
        drain()
        barrier.wait(60)
        counting = True
        cpu0 = (cpu_s(broker_pid) or 0.0) if broker_pid else None
        began = time.perf_counter()
        run_for(duration_s)
        res.elapsed_s = time.perf_counter() - began
        if broker_pid and cpu0 is not None:
            res.broker_cpu_s = (cpu_s(broker_pid) or 0.0) - cpu0
        counting = False
        drain()
    finally:
        for s in socks:
            s.close()
    return res


# -- cp-heartbeats ------------------------------------------------------------------------------


def _join_in_children(bootstrap: str, groups: list[str], group_size: int, topic: str, processes: int,
                      timeout_s: float) -> tuple[list[JoinedMember], int, float]:
    """join_groups over ``processes`` processes (groups dealt round robin); (members, calls, s)."""
    began = time.monotonic()
    shares = [groups[i::processes] for i in range(processes) if groups[i::processes]]
    try:
        results = run_in_children(join_groups, [(bootstrap, share, group_size, topic) for share in shares],
                                  timeout_s)
    except ChildError as exc:
        raise WorkloadFailed(f"joining the members: {exc}", exc.detail) from exc
    return [m for ms, _ in results for m in ms], sum(c for _, c in results), time.monotonic() - began


def heartbeats_workload(ccfg: CpConfig, bootstrap: str, broker_name: str,
                        broker_pid: int | None = None) -> dict[str, Metric]:
    """Join and reconcile the members, then the closed-loop and open-loop heartbeat phases."""
    run_id = uuid.uuid4().hex[:8]
    topic = f"cp-hb-{run_id}"
    create_topic_and_wait(bootstrap, topic, ccfg.hb_topic_partitions, 60)
    size = ccfg.members // ccfg.groups
    groups = [f"cp-hb-{run_id}-g{i}" for i in range(ccfg.groups)]
    joined, calls, setup_s = _join_in_children(bootstrap, groups, size, topic, ccfg.setup_processes,
                                               ccfg.setup_timeout_s)
    print(f"  [{broker_name}] cp-heartbeats: {len(joined):,} members in {len(groups)} groups joined and "
          f"stable in {setup_s:.1f} s ({calls:,} heartbeats)", flush=True)
    triples = [(m.group, m.member_id, m.epoch) for m in joined]
    shares = [triples[i::ccfg.hb_processes] for i in range(ccfg.hb_processes)]
    metrics: dict[str, Metric] = {}
    for mode, rate in (("max", None), ("paced", ccfg.hb_target_per_s)):
        barrier = start_barrier(ccfg.hb_processes)
        per_proc = None if rate is None else rate / ccfg.hb_processes
        args = [(bootstrap, share, ccfg.hb_connections, ccfg.hb_window, per_proc, ccfg.hb_warmup_s,
                 ccfg.hb_duration_s, barrier, broker_pid if i == 0 else None) for i, share in enumerate(shares)]
        try:
            results = run_in_children(heartbeat_load, args, ccfg.hb_warmup_s + ccfg.hb_duration_s + 120)
        except ChildError as exc:
            raise WorkloadFailed(f"heartbeats ({mode}): {exc}", exc.detail) from exc
        errors = sum(r.errors for r in results)
        if errors:
            raise WorkloadFailed(f"heartbeats ({mode}): {errors} errors, first: "
                                 f"{next(r.first_error for r in results if r.first_error)}")
        answered = sum(r.answered for r in results)
        elapsed = max(r.elapsed_s for r in results)
        lat = sorted(x for r in results for x in r.latencies_ms)
        if not lat:
            raise WorkloadFailed(f"heartbeats ({mode}): no answer in the timed section")
        cpu = next((r.broker_cpu_s for r in results if r.broker_cpu_s is not None), None)
        skipped = sum(r.skipped for r in results)
        label = ("closed loop" if rate is None else f"offered {rate:,.0f}/s") + f", {len(joined):,} members"
        print(f"  [{broker_name}] cp-heartbeats {mode}: {answered / elapsed:,.0f}/s answered, p50 "
              f"{percentile(lat, 50):.2f} ms, p99 {percentile(lat, 99):.2f} ms, max {lat[-1]:.1f} ms, "
              f"{skipped} skipped turns, broker CPU {100 * (cpu or 0) / elapsed:.0f}%", flush=True)
        metrics[f"cp_hb_{mode}_per_s"] = Metric(f"KIP-848 heartbeats ({label})", "hb/s", answered / elapsed)
        metrics[f"cp_hb_{mode}_p50_ms"] = Metric(f"KIP-848 heartbeat p50 ({label})", "ms", percentile(lat, 50), False)
        metrics[f"cp_hb_{mode}_p99_ms"] = Metric(f"KIP-848 heartbeat p99 ({label})", "ms", percentile(lat, 99), False)
        if cpu is not None:
            metrics[f"cp_hb_{mode}_broker_cpu_pct"] = Metric(f"KIP-848 heartbeats: broker CPU ({label})", "%",
                                                            100 * cpu / elapsed, False)
    return metrics


# -- cp-load ------------------------------------------------------------------------------------


def groups_on_partition(prefix: str, partition: int, count: int, offsets_partitions: int = 50) -> list[str]:
    """``count`` group ids that Kafka's hash puts on ``__consumer_offsets`` ``partition``."""
    from offsetd.records.offsets import partition_for

    found: list[str] = []
    i = 0
    while len(found) < count:
        name = f"{prefix}-{i}"
        if partition_for(name, offsets_partitions) == partition:
            found.append(name)
        i += 1
    return found


def describe_until_served(bootstrap: str, groups: list[str], expect_members: int, deadline: float
                          ) -> tuple[float, int]:
    """ConsumerGroupDescribe ``groups`` until every one answers without error and with
    ``expect_members`` members; returns (time.monotonic() then, load-in-progress answers)."""
    from kio.index import load_request_schema

    body = load_request_schema(DESCRIBE, 0)(group_ids=tuple(groups), include_authorized_operations=False)
    loading = 0
    conn: RawConnection | None = None
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            conn = conn or RawConnection(bootstrap, timeout=10)
            resp = conn.call(DESCRIBE, 0, body)
        except OSError as exc:
            last = str(exc)
            if conn:
                conn.close()
            conn = None
            time.sleep(0.01)
            continue
        codes = [int(g.error_code.value) if hasattr(g.error_code, "value") else int(g.error_code)
                 for g in resp.groups]
        if any(c in (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) for c in codes):
            loading += 1
            time.sleep(0.005)
            continue
        bad = [(g.group_id, c, len(g.members)) for g, c in zip(resp.groups, codes)
               if c or len(g.members) != expect_members]
        if bad:
            raise WorkloadFailed(f"after the restart: group, error, members = {bad[:3]} "
                                 f"(expected {expect_members} members, no error)")
        conn.close()
        return time.monotonic(), loading
    raise WorkloadFailed(f"groups not served before the deadline: {last}")


class _LoadBroker(OffsetdBroker):
    """The cp-load broker: consumer-group sessions long enough that no member set up early
    expires while the others join (the set-up takes longer than the 45 s default), and a data
    directory that can be kept when it stops."""

    #: group.consumer.session.timeout.ms (and its upper bound) for this broker.
    session_timeout_ms = 900_000

    def command(self, port: int, data_dir: Path) -> list[str]:
        ms = str(self.session_timeout_ms)
        return [*super().command(port, data_dir),
                "--override", f"group.consumer.max.session.timeout.ms={ms}",
                "--override", f"group.consumer.session.timeout.ms={ms}"]

    def stop_keeping(self, into: Path) -> None:
        """SIGTERM the broker, then move its data directory to ``into`` and clean up."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        assert self.workdir is not None
        shutil.move(str(self.workdir / "data"), str(into))
        self.stop()


def _copy_data(source: Path, data_dir: Path) -> None:
    """A launcher's seed: the kept data directory in place of the fresh, empty one."""
    data_dir.rmdir()
    shutil.copytree(source, data_dir)


_PARTITION_LOADED = r"__consumer_offsets-{p}: loaded (?P<records>\d+) records in (?P<seconds>[\d.]+) s"


def load_workload(ccfg: CpConfig, cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """Fill one ``__consumer_offsets`` partition with ``load_members`` members' records through a
    broker of its own, restart it on that data, and time the load (see the module)."""
    import tempfile

    run_id = uuid.uuid4().hex[:6]
    p = ccfg.load_offsets_partition
    groups = groups_on_partition(f"cp-load-{run_id}", p, ccfg.load_members // ccfg.load_group_size)
    topic = f"cp-load-{run_id}"
    with tempfile.TemporaryDirectory(prefix="cp-load-") as scratch:
        first = _LoadBroker(config=Path(cfg.offsetd_config))
        try:
            try:
                first.start()
            except BrokerStartError as exc:
                raise WorkloadFailed(f"offsetd did not start: {exc}") from exc
            create_topic_and_wait(first.bootstrap, topic, ccfg.load_topic_partitions, 60)
            joined, calls, setup_s = _join_in_children(first.bootstrap, groups, ccfg.load_group_size, topic,
                                                       ccfg.setup_processes, ccfg.setup_timeout_s)
            print(f"  [{broker_name}] cp-load: {len(joined):,} members in {len(groups):,} groups on "
                  f"__consumer_offsets-{p}, stable in {setup_s:.1f} s ({calls:,} heartbeats, "
                  f"{calls / setup_s:,.0f}/s)", flush=True)
            first.stop_keeping(Path(scratch) / "data")
        finally:
            first.stop()
        part_dir = Path(scratch) / "data" / f"__consumer_offsets-{p}"
        part_bytes = sum(f.stat().st_size for f in part_dir.glob("*.log"))
        second = _LoadBroker(config=Path(cfg.offsetd_config))
        second.seed = partial(_copy_data, Path(scratch) / "data")
        second.startup_timeout_s = ccfg.load_timeout_s
        try:
            try:
                second.start()
            except BrokerStartError as exc:
                raise WorkloadFailed(f"offsetd did not restart on the data: {exc}") from exc
            assert second.started_at is not None
            ready_s = time.monotonic() - second.started_at
            step = max(1, len(groups) // ccfg.load_probes)
            served_at, loading = describe_until_served(second.bootstrap, groups[::step], ccfg.load_group_size,
                                                       second.started_at + ccfg.load_timeout_s)
            time.sleep(0.2)
            match = re.search(_PARTITION_LOADED.format(p=p), second.read_log())
        finally:
            second.stop()
    served_s = served_at - second.started_at
    print(f"  [{broker_name}] cp-load: __consumer_offsets-{p} {part_bytes / 1e6:.1f} MB; Metadata after "
          f"{ready_s:.2f} s, groups served after {served_s:.2f} s ({loading} load-in-progress answers)"
          + (f"; broker's log: {int(match['records']):,} records in {float(match['seconds']):.3f} s"
             if match else "; no load line in the broker's log"), flush=True)
    metrics = {
        "cp_load_served_s": Metric(f"KIP-848 load, {len(joined):,} members: process start -> groups served",
                                   "s", served_s, False),
        "cp_load_ready_s": Metric("KIP-848 load: process start -> Metadata", "s", ready_s, False),
        "cp_load_partition_mb": Metric("KIP-848 load: the __consumer_offsets partition", "MB",
                                       part_bytes / 1e6, False),
    }
    if match:
        metrics["cp_load_log_s"] = Metric("KIP-848 load: the partition's load (broker's log)", "s",
                                          float(match["seconds"]), False)
        metrics["cp_load_records"] = Metric("KIP-848 load: records in the partition (broker's log)", "count",
                                            int(match["records"]), False)
    return metrics


# -- cp-rebalance (consumer processes) ----------------------------------------------------------


@dataclass
class MemberResult:
    """What one consuming member saw: its assignment over time and its records per bucket."""

    index: int
    #: (time.monotonic(), sorted partitions) at each change of assignment().
    timeline: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    #: Records delivered, by time.monotonic() bucket (int(t / bucket_s)).
    buckets: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    subscribed_at: float = 0.0


def rebalance_member(bootstrap: str, topic: str, group: str, index: int, conf: dict[str, object],
                     partitions: int, bucket_s: float, warmup_s: float, hold_s: float, timeout_s: float,
                     counts: Any, stop: Any) -> MemberResult:
    """One member (an application blocking in ``consume()``, from the end of the topic). Members
    0-2 subscribe at once and report their assignment size in ``counts``; member 3 waits until
    the three hold every partition between them, evenly, subscribes ``warmup_s`` later, and sets
    ``stop`` once all four have held ``partitions / 4`` partitions for ``hold_s``."""
    from confluent_kafka import Consumer

    res = MemberResult(index)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"m{index}",
                         "auto.offset.reset": "latest", **conf})
    deadline = time.monotonic() + timeout_s
    share = partitions // 4
    try:
        if index == 3:
            while sum(counts[:3]) != partitions or max(counts[:3]) - min(counts[:3]) > 1:
                if time.monotonic() > deadline or stop.is_set():
                    raise RuntimeError(f"the three never held the topic: {list(counts[:3])}")
                stop.wait(0.05)
            time.sleep(warmup_s)  # the three read on meanwhile
        res.subscribed_at = time.monotonic()
        consumer.subscribe([topic])
        current: tuple[int, ...] = ()
        stable_since: float | None = None
        while not stop.is_set():
            now = time.monotonic()
            if now > deadline:
                stop.set()
                raise RuntimeError(f"no stable 4-member assignment within {timeout_s:.0f} s: {list(counts)}")
            msgs = consumer.consume(10_000, 0.05)
            now = time.monotonic()
            got = 0
            for msg in msgs:
                err = msg.error()
                if err is None:
                    got += 1
                elif len(res.errors) < 5:
                    res.errors.append(str(err))
            if got:
                b = int(now / bucket_s)
                res.buckets[b] = res.buckets.get(b, 0) + got
            assigned = tuple(sorted(tp.partition for tp in consumer.assignment()))
            if assigned != current:
                current = assigned
                res.timeline.append((now, assigned))
                counts[index] = len(assigned)
            if index == 3:
                if all(counts[i] == share for i in range(4)):
                    stable_since = stable_since or now
                    if now - stable_since >= hold_s:
                        stop.set()
                else:
                    stable_since = None
    finally:
        consumer.close()
    return res


def rebalance_producer(bootstrap: str, topic: str, ccfg: CpConfig, stop: Any) -> int:
    """Write ``produce_per_s`` records/s round robin over the partitions (in 10 ms steps) until
    ``stop``; returns the records not delivered."""
    from confluent_kafka import Producer

    failed = [0]

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "on_delivery": on_delivery})
    value = b"v" * ccfg.value_size
    start = time.monotonic()
    sent = 0
    while not stop.is_set():
        due = int((time.monotonic() - start) * ccfg.produce_per_s)
        for i in range(sent, due):
            producer.produce(topic, value, partition=i % ccfg.partitions)
        sent = max(sent, due)
        producer.poll(0.01)
    return producer.flush(60) + failed[0]


def rebalance_party(index: int, bootstrap: str, topic: str, group: str, ccfg: CpConfig, conf: dict[str, object],
                    counts: Any, stop: Any) -> MemberResult | int:
    """Child ``index`` of a cp-rebalance run: members 0-3, then the producer (4)."""
    if index == 4:
        return rebalance_producer(bootstrap, topic, ccfg, stop)
    return rebalance_member(bootstrap, topic, group, index, conf, ccfg.partitions, ccfg.bucket_s, ccfg.warmup_s,
                            ccfg.hold_s, ccfg.rebalance_timeout_s, counts, stop)


@dataclass
class RebalanceFigures:
    """One protocol's run, judged."""

    stable_s: float
    longest_gap_ms: float
    window_rate: float
    before_rate: float
    window_records: int
    #: The three's records per bucket from the subscribe to hold_s after stable, per member.
    series: list[list[int]]


def _judge(results: list[MemberResult], ccfg: CpConfig) -> RebalanceFigures:
    """The figures of one run; raises WorkloadFailed when the final assignment is wrong."""
    share = ccfg.partitions // 4
    finals = [r.timeline[-1][1] if r.timeline else () for r in results]
    union = set().union(*map(set, finals))
    if any(len(f) != share for f in finals) or len(union) != ccfg.partitions:
        raise WorkloadFailed(f"final assignment not 4 x {share} disjoint: {[len(f) for f in finals]}")
    t0 = results[3].subscribed_at
    # the stable moment: the last change of any member's assignment after the subscribe
    stable_at = max(t for r in results for t, _ in r.timeline)
    # stops are looked for until hold_s after it: a member given partitions back reads again later
    end = stable_at + ccfg.hold_s
    b0, b1, b_end = int(t0 / ccfg.bucket_s), int(stable_at / ccfg.bucket_s), int(end / ccfg.bucket_s)
    gap = 0
    for r in results[:3]:
        run = 0
        for b in range(b0, b_end):
            run = run + 1 if r.buckets.get(b, 0) == 0 else 0
            gap = max(gap, run)
    window = sum(r.buckets.get(b, 0) for r in results[:3] for b in range(b0, b1 + 1))
    wb0 = int((t0 - ccfg.warmup_s) / ccfg.bucket_s)
    before = sum(r.buckets.get(b, 0) for r in results[:3] for b in range(wb0, b0))
    return RebalanceFigures(stable_s=stable_at - t0, longest_gap_ms=gap * ccfg.bucket_s * 1000,
                            window_rate=window / max((b1 + 1 - b0) * ccfg.bucket_s, 1e-9),
                            before_rate=before / max((b0 - wb0) * ccfg.bucket_s, 1e-9), window_records=window,
                            series=[[r.buckets.get(b, 0) for b in range(b0, b_end)] for r in results[:3]])


def rebalance_workload(ccfg: CpConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """One run per protocol, each its own group, on one topic (see the module)."""
    import multiprocessing

    run_id = uuid.uuid4().hex[:8]
    topic = f"cp-rebalance-{run_id}"
    create_topic_and_wait(bootstrap, topic, ccfg.partitions, 60)
    ctx = multiprocessing.get_context("spawn")
    metrics: dict[str, Metric] = {}
    for name in ccfg.protocols:
        counts, stop = ctx.Array("i", 4), ctx.Event()
        conf = {**ccfg.consumer_conf, **PROTOCOLS[name]}
        args = [(i, bootstrap, topic, f"cp-rebalance-{run_id}-{name}", ccfg, conf, counts, stop)
                for i in range(5)]
        try:
            *results, undelivered = run_in_children(rebalance_party, args,
                                                    ccfg.rebalance_timeout_s + ccfg.child_slack_s)
        except ChildError as exc:
            raise WorkloadFailed(f"{name}: {exc}", exc.detail) from exc
        if undelivered:
            raise WorkloadFailed(f"{name}: the producer's {undelivered} records not delivered")
        errors = [e for r in results for e in r.errors]
        if errors:
            raise WorkloadFailed(f"{name}: consumer errors: {errors[:3]}")
        fig = _judge(results, ccfg)
        print(f"  [{broker_name}] cp-rebalance {name}: stable 4 x {ccfg.partitions // 4} after "
              f"{fig.stable_s:.2f} s; the three: longest stop {fig.longest_gap_ms:.0f} ms, "
              f"{fig.window_records:,} records in the window ({fig.window_rate:,.0f}/s; "
              f"{fig.before_rate:,.0f}/s before)", flush=True)
        for i, series in enumerate(fig.series):
            print(f"    member {i}, records per {1000 * ccfg.bucket_s:.0f} ms from the subscribe: "
                  f"{' '.join(str(n) for n in series)}", flush=True)
        key = name.replace("-", "_")
        metrics[f"cp_rebalance_{key}_stable_s"] = Metric(
            f"rebalance 3 -> 4 members, {name}: subscribe -> stable", "s", fig.stable_s, False)
        metrics[f"cp_rebalance_{key}_gap_ms"] = Metric(
            f"rebalance, {name}: longest stop of any of the three", "ms", fig.longest_gap_ms, False)
        metrics[f"cp_rebalance_{key}_window_records"] = Metric(
            f"rebalance, {name}: records the three read from subscribe to stable", "count", fig.window_records)
        metrics[f"cp_rebalance_{key}_window_per_s"] = Metric(
            f"rebalance, {name}: the three's records/s from subscribe to stable "
            f"(written: {ccfg.produce_per_s:,}/s)", "records/s", fig.window_rate)
    return metrics


def kip848_workloads(cfg: BenchConfig, ccfg: CpConfig | None = None) -> list[Workload]:
    """The KIP-848 workloads, in run order (offsetd only)."""
    ccfg = ccfg or CpConfig().scaled(cfg.kip848_scale)
    only = {"brokers": ("offsetd",), "not_applicable": NOT_APPLICABLE}
    return [
        Workload("cp-rebalance", partial(rebalance_workload, ccfg), **only),
        Workload("cp-heartbeats", partial(heartbeats_workload, ccfg), wants_pid=True, **only),
        Workload("cp-load", partial(load_workload, ccfg, cfg), **only),
    ]
