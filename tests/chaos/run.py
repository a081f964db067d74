"""`make chaos`: the chaos harness at full length. Prints each round, then a Markdown summary table;
exits 1 when a check found a violation (lost, duplicated, never-sent or reordered data or commits).

    .venv/bin/python -m tests.chaos.run [--rounds 24] [--faults kill,stop,stall,diskfull] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import FAULT_KINDS, ChaosConfig, Harness  # noqa: E402


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.run", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--round-seconds", type=float, default=10.0)
    parser.add_argument("--faults", default=",".join(FAULT_KINDS),
                        help=f"comma-separated, some of {','.join(FAULT_KINDS)} (default: all)")
    parser.add_argument("--faults-per-round", type=int, default=2)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--committers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    parser.add_argument("--tmpfs-size", default=None,
                        help="size of the tmpfs for log.dirs with diskfull (default: 64m, or 3m a round beyond 20)")
    parser.add_argument("--diskfull-hold", default="1,3", help="min,max seconds the disk stays full")
    parser.add_argument("--out", type=Path, default=None,
                        help="run directory for ops.jsonl, broker.log, report.json (default: a new temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    run_dir = args.out or Path(tempfile.mkdtemp(prefix="offsetd-chaos-"))
    config = ChaosConfig(run_dir=run_dir, rounds=args.rounds, round_seconds=args.round_seconds,
                         faults=tuple(f for f in args.faults.split(",") if f),
                         faults_per_round=args.faults_per_round, producers=args.producers,
                         committers=args.committers, seed=seed,
                         tmpfs_size=args.tmpfs_size or f"{max(64, 3 * args.rounds)}m",
                         diskfull_hold=tuple(float(x) for x in args.diskfull_hold.split(",")))  # type: ignore[arg-type]
    print(f"chaos: {config.rounds} rounds of {config.round_seconds:.0f}s, faults {','.join(config.faults)}, "
          f"seed {seed}, run dir {run_dir}", flush=True)
    with Harness(config, log=lambda line: print(line, flush=True)) as harness:
        summary = harness.run()
    print()
    print(summary.text())
    (run_dir / "report.json").write_text(json.dumps(summary.as_json(), indent=2, default=str))
    print(f"\nop log: {run_dir / 'ops.jsonl'}; broker log: {run_dir / 'broker.log'}")
    return 0 if summary.violations == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
