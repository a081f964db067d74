"""server/log_limiter.py: a flood of one kind of log line becomes a few lines and a count."""

from __future__ import annotations

import logging

import pytest

from offsetd.server.log_limiter import LogLimiter


def test_lines_beyond_the_rate_are_counted_and_summed_up_the_next_second(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.2]
    limiter = LogLimiter(logging.getLogger("test.limiter"), per_second=2, what="connections closed",
                         clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="test.limiter"):
        for i in range(5):
            limiter.log(logging.WARNING, "closing %d", i)
        now[0] = 103.5
        limiter.log(logging.WARNING, "closing %d", 5)
    assert [r.getMessage() for r in caplog.records] == [
        "closing 0", "closing 1",
        "... and 3 more connections closed in the last 3 s (not logged one by one)",
        "closing 5"]


def test_a_level_that_is_off_costs_nothing_and_counts_nothing(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(logging.getLogger("test.limiter.off"), per_second=1, what="x", clock=lambda: 1.0)
    with caplog.at_level(logging.WARNING, logger="test.limiter.off"):
        for _ in range(3):
            limiter.log(logging.INFO, "quiet")
        limiter.log(logging.WARNING, "loud")
    assert [r.getMessage() for r in caplog.records] == ["loud"]
