"""Run one workload of the suite against an offsetd under cProfile and print where the broker's
time went (for a machine without py-spy; cProfile slows the broker, so its figures are not
the workload's).

    .venv/bin/python bench/profile_workload.py cp-heartbeats --kip848-scale 0.2 --top 30

The broker stops with SIGTERM (a clean stop), so cProfile writes its file; the file is kept
under ``bench/results/`` for ``python -m pstats``.
"""

from __future__ import annotations

import argparse
import io
import pstats
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    _REPO_ROOT = str(Path(__file__).resolve().parent.parent)
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path[0] = _REPO_ROOT
    else:
        sys.path.insert(0, _REPO_ROOT)

from bench.brokers import OffsetdBroker  # noqa: E402
from bench.run import RESULTS_DIR, default_workloads, select_workloads  # noqa: E402
from bench.workload import BenchConfig  # noqa: E402


class ProfiledOffsetd(OffsetdBroker):
    """offsetd's console script run by ``python -m cProfile -o <profile>``."""

    def __init__(self, profile: Path) -> None:
        super().__init__()
        self.profile = profile

    def command(self, port: int, data_dir: Path) -> list[str]:
        return [sys.executable, "-m", "cProfile", "-o", str(self.profile), *super().command(port, data_dir)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="One workload against offsetd under cProfile.")
    p.add_argument("workload", help="a workload name (bench/run.py --list-workloads); its requirements run too")
    p.add_argument("--kip848-scale", type=float, default=1.0)
    p.add_argument("--messages", type=int, default=BenchConfig().messages)
    p.add_argument("--top", type=int, default=30, help="functions to print, by own time and by cumulative")
    args = p.parse_args(argv)
    cfg = BenchConfig(messages=args.messages, kip848_scale=args.kip848_scale)
    workloads = select_workloads(default_workloads(cfg), [args.workload])
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    profile = RESULTS_DIR / f"profile-{args.workload}-{time.strftime('%Y%m%dT%H%M%S')}.prof"
    broker = ProfiledOffsetd(profile)
    broker.startup_timeout_s = 120
    bootstrap = broker.start()
    try:
        for wl in workloads:
            kwargs = {"broker_pid": broker.pid} if wl.wants_pid else {}
            metrics = wl.run(bootstrap, broker.name, **kwargs)
            for m in metrics.values():
                print(f"  {m.label}: {m.value:,.2f} {m.unit} (under cProfile)")
    finally:
        broker.stop_timeout_s = 120  # writing the profile takes a moment
        broker.stop()
    out = io.StringIO()
    stats = pstats.Stats(str(profile), stream=out)
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    print(out.getvalue())
    print(f"profile: {profile}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
