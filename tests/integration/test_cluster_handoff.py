"""SIGTERM of a group's coordinator, again and again, under a synchronous committer: a graceful
handoff leaves the committer well under a second without an acknowledgement (the README's goal;
the median of the waits, and every one within 1.5 s on a busy box), on
the README's settings (a 3 s lease, the default heartbeat). The restarted broker taking the group
back is a handoff too (the interim owner releases it), timed the same way."""

from __future__ import annotations

import statistics
import threading
import time

from broker_process import wait_for
from integration.cluster_helpers import GroupHistory, commit_forever, committed, coordinator_of, wait_settled
from integration.clients import create_topic

HANDOFFS = 5
# The README's goal is a second. Measured on the 2-core box: 0.2-0.4 s each, one move-back of
# 1.2 s once and of 1.55 s once while `make test` ran four workers. The code before the fix waited
# 0.64-0.69 s typically and 1.2-1.9 s at worst: the median tells the two apart; the bound on the
# worst wait leaves room for a starved CPU.
MEDIAN_GOAL_S = 0.6
WORST_S = 2.0


def longest_wait(history: GroupHistory, start: float, end: float) -> float:
    """The longest time from `start` to `end` the committer waited for an acknowledgement: the
    largest gap between consecutive acknowledgements (or `start` and the first)."""
    times = [start] + [ts for ts, _ in history.acked if start < ts <= end]
    return max(b - a for a, b in zip(times, times[1:]))


def test_sigterm_of_the_coordinator_leaves_commits_unacknowledged_under_a_second(pg_dsn, cluster_factory) -> None:
    cluster = cluster_factory(pg_dsn, overrides={"broker.session.timeout.ms": "3000",
                                                  "offsets.topic.num.partitions": "12"})
    wait_settled(cluster, 3)
    create_topic(cluster.bootstrap, "hist", 1)
    history = GroupHistory("handoff-repeated")
    stop = threading.Event()
    committer = threading.Thread(target=commit_forever, args=(cluster.bootstrap, history, stop, "confluent"))
    committer.start()
    gaps: list[tuple[int, float]] = []
    moves_back: list[float] = []  # the restarted broker joins, the interim owner hands the group back
    try:
        wait_for(lambda: len(history.acked) >= 10, timeout=20, message="commits before the first handoff")
        for _ in range(HANDOFFS):
            owner = coordinator_of(cluster.bootstrap, history.group)
            stopped_at = time.monotonic()
            assert cluster.terminate(owner) == 0
            stopped = time.monotonic()
            wait_for(lambda: history.acked[-1][0] > stopped, timeout=10, message="a commit after the handoff")
            gaps.append((owner, longest_wait(history, stopped_at, history.acked[-1][0])))
            restarted_at = time.monotonic()
            cluster.restart(owner)
            wait_settled(cluster, 3)  # the group moves back to its preferred owner: a handoff too
            acked = len(history.acked)
            wait_for(lambda: len(history.acked) >= acked + 5, timeout=10, message="commits before the next handoff")
            moves_back.append(longest_wait(history, restarted_at, history.acked[-1][0]))
    finally:
        stop.set()
        committer.join(30)
    print("\nlongest wait for a commit's acknowledgement across SIGTERM of the coordinator:",
          ", ".join(f"{gap:.2f} s (broker {node})" for node, gap in gaps))
    print("longest wait while the group moved back to the restarted broker:", ", ".join(f"{w:.2f} s" for w in moves_back))
    waits = [gap for _, gap in gaps] + moves_back
    assert statistics.median(waits) <= MEDIAN_GOAL_S, (gaps, moves_back)
    assert max(waits) <= WORST_S, (gaps, moves_back)
    assert committed(cluster.bootstrap, history.group) == history.acked[-1][1]
