"""Issue 24's targets in one run: every workload they name, side by side with Tansu (and the
cluster beside the single node), then one table of target, figures, spread and verdict.

    .venv/bin/python bench/targets.py [--repeat 3]          # make bench-targets; ~15 min

It runs the existing harnesses, each into a results directory of its own, and reads their JSON
summaries: `bench/run.py` (async commits, 4 committing processes, transactions, produce, consume),
`bench/cluster.py` (100 groups; the cluster's produce and 100 groups) and `bench/lag_scrape.py`
(its printed CPU per scrape). A figure is the median of the repetitions; the spread is their
min-max, as the README reports them. The targets are data (TARGETS), shared with the unit test.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent

SINGLE_WORKLOADS = ["commit-throughput", "commit-latency-4p", "eos", "produce", "consume"]
CLUSTER_WORKLOADS = ["commit-100-groups", "produce"]

Values = dict[tuple[str, str], list[float]]
"""(broker, metric) -> the repetitions' values, from both harnesses' summaries; the cluster
harness's brokers are prefixed `cluster:` (its single node and Tansu are runs of their own)."""


@dataclass(frozen=True)
class Target:
    """One of issue 24's targets: what it asks, and how a run's values meet it."""

    name: str
    asks: str
    figures: Callable[[Values], tuple[str, bool | None]]  # the figures as printed, met (None: no data)


def _median(values: Values, broker: str, metric: str) -> float | None:
    got = values.get((broker, metric))
    return statistics.median(got) if got else None


def _spread(values: Values, broker: str, metric: str, fmt: str) -> str:
    got = values.get((broker, metric)) or []
    if not got:
        return "not run"
    med = format(statistics.median(got), fmt)
    return med if len(got) == 1 else f"{med} ({format(min(got), fmt)}-{format(max(got), fmt)})"


def ratio_target(metric: str, at_least: float, fmt: str, ours: str = "offsetd", theirs: str = "tansu",
                 lower_is_better: bool = False) -> Callable[[Values], tuple[str, bool | None]]:
    """ours / theirs (of medians) at least `at_least` (for a latency: theirs / ours)."""
    def figures(values: Values) -> tuple[str, bool | None]:
        a, b = _median(values, ours, metric), _median(values, theirs, metric)
        shown = f"{_spread(values, ours, metric, fmt)} against {_spread(values, theirs, metric, fmt)}"
        if a is None or b is None or not a or not b:
            return shown, None
        ratio = b / a if lower_is_better else a / b
        return f"{shown}: {ratio:.2f}x", ratio >= at_least
    return figures


def bound_target(metric: str, broker: str, at_most: float, fmt: str) -> Callable[[Values], tuple[str, bool | None]]:
    """The broker's median at most `at_most`."""
    def figures(values: Values) -> tuple[str, bool | None]:
        got = _median(values, broker, metric)
        return _spread(values, broker, metric, fmt), None if got is None else got <= at_most
    return figures


def both(*checks: Callable[[Values], tuple[str, bool | None]]) -> Callable[[Values], tuple[str, bool | None]]:
    """Every check met (None when one has no data)."""
    def figures(values: Values) -> tuple[str, bool | None]:
        results = [check(values) for check in checks]
        verdicts = [met for _, met in results]
        return "; ".join(shown for shown, _ in results), None if None in verdicts else all(verdicts)
    return figures


TARGETS = [
    Target("100 groups committing synchronously", ">= 1.2x Tansu (offsets/s)",
           ratio_target("group_offsets_per_s", 1.2, ",.0f", "cluster:offsetd", "cluster:tansu")),
    Target("4 processes committing synchronously", "p50 <= Tansu's, p99 <= 2 ms",
           both(ratio_target("commit4_p50_ms", 1.0, ".2f", lower_is_better=True),
                bound_target("commit4_p99_ms", "offsetd", 2.0, ".2f"))),
    Target("transactions", ">= 1.5x Tansu (txn/s)", ratio_target("eos_txn_per_s", 1.5, ",.0f")),
    Target("broker CPU per transaction", "<= 1 ms", bound_target("eos_broker_cpu_ms_per_txn", "offsetd", 1.0, ".2f")),
    Target("async commits", ">= 2x Tansu (commits/s)", ratio_target("commits_per_s", 2.0, ",.0f")),
    Target("produce", ">= 1x Tansu (MB/s)", ratio_target("produce_mb_per_s", 1.0, ".1f")),
    Target("consume", ">= 1x Tansu (MB/s; one Python consumer is the ceiling)",
           ratio_target("consume_mb_per_s", 1.0, ".1f")),
    Target("cluster produce", ">= 0.8x the single node (MB/s)",
           ratio_target("produce_mb_per_s", 0.8, ".1f", "cluster:offsetd-cluster", "cluster:offsetd")),
    Target("cluster: 100 groups committing", ">= 1x the single node (offsets/s)",
           ratio_target("group_offsets_per_s", 1.0, ",.0f", "cluster:offsetd-cluster", "cluster:offsetd")),
    Target("lag scrape, 2,000 groups x 10 partitions", "<= 100 ms (CPU per scrape)",
           bound_target("scrape_cpu_ms", "offsetd", 100.0, ".0f")),
]


def summary_values(summary: list[dict], prefix: str = "") -> Values:
    """A harness's JSON summary as Values (each broker's successful repetitions)."""
    values: Values = {}
    for row in summary:
        for broker, cell in row.items():
            if isinstance(cell, dict) and cell.get("values"):
                values[(prefix + broker, row["metric"])] = list(cell["values"])
    return values


def lag_values(output: str) -> Values:
    """bench/lag_scrape.py's printed CPU per scrape (its median), as the offsetd value."""
    found = re.search(r"scrape CPU ms:\s+min (\d+), median ([\d.]+)", output)
    return {("offsetd", "scrape_cpu_ms"): [float(found.group(2))]} if found else {}


def verdict_table(values: Values) -> str:
    """The targets as a Markdown table, as docs/performance.md keeps it."""
    lines = ["| target | asks | figures (median (min-max)) | met? |", "|---|---|---|---|"]
    for target in TARGETS:
        shown, met = target.figures(values)
        verdict = "no data" if met is None else "yes" if met else "no"
        lines.append(f"| {target.name} | {target.asks} | {shown} | {verdict} |")
    return "\n".join(lines)


def _harness(args: list[str], results: Path) -> list[dict]:
    """Run a harness into `results`; its summary (empty when it wrote none)."""
    subprocess.run([sys.executable, *args, "--results-dir", str(results)], cwd=ROOT, check=False)
    files = sorted(results.glob("bench-*.json"))
    return json.loads(files[-1].read_text())["summary"] if files else []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3, help="repetitions of each harness's workloads")
    args = p.parse_args(argv)
    values: Values = {}
    with tempfile.TemporaryDirectory(prefix="offsetd-targets-") as tmp:
        single, cluster = Path(tmp, "single"), Path(tmp, "cluster")
        single.mkdir()
        cluster.mkdir()
        values.update(summary_values(_harness(["bench/run.py", "--workloads", *SINGLE_WORKLOADS,
                                                "--repeat", str(args.repeat)], single)))
        values.update(summary_values(_harness(["bench/cluster.py", "--only", "offsetd", "tansu", "offsetd-cluster",
                                                "--workloads", *CLUSTER_WORKLOADS, "--repeat", str(args.repeat)],
                                               cluster), "cluster:"))
    lag = subprocess.run([sys.executable, "bench/lag_scrape.py"], cwd=ROOT, capture_output=True, text=True, check=False)
    print(lag.stdout, end="")
    values.update(lag_values(lag.stdout))
    print("\nissue 24's targets (this run):\n" + verdict_table(values))
    return 0


if __name__ == "__main__":
    sys.exit(main())
