"""lag/history.py: a group's lag over time from scripted commits and log ends (no I/O)."""

from offsetd.lag.compute import LogBounds
from offsetd.lag.history import CommitHistory, HistoryPlan, downsample, sample_times

TP = ("orders", 0)


def plan_for(commits: CommitHistory, ends_at, bounds: LogBounds, since=0, now=100, points=11, record_ts=None):
    """Run the three steps with `ends_at(t)` as the log's ListOffsets-by-time answer."""
    plan = HistoryPlan(commits, since, now, points)
    plan.set_ends({tp: [ends_at(t) for t in plan.end_times(tp)] for tp in plan.partitions},
                  {tp: bounds for tp in plan.partitions})
    stamps = {tp: [(record_ts or (lambda o: o))(o) for o in plan.record_offsets(tp)] for tp in plan.partitions}
    return plan, plan.series(stamps)


def test_sample_times_span_start_to_now():
    assert sample_times(0, 100, 11) == list(range(0, 101, 10))
    assert sample_times(5, 5, 600) == [5]
    assert len(sample_times(0, 10**9, 600)) == 600


def test_lag_at_each_instant_is_end_then_minus_commit_then():
    # One record per ms (offset == timestamp); the group commits offset 10 at t=20 and 90 at t=95.
    history = CommitHistory()
    history.commit(*TP, 10, 20)
    history.commit(*TP, 90, 95)
    plan, series = plan_for(history, lambda t: t if t < 100 else None, LogBounds(0, 100), points=9)
    assert series["times"][0] == 20  # the axis starts at the first commit
    part = series["partitions"][0]
    for t, c, end, lag, tl in zip(series["times"], part["committed"], part["log_end"], part["lag"],
                                  part["time_lag_ms"]):
        assert c == (90 if t >= 95 else 10)
        assert end == min(t, 100)
        assert lag == max(end - c, 0)
        assert tl == (t - c if lag else 0)  # the first unconsumed record (offset c) has timestamp c
    assert series["total_lag"] == part["lag"]
    assert series["max_time_lag_ms"] == part["time_lag_ms"]


def test_no_commit_yet_means_no_value_and_tombstone_forgets():
    history = CommitHistory()
    history.commit(*TP, 5, 50)
    history.commit("other", 0, 1, 10)
    history.delete("other", 0)
    _, series = plan_for(history, lambda t: None, LogBounds(0, 60))
    assert [p["topic"] for p in series["partitions"]] == ["orders"]
    history.delete_group()
    assert history.count() == 0


def test_commit_below_log_start_counts_from_the_start():
    history = CommitHistory()
    history.commit(*TP, 0, 0)
    _, series = plan_for(history, lambda t: None, LogBounds(40, 60))
    assert set(series["partitions"][0]["lag"]) == {20}


def test_commits_are_downsampled_keeping_each_buckets_last():
    rows = [(t, t * 2) for t in range(10_000)]
    kept = downsample(rows, 0, 10_000, 600)
    assert len(kept) <= 600 and kept[-1] == rows[-1]
    assert kept == sorted(kept)
    history = CommitHistory()
    for t, o in rows:
        history.commit(*TP, o, t)
    plan, series = plan_for(history, lambda t: None, LogBounds(0, 20_000), since=0, now=10_000, points=600)
    part = series["partitions"][0]
    assert len(series["times"]) == 600 and len(part["commits"]) <= 600 and part["commit_count"] == 10_000


def test_out_of_order_commit_timestamps_stay_monotone():
    history = CommitHistory()
    history.commit(*TP, 1, 50)
    history.commit(*TP, 2, 40)  # a client-set timestamp stepping back: still the later commit
    plan = HistoryPlan(history, 0, 100, 5)
    assert plan.committed_at(TP, 100) == 2
    assert plan.committed_at(TP, 49) is None


def test_offsets_log_records_become_the_groups_commit_history():
    """metrics/history.read_commits: other groups skipped, tombstones forget, a transaction's
    commits count only once its COMMIT marker is read (an ABORT drops them)."""
    from offsetd.metrics.history import read_commits
    from offsetd.records.log_walker import ControlMarker
    from offsetd.records.offset_commit_value import OffsetCommitValue
    from offsetd.records.offsets import GroupMetadataKey, OffsetCommitKey, encode_key, encode_value

    def commit(offset, topic="t", partition=0, group="g", ts=-1):
        return (encode_key(OffsetCommitKey(group, topic, partition)),
                encode_value(OffsetCommitValue(offset, commit_timestamp=ts)))

    records = [
        (0, 100, *commit(1), -1),
        (1, 101, *commit(50, group="other"), -1),
        (2, 102, *commit(2, ts=90), -1),              # the commit's own timestamp wins over the record's
        (3, 103, *commit(3, partition=1), -1),
        (4, 104, encode_key(OffsetCommitKey("g", "t", 1)), None, -1),  # offset deleted
        (5, 105, *commit(70), 7),                     # transactional, aborted below
        (6, 106, *commit(80), 8),                     # transactional, committed below
        (7, 107, ControlMarker.ABORT, None, 7),
        (8, 108, ControlMarker.COMMIT, None, 8),
        (9, 109, *commit(90), 9),                     # transactional, still open
    ]
    history, pending = CommitHistory(), {}
    read_commits(records, "g", history, pending)
    assert history.partitions == {("t", 0): [(100, 1), (90, 2), (106, 80)]}
    assert list(pending) == [9]
    read_commits([(10, 110, encode_key(GroupMetadataKey("g")), None, -1)], "g", history, pending)
    assert history.partitions == {}
