"""Cluster chaos harness (`make chaos-cluster`): three brokers on one PostgreSQL under a seeded
random schedule of faults for a set time, while idempotent producers, committers, classic and
KIP-848 consumer groups and consume-transform-produce loops run; then the history checker
(checker.py) reads everything back.

Each broker reaches PostgreSQL through its own TCP proxy and is reached by clients (and by the
other brokers, which use its advertised address) through another, so either side can be cut off
alone. Faults (cluster_config.py): `kill` (SIGKILL, down a while, started again), `stop`
(SIGSTOP, SIGCONT: a frozen broker, past its lease or not), `term` (SIGTERM: a graceful handoff,
then started again), `pg-cut` (the broker's PostgreSQL connections blackholed, then healed),
`client-cut` (the broker's client connections blackholed, then healed), `pg-restart` (PostgreSQL
stopped fast or immediately, i.e. crashed, then started), and with a synchronous standby `promote`
(the primary killed -9, the standby promoted, the brokers' PostgreSQL proxies moved to it). The schedule is drawn from the seed before the run
(`plan_faults`) and printed: up to `max_concurrent` faults at once, never two on one target, and
never every broker at once. A broker that exits on its own is an incident, started again."""

from __future__ import annotations

import faulthandler
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from broker_process import wait_for
from checker import CheckResult, check
from cluster_config import BROKER_FAULTS, ClusterChaosConfig
from cluster_process import BrokerCluster
from cluster_workers import ClientProcessWorker, GroupMemberWorker, ThreadClientWorker, TxnLoopWorker
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from harness import ClientState, Worker
from history import CLIENT_TIMEOUTS, FaultEvent, History
from pg_proxy import PgProxy

from offsetd.dev.postgres import LocalPostgres, free_port
from offsetd.dev.postgres_standby import start_standby

POSTGRES = 0  # the target of PostgreSQL faults (brokers are node ids 1..N)
_RESTARTS = {"kill", "term", "pg-restart", "promote"}  # faults that end with a process starting (seconds more)


def broker_overrides(config: ClusterChaosConfig) -> dict[str, str]:
    """Settings of every broker: a short lease, few internal partitions, quick group timers."""
    return {"broker.session.timeout.ms": str(config.lease_ms),
            "broker.heartbeat.interval.ms": str(max(100, config.lease_ms // 6)),
            "offsets.topic.num.partitions": "12", "transaction.state.log.num.partitions": "6",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
            "group.initial.rebalance.delay.ms": "0",
            "group.consumer.min.session.timeout.ms": "6000", "group.consumer.session.timeout.ms": "10000",
            "group.consumer.min.heartbeat.interval.ms": "1000", "group.consumer.heartbeat.interval.ms": "1000",
            # A new owner copies only the last 16 kB of a data partition, and a leader keeps its copy
            # to that (segments of 16 kB, looked at every 2 s): every takeover past the first seconds
            # reads the rest by its headers and serves it from PostgreSQL (cold_range.py).
            "log.local.retention.bytes": "16384", "log.segment.bytes": "16384",
            "log.retention.check.interval.ms": "2000",
            **config.overrides}


# ----------------------------------------------------------------------------------------------
# The schedule


@dataclass
class PlannedFault:
    """One fault of the schedule: when (seconds after the workload starts), what, on whom, how long."""

    at: float
    kind: str
    target: int      # a broker's node id, or POSTGRES
    hold: float      # seconds paused, cut off or down
    mode: str = ""   # pg-restart: "fast" or "immediate"

    def text(self) -> str:
        """One line of the printed schedule."""
        whom = "PostgreSQL" if self.target == POSTGRES else f"broker {self.target}"
        return f"{self.at:6.2f}s {self.kind:<10} {whom:<10} {self.hold:.2f}s {self.mode}".rstrip()


def plan_faults(config: ClusterChaosConfig) -> list[PlannedFault]:
    """The run's faults, from its seed alone: a fault every `fault_gap` seconds until
    `recovery_seconds` before the end; a slot whose draw would exceed `max_concurrent` faults, hit
    a target twice or take every broker is left empty."""
    rng = random.Random(config.seed)
    plan: list[PlannedFault] = []
    busy: list[tuple[float, int]] = []  # (planned end, target)
    at = 0.0
    while True:
        at += rng.uniform(*config.fault_gap)
        if at >= config.duration - config.recovery_seconds:
            return plan
        kind = rng.choice(config.faults)
        hold = rng.uniform(*config.fault_hold)
        mode = rng.choice(("fast", "immediate")) if kind == "pg-restart" else ""
        if kind == "promote" and any(f.kind == "promote" for f in plan):
            continue  # one standby to promote
        active = {target for end, target in busy if end > at}
        if kind in BROKER_FAULTS:
            spare = [n for n in range(1, config.brokers + 1) if n not in active]
            if len(spare) < 2:
                continue
            target = rng.choice(spare)
        else:
            target = POSTGRES
        if len(active) >= config.max_concurrent or target in active:
            continue
        busy.append((at + hold + (4.0 if kind in _RESTARTS else 0.5), target))
        plan.append(PlannedFault(round(at, 2), kind, target, round(hold, 2), mode))


# ----------------------------------------------------------------------------------------------
# The cluster


class ChaosCluster:
    """PostgreSQL (a throwaway server of its own), brokers 1..N each reaching it through its own
    proxy (`pg_proxy(n)`) and reached through another (`client_proxy(n)`, its advertised address)."""

    def __init__(self, config: ClusterChaosConfig, run_dir: Path) -> None:
        self.config = config
        self.postgres = LocalPostgres(max_connections=200)
        self.standby: LocalPostgres | None = None  # with config.standby, until promoted
        self.retired: list[LocalPostgres] = []  # primaries killed for a promotion
        self.client_proxies: dict[int, PgProxy] = {}
        self.brokers: BrokerCluster | None = None
        self.run_dir = run_dir

    def start(self) -> "ChaosCluster":
        """PostgreSQL, the proxies, then every broker at once (each waited on to listen)."""
        self.postgres.start()
        dsn = self.postgres.create_database("chaos")
        if self.config.standby:
            self.standby = start_standby(self.postgres)
        self.brokers = BrokerCluster(dsn, self.run_dir / "brokers", self.config.brokers,
                                     broker_overrides(self.config), proxied=True)
        for node_id in self.brokers.node_ids:
            broker = self.brokers.broker(node_id)
            broker.port = free_port()  # known before the start: the client proxy forwards to it
            proxy = PgProxy("127.0.0.1", broker.port).start()
            self.client_proxies[node_id] = proxy
            broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
        self.brokers.start(60)
        return self

    @property
    def bootstrap(self) -> str:
        """Every broker's advertised address (its client proxy)."""
        return ",".join(f"127.0.0.1:{proxy.port}" for proxy in self.client_proxies.values())

    def cluster(self) -> BrokerCluster:
        """The brokers (once started)."""
        assert self.brokers is not None
        return self.brokers

    def close(self) -> None:
        """Heal every proxy, stop the brokers (SIGTERM, SIGKILL after 20 s), then PostgreSQL."""
        try:
            for proxy in self.client_proxies.values():
                proxy.heal()
            if self.brokers is not None:
                self.brokers.stop()
        finally:
            for proxy in self.client_proxies.values():
                proxy.close()
            for server in (self.postgres, self.standby, *self.retired):
                if server is not None:
                    server.close()


# ----------------------------------------------------------------------------------------------
# The run


@dataclass
class ClusterSummary:
    """A cluster chaos run: its schedule, operations by kind and outcome, the check, incidents."""

    seed: int
    duration: float
    wall_seconds: float
    fault_kinds: tuple[str, ...]
    plan: list[PlannedFault]
    faults: Counter[str]
    operations: Counter[str]
    errors: Counter[str]
    check: CheckResult
    incidents: list[str]
    notes: list[str]
    client_kills: int = 0  # client processes killed after hanging (their stacks in their logs)
    client_crashes: int = 0  # client processes that died of a signal (librdkafka segfaults)

    @property
    def violations(self) -> int:
        """What the check found (incidents are apart)."""
        return self.check.violations

    def count(self, kind: str, outcome: str) -> int:
        """Operations of `kind` (produce, commit, group-commit, txn) with `outcome`."""
        return self.operations[f"{kind} {outcome}"]

    def table(self) -> str:
        """A Markdown table of the run, ready to paste."""
        c = self.check
        kinds = ("produce", "commit", "group-commit", "txn")
        outcomes = sorted({key.split(" ")[1] for key in self.operations})
        rows = [
            ("seed / duration / wall time", f"{self.seed} / {self.duration:.0f} s / {self.wall_seconds:.0f} s"),
            ("fault kinds selected", ",".join(self.fault_kinds)),
            ("faults injected", ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"),
            *((f"{kind} ({' / '.join(outcomes)})",
               " / ".join(str(self.count(kind, outcome)) for outcome in outcomes)) for kind in kinds),
            ("records / commits / committed output read back", f"{c.records_read} / {c.commits_read} / {c.txn_records_read}"),
            ("lost acknowledged records / duplicates / never sent / out of order",
             f"{c.lost} / {c.duplicates} / {c.phantoms} / {c.reordered}"),
            ("copies re-sent under a bumped producer epoch (librdkafka; allowed)", str(c.epoch_resends)),
            ("lost acknowledged commits / backwards / never sent",
             f"{c.lost_commits} / {c.backwards_commits} / {c.phantom_commits}"),
            ("aborted visible / partial / lost transactions", f"{c.aborted_visible} / {c.partial_txns} / {c.lost_txns}"),
            ("inputs transformed twice / skipped", f"{c.eos_duplicates} / {c.eos_lost}"),
            ("aborted records in the log (hidden from read_committed)", str(c.aborted_in_log)),
            ("client processes killed after hanging / crashed (signal)", f"{self.client_kills} / {self.client_crashes}"),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"| {'metric':<{width}} | value |", f"|{'-' * (width + 2)}|-------|"]
        return "\n".join(lines + [f"| {k:<{width}} | {v} |" for k, v in rows])

    def text(self) -> str:
        """The report: the table, client errors, incidents, notes, evidence, the verdict."""
        parts = [self.table()]
        if self.errors:
            parts.append("errors seen by clients: " + ", ".join(f"{k} x{n}" for k, n in self.errors.most_common(20)))
        if self.incidents:
            parts.append("incidents:\n" + "\n".join(f"  - {i}" for i in self.incidents))
        if self.notes:
            parts.append("notes:\n" + "\n".join(f"  - {n}" for n in self.notes[:20]))
        for category, cases in self.check.evidence.items():
            parts.append(f"evidence, {category}:\n" + "\n".join(f"  - {e}" for e in cases))
        verdict = "PASS" if self.violations == 0 and not self.incidents else "FAIL"
        parts.append(f"seed {self.seed}; verdict: {verdict}")
        return "\n\n".join(parts)


def op_kind(kind: str, topic: str, commit_topic: str) -> str:
    """produce, commit (the committers'), group-commit (group members', of the data topic) or txn."""
    return "group-commit" if kind == "commit" and topic != commit_topic else kind


class ClusterHarness:
    """Starts the cluster and the workload, runs the schedule of faults, checks the history."""

    def __init__(self, config: ClusterChaosConfig, log: Callable[[str], None] = print) -> None:
        self.config, self.log = config, log
        config.run_dir.mkdir(parents=True, exist_ok=True)
        self.history = History(config.run_dir / "ops.jsonl")
        self.cluster = ChaosCluster(config, config.run_dir)
        self.plan = plan_faults(config)
        self.incidents: list[str] = []
        self.intended_down: set[int] = set()  # brokers a fault has stopped on purpose
        self._workers: list[Worker] = []
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def __enter__(self) -> "ClusterHarness":
        """Start PostgreSQL and the brokers, create the topics (everything stopped again if that fails)."""
        try:
            self.cluster.start()
            self._create_topics()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop everything."""
        self.close()

    def close(self) -> None:
        """Kill any client process left (a run that failed), stop the cluster, close the op log."""
        for worker in self._workers:
            if isinstance(worker, ClientProcessWorker):
                worker.kill_now()
        try:
            self.cluster.close()
        finally:
            self.history.close()

    def _create_topics(self) -> None:
        """The data, commit and output topics, asked again until created (a cluster just started
        may not know its controller yet), then waited on until every partition has a leader."""
        cfg, bootstrap = self.config, self.cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_TIMEOUTS})
        missing = [cfg.topic, cfg.commit_topic, cfg.output_topic]

        def create() -> bool:
            """Ask for the topics still missing; True once all exist."""
            futures = admin.create_topics([NewTopic(t, cfg.partitions, 1) for t in missing], operation_timeout=10)
            for topic, future in futures.items():
                try:
                    future.result(20)
                except KafkaException as exc:
                    if exc.args[0].code() != exc.args[0].TOPIC_ALREADY_EXISTS:
                        self.history.notes.append(f"CreateTopics {topic}: {exc.args[0].name()}; asked again")
                        continue
                missing.remove(topic)
            return not missing
        wait_for(create, timeout=90, interval=1.0, message="the chaos topics created")

        def led() -> bool:
            """Whether Metadata lists every broker and a leader for every chaos partition."""
            md = admin.list_topics(timeout=10)
            return len(md.brokers) == cfg.brokers and all(
                md.topics.get(t) is not None and len(md.topics[t].partitions) == cfg.partitions
                and all(p.leader > 0 for p in md.topics[t].partitions.values())
                for t in (cfg.topic, cfg.commit_topic, cfg.output_topic))
        wait_for(led, timeout=60, interval=0.5, message="every chaos partition led, every broker listed")

    def workers(self, stop: threading.Event) -> list[Worker]:
        """Every client thread of the run."""
        cfg, state, bootstrap = self.config, ClientState(), self.cluster.bootstrap
        common = (self.history, 0, bootstrap, cfg, state, stop)
        workers: list[Worker] = [ThreadClientWorker("producer", i, *common) for i in range(cfg.producers)]
        workers += [ThreadClientWorker("committer", i, *common) for i in range(cfg.committers)]
        groups = [("classic", g) for g in range(cfg.classic_groups)] + [("consumer", g) for g in range(cfg.consumer_groups)]
        workers += [GroupMemberWorker(f"chaos-{protocol}-{g}", protocol, m, *common)
                    for protocol, g in groups for m in range(cfg.members)]
        workers += [TxnLoopWorker(i, *common) for i in range(cfg.txn_loops)]
        self._workers = workers
        return workers

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> ClusterSummary:
        """The workload under the schedule of faults, the recovery time, then the check; the summary."""
        cfg = self.config
        self.log("fault schedule:\n" + ("\n".join("  " + f.text() for f in self.plan) or "  (none)"))
        stop = threading.Event()
        workers = self.workers(stop)
        for worker in workers:
            worker.start()
        began = time.monotonic()
        running: dict[int, threading.Thread] = {}  # target -> its fault's thread
        for fault in self.plan:
            self._watch_until(began + fault.at)
            previous = running.get(fault.target)
            if previous is not None and previous.is_alive():
                late = time.monotonic()
                previous.join(60)
                self.history.notes.append(f"{fault.kind} on {fault.target} waited {time.monotonic() - late:.1f}s "
                                          "for the previous fault on it")
            thread = threading.Thread(target=self._inject, args=(fault,), name=f"fault-{fault.kind}", daemon=True)
            running[fault.target] = thread
            thread.start()
        for thread in running.values():
            thread.join(120)
            if thread.is_alive():
                self.incidents.append(f"fault thread {thread.name} still running 120 s after it was due to end")
        self._ensure_running()
        healed = self.history.now()
        self._watch_until(max(began + cfg.duration, time.monotonic() + cfg.recovery_seconds))
        # A client killed for hanging near the end takes a while to start, join and commit again:
        # the workload runs on until every kind has been acknowledged, for a minute at most.
        deadline = time.monotonic() + 60
        while self._unrecovered(healed) and time.monotonic() < deadline:
            self._watch_until(time.monotonic() + 1.0)
        stop.set()
        deadline = time.monotonic() + 120  # a transactional loop may take 40 s to stop and 60 s to fence
        for worker in workers:
            worker.join(max(0.1, deadline - time.monotonic()))
            if worker.is_alive():
                stacks = cfg.run_dir / "stuck-threads.txt"
                with open(stacks, "a") as out:
                    faulthandler.dump_traceback(out)
                self.incidents.append(f"worker {worker.name} still running 120 s after the workload ended "
                                      f"(every thread's stack: {stacks})")
            if worker.failure is not None:
                self.incidents.append(f"worker {worker.name} raised {worker.failure!r}")
        frozen = self.history.freeze("no answer by the end of the run")
        if frozen:
            self.history.notes.append(f"{frozen} operation(s) unanswered at the end: unknown")
        self._ensure_running()
        self._check_recovery(healed)
        try:
            result = check(self.history, cfg, self.cluster.bootstrap, "end")
        except Exception as exc:  # noqa: BLE001 - what could not be read back is a finding too
            self.incidents.append(f"the check could not read everything back: {exc!r}")
            result = CheckResult("end (incomplete)")
        self.log(f"check ({result.seconds:.1f}s): {result.violations} violation(s)")
        summary = self.summary(result)
        clients = [w for w in workers if isinstance(w, ClientProcessWorker)]
        summary.client_kills = sum(w.kills for w in clients)
        summary.client_crashes = sum(w.crashes for w in clients)
        return summary

    def summary(self, result: CheckResult) -> ClusterSummary:
        """The run's totals and its check."""
        operations: Counter[str] = Counter()
        errors: Counter[str] = Counter()
        for op in self.history.snapshot():
            kind = op_kind(op.kind, op.topic, self.config.commit_topic)
            operations[f"{kind} {op.outcome}"] += 1
            if op.error:
                errors[f"{kind} {op.error}"] += 1
        return ClusterSummary(seed=self.config.seed, duration=self.config.duration,
                              wall_seconds=time.monotonic() - self.started, fault_kinds=self.config.faults,
                              plan=self.plan, faults=Counter(f.kind for f in self.history.faults),
                              operations=operations, errors=errors, check=result, incidents=self.incidents,
                              notes=self.history.notes)

    def _unrecovered(self, healed: float) -> list[str]:
        """The kinds of operation none of which, started after every fault healed, was acknowledged."""
        ops = self.history.snapshot()
        missing = []
        for kind in ("produce", "commit", "group-commit", "txn"):
            present = [op for op in ops if op_kind(op.kind, op.topic, self.config.commit_topic) == kind]
            if present and not any(op.outcome == "ok" and op.start >= healed for op in present):
                missing.append(kind)
        return missing

    def _check_recovery(self, healed: float) -> None:
        """Once every fault has healed the cluster serves again: each kind of operation started
        after that was acknowledged at least once."""
        for kind in self._unrecovered(healed):
            self.incidents.append(f"no {kind} started after every fault healed (at {healed:.1f}s) was acknowledged")

    def _watch_until(self, deadline: float) -> None:
        """Until `deadline`: restart any broker that exited on its own (an incident)."""
        while (left := deadline - time.monotonic()) > 0:
            self._ensure_running()
            time.sleep(min(0.5, left))  # pacing the watch

    def _ensure_running(self) -> None:
        """A broker no fault stopped that is not running is an incident: start it again."""
        cluster = self.cluster.cluster()
        for node_id in cluster.node_ids:
            with self._lock:
                if node_id in self.intended_down or cluster.alive(node_id):
                    continue
                self.intended_down.add(node_id)
            broker = cluster.broker(node_id)
            rc = broker.proc.poll() if broker.proc is not None else None
            self.incidents.append(f"broker {node_id} exited on its own (rc={rc}); log tail:\n{broker.log()[-1500:]}")
            t = self.history.now()
            try:
                broker.kill9()  # reaps it
                self._start(node_id)
            except Exception as exc:  # noqa: BLE001 - the run goes on without it (still marked down)
                self.incidents.append(f"broker {node_id} could not be started again: {exc!r}"[:2000])
                continue
            with self._lock:
                self.intended_down.discard(node_id)
            self.history.fault(FaultEvent(0, "crash", t, self.history.now(), f"broker {node_id} rc={rc}"))

    # -- faults ----------------------------------------------------------------------------------

    def _inject(self, fault: PlannedFault) -> None:
        """Run one planned fault (in its own thread); a fault that fails is an incident."""
        t = self.history.now()
        try:
            detail = getattr(self, "_fault_" + fault.kind.replace("-", "_"))(fault)
        except Exception as exc:  # noqa: BLE001 - the run goes on; the fault is an incident
            self.incidents.append(f"fault {fault.text()} failed: {exc!r}")
            return
        self.history.fault(FaultEvent(0, fault.kind, t, self.history.now(), f"{fault.text()}: {detail}"))
        self.log(f"  {t:7.2f}s {fault.kind} on {fault.target}: {detail}")

    def _down(self, node_id: int, stop: Callable[[], None], hold: float) -> str:
        """Stop broker `node_id` with `stop`, leave it down `hold` seconds, start it again."""
        with self._lock:
            self.intended_down.add(node_id)
        try:
            stop()
            time.sleep(hold)  # the broker stays down a while
            began = time.monotonic()
            self._start(node_id)
            return f"down {hold:.2f}s, started in {time.monotonic() - began:.2f}s"
        finally:
            with self._lock:
                self.intended_down.discard(node_id)

    def _start(self, node_id: int) -> None:
        """Start broker `node_id`, again while it exits because PostgreSQL is not there yet (as a
        process supervisor would: a broker that cannot join the cluster at start-up exits)."""
        broker = self.cluster.cluster().broker(node_id)
        deadline = time.monotonic() + 90
        while True:
            try:
                broker.start(60)
                return
            except AssertionError as exc:
                if "cannot join the cluster" not in str(exc) or time.monotonic() > deadline:
                    raise
                self.history.notes.append(f"broker {node_id} exited at start-up, PostgreSQL unreachable: started again")
                time.sleep(1.0)  # a supervisor's restart delay

    def _fault_kill(self, fault: PlannedFault) -> str:
        """kill -9, down `hold` seconds, started again."""
        return self._down(fault.target, lambda: self.cluster.cluster().kill9(fault.target), fault.hold)

    def _fault_term(self, fault: PlannedFault) -> str:
        """SIGTERM (a graceful handoff; exit code 0 expected), down `hold` seconds, started again."""
        codes: list[int] = []
        detail = self._down(fault.target, lambda: codes.append(self.cluster.cluster().terminate(fault.target, 30)),
                            fault.hold)
        if codes != [0]:
            self.incidents.append(f"SIGTERM of broker {fault.target}: exit code {codes}")
        return f"exit {codes[0] if codes else '?'}, {detail}"

    def _fault_stop(self, fault: PlannedFault) -> str:
        """SIGSTOP for `hold` seconds (past the lease or not), then SIGCONT."""
        cluster = self.cluster.cluster()
        cluster.sigstop(fault.target)
        try:
            time.sleep(fault.hold)  # frozen for a while
        finally:
            cluster.sigcont(fault.target)
        return f"frozen {fault.hold:.2f}s (lease {self.config.lease_ms} ms)"

    def _fault_pg_cut(self, fault: PlannedFault) -> str:
        """The broker's PostgreSQL connections blackholed for `hold` seconds."""
        proxy = self.cluster.cluster().proxy(fault.target)
        proxy.blackhole()
        try:
            time.sleep(fault.hold)  # cut off for a while
        finally:
            proxy.heal()
        return f"cut from PostgreSQL {fault.hold:.2f}s"

    def _fault_client_cut(self, fault: PlannedFault) -> str:
        """The broker's client (and peer) connections blackholed for `hold` seconds."""
        proxy = self.cluster.client_proxies[fault.target]
        proxy.blackhole()
        try:
            time.sleep(fault.hold)  # cut off for a while
        finally:
            proxy.heal()
        return f"cut from clients and brokers {fault.hold:.2f}s"

    def _fault_pg_restart(self, fault: PlannedFault) -> str:
        """PostgreSQL stopped (fast, or immediate: a crash), down `hold` seconds, started again."""
        began = time.monotonic()
        self.cluster.postgres.stop(fault.mode)  # type: ignore[arg-type]
        stopped = time.monotonic() - began
        time.sleep(fault.hold)  # PostgreSQL stays down a while
        self.cluster.postgres.start()
        return f"stop -m {fault.mode} in {stopped:.2f}s, down {fault.hold:.2f}s"

    def _fault_promote(self, fault: PlannedFault) -> str:
        """PostgreSQL failover: the primary's postmaster and backends killed -9, `hold` seconds
        later the synchronous standby promoted and every broker's proxy moved to it (a virtual IP
        moving; the multi-host URL's way is test_cluster_postgres_failover.py's)."""
        primary, standby = self.cluster.postgres, self.cluster.standby
        assert standby is not None, "promote needs a standby (ClusterChaosConfig.standby)"
        primary.kill9()
        time.sleep(fault.hold)  # no primary for a while
        began = time.monotonic()
        standby.promote()
        promoted = time.monotonic() - began
        for node_id in self.cluster.cluster().node_ids:
            self.cluster.cluster().proxy(node_id).retarget("127.0.0.1", standby.port)
        self.cluster.postgres, self.cluster.standby = standby, None
        self.cluster.retired.append(primary)
        return f"primary killed -9, standby promoted {fault.hold:.2f}s later (pg_ctl promote {promoted:.2f}s)"
