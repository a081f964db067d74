"""The soak's samples (one per interval: each broker's RSS, descriptors and CPU, the clients'
commit and probe latencies, the counts), the verdict that they stayed flat, and the plot."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from load import Interval

from offsetd.dev.proc_stats import cpu_s, open_fds, rss_mb

# What "flat" allows between the first samples after warm-up and the end of the run.
RSS_GROWTH = 0.15           # RSS may grow by 15 % ...
RSS_SLACK_MB = 32.0         # ... or 32 MB, whichever is larger
FD_SLACK = 64               # descriptors: the file pool's churn, sockets mid-reconnect
LATENCY_FACTOR = 2.0        # p99 of the last third ≤ 2× the first third's ...
LATENCY_SLACK_MS = 10.0     # ... + 10 ms


def _proc_cpu_s(pid: int) -> float:
    return cpu_s(pid) or 0.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank) of `values`, 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


@dataclass
class Sample:
    """One interval of the run."""
    minute: float
    rss_mb: dict[str, float]
    fds: dict[str, int]
    cpu_pct: dict[str, float]
    commit_p50_ms: float
    commit_p99_ms: float
    probe_p99_ms: float
    probe_max_ms: float
    counts: dict[str, int] = field(default_factory=dict)


class Sampler:
    """Reads the brokers' /proc entries and the clients' interval into a Sample."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._cpu = {name: _proc_cpu_s(pid) for name, pid in pids.items()}

    def sample(self, minute: float, interval_s: float, clients: Interval) -> Sample:
        cpu = {name: _proc_cpu_s(pid) for name, pid in self.pids.items()}
        pct = {name: round(100 * (cpu[name] - self._cpu[name]) / interval_s, 1) for name in self.pids}
        self._cpu = cpu
        return Sample(
            minute=round(minute, 2),
            rss_mb={name: round(rss_mb(pid), 1) for name, pid in self.pids.items()},
            fds={name: open_fds(pid) for name, pid in self.pids.items()},
            cpu_pct=pct,
            commit_p50_ms=round(percentile(clients.commit_ms, 50), 2),
            commit_p99_ms=round(percentile(clients.commit_ms, 99), 2),
            probe_p99_ms=round(percentile(clients.probe_ms, 99), 2),
            probe_max_ms=round(max(clients.probe_ms, default=0.0), 2),
            counts=dict(clients.counts))


def verdict(samples: list[Sample], warmup: int = 1, latency: bool = True) -> list[str]:
    """What did not stay flat or did not make progress (empty: the run passed). `latency=False`
    leaves out the latency trend (a run of seconds on a busy box measures the box)."""
    problems: list[str] = []
    steady = samples[warmup:]
    if len(steady) < 3:
        return [f"only {len(steady)} samples after warm-up; need 3"]
    third = max(1, len(steady) // 3)
    for name in steady[0].rss_mb:
        first, last = steady[0].rss_mb[name], steady[-1].rss_mb[name]
        if last > max(first * (1 + RSS_GROWTH), first + RSS_SLACK_MB):
            problems.append(f"{name}: RSS grew from {first} MB to {last} MB")
        fds = [s.fds[name] for s in steady]
        if fds[-1] > fds[0] + FD_SLACK:
            problems.append(f"{name}: open descriptors grew from {fds[0]} to {fds[-1]}")
    for label in ("commit_p99_ms", "probe_p99_ms") if latency else ():
        head = statistics.median(getattr(s, label) for s in steady[:third])
        tail = statistics.median(getattr(s, label) for s in steady[-third:])
        if tail > head * LATENCY_FACTOR + LATENCY_SLACK_MS:
            problems.append(f"{label}: {head} ms at the start, {tail} ms at the end")
    for s in steady:
        for needed in ("commit", "produced", "consumed", "join", "idle-request"):
            if not s.counts.get(needed):
                problems.append(f"minute {s.minute}: no {needed}")
        for bad in ("produce-error", "connect-error", "probe-lost", "api-versions-error"):
            if s.counts.get(bad):
                problems.append(f"minute {s.minute}: {s.counts[bad]} × {bad}")
    return problems


def plot(samples: list[Sample], title: str, path: Path) -> None:
    """Four panels over the run's minutes: RSS, descriptors, commit p99, probe p99."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5), sharex=True)
    minutes = [s.minute for s in samples]
    for name in samples[0].rss_mb:
        axes[0][0].plot(minutes, [s.rss_mb[name] for s in samples], marker=".", label=name)
        axes[0][1].plot(minutes, [s.fds[name] for s in samples], marker=".", label=name)
    axes[1][0].plot(minutes, [s.commit_p50_ms for s in samples], marker=".", label="p50")
    axes[1][0].plot(minutes, [s.commit_p99_ms for s in samples], marker=".", label="p99")
    axes[1][1].plot(minutes, [s.probe_p99_ms for s in samples], marker=".", label="p99")
    axes[1][1].plot(minutes, [s.probe_max_ms for s in samples], marker=".", label="max")
    for ax, label in zip(sum(axes.tolist(), []), ("broker RSS (MB)", "open descriptors",
                                                   "sync commit latency (ms)", "ApiVersions probe (ms)")):
        ax.set_title(label, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in axes[1]:
        ax.set_xlabel("minute")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
