"""The soak in its bounded form (`make soak` runs it for 30 minutes a mode): 200 connections,
20 groups of two members joining, committing and leaving, produce and consume, 45 s against one
broker and against three brokers on PostgreSQL; RSS and descriptors stay flat, every interval
makes progress, no request fails that should not."""

from __future__ import annotations

from pathlib import Path

import pytest
from load import LoadConfig
from run import soak


@pytest.mark.parametrize("mode", ["single", "cluster"])
def test_bounded_soak_stays_flat(tmp_path: Path, mode: str) -> None:
    config = LoadConfig(bootstrap=[], connections=200, groups=20, produce_per_s=300, lifetime_s=(8.0, 20.0))
    samples, problems = soak(mode, 0.75, 9.0, config, tmp_path, latency=False)
    assert not problems, problems
    assert len(samples) == 5
    steady = samples[1:]
    # The workload ran as configured: commits every second from most members, groups rejoining,
    # records moving both ways, the idle connections asking.
    assert all(s.counts["commit"] >= 100 for s in steady), [s.counts for s in steady]
    assert sum(s.counts.get("leave", 0) for s in samples) >= 10
    assert all(s.counts["produced"] >= 1500 and s.counts["consumed"] >= 1000 for s in steady)
    assert all(s.counts["idle-request"] >= 100 for s in steady)
    assert (tmp_path / f"{mode}.png").stat().st_size > 10_000
