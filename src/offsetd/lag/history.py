"""A group's lag over time, rebuilt from what the logs already hold (sans-IO): the group's commits
read back from `__consumer_offsets`, and each data partition's log end *as of* a past moment, which
is the first offset whose record timestamp is >= that moment (ListOffsets by timestamp; "none"
means nothing was produced since, so the end then is the end now). Nothing is sampled or stored.

Three steps, with the I/O between them done by the caller (the broker's logs or a Kafka cluster):

    plan = HistoryPlan(commits, since_ms, now_ms)
    ends = {tp: await offsets_for_times(tp, plan.end_times(tp)) for tp in plan.partitions}
    plan.set_ends(ends, bounds_now)                 # bounds_now: LogBounds of each partition today
    stamps = {tp: await timestamps(tp, plan.record_offsets(tp)) for tp in plan.partitions}
    series = plan.series(stamps)                   # JSON-ready: times, per-partition lag / time lag

Every series shares one time axis of at most `points` instants (evenly spaced from the first
commit in the window to now), so the charts stay light however many commits the log holds.
The lag and time lag at an instant use lag.compute exactly as the live numbers do.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterable, Iterator

from .compute import LogBounds, first_unconsumed, offset_lag, time_lag_ms

TopicPartition = tuple[str, int]
MAX_POINTS = 600


class CommitHistory:
    """One group's offset commits per partition, in log order, as `__consumer_offsets` holds them;
    an offset tombstone (delete or expiry) forgets the partition's earlier commits, a group
    tombstone forgets everything (what a restarted coordinator would know)."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, list[tuple[int, int]]] = {}  # tp -> [(timestamp_ms, offset)]

    def commit(self, topic: str, partition: int, offset: int, timestamp_ms: int) -> None:
        self.partitions.setdefault((topic, partition), []).append((timestamp_ms, offset))

    def delete(self, topic: str, partition: int) -> None:
        self.partitions.pop((topic, partition), None)

    def delete_group(self) -> None:
        self.partitions.clear()

    def count(self) -> int:
        return sum(len(c) for c in self.partitions.values())


def sample_times(start_ms: int, now_ms: int, points: int) -> list[int]:
    """`points` instants evenly spaced from start to now, both included (fewer for a short span)."""
    points = max(points, 2)
    span = max(now_ms - start_ms, 0)
    if span < points:
        return list(range(start_ms, now_ms + 1)) if span else [now_ms]
    return [start_ms + span * i // (points - 1) for i in range(points)]


def downsample(commits: list[tuple[int, int]], start_ms: int, end_ms: int, points: int) -> list[tuple[int, int]]:
    """At most ~`points` commits of a time-ordered list, the last of each of `points` equal time
    buckets (a commit plot keeps its shape: the offset each bucket ended on)."""
    if len(commits) <= points:
        return list(commits)
    width = max((end_ms - start_ms) / points, 1e-9)
    kept: dict[int, tuple[int, int]] = {}
    for commit in commits:
        kept[int((commit[0] - start_ms) / width)] = commit
    return list(kept.values())


class HistoryPlan:
    """Works out which log ends and record timestamps a group's history needs, then computes the
    series from the answers (see the module docstring for the order of the calls)."""

    def __init__(self, commits: CommitHistory, since_ms: int, now_ms: int, points: int = MAX_POINTS,
                 extra_times: dict[TopicPartition, Iterable[int]] | None = None) -> None:
        """`extra_times`: more instants whose log end the caller wants (the health window's
        commit times); `ends_at` answers them after `set_ends`."""
        self.since_ms, self.now_ms = since_ms, now_ms
        # Commit timestamps follow log order; a client-set timestamp may step back: keep them monotone.
        self.commits: dict[TopicPartition, list[tuple[int, int]]] = {}
        for tp, rows in sorted(commits.partitions.items()):
            monotone, latest = [], None
            for ts, offset in rows:
                latest = ts if latest is None or ts > latest else latest
                monotone.append((latest, offset))
            self.commits[tp] = monotone
        self.partitions: list[TopicPartition] = list(self.commits)
        in_window = [rows[0][0] for rows in self.commits.values() if rows]
        first = max(since_ms, min(in_window, default=now_ms))
        self.times = sample_times(min(first, now_ms), now_ms, points)
        self.points = points
        self._extra = {tp: sorted(set(times)) for tp, times in (extra_times or {}).items()}
        self._end_times: dict[TopicPartition, list[int]] = {}
        self._ends: dict[TopicPartition, dict[int, int]] = {}
        self._at: dict[TopicPartition, list[tuple[int | None, LogBounds | None, int | None, int | None]]] = {}
        self._records: dict[TopicPartition, list[int]] = {}

    def end_times(self, tp: TopicPartition) -> list[int]:
        """The instants whose log end this partition's series need (sorted, unique)."""
        times = self._end_times.get(tp)
        if times is None:
            extra = self._extra.get(tp)
            times = self._end_times[tp] = sorted(set(self.times).union(extra)) if extra else self.times
        return times

    def committed_at(self, tp: TopicPartition, t: int) -> int | None:
        """The offset the group had committed at instant t (None: no commit yet)."""
        rows = self.commits[tp]
        i = bisect_right(rows, (t, float("inf")))
        return rows[i - 1][1] if i else None

    def set_ends(self, answers: dict[TopicPartition, list[int | None]],
                 bounds_now: dict[TopicPartition, LogBounds | None]) -> None:
        """The log ends asked for: `answers[tp]` matches `end_times(tp)`, each the first offset
        whose timestamp is >= the instant (None: no such record, so the end is today's end)."""
        for tp in self.partitions:
            self.set_partition_ends(tp, answers.get(tp, []), bounds_now.get(tp))

    def set_partition_ends(self, tp: TopicPartition, answer: list[int | None], bounds: LogBounds | None) -> None:
        """`set_ends` for one partition (a caller pausing between partitions calls this)."""
        ends: dict[int, int] = {}
        if bounds is not None:
            for t, offset in zip(self.end_times(tp), answer):
                ends[t] = bounds.end if offset is None else min(offset, bounds.end)
        self._ends[tp] = ends
        # Per instant: the commit then, the log bounds then (records deleted since were there
        # then), the lag then and the offset whose timestamp its time lag needs.
        rows, i, committed, at, needed = self.commits[tp], 0, None, [], set()
        last: tuple[Any, ...] = (object(),)
        for t in self.times:
            while i < len(rows) and rows[i][0] <= t:
                committed = rows[i][1]
                i += 1
            end = ends.get(t)
            if last[0] != (committed, end):  # idle stretches repeat the previous instant
                then = None if end is None or bounds is None else LogBounds(min(bounds.start, end), end)
                lag = offset_lag(committed, then)
                record = first_unconsumed(committed, then) if lag else None  # type: ignore[arg-type]
                last = ((committed, end), (committed, then, lag, record))
                needed.add(record)
            at.append(last[1])
        self._at[tp] = at
        needed.discard(None)
        self._records[tp] = sorted(needed)  # type: ignore[type-var]

    def ends_at(self, tp: TopicPartition, t: int) -> int | None:
        """The partition's log end at instant t (after `set_ends`; None: unknown)."""
        return self._ends.get(tp, {}).get(t)

    def record_offsets(self, tp: TopicPartition) -> list[int]:
        """Offsets whose record timestamps the time-lag series needs (sorted, unique; after `set_ends`)."""
        return self._records[tp]

    def series(self, timestamps: dict[TopicPartition, list[int | None]]) -> dict[str, Any]:
        """The charts' data: `times`, per partition the committed offset, log end, lag and time lag
        at each instant (null where unknown or before the first commit) and its commits (at most
        `points`), plus the group's total lag and worst time lag at each instant."""
        out: dict[str, Any] = {}
        for _ in self.series_steps(timestamps, out):
            pass
        return out

    def series_steps(self, timestamps: dict[TopicPartition, list[int | None]], out: dict[str, Any]) -> Iterator[None]:
        """`series` as a cooperative generator filling `out`, pausing (yield) after each partition."""
        n = len(self.times)
        total: list[int | None] = [None] * n
        worst: list[int | None] = [None] * n
        out.update({"since_ms": self.since_ms, "now_ms": self.now_ms, "times": self.times, "partitions": [],
                    "total_lag": total, "max_time_lag_ms": worst})
        for tp in self.partitions:
            stamp = dict(zip(self.record_offsets(tp), timestamps.get(tp, ())))
            committed, ends, lags, time_lags = [], [], [], []
            for i, (t, (c, bounds, lag, record)) in enumerate(zip(self.times, self._at[tp])):
                tl = None
                if lag is not None:
                    tl = time_lag_ms(c, bounds, stamp.get(record), t)
                    total[i] = (total[i] or 0) + lag
                    if tl is not None and (worst[i] is None or tl > worst[i]):  # type: ignore[operator]
                        worst[i] = tl
                committed.append(c)
                ends.append(bounds.end if bounds else None)
                lags.append(lag)
                time_lags.append(tl)
            shown = [r for r in self.commits[tp] if self.times[0] <= r[0] <= self.now_ms]
            out["partitions"].append({
                "topic": tp[0], "partition": tp[1], "committed": committed, "log_end": ends, "lag": lags,
                "time_lag_ms": time_lags, "commit_count": len(shown),
                "commits": [list(r) for r in downsample(shown, self.times[0], self.now_ms, self.points)],
            })
            yield
