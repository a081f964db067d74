"""Lag, right by construction (pure functions). Offset lag = log end offset (the latest stable
offset, so transaction markers are not lag) minus the committed offset, where a commit below the
log start offset counts from the log start (records that no longer exist are not lag) and a
commit past the end is no lag. Time lag = age of the first unconsumed record, from that record's
own timestamp, not from interpolated samples. No commit: no lag (None, printed `-`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogBounds:
    """Log start offset and log end offset of one partition (end = the latest stable offset,
    read with read_committed isolation, so open or aborted transactions never count)."""

    start: int
    end: int


def first_unconsumed(committed: int, bounds: LogBounds) -> int:
    """The offset the group would read next: the commit, moved up to the log start if the
    records below it were deleted, and never past the log end."""
    return min(max(committed, bounds.start), bounds.end)


def offset_lag(committed: int | None, bounds: LogBounds | None) -> int | None:
    """Records the group has not consumed yet; None without a commit or log offsets."""
    if committed is None or bounds is None:
        return None
    return bounds.end - first_unconsumed(committed, bounds)


def record_needed(committed: int | None, bounds: LogBounds | None) -> int | None:
    """The offset whose record timestamp the time lag needs, or None when it needs none
    (no commit, no log offsets, or nothing left to consume)."""
    if not offset_lag(committed, bounds):
        return None
    assert committed is not None and bounds is not None
    return first_unconsumed(committed, bounds)


def time_lag_ms(committed: int | None, bounds: LogBounds | None, record_timestamp_ms: int | None,
                now_ms: int) -> int | None:
    """Age of the first unconsumed record: 0 when caught up, None without a commit or when that
    record's timestamp could not be read, never negative (producer clocks may run ahead)."""
    lag = offset_lag(committed, bounds)
    if lag is None:
        return None
    if lag == 0:
        return 0
    if record_timestamp_ms is None or record_timestamp_ms < 0:
        return None
    return max(0, now_ms - record_timestamp_ms)
