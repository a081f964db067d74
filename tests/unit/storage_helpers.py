"""Shared pieces of the storage unit tests (tests/unit/test_partition_log.py, test_cleaner.py):
a fake clock and a simulated kill -9 of a partition log's owner."""

from __future__ import annotations

import pytest

from offsetd.storage import PartitionLog

T0 = 1_700_000_000_000
HOUR = 3_600_000


class FakeClock:
    """Milliseconds that only move when the test says so."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def crash(log: PartitionLog) -> None:
    """Simulate kill -9 of the owner: drop the descriptors without flushing, sealing or snapshots."""
    for seg in log._segments:
        seg.forget_files()
    log._closed = True
