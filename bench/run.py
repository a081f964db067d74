"""Benchmark offsetd against Tansu, side by side in one run (``make bench``).

Each repetition starts each broker fresh (free port, empty data dir), runs the workload list
against it, and stops it. Broker order alternates between repetitions. The table shows the
best of N per broker and the ratio offsetd/Tansu; every raw run is written as JSON to
``bench/results/``. The exit status is non-zero if any start or workload failed.

    .venv/bin/python bench/run.py                       # every workload, both brokers
    .venv/bin/python bench/run.py --only tansu --messages 20000
    .venv/bin/python bench/run.py --repeat 3
    .venv/bin/python bench/run.py --workloads commit-throughput commit-latency
    .venv/bin/python bench/run.py --workloads abuse     # issue 16's reliability figures
    .venv/bin/python bench/run.py --workloads security  # issue 14: TLS, SASL, ACL costs
    .venv/bin/python bench/run.py --only offsetd --workloads kip848  # issue 22: KIP-848 vs classic
    .venv/bin/python bench/run.py --only offsetd --workloads share   # issue 23: share groups
    .venv/bin/python bench/run.py --list-workloads

``--workloads`` selects workloads by name (the ones they require are added); a workload that
does not apply to a broker (``offsets-load`` on Tansu) shows "n/a". ``abuse`` names the group
``abuse-garbage-storm-2k abuse-garbage-storm abuse-idle-rss abuse-disk-full``
(bench/abuse.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import signal
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    _REPO_ROOT = str(Path(__file__).resolve().parent.parent)
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path[0] = _REPO_ROOT  # don't let bench/*.py shadow top-level modules
    else:
        sys.path.insert(0, _REPO_ROOT)

import confluent_kafka  # noqa: E402

from bench.brokers import (  # noqa: E402
    DEFAULT_OFFSETD_CONFIG,
    BrokerLauncher,
    BrokerStartError,
    make_launcher,
)
from bench.report import (  # noqa: E402
    BrokerRun,
    WorkloadOutcome,
    aggregate,
    failures,
    format_table,
    format_value,
    write_json,
)
from bench.workload import BenchConfig, Workload, WorkloadFailed  # noqa: E402
from bench.workloads import core_workloads  # noqa: E402
from bench.abuse import GROUP, abuse_workloads  # noqa: E402
from bench.eos import eos_workloads  # noqa: E402
from bench import security  # noqa: E402
from bench import consumer_protocol  # noqa: E402
from bench import share_groups  # noqa: E402

#: Table columns; the ratio is the first over the second.
BROKERS = ["offsetd", "tansu"]
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def run_suite(launcher: BrokerLauncher, workloads: list[Workload], repetition: int) -> BrokerRun:
    """Start the broker, run every workload in order, stop the broker (always)."""
    run = BrokerRun(broker=launcher.name, repetition=repetition)
    tag = f"[{launcher.name} #{repetition + 1}]"
    if not any(wl.applies_to(launcher.name) for wl in workloads):
        run.outcomes = [WorkloadOutcome(w.name, "n/a", error=w.not_applicable_reason())
                        for w in workloads]  # fmt: skip
        print(f"{tag} nothing to run (selected workloads are n/a here)", flush=True)
        return run
    try:
        run.bootstrap = launcher.start()
    except BrokerStartError as exc:
        run.start_error = str(exc)
        run.outcomes = [WorkloadOutcome(w.name, "failed", error="broker did not start")
                        for w in workloads]  # fmt: skip
        print(f"{tag} broker start FAILED: {exc}", flush=True)
        return run
    try:
        print(f"{tag} started at {run.bootstrap}", flush=True)
        ok: set[str] = set()
        for wl in workloads:
            missing = [r for r in wl.requires if r not in ok]
            if not wl.applies_to(launcher.name):
                out = WorkloadOutcome(wl.name, "n/a", error=wl.not_applicable_reason())
            elif (status := launcher.exit_status()) is not None:
                out = WorkloadOutcome(wl.name, "failed", error=f"broker exited ({status})")
            elif missing:
                out = WorkloadOutcome(wl.name, "skipped", error=f"needs {', '.join(missing)}")
            else:
                out = _run_workload(wl, run.bootstrap, launcher.name, launcher.pid)
            run.outcomes.append(out)
            if out.status == "ok":
                ok.add(wl.name)
            print(f"{tag} {_describe(out)}", flush=True)
    finally:
        launcher.stop()
    if any(out.status == "failed" for out in run.outcomes) and launcher.last_log_tail:
        print(f"{tag} last lines of the broker's log:\n{launcher.last_log_tail}", flush=True)
    return run


def _run_workload(wl: Workload, bootstrap: str, broker_name: str, broker_pid: int) -> WorkloadOutcome:
    start = time.monotonic()
    try:
        if wl.wants_pid:
            metrics = wl.run(bootstrap, broker_name, broker_pid=broker_pid)
        else:
            metrics = wl.run(bootstrap, broker_name)
    except WorkloadFailed as exc:
        if exc.detail:
            print(exc.detail, file=sys.stderr, flush=True)
        return WorkloadOutcome(
            wl.name, "failed", error=str(exc), detail=exc.detail, wall_s=time.monotonic() - start
        )
    except Exception as exc:  # a harness or client bug: keep going, but show the traceback
        detail = traceback.format_exc()
        print(detail, file=sys.stderr, flush=True)
        return WorkloadOutcome(
            wl.name,
            "failed",
            error=f"{type(exc).__name__}: {exc}",
            detail=detail,
            wall_s=time.monotonic() - start,
        )
    return WorkloadOutcome(wl.name, "ok", metrics=metrics, wall_s=time.monotonic() - start)


def _describe(out: WorkloadOutcome) -> str:
    if out.status == "n/a":
        return f"{out.workload}: n/a ({out.error})"
    if out.status != "ok":
        return f"{out.workload}: {out.status.upper()}: {out.error}"
    figures = ", ".join(f"{format_value(m.value, m.unit)} {m.unit}" for m in out.metrics.values())
    return f"{out.workload}: ok ({out.wall_s:.1f} s){': ' + figures if figures else ''}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    defaults = BenchConfig()
    p = argparse.ArgumentParser(
        description="Run the same workloads against offsetd and Tansu and compare them."
    )
    p.add_argument("--only", choices=BROKERS, help="benchmark a single broker")
    p.add_argument("--workloads", nargs="+", metavar="NAME",
                   help="run only these workloads (space- or comma-separated; the workloads "
                        "they require are added); default: all, see --list-workloads")
    p.add_argument("--list-workloads", action="store_true",
                   help="print the workload names in run order and exit")
    p.add_argument("--messages", type=int, default=defaults.messages,
                   help=f"messages for produce/consume (default {defaults.messages:,})")
    p.add_argument("--kip848-scale", type=float, default=defaults.kip848_scale,
                   help="scale the KIP-848 workloads' member counts (cp-heartbeats, cp-load) and "
                        "cp-rebalance's records by this factor (default 1: the issue's sizes)")
    p.add_argument("--load-shape", metavar="GROUPSxTOPICSxPARTITIONS",
                   default=f"{defaults.load_groups}x{defaults.load_topics}x{defaults.load_partitions}",
                   help="offsets-load's data set: commit records for groups x topics x partitions "
                        "(default %(default)s; a million groups: 1000000x1x10)")
    p.add_argument("--repeat", type=int, default=1,
                   help="repetitions per broker; the table shows the best of N (default 1)")
    p.add_argument("--offsetd-config", type=Path, default=DEFAULT_OFFSETD_CONFIG,
                   help="server.properties for offsetd (default: config/server.properties)")
    p.add_argument("--results-dir", type=Path, default=RESULTS_DIR,
                   help="where the JSON results go (default: bench/results)")
    args = p.parse_args(argv)  # fmt: skip
    if args.messages < 1 or args.repeat < 1:
        p.error("--messages and --repeat must be positive")
    try:
        args.load_shape = tuple(int(n) for n in args.load_shape.lower().split("x"))
    except ValueError:
        args.load_shape = ()
    if len(args.load_shape) != 3 or min(args.load_shape) < 1:
        p.error("--load-shape wants three positive numbers, GROUPSxTOPICSxPARTITIONS (e.g. 1000000x1x10)")
    if args.workloads:
        names = [n for item in args.workloads for n in item.split(",") if n]
        groups = workload_groups(defaults)
        args.workloads = [m for n in names for m in groups.get(n, [n])]
        known = [w.name for w in default_workloads(defaults)] + list(groups)
        unknown = [n for n in args.workloads if n not in known]
        if unknown:
            p.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def default_workloads(cfg: BenchConfig) -> list[Workload]:
    """The suite, in run order: bench/workloads.py's, then each workload module's."""
    return [*core_workloads(cfg), *abuse_workloads(cfg), *eos_workloads(cfg), *security.security_workloads(cfg),
            *consumer_protocol.kip848_workloads(cfg), *share_groups.share_workloads(cfg)]


def workload_groups(cfg: BenchConfig) -> dict[str, list[str]]:
    """Names ``--workloads`` expands to several workloads (``abuse``: bench/abuse.py's,
    ``security``: bench/security.py's, ``kip848``: bench/consumer_protocol.py's, ``share``:
    bench/share_groups.py's)."""
    return {GROUP: [w.name for w in abuse_workloads(cfg)],
            security.GROUP: [w.name for w in security.security_workloads(cfg)],
            consumer_protocol.GROUP: [w.name for w in consumer_protocol.kip848_workloads(cfg)],
            share_groups.GROUP: [w.name for w in share_groups.share_workloads(cfg)]}


def select_workloads(workloads: list[Workload], names: list[str] | None) -> list[Workload]:
    """The named workloads plus, transitively, the ones they require, in suite order
    (``None``: all)."""
    if not names:
        return workloads
    by_name = {w.name: w for w in workloads}
    wanted: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo.extend(by_name[name].requires)
    return [w for w in workloads if w.name in wanted]


def environment(launchers: dict[str, BrokerLauncher]) -> dict[str, object]:
    """Versions and host facts recorded with the results."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "confluent_kafka": importlib.metadata.version("confluent-kafka"),
        "librdkafka": confluent_kafka.libversion()[0],
        "brokers": {name: _safe_version(lz) for name, lz in launchers.items()},
    }


def _safe_version(launcher: BrokerLauncher) -> str:
    try:
        return launcher.version()
    except Exception as exc:  # a version string is not worth failing the run for
        return f"unknown ({exc})"


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM/SIGHUP: unwind like Ctrl-C, so every ``finally`` stops its broker/children."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    try:
        return _main(args)
    except KeyboardInterrupt as exc:
        print(f"\ninterrupted ({exc or 'SIGINT'}); brokers stopped, no results written",
              file=sys.stderr)  # fmt: skip
        return 130


def _main(args: argparse.Namespace) -> int:
    groups, topics, partitions = args.load_shape
    cfg = BenchConfig(messages=args.messages, offsetd_config=str(args.offsetd_config),
                      kip848_scale=args.kip848_scale, load_groups=groups, load_topics=topics,
                      load_partitions=partitions)
    if args.list_workloads:
        for wl in default_workloads(cfg):
            notes = [f"requires {', '.join(wl.requires)}"] if wl.requires else []
            notes += [f"{', '.join(wl.brokers)} only"] if wl.brokers else []
            print(f"{wl.name}{'  (' + '; '.join(notes) + ')' if notes else ''}")
        for group, members in workload_groups(cfg).items():
            print(f"{group}  (group: {' '.join(members)})")
        return 0
    workloads = select_workloads(default_workloads(cfg), args.workloads)
    selected = [args.only] if args.only else BROKERS
    try:
        launchers = {name: make_launcher(name, args.offsetd_config) for name in selected}
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    print(
        f"offsetd bench: {', '.join(w.name for w in workloads)}; {cfg.messages:,} x "
        f"{cfg.message_size} B over {cfg.partitions} partitions; brokers: "
        f"{', '.join(selected)}; repeat {args.repeat}",
        flush=True,
    )
    runs: list[BrokerRun] = []
    for rep in range(args.repeat):
        order = selected if rep % 2 == 0 else list(reversed(selected))
        for name in order:
            runs.append(run_suite(make_launcher(name, args.offsetd_config), workloads, rep))

    rows = aggregate(runs, BROKERS, [w.name for w in workloads])
    print()
    print(format_table(rows, BROKERS, args.repeat))
    problems = failures(runs)
    if problems:
        print("\nFailures:")
        for line in problems:
            print(f"  {line}")
    path = write_json(
        args.results_dir,
        config={**asdict(cfg), "repeat": args.repeat, "only": args.only,
                "workloads": [w.name for w in workloads]},
        environment=environment(launchers),
        runs=runs,
        rows=rows,
        brokers=BROKERS,
    )
    print(f"\nresults: {path}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
