"""The cluster chaos harness in its bounded form (`make chaos-cluster` runs it for minutes): three
brokers on a PostgreSQL of their own, 30 s of idempotent producers, committers, classic and KIP-848
consumer groups and consume-transform-produce loops under a seeded schedule of faults, then the
history checker over everything. Seeds 2 and 3 between them draw every fault kind: kill -9,
SIGSTOP, SIGTERM, a broker cut from PostgreSQL, a broker cut from its clients, a PostgreSQL
restart; seed 5 adds a synchronous standby and its promotion after the primary's kill -9."""

from __future__ import annotations

from pathlib import Path

import pytest
from cluster_config import ClusterChaosConfig
from cluster_harness import ClusterHarness, plan_faults


def test_the_two_seeds_draw_every_fault_kind(tmp_path: Path) -> None:
    """make test's two seeds between them draw every fault kind (the schedule is the seed's alone)."""
    kinds = {fault.kind for seed in (2, 3) for fault in plan_faults(ClusterChaosConfig(run_dir=tmp_path, seed=seed))}
    assert kinds == {"kill", "stop", "term", "pg-cut", "client-cut", "pg-restart"}


STANDBY = {"standby": True, "faults": ("promote", "kill", "pg-cut", "client-cut")}


@pytest.mark.parametrize(("seed", "extra"), [(2, {}), (3, {}), (5, STANDBY)], ids=["seed2", "seed3", "seed5-standby"])
def test_cluster_chaos_loses_nothing_acknowledged(tmp_path: Path, seed: int, extra: dict) -> None:
    """30 s of workload under the seed's faults: no violation, no incident, every workload making
    progress. Seed 5 runs on a primary with a synchronous standby and promotes it once (the primary
    killed -9 6 s in, no primary for 5 s), beside broker kills and cuts."""
    config = ClusterChaosConfig(run_dir=tmp_path, duration=30.0, seed=seed, **extra)
    if extra:
        assert [f.kind for f in plan_faults(config)].count("promote") == 1
    with ClusterHarness(config, log=print) as harness:
        summary = harness.run()
    report = summary.text()
    print(report)
    assert summary.violations == 0, report
    assert not summary.incidents, report  # no broker exiting on its own, no stuck client, service back after the faults
    assert sum(n for kind, n in summary.faults.items() if kind != "crash") == len(summary.plan), report
    # The checks are not vacuous: every workload made progress.
    assert summary.count("produce", "ok") >= 1000, report
    assert summary.count("commit", "ok") >= 100 and summary.count("group-commit", "ok") >= 20, report
    assert summary.count("txn", "ok") >= 5 and summary.check.txn_records_read > 0, report
