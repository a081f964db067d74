"""What a cluster chaos run does (`make chaos-cluster`, tests/chaos/test_chaos_cluster.py): how
long, which faults, how much of each workload. The defaults are the bounded form `make test` runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness import ChaosConfig

# Broker faults take one broker; `pg-restart` takes PostgreSQL; `promote` (the primary killed -9,
# the synchronous standby promoted, the brokers' proxies moved to it, as a virtual IP would move)
# needs `standby` and happens once a run at most.
BROKER_FAULTS = ("kill", "stop", "term", "pg-cut", "client-cut")
CLUSTER_FAULT_KINDS = (*BROKER_FAULTS, "pg-restart")
STANDBY_FAULT_KINDS = ("promote",)


@dataclass
class ClusterChaosConfig(ChaosConfig):
    """A ChaosConfig (topics, producers, committers, seed) plus the cluster's: brokers, duration,
    the fault schedule and the group and transaction workloads."""

    duration: float = 30.0                # seconds of workload, faults included
    brokers: int = 3
    faults: tuple[str, ...] = CLUSTER_FAULT_KINDS
    fault_gap: tuple[float, float] = (1.0, 4.0)   # seconds between the starts of two faults
    fault_hold: tuple[float, float] = (0.5, 6.0)  # how long a broker is paused, cut off or down
    max_concurrent: int = 2               # faults in force at once (one broker is always spared)
    recovery_seconds: float = 10.0        # the workload runs this long after the last fault healed
    standby: bool = False                 # a synchronous standby for `promote`
    partitions: int = 4
    producers: int = 2
    producer_rate: float = 40.0
    committers: int = 2
    commit_interval: float = 0.1
    classic_groups: int = 1               # consumer groups on the classic protocol ...
    consumer_groups: int = 1              # ... and on KIP-848's (group.protocol=consumer)
    members: int = 2                      # consumers per group
    group_commit_interval: float = 0.3    # seconds between a group member's synchronous commits
    txn_loops: int = 2                    # consume-transform-produce loops (one group, one transactional.id each)
    txn_records: int = 20                 # at most this many inputs per transaction
    txn_abort_ratio: float = 0.2          # transactions aborted on purpose
    output_topic: str = "chaos-output"
    eos_group: str = "chaos-eos"
    lease_ms: int = 3000                  # broker.session.timeout.ms
    client_debug: str = ""                # librdkafka `debug` contexts of the group members (e.g. "cgrp"),
                                          # in their logs (client-<name>.log in the run directory)
    overrides: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Faults are known kinds (`promote` only with `standby`)."""
        known = CLUSTER_FAULT_KINDS + (STANDBY_FAULT_KINDS if self.standby else ())
        unknown = set(self.faults) - set(known)
        if unknown or not self.faults:
            raise ValueError(f"faults must be some of {','.join(known)}; got {','.join(self.faults)}")
