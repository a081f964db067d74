"""Burrow's evaluation rules (reference peers-and-user-asks.md §3.2) on scripted commit histories
with fake times: one test per rule, the gates before them, the group roll-up and the renderings."""

from __future__ import annotations

import json

import pytest

from offsetd.admin.health import (
    Commit,
    GroupHealth,
    PartitionHealth,
    Status,
    build_window,
    evaluate_group,
    evaluate_partition,
    format_health,
    health_json,
)

S = 1000  # ms per second


def window(*rows: tuple[int, float, int | None]) -> list[Commit]:
    """Commits from (offset, seconds, lag at commit) rows."""
    return [Commit(offset, int(t * S), lag) for offset, t, lag in rows]


def grade(commits: list[Commit], current_lag: int, now_s: float, samples: tuple[int, ...] = (), **kw) -> Status:
    return evaluate_partition(commits, current_lag, list(samples), int(now_s * S), **kw).status


# A window of ten commits spanning 9 s, lag falling: a healthy consumer.
HEALTHY = window(*((100 + 10 * i, i, 50 - 5 * i) for i in range(10)))


def test_healthy_consumer_is_ok_and_complete():
    result = evaluate_partition(HEALTHY, 5, [], 9 * S + 500)
    assert result.status is Status.OK
    assert result.complete == 1.0
    assert result.current_lag == 5


def test_no_lag_now_is_ok_even_after_it_stopped_committing():
    """Gate: current lag <= allowed-lag -> OK, whatever the window says (a caught-up consumer that
    stopped committing because nothing new arrives is fine)."""
    stalled_long_ago = window(*((7, i, 3) for i in range(10)))
    assert grade(stalled_long_ago, current_lag=0, now_s=10_000) is Status.OK
    assert grade(stalled_long_ago, current_lag=4, now_s=10_000, allowed_lag=4) is Status.OK
    assert grade(stalled_long_ago, current_lag=5, now_s=10_000, allowed_lag=4) is Status.STOP


def test_stop_when_silence_exceeds_the_window_span():
    """Rule STOP: now - last commit > last - first commit. The window spans 9 s; 9 s of silence is
    not yet a stop, 9.001 s is."""
    assert grade(HEALTHY, current_lag=5, now_s=18) is Status.OK
    assert grade(HEALTHY, current_lag=5, now_s=18.001) is Status.STOP


def test_stop_is_suppressed_when_a_recent_leo_sample_shows_the_consumer_caught_up():
    """Rule STOP needs every recent LEO sample above the last committed offset (190)."""
    assert grade(HEALTHY, 5, now_s=60, samples=(195, 192, 191)) is Status.STOP
    assert grade(HEALTHY, 5, now_s=60, samples=(195, 190, 191)) is Status.OK


def test_stop_is_checked_before_a_lag_of_zero_in_the_window():
    """Burrow checks STOP first: an old window with zero lag in it does not hide a consumer that
    stopped while lag built up."""
    old = window((10, 0, 0), (20, 1, 0), (30, 2, 0))
    assert grade(old, current_lag=100, now_s=3600) is Status.STOP


def test_rewind_without_recovery():
    """Rule REWIND: a commit below its predecessor that the consumer has not regained since."""
    commits = window((100, 0, 10), (110, 1, 10), (120, 2, 10), (90, 3, 40), (100, 4, 35))
    assert grade(commits, current_lag=35, now_s=4.5) is Status.REWIND


def test_rewind_then_recovery_is_no_longer_a_rewind():
    """Once a later commit regains the pre-rewind offset (120) the rewind is over; the partition
    is graded on the rest (lag fell, so OK)."""
    commits = window((100, 0, 10), (110, 1, 10), (120, 2, 10), (90, 3, 40), (121, 4, 9))
    assert grade(commits, current_lag=9, now_s=4.5) is Status.OK
    short_of_it = window((100, 0, 10), (110, 1, 10), (120, 2, 10), (90, 3, 40), (119, 4, 11))
    assert grade(short_of_it, current_lag=11, now_s=4.5) is Status.REWIND


def test_stall_when_the_offset_never_moves_with_lag_at_every_commit():
    """Rule STALL: lag above allowed-lag at every commit and the same offset every time."""
    commits = window(*((500, i, 20 + i) for i in range(10)))
    assert grade(commits, current_lag=30, now_s=9.5) is Status.STALL


def test_warn_when_offsets_advance_but_lag_never_decreases():
    """Rule WARN: lag above allowed-lag at every commit, offsets moving, lag never going down."""
    commits = window(*((100 + i, i, 50 + (i // 2)) for i in range(10)))
    assert grade(commits, current_lag=60, now_s=9.5) is Status.WARN


def test_ok_when_lag_decreases_somewhere():
    commits = window((100, 0, 50), (110, 1, 55), (120, 2, 52), (130, 3, 60))
    assert grade(commits, current_lag=60, now_s=3.5) is Status.OK


def test_lag_within_allowed_at_one_commit_skips_stall_and_warn():
    """Rule 3 applies only if the lag was above allowed-lag at every commit: one caught-up commit
    (lag 0, or <= allowed_lag) makes a stalled-looking window OK."""
    stalled = [(500, i, 20) for i in range(1, 10)]
    assert grade(window((500, 0, 0), *stalled), current_lag=20, now_s=9.5) is Status.OK
    assert grade(window((500, 0, 3), *stalled), current_lag=20, now_s=9.5, allowed_lag=3) is Status.OK
    assert grade(window((500, 0, 4), *stalled), current_lag=20, now_s=9.5, allowed_lag=3) is Status.STALL


def test_unknown_lag_counts_as_not_caught_up_and_is_skipped_when_comparing():
    """A commit whose lag is unknown (None) does not count as caught up (rule 3 gate) and is
    skipped by the lag-decrease comparison."""
    commits = window((100, 0, 50), (110, 1, None), (120, 2, 50), (130, 3, None), (140, 4, 51))
    assert grade(commits, current_lag=60, now_s=4.5) is Status.WARN
    assert grade(window((100, 0, 50), (110, 1, None), (120, 2, 40)), current_lag=60, now_s=2.5) is Status.OK


def test_not_enough_commits_for_minimum_complete_is_ok():
    """minimum-complete: with 3 of 10 slots filled (0.3) a stalled partition is only judged when
    the threshold is at most 0.3."""
    commits = window((5, 0, 10), (5, 1, 11), (5, 2, 12))
    result = evaluate_partition(commits, 12, [], 2500, minimum_complete=0.5)
    assert (result.status, result.complete) == (Status.OK, 0.3)
    assert grade(commits, current_lag=12, now_s=2.5, minimum_complete=0.3) is Status.STALL


def test_empty_window_is_ok_with_nothing_complete():
    result = evaluate_partition([], 100, [], 0)
    assert (result.status, result.complete) == (Status.OK, 0.0)


def test_only_the_last_intervals_commits_are_judged():
    """The window is the last `intervals` commits: an old rewind slides out of it."""
    commits = window((100, 0, 10), (50, 1, 60), *((51 + i, 2 + i, 60 + i) for i in range(10)))
    assert grade(commits, current_lag=80, now_s=12, intervals=12) is Status.REWIND
    assert grade(commits, current_lag=80, now_s=12, intervals=10) is Status.WARN


def test_build_window_coalesces_commits_closer_than_min_distance_and_keeps_the_last():
    """Burrow's storage: a commit less than min-distance after the last slot's timestamp
    overwrites that slot's offset and lag, keeping its timestamp; the ring holds `intervals`."""
    commits = [Commit(o, t, o * 10) for o, t in [(1, 0), (2, 400), (3, 999), (4, 1000), (5, 2500), (6, 3400)]]
    assert build_window(commits, intervals=10, min_distance_ms=1000) == [
        Commit(3, 0, 30), Commit(4, 1000, 40), Commit(6, 2500, 60)]
    assert build_window(commits, intervals=2, min_distance_ms=0) == [Commit(5, 2500, 50), Commit(6, 3400, 60)]


def _p(topic: str, partition: int, lag: int, status: Status, complete: float = 1.0) -> PartitionHealth:
    return PartitionHealth(topic, partition, 100, 100 + lag, lag, status, complete)


@pytest.mark.parametrize("worst, group_status", [
    (Status.OK, Status.OK), (Status.WARN, Status.WARN), (Status.STOP, Status.ERR),
    (Status.STALL, Status.ERR), (Status.REWIND, Status.ERR)])
def test_group_status_is_the_worst_partition_with_stop_stall_rewind_as_err(worst, group_status):
    g = evaluate_group("g", [_p("t", 0, 1, Status.OK), _p("t", 1, 2, worst), _p("t", 2, 0, Status.OK)])
    assert g.status is group_status


def test_group_totals_maxlag_and_completeness():
    parts = [_p("a", 0, 5, Status.OK), _p("a", 1, 9, Status.WARN, 0.5), _p("b", 0, 9, Status.OK),
             _p("b", 1, 0, Status.OK, 0.2)]
    g = evaluate_group("g", parts)
    assert (g.status, g.total_lag, g.complete) == (Status.WARN, 23, 0.5)
    assert (g.max_lag.topic, g.max_lag.partition) == ("a", 1)  # first of the largest


def test_group_without_committed_partitions_is_notfound():
    g = evaluate_group("ghost", [])
    assert (g.status, g.partitions, g.total_lag, g.max_lag) == (Status.NOTFOUND, (), 0, None)


def test_format_health_kafka_style_table():
    g = evaluate_group("orders-app", [
        PartitionHealth("orders", 0, 1200, 1250, 50, Status.WARN, 1.0),
        PartitionHealth("orders", 1, 900, None, None, Status.OK, 0.4)])
    assert format_health([g, GroupHealth("gone", Status.NOTFOUND)]).split("\n") == [
        "",
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             STATUS",
        "orders-app      orders          0          1200            1250            50              WARN",
        "orders-app      orders          1          900             -               -               OK",
        "",
        "GROUP           STATUS   TOTAL-LAG       MAX-LAG-TOPIC   MAX-LAG-PARTITION MAX-LAG         PARTITIONS COMPLETE",
        "orders-app      WARN     50              orders          0                 50              2          0.50",
        "",
        "GROUP           STATUS   TOTAL-LAG       MAX-LAG-TOPIC   MAX-LAG-PARTITION MAX-LAG         PARTITIONS COMPLETE",
        "gone            NOTFOUND -               -               -                 -               0          0.00",
        "",
    ]


def test_format_health_reports_an_evaluation_error():
    text = format_health([GroupHealth("g", Status.NOTFOUND, error="Broker transport failure")])
    assert "Error: Health of consumer group 'g' could not be evaluated: Broker transport failure" in text.split("\n")


def test_health_json_round_trips_through_json():
    p = PartitionHealth("t", 3, 10, 15, 5, Status.STALL, 0.2, (Commit(10, 1000, 5), Commit(10, 2000, None)))
    [doc] = json.loads(json.dumps(health_json([evaluate_group("g", [p])])))
    assert doc["group"] == "g" and doc["status"] == "ERR" and doc["error"] is None
    assert (doc["total_lag"], doc["partition_count"], doc["complete"]) == (5, 1, 0.0)
    assert doc["max_lag"]["partition"] == 3
    assert doc["partitions"] == [{
        "topic": "t", "partition": 3, "current_offset": 10, "log_end_offset": 15, "lag": 5,
        "status": "STALL", "complete": 0.2,
        "commits": [{"offset": 10, "timestamp": 1000, "lag": 5}, {"offset": 10, "timestamp": 2000, "lag": None}],
    }]
