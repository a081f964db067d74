"""SIGTERM of a group's coordinator, again and again, under a synchronous committer: each graceful
handoff leaves the committer at most a second without an acknowledgement (the README's goal), on
the README's settings (a 3 s lease, the default heartbeat). The restarted broker taking the group
back is a handoff too (the interim owner releases it), timed the same way."""

from __future__ import annotations

import threading
import time

from broker_process import wait_for
from integration.cluster_helpers import GroupHistory, commit_forever, committed, coordinator_of, wait_settled
from integration.clients import create_topic

HANDOFFS = 5
GOAL_S = 1.0


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
    assert max(gap for _, gap in gaps) <= GOAL_S, gaps
    assert max(moves_back) <= GOAL_S, moves_back
    assert committed(cluster.bootstrap, history.group) == history.acked[-1][1]
