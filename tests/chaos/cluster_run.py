"""`make chaos-cluster`: the cluster chaos harness at full length, one run per seed. Prints each
run's fault schedule and faults as they happen, then a Markdown summary table; exits 1 when a check
found a violation or a run had an incident (a broker exiting on its own, a fault not recovered from).

    .venv/bin/python -m tests.chaos.cluster_run [--seeds 1,2] [--duration 300] [--faults kill,stop,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_config import CLUSTER_FAULT_KINDS, STANDBY_FAULT_KINDS, ClusterChaosConfig  # noqa: E402
from cluster_harness import ClusterHarness  # noqa: E402


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.cluster_run", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=None, help="comma-separated seeds, one run each (default: one from the clock)")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of workload per run (default 300)")
    parser.add_argument("--faults", default="",
                        help=f"comma-separated, some of {','.join(CLUSTER_FAULT_KINDS + STANDBY_FAULT_KINDS)} "
                             "(default: all; promote needs --standby)")
    parser.add_argument("--fault-gap", default="1,4", help="min,max seconds between the starts of two faults")
    parser.add_argument("--fault-hold", default="0.5,6", help="min,max seconds a fault lasts")
    parser.add_argument("--max-concurrent", type=int, default=2, help="faults in force at once")
    parser.add_argument("--client-debug", default="",
                        help="librdkafka debug contexts of the group members (e.g. cgrp), in their client-<name>.log")
    parser.add_argument("--standby", action="store_true", help="a synchronous standby and the promote fault (once a run)")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for each run's ops.jsonl, broker logs and report.json (default: a new temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """One run per seed; exit status 1 if any found a violation or an incident."""
    args = parse(argv)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [int(time.time()) % 100000]
    out = args.out or Path(tempfile.mkdtemp(prefix="offsetd-chaos-cluster-"))
    failed: list[int] = []
    for seed in seeds:
        run_dir = out / f"seed-{seed}"
        config = ClusterChaosConfig(run_dir=run_dir, duration=args.duration, seed=seed, standby=args.standby,
                                    faults=tuple(f for f in args.faults.split(",") if f) or (
                                        CLUSTER_FAULT_KINDS + (STANDBY_FAULT_KINDS if args.standby else ())),
                                    fault_gap=tuple(float(x) for x in args.fault_gap.split(",")),  # type: ignore[arg-type]
                                    fault_hold=tuple(float(x) for x in args.fault_hold.split(",")),  # type: ignore[arg-type]
                                    max_concurrent=args.max_concurrent, client_debug=args.client_debug)
        print(f"chaos-cluster: seed {seed}, {config.duration:.0f}s, faults {','.join(config.faults)}, "
              f"run dir {run_dir}", flush=True)
        with ClusterHarness(config, log=lambda line: print(line, flush=True)) as harness:
            summary = harness.run()
        print()
        print(summary.text(), flush=True)
        (run_dir / "report.json").write_text(json.dumps(
            {"seed": seed, "duration": config.duration, "wall_seconds": summary.wall_seconds,
             "plan": [f.text() for f in summary.plan], "faults": dict(summary.faults),
             "operations": dict(summary.operations), "errors": dict(summary.errors),
             "check": vars(summary.check), "incidents": summary.incidents, "notes": summary.notes}, indent=2))
        print(f"\nop log: {run_dir / 'ops.jsonl'}; broker logs: {run_dir / 'brokers'}\n", flush=True)
        if summary.violations or summary.incidents:
            failed.append(seed)
    print(f"chaos-cluster: {len(seeds) - len(failed)} of {len(seeds)} seed(s) clean"
          + (f"; failed: {','.join(map(str, failed))}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
