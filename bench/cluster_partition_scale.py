"""Issue 26's cluster measure: N partitions in a 3-broker cluster (bench/cluster_launcher.py:
PostgreSQL + offsetd brokers). Creates them (topics of --per-topic partitions, several topics per
CreateTopics request) and times it and the wait until every one has a live leader; times Metadata
for all of them from a fresh AdminClient; reports each broker's RSS, open descriptors and CPU while
idle (utime + stime from /proc: the heartbeats' and ownership ticks' cost per partition), and
PostgreSQL's; produces to and consumes from a random 1% of the partitions; then kill -9s one
broker and polls Metadata on a survivor until every partition is led by a live broker, against
the target "within the lease (broker.session.timeout.ms) + 5 s", with the survivors' CPU
meanwhile. ``--profile DIR`` records a survivor with py-spy while idle and during the takeover.

    .venv/bin/python bench/cluster_partition_scale.py --partitions 10000 [--profile DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root and src importable
    _ROOT = Path(__file__).resolve().parent.parent
    sys.path[0:1] = [str(_ROOT), str(_ROOT / "src")]

from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.cluster import summarize_profile  # noqa: E402
from bench.cluster_launcher import DATABASE, OFFSETS_TOPIC, ClusterLauncher  # noqa: E402
from bench.scale_probes import fds, metadata_s, rss_mb, sample_round_trip  # noqa: E402
from offsetd.dev.proc_stats import cpu_s  # noqa: E402
from offsetd.dev.broker import BrokerProcess  # noqa: E402
from offsetd.dev.postgres import children_of, postmaster_pid  # noqa: E402

PREFIX = "scale"
PY_SPY = Path(os.environ.get("PY_SPY", Path(sys.executable).parent / "py-spy"))  # the bench extra's
# cluster/member.py's line per batch of claims
_CLAIMED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] INFO \S+: claimed (\d+) partition", re.MULTILINE)


def _load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


# -- /proc --------------------------------------------------------------------------------------


def _cpu_s(pid: int, children: bool = False) -> float:
    """offsetd.dev.proc_stats.cpu_s, 0 once the process is gone."""
    return cpu_s(pid, children=children) or 0.0


def _postgres_cpu_s(launcher: ClusterLauncher) -> float:
    """CPU seconds of PostgreSQL so far: the postmaster, its exited backends (waited for, so in its
    children's counters) and the running ones."""
    assert launcher.pg is not None
    master = postmaster_pid(launcher.pg.data_dir)
    if master is None:
        return 0.0
    return _cpu_s(master, children=True) + sum(_cpu_s(pid) for pid in children_of(master))


class ScaleLauncher(ClusterLauncher):
    """The bench launcher with the brokers' log level chosen (INFO logs a line per claim)."""

    log_level = "INFO"

    def _broker(self, node: int, dsn: str, name: str = "") -> BrokerProcess:
        broker = super()._broker(node, dsn, name)
        broker.log_level = self.log_level
        return broker


class CpuWindow:
    """CPU seconds of the brokers and of PostgreSQL between start() and stop()."""

    def __init__(self, launcher: ClusterLauncher) -> None:
        self.launcher = launcher
        self.brokers: dict[int, int] = launcher.pids()
        self.started = 0.0
        self.before: dict[str, float] = {}

    def _sample(self) -> dict[str, float]:
        sample = {f"broker{node}": _cpu_s(pid) for node, pid in self.brokers.items()}
        sample["postgres"] = _postgres_cpu_s(self.launcher)
        return sample

    def start(self) -> "CpuWindow":
        self.started, self.before = time.monotonic(), self._sample()
        return self

    def stop(self) -> dict[str, Any]:
        """Each one's CPU as % of one core over the window, and the window's length."""
        elapsed = time.monotonic() - self.started
        after = self._sample()
        alive = self.launcher.pids()
        result: dict[str, Any] = {"window_s": round(elapsed, 1)}
        for name, cpu in after.items():
            if name.startswith("broker") and int(name[6:]) not in alive:
                continue  # killed meanwhile: its counters are gone
            result[f"{name}_cpu_pct"] = round(100 * (cpu - self.before[name]) / elapsed, 1)
        return result


# -- the Kafka side ------------------------------------------------------------------------------


def _names(partitions: int, per_topic: int) -> list[tuple[str, int]]:
    """(topic, partition count) of the bench's topics."""
    return [(f"{PREFIX}{i}", min(per_topic, partitions - i * per_topic))
            for i in range((partitions + per_topic - 1) // per_topic)]


def _create(bootstrap: str, partitions: int, per_topic: int, per_request: int,
            timeout_s: float) -> tuple[float, int, list[str]]:
    """Create the bench's topics, ``per_request`` per CreateTopics, until done or ``timeout_s``:
    (seconds, partitions created, the errors of topics not created: the run goes on without them)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = _names(partitions, per_topic)
    counts = dict(topics)
    created = 0
    errors: list[str] = []
    started = time.monotonic()
    for i in range(0, len(topics), per_request):
        if time.monotonic() - started > timeout_s:
            break
        batch = [NewTopic(name, count, 1) for name, count in topics[i:i + per_request]]
        for name, future in admin.create_topics(batch, operation_timeout=600, request_timeout=600).items():
            try:
                future.result(600)
                created += counts[name]
            except KafkaException as exc:
                errors.append(f"{time.monotonic() - started:.0f}s {name}: {exc}")
    return time.monotonic() - started, created, errors


def _leadership(admin: AdminClient, live: set[int]) -> dict[str, int]:
    """One Metadata (all topics): the bench's partitions led by a live broker, by another
    (dead) one, by none; and the same for ``__consumer_offsets``; the brokers listed."""
    md = admin.list_topics(timeout=120)
    counts = {"partitions": 0, "led_live": 0, "led_dead": 0, "leaderless": 0, "offsets_not_live": 0,
              "brokers_listed": len(md.brokers)}
    for name, topic in md.topics.items():
        if name == OFFSETS_TOPIC:
            counts["offsets_not_live"] = sum(p.leader not in live for p in topic.partitions.values())
        if not name.startswith(PREFIX):
            continue
        for meta in topic.partitions.values():
            counts["partitions"] += 1
            if meta.leader in live:
                counts["led_live"] += 1
            elif meta.leader < 0:
                counts["leaderless"] += 1
            else:
                counts["led_dead"] += 1
    return counts


def _wait_all_led(bootstrap: str, live: set[int], expected: int, timeout_s: float,
                  pause_s: float) -> tuple[float | None, list[dict[str, Any]]]:
    """Poll Metadata until all ``expected`` partitions and ``__consumer_offsets`` are led by
    ``live`` brokers and only those are listed: (seconds, or None at the deadline; the polls)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    started = time.monotonic()
    polls: list[dict[str, Any]] = []
    while time.monotonic() - started < timeout_s:
        try:
            counts = _leadership(admin, live)
        except KafkaException as exc:
            polls.append({"t": round(time.monotonic() - started, 2), "error": str(exc)})
            time.sleep(pause_s)
            continue
        took = time.monotonic() - started
        polls.append({"t": round(took, 2), **counts})
        if (counts["partitions"] == expected and counts["led_live"] == expected and not counts["offsets_not_live"]
                and counts["brokers_listed"] == len(live)):
            return took, polls
        time.sleep(pause_s)
    return None, polls


def _timeline(polls: list[dict[str, Any]], every_s: float) -> list[str]:
    """The polls, at most one per ``every_s`` (and the last), as "t: led/leaderless/dead"."""
    kept: list[str] = []
    last = -every_s
    for i, poll in enumerate(polls):
        if poll["t"] - last >= every_s or i == len(polls) - 1:
            last = poll["t"]
            kept.append(f"{poll['t']:.1f}s: " + (poll["error"] if "error" in poll else
                        f"{poll['led_live']} led, {poll['leaderless']} leaderless, {poll['led_dead']} dead leader, "
                        f"{poll['offsets_not_live']} offsets partitions not led, {poll['brokers_listed']} brokers"))
    return kept


# -- PostgreSQL, py-spy, the logs -----------------------------------------------------------------


def _postgres_figures(dsn: str) -> dict[str, Any]:
    """Rows of offsetd_partition by owner, the table's size, and the time of the ownership
    snapshot's query (postgres_store's _PARTITIONS) fetched with asyncpg, as a broker does."""
    import asyncpg

    async def measure() -> dict[str, Any]:
        conn = await asyncpg.connect(dsn)
        try:
            owners = await conn.fetch("SELECT owner, count(*) FROM offsetd_partition GROUP BY owner ORDER BY owner")
            size = await conn.fetchval("SELECT pg_total_relation_size('offsetd_partition')")
            times = []
            for _ in range(3):
                started = time.monotonic()
                await conn.fetch("SELECT topic_id, partition, owner, epoch FROM offsetd_partition")
                times.append(time.monotonic() - started)
            plan = await conn.fetch("EXPLAIN (ANALYZE) SELECT topic_id, partition, owner, epoch FROM offsetd_partition")
            executed = next((r[0] for r in plan if "Execution Time" in r[0]), "")
            return {"offsetd_partition_rows_by_owner": {str(r[0]): r[1] for r in owners},
                    "offsetd_partition_mb": round(size / 2**20, 1),
                    "snapshot_query_fetch_ms_best_of_3": round(1000 * min(times), 1),
                    "snapshot_query_server_side": executed.strip()}
        finally:
            await conn.close()

    return asyncio.run(measure())


def _py_spy(pid: int, out: Path, duration_s: int | None = None) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of ``pid`` into ``out`` (raw stacks), for ``duration_s`` or until SIGINT."""
    if not PY_SPY.exists():
        print(f"  no py-spy at {PY_SPY}: not profiling", file=sys.stderr)
        return None
    cmd = [str(PY_SPY), "record", "--pid", str(pid), "--format", "raw", "--rate", "100", "--nonblocking",
           "--output", str(out)]
    if duration_s is not None:
        cmd += ["--duration", str(duration_s)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _finish_py_spy(proc: subprocess.Popen[bytes] | None, out: Path, name: str, timed: bool = False) -> None:
    """Stop py-spy (or, ``timed``, let its --duration run out) and print the top frames."""
    if proc is None:
        return
    if not timed and proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    try:
        proc.wait(120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    print(summarize_profile([out], name, top=15), file=sys.stderr, flush=True)


def _claims_after(launcher: ClusterLauncher, since_wall: float) -> dict[str, Any]:
    """The survivors' claims after ``since_wall`` ("claimed N partition(s)" lines): how many, the
    first and last batch (seconds after it)."""
    stamps: dict[int, list[float]] = {}
    counts: dict[int, int] = {}
    for node, broker in launcher.brokers.items():
        if not broker.alive():
            continue
        for match in _CLAIMED.finditer(broker.log()):
            wall = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if wall >= since_wall - 0.001:
                stamps.setdefault(node, []).append(wall - since_wall)
                counts[node] = counts.get(node, 0) + int(match.group(2))
    every = [t for ts in stamps.values() for t in ts]
    return {"claims_by_survivor": {str(n): c for n, c in counts.items()},
            "first_claim_s": round(min(every), 2) if every else None,
            "last_claim_s": round(max(every), 2) if every else None}


def _lease_expiries(launcher: ClusterLauncher) -> dict[str, int]:
    """How often each broker judged its own lease lapsed and gave its partitions up (so far)."""
    return {str(node): broker.log().count("lease expired (no renewal") for node, broker in launcher.brokers.items()}


# -- the run ------------------------------------------------------------------------------------


def _idle(launcher: ClusterLauncher, seconds: float) -> dict[str, Any]:
    """RSS, descriptors, and CPU over ``seconds`` of nothing asked of the cluster."""
    window = CpuWindow(launcher).start()
    time.sleep(seconds)
    result = window.stop()
    for node, pid in launcher.pids().items():
        result[f"broker{node}_rss_mb"] = round(rss_mb(pid))
        result[f"broker{node}_open_fds"] = fds(pid)
    result["load_average"] = _load()
    return result


def _led_by(bootstrap: str, node: int) -> int:
    """How many of the bench's partitions ``node`` leads (one Metadata)."""
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=120)
    return sum(meta.leader == node for name, topic in md.topics.items() if name.startswith(PREFIX)
               for meta in topic.partitions.values())


def _rejoin(launcher: ClusterLauncher, args: argparse.Namespace) -> dict[str, Any]:
    """Start the killed broker again and wait until it leads its share once more (the survivors
    hand its preferred partitions back): the count it leads unchanged over three polls."""
    started = time.monotonic()
    launcher.restart(args.victim, timeout_s=args.takeover_timeout)
    counts: list[int] = []
    while time.monotonic() - started < args.takeover_timeout:
        counts.append(_led_by(launcher.bootstrap, args.victim))
        if len(counts) >= 3 and counts[-1] > 0 and counts[-1] == counts[-2] == counts[-3]:
            break
        time.sleep(args.lead_poll_pause)
    return {"rejoined_s": round(time.monotonic() - started, 1), "victim_leads": counts[-1] if counts else 0}


def _takeover(launcher: ClusterLauncher, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """kill -9 ``args.victim``; time until a survivor's Metadata shows every partition led by a
    live broker; the survivors' CPU (and a py-spy of one) meanwhile."""
    survivors = {node for node in launcher.pids() if node != args.victim}
    bootstrap = ",".join(launcher.brokers[n].bootstrap for n in sorted(survivors))
    watched = min(survivors)
    out = args.profile / f"takeover-broker{watched}.txt" if args.profile else None
    spy = _py_spy(launcher.brokers[watched].pid, out) if out else None
    if spy:
        time.sleep(1.0)  # py-spy attaches
    window = CpuWindow(launcher).start()
    kill_wall = time.time()
    os.kill(launcher.brokers[args.victim].pid, signal.SIGKILL)
    took, polls = _wait_all_led(bootstrap, survivors, args.partitions, args.takeover_timeout, args.poll_pause)
    cpu = window.stop()
    if out:
        _finish_py_spy(spy, out, f"takeover, broker {watched}")
    lease_s = launcher.ttl_ms / 1000
    results["takeover"] = {
        "killed": args.victim, "lease_s": lease_s, "target_s": lease_s + 5,
        "all_led_by_live_s": None if took is None else round(took, 2),
        "met": took is not None and took <= lease_s + 5,
        **_claims_after(launcher, kill_wall), "cpu": cpu, "load_average": _load(),
        "timeline": _timeline(polls, 1.0 if took is None or took < 60 else took / 30),
    }


def run(launcher: ClusterLauncher, args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Every step in order; ``results`` fills as they finish (a failure keeps what ran)."""
    bootstrap = launcher.bootstrap
    live = set(launcher.pids())
    step = time.monotonic()

    def done(what: str) -> None:
        nonlocal step
        print(f"  {what} ({time.monotonic() - step:.1f} s, load {_load()})", file=sys.stderr, flush=True)
        step = time.monotonic()

    results["idle_empty"] = _idle(launcher, args.idle)
    done("idle, no partitions")
    took, created, errors = _create(bootstrap, args.partitions, args.per_topic, args.per_request, args.create_timeout)
    results["create_s"], results["created_partitions"] = round(took, 1), created
    if errors:
        results["create_errors"] = errors[:10]
    results["load_average_after_create"] = _load()
    results["lease_expiries_after_create"] = _lease_expiries(launcher)
    done(f"created {created}")
    took, polls = _wait_all_led(bootstrap, live, created, args.lead_timeout, args.lead_poll_pause)
    results["created_to_all_led_s"] = None if took is None else round(took, 1)
    results["lease_expiries_after_lead"] = _lease_expiries(launcher)
    if took is None or created < args.partitions:
        # Stuck: what the brokers do meanwhile is the finding (CPU, a profile, PostgreSQL's rows).
        results["lead_timeline"] = _timeline(polls, args.lead_timeout / 12)
        done("not all led")
        results["idle_unsettled"] = _idle(launcher, args.idle)
        if args.profile:
            watched = min(n for n in launcher.pids() if n != args.victim)
            out = args.profile / f"unsettled-broker{watched}.txt"
            _finish_py_spy(_py_spy(launcher.brokers[watched].pid, out, int(args.idle)), out,
                           f"unsettled, broker {watched}", timed=True)
        results["postgres"] = _postgres_figures(launcher.pg.dsn(DATABASE))  # type: ignore[union-attr]
        results["lease_expiries_at_end"] = _lease_expiries(launcher)
        raise TimeoutError(f"{created} of {args.partitions} partitions created, and not all of those led "
                           f"within {args.lead_timeout:.0f} s" if took is None else "creation stopped at its deadline")
    done("all led")
    results["metadata_ms"] = round(1000 * min(metadata_s(bootstrap, args.partitions, PREFIX) for _ in range(3)))
    results["load_average_metadata"] = _load()
    done("metadata")
    results["idle"] = _idle(launcher, args.idle)
    done("idle")
    if args.profile:
        watched = min(n for n in launcher.pids() if n != args.victim)
        out = args.profile / f"idle-broker{watched}.txt"
        _finish_py_spy(_py_spy(launcher.brokers[watched].pid, out, int(args.idle)), out, f"idle, broker {watched}",
                       timed=True)
        done("idle profile")
    results["postgres"] = _postgres_figures(launcher.pg.dsn(DATABASE))  # type: ignore[union-attr]
    done("postgres figures")
    results["sample_1pct_round_trip_s"] = round(
        sample_round_trip(bootstrap, args.partitions, args.per_topic, 0.01, PREFIX, "scale"), 1)
    results["load_average_sample"] = _load()
    done("1% sample")
    _takeover(launcher, args, results)
    results["takeover"]["lease_expiries"] = _lease_expiries(launcher)
    done("takeover")
    for _ in range(1, args.takeovers):  # again: the victim back, leading its share, then killed
        first = results["takeover"]
        if first["all_led_by_live_s"] is None:
            break
        rejoined = _rejoin(launcher, args)
        done(f"victim back, leading {rejoined['victim_leads']}")
        _takeover(launcher, args, results)
        results.setdefault("takeovers_again", []).append({**rejoined, **results["takeover"],
                                                          "lease_expiries": _lease_expiries(launcher)})
        results["takeover"] = first
        done("takeover again")
    if results["takeover"]["all_led_by_live_s"] is not None:
        survivors = ",".join(b.bootstrap for b in launcher.brokers.values() if b.alive())
        results["sample_1pct_round_trip_after_takeover_s"] = round(
            sample_round_trip(survivors, args.partitions, args.per_topic, 0.01, PREFIX, "scale-after"), 1)
        done("1% sample after the takeover")
        results["idle_after_takeover"] = _idle(launcher, args.idle)
        results["postgres_after_takeover"] = _postgres_figures(launcher.pg.dsn(DATABASE))  # type: ignore[union-attr]
        done("idle after the takeover")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--per-request", type=int, default=5, help="topics per CreateTopics request")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--victim", type=int, default=3, help="node.id of the broker killed")
    parser.add_argument("--ttl-ms", type=int, default=3000, help="broker.session.timeout.ms (the launcher's)")
    parser.add_argument("--heartbeat-ms", type=int, default=1000, help="broker.heartbeat.interval.ms")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of each idle window")
    parser.add_argument("--poll-pause", type=float, default=0.2, help="seconds between Metadata polls in the takeover")
    parser.add_argument("--lead-poll-pause", type=float, default=2.0,
                        help="seconds between Metadata polls while waiting for the created partitions' leaders")
    parser.add_argument("--create-timeout", type=float, default=600.0, help="stop creating topics after this")
    parser.add_argument("--lead-timeout", type=float, default=300.0)
    parser.add_argument("--takeover-timeout", type=float, default=300.0)
    parser.add_argument("--takeovers", type=int, default=1,
                        help="kill -9s of the victim, each after it came back and led its share again")
    parser.add_argument("--log-level", default="INFO", help="the brokers' --log-level")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy a survivor while idle and during the takeover")
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    launcher = ScaleLauncher(brokers=args.brokers, ttl_ms=args.ttl_ms, heartbeat_ms=args.heartbeat_ms)
    launcher.startup_timeout_s = 120.0
    launcher.log_level = args.log_level
    # The box may be shared: the load average says how busy it was around each figure.
    results: dict[str, Any] = {"partitions": args.partitions, "brokers": args.brokers, "ttl_ms": args.ttl_ms,
                               "heartbeat_ms": args.heartbeat_ms, "load_average_at_start": _load()}
    started = time.monotonic()
    try:
        launcher.start()
        run(launcher, args, results)
    except (AssertionError, TimeoutError, KafkaException) as exc:
        results["failed"] = f"{type(exc).__name__}: {exc}"
        results["log_tail"] = launcher.log_tail(5)
    finally:
        results["load_average_at_end"] = _load()
        results["total_s"] = round(time.monotonic() - started)
        if args.profile:  # the brokers' logs go with the workdir: keep them beside the profiles
            for node, broker in launcher.brokers.items():
                if broker.log_path.exists():
                    shutil.copy(broker.log_path, args.profile / f"broker{node}.log")
        launcher.stop()
        results["broker_errors"] = launcher.errors[:10]
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
